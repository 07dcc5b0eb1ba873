//! `encoder-ft`: a cross-encoder fine-tuned inside the AF loop, as HellaSwag's adversary was
//! ([`crate::encoder::CrossEncoder`]: "context [SEP] noun phrase + ending", fresh from the
//! pretrained weights every iteration). It stands apart from the joint committee: the other
//! members of its phase train and score every candidate as usual, then the cross-encoder
//! fine-tunes on the same training questions and re-scores a shortlist of each held-out item
//! (the gold, its assigned distractors and the `shortlist` best other candidates by the
//! committee's answer); the rest of the pool scores lowest. The caller runs it (it reads text,
//! not the table: a [`FineTunedMember`]); a phase that names it needs at least one other member
//! to shortlist with, and drives its swaps with it when the phase's `swap-head` says so.
//!
//! `[committee.member.encoder-ft]`: `model` (a BERT-family directory, default as `encoder`'s),
//! `shortlist` (16), `max-length` (128 tokens per pair), `learning-rate` (3e-5), `epochs` (1),
//! `batch-items` (questions per step, 4), `train-items` (training items fine-tuned on per
//! iteration, drawn from the iteration's training items; 0: all), `dropout` (0.1),
//! `batch-size` (pairs per scoring pass, 64).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{member_table, positive, probability, to_json};
use crate::committee::member::FineTunedMember;
use crate::committee::CommitteeConfig;
use crate::encoder::FineTuneOptions;
use crate::NnError;

pub const NAME: &str = "encoder-ft";

pub struct EncoderFt;

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct EncoderFtSettings {
    /// As configured: None is the default model ([`crate::encoder::model_dir_or_default`]).
    pub model: Option<PathBuf>,
    pub shortlist: usize,
    pub max_length: usize,
    pub learning_rate: f64,
    pub epochs: usize,
    pub batch_items: usize,
    pub train_items: usize,
    pub dropout: f64,
    pub batch_size: usize,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Table {
    model: Option<PathBuf>,
    shortlist: Option<i64>,
    max_length: Option<i64>,
    learning_rate: Option<f64>,
    epochs: Option<i64>,
    batch_items: Option<i64>,
    train_items: Option<i64>,
    dropout: Option<f64>,
    batch_size: Option<i64>,
}

impl EncoderFtSettings {
    pub fn resolve(c: &CommitteeConfig) -> Result<Self, String> {
        let t: Table = member_table(c, NAME)?;
        let key = |k: &str| format!("[committee.member.{NAME}] {k}");
        let count = |v: Option<i64>, default: i64, k: &str| {
            positive((v.unwrap_or(default), key(k))).map(|v| v as usize)
        };
        let learning_rate = t.learning_rate.unwrap_or(3e-5);
        if !(learning_rate.is_finite() && learning_rate > 0.0) {
            return Err(format!(
                "{} = {learning_rate}: must be positive",
                key("learning-rate")
            ));
        }
        let train_items = t.train_items.unwrap_or(0);
        if train_items < 0 {
            return Err(format!(
                "{} = {train_items}: must be 0 (every training item) or more",
                key("train-items")
            ));
        }
        let max_length = count(t.max_length, 128, "max-length")?;
        if max_length < 3 {
            return Err(format!(
                "{} = {max_length}: a pair needs at least 3 tokens ([CLS] and two [SEP])",
                key("max-length")
            ));
        }
        Ok(Self {
            model: t.model,
            shortlist: count(t.shortlist, 16, "shortlist")?,
            max_length,
            learning_rate,
            epochs: count(t.epochs, 1, "epochs")?,
            batch_items: count(t.batch_items, 4, "batch-items")?,
            train_items: train_items as usize,
            dropout: probability((t.dropout.unwrap_or(0.1), key("dropout")))?,
            batch_size: count(t.batch_size, 64, "batch-size")?,
        })
    }

    /// The model directory: as configured, else the default encoder's.
    pub fn model_dir(&self) -> Result<PathBuf, NnError> {
        crate::encoder::model_dir_or_default(self.model.as_deref(), NAME)
    }

    /// How the cross-encoder reads and trains.
    pub fn options(&self) -> FineTuneOptions {
        FineTuneOptions {
            max_length: self.max_length,
            batch_size: self.batch_size,
            epochs: self.epochs,
            learning_rate: self.learning_rate,
            batch_items: self.batch_items,
            dropout: self.dropout,
            ..FineTuneOptions::default()
        }
    }
}

impl FineTunedMember for EncoderFt {
    fn name(&self) -> &'static str {
        NAME
    }

    fn describe(&self) -> &'static str {
        "cross-encoder over context and second sentence, fine-tuned from pretrained weights each iteration; re-scores a shortlist"
    }

    fn settings(&self, committee: &CommitteeConfig) -> Result<serde_json::Value, String> {
        EncoderFtSettings::resolve(committee).map(|s| to_json(&s))
    }

    fn recipe(&self, committee: &CommitteeConfig) -> Result<EncoderFtSettings, NnError> {
        EncoderFtSettings::resolve(committee).map_err(NnError::InvalidSettings)
    }
}
