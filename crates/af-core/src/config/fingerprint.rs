//! A config section as a stage's fingerprint records it (docs/decisions/320-fingerprint-by-section.md).
//!
//! Each section writes its own `fingerprint()` beside its struct, destructuring the struct
//! without `..`: a key added to a section does not compile until its author says whether it
//! changes the stage's outputs (`key`), changes them only away from the default that earlier runs
//! had (`later`), or cannot change them (left out, with a comment that says why). The printed
//! form (`Config::to_toml`) is serde's and no longer decides what a fingerprint holds.

use serde::Serialize;
use serde_json::{Map, Value};

/// A section's keys as a stage's fingerprint records them, spelled as the config file spells
/// them (so a fingerprint in `started.json` or `stage.json` reads like the config).
#[derive(Default)]
pub struct Fingerprint(Map<String, Value>);

impl Fingerprint {
    /// A key whose value changes the stage's outputs.
    pub fn key(mut self, name: &str, value: &impl Serialize) -> Self {
        let value = serde_json::to_value(value).expect("config values serialise to JSON");
        self.0.insert(name.to_string(), value);
        self
    }

    /// A key added after runs were fingerprinted: recorded only away from `default`, the value
    /// those runs had, so that they stay up to date.
    pub fn later<T: Serialize + PartialEq>(self, name: &str, value: &T, default: &T) -> Self {
        if value == default {
            self
        } else {
            self.key(name, value)
        }
    }

    pub fn finish(self) -> Value {
        Value::Object(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_key_is_recorded_only_away_from_its_default() {
        let at_default = Fingerprint::default()
            .key("k", &3)
            .later("top-p", &1.0, &1.0)
            .finish();
        assert_eq!(at_default, serde_json::json!({"k": 3}));
        let set = Fingerprint::default()
            .key("k", &3)
            .later("top-p", &0.9, &1.0)
            .later("model", &Some("m.gguf"), &None)
            .finish();
        assert_eq!(
            set,
            serde_json::json!({"k": 3, "top-p": 0.9, "model": "m.gguf"})
        );
    }
}
