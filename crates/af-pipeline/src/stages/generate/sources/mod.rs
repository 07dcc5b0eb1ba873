//! Where a pool's wrong endings come from: one [`EndingSource`] per file, run in the order of
//! [`sources`]. Each offers endings for items; the stage joins them after the item's gold and
//! the endings of the sources before it, scores every one with af's LMs and writes them to the
//! pool with the source's name as their `origin`.
//!
//! A new source is a file here and a line in [`sources`]: its settings are read from
//! `[generate]` ([`EndingSource::enabled`] and its own code), its place in the list is its place
//! in each item's pool, and [`EndingSource::bar_label`] gives it a progress bar.
//!
//! Two ways to run. A source that does not stream is called once, before the pool's blocks, with
//! every item (it may keep its own resumable parts under the stage's directory, as `pretrained`
//! does); its endings are held until their blocks are written. A source that streams (af's LM
//! sampler) is called for each block the run writes, while the previous block is written; it
//! comes after every source that does not.

pub mod borrowed;
pub mod own;
pub mod pretrained;
pub mod sampled;
pub mod shared;

use std::collections::HashMap;
use std::path::Path;

use af_core::config::GenerateConfig;
use af_core::{Config, Item};
use af_nn::lm::BiLm;
use af_nn::sample::{Drawn, SampleSettings};
use af_text::Vocab;
use tch::{nn, Device};

use super::Validity;
use crate::progress::Bar;

/// The sources a pool's endings come from, in the order they join each item's pool.
pub fn sources() -> Vec<Box<dyn EndingSource>> {
    vec![
        Box::new(own::Own),
        Box::new(borrowed::Borrowed),
        Box::new(pretrained::Pretrained::default()),
        Box::new(shared::Shared::default()),
        Box::new(sampled::Sampled::default()),
    ]
}

/// One ending a source offers for an item.
#[derive(Clone, Debug, PartialEq)]
pub struct Ending {
    pub text: String,
    /// Its af LM ids, and their forward log-probabilities, when the source drew them (the
    /// sampler): the pool scores these ids rather than the text turned into ids again, counts
    /// its tokens, and takes the forward LM's features from the draw. Others get ids from their
    /// text.
    pub drawn: Option<Drawn>,
    /// Cut at the token limit rather than ended by punctuation.
    pub truncated: bool,
    /// The source that gave it (set by the stage): the pool's `origin`.
    pub origin: &'static str,
}

impl Ending {
    /// An ending known by its text alone.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            drawn: None,
            truncated: false,
            origin: "",
        }
    }
}

/// Items a source is asked for: every question (a source that does not stream), or one block's.
pub struct Items<'a> {
    /// The block's number when the source streams.
    pub block: Option<usize>,
    /// (index in the items file, item), in order.
    pub items: &'a [(usize, &'a Item)],
}

/// af's LMs, one per fold, as the stage loaded them to score the pool (and the sampler to draw
/// from): present once a block is to be written.
pub struct AfLms<'a> {
    pub vocab: &'a Vocab,
    pub models: HashMap<u32, (nn::VarStore, BiLm)>,
    pub settings: SampleSettings,
    /// Sampling and scoring under CUDA autocast.
    pub mixed: bool,
    /// Rows per sampling and scoring batch: `[generate] batch-sequences`, or fewer where the
    /// stage's memory plan says so.
    pub batch: usize,
    /// Logit elements per LM scoring batch ([`af_nn::lm::logit_budget`], or the memory plan's).
    pub logit_budget: usize,
}

/// What a source may read.
pub struct SourceContext<'a> {
    /// `[generate]` and the seed.
    pub config: &'a Config,
    /// The stage's directory: a source's side files and resumable parts go here.
    pub dir: &'a Path,
    /// Every item of the run, the questions first (others' golds, prompts' examples).
    pub all: &'a [Item],
    /// How many of `all` are questions (`[generate] limit-items`).
    pub questions: usize,
    /// The validity rules; `[generate] reject` turns endings away.
    pub validity: &'a Validity<'a>,
    pub device: Device,
    /// The stage's device memory plan: a source that puts batches on the device sizes them with
    /// it (the stage records it once the sources before the blocks are done).
    pub memory: &'a std::sync::Mutex<af_core::memory::MemoryPlan>,
    /// af's LMs, for a source that streams.
    pub lms: Option<&'a AfLms<'a>>,
}

/// What a source tells the stage's report (`report.json` under its name, and a line printed).
pub struct SourceSummary {
    pub json: serde_json::Value,
    pub line: String,
}

/// A source of wrong endings for the pool.
pub trait EndingSource: Send {
    /// Its name: the `origin` of its endings in the pool, and its key in the report.
    fn name(&self) -> &'static str;

    /// Whether `[generate]` asks for its endings.
    fn enabled(&self, g: &GenerateConfig) -> bool;

    /// Called per block while the pool is written (true), or once with every item before (false).
    fn streams(&self) -> bool {
        false
    }

    /// The label of its progress bar (over items) when its work is long enough to show one.
    fn bar_label(&self) -> Option<&'static str> {
        None
    }

    /// The files it will read (a model installed), checked without loading them: the run's
    /// `Stage::check` asks every enabled source before its first stage runs, so that a missing
    /// model stops `af run` before pairs and af's LMs spend their time, not when its turn comes.
    fn check(&self, _config: &Config) -> anyhow::Result<()> {
        Ok(())
    }

    /// Readies it before any source runs (the pretrained generator sizes its batches from its
    /// model's shape), so that a run that cannot fit stops before the sources before it work.
    fn prepare(&mut self, _ctx: &SourceContext) -> anyhow::Result<()> {
        Ok(())
    }

    /// Each item's new endings, in order: `so_far[i]` are the endings the sources before it gave
    /// `items.items[i]`, which it should not repeat.
    fn endings(
        &mut self,
        items: &Items,
        so_far: &[Vec<Ending>],
        ctx: &SourceContext,
        bar: &dyn Bar,
    ) -> anyhow::Result<Vec<Vec<Ending>>>;

    /// What it did, for the report, once every block is done.
    fn summary(&self) -> Option<SourceSummary> {
        None
    }
}
