//! `ngram`: fastText-style, the mean of a candidate's word and hashed word-bigram embeddings (the
//! audit's n-gram bag).
//!
//! `[committee.member.ngram]`: `view` (`second-sentence`, the default, or `full`: the context too), `buckets` (hash buckets for the bigrams, default
//! `[committee] ngram-buckets`).

use serde::{Deserialize, Serialize};
use tch::nn::{self, Module};
use tch::Tensor;

use super::{
    committee_view, embedding_size, is_second_sentence, masked_mean, member_table, overlay,
    positive, text_dropout, to_json,
};
use crate::committee::member::{
    default_row_bytes, estimate, BuildContext, Column, Member, MemberNet,
};
use crate::committee::{Batch, CommitteeConfig};
use crate::NnError;

const NAME: &str = "ngram";

/// Spreads word bigrams over the buckets (a large prime keeps pairs apart).
const BIGRAM_PRIME: i64 = 1_000_003;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct NgramSettings {
    pub embedding: i64,
    pub buckets: i64,
    pub dropout: f64,
    /// The rows it reads in a pool's committee.
    #[serde(skip_serializing_if = "is_second_sentence")]
    pub view: af_core::View,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Table {
    buckets: Option<i64>,
    view: Option<af_core::View>,
}

impl NgramSettings {
    pub fn resolve(c: &CommitteeConfig) -> Result<Self, String> {
        let t: Table = member_table(c, NAME)?;
        Ok(Self {
            embedding: embedding_size(c)?,
            buckets: positive(overlay(
                NAME,
                t.buckets,
                "buckets",
                c.ngram_buckets,
                "ngram-buckets",
            ))?,
            dropout: text_dropout(c)?,
            view: committee_view(NAME, t.view)?,
        })
    }
}

pub struct Ngram;

impl Member for Ngram {
    fn name(&self) -> &'static str {
        NAME
    }

    fn describe(&self) -> &'static str {
        "fastText-style mean of word and hashed word-bigram embeddings"
    }

    fn columns(&self) -> &'static [Column] {
        &[Column::Words]
    }

    fn view(&self, committee: &CommitteeConfig) -> af_core::View {
        NgramSettings::resolve(committee).map_or(af_core::View::SecondSentence, |s| s.view)
    }

    fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String> {
        NgramSettings::resolve(committee).map(|s| to_json(&s))
    }

    /// Over 2T ids (words and bigrams): embeddings [2T,E] and their masked product [2T,E], the
    /// ids, hashing and masks (~6 i64 per id, 12 f32), the mean [E] and its copy. Training keeps
    /// little (the mask), and its gradients are as large as the forward.
    fn row_bytes(&self, committee: &CommitteeConfig, tokens: u64, training: bool) -> u64 {
        NgramSettings::resolve(committee).map_or_else(
            |_| default_row_bytes(tokens, training),
            |s| {
                let (ids, e) = (2 * tokens, s.embedding as u64);
                let f = 2 * ids * e + 12 * ids + 2 * e;
                estimate(f, ids, training)
            },
        )
    }

    fn build(&self, p: &nn::Path, ctx: &BuildContext) -> Result<Box<dyn MemberNet>, NnError> {
        let s = NgramSettings::resolve(ctx.committee).map_err(NnError::InvalidSettings)?;
        // fastText's initialisation: small uniform, so the many rare bigrams start as near-zero
        // rather than as noise that drowns the mean.
        let bound = 1.0 / s.embedding as f64;
        let embedding = nn::embedding(
            p / "embedding",
            ctx.vocab + s.buckets,
            s.embedding,
            nn::EmbeddingConfig {
                padding_idx: 0,
                ws_init: nn::Init::Uniform {
                    lo: -bound,
                    up: bound,
                },
                ..Default::default()
            },
        );
        Ok(Box::new(NgramNet {
            embedding,
            vocab: ctx.vocab,
            settings: s,
        }))
    }
}

/// Word ids 0..vocab, bigram buckets after them.
#[derive(Debug)]
struct NgramNet {
    embedding: nn::Embedding,
    vocab: i64,
    settings: NgramSettings,
}

impl MemberNet for NgramNet {
    fn width(&self) -> i64 {
        self.settings.embedding
    }

    fn represent(&self, b: &Batch, train: bool) -> Tensor {
        let t = b.words.size()[1];
        let (left, right) = (b.words.narrow(1, 0, t - 1), b.words.narrow(1, 1, t - 1));
        let bigrams = (left * BIGRAM_PRIME + right).remainder(self.settings.buckets) + self.vocab;
        let ids = Tensor::cat(&[&b.words, &bigrams], 1);
        let bigram_mask = b
            .mask
            .narrow(1, 0, t - 1)
            .logical_and(&b.mask.narrow(1, 1, t - 1));
        let mask = Tensor::cat(&[&b.mask, &bigram_mask], 1);
        masked_mean(&self.embedding.forward(&ids), &mask).dropout(self.settings.dropout, train)
    }
}
