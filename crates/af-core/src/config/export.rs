//! `[export]`: the dataset's splits, the lm-evaluation-harness task, annotation sheets, and how
//! hard both datasets are for a pretrained LM (`af eval`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::equals;
use super::fingerprint::Fingerprint;

/// `[export] eval-questions` by default: at most this many questions of the test split are
/// scored by the pretrained LM (docs/decisions/420-export-eval-bound.md).
pub const DEFAULT_EVAL_QUESTIONS: usize = 100;

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
    /// At most this many items per annotation sheet (no sheet holds two items of one group).
    pub sheet_items: usize,
    /// Score the random assignment and the AF dataset with a pretrained causal LM, zero-shot, as
    /// `af eval` does (into `export/eval/`). Unset: when one is installed (`eval-model`, else
    /// `AF_CAUSAL_LM`, names a file), else skipped with a line that says why; `true`: a missing
    /// model is an error; `false`: never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval: Option<bool>,
    /// At most this many questions of the test split (the same ones in both datasets, drawn with
    /// the run's seed): SmolLM2-135M costs about 0.7 CPU-seconds per 4-way question and dataset.
    #[serde(skip_serializing_if = "equals::<DEFAULT_EVAL_QUESTIONS>")]
    pub eval_questions: usize,
    /// The pretrained LM's GGUF file (default: `AF_CAUSAL_LM`, which `scripts/setup --env` sets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_model: Option<PathBuf>,
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
            eval: None,
            eval_questions: DEFAULT_EVAL_QUESTIONS,
            eval_model: None,
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
        if self.eval_questions == 0 {
            return Err(
                "[export] eval-questions must be positive (eval = false scores none)".into(),
            );
        }
        if self.eval == Some(false)
            && (self.eval_model.is_some() || self.eval_questions != DEFAULT_EVAL_QUESTIONS)
        {
            return Err("[export] eval-model and eval-questions do nothing with eval = false: remove them, or eval".into());
        }
        Ok(())
    }

    /// The section as the export stage's fingerprint records it: every key changes what the
    /// stage writes (the task's name names its files, `annotation` adds the sheets). The eval
    /// keys came later: recorded away from their defaults; whether the LM runs by default, and
    /// which file it is, the stage records beside the section (it depends on what is installed).
    pub fn fingerprint(&self) -> serde_json::Value {
        let Self {
            train_share,
            validation_share,
            test_share,
            task,
            annotation,
            annotation_distractors,
            sheet_items,
            eval,
            eval_questions,
            eval_model,
        } = self;
        Fingerprint::default()
            .key("train-share", train_share)
            .key("validation-share", validation_share)
            .key("test-share", test_share)
            .key("task", task)
            .key("annotation", annotation)
            .key("annotation-distractors", annotation_distractors)
            .key("sheet-items", sheet_items)
            .later("eval", eval, &None)
            .later("eval-questions", eval_questions, &DEFAULT_EVAL_QUESTIONS)
            .later("eval-model", eval_model, &None)
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

    #[test]
    fn eval_keys_are_checked_and_fingerprinted_only_when_set() {
        use super::{ExportConfig, DEFAULT_EVAL_QUESTIONS};
        let err = checked("[export]\neval-questions = 0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("eval-questions must be positive"), "{err}");
        let err = checked("[export]\neval = false\neval-model = \"m.gguf\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("do nothing with eval = false"), "{err}");
        let c = checked("[export]\neval = true\neval-questions = 7\n").unwrap();
        assert_eq!((c.export.eval, c.export.eval_questions), (Some(true), 7));
        // A config that does not mention them keeps the fingerprint runs before them recorded.
        let d = ExportConfig::default();
        assert_eq!(d.eval_questions, DEFAULT_EVAL_QUESTIONS);
        let fp = d.fingerprint();
        assert!(fp.get("eval").is_none() && fp.get("eval-questions").is_none());
        assert_eq!(c.export.fingerprint()["eval-questions"], 7);
        assert_eq!(c.export.fingerprint()["eval"], true);
        assert!(!c.to_toml().contains("eval-model"));
        let printed = crate::Config::default().to_toml();
        assert!(!printed.contains("eval-questions") && !printed.contains("\neval = "));
    }
}
