//! What `af pairs` produces and every later stage reads.

use serde::{Deserialize, Serialize};

/// A run of consecutive sentences from one group (an ActivityNet video, a text file, the rows of
/// a CSV that share a group id). Pairs are made only between neighbours inside one document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    /// The group every item of this document belongs to: splits never separate a group.
    pub group: String,
    /// Explicit item id, for inputs that give whole pairs with their own id (one pair per document).
    pub id: Option<String>,
    pub sentences: Vec<String>,
    /// Where the document came from, for error messages: "file.json: video v_x" or "file.csv:12".
    pub origin: String,
}

/// One question before any endings are generated: context `s`, the noun phrase `n` that starts the
/// second sentence, and the gold ending `v` (the rest of the second sentence).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Item {
    pub id: String,
    pub group: String,
    pub fold: u32,
    pub context: String,
    pub noun_phrase: String,
    pub ending: String,
    pub context_tokens: u32,
    pub noun_phrase_tokens: u32,
    pub ending_tokens: u32,
    /// The wrong options the item came with, when it was read from a multiple-choice dataset
    /// (`questions` inputs): they join its pool before any generated ending, as candidates
    /// 1..=len, in the dataset's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub distractors: Vec<String>,
}

impl Item {
    /// The second sentence as it was found: noun phrase, a space, then the ending.
    pub fn sentence2(&self) -> String {
        format!("{} {}", self.noun_phrase, self.ending)
    }
}

/// The LM features of an ending (docs/design.md §1.2), in the order every file and model uses.
/// Log-perplexities are mean negative log-likelihoods per token (natural log); lengths in tokens.
pub const LM_FEATURES: [&str; 8] = [
    "fwd_logppl_v_given_sn",
    "bwd_logppl_v",
    "bwd_logppl_sn_given_v",
    "fwd_logppl_s",
    "fwd_logprob_last_token",
    "len_v",
    "len_n",
    "len_s",
];

/// One row of the candidate pool: an ending of an item, the gold one (candidate 0) or generated.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Position of the item in `items.jsonl`.
    pub item_index: u32,
    pub item_id: String,
    pub fold: u32,
    /// 0 for the gold ending, 1.. for generated ones in the order they were drawn.
    pub candidate: u32,
    pub ending: String,
    pub tokens: u32,
    /// Generated and cut at the token limit rather than ended by punctuation.
    pub truncated: bool,
    pub features: [f32; 8],
    /// Where the ending came from: [`GOLD_ORIGIN`] for candidate 0, else the name of the
    /// generate stage's ending source that gave it (`own`, `borrowed`, `pretrained`,
    /// `sampled`). None in a pool written before the pool stored it.
    pub origin: Option<String>,
}

/// The origin of a pool's gold endings.
pub const GOLD_ORIGIN: &str = "gold";

impl Candidate {
    pub fn is_gold(&self) -> bool {
        self.candidate == 0
    }
}
