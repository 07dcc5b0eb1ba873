//! `[export]`: the dataset's splits, the lm-evaluation-harness task, annotation sheets.

use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;

/// The export stage: splits, the lm-evaluation-harness task, annotation sheets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct ExportConfig {
    /// Shares of groups in the train / validation / test splits (they must sum to 1).
    pub train_share: f64,
    pub validation_share: f64,
    pub test_share: f64,
    /// The lm-evaluation-harness task name.
    pub task: String,
    /// Write annotation sheets (`af export --annotation` sets it).
    pub annotation: bool,
    /// AF distractors shown beside the found ending on an annotation sheet (the paper: 5).
    pub annotation_distractors: usize,
    /// Items per annotation sheet.
    pub sheet_items: usize,
}

impl Default for ExportConfig {
    fn default() -> Self {
        Self {
            train_share: 0.8,
            validation_share: 0.1,
            test_share: 0.1,
            task: "af".into(),
            annotation: false,
            annotation_distractors: 5,
            sheet_items: 100,
        }
    }
}

impl ExportConfig {
    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        let shares = [self.train_share, self.validation_share, self.test_share];
        if shares.iter().any(|s| !(0.0..=1.0).contains(s))
            || (shares.iter().sum::<f64>() - 1.0).abs() > 1e-6
        {
            return Err(format!(
                "[export] train-share + validation-share + test-share = {} + {} + {}: each in [0, 1], summing to 1",
                self.train_share, self.validation_share, self.test_share
            ));
        }
        if self.task.is_empty()
            || !self
                .task
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!("[export] task = {:?}: letters, digits, `_` and `-` only (it names files and the lm-eval task)", self.task));
        }
        if self.annotation_distractors == 0 || self.sheet_items == 0 {
            return Err("[export] annotation-distractors and sheet-items must be positive".into());
        }
        Ok(())
    }

    /// The section as the export stage's fingerprint records it: every key changes what the
    /// stage writes (the task's name names its files, `annotation` adds the sheets).
    pub fn fingerprint(&self) -> serde_json::Value {
        let Self {
            train_share,
            validation_share,
            test_share,
            task,
            annotation,
            annotation_distractors,
            sheet_items,
        } = self;
        Fingerprint::default()
            .key("train-share", train_share)
            .key("validation-share", validation_share)
            .key("test-share", test_share)
            .key("task", task)
            .key("annotation", annotation)
            .key("annotation-distractors", annotation_distractors)
            .key("sheet-items", sheet_items)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use crate::config::checked;

    #[test]
    fn shares_sum_to_one_and_the_task_names_files() {
        let err = checked("[export]\ntrain-share = 0.9\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("summing to 1"), "{err}");
        assert!(checked("[export]\ntrain-share = 0.7\nvalidation-share = 0.2\n").is_ok());
        let err = checked("[export]\ntask = \"a/b\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("letters, digits"), "{err}");
    }
}
