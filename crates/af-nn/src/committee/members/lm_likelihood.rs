//! `lm-likelihood`: a small head over how likely a pretrained causal LM (SmolLM2-135M by
//! default, [`crate::causal_lm`]) finds each candidate after its item's context, so that AF can
//! prefer distractors an LM finds as likely as the gold (issue 42). The caller (af-pipeline's
//! `lm_likelihood`) scores every candidate of the pool once per run, as `af eval` scores an
//! option (the context and the second sentence's start as context, a space and the ending as
//! continuation, lm-evaluation-harness's log-likelihood), caches the scores in the run
//! directory and attaches [`features`] of them to the table; only the head trains.
//!
//! The features compare a candidate with the other candidates of its item
//! (docs/decisions/440-lm-likelihood-member.md, 486-the-member-reads-the-ending-alone-too.md):
//! the summed log-probability (lm-eval's `acc` score), the same per character of the ending
//! (`acc_norm`'s) and per token, the ending's log-probability on its own (after the BOS token
//! alone, lm-eval's unconditional likelihood and `af eval`'s choices-only condition) per
//! character, what the context adds per token, and the characters per token of the ending's own
//! tokenisation; each raw and centred on its item's mean over the whole pool of that item (gold
//! included), every column standardised over the pool. A committee scores one candidate at a
//! time and compares the options of a question only in its softmax; centred columns carry the
//! comparison into the head itself, while the raw ones keep the level (a context after which
//! every ending is unlikely). The ending's own likelihood and its tokenisation are what `af
//! eval`'s probe reads the gold by where a person wrote it and an LM the pool (decision 485).
//!
//! `[committee.member.lm-likelihood]`: `model` (a Llama-architecture GGUF file; default
//! `$AF_CAUSAL_LM`, which `scripts/setup --env` sets), `batch-size` (sequences per forward pass
//! of the LM, 32), `hidden` (32), `dropout` (default `[committee] dropout`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use super::{member_table, positive, probability, text_dropout, to_json};
use crate::committee::member::{
    default_row_bytes, estimate, BuildContext, Column, Member, MemberNet,
};
use crate::committee::{Batch, CommitteeConfig};
use crate::NnError;

pub const NAME: &str = "lm-likelihood";

/// The columns of [`features`], in order: each reading of a candidate's scores raw, then each
/// centred on its item (the same name and `_centred`, in the same order).
pub const FEATURES: [&str; 12] = [
    "logprob",
    "logprob_per_char",
    "logprob_per_token",
    "choices_only_per_char",
    "context_gain_per_token",
    "characters_per_token",
    "logprob_centred",
    "logprob_per_char_centred",
    "logprob_per_token_centred",
    "choices_only_per_char_centred",
    "context_gain_per_token_centred",
    "characters_per_token_centred",
];

/// Readings of a candidate's scores: [`FEATURES`]' first half.
const READINGS: usize = FEATURES.len() / 2;

/// A pool's LM scores, one entry per row (`af eval`'s full and choices-only conditions).
#[derive(Clone, Debug, PartialEq)]
pub struct PoolScores {
    /// Summed log-probability of the ending after its context (natural log).
    pub logprob: Vec<f64>,
    /// The ending's tokens after its context.
    pub tokens: Vec<i64>,
    /// Summed log-probability of the ending alone, after the BOS token.
    pub choices_only: Vec<f64>,
    /// The ending's tokens on its own.
    pub choices_only_tokens: Vec<i64>,
    /// The ending's characters (`acc_norm`'s divisor).
    pub chars: Vec<i64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct LmLikelihoodSettings {
    pub hidden: i64,
    pub dropout: f64,
    /// As configured: None is `$AF_CAUSAL_LM` (resolved by [`LmLikelihoodSettings::source`]).
    pub model: Option<PathBuf>,
    pub batch_size: i64,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Table {
    hidden: Option<i64>,
    dropout: Option<f64>,
    model: Option<PathBuf>,
    batch_size: Option<i64>,
}

/// The LM that scores a pool for the member, as its settings name it: what the caller loads,
/// and what a run's cache of the scores is keyed by.
#[derive(Clone, Debug, PartialEq)]
pub struct LmLikelihoodSource {
    /// The GGUF file.
    pub model: PathBuf,
    /// Sequences per forward pass.
    pub batch_size: usize,
}

impl LmLikelihoodSettings {
    /// Its `[committee.member.lm-likelihood]` table, checked; Err: a message naming the key.
    pub fn resolve(c: &CommitteeConfig) -> Result<Self, String> {
        let t: Table = member_table(c, NAME)?;
        let dropout = match t.dropout {
            Some(d) => probability((d, format!("[committee.member.{NAME}] dropout")))?,
            None => text_dropout(c)?,
        };
        Ok(Self {
            hidden: positive((
                t.hidden.unwrap_or(32),
                format!("[committee.member.{NAME}] hidden"),
            ))?,
            dropout,
            model: t.model,
            batch_size: positive((
                t.batch_size.unwrap_or(32),
                format!("[committee.member.{NAME}] batch-size"),
            ))?,
        })
    }

    /// The model these settings name: as configured, else `$AF_CAUSAL_LM`; a missing file is an
    /// error naming the key and how to install the default.
    pub fn source(&self) -> Result<LmLikelihoodSource, NnError> {
        let model = match &self.model {
            Some(p) if p.is_file() => p.clone(),
            Some(p) => {
                return Err(NnError::InvalidSettings(format!(
                    "[committee.member.{NAME}] model = {:?}: no such file (a Llama-architecture GGUF file)",
                    p.display().to_string()
                )))
            }
            None => crate::causal_lm::default_path().ok_or_else(|| {
                let env = crate::causal_lm::CAUSAL_LM_ENV;
                let why = match std::env::var_os(env) {
                    Some(p) => format!("{env}={} is not a file", PathBuf::from(p).display()),
                    None => format!("{env} is not set"),
                };
                NnError::InvalidSettings(format!(
                    "[committee.member.{NAME}] model: the `{NAME}` member needs a pretrained causal LM and none is installed ({why}): \
                     run scripts/setup and `source <(scripts/setup --env)`, or name a GGUF file in [committee.member.{NAME}] model"
                ))
            })?,
        };
        Ok(LmLikelihoodSource {
            model,
            batch_size: self.batch_size as usize,
        })
    }
}

/// The member's features of a pool's candidates ([`FEATURES`]); `item_rows` says how many
/// consecutive rows each item has (its candidates, gold first). Standardised per column over the
/// rows (a column that does not vary is centred only).
/// # Shapes
/// -> [rows, 12] f32 on the CPU
pub fn features(scores: &PoolScores, item_rows: &[usize]) -> Tensor {
    let n = scores.logprob.len();
    for len in [
        scores.tokens.len(),
        scores.choices_only.len(),
        scores.choices_only_tokens.len(),
        scores.chars.len(),
    ] {
        assert_eq!(len, n, "one entry per row in every score");
    }
    assert_eq!(
        item_rows.iter().sum::<usize>(),
        n,
        "the items cover the rows"
    );
    let per = |x: f64, by: i64| x / by.max(1) as f64;
    let raw: [Vec<f64>; READINGS] = [
        scores.logprob.to_vec(),
        (0..n)
            .map(|r| per(scores.logprob[r], scores.chars[r]))
            .collect(),
        (0..n)
            .map(|r| per(scores.logprob[r], scores.tokens[r]))
            .collect(),
        (0..n)
            .map(|r| per(scores.choices_only[r], scores.chars[r]))
            .collect(),
        (0..n)
            .map(|r| per(scores.logprob[r] - scores.choices_only[r], scores.tokens[r]))
            .collect(),
        (0..n)
            .map(|r| per(scores.chars[r] as f64, scores.choices_only_tokens[r]))
            .collect(),
    ];
    let centred = |v: &[f64]| -> Vec<f64> {
        let mut out = Vec::with_capacity(v.len());
        let mut at = 0;
        for &rows_of_item in item_rows {
            let rows = &v[at..at + rows_of_item];
            let mean = rows.iter().sum::<f64>() / rows_of_item.max(1) as f64;
            out.extend(rows.iter().map(|x| x - mean));
            at += rows_of_item;
        }
        out
    };
    let centred: Vec<Vec<f64>> = raw.iter().map(|c| centred(c)).collect();
    let mut flat = vec![0f32; n * FEATURES.len()];
    for (f, column) in raw.iter().chain(&centred).enumerate() {
        let mean = column.iter().sum::<f64>() / n.max(1) as f64;
        let var = column.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n.max(1) as f64;
        let scale = if var > 1e-12 { var.sqrt() } else { 1.0 };
        for (r, x) in column.iter().enumerate() {
            flat[r * FEATURES.len() + f] = ((x - mean) / scale) as f32;
        }
    }
    Tensor::from_slice(&flat).view([n as i64, FEATURES.len() as i64])
}

pub struct LmLikelihood;

impl Member for LmLikelihood {
    fn name(&self) -> &'static str {
        NAME
    }

    fn describe(&self) -> &'static str {
        "head over a pretrained causal LM's log-likelihood of the ending after the context and alone, per character and per token, centred per item"
    }

    fn columns(&self) -> &'static [Column] {
        &[Column::LmLikelihood]
    }

    /// The LM reads the context and the second sentence; the table brings its scores.
    fn view(&self, _committee: &CommitteeConfig) -> af_core::View {
        af_core::View::Full
    }

    fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String> {
        LmLikelihoodSettings::resolve(committee).map(|s| to_json(&s))
    }

    fn lm_likelihood(
        &self,
        committee: &CommitteeConfig,
    ) -> Result<Option<LmLikelihoodSource>, NnError> {
        LmLikelihoodSettings::resolve(committee)
            .map_err(NnError::InvalidSettings)?
            .source()
            .map(Some)
    }

    /// The features [12], the hidden layer and its ReLU [2h], the output and its copy [2h]; kept
    /// with the dropout's mask.
    fn row_bytes(&self, committee: &CommitteeConfig, tokens: u64, training: bool) -> u64 {
        LmLikelihoodSettings::resolve(committee).map_or_else(
            |_| default_row_bytes(tokens, training),
            |s| {
                let (n, h) = (FEATURES.len() as u64, s.hidden as u64);
                estimate(n + 4 * h, n + 5 * h, training)
            },
        )
    }

    fn build(&self, p: &nn::Path, ctx: &BuildContext) -> Result<Box<dyn MemberNet>, NnError> {
        let s = LmLikelihoodSettings::resolve(ctx.committee).map_err(NnError::InvalidSettings)?;
        if !ctx.lm_likelihood {
            return Err(NnError::InvalidSettings(format!(
                "the `{NAME}` member reads a pretrained LM's scores of a pool's candidates, and this table has none (the pipeline scores a pool's candidates; a table built from a dataset's options has no pool to score)"
            )));
        }
        Ok(Box::new(LmLikelihoodNet {
            hidden: nn::linear(
                p / "hidden",
                FEATURES.len() as i64,
                s.hidden,
                Default::default(),
            ),
            width: s.hidden,
            dropout: s.dropout,
        }))
    }
}

#[derive(Debug)]
struct LmLikelihoodNet {
    hidden: nn::Linear,
    width: i64,
    dropout: f64,
}

impl MemberNet for LmLikelihoodNet {
    fn width(&self) -> i64 {
        self.width
    }

    fn represent(&self, b: &Batch, train: bool) -> Tensor {
        let x = b
            .lm_likelihood
            .as_ref()
            .expect("built over a table with LM-likelihood features")
            .to_kind(Kind::Float);
        self.hidden.forward(&x).relu().dropout(self.dropout, train)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::committee::{score, train, CommitteeModel, MemberName, Registry};
    use crate::table::CandidateTable;
    use tch::Device;

    #[test]
    fn the_centred_columns_follow_the_raw_ones_name_for_name() {
        let (raw, centred) = FEATURES.split_at(READINGS);
        for (r, c) in raw.iter().zip(centred) {
            assert_eq!(format!("{r}_centred"), *c);
        }
    }

    #[test]
    fn features_are_standardised_and_centred_per_item() {
        // Two items: 3 and 2 rows.
        let scores = PoolScores {
            logprob: vec![-10.0, -20.0, -30.0, -5.0, -7.0],
            tokens: vec![5, 5, 10, 1, 7],
            choices_only: vec![-20.0, -20.0, -60.0, -5.0, -21.0],
            choices_only_tokens: vec![5, 4, 10, 2, 7],
            chars: vec![10, 10, 30, 5, 14],
        };
        let f = features(&scores, &[3, 2]);
        assert_eq!(f.size(), [5, FEATURES.len() as i64]);
        let col = |name: &str| {
            let c = FEATURES.iter().position(|f| *f == name).unwrap() as i64;
            Vec::<f32>::try_from(f.select(1, c)).unwrap()
        };
        for name in FEATURES {
            let v = col(name);
            let mean = v.iter().sum::<f32>() / 5.0;
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / 5.0;
            assert!(
                mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-4,
                "{name}: {v:?}"
            );
        }
        // Up to each column's scale and shift, a reading's order is the order of its values.
        let same_order = |name: &str, values: [f64; 5]| {
            let v = col(name);
            for i in 0..5 {
                for j in 0..5 {
                    if values[i] < values[j] - 1e-9 {
                        assert!(v[i] < v[j], "{name}: rows {i} and {j} of {v:?}");
                    } else if (values[i] - values[j]).abs() < 1e-9 {
                        assert!(
                            (v[i] - v[j]).abs() < 1e-5,
                            "{name}: rows {i} and {j} of {v:?}"
                        );
                    }
                }
            }
        };
        same_order("logprob", [-10.0, -20.0, -30.0, -5.0, -7.0]);
        same_order("logprob_per_char", [-1.0, -2.0, -1.0, -1.0, -0.5]);
        same_order("logprob_per_token", [-2.0, -4.0, -3.0, -5.0, -1.0]);
        same_order("choices_only_per_char", [-2.0, -2.0, -2.0, -1.0, -1.5]);
        same_order("context_gain_per_token", [2.0, 0.0, 3.0, 0.0, 2.0]);
        same_order("characters_per_token", [2.0, 2.5, 3.0, 2.5, 2.0]);
        // Centred: within an item, the same differences as raw (up to the column's scale); item
        // 2's two rows sit symmetrically around zero before standardising.
        let (raw, centred) = (col("logprob"), col("logprob_centred"));
        let (scale_raw, scale_centred) =
            ((raw[0] - raw[1]) / 10.0, (centred[0] - centred[1]) / 10.0);
        assert!(scale_raw > 0.0 && scale_centred > 0.0);
        assert!(((centred[3] - centred[4]) / scale_centred - 2.0).abs() < 1e-4);
        for name in FEATURES.iter().filter(|f| f.ends_with("_centred")) {
            let c = col(name);
            assert!(
                (c[3] + c[4]).abs() < 1e-4,
                "{name}: {c:?}: item means are removed (the pool's mean is then 0 too)"
            );
        }
        // A constant column is left at zero rather than divided by zero.
        let constant = PoolScores {
            logprob: vec![-3.0, -3.0],
            tokens: vec![2, 2],
            choices_only: vec![-5.0, -5.0],
            choices_only_tokens: vec![3, 3],
            chars: vec![6, 6],
        };
        let same = features(&constant, &[2]);
        assert_eq!(
            Vec::<f32>::try_from(same.flatten(0, -1)).unwrap(),
            [0.0; 2 * FEATURES.len()]
        );
    }

    #[test]
    fn settings_are_checked_and_name_their_key() {
        let config = |json: serde_json::Value| -> CommitteeConfig {
            serde_json::from_value(serde_json::json!({ "member": { NAME: json } })).unwrap()
        };
        let s = LmLikelihoodSettings::resolve(&CommitteeConfig::default()).unwrap();
        assert_eq!((s.hidden, s.batch_size, s.model), (32, 32, None));
        let e = LmLikelihoodSettings::resolve(&config(serde_json::json!({ "batch-size": 0 })))
            .unwrap_err();
        assert_eq!(
            e,
            "[committee.member.lm-likelihood] batch-size = 0: must be positive"
        );
        let e =
            LmLikelihoodSettings::resolve(&config(serde_json::json!({ "batch": 4 }))).unwrap_err();
        assert!(e.contains("`batch`"), "{e}");
        let e = LmLikelihoodSettings::resolve(&config(
            serde_json::json!({ "model": "/nonexistent/lm.gguf" }),
        ))
        .unwrap()
        .source()
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("[committee.member.lm-likelihood] model = \"/nonexistent/lm.gguf\""),
            "{e}"
        );
    }

    /// A table of `items` questions of 4 candidates with no tokens to speak of, whose
    /// LM-likelihood features put the gold (candidate 0) highest after centring only: the raw
    /// sums are dominated by a per-item level.
    fn table_with_features(items: usize) -> CandidateTable {
        let rows = (items * 4) as i64;
        let words = Tensor::ones([rows, 1], (Kind::Int64, Device::Cpu));
        let indicator = Tensor::full([rows, 1], 2, (Kind::Int64, Device::Cpu));
        let features8 = Tensor::zeros([rows, 8], (Kind::Float, Device::Cpu));
        let mut table = CandidateTable::from_tensors(
            words.shallow_clone(),
            words,
            indicator,
            features8,
            4,
            4,
            1,
        );
        let mut logprob = Vec::new();
        for i in 0..items {
            let level = -10.0 * (i % 7) as f64;
            for c in 0..4 {
                let bonus = if c == 0 { 3.0 } else { (c as f64) * 0.5 };
                logprob.push(level - 5.0 + bonus);
            }
        }
        let rows = logprob.len();
        let scores = PoolScores {
            logprob,
            tokens: vec![5; rows],
            choices_only: vec![-30.0; rows],
            choices_only_tokens: vec![5; rows],
            chars: vec![20; rows],
        };
        table
            .attach_lm_likelihood(features(&scores, &vec![4; items]))
            .unwrap();
        table
    }

    /// The member alone learns which option an LM prefers, from centred features, in a second.
    #[test]
    fn the_member_learns_the_lms_preference_in_a_committee() {
        let _torch_rng = crate::torch_rng_lock();
        tch::manual_seed(5);
        let table = table_with_features(60);
        let config = CommitteeConfig {
            epochs: 20,
            batch_items: 16,
            validation_share: 0.0,
            learning_rate: 1e-2,
            mlp_hidden: 8,
            joint_hidden: 8,
            ..Default::default()
        };
        let registry = Registry::builtin();
        let vs = nn::VarStore::new(Device::Cpu);
        let members = [MemberName::new(NAME), MemberName::new("mlp")];
        let model =
            CommitteeModel::new(&vs.root(), &config, &registry, &members, true, &table).unwrap();
        let questions: Vec<Vec<i64>> = (0..40)
            .map(|i| (0..4).map(|c| (i * 4 + c) as i64).collect())
            .collect();
        train(&vs, &model, &table, &questions, &config, 3).unwrap();
        let held: Vec<i64> = (160..240).collect();
        let scores = score(&model, &table, &held, af_core::ScoreBatch::Candidates(7));
        let member = &scores.iter().find(|(h, _)| h == NAME).unwrap().1;
        let right = member
            .chunks(4)
            .filter(|s| s[1..].iter().all(|&d| s[0] > d))
            .count();
        assert_eq!(right, 20, "{member:?}");
        // Without the features the member is refused at build time, with the reason.
        let bare = CandidateTable::from_tensors(
            Tensor::ones([4, 1], (Kind::Int64, Device::Cpu)),
            Tensor::ones([4, 1], (Kind::Int64, Device::Cpu)),
            Tensor::full([4, 1], 2, (Kind::Int64, Device::Cpu)),
            Tensor::zeros([4, 8], (Kind::Float, Device::Cpu)),
            4,
            4,
            1,
        );
        let e = CommitteeModel::new(
            &(vs.root() / "bare"),
            &config,
            &registry,
            &members,
            true,
            &bare,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("has none"), "{e}");
    }
}
