//! `[tagger]`: the part-of-speech tagger that the pairs stage splits sentences with and the
//! committee's POS member reads.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct TaggerConfig {
    /// A tagger model written by `af tagger train`; absent means the model built into `af`.
    pub model: Option<PathBuf>,
}

impl TaggerConfig {
    /// The section as the pairs and filter stages' fingerprints record it (the model's path; the
    /// pairs stage records its content too).
    pub fn fingerprint(&self) -> serde_json::Value {
        let Self { model } = self;
        Fingerprint::default().key("model", model).finish()
    }
}
