//! `mlp`: a two-layer SELU network on the 8 LM features of a candidate (SWAG's first stage).
//!
//! `[committee.member.mlp]`: `hidden` (default `[committee] mlp-hidden`), `dropout` (its
//! alpha-dropout, default `[committee] mlp-dropout`).

use serde::{Deserialize, Serialize};
use tch::nn::{self, Module};
use tch::Tensor;

use super::{member_table, overlay, positive, probability, to_json};
use crate::committee::member::{
    default_row_bytes, estimate, BuildContext, Column, Member, MemberNet,
};
use crate::committee::{Batch, CommitteeConfig};
use crate::NnError;

const NAME: &str = "mlp";

/// LM features per candidate.
const FEATURES: i64 = 8;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct MlpSettings {
    pub hidden: i64,
    /// Alpha-dropout (SELU keeps its self-normalisation under it).
    pub dropout: f64,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Table {
    hidden: Option<i64>,
    dropout: Option<f64>,
}

impl MlpSettings {
    pub fn resolve(c: &CommitteeConfig) -> Result<Self, String> {
        let t: Table = member_table(c, NAME)?;
        Ok(Self {
            hidden: positive(overlay(
                NAME,
                t.hidden,
                "hidden",
                c.mlp_hidden,
                "mlp-hidden",
            ))?,
            dropout: probability(overlay(
                NAME,
                t.dropout,
                "dropout",
                c.mlp_dropout,
                "mlp-dropout",
            ))?,
        })
    }
}

pub struct Mlp;

impl Member for Mlp {
    fn name(&self) -> &'static str {
        NAME
    }

    fn describe(&self) -> &'static str {
        "MLP on the 8 LM features of a candidate"
    }

    fn columns(&self) -> &'static [Column] {
        &[Column::Features]
    }

    fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String> {
        MlpSettings::resolve(committee).map(|s| to_json(&s))
    }

    /// Two layers of [h] (linear, SELU), the output and its copy; kept: each layer's linear,
    /// SELU, alpha-dropout noise and output [4h].
    fn row_bytes(&self, committee: &CommitteeConfig, tokens: u64, training: bool) -> u64 {
        MlpSettings::resolve(committee).map_or_else(
            |_| default_row_bytes(tokens, training),
            |s| {
                let h = s.hidden as u64;
                estimate(FEATURES as u64 + 4 * h, FEATURES as u64 + 8 * h, training)
            },
        )
    }

    fn build(&self, p: &nn::Path, ctx: &BuildContext) -> Result<Box<dyn MemberNet>, NnError> {
        let s = MlpSettings::resolve(ctx.committee).map_err(NnError::InvalidSettings)?;
        Ok(Box::new(MlpNet {
            first: nn::linear(p / "first", FEATURES, s.hidden, Default::default()),
            second: nn::linear(p / "second", s.hidden, s.hidden, Default::default()),
            hidden: s.hidden,
            dropout: s.dropout,
        }))
    }
}

#[derive(Debug)]
struct MlpNet {
    first: nn::Linear,
    second: nn::Linear,
    hidden: i64,
    dropout: f64,
}

impl MemberNet for MlpNet {
    fn width(&self) -> i64 {
        self.hidden
    }

    fn represent(&self, b: &Batch, train: bool) -> Tensor {
        let h = self
            .first
            .forward(&b.features)
            .selu()
            .alpha_dropout(self.dropout, train);
        self.second
            .forward(&h)
            .selu()
            .alpha_dropout(self.dropout, train)
    }
}
