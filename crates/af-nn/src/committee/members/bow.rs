//! `bow`: the mean of a candidate's word embeddings.
//!
//! No `[committee.member.bow]` keys: it reads `[committee] embedding` and `dropout`.

use serde::{Deserialize, Serialize};
use tch::nn::{self, Module};
use tch::Tensor;

use super::{embedding, embedding_size, masked_mean, member_table, text_dropout, to_json};
use crate::committee::member::{
    default_row_bytes, estimate, BuildContext, Column, Member, MemberNet,
};
use crate::committee::{Batch, CommitteeConfig};
use crate::NnError;

const NAME: &str = "bow";

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct BowSettings {
    pub embedding: i64,
    pub dropout: f64,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Table {}

impl BowSettings {
    pub fn resolve(c: &CommitteeConfig) -> Result<Self, String> {
        // Read even though it has no keys: a key there is a mistake worth an error.
        let Table {} = member_table(c, NAME)?;
        Ok(Self {
            embedding: embedding_size(c)?,
            dropout: text_dropout(c)?,
        })
    }
}

pub struct Bow;

impl Member for Bow {
    fn name(&self) -> &'static str {
        NAME
    }

    fn describe(&self) -> &'static str {
        "mean of word embeddings"
    }

    fn columns(&self) -> &'static [Column] {
        &[Column::Words]
    }

    fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String> {
        BowSettings::resolve(committee).map(|s| to_json(&s))
    }

    /// Embeddings [T,E] and their masked product [T,E]; the mean [E] and its copy. Training keeps
    /// little (the mask), and its gradients are as large as the forward.
    fn row_bytes(&self, committee: &CommitteeConfig, tokens: u64, training: bool) -> u64 {
        BowSettings::resolve(committee).map_or_else(
            |_| default_row_bytes(tokens, training),
            |s| {
                let f = 2 * tokens * s.embedding as u64 + 2 * s.embedding as u64;
                estimate(f, tokens, training)
            },
        )
    }

    fn build(&self, p: &nn::Path, ctx: &BuildContext) -> Result<Box<dyn MemberNet>, NnError> {
        let s = BowSettings::resolve(ctx.committee).map_err(NnError::InvalidSettings)?;
        Ok(Box::new(BowNet {
            embedding: embedding(p / "embedding", ctx.vocab, s.embedding),
            settings: s,
        }))
    }
}

#[derive(Debug)]
struct BowNet {
    embedding: nn::Embedding,
    settings: BowSettings,
}

impl MemberNet for BowNet {
    fn width(&self) -> i64 {
        self.settings.embedding
    }

    fn represent(&self, b: &Batch, train: bool) -> Tensor {
        masked_mean(&self.embedding.forward(&b.words), &b.mask)
            .dropout(self.settings.dropout, train)
    }
}
