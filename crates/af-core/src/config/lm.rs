//! `[lm]`: the LSTM language models that write and score endings, one pair per fold.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;
use super::is_default;
use super::pairs::{fingerprints, InputSpec};

/// `af lm train`: a forward and a backward LSTM language model sharing one tied embedding, one
/// pair per fold (the pair for fold k never sees fold k).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct LmConfig {
    /// Words seen fewer times in the items become `<unk>`.
    pub min_count: u64,
    /// Embedding size (tied with the output layer).
    pub embedding: i64,
    /// LSTM hidden size; projected to `embedding` before the output layer when different.
    pub hidden: i64,
    pub layers: i64,
    /// Dropout on embeddings and LSTM outputs.
    pub dropout: f64,
    pub learning_rate: f64,
    pub clip_norm: f64,
    /// Sequences per training batch.
    pub batch_size: usize,
    pub max_epochs: usize,
    /// Stop when held-out perplexity has not improved for this many epochs.
    pub patience: usize,
    /// Share of each LM's training items held out for early stopping (by group).
    pub validation_share: f64,
    /// Optional plain-text pretraining (e.g. novels standing in for BookCorpus): one LM pair is
    /// trained on it, then copied into every fold's LM before fine-tuning on the items.
    pub pretrain: Vec<InputSpec>,
    pub pretrain_epochs: usize,
    /// A run directory whose trained LMs (`lm/`) this run adopts instead of training its own
    /// (`af refilter --lms`): its items keep the folds they had there, so no item is scored or
    /// completed by an LM that trained on it. The shape keys and `[pairs] folds` must be its.
    #[serde(skip_serializing_if = "is_default")]
    pub from: Option<PathBuf>,
}

impl Default for LmConfig {
    fn default() -> Self {
        Self {
            min_count: 2,
            embedding: 512,
            hidden: 512,
            layers: 1,
            dropout: 0.2,
            learning_rate: 1e-3,
            clip_norm: 1.0,
            batch_size: 64,
            max_epochs: 20,
            patience: 2,
            validation_share: 0.05,
            pretrain: Vec::new(),
            pretrain_epochs: 1,
            from: None,
        }
    }
}

impl LmConfig {
    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        self.pretrain.iter().try_for_each(InputSpec::validate)?;
        if self.from.is_some() && !self.pretrain.is_empty() {
            return Err("[lm] `from` adopts another run's trained LMs, so `pretrain` would never be used: keep one of the two".into());
        }
        if self.embedding < 1
            || self.hidden < 1
            || self.layers < 1
            || self.batch_size == 0
            || self.max_epochs == 0
        {
            return Err(
                "[lm] embedding, hidden, layers, batch-size and max-epochs must be positive".into(),
            );
        }
        if !(0.0..1.0).contains(&self.dropout) || !(0.0..0.5).contains(&self.validation_share) {
            return Err("[lm] needs 0 <= dropout < 1 and 0 <= validation-share < 0.5".into());
        }
        Ok(())
    }

    /// The section as the lm stage's fingerprint records it (the pretraining inputs' and adopted
    /// LMs' contents beside it).
    pub fn fingerprint(&self) -> serde_json::Value {
        let Self {
            min_count,
            embedding,
            hidden,
            layers,
            dropout,
            learning_rate,
            clip_norm,
            batch_size,
            max_epochs,
            patience,
            validation_share,
            pretrain,
            pretrain_epochs,
            from,
        } = self;
        Fingerprint::default()
            .key("min-count", min_count)
            .key("embedding", embedding)
            .key("hidden", hidden)
            .key("layers", layers)
            .key("dropout", dropout)
            .key("learning-rate", learning_rate)
            .key("clip-norm", clip_norm)
            .key("batch-size", batch_size)
            .key("max-epochs", max_epochs)
            .key("patience", patience)
            .key("validation-share", validation_share)
            .key("pretrain", &fingerprints(pretrain))
            .key("pretrain-epochs", pretrain_epochs)
            .later("from", from, &None)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use crate::config::checked;

    #[test]
    fn adopted_lms_leave_no_room_for_pretraining_and_sizes_are_positive() {
        let err = checked(
            "[lm]\nfrom = \"../runs/x\"\n[[lm.pretrain]]\npath = \"novels\"\nformat = \"text\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("keep one of the two"), "{err}");
        let err = checked("[lm]\nlayers = 0\n").unwrap_err().to_string();
        assert!(err.contains("must be positive"), "{err}");
        let err = checked("[lm]\nvalidation-share = 0.5\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("validation-share < 0.5"), "{err}");
    }
}
