//! `encoder`: a small head over frozen sentence embeddings from a pretrained encoder (all-MiniLM-L6-v2
//! by default). In a pool's committee it reads the context and the second sentence of each
//! candidate, [s, c*s, |c-s|] as in sentence-pair classifiers, so it is the first member that sees
//! the context; where the table has no separate context (an audit's view) it reads the view's
//! text alone. The embeddings are computed once per run by the caller ([`crate::encoder`]) and
//! attached to the table; only the head trains.
//!
//! `[committee.member.encoder]`: `hidden` (256), `dropout` (default `[committee] dropout`),
//! `model` (a BERT-family model directory; default `$AF_ENCODER_DIR`, then the first model under
//! `~/.cache/af/encoders`), `batch-size` (texts per encoder pass, 64).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tch::nn::{self, Module};
use tch::Tensor;

use super::{member_table, positive, probability, text_dropout, to_json};
use crate::committee::member::{BuildContext, Column, Member, MemberNet};
use crate::committee::{Batch, CommitteeConfig};
use crate::NnError;

pub const NAME: &str = "encoder";

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct EncoderSettings {
    pub hidden: i64,
    pub dropout: f64,
    /// As configured: None is the default model (resolved by [`EncoderSettings::model_dir`]).
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

impl EncoderSettings {
    pub fn resolve(c: &CommitteeConfig) -> Result<Self, String> {
        let t: Table = member_table(c, NAME)?;
        let dropout = match t.dropout {
            Some(d) => probability((d, format!("[committee.member.{NAME}] dropout")))?,
            None => text_dropout(c)?,
        };
        Ok(Self {
            hidden: positive((t.hidden.unwrap_or(256), format!("[committee.member.{NAME}] hidden")))?,
            dropout,
            model: t.model,
            batch_size: positive((t.batch_size.unwrap_or(64), format!("[committee.member.{NAME}] batch-size")))?,
        })
    }
}

impl EncoderSettings {
    /// The model directory: as configured, else `$AF_ENCODER_DIR`, else the first under
    /// `~/.cache/af/encoders`.
    pub fn model_dir(&self) -> Result<PathBuf, NnError> {
        match &self.model {
            Some(dir) => Ok(dir.clone()),
            None => crate::encoder::known_model_dirs().into_iter().next().ok_or_else(|| {
                NnError::InvalidSettings(format!(
                    "the `{NAME}` member needs a pretrained model and none was found: `scripts/setup` installs all-MiniLM-L6-v2 and sets {}, \
                     or name a BERT-family directory in [committee.member.{NAME}] model",
                    crate::encoder::ENCODER_DIR_ENV
                ))
            }),
        }
    }

    /// The model, loaded on `device` (half precision on a GPU).
    pub fn load(&self, device: tch::Device) -> Result<crate::encoder::Encoder, NnError> {
        let options = crate::encoder::EncoderOptions { batch_size: self.batch_size as usize, max_length: None, half: device.is_cuda() };
        Ok(crate::encoder::Encoder::load(&self.model_dir()?, device, &options)?)
    }
}

pub struct EncoderMember;

impl Member for EncoderMember {
    fn name(&self) -> &'static str {
        NAME
    }

    fn describe(&self) -> &'static str {
        "head over frozen pretrained sentence embeddings of the context and the second sentence"
    }

    fn columns(&self) -> &'static [Column] {
        &[Column::Encoded]
    }

    fn view(&self, _committee: &CommitteeConfig) -> af_core::View {
        af_core::View::Full
    }

    fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String> {
        EncoderSettings::resolve(committee).map(|s| to_json(&s))
    }

    fn build(&self, p: &nn::Path, ctx: &BuildContext) -> Result<Box<dyn MemberNet>, NnError> {
        let s = EncoderSettings::resolve(ctx.committee).map_err(NnError::InvalidSettings)?;
        let Some((dim, with_context)) = ctx.encoded else {
            return Err(NnError::InvalidSettings(format!(
                "the `{NAME}` member reads frozen sentence embeddings, and this table has none (the caller encodes the rows first)"
            )));
        };
        let input = if with_context { 3 * dim } else { dim };
        Ok(Box::new(EncoderNet { hidden: nn::linear(p / "hidden", input, s.hidden, Default::default()), width: s.hidden, dropout: s.dropout, with_context }))
    }
}

#[derive(Debug)]
struct EncoderNet {
    hidden: nn::Linear,
    width: i64,
    dropout: f64,
    with_context: bool,
}

impl MemberNet for EncoderNet {
    fn width(&self) -> i64 {
        self.width
    }

    fn represent(&self, b: &Batch, train: bool) -> Tensor {
        let s = b.encoded.as_ref().expect("built over a table with embeddings");
        let input = if self.with_context {
            let c = b.encoded_context.as_ref().expect("built over a table with context embeddings");
            Tensor::cat(&[s.shallow_clone(), c * s, (c - s).abs()], 1)
        } else {
            s.shallow_clone()
        };
        self.hidden.forward(&input.dropout(self.dropout, train)).relu().dropout(self.dropout, train)
    }
}
