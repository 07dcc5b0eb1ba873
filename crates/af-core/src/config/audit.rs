//! `[audit]`: the artifact detectors `af audit` runs, and the export stage runs on the AF dataset
//! and its random baseline.

use serde::{Deserialize, Serialize};

use super::committee::{member_names, MemberName};
use super::equals;
use super::fingerprint::Fingerprint;

/// What a learned detector of the audit reads of a question (SWAG's three columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum View {
    /// The ending alone.
    Ending,
    /// The start of the second sentence and the ending.
    SecondSentence,
    /// Context, second sentence and ending.
    Full,
}

impl View {
    pub const ALL: [View; 3] = [View::Ending, View::SecondSentence, View::Full];

    pub fn name(self) -> &'static str {
        match self {
            View::Ending => "ending",
            View::SecondSentence => "second-sentence",
            View::Full => "full",
        }
    }
}

/// `af audit`, and the detectors the export stage runs on the AF dataset and its random baseline.
/// The learned detectors take their sizes and training from `[committee]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct AuditConfig {
    /// Share of groups held out for evaluation when the data names no evaluation split.
    pub eval_share: f64,
    /// 1: one held-out evaluation split (a named split, or `eval_share` of the groups). K >= 2:
    /// cross-fitting over K group folds, every question scored by detectors trained on the other
    /// K - 1 (K times the training; intervals over every question instead of a fifth of them).
    #[serde(skip_serializing_if = "equals::<1>")]
    pub eval_folds: usize,
    pub views: Vec<View>,
    /// Architectures of the learned (partial-input) detectors, each trained on every view.
    pub models: Vec<MemberName>,
    /// A token enters the statistics once it occurs in at least this many options.
    pub token_min_count: usize,
    /// Family-wise error rate: tokens (Holm over all tested tokens) and detectors (Bonferroni
    /// over the audit's detectors) are flagged only past it.
    pub alpha: f64,
    /// Tokens listed in the report, most telling first.
    pub top_tokens: usize,
    /// Pair WinoGrande-style questions that carry no twin ids by word edit distance: two
    /// questions with the same options whose sentences differ by at most this many words are
    /// twins. 0 turns the pairing off.
    pub twin_max_edits: usize,
    /// Words that open a clause: the partial-sentence transform keeps only what follows the last
    /// of them before the blank.
    pub discourse_markers: Vec<String>,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            eval_share: 0.2,
            eval_folds: 1,
            views: View::ALL.to_vec(),
            models: member_names(&["ngram", "cnn", "lstm"]),
            token_min_count: 10,
            alpha: 0.05,
            top_tokens: 20,
            twin_max_edits: 3,
            discourse_markers: [
                "because",
                "but",
                "so",
                "although",
                "though",
                "since",
                "while",
                "when",
                "whereas",
                "after",
                "before",
                "until",
                "unless",
                "if",
                "and",
                "or",
                "therefore",
                "however",
                "as",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

impl AuditConfig {
    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.eval_share > 0.0 && self.eval_share < 1.0) {
            return Err(format!(
                "[audit] eval-share = {}: must be strictly between 0 and 1",
                self.eval_share
            ));
        }
        if self.eval_folds == 0 {
            return Err("[audit] eval-folds = 0: 1 for one held-out split, or at least 2 folds to cross-fit".into());
        }
        if !(self.alpha > 0.0 && self.alpha < 0.5) {
            return Err(format!(
                "[audit] alpha = {}: must be strictly between 0 and 0.5",
                self.alpha
            ));
        }
        Ok(())
    }

    /// The section as the export stage's and the cross-matrix's fingerprints record it. Every
    /// key changes the audit's report (`top-tokens` the tokens it lists).
    pub fn fingerprint(&self) -> serde_json::Value {
        let Self {
            eval_share,
            eval_folds,
            views,
            models,
            token_min_count,
            alpha,
            top_tokens,
            twin_max_edits,
            discourse_markers,
        } = self;
        let d = Self::default();
        Fingerprint::default()
            .key("eval-share", eval_share)
            .later("eval-folds", eval_folds, &d.eval_folds)
            .key("views", views)
            .key("models", models)
            .key("token-min-count", token_min_count)
            .key("alpha", alpha)
            .key("top-tokens", top_tokens)
            .key("twin-max-edits", twin_max_edits)
            .key("discourse-markers", discourse_markers)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use crate::config::checked;

    #[test]
    fn shares_folds_and_alpha_are_checked() {
        for (text, says) in [
            ("[audit]\neval-share = 1.0\n", "eval-share = 1"),
            ("[audit]\neval-folds = 0\n", "eval-folds = 0"),
            ("[audit]\nalpha = 0.5\n", "alpha = 0.5"),
        ] {
            let err = checked(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
        let c = checked("[audit]\neval-folds = 5\n").unwrap();
        assert_eq!(c.audit.fingerprint()["eval-folds"], 5);
        assert!(checked("")
            .unwrap()
            .audit
            .fingerprint()
            .get("eval-folds")
            .is_none());
    }
}
