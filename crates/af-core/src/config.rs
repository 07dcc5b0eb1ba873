//! The run configuration: one TOML file, one serde struct per stage, every field defaulted.
//!
//! Keys are kebab-case (`min-context-tokens`), unknown keys are errors that name the key, the file
//! and the line, and relative paths are resolved against the directory of the file that names
//! them, so a config means the same thing from any working directory. The resolved config (paths
//! made absolute) is what each stage writes next to its artifacts.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::ablate::AblateConfig;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    pub run: RunConfig,
    pub tagger: TaggerConfig,
    pub pairs: PairsConfig,
    pub lm: LmConfig,
    pub generate: GenerateConfig,
    pub committee: CommitteeConfig,
    pub filter: FilterConfig,
    pub export: ExportConfig,
    pub audit: AuditConfig,
    /// `af ablate` only; absent from the resolved config of a run that does not set it.
    #[serde(skip_serializing_if = "AblateConfig::is_default")]
    pub ablate: AblateConfig,
}

/// Where artifacts go and what every stage shares.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct RunConfig {
    /// The run directory; each stage writes into a subdirectory named after it.
    pub dir: PathBuf,
    /// The seed every random choice of the run derives from.
    pub seed: u64,
    /// CPU threads for rayon and libtorch; 0 means one per core.
    pub threads: usize,
    /// "auto" (CUDA when available), "cpu", "cuda" or "cuda:N".
    pub device: String,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("runs/default"),
            seed: 13,
            threads: 0,
            device: "auto".into(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct TaggerConfig {
    /// A tagger model written by `af tagger train`; absent means the model built into `af`.
    pub model: Option<PathBuf>,
}

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
    #[serde(skip_serializing_if = "Option::is_none")]
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

/// `af generate`: candidate endings per item, sampled from the LM that never saw its fold.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct GenerateConfig {
    /// Unique endings wanted per item (SWAG: 1023, so that with the gold there are 1024).
    pub endings: usize,
    /// An ending stops at `.`, `!` or `?`, or after this many tokens.
    pub max_tokens: usize,
    pub temperature: f64,
    /// Draw among the k most likely next tokens only (0: all).
    #[serde(skip_serializing_if = "is_zero")]
    pub top_k: usize,
    /// Nucleus sampling: draw among the fewest most likely tokens whose probability reaches p
    /// (1: all).
    #[serde(skip_serializing_if = "is_one")]
    pub top_p: f64,
    /// Endings breaking these rules are not kept (more are sampled in later rounds); every rule
    /// is counted in the report either way.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reject: Vec<ValidityRule>,
    /// `near-copy`: the share of the gold's words an ending may share before it is one.
    #[serde(skip_serializing_if = "is_default_overlap")]
    pub near_copy_overlap: f64,
    /// `length-gap`: how many tokens longer or shorter than the gold an ending may be.
    #[serde(skip_serializing_if = "is_default_gap")]
    pub max_length_gap: usize,
    /// Sampling rounds per item before it keeps what it has.
    pub max_rounds: usize,
    /// Items processed together and written as one part of the pool: the unit of resuming and
    /// of sharding, and the bound on memory (this many items' candidates are held at once).
    pub block_items: usize,
    /// Sequences sampled in one batch on the device.
    pub batch_sequences: usize,
    /// Generate for the first this-many items only (0: all), for trials on a CPU.
    pub limit_items: usize,
    /// Borrowed endings per item: gold endings of other items of its fold (other groups, and items
    /// past `limit-items` first), joined to its pool before the sampled ones. Human-written, so
    /// fluent; wrong mostly because they belong to another video. 0: SWAG's pool, sampled only.
    #[serde(skip_serializing_if = "is_zero")]
    pub borrowed_endings: usize,
    /// Borrow only endings that begin as the item's own gold does (af-text's `validity::onset`:
    /// the same verb form or word class past adverbs), so that one read after the item's noun
    /// phrase agrees with it: `runs` after "The man", `run` after "Two men". Off by default so
    /// that runs made before it keep their fingerprints.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub borrowed_agree: bool,
    /// Endings per item written by a pretrained causal LM (af-nn's `causal_lm`; by default
    /// SmolLM2-135M, which `scripts/setup` installs), prompted with the item's context and noun
    /// phrase and sampled with this section's temperature, top-k, top-p and `max-tokens`. English
    /// from the first draw, unlike the endings of af's own small LMs; they join the pool after the
    /// borrowed endings, and af's LMs give them LM features as to every ending. 0: none.
    #[serde(skip_serializing_if = "is_zero")]
    pub pretrained_endings: usize,
    /// The pretrained generator's GGUF file (a Llama-architecture model with a byte-level BPE
    /// tokenizer); default: `AF_CAUSAL_LM`, which `scripts/setup --env` sets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pretrained_model: Option<PathBuf>,
    /// Example captions in the generator's prompt: this many other items' context and gold
    /// second sentence, one pair a line, before the item's own (other videos, past the questions
    /// while there are such). They show a web-trained LM the captions' style.
    #[serde(skip_serializing_if = "is_zero")]
    pub pretrained_examples: usize,
    /// Sequences the pretrained generator continues at once: its key/value cache (about 3 MB a
    /// sequence for SmolLM2-135M) is the memory bound.
    #[serde(skip_serializing_if = "is_default_pretrained_batch")]
    pub pretrained_batch: usize,
    /// Length shaping of pretrained endings (0: none): each ending aims at a length
    /// (`pretrained-length-target`); the generator may not end a sentence more than half of
    /// `max-length-gap` words short of it, and past it this many nats per word are added to its
    /// sentence-end tokens' logits. A web-trained model writes longer than captions do, and the
    /// `length-gap` rule otherwise turns many of its draws away (docs/decisions.md).
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub pretrained_length_bias: f64,
    /// The length each shaped ending aims at; see [`LengthTarget`].
    #[serde(skip_serializing_if = "LengthTarget::is_default")]
    pub pretrained_length_target: LengthTarget,
    /// Arithmetic of sampling and scoring (see [`Precision`]); `generate/report.json` records
    /// what was used and, for `mixed`, how far it moved the numbers.
    #[serde(skip_serializing_if = "Precision::is_auto")]
    pub precision: Precision,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        Self {
            endings: 1023,
            max_tokens: 25,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            reject: Vec::new(),
            near_copy_overlap: DEFAULT_NEAR_COPY_OVERLAP,
            max_length_gap: DEFAULT_MAX_LENGTH_GAP,
            max_rounds: 6,
            block_items: 64,
            batch_sequences: 16384,
            limit_items: 0,
            borrowed_endings: 0,
            borrowed_agree: false,
            pretrained_endings: 0,
            pretrained_model: None,
            pretrained_examples: 0,
            pretrained_batch: DEFAULT_PRETRAINED_BATCH,
            pretrained_length_bias: 0.0,
            pretrained_length_target: LengthTarget::NearbyGold,
            precision: Precision::Auto,
        }
    }
}

/// What length a shaped pretrained ending aims at (`[generate] pretrained-length-target`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LengthTarget {
    /// Per ending, the gold length of another item (another video, past the questions while there
    /// are such) whose gold is within `max-length-gap` tokens of this item's own: the lengths
    /// `other-gold` draws, less those the `length-gap` rule would turn away anyway, so fewer draws
    /// are wasted while the kept distractors' lengths stay those `other-gold` keeps
    /// (docs/decisions.md).
    #[default]
    NearbyGold,
    /// Per ending, the gold length of another item, drawn at random (another video, past the
    /// questions while there are such): distractors' lengths follow the captions' distribution,
    /// independent of the item's own gold, until the `length-gap` rule judges them. The default
    /// until 2026-12-04, kept to reproduce the runs measured with it.
    OtherGold,
    /// The item's own gold length. Distractors then cluster around the gold's length, which
    /// makes the gold the most typical length among its options: a detector that picks the option
    /// closest to the options' median length reads it (docs/results.md). Kept to reproduce the
    /// first shaped run.
    Gold,
}

impl LengthTarget {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// A validity rule for generated endings (af-text's `validity` module holds the rules): why an
/// ending is not a good distractor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ValidityRule {
    /// Shares most of its words with the gold ending: a second right answer.
    NearCopy,
    /// A word three times in a row, or a content word three times.
    Repeat,
    /// Stops on a determiner, adposition, conjunction or "to".
    Dangling,
    /// No verb.
    NoVerb,
    /// Much longer or shorter than the gold ending.
    LengthGap,
}

impl ValidityRule {
    pub const ALL: [ValidityRule; 5] = [
        ValidityRule::NearCopy,
        ValidityRule::Repeat,
        ValidityRule::Dangling,
        ValidityRule::NoVerb,
        ValidityRule::LengthGap,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ValidityRule::NearCopy => "near-copy",
            ValidityRule::Repeat => "repeat",
            ValidityRule::Dangling => "dangling",
            ValidityRule::NoVerb => "no-verb",
            ValidityRule::LengthGap => "length-gap",
        }
    }

    /// The rules that read the ending alone (the gold can be checked against them too).
    pub fn of_the_ending_alone(self) -> bool {
        matches!(
            self,
            ValidityRule::Repeat | ValidityRule::Dangling | ValidityRule::NoVerb
        )
    }
}

/// The arithmetic of inference on the device.
///
/// `mixed` runs libtorch's CUDA autocast: matrix products and LSTMs in fp16 on tensor cores,
/// softmaxes and sums in fp32. `auto` is `mixed` on a GPU and `fp32` on the CPU (where autocast
/// does nothing). Not written into configs when `auto`, so that run directories made before the
/// key existed stay up to date.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    #[default]
    Auto,
    Fp32,
    Mixed,
}

impl Precision {
    pub fn is_auto(&self) -> bool {
        *self == Precision::Auto
    }

    /// Whether to run in mixed precision on a device that is (or is not) a GPU.
    pub fn mixed_on(self, gpu: bool) -> bool {
        gpu && self != Precision::Fp32
    }
}

/// How many candidates one scoring pass holds: `"auto"` (the default) or a number.
///
/// A pass's activations grow with candidates x tokens, and on the CPU they are the whole of a
/// stage's memory: 8,192 candidates of 32 tokens through SWAG's committee peaked at 4.2 GB, where
/// 512 peaked under 2 GB and scored faster (caches; docs/benchmarks.md). A GPU wants large
/// passes to fill it. So `auto` is [`ScoreBatch::AUTO_GPU`] on a GPU and [`ScoreBatch::AUTO_CPU`]
/// on the CPU. Not written into configs when `auto`: the number is the device's, not the run's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScoreBatch {
    #[default]
    Auto,
    Candidates(usize),
}

impl ScoreBatch {
    pub const AUTO_GPU: usize = 8192;
    pub const AUTO_CPU: usize = 512;

    pub fn is_auto(&self) -> bool {
        *self == ScoreBatch::Auto
    }

    /// The candidates per pass on a device that is (or is not) a GPU.
    pub fn candidates_on(self, gpu: bool) -> usize {
        match self {
            ScoreBatch::Candidates(n) => n,
            ScoreBatch::Auto if gpu => Self::AUTO_GPU,
            ScoreBatch::Auto => Self::AUTO_CPU,
        }
    }
}

impl Serialize for ScoreBatch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ScoreBatch::Auto => s.serialize_str("auto"),
            ScoreBatch::Candidates(n) => s.serialize_u64(*n as u64),
        }
    }
}

impl<'de> Deserialize<'de> for ScoreBatch {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ScoreBatch;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"auto\" or a positive number of candidates")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ScoreBatch, E> {
                match v {
                    "auto" => Ok(ScoreBatch::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ScoreBatch, E> {
                match usize::try_from(v) {
                    Ok(n) if n > 0 => Ok(ScoreBatch::Candidates(n)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Unsigned(v), &self)),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ScoreBatch, E> {
                u64::try_from(v)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
                    .and_then(|v| self.visit_u64(v))
            }
        }
        d.deserialize_any(Visitor)
    }
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentence2_field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_field: Option<String>,
    /// CSV only: the field delimiter (default ",").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delimiter: Option<char>,
    /// `questions` only: the dataset's layout (swag, swag-full, hellaswag, winogrande, generic,
    /// af) when its first line does not tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// `questions` only: leave out (and list in the pairs report) the questions that cannot be
    /// read or have too few options, instead of stopping.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_bad: bool,
    /// `text` only: how the files' bytes are characters (default UTF-8).
    #[serde(default, skip_serializing_if = "TextEncoding::is_utf8")]
    pub encoding: TextEncoding,
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
        }
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
}

/// A committee member's name, as configs, metrics and the member registry (af-nn) spell it.
///
/// A name rather than an enum: the registry is open (a new member is one file in af-nn, and a
/// test may register its own), so af-core cannot list the members. Configs are checked against
/// the registry once, when they are loaded (`af_pipeline::load_config`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemberName(String);

impl MemberName {
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MemberName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for MemberName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

/// SWAG's committee, the default full phase of the schedule.
pub const SWAG_COMMITTEE: [&str; 4] = ["mlp", "bow", "cnn", "pos-lstm"];

/// The names of `names`, as member names.
pub fn member_names(names: &[&str]) -> Vec<MemberName> {
    names.iter().map(|n| MemberName::new(*n)).collect()
}

/// The joint head's name in metrics and configs.
pub const JOINT_HEAD: &str = "joint";

/// The committee's sizes and training; defaults are the paper's where it gives them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct CommitteeConfig {
    /// A joint head over the members' concatenated representations.
    pub joint: bool,
    /// Word (and POS) embedding size of the text members.
    pub embedding: i64,
    /// Embedding size of the noun-phrase/ending indicator.
    pub indicator_embedding: i64,
    pub mlp_hidden: i64,
    /// Alpha-dropout of the feature MLP (SELU keeps its self-normalisation under it).
    pub mlp_dropout: f64,
    pub cnn_widths: Vec<i64>,
    pub cnn_filters: i64,
    /// Hidden units per direction of the POS BiLSTM.
    pub lstm_hidden: i64,
    /// Words the POS BiLSTM sees as themselves; every other token is its POS tag.
    pub pos_words: usize,
    /// Hash buckets for the word bigrams of the n-gram member.
    pub ngram_buckets: i64,
    /// The joint head's hidden layer.
    pub joint_hidden: i64,
    /// Dropout on the text members' representations and the joint head.
    pub dropout: f64,
    /// Vocabulary of the text members: the most frequent words of the pool, at most this many.
    pub max_vocab: usize,
    /// At most this many epochs per AF iteration ...
    pub epochs: usize,
    /// ... stopping when the heads' mean accuracy on a validation slice of the training items
    /// (this share) stops improving; the best epoch's weights are kept. 0: no validation.
    pub validation_share: f64,
    /// Items per training step, each with its k+1 options.
    pub batch_items: usize,
    pub learning_rate: f64,
    pub clip_norm: f64,
    /// Candidates per forward pass when scoring the pool: see [`ScoreBatch`].
    #[serde(skip_serializing_if = "ScoreBatch::is_auto")]
    pub score_batch: ScoreBatch,
    /// A candidate (or an audited option) longer than this many tokens keeps its last this-many:
    /// memory stays bounded by the batch, whatever one row holds. Rows cut are counted.
    pub max_tokens: usize,
    /// Arithmetic of scoring (training is always fp32): see [`Precision`].
    #[serde(skip_serializing_if = "Precision::is_auto")]
    pub precision: Precision,
    /// Per-member settings, `[committee.member.NAME]`: each member reads its own table (its keys
    /// are documented beside its code in af-nn), which overlays the flat keys above
    /// (`cnn-filters` and the like, the older spelling, still the committee-wide default).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub member: BTreeMap<String, toml::Table>,
}

impl Default for CommitteeConfig {
    fn default() -> Self {
        Self {
            joint: true,
            embedding: 100,
            indicator_embedding: 16,
            mlp_hidden: 1024,
            mlp_dropout: 0.2,
            cnn_widths: vec![2, 3, 4, 5],
            cnn_filters: 128,
            lstm_hidden: 200,
            pos_words: 100,
            ngram_buckets: 100_000,
            joint_hidden: 512,
            dropout: 0.2,
            max_vocab: 30_000,
            epochs: 3,
            validation_share: 0.1,
            batch_items: 64,
            learning_rate: 1e-3,
            clip_norm: 1.0,
            score_batch: ScoreBatch::Auto,
            max_tokens: 256,
            precision: Precision::Auto,
            member: BTreeMap::new(),
        }
    }
}

/// How many easy distractors an item may swap per iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BudgetRule {
    /// SWAG: min(n-easy, #easy, #adversarial).
    Fixed,
    /// HellaSwag: 0 swaps at pairwise accuracy <= 0.525, 1 at <= 0.575, else 2.
    PairwiseAccuracy,
}

/// Which head's scores decide the swaps. Spelled in configs as "joint", "best-member" or a
/// member's name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum SwapHead {
    /// The joint head over every member's representation.
    Joint,
    /// The member with the best held-out (k+1)-way accuracy in this iteration.
    BestMember,
    /// One member, by name (it must be in every phase).
    Member(MemberName),
}

impl From<String> for SwapHead {
    fn from(s: String) -> Self {
        match s.as_str() {
            JOINT_HEAD => SwapHead::Joint,
            "best-member" => SwapHead::BestMember,
            _ => SwapHead::Member(MemberName::new(s)),
        }
    }
}

impl From<SwapHead> for String {
    fn from(h: SwapHead) -> String {
        match h {
            SwapHead::Joint => JOINT_HEAD.into(),
            SwapHead::BestMember => "best-member".into(),
            SwapHead::Member(m) => m.0,
        }
    }
}

/// One phase of the AF schedule: a committee composition run for some iterations (SWAG: the MLP
/// alone, then the whole committee). `[[filter.stages]]` in configs, the key it always had;
/// "stage" in af's code means a pipeline stage only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Phase {
    pub name: String,
    pub members: Vec<MemberName>,
    pub iterations: usize,
    /// The head whose scores decide this phase's swaps, when not `[filter] swap-head` (for
    /// example a phase driven by its fine-tuned `encoder-ft`, HellaSwag's adversary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_head: Option<SwapHead>,
}

impl Phase {
    /// The head that drives this phase: its own `swap-head`, else `default` (`[filter] swap-head`).
    pub fn driving<'a>(&'a self, default: &'a SwapHead) -> &'a SwapHead {
        self.swap_head.as_ref().unwrap_or(default)
    }

    /// Err when the head driving this phase cannot be there: a member it does not have, or the
    /// joint head without one. `within` names where the phase is, for the message.
    pub fn check_driving(
        &self,
        default: &SwapHead,
        joint: bool,
        within: &str,
    ) -> Result<(), String> {
        let (head, key) = match &self.swap_head {
            Some(h) => (
                h,
                format!("its swap-head = \"{}\"", String::from(h.clone())),
            ),
            None => (
                default,
                format!("[filter] swap-head = \"{}\"", String::from(default.clone())),
            ),
        };
        match head {
            SwapHead::Joint if !joint => Err(format!("{within} stage `{}`: {key} but [committee] joint = false", self.name)),
            SwapHead::Member(m) if !self.members.contains(m) => {
                Err(format!("{within} stage `{}`: {key}, but the stage does not have that member (use \"joint\" or \"best-member\", or give the stage its own swap-head)", self.name))
            }
            _ => Ok(()),
        }
    }
}

/// `af filter`: the AF loop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct FilterConfig {
    /// Distractors per question (k + 1 options).
    pub k: usize,
    /// Share of groups trained on in each iteration; the rest is held out, scored and filtered.
    pub train_share: f64,
    /// The head whose scores decide the swaps: "joint", "best-member", or a member's name.
    pub swap_head: SwapHead,
    pub budget: BudgetRule,
    /// Easy distractors swapped per item and iteration at most (the fixed budget).
    pub n_easy: usize,
    /// A stage ends early once the driving head's held-out accuracy stays within epsilon of
    /// chance (1/(k+1)) ...
    pub epsilon: f64,
    /// ... for this many iterations in a row.
    pub patience: usize,
    /// The schedule's phases, in order.
    pub stages: Vec<Phase>,
    /// Which of an item's easy distractors go: drawn uniformly (SWAG), or by a softmax over the
    /// driving head's negated scores (HellaSwag: the more confidently wrong, the likelier).
    #[serde(skip_serializing_if = "SwapChoice::is_uniform")]
    pub swap_choice: SwapChoice,
    /// Temperature of that softmax, in units of the head's scores.
    #[serde(skip_serializing_if = "is_one")]
    pub swap_temperature: f64,
    /// HellaSwag's random hyperparameters: each iteration's committee trains with a learning rate
    /// drawn log-uniformly from [low, high] (instead of `[committee] learning-rate`), so the
    /// adversary does not overfit one setting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learning_rate_range: Option<[f64; 2]>,
}

/// How the easy distractors an item swaps out are chosen among its easy ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwapChoice {
    #[default]
    Uniform,
    Softmax,
}

impl SwapChoice {
    pub fn is_uniform(&self) -> bool {
        *self == SwapChoice::Uniform
    }
}

// Keys that came after a run was first fingerprinted stay out of the serialised config at their
// default, so that existing runs stay up to date.
const DEFAULT_NEAR_COPY_OVERLAP: f64 = 0.8;
const DEFAULT_MAX_LENGTH_GAP: usize = 8;

fn is_default_overlap(x: &f64) -> bool {
    *x == DEFAULT_NEAR_COPY_OVERLAP
}

fn is_default_gap(x: &usize) -> bool {
    *x == DEFAULT_MAX_LENGTH_GAP
}

const DEFAULT_PRETRAINED_BATCH: usize = 256;

fn is_default_pretrained_batch(x: &usize) -> bool {
    *x == DEFAULT_PRETRAINED_BATCH
}

fn is_zero(x: &usize) -> bool {
    *x == 0
}

fn is_one_usize(x: &usize) -> bool {
    *x == 1
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}

impl Default for FilterConfig {
    fn default() -> Self {
        Self {
            k: 9,
            train_share: 0.8,
            swap_head: SwapHead::Joint,
            budget: BudgetRule::Fixed,
            n_easy: 2,
            epsilon: 0.02,
            patience: 3,
            stages: vec![
                Phase {
                    name: "mlp".into(),
                    members: member_names(&["mlp"]),
                    iterations: 100,
                    swap_head: None,
                },
                Phase {
                    name: "full".into(),
                    members: member_names(&SWAG_COMMITTEE),
                    iterations: 40,
                    swap_head: None,
                },
            ],
            swap_choice: SwapChoice::Uniform,
            swap_temperature: 1.0,
            learning_rate_range: None,
        }
    }
}

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
    #[serde(skip_serializing_if = "is_one_usize")]
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

impl Config {
    /// Reads a config file, resolves its relative paths against the file's directory and checks
    /// what serde cannot.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config = Self::parse(&text, path)?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let base = if base.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            base
        };
        config.resolve_paths(&base);
        config.validate(path)?;
        Ok(config)
    }

    /// Parses TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|s| line_column(text, s.start))
                .unwrap_or((0, 0));
            ConfigError::Parse {
                path: origin.to_path_buf(),
                line,
                column,
                message: e.message().trim().to_string(),
            }
        })
    }

    fn resolve_paths(&mut self, base: &Path) {
        let absolute = |p: &Path| -> PathBuf {
            let joined = if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            };
            normalize(&std::path::absolute(&joined).unwrap_or(joined))
        };
        self.run.dir = absolute(&self.run.dir);
        if let Some(m) = &self.tagger.model {
            self.tagger.model = Some(absolute(m));
        }
        for input in self
            .pairs
            .inputs
            .iter_mut()
            .chain(self.lm.pretrain.iter_mut())
        {
            input.path = absolute(&input.path);
        }
        if let Some(run) = &self.lm.from {
            self.lm.from = Some(absolute(run));
        }
        if let Some(m) = &self.generate.pretrained_model {
            self.generate.pretrained_model = Some(absolute(m));
        }
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let p = &self.pairs;
        if p.folds < 2 {
            return Err(invalid(format!(
                "[pairs] folds = {}: cross-fitting needs at least 2",
                p.folds
            )));
        }
        if p.min_context_tokens > p.max_context_tokens {
            return Err(invalid(
                "[pairs] min-context-tokens is larger than max-context-tokens".into(),
            ));
        }
        if p.min_ending_tokens > p.max_ending_tokens || p.min_ending_tokens == 0 {
            return Err(invalid(
                "[pairs] needs 1 <= min-ending-tokens <= max-ending-tokens".into(),
            ));
        }
        for input in p.inputs.iter().chain(&self.lm.pretrain) {
            if matches!(input.format, InputFormat::Csv | InputFormat::Jsonl) {
                input.record_layout().map_err(invalid)?;
            }
            if input.format != InputFormat::Questions && (input.layout.is_some() || input.skip_bad)
            {
                return Err(invalid(format!(
                    "input {}: `layout` and `skip-bad` belong to `questions` inputs",
                    input.path.display()
                )));
            }
            if input.format != InputFormat::Text && !input.encoding.is_utf8() {
                return Err(invalid(format!("input {}: `encoding` belongs to `text` inputs (CSV, JSON and JSONL are read as UTF-8)", input.path.display())));
            }
        }
        let lm = &self.lm;
        if lm.from.is_some() && !lm.pretrain.is_empty() {
            return Err(invalid("[lm] `from` adopts another run's trained LMs, so `pretrain` would never be used: keep one of the two".into()));
        }
        if lm.embedding < 1
            || lm.hidden < 1
            || lm.layers < 1
            || lm.batch_size == 0
            || lm.max_epochs == 0
        {
            return Err(invalid(
                "[lm] embedding, hidden, layers, batch-size and max-epochs must be positive".into(),
            ));
        }
        if !(0.0..1.0).contains(&lm.dropout) || !(0.0..0.5).contains(&lm.validation_share) {
            return Err(invalid(
                "[lm] needs 0 <= dropout < 1 and 0 <= validation-share < 0.5".into(),
            ));
        }
        let g = &self.generate;
        // A pool may hold only the questions inputs' own options (`af refilter` without new
        // endings), or only borrowed and pretrained endings; other items have nothing but what
        // af's LMs sample.
        let only_questions =
            !p.inputs.is_empty() && p.inputs.iter().all(|i| i.format == InputFormat::Questions);
        if g.endings == 0 && !only_questions && g.borrowed_endings == 0 && g.pretrained_endings == 0
        {
            return Err(invalid("[generate] endings must be positive (it may be 0 when every input is a `questions` input, whose options make the pool, or with borrowed-endings or pretrained-endings)".into()));
        }
        if g.max_tokens == 0 || g.block_items == 0 || g.batch_sequences == 0 || g.max_rounds == 0 {
            return Err(invalid("[generate] max-tokens, max-rounds, block-items and batch-sequences must be positive".into()));
        }
        if g.temperature <= 0.0 {
            return Err(invalid("[generate] temperature must be positive".into()));
        }
        if !(g.near_copy_overlap > 0.0 && g.near_copy_overlap <= 1.0) {
            return Err(invalid(format!(
                "[generate] near-copy-overlap = {}: must be in (0, 1]",
                g.near_copy_overlap
            )));
        }
        if !(g.top_p > 0.0 && g.top_p <= 1.0) {
            return Err(invalid(format!(
                "[generate] top-p = {}: must be in (0, 1]",
                g.top_p
            )));
        }
        if g.pretrained_model.is_some() && g.pretrained_endings == 0 {
            return Err(invalid(
                "[generate] pretrained-model is used only with pretrained-endings = N (N > 0)"
                    .into(),
            ));
        }
        if g.pretrained_batch == 0 {
            return Err(invalid(
                "[generate] pretrained-batch must be positive".into(),
            ));
        }
        if !(g.pretrained_length_bias.is_finite() && g.pretrained_length_bias >= 0.0) {
            return Err(invalid(format!(
                "[generate] pretrained-length-bias = {}: must be 0 (none) or positive",
                g.pretrained_length_bias
            )));
        }
        if g.pretrained_length_target != LengthTarget::default() && g.pretrained_length_bias == 0.0
        {
            return Err(invalid("[generate] pretrained-length-target does nothing without pretrained-length-bias: set pretrained-length-bias (for example 1.0), or remove pretrained-length-target".into()));
        }
        if g.pretrained_length_bias > 0.0 && g.pretrained_endings == 0 {
            return Err(invalid("[generate] pretrained-length-bias is used only with pretrained-endings = N (N > 0)".into()));
        }
        if g.borrowed_agree && g.borrowed_endings == 0 {
            return Err(invalid("[generate] borrowed-agree = true does nothing without borrowed-endings: set borrowed-endings = N (N > 0), or remove borrowed-agree".into()));
        }
        parse_device(&self.run.device).map_err(|m| invalid(format!("[run] device: {m}")))?;
        self.validate_filter().map_err(invalid)
    }

    fn validate_filter(&self) -> Result<(), String> {
        let e = &self.export;
        if [e.train_share, e.validation_share, e.test_share]
            .iter()
            .any(|s| !(0.0..=1.0).contains(s))
            || (e.train_share + e.validation_share + e.test_share - 1.0).abs() > 1e-6
        {
            return Err(format!(
                "[export] train-share + validation-share + test-share = {} + {} + {}: each in [0, 1], summing to 1",
                e.train_share, e.validation_share, e.test_share
            ));
        }
        if e.task.is_empty()
            || !e
                .task
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!("[export] task = {:?}: letters, digits, `_` and `-` only (it names files and the lm-eval task)", e.task));
        }
        if e.annotation_distractors == 0 || e.sheet_items == 0 {
            return Err("[export] annotation-distractors and sheet-items must be positive".into());
        }
        let a = &self.audit;
        if !(a.eval_share > 0.0 && a.eval_share < 1.0) {
            return Err(format!(
                "[audit] eval-share = {}: must be strictly between 0 and 1",
                a.eval_share
            ));
        }
        if a.eval_folds == 0 {
            return Err("[audit] eval-folds = 0: 1 for one held-out split, or at least 2 folds to cross-fit".into());
        }
        if !(a.alpha > 0.0 && a.alpha < 0.5) {
            return Err(format!(
                "[audit] alpha = {}: must be strictly between 0 and 0.5",
                a.alpha
            ));
        }
        let (c, f) = (&self.committee, &self.filter);
        // A member's own settings (mlp-hidden, cnn-widths, [committee.member.NAME], ...) are
        // checked by the member, when the config is loaded against the registry (af-nn).
        if c.embedding < 1 || c.indicator_embedding < 1 || c.joint_hidden < 1 {
            return Err(
                "[committee] embedding, indicator-embedding and joint-hidden must be positive"
                    .into(),
            );
        }
        if c.max_tokens == 0 || c.max_tokens > i16::MAX as usize {
            return Err(format!("[committee] max-tokens = {}: between 1 and {} (lengths are stored as 16-bit integers)", c.max_tokens, i16::MAX));
        }
        if c.epochs == 0 || c.batch_items == 0 || c.max_vocab < 10 {
            return Err(
                "[committee] epochs and batch-items must be positive, max-vocab at least 10".into(),
            );
        }
        if !(0.0..1.0).contains(&c.dropout) || !(0.0..0.5).contains(&c.validation_share) {
            return Err(
                "[committee] needs 0 <= dropout < 1 and 0 <= validation-share < 0.5".into(),
            );
        }
        if f.k == 0 {
            return Err("[filter] k must be at least 1".into());
        }
        if !(f.train_share > 0.0 && f.train_share < 1.0) {
            return Err(format!(
                "[filter] train-share = {}: must be strictly between 0 and 1",
                f.train_share
            ));
        }
        if !(f.swap_temperature > 0.0 && f.swap_temperature.is_finite()) {
            return Err(format!(
                "[filter] swap-temperature = {}: must be positive",
                f.swap_temperature
            ));
        }
        if let Some([low, high]) = f.learning_rate_range {
            if !(low > 0.0 && low <= high && high.is_finite()) {
                return Err(format!(
                    "[filter] learning-rate-range = [{low}, {high}]: needs 0 < low <= high"
                ));
            }
        }
        if f.stages.is_empty() {
            return Err("[filter] needs at least one [[filter.stages]]".into());
        }
        for s in &f.stages {
            if s.members.is_empty() {
                return Err(format!("[filter] stage `{}` has no members", s.name));
            }
            if s.iterations == 0 {
                return Err(format!("[filter] stage `{}` has 0 iterations", s.name));
            }
        }
        // Whether a name is a member at all is the registry's to say (af-nn).
        f.stages
            .iter()
            .try_for_each(|s| s.check_driving(&f.swap_head, c.joint, "[filter]"))
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a Config always serialises")
    }
}

/// The device a config asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRequest {
    Auto,
    Cpu,
    Cuda(usize),
}

pub fn parse_device(s: &str) -> Result<DeviceRequest, String> {
    match s {
        "auto" => Ok(DeviceRequest::Auto),
        "cpu" => Ok(DeviceRequest::Cpu),
        "cuda" => Ok(DeviceRequest::Cuda(0)),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(DeviceRequest::Cuda)
            .ok_or_else(|| format!("`{s}` is not one of auto, cpu, cuda, cuda:N")),
    }
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// `p` made absolute (against the working directory) with `.` and `..` removed, as a loaded
/// config holds its paths: a config written with such a path reloads equal to itself.
pub fn absolute_path(p: &Path) -> std::io::Result<PathBuf> {
    Ok(normalize(&std::path::absolute(p)?))
}

/// Removes `.` and `..` components without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push(c);
                }
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_the_documented_defaults() {
        let c = Config::parse("", Path::new("x.toml")).unwrap();
        assert_eq!(c.pairs.folds, 5);
        assert_eq!(
            (c.pairs.min_context_tokens, c.pairs.max_context_tokens),
            (6, 100)
        );
        assert_eq!(
            (c.pairs.min_ending_tokens, c.pairs.max_ending_tokens),
            (5, 25)
        );
        assert_eq!(c.run.device, "auto");
    }

    #[test]
    fn pretrained_length_bias_needs_pretrained_endings_and_is_not_negative() {
        let parse = |t: &str| {
            Config::parse(t, Path::new("c.toml"))
                .and_then(|c| c.validate(Path::new("c.toml")).map(|()| c))
        };
        let c =
            parse("[generate]\npretrained-endings = 4\npretrained-length-bias = 1.5\n").unwrap();
        assert_eq!(c.generate.pretrained_length_bias, 1.5);
        assert!(toml::to_string(&c.generate)
            .unwrap()
            .contains("pretrained-length-bias = 1.5"));
        assert!(
            !toml::to_string(&parse("").unwrap().generate)
                .unwrap()
                .contains("length-bias"),
            "off, and not written, by default"
        );
        let err = parse("[generate]\npretrained-length-bias = 1.0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("pretrained-endings"), "{err}");
        let err = parse("[generate]\npretrained-endings = 4\npretrained-length-bias = -1.0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("pretrained-length-bias = -1"), "{err}");
        let c = parse("[generate]\npretrained-endings = 4\npretrained-length-bias = 1.0\npretrained-length-target = \"gold\"\n").unwrap();
        assert_eq!(c.generate.pretrained_length_target, LengthTarget::Gold);
        let c = parse("[generate]\npretrained-endings = 4\npretrained-length-bias = 1.0\npretrained-length-target = \"other-gold\"\n").unwrap();
        assert_eq!(c.generate.pretrained_length_target, LengthTarget::OtherGold);
        assert!(
            toml::to_string(&c.generate)
                .unwrap()
                .contains("pretrained-length-target = \"other-gold\""),
            "written when not the default"
        );
        assert_eq!(
            parse("").unwrap().generate.pretrained_length_target,
            LengthTarget::NearbyGold
        );
        let err =
            parse("[generate]\npretrained-endings = 4\npretrained-length-target = \"gold\"\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains("pretrained-length-bias"), "{err}");
    }

    #[test]
    fn score_batch_is_auto_or_a_positive_number() {
        let auto = Config::parse("", Path::new("c.toml"))
            .unwrap()
            .committee
            .score_batch;
        assert_eq!(
            (auto.candidates_on(false), auto.candidates_on(true)),
            (ScoreBatch::AUTO_CPU, ScoreBatch::AUTO_GPU)
        );
        let c =
            Config::parse("[committee]\nscore-batch = \"auto\"\n", Path::new("c.toml")).unwrap();
        assert_eq!(c.committee.score_batch, ScoreBatch::Auto);
        // `auto` is not written (the number is the device's), a number is.
        assert!(!toml::to_string(&c.committee)
            .unwrap()
            .contains("score-batch"));
        let c = Config::parse("[committee]\nscore-batch = 300\n", Path::new("c.toml")).unwrap();
        assert_eq!(c.committee.score_batch.candidates_on(true), 300);
        assert!(toml::to_string(&c.committee)
            .unwrap()
            .contains("score-batch = 300"));
        for bad in ["\"fast\"", "-3", "0"] {
            let err = Config::parse(
                &format!("[committee]\nscore-batch = {bad}\n"),
                Path::new("c.toml"),
            )
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("score-batch") || err.contains("auto"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn unknown_key_names_key_file_and_line() {
        let text = "[run]\nseed = 1\n\n[pairs]\nfolds = 3\nmin-context-token = 4\n";
        let err = Config::parse(text, Path::new("configs/bad.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("configs/bad.toml:6:"), "{err}");
        assert!(err.contains("min-context-token"), "{err}");
    }

    #[test]
    fn mistyped_value_names_its_line() {
        let err = Config::parse("[run]\nseed = \"x\"\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("c.toml:2:"), "{err}");
    }

    #[test]
    fn relative_paths_resolve_against_the_config_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("configs")).unwrap();
        let file = dir.path().join("configs/c.toml");
        std::fs::write(
            &file,
            "[run]\ndir = \"../runs/x\"\n[[pairs.inputs]]\npath = \"../data/a.json\"\nformat = \"activitynet\"\n",
        )
        .unwrap();
        let c = Config::load(&file).unwrap();
        let root = std::path::absolute(dir.path()).unwrap();
        assert_eq!(c.run.dir, root.join("runs/x"));
        assert_eq!(c.pairs.inputs[0].path, root.join("data/a.json"));
    }

    #[test]
    fn resolved_config_round_trips_through_toml() {
        let mut c = Config::default();
        c.pairs.inputs.push(InputSpec {
            path: "/a.csv".into(),
            format: InputFormat::Csv,
            group_field: Some("g".into()),
            text_field: Some("t".into()),
            context_field: None,
            sentence2_field: None,
            id_field: None,
            delimiter: Some(';'),
            layout: None,
            skip_bad: false,
            encoding: TextEncoding::Utf8,
        });
        let back = Config::parse(&c.to_toml(), Path::new("r.toml")).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn encoding_is_a_text_input_key() {
        let text =
            "[[pairs.inputs]]\npath = \"novels\"\nformat = \"text\"\nencoding = \"latin-1\"\n";
        let c = Config::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(c.pairs.inputs[0].encoding, TextEncoding::Latin1);
        assert_eq!(Config::parse(&c.to_toml(), Path::new("r.toml")).unwrap(), c);
        let csv = "[[pairs.inputs]]\npath = \"a.csv\"\nformat = \"csv\"\ngroup-field = \"g\"\ntext-field = \"t\"\nencoding = \"latin-1\"\n";
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, csv).unwrap();
        let err = Config::load(&file).unwrap_err().to_string();
        assert!(err.contains("`encoding` belongs to `text` inputs"), "{err}");
        let bad = text.replace("latin-1", "cp1252");
        assert!(Config::parse(&bad, Path::new("c.toml")).is_err());
    }

    #[test]
    fn csv_input_without_a_layout_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "[[pairs.inputs]]\npath = \"a.csv\"\nformat = \"csv\"\ntext-field = \"t\"\n",
        )
        .unwrap();
        let err = Config::load(&file).unwrap_err().to_string();
        assert!(err.contains("needs `group-field`"), "{err}");
    }

    #[test]
    fn swap_head_and_member_tables_keep_their_spelling() {
        let text = "[committee]\ncnn-filters = 32\n[committee.member.cnn]\nfilters = 64\n[filter]\nswap-head = \"cnn\"\n\
                    [[filter.stages]]\nname = \"all\"\nmembers = [\"mlp\", \"cnn\"]\niterations = 2\n";
        let c = Config::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(c.filter.swap_head, SwapHead::Member(MemberName::new("cnn")));
        assert_eq!(c.committee.cnn_filters, 32);
        assert_eq!(c.committee.member["cnn"]["filters"].as_integer(), Some(64));
        assert_eq!(c.filter.stages[0].members, member_names(&["mlp", "cnn"]));
        assert_eq!(Config::parse(&c.to_toml(), Path::new("r.toml")).unwrap(), c);
        for (text, head) in [
            ("joint", SwapHead::Joint),
            ("best-member", SwapHead::BestMember),
        ] {
            let c = Config::parse(
                &format!("[filter]\nswap-head = \"{text}\"\n"),
                Path::new("c.toml"),
            )
            .unwrap();
            assert_eq!(c.filter.swap_head, head);
        }
        // A member the schedule lacks cannot drive the swaps.
        let err = load_error("[filter]\nswap-head = \"lstm\"\n");
        assert!(
            err.contains("swap-head = \"lstm\"") && err.contains("stage `mlp`"),
            "{err}"
        );
    }

    #[test]
    fn a_stage_may_name_its_own_swap_head() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        let stages = |head: &str| {
            format!(
                "[[filter.stages]]\nname = \"mlp\"\nmembers = [\"mlp\"]\niterations = 2\n\
                 [[filter.stages]]\nname = \"ft\"\nmembers = [\"mlp\", \"encoder-ft\"]\niterations = 2\nswap-head = \"{head}\"\n"
            )
        };
        std::fs::write(&file, stages("encoder-ft")).unwrap();
        let c = Config::load(&file).unwrap();
        assert_eq!(c.filter.stages[0].swap_head, None);
        assert_eq!(
            c.filter.stages[1].driving(&c.filter.swap_head),
            &SwapHead::Member(MemberName::new("encoder-ft"))
        );
        assert_eq!(
            c.filter.stages[0].driving(&c.filter.swap_head),
            &SwapHead::Joint
        );
        assert!(
            !toml::to_string(&c.filter.stages[0])
                .unwrap()
                .contains("swap-head"),
            "a stage without its own head writes none"
        );
        assert_eq!(Config::parse(&c.to_toml(), Path::new("r.toml")).unwrap(), c);
        // Its own head must be one of its members.
        std::fs::write(&file, stages("cnn")).unwrap();
        let err = Config::load(&file).unwrap_err().to_string();
        assert!(
            err.contains(
                "stage `ft`: its swap-head = \"cnn\", but the stage does not have that member"
            ),
            "{err}"
        );
    }

    /// The error `Config::load` gives for a file holding `text` (parsing alone skips validation).
    fn load_error(text: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        Config::load(&path).unwrap_err().to_string()
    }

    #[test]
    fn a_learning_rate_range_is_positive_and_ordered_and_absent_by_default() {
        let c = Config::parse(
            "[filter]\nlearning-rate-range = [1e-4, 3e-3]\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(c.filter.learning_rate_range, Some([1e-4, 3e-3]));
        assert!(c.to_toml().contains("learning-rate-range"));
        assert!(
            !Config::default().to_toml().contains("learning-rate-range"),
            "absent from configs that do not set it"
        );
        for bad in ["[3e-3, 1e-4]", "[0.0, 1e-3]", "[-1.0, 1.0]"] {
            let e = load_error(&format!("[filter]\nlearning-rate-range = {bad}\n"));
            assert!(
                e.contains("learning-rate-range") && e.contains("0 < low <= high"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn borrowed_agree_needs_borrowed_endings_and_is_absent_when_off() {
        let c = Config::parse(
            "[generate]\nborrowed-endings = 64\nborrowed-agree = true\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert!(c.generate.borrowed_agree && c.to_toml().contains("borrowed-agree = true"));
        assert!(
            !Config::default().to_toml().contains("borrowed-agree"),
            "older runs keep their fingerprints"
        );
        let e = load_error("[generate]\nborrowed-agree = true\n");
        assert!(
            e.contains("borrowed-agree") && e.contains("borrowed-endings"),
            "{e}"
        );
    }

    /// The configs the project ships, and that docs/results.md's commands name, stay loadable
    /// as keys are added and renamed (the member names are af-nn's to check, at run time).
    #[test]
    fn every_shipped_config_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
                names.push(path.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        assert!(
            names.len() >= 10 && names.iter().any(|n| n == "default.toml"),
            "{names:?}"
        );
    }

    /// Every config the project ships (configs/, any depth) and the every-key fixtures
    /// (testdata/configs/), each as `af config show` prints it and as the stages' fingerprints
    /// record its sections, against testdata/config-golden/ (written before config.rs became
    /// config/, issue 40): a change that moves how a config prints or fingerprints shows here.
    /// Paths resolve against a fixed root (/af), so the files do not depend on the checkout.
    /// `AF_BLESS=1` writes the files anew, after a change meant to move them.
    #[test]
    fn every_config_prints_and_fingerprints_as_recorded() {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let golden = crate_dir.join("testdata/config-golden");
        let bless = std::env::var_os("AF_BLESS").is_some();
        let mut files = Vec::new();
        collect_toml(
            &crate_dir.join("../../configs"),
            Path::new("/af/configs"),
            &mut files,
        );
        collect_toml(
            &crate_dir.join("testdata/configs"),
            Path::new("/af/testdata"),
            &mut files,
        );
        assert!(files.len() >= 12, "{files:?}");
        let mut seen = std::collections::BTreeSet::new();
        let mut failures = Vec::new();
        for (path, base) in &files {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            assert!(seen.insert(stem.clone()), "two configs are called {stem}");
            let text = std::fs::read_to_string(path).unwrap();
            let mut c = Config::parse(&text, path).unwrap_or_else(|e| panic!("{e}"));
            c.resolve_paths(base);
            c.validate(path).unwrap_or_else(|e| panic!("{e}"));
            let printed = c.to_toml();
            let fingerprints = section_fingerprints(&c);
            let (toml_path, json_path) = (
                golden.join(format!("{stem}.toml")),
                golden.join(format!("{stem}.json")),
            );
            if bless {
                std::fs::create_dir_all(&golden).unwrap();
                std::fs::write(&toml_path, &printed).unwrap();
                let json = serde_json::to_string_pretty(&fingerprints).unwrap() + "\n";
                std::fs::write(&json_path, json).unwrap();
                continue;
            }
            let read = |p: &Path| {
                std::fs::read_to_string(p).unwrap_or_else(|_| {
                    panic!(
                        "{} has no {} (AF_BLESS=1 writes it)",
                        path.display(),
                        p.display()
                    )
                })
            };
            if read(&toml_path) != printed {
                failures.push(format!(
                    "{stem}: prints otherwise than {}:\n{printed}",
                    toml_path.display()
                ));
            }
            let recorded: serde_json::Value = serde_json::from_str(&read(&json_path)).unwrap();
            if recorded != fingerprints {
                failures.push(format!(
                    "{stem}: fingerprints otherwise than {}:\n{}",
                    json_path.display(),
                    serde_json::to_string_pretty(&fingerprints).unwrap()
                ));
            }
        }
        for entry in std::fs::read_dir(&golden).unwrap() {
            let path = entry.unwrap().path();
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            if !seen.contains(&stem) {
                if bless {
                    std::fs::remove_file(&path).unwrap();
                } else {
                    failures.push(format!(
                        "{}: no config of that name (AF_BLESS=1 removes it)",
                        path.display()
                    ));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    }

    /// `*.toml` under `dir`, each with the directory its paths resolve against: `base` and the
    /// file's subdirectory of `dir`.
    fn collect_toml(dir: &Path, base: &Path, out: &mut Vec<(PathBuf, PathBuf)>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                collect_toml(&path, &base.join(path.file_name().unwrap()), out);
            } else if path.extension().is_some_and(|e| e == "toml") {
                out.push((path, base.to_path_buf()));
            }
        }
    }

    /// The config's sections as the stages' fingerprints record them.
    fn section_fingerprints(c: &Config) -> serde_json::Value {
        serde_json::json!({
            "tagger": c.tagger,
            "pairs": c.pairs,
            "lm": c.lm,
            "generate": c.generate,
            "committee": c.committee,
            "filter": c.filter,
            "export": c.export,
            "audit": c.audit,
        })
    }

    #[test]
    fn devices_parse() {
        assert_eq!(parse_device("cuda:1"), Ok(DeviceRequest::Cuda(1)));
        assert!(parse_device("gpu").is_err());
    }
}
