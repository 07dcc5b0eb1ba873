//! `[committee]`: the members' sizes and training, shared by the AF loop, the audit's learned
//! detectors and `af ablate`; and the names members go by.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;
use super::is_default;
use super::precision::Precision;

/// A committee member's name, as configs, metrics and the member registry (af-nn) spell it.
///
/// A name rather than an enum: the registry is open (a new member is one file in af-nn, and a
/// test may register its own), so af-core cannot list the members. Configs are checked against
/// the registry once, when they are loaded (`af_pipeline::load_config`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemberName(String);

impl MemberName {
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MemberName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for MemberName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

/// SWAG's committee, the default full phase of the schedule.
pub const SWAG_COMMITTEE: [&str; 4] = ["mlp", "bow", "cnn", "pos-lstm"];

/// The names of `names`, as member names.
pub fn member_names(names: &[&str]) -> Vec<MemberName> {
    names.iter().map(|n| MemberName::new(*n)).collect()
}

/// The joint head's name in metrics and configs.
pub const JOINT_HEAD: &str = "joint";

/// The committee's sizes and training; defaults are the paper's where it gives them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct CommitteeConfig {
    /// A joint head over the members' concatenated representations.
    pub joint: bool,
    /// Word (and POS) embedding size of the text members.
    pub embedding: i64,
    /// Embedding size of the noun-phrase/ending indicator.
    pub indicator_embedding: i64,
    pub mlp_hidden: i64,
    /// Alpha-dropout of the feature MLP (SELU keeps its self-normalisation under it).
    pub mlp_dropout: f64,
    pub cnn_widths: Vec<i64>,
    pub cnn_filters: i64,
    /// Hidden units per direction of the POS BiLSTM.
    pub lstm_hidden: i64,
    /// Words the POS BiLSTM sees as themselves; every other token is its POS tag.
    pub pos_words: usize,
    /// Hash buckets for the word bigrams of the n-gram member.
    pub ngram_buckets: i64,
    /// The joint head's hidden layer.
    pub joint_hidden: i64,
    /// Dropout on the text members' representations and the joint head.
    pub dropout: f64,
    /// Vocabulary of the text members: the most frequent words of the pool, at most this many.
    pub max_vocab: usize,
    /// At most this many epochs per AF iteration ...
    pub epochs: usize,
    /// ... stopping when the heads' mean accuracy on a validation slice of the training items
    /// (this share) stops improving; the best epoch's weights are kept. 0: no validation.
    pub validation_share: f64,
    /// Items per training step, each with its k+1 options.
    pub batch_items: usize,
    pub learning_rate: f64,
    pub clip_norm: f64,
    /// Candidates per forward pass when scoring the pool: see [`ScoreBatch`].
    #[serde(skip_serializing_if = "is_default")]
    pub score_batch: ScoreBatch,
    /// A candidate (or an audited option) longer than this many tokens keeps its last this-many:
    /// memory stays bounded by the batch, whatever one row holds. Rows cut are counted.
    pub max_tokens: usize,
    /// Arithmetic of scoring (training is always fp32): see [`Precision`].
    #[serde(skip_serializing_if = "is_default")]
    pub precision: Precision,
    /// Per-member settings, `[committee.member.NAME]`: each member reads its own table (its keys
    /// are documented beside its code in af-nn), which overlays the flat keys above
    /// (`cnn-filters` and the like, the older spelling, still the committee-wide default).
    #[serde(skip_serializing_if = "is_default")]
    pub member: BTreeMap<String, toml::Table>,
}

impl Default for CommitteeConfig {
    fn default() -> Self {
        Self {
            joint: true,
            embedding: 100,
            indicator_embedding: 16,
            mlp_hidden: 1024,
            mlp_dropout: 0.2,
            cnn_widths: vec![2, 3, 4, 5],
            cnn_filters: 128,
            lstm_hidden: 200,
            pos_words: 100,
            ngram_buckets: 100_000,
            joint_hidden: 512,
            dropout: 0.2,
            max_vocab: 30_000,
            epochs: 3,
            validation_share: 0.1,
            batch_items: 64,
            learning_rate: 1e-3,
            clip_norm: 1.0,
            score_batch: ScoreBatch::Auto,
            max_tokens: 256,
            precision: Precision::Auto,
            member: BTreeMap::new(),
        }
    }
}

impl CommitteeConfig {
    /// Checks what serde cannot; the message names the key. A member's own settings
    /// (mlp-hidden, cnn-widths, [committee.member.NAME], ...) are checked by the member, when the
    /// config is loaded against the registry (af-nn).
    pub fn validate(&self) -> Result<(), String> {
        if self.embedding < 1 || self.indicator_embedding < 1 || self.joint_hidden < 1 {
            return Err(
                "[committee] embedding, indicator-embedding and joint-hidden must be positive"
                    .into(),
            );
        }
        if self.max_tokens == 0 || self.max_tokens > i16::MAX as usize {
            return Err(format!("[committee] max-tokens = {}: between 1 and {} (lengths are stored as 16-bit integers)", self.max_tokens, i16::MAX));
        }
        if self.epochs == 0 || self.batch_items == 0 || self.max_vocab < 10 {
            return Err(
                "[committee] epochs and batch-items must be positive, max-vocab at least 10".into(),
            );
        }
        if !(0.0..1.0).contains(&self.dropout) || !(0.0..0.5).contains(&self.validation_share) {
            return Err(
                "[committee] needs 0 <= dropout < 1 and 0 <= validation-share < 0.5".into(),
            );
        }
        Ok(())
    }

    /// The section as the filter stage's and the cross-matrix's fingerprints record it. Every
    /// key changes scores or training; `score-batch` too where it is set, since which candidates
    /// share a pass on the device can move the last bits of a score (`auto`'s number is the
    /// device's, and the device is not recorded).
    pub fn fingerprint(&self) -> serde_json::Value {
        let Self {
            joint,
            embedding,
            indicator_embedding,
            mlp_hidden,
            mlp_dropout,
            cnn_widths,
            cnn_filters,
            lstm_hidden,
            pos_words,
            ngram_buckets,
            joint_hidden,
            dropout,
            max_vocab,
            epochs,
            validation_share,
            batch_items,
            learning_rate,
            clip_norm,
            score_batch,
            max_tokens,
            precision,
            member,
        } = self;
        let d = Self::default();
        Fingerprint::default()
            .key("joint", joint)
            .key("embedding", embedding)
            .key("indicator-embedding", indicator_embedding)
            .key("mlp-hidden", mlp_hidden)
            .key("mlp-dropout", mlp_dropout)
            .key("cnn-widths", cnn_widths)
            .key("cnn-filters", cnn_filters)
            .key("lstm-hidden", lstm_hidden)
            .key("pos-words", pos_words)
            .key("ngram-buckets", ngram_buckets)
            .key("joint-hidden", joint_hidden)
            .key("dropout", dropout)
            .key("max-vocab", max_vocab)
            .key("epochs", epochs)
            .key("validation-share", validation_share)
            .key("batch-items", batch_items)
            .key("learning-rate", learning_rate)
            .key("clip-norm", clip_norm)
            .later("score-batch", score_batch, &d.score_batch)
            .key("max-tokens", max_tokens)
            .later("precision", precision, &d.precision)
            .later("member", member, &d.member)
            .finish()
    }
}

/// How many candidates one scoring pass holds: `"auto"` (the default) or a number.
///
/// A pass's activations grow with candidates x tokens, and on the CPU they are the whole of a
/// stage's memory: 8,192 candidates of 32 tokens through SWAG's committee peaked at 4.2 GB, where
/// 512 peaked under 2 GB and scored faster (caches; docs/benchmarks.md). A GPU wants large
/// passes to fill it. So `auto` is [`ScoreBatch::AUTO_GPU`] on a GPU and [`ScoreBatch::AUTO_CPU`]
/// on the CPU. Not written into configs when `auto`: the number is the device's, not the run's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScoreBatch {
    #[default]
    Auto,
    Candidates(usize),
}

impl ScoreBatch {
    pub const AUTO_GPU: usize = 8192;
    pub const AUTO_CPU: usize = 512;

    pub fn is_auto(&self) -> bool {
        *self == ScoreBatch::Auto
    }

    /// The candidates per pass on a device that is (or is not) a GPU.
    pub fn candidates_on(self, gpu: bool) -> usize {
        match self {
            ScoreBatch::Candidates(n) => n,
            ScoreBatch::Auto if gpu => Self::AUTO_GPU,
            ScoreBatch::Auto => Self::AUTO_CPU,
        }
    }
}

impl Serialize for ScoreBatch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ScoreBatch::Auto => s.serialize_str("auto"),
            ScoreBatch::Candidates(n) => s.serialize_u64(*n as u64),
        }
    }
}

impl<'de> Deserialize<'de> for ScoreBatch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ScoreBatch;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"auto\" or a positive number of candidates")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ScoreBatch, E> {
                match v {
                    "auto" => Ok(ScoreBatch::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ScoreBatch, E> {
                match usize::try_from(v) {
                    Ok(n) if n > 0 => Ok(ScoreBatch::Candidates(n)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Unsigned(v), &self)),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ScoreBatch, E> {
                u64::try_from(v)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
                    .and_then(|v| self.visit_u64(v))
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{checked, Config};
    use std::path::Path;

    #[test]
    fn score_batch_is_auto_or_a_positive_number() {
        let auto = checked("").unwrap().committee.score_batch;
        assert_eq!(
            (auto.candidates_on(false), auto.candidates_on(true)),
            (ScoreBatch::AUTO_CPU, ScoreBatch::AUTO_GPU)
        );
        let c = checked("[committee]\nscore-batch = \"auto\"\n").unwrap();
        assert_eq!(c.committee.score_batch, ScoreBatch::Auto);
        // `auto` is neither written nor fingerprinted (the number is the device's), a number is.
        assert!(!toml::to_string(&c.committee)
            .unwrap()
            .contains("score-batch"));
        assert!(c.committee.fingerprint().get("score-batch").is_none());
        let c = checked("[committee]\nscore-batch = 300\n").unwrap();
        assert_eq!(c.committee.score_batch.candidates_on(true), 300);
        assert!(toml::to_string(&c.committee)
            .unwrap()
            .contains("score-batch = 300"));
        assert_eq!(c.committee.fingerprint()["score-batch"], 300);
        for bad in ["\"fast\"", "-3", "0"] {
            let err = Config::parse(
                &format!("[committee]\nscore-batch = {bad}\n"),
                Path::new("c.toml"),
            )
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("score-batch") || err.contains("auto"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn sizes_and_token_limits_are_checked() {
        for (text, says) in [
            ("[committee]\nembedding = 0\n", "must be positive"),
            ("[committee]\nmax-tokens = 40000\n", "max-tokens = 40000"),
            ("[committee]\nmax-vocab = 5\n", "max-vocab at least 10"),
            ("[committee]\ndropout = 1.0\n", "0 <= dropout < 1"),
        ] {
            let err = checked(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
