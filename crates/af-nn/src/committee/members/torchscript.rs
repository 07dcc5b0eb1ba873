//! `torchscript`: the `encoder` member's head ([`super::frozen`]) over frozen sentence embeddings
//! from any TorchScript module that takes token ids and an attention mask and returns one vector
//! per text, with the `tokenizer.json` its ids come from. A bridge for encoders af does not
//! implement (TorchScript is deprecated upstream; docs/decisions.md); `scripts/export-torchscript`
//! writes such a module from a Hugging Face encoder. Only one of `encoder` and `torchscript` may
//! be in a committee: they fill the same embeddings of the table.
//!
//! `[committee.member.torchscript]`: `module` (the `.pt` file, required), `tokenizer` (default:
//! `tokenizer.json` beside the module), `max-length` (tokens per text, special tokens included,
//! 256), `hidden` (256), `dropout` (default `[committee] dropout`), `batch-size` (texts per
//! module call, 64).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::frozen::{FrozenEncoder, FrozenMember, FrozenSettings, SharedKeys};
use super::{member_table, positive};
use crate::committee::CommitteeConfig;
use crate::encoder::{EncoderOptions, EncoderSource, TORCHSCRIPT_DEFAULT_MAX_LENGTH};
use crate::NnError;

pub const NAME: &str = "torchscript";

pub type TorchScriptMember = FrozenMember<TorchScriptSettings>;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct TorchScriptSettings {
    pub hidden: i64,
    pub dropout: f64,
    /// As configured; required when the member is used ([`TorchScriptSettings::encoder`]), not
    /// when a config merely could use it.
    pub module: Option<PathBuf>,
    /// As configured: None is `tokenizer.json` beside the module.
    pub tokenizer: Option<PathBuf>,
    pub max_length: i64,
    pub batch_size: i64,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Table {
    hidden: Option<i64>,
    dropout: Option<f64>,
    module: Option<PathBuf>,
    tokenizer: Option<PathBuf>,
    max_length: Option<i64>,
    batch_size: Option<i64>,
}

impl FrozenSettings for TorchScriptSettings {
    const NAME: &'static str = NAME;
    const DESCRIPTION: &'static str = "head over frozen sentence embeddings from a TorchScript module, of the context and the second sentence";

    fn resolve(c: &CommitteeConfig) -> Result<Self, String> {
        let t: Table = member_table(c, NAME)?;
        let head = SharedKeys::resolve(c, NAME, t.hidden, t.dropout, t.batch_size)?;
        let max_length = positive((
            t.max_length
                .unwrap_or(TORCHSCRIPT_DEFAULT_MAX_LENGTH as i64),
            format!("[committee.member.{NAME}] max-length"),
        ))?;
        if max_length < 2 {
            return Err(format!("[committee.member.{NAME}] max-length = {max_length}: must leave room for the special tokens and one word (at least 2)"));
        }
        Ok(Self {
            hidden: head.hidden,
            dropout: head.dropout,
            module: t.module,
            tokenizer: t.tokenizer,
            max_length,
            batch_size: head.batch_size,
        })
    }

    fn head(&self) -> (i64, f64) {
        (self.hidden, self.dropout)
    }

    /// The module and tokenizer these settings name; a missing `module` key, module file or
    /// tokenizer file is an error naming the key.
    fn encoder(&self) -> Result<FrozenEncoder, NnError> {
        let module = self.module.clone().ok_or_else(|| {
            NnError::InvalidSettings(format!(
                "[committee.member.{NAME}] module: the `{NAME}` member needs a TorchScript module (a .pt file taking input_ids and attention_mask; \
                 scripts/export-torchscript writes one from a Hugging Face encoder)"
            ))
        })?;
        if !module.is_file() {
            return Err(NnError::InvalidSettings(format!(
                "[committee.member.{NAME}] module = {:?}: no such file",
                module.display().to_string()
            )));
        }
        let tokenizer = match &self.tokenizer {
            Some(t) if !t.is_file() => {
                return Err(NnError::InvalidSettings(format!(
                    "[committee.member.{NAME}] tokenizer = {:?}: no such file",
                    t.display().to_string()
                )))
            }
            Some(t) => t.clone(),
            None => module.with_file_name("tokenizer.json"),
        };
        if !tokenizer.is_file() {
            return Err(NnError::InvalidSettings(format!(
                "[committee.member.{NAME}] module = {:?}: no tokenizer.json beside it (name the module's tokenizer in [committee.member.{NAME}] tokenizer)",
                module.display().to_string()
            )));
        }
        Ok(FrozenEncoder {
            member: NAME,
            key: "module",
            source: EncoderSource::TorchScript { module, tokenizer },
            options: EncoderOptions {
                batch_size: self.batch_size as usize,
                max_length: Some(self.max_length as usize),
                half: false,
            },
        })
    }
}
