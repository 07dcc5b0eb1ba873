//! A multiple-choice question as the audit sees it, whatever file it came from: SWAG, HellaSwag,
//! WinoGrande, a generic JSONL, or af's own exports.

use serde::{Deserialize, Serialize};

/// One question. The three text fields follow SWAG's split of an input, so the partial-input
/// views (ending only, second sentence only, full input) mean the same for every layout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Question {
    pub id: String,
    /// Questions of one group (a video, a source document, a WinoGrande twin pair) always fall on
    /// the same side of a split.
    pub group: String,
    /// The first sentence (SWAG `sent1`, HellaSwag `ctx_a`, the WinoGrande sentence up to its
    /// blank); may be empty.
    pub context: String,
    /// The start of the second sentence that every ending continues (SWAG `sent2`, HellaSwag
    /// `ctx_b`); may be empty.
    pub prefix: String,
    pub endings: Vec<String>,
    /// Index of the right ending.
    pub label: usize,
    /// The split the file assigns (`train`, `val`, ...), if it says.
    pub split: Option<String>,
    /// The sentence with its blank, for WinoGrande-style questions.
    pub blank: Option<Blank>,
    /// Line (1-based) of the question in its file, for messages.
    pub line: usize,
}

/// A sentence with one blank (`_`) that one of the options fills.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Blank {
    pub before: String,
    pub after: String,
    pub options: Vec<String>,
}

impl Blank {
    /// Option `i` put into the blank: the ending of the question's `i`-th choice.
    pub fn filled_ending(&self, i: usize) -> String {
        join_text(&self.options[i], &self.after)
    }
}

impl Question {
    /// 1 / number of options.
    pub fn chance(&self) -> f64 {
        1.0 / self.endings.len().max(1) as f64
    }
}

/// Joins two pieces of running text with one space, none before closing punctuation.
pub fn join_text(a: &str, b: &str) -> String {
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        return b.to_string();
    }
    if b.is_empty() {
        return a.to_string();
    }
    if b.starts_with([',', '.', ';', ':', '!', '?', '\'', ')']) {
        format!("{a}{b}")
    } else {
        format!("{a} {b}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_text_without_space_before_punctuation() {
        assert_eq!(join_text("Ian", "despised eating."), "Ian despised eating.");
        assert_eq!(join_text("Ian", "'s menudo"), "Ian's menudo");
        assert_eq!(join_text("the man", ", then"), "the man, then");
        assert_eq!(join_text("", " x "), "x");
    }
}
