//! `[generate]`: the candidate endings of each item's pool, sampled from af's LMs, borrowed from
//! other items, or written by a pretrained generator, and the rules that turn endings away.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;
use super::pairs::PairsConfig;
use super::precision::Precision;
use super::{equals, is_default, is_one};

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
    #[serde(skip_serializing_if = "is_default")]
    pub top_k: usize,
    /// Nucleus sampling: draw among the fewest most likely tokens whose probability reaches p
    /// (1: all).
    #[serde(skip_serializing_if = "is_one")]
    pub top_p: f64,
    /// Locally typical sampling (Meister et al., 2023): draw among the tokens whose surprisal is
    /// nearest the distribution's entropy, until their probability reaches p (1: all). Applied
    /// after `top-p`. A person's sentence carries about the entropy's information per token; the
    /// nucleus keeps an LM's likeliest tokens, so its endings are likelier to the LM than the gold.
    /// On SmolLM2, 0.95 draws what `top-p = 0.95` draws (docs/decisions/484-typical-sampling.md).
    #[serde(skip_serializing_if = "is_one")]
    pub typical_p: f64,
    /// Endings breaking these rules are not kept (more are sampled in later rounds); every rule
    /// is counted in the report either way.
    #[serde(skip_serializing_if = "is_default")]
    pub reject: Vec<ValidityRule>,
    /// `near-copy`: the share of the gold's words an ending may share before it is one.
    #[serde(skip_serializing_if = "is_default_near_copy_overlap")]
    pub near_copy_overlap: f64,
    /// `length-gap`: how many tokens longer or shorter than the gold an ending may be.
    #[serde(skip_serializing_if = "equals::<DEFAULT_MAX_LENGTH_GAP>")]
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
    #[serde(skip_serializing_if = "is_default")]
    pub borrowed_endings: usize,
    /// Borrow only endings that begin as the item's own gold does (af-text's `validity::onset`:
    /// the same verb form or word class past adverbs), so that one read after the item's noun
    /// phrase agrees with it: `runs` after "The man", `run` after "Two men". Off by default so
    /// that runs made before it keep their fingerprints.
    #[serde(skip_serializing_if = "is_default")]
    pub borrowed_agree: bool,
    /// Endings per item written by a pretrained causal LM (af-nn's `causal_lm`; by default
    /// SmolLM2-135M, which `scripts/setup` installs), prompted with the item's context and noun
    /// phrase and sampled with this section's temperature, top-k, top-p and `max-tokens`. English
    /// from the first draw, unlike the endings of af's own small LMs; they join the pool after the
    /// borrowed endings, and af's LMs give them LM features as to every ending. 0: none.
    #[serde(skip_serializing_if = "is_default")]
    pub pretrained_endings: usize,
    /// Endings per item shared from other items' pretrained endings (`pretrained-endings`): of
    /// another group, beginning as the item's gold does, passing the `reject` rules against its
    /// gold. They cost no draw, so a pool grows for the price of what was written; they join it
    /// after the item's own pretrained endings. 0: none.
    #[serde(skip_serializing_if = "is_default")]
    pub shared_endings: usize,
    /// How a shared ending is kept to the item's scene; see [`SharedTopic`].
    #[serde(skip_serializing_if = "is_default")]
    pub shared_topic: SharedTopic,
    /// Checks that set aside endings which could be right answers, before the pool is written
    /// (the endings of every source but af's LM sampler); see [`CouldBeRight`]. Empty: none.
    #[serde(skip_serializing_if = "is_default")]
    pub could_be_right: Vec<CouldBeRight>,
    /// `similar`: the cosine of an ending's and the gold's sentence vectors from which it is set
    /// aside.
    #[serde(skip_serializing_if = "is_default_could_be_right_similarity")]
    pub could_be_right_similarity: f64,
    /// The pretrained generator's GGUF file (a Llama-architecture model with a byte-level BPE
    /// tokenizer); default: `AF_CAUSAL_LM`, which `scripts/setup --env` sets.
    #[serde(skip_serializing_if = "is_default")]
    pub pretrained_model: Option<PathBuf>,
    /// Example captions in the generator's prompt: this many other items' context and gold
    /// second sentence, one pair a line, before the item's own (other videos, past the questions
    /// while there are such). They show a web-trained LM the captions' style.
    #[serde(skip_serializing_if = "is_default")]
    pub pretrained_examples: usize,
    /// Sequences the pretrained generator continues at once: its key/value cache (about 3 MB a
    /// sequence for SmolLM2-135M) is the memory bound.
    #[serde(skip_serializing_if = "equals::<DEFAULT_PRETRAINED_BATCH>")]
    pub pretrained_batch: usize,
    /// Length shaping of pretrained endings (0: none): each ending aims at a length
    /// (`pretrained-length-target`); the generator may not end a sentence more than half of
    /// `max-length-gap` words short of it, and past it this many nats per word are added to its
    /// sentence-end tokens' logits. A web-trained model writes longer than captions do, and the
    /// `length-gap` rule otherwise turns many of its draws away
    /// (docs/decisions/208-length-shaping-of-pretrained-endings-aimed-at.md).
    #[serde(skip_serializing_if = "is_default")]
    pub pretrained_length_bias: f64,
    /// The length each shaped ending aims at; see [`LengthTarget`].
    #[serde(skip_serializing_if = "is_default")]
    pub pretrained_length_target: LengthTarget,
    /// Caption adaptation of the pretrained generator (0: none): before drawing, one low-rank
    /// adapter per fold is trained for this many steps on the run's own pairs ("prompt -> gold
    /// ending", the prompt as sampling builds it), never on its own fold's items; fold k's
    /// questions are then continued by fold k's adapter. Saved as
    /// `generate/pretrained/adapter-fold-K.safetensors` (docs/decisions/460-caption-adapter.md).
    #[serde(skip_serializing_if = "is_default")]
    pub pretrained_adapt_steps: usize,
    /// Examples per adapter training step.
    #[serde(skip_serializing_if = "equals::<DEFAULT_ADAPT_BATCH>")]
    pub pretrained_adapt_batch: usize,
    /// The adapters' rank (their A is rank x in, their B out x rank).
    #[serde(skip_serializing_if = "equals::<DEFAULT_ADAPT_RANK>")]
    pub pretrained_adapt_rank: usize,
    /// The adapters' term is scaled by alpha / rank.
    #[serde(skip_serializing_if = "is_default_adapt_alpha")]
    pub pretrained_adapt_alpha: f64,
    /// AdamW's learning rate for the adapters.
    #[serde(skip_serializing_if = "is_default_adapt_learning_rate")]
    pub pretrained_adapt_learning_rate: f64,
    /// A directory holding adapters an earlier run trained (its `generate/pretrained/`): a
    /// fold's adapter is copied from there, not trained, when it was trained on exactly this
    /// run's examples, held-out questions, settings and generator file (the key its
    /// `adapter-fold-K.json` records); any other is an error. Not in the fingerprint: a reused
    /// adapter is the one this run would train.
    #[serde(skip_serializing_if = "is_default")]
    pub pretrained_adapters_from: Option<PathBuf>,
    /// Arithmetic of sampling and scoring (see [`Precision`]); `generate/report.json` records
    /// what was used and, for `mixed`, how far it moved the numbers.
    #[serde(skip_serializing_if = "is_default")]
    pub precision: Precision,
}

const DEFAULT_NEAR_COPY_OVERLAP: f64 = 0.8;
const DEFAULT_MAX_LENGTH_GAP: usize = 8;
const DEFAULT_PRETRAINED_BATCH: usize = 256;
const DEFAULT_ADAPT_BATCH: usize = 8;
const DEFAULT_ADAPT_RANK: usize = 8;
const DEFAULT_ADAPT_ALPHA: f64 = 16.0;
const DEFAULT_ADAPT_LEARNING_RATE: f64 = 1e-3;

fn is_default_adapt_alpha(x: &f64) -> bool {
    *x == DEFAULT_ADAPT_ALPHA
}

fn is_default_adapt_learning_rate(x: &f64) -> bool {
    *x == DEFAULT_ADAPT_LEARNING_RATE
}

fn is_default_could_be_right_similarity(x: &f64) -> bool {
    *x == DEFAULT_COULD_BE_RIGHT_SIMILARITY
}

/// MiniLM's cosines of paraphrases sit above about 0.8; a different event seldom reaches it.
pub const DEFAULT_COULD_BE_RIGHT_SIMILARITY: f64 = 0.8;

fn is_default_near_copy_overlap(x: &f64) -> bool {
    *x == DEFAULT_NEAR_COPY_OVERLAP
}

impl Default for GenerateConfig {
    fn default() -> Self {
        Self {
            endings: 1023,
            max_tokens: 25,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            typical_p: 1.0,
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
            shared_endings: 0,
            shared_topic: SharedTopic::Encoder,
            could_be_right: Vec::new(),
            could_be_right_similarity: DEFAULT_COULD_BE_RIGHT_SIMILARITY,
            pretrained_model: None,
            pretrained_examples: 0,
            pretrained_batch: DEFAULT_PRETRAINED_BATCH,
            pretrained_length_bias: 0.0,
            pretrained_length_target: LengthTarget::NearbyGold,
            pretrained_adapt_steps: 0,
            pretrained_adapt_batch: DEFAULT_ADAPT_BATCH,
            pretrained_adapt_rank: DEFAULT_ADAPT_RANK,
            pretrained_adapt_alpha: DEFAULT_ADAPT_ALPHA,
            pretrained_adapt_learning_rate: DEFAULT_ADAPT_LEARNING_RATE,
            pretrained_adapters_from: None,
            precision: Precision::Auto,
        }
    }
}

impl GenerateConfig {
    /// Checks what serde cannot; the message names the key. `pairs` says whether every input
    /// brings its own options (then the pool may have no sampled endings).
    pub fn validate(&self, pairs: &PairsConfig) -> Result<(), String> {
        // A pool may hold only the questions inputs' own options (`af refilter` without new
        // endings), or only borrowed and pretrained endings; other items have nothing but what
        // af's LMs sample.
        if self.endings == 0
            && !pairs.only_questions()
            && self.borrowed_endings == 0
            && self.pretrained_endings == 0
        {
            return Err("[generate] endings must be positive (it may be 0 when every input is a `questions` input, whose options make the pool, or with borrowed-endings or pretrained-endings)".into());
        }
        if self.max_tokens == 0
            || self.block_items == 0
            || self.batch_sequences == 0
            || self.max_rounds == 0
        {
            return Err("[generate] max-tokens, max-rounds, block-items and batch-sequences must be positive".into());
        }
        if self.temperature <= 0.0 {
            return Err("[generate] temperature must be positive".into());
        }
        if !(self.near_copy_overlap > 0.0 && self.near_copy_overlap <= 1.0) {
            return Err(format!(
                "[generate] near-copy-overlap = {}: must be in (0, 1]",
                self.near_copy_overlap
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!(
                "[generate] top-p = {}: must be in (0, 1]",
                self.top_p
            ));
        }
        if !(self.typical_p > 0.0 && self.typical_p <= 1.0) {
            return Err(format!(
                "[generate] typical-p = {}: must be in (0, 1]",
                self.typical_p
            ));
        }
        if self.pretrained_model.is_some() && self.pretrained_endings == 0 {
            return Err(
                "[generate] pretrained-model is used only with pretrained-endings = N (N > 0)"
                    .into(),
            );
        }
        if self.pretrained_batch == 0 {
            return Err("[generate] pretrained-batch must be positive".into());
        }
        if !(self.pretrained_length_bias.is_finite() && self.pretrained_length_bias >= 0.0) {
            return Err(format!(
                "[generate] pretrained-length-bias = {}: must be 0 (none) or positive",
                self.pretrained_length_bias
            ));
        }
        if self.pretrained_length_target != LengthTarget::default()
            && self.pretrained_length_bias == 0.0
        {
            return Err("[generate] pretrained-length-target does nothing without pretrained-length-bias: set pretrained-length-bias (for example 1.0), or remove pretrained-length-target".into());
        }
        if self.pretrained_length_bias > 0.0 && self.pretrained_endings == 0 {
            return Err("[generate] pretrained-length-bias is used only with pretrained-endings = N (N > 0)".into());
        }
        if self.pretrained_adapt_steps > 0 && self.pretrained_endings == 0 {
            return Err("[generate] pretrained-adapt-steps is used only with pretrained-endings = N (N > 0)".into());
        }
        let d = Self::default();
        if self.pretrained_adapt_steps == 0
            && (self.pretrained_adapt_batch != d.pretrained_adapt_batch
                || self.pretrained_adapt_rank != d.pretrained_adapt_rank
                || self.pretrained_adapt_alpha != d.pretrained_adapt_alpha
                || self.pretrained_adapt_learning_rate != d.pretrained_adapt_learning_rate)
        {
            return Err("[generate] pretrained-adapt-batch, -rank, -alpha and -learning-rate do nothing without pretrained-adapt-steps: set pretrained-adapt-steps = N (N > 0), or remove them".into());
        }
        if self.pretrained_adapters_from.is_some() && self.pretrained_adapt_steps == 0 {
            return Err("[generate] pretrained-adapters-from is used only with pretrained-adapt-steps = N (N > 0)".into());
        }
        if self.pretrained_adapt_batch == 0 || self.pretrained_adapt_rank == 0 {
            return Err(
                "[generate] pretrained-adapt-batch and pretrained-adapt-rank must be positive"
                    .into(),
            );
        }
        for (key, x) in [
            ("pretrained-adapt-alpha", self.pretrained_adapt_alpha),
            (
                "pretrained-adapt-learning-rate",
                self.pretrained_adapt_learning_rate,
            ),
        ] {
            if !(x.is_finite() && x > 0.0) {
                return Err(format!("[generate] {key} = {x}: must be positive"));
            }
        }
        if self.shared_endings > 0 && self.pretrained_endings == 0 {
            return Err("[generate] shared-endings shares other items' pretrained endings: it needs pretrained-endings = N (N > 0)".into());
        }
        if !(self.could_be_right_similarity > 0.0 && self.could_be_right_similarity <= 1.0) {
            return Err(format!(
                "[generate] could-be-right-similarity = {}: must be in (0, 1]",
                self.could_be_right_similarity
            ));
        }
        if self.could_be_right_similarity != DEFAULT_COULD_BE_RIGHT_SIMILARITY
            && !self.could_be_right.contains(&CouldBeRight::Similar)
        {
            return Err("[generate] could-be-right-similarity does nothing without the `similar` check: add \"similar\" to could-be-right, or remove it".into());
        }
        let checked_sources = self.borrowed_endings > 0
            || self.pretrained_endings > 0
            || pairs
                .inputs
                .iter()
                .any(|i| i.format == super::pairs::InputFormat::Questions);
        if !self.could_be_right.is_empty() && !checked_sources {
            return Err("[generate] could-be-right checks the endings of borrowed-endings, pretrained-endings, shared-endings and a questions input's own options (af's LM samples are not checked): with none of them it does nothing; remove it, or set one".into());
        }
        if self.shared_topic != SharedTopic::default() && self.shared_endings == 0 {
            return Err("[generate] shared-topic does nothing without shared-endings: set shared-endings = N (N > 0), or remove shared-topic".into());
        }
        if self.borrowed_agree && self.borrowed_endings == 0 {
            return Err("[generate] borrowed-agree = true does nothing without borrowed-endings: set borrowed-endings = N (N > 0), or remove borrowed-agree".into());
        }
        Ok(())
    }

    /// The section as the generate stage's fingerprint records it. Every key changes the pool:
    /// `block-items` cuts it into its parts, and the batch sizes decide which draws share a
    /// batch on the device.
    pub fn fingerprint(&self) -> serde_json::Value {
        let Self {
            endings,
            max_tokens,
            temperature,
            top_k,
            top_p,
            typical_p,
            reject,
            near_copy_overlap,
            max_length_gap,
            max_rounds,
            block_items,
            batch_sequences,
            limit_items,
            borrowed_endings,
            borrowed_agree,
            pretrained_endings,
            shared_endings,
            shared_topic,
            could_be_right,
            could_be_right_similarity,
            pretrained_model,
            pretrained_examples,
            pretrained_batch,
            pretrained_length_bias,
            pretrained_length_target,
            pretrained_adapt_steps,
            pretrained_adapt_batch,
            pretrained_adapt_rank,
            pretrained_adapt_alpha,
            pretrained_adapt_learning_rate,
            // Where finished adapters are copied from changes nothing they hold (they are reused
            // only when trained on this run's exact inputs).
            pretrained_adapters_from: _,
            precision,
        } = self;
        let d = Self::default();
        let fingerprint = Fingerprint::default()
            .key("endings", endings)
            .key("max-tokens", max_tokens)
            .key("temperature", temperature)
            .later("top-k", top_k, &d.top_k)
            .later("top-p", top_p, &d.top_p)
            .later("typical-p", typical_p, &d.typical_p)
            .later("reject", reject, &d.reject)
            .later("near-copy-overlap", near_copy_overlap, &d.near_copy_overlap)
            .later("max-length-gap", max_length_gap, &d.max_length_gap)
            .key("max-rounds", max_rounds)
            .key("block-items", block_items)
            .key("batch-sequences", batch_sequences)
            .key("limit-items", limit_items)
            .later("borrowed-endings", borrowed_endings, &d.borrowed_endings)
            .later("borrowed-agree", borrowed_agree, &d.borrowed_agree)
            .later(
                "pretrained-endings",
                pretrained_endings,
                &d.pretrained_endings,
            )
            .later("shared-endings", shared_endings, &d.shared_endings);
        // Recorded whenever endings are shared, so that a pool shared before the topic check
        // existed (it had none) is not taken for one made with the default check.
        let fingerprint = if *shared_endings > 0 {
            fingerprint.key("shared-topic", shared_topic)
        } else {
            fingerprint
        };
        fingerprint
            .later("could-be-right", could_be_right, &d.could_be_right)
            .later(
                "could-be-right-similarity",
                could_be_right_similarity,
                &d.could_be_right_similarity,
            )
            .later("pretrained-model", pretrained_model, &d.pretrained_model)
            .later(
                "pretrained-examples",
                pretrained_examples,
                &d.pretrained_examples,
            )
            .later("pretrained-batch", pretrained_batch, &d.pretrained_batch)
            .later(
                "pretrained-length-bias",
                pretrained_length_bias,
                &d.pretrained_length_bias,
            )
            .later(
                "pretrained-length-target",
                pretrained_length_target,
                &d.pretrained_length_target,
            )
            .later(
                "pretrained-adapt-steps",
                pretrained_adapt_steps,
                &d.pretrained_adapt_steps,
            )
            .later(
                "pretrained-adapt-batch",
                pretrained_adapt_batch,
                &d.pretrained_adapt_batch,
            )
            .later(
                "pretrained-adapt-rank",
                pretrained_adapt_rank,
                &d.pretrained_adapt_rank,
            )
            .later(
                "pretrained-adapt-alpha",
                pretrained_adapt_alpha,
                &d.pretrained_adapt_alpha,
            )
            .later(
                "pretrained-adapt-learning-rate",
                pretrained_adapt_learning_rate,
                &d.pretrained_adapt_learning_rate,
            )
            .later("precision", precision, &d.precision)
            .finish()
    }
}

/// How the `shared` source keeps an ending to the item's scene (`[generate] shared-topic`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SharedTopic {
    /// An ending is shared only when the pretrained sentence encoder (all-MiniLM-L6-v2,
    /// `$AF_ENCODER_DIR`) places it at least as near the item's context as the nearer half of the
    /// endings written for this item: no further from this scene than what the writer wrote for
    /// it (docs/decisions/470-shared-endings-kept-to-the-scene.md).
    #[default]
    Encoder,
    /// Any ending that agrees, whatever its scene: how shared endings were first measured
    /// (docs/notebook/2026-12-05-shared-endings.md), kept to reproduce it.
    Off,
}

/// A check that sets aside an ending which could be a right answer (`[generate] could-be-right`),
/// read with the pretrained sentence encoder (all-MiniLM-L6-v2, `$AF_ENCODER_DIR`); each ending
/// set aside is counted under its check and listed in `generate/set-aside.tsv`
/// (docs/decisions/472-could-be-right-set-aside.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CouldBeRight {
    /// The ending says what the gold ending says in other words: the cosine of their sentence
    /// vectors reaches `could-be-right-similarity`.
    Similar,
}

impl CouldBeRight {
    pub fn name(self) -> &'static str {
        match self {
            CouldBeRight::Similar => "similar",
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
    /// (docs/decisions/209-targets-inside-the-rule-s-window-nearby.md).
    #[default]
    NearbyGold,
    /// Per ending, the gold length of another item, drawn at random (another video, past the
    /// questions while there are such): distractors' lengths follow the captions' distribution,
    /// independent of the item's own gold, until the `length-gap` rule judges them. The default
    /// until 2026-12-04, kept to reproduce the runs measured with it.
    OtherGold,
    /// The item's own gold length. Distractors then cluster around the gold's length, which
    /// makes the gold the most typical length among its options: a detector that picks the option
    /// closest to the options' median length reads it
    /// (docs/notebook/2026-12-03-pretrained-length-shaping.md). Kept to reproduce the first
    /// shaped run.
    Gold,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{checked, Config};

    #[test]
    fn shared_endings_need_pretrained_endings_and_enter_the_fingerprint() {
        let c = checked("[generate]\npretrained-endings = 4\nshared-endings = 12\n").unwrap();
        assert_eq!(c.generate.shared_endings, 12);
        let err = checked("[generate]\nshared-endings = 12\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("pretrained-endings"), "{err}");
        let without = checked("[generate]\npretrained-endings = 4\n").unwrap();
        assert_ne!(c.generate.fingerprint(), without.generate.fingerprint());
        assert!(
            !without
                .generate
                .fingerprint()
                .to_string()
                .contains("shared"),
            "off, and not in the fingerprint of runs made before it"
        );
    }

    #[test]
    fn could_be_right_needs_endings_it_can_check() {
        let err = checked("[generate]\ncould-be-right = [\"similar\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("could-be-right") && err.contains("pretrained-endings"),
            "{err}"
        );
        let c = checked("[generate]\npretrained-endings = 4\ncould-be-right = [\"similar\"]\n")
            .unwrap();
        assert_eq!(c.generate.could_be_right, [CouldBeRight::Similar]);
        assert!(c.generate.fingerprint().get("could-be-right").is_some());
        let err = checked("[generate]\npretrained-endings = 4\ncould-be-right-similarity = 0.9\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("similar"), "{err}");
    }

    #[test]
    fn shared_topic_defaults_to_the_encoder_is_fingerprinted_with_sharing_and_needs_it() {
        let shared = "[generate]\npretrained-endings = 4\nshared-endings = 12\n";
        let on = checked(shared).unwrap();
        assert_eq!(on.generate.shared_topic, SharedTopic::Encoder);
        assert_eq!(on.generate.fingerprint()["shared-topic"], "encoder");
        let off = checked(&format!("{shared}shared-topic = \"off\"\n")).unwrap();
        assert_eq!(off.generate.shared_topic, SharedTopic::Off);
        assert_ne!(on.generate.fingerprint(), off.generate.fingerprint());
        let err = checked("[generate]\npretrained-endings = 4\nshared-topic = \"off\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("shared-endings"), "{err}");
        let err = checked(&format!("{shared}shared-topic = \"lm\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("encoder") && err.contains("off"), "{err}");
    }

    #[test]
    fn pretrained_length_bias_needs_pretrained_endings_and_is_not_negative() {
        let c =
            checked("[generate]\npretrained-endings = 4\npretrained-length-bias = 1.5\n").unwrap();
        assert_eq!(c.generate.pretrained_length_bias, 1.5);
        assert!(toml::to_string(&c.generate)
            .unwrap()
            .contains("pretrained-length-bias = 1.5"));
        assert!(
            !toml::to_string(&checked("").unwrap().generate)
                .unwrap()
                .contains("length-bias"),
            "off, and not written, by default"
        );
        let err = checked("[generate]\npretrained-length-bias = 1.0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("pretrained-endings"), "{err}");
        let err = checked("[generate]\npretrained-endings = 4\npretrained-length-bias = -1.0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("pretrained-length-bias = -1"), "{err}");
        let c = checked("[generate]\npretrained-endings = 4\npretrained-length-bias = 1.0\npretrained-length-target = \"gold\"\n").unwrap();
        assert_eq!(c.generate.pretrained_length_target, LengthTarget::Gold);
        let c = checked("[generate]\npretrained-endings = 4\npretrained-length-bias = 1.0\npretrained-length-target = \"other-gold\"\n").unwrap();
        assert_eq!(c.generate.pretrained_length_target, LengthTarget::OtherGold);
        assert!(
            toml::to_string(&c.generate)
                .unwrap()
                .contains("pretrained-length-target = \"other-gold\""),
            "written when not the default"
        );
        assert_eq!(
            checked("").unwrap().generate.pretrained_length_target,
            LengthTarget::NearbyGold
        );
        let err =
            checked("[generate]\npretrained-endings = 4\npretrained-length-target = \"gold\"\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains("pretrained-length-bias"), "{err}");
    }

    #[test]
    fn borrowed_agree_needs_borrowed_endings_and_is_absent_when_off() {
        let c = checked("[generate]\nborrowed-endings = 64\nborrowed-agree = true\n").unwrap();
        assert!(c.generate.borrowed_agree && c.to_toml().contains("borrowed-agree = true"));
        assert_eq!(c.generate.fingerprint()["borrowed-agree"], true);
        assert!(
            !Config::default().to_toml().contains("borrowed-agree"),
            "not printed when off"
        );
        assert!(
            Config::default()
                .generate
                .fingerprint()
                .get("borrowed-agree")
                .is_none(),
            "older runs keep their fingerprints"
        );
        let e = checked("[generate]\nborrowed-agree = true\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("borrowed-agree") && e.contains("borrowed-endings"),
            "{e}"
        );
    }

    #[test]
    fn pretrained_adapt_keys_need_pretrained_endings_and_leave_other_configs_alone() {
        let c = checked("[generate]\npretrained-endings = 4\npretrained-adapt-steps = 20\npretrained-adapt-rank = 4\n").unwrap();
        assert_eq!(
            (
                c.generate.pretrained_adapt_steps,
                c.generate.pretrained_adapt_rank
            ),
            (20, 4)
        );
        let f = c.generate.fingerprint();
        assert_eq!(
            (&f["pretrained-adapt-steps"], &f["pretrained-adapt-rank"]),
            (&serde_json::json!(20), &serde_json::json!(4))
        );
        assert!(
            f.get("pretrained-adapt-batch").is_none(),
            "defaults unrecorded"
        );
        assert!(c.to_toml().contains("pretrained-adapt-steps = 20"));
        // Where adapters are copied from is not what they are: not in the fingerprint.
        let from = checked("[generate]\npretrained-endings = 4\npretrained-adapt-steps = 20\npretrained-adapt-rank = 4\npretrained-adapters-from = \"elsewhere\"\n").unwrap();
        assert_eq!(from.generate.fingerprint(), f);
        let off = Config::default();
        assert!(!off.to_toml().contains("pretrained-adapt"));
        assert!(
            !off.generate.fingerprint().to_string().contains("adapt"),
            "older runs keep their fingerprints"
        );
        for (text, key) in [
            ("pretrained-adapt-steps = 20\n", "pretrained-endings"),
            ("pretrained-endings = 4\npretrained-adapt-rank = 4\n", "pretrained-adapt-steps"),
            ("pretrained-endings = 4\npretrained-adapt-steps = 2\npretrained-adapt-rank = 0\n", "rank must be positive"),
            ("pretrained-endings = 4\npretrained-adapt-steps = 2\npretrained-adapt-learning-rate = -1.0\n", "pretrained-adapt-learning-rate = -1"),
            ("pretrained-endings = 4\npretrained-adapters-from = \"x\"\n", "pretrained-adapters-from is used only with pretrained-adapt-steps"),
        ] {
            let e = checked(&format!("[generate]\n{text}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    /// Only `questions` inputs, whose options make the pool, or borrowed or pretrained endings
    /// let a config ask for no sampled endings.
    #[test]
    fn no_sampled_endings_needs_another_source() {
        let err = checked("[generate]\nendings = 0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("endings must be positive"), "{err}");
        assert!(checked("[generate]\nendings = 0\nborrowed-endings = 8\n").is_ok());
        let questions = "[[pairs.inputs]]\npath = \"q.jsonl\"\nformat = \"questions\"\n";
        assert!(checked(&format!("{questions}[generate]\nendings = 0\n")).is_ok());
    }
}
