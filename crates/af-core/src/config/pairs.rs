//! `[pairs]` and its `[[pairs.inputs]]`: which inputs become items, the token limits, the folds.
//! An input's spec is also `[[lm.pretrain]]`'s.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;
use super::is_default;

/// `af pairs`: which inputs, which filters, how many folds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct PairsConfig {
    pub inputs: Vec<InputSpec>,
    /// Cross-fitting folds, assigned by group.
    pub folds: u32,
    pub min_context_tokens: u32,
    pub max_context_tokens: u32,
    pub min_ending_tokens: u32,
    pub max_ending_tokens: u32,
    /// Where adverbs between the subject and its verb go: SWAG's convention keeps them with the
    /// noun phrase ("The lady then | shaves ..."); `ending` is af's convention before 2026-12-01.
    pub adverbs: AdverbSide,
}

/// The side of the split that takes the adverbs between a subject and its verb.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdverbSide {
    /// "The lady then | shaves her legs." (SWAG's files: `sent2` = "The lady then").
    #[default]
    NounPhrase,
    /// "The lady | then shaves her legs."
    Ending,
}

impl Default for PairsConfig {
    fn default() -> Self {
        Self {
            inputs: Vec::new(),
            folds: 5,
            min_context_tokens: 6,
            max_context_tokens: 100,
            min_ending_tokens: 5,
            max_ending_tokens: 25,
            adverbs: AdverbSide::NounPhrase,
        }
    }
}

impl PairsConfig {
    /// Checks what serde cannot; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.folds < 2 {
            return Err(format!(
                "[pairs] folds = {}: cross-fitting needs at least 2",
                self.folds
            ));
        }
        if self.min_context_tokens > self.max_context_tokens {
            return Err("[pairs] min-context-tokens is larger than max-context-tokens".into());
        }
        if self.min_ending_tokens > self.max_ending_tokens || self.min_ending_tokens == 0 {
            return Err("[pairs] needs 1 <= min-ending-tokens <= max-ending-tokens".into());
        }
        self.inputs.iter().try_for_each(InputSpec::validate)
    }

    /// The section as the pairs stage's fingerprint records it (the inputs' contents beside it).
    pub fn fingerprint(&self) -> serde_json::Value {
        let Self {
            inputs,
            folds,
            min_context_tokens,
            max_context_tokens,
            min_ending_tokens,
            max_ending_tokens,
            adverbs,
        } = self;
        Fingerprint::default()
            .key("inputs", &fingerprints(inputs))
            .key("folds", folds)
            .key("min-context-tokens", min_context_tokens)
            .key("max-context-tokens", max_context_tokens)
            .key("min-ending-tokens", min_ending_tokens)
            .key("max-ending-tokens", max_ending_tokens)
            .key("adverbs", adverbs)
            .finish()
    }

    /// Whether every input is a `questions` input, whose options make the pool.
    pub fn only_questions(&self) -> bool {
        !self.inputs.is_empty()
            && self
                .inputs
                .iter()
                .all(|i| i.format == InputFormat::Questions)
    }
}

/// The fingerprints of `inputs`, in order.
pub(crate) fn fingerprints(inputs: &[InputSpec]) -> Vec<serde_json::Value> {
    inputs.iter().map(InputSpec::fingerprint).collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InputFormat {
    /// `{video_id: {sentences: [...], ...}}` as ActivityNet Captions ships it.
    Activitynet,
    Csv,
    Jsonl,
    /// Plain text: one document per file (a directory means every `*.txt` in it).
    Text,
    /// A multiple-choice dataset in any layout `af audit` reads (`layout` names it when the
    /// first line does not tell): each question is an item as it stands (context, the start of
    /// the second sentence, the right ending), and its wrong options join its candidate pool.
    Questions,
}

impl fmt::Display for InputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InputFormat::Activitynet => "activitynet",
            InputFormat::Csv => "csv",
            InputFormat::Jsonl => "jsonl",
            InputFormat::Text => "text",
            InputFormat::Questions => "questions",
        })
    }
}

/// One input of `af pairs`. CSV and JSONL come in two shapes: sentence rows (`group-field` and
/// `text-field`; consecutive rows of a group are consecutive sentences) or pair rows
/// (`context-field` and `sentence2-field`, optionally `id-field`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct InputSpec {
    pub path: PathBuf,
    pub format: InputFormat,
    #[serde(default, skip_serializing_if = "is_default")]
    pub group_field: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub text_field: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub context_field: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub sentence2_field: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub id_field: Option<String>,
    /// CSV only: the field delimiter (default ",").
    #[serde(default, skip_serializing_if = "is_default")]
    pub delimiter: Option<char>,
    /// `questions` only: the dataset's layout (one of those af-io's `questions` lists, named in
    /// docs/formats.md) when its first line does not tell.
    #[serde(default, skip_serializing_if = "is_default")]
    pub layout: Option<String>,
    /// `questions` only: leave out (and list in the pairs report) the questions that cannot be
    /// read or have too few options, instead of stopping.
    #[serde(default, skip_serializing_if = "is_default")]
    pub skip_bad: bool,
    /// `text` only: how the files' bytes are characters (default UTF-8).
    #[serde(default, skip_serializing_if = "is_default")]
    pub encoding: TextEncoding,
    /// Where the text comes from, for the dataset card (`export/README.md`): "unknown" there
    /// when not given.
    #[serde(default, skip_serializing_if = "is_default")]
    pub source: Option<String>,
    /// The text's licence or terms of use, for the dataset card: "unknown" there when not given.
    /// A Hugging Face licence identifier (`cc-by-4.0`, `mit`) goes into the card's header as it
    /// is; anything else as `other`, with this text as its name.
    #[serde(default, skip_serializing_if = "is_default")]
    pub license: Option<String>,
}

/// The character encoding of a `text` input. af reads UTF-8; Latin-1 (ISO-8859-1) is common in
/// older corpora (Project Gutenberg's 8-bit files) and maps each byte to one character.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TextEncoding {
    #[default]
    #[serde(rename = "utf-8")]
    Utf8,
    #[serde(rename = "latin-1")]
    Latin1,
}

impl TextEncoding {
    pub fn is_utf8(&self) -> bool {
        *self == TextEncoding::Utf8
    }
}

/// How a CSV/JSONL input lays out its text, once validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordLayout {
    Sentences {
        group: String,
        text: String,
    },
    Pairs {
        group: Option<String>,
        context: String,
        sentence2: String,
        id: Option<String>,
    },
}

impl InputSpec {
    /// An input of `format` at `path` with no field names and the default delimiter.
    pub fn new(path: impl Into<PathBuf>, format: InputFormat) -> Self {
        Self {
            path: path.into(),
            format,
            group_field: None,
            text_field: None,
            context_field: None,
            sentence2_field: None,
            id_field: None,
            delimiter: None,
            layout: None,
            skip_bad: false,
            encoding: TextEncoding::Utf8,
            source: None,
            license: None,
        }
    }

    /// Checks that the keys given belong to the input's format.
    pub fn validate(&self) -> Result<(), String> {
        if matches!(self.format, InputFormat::Csv | InputFormat::Jsonl) {
            self.record_layout()?;
        }
        if self.format != InputFormat::Questions && (self.layout.is_some() || self.skip_bad) {
            return Err(format!(
                "input {}: `layout` and `skip-bad` belong to `questions` inputs",
                self.path.display()
            ));
        }
        if self.format != InputFormat::Text && !self.encoding.is_utf8() {
            return Err(format!("input {}: `encoding` belongs to `text` inputs (CSV, JSON and JSONL are read as UTF-8)", self.path.display()));
        }
        Ok(())
    }

    /// Checks that the fields given make one of the two record layouts.
    pub fn record_layout(&self) -> Result<RecordLayout, String> {
        let both = |a: &Option<String>, b: &Option<String>| a.is_some() && b.is_some();
        match (&self.text_field, &self.context_field, &self.sentence2_field) {
            (Some(text), None, None) => match &self.group_field {
                Some(group) => Ok(RecordLayout::Sentences { group: group.clone(), text: text.clone() }),
                None => Err(format!(
                    "input {}: `text-field` needs `group-field` (which rows belong to one document)",
                    self.path.display()
                )),
            },
            (None, Some(context), Some(sentence2)) => Ok(RecordLayout::Pairs {
                group: self.group_field.clone(),
                context: context.clone(),
                sentence2: sentence2.clone(),
                id: self.id_field.clone(),
            }),
            _ if both(&self.context_field, &self.text_field) || both(&self.sentence2_field, &self.text_field) => {
                Err(format!(
                    "input {}: give either `text-field` (sentence rows) or `context-field` and `sentence2-field` (pair rows), not both",
                    self.path.display()
                ))
            }
            _ => Err(format!(
                "input {}: a {} input needs `group-field` and `text-field` (sentence rows) or `context-field` and `sentence2-field` (pair rows)",
                self.path.display(),
                self.format
            )),
        }
    }

    /// The input as a fingerprint records it (its path and how it is read; its content is
    /// stamped by the stage that reads it). `source` and `license` are left out: they describe
    /// the text for the dataset card and change no item (the export, which writes the card,
    /// records them).
    pub fn fingerprint(&self) -> serde_json::Value {
        let Self {
            path,
            format,
            group_field,
            text_field,
            context_field,
            sentence2_field,
            id_field,
            delimiter,
            layout,
            skip_bad,
            encoding,
            source: _,
            license: _,
        } = self;
        Fingerprint::default()
            .key("path", path)
            .key("format", format)
            .later("group-field", group_field, &None)
            .later("text-field", text_field, &None)
            .later("context-field", context_field, &None)
            .later("sentence2-field", sentence2_field, &None)
            .later("id-field", id_field, &None)
            .later("delimiter", delimiter, &None)
            .later("layout", layout, &None)
            .later("skip-bad", skip_bad, &false)
            .later("encoding", encoding, &TextEncoding::Utf8)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{checked, Config};
    use std::path::Path;

    #[test]
    fn encoding_is_a_text_input_key() {
        let text =
            "[[pairs.inputs]]\npath = \"novels\"\nformat = \"text\"\nencoding = \"latin-1\"\n";
        let c = Config::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(c.pairs.inputs[0].encoding, TextEncoding::Latin1);
        assert_eq!(Config::parse(&c.to_toml(), Path::new("r.toml")).unwrap(), c);
        let csv = "[[pairs.inputs]]\npath = \"a.csv\"\nformat = \"csv\"\ngroup-field = \"g\"\ntext-field = \"t\"\nencoding = \"latin-1\"\n";
        let err = checked(csv).unwrap_err().to_string();
        assert!(err.contains("`encoding` belongs to `text` inputs"), "{err}");
        let bad = text.replace("latin-1", "cp1252");
        assert!(Config::parse(&bad, Path::new("c.toml")).is_err());
    }

    #[test]
    fn source_and_license_describe_the_text_without_changing_the_pairs_fingerprint() {
        let plain = "[[pairs.inputs]]\npath = \"a.json\"\nformat = \"activitynet\"\n";
        let described =
            format!("{plain}source = \"ActivityNet Captions\"\nlicense = \"cc-by-4.0\"\n");
        let (a, b) = (checked(plain).unwrap(), checked(&described).unwrap());
        assert_eq!(b.pairs.inputs[0].license.as_deref(), Some("cc-by-4.0"));
        assert_eq!(a.pairs.fingerprint(), b.pairs.fingerprint());
        assert_eq!(Config::parse(&b.to_toml(), Path::new("r.toml")).unwrap(), b);
        assert!(!a.to_toml().contains("license"));
    }

    #[test]
    fn csv_input_without_a_layout_is_rejected() {
        let err =
            checked("[[pairs.inputs]]\npath = \"a.csv\"\nformat = \"csv\"\ntext-field = \"t\"\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains("needs `group-field`"), "{err}");
        // The same rule holds for the LM's pretraining inputs.
        let err =
            checked("[[lm.pretrain]]\npath = \"a.csv\"\nformat = \"csv\"\ntext-field = \"t\"\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains("needs `group-field`"), "{err}");
    }

    #[test]
    fn the_folds_and_token_limits_are_checked() {
        for (text, says) in [
            ("[pairs]\nfolds = 1\n", "[pairs] folds = 1"),
            (
                "[pairs]\nmin-context-tokens = 200\n",
                "min-context-tokens is larger",
            ),
            ("[pairs]\nmin-ending-tokens = 0\n", "1 <= min-ending-tokens"),
        ] {
            let err = checked(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
