//! `encoder`: a small head over frozen sentence embeddings from a pretrained encoder (all-MiniLM-L6-v2
//! by default), run by af's own BERT implementation. In a pool's committee it reads the context
//! and the second sentence of each candidate, [s, c*s, |c-s|] as in sentence-pair classifiers,
//! so it is the first member that sees the context; where the table has no separate context (an
//! audit's view) it reads the view's text alone. The embeddings are computed once per run by the
//! caller ([`crate::encoder`]) and attached to the table; only the head trains (shared with
//! `torchscript`, [`super::frozen`]).
//!
//! `[committee.member.encoder]`: `hidden` (256), `dropout` (default `[committee] dropout`),
//! `model` (a BERT-family model directory; default `$AF_ENCODER_DIR`, then the first model under
//! `~/.cache/af/encoders`), `batch-size` (texts per encoder pass, 64).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::frozen::{FrozenEncoder, FrozenMember, FrozenSettings, SharedKeys};
use super::member_table;
use crate::committee::CommitteeConfig;
use crate::encoder::{EncoderOptions, EncoderSource};
use crate::NnError;

pub const NAME: &str = "encoder";

pub type EncoderMember = FrozenMember<EncoderSettings>;

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

impl FrozenSettings for EncoderSettings {
    const NAME: &'static str = NAME;
    const DESCRIPTION: &'static str =
        "head over frozen pretrained sentence embeddings of the context and the second sentence";

    fn resolve(c: &CommitteeConfig) -> Result<Self, String> {
        let t: Table = member_table(c, NAME)?;
        let head = SharedKeys::resolve(c, NAME, t.hidden, t.dropout, t.batch_size)?;
        Ok(Self {
            hidden: head.hidden,
            dropout: head.dropout,
            model: t.model,
            batch_size: head.batch_size,
        })
    }

    fn head(&self) -> (i64, f64) {
        (self.hidden, self.dropout)
    }

    /// The model these settings name (half precision on a GPU).
    fn encoder(&self) -> Result<FrozenEncoder, NnError> {
        Ok(FrozenEncoder {
            member: NAME,
            key: "model",
            source: EncoderSource::Bert {
                dir: self.model_dir()?,
            },
            options: EncoderOptions {
                batch_size: self.batch_size as usize,
                max_length: None,
                half: true,
            },
        })
    }
}

impl EncoderSettings {
    /// The model directory: as configured, else `$AF_ENCODER_DIR`, else the first under
    /// `~/.cache/af/encoders`.
    pub fn model_dir(&self) -> Result<PathBuf, NnError> {
        crate::encoder::model_dir_or_default(self.model.as_deref(), NAME)
    }
}
