//! Helpers for the in-process tests: the repository, the shared data, small configs on the
//! fixtures, and the lock every test that runs a stage or trains anything holds.

#![allow(dead_code)]

use std::path::Path;

use af_core::Config;
use af_pipeline::runner::{self, StageRun};
use af_pipeline::{NoProgress, StageName};

#[allow(unused_imports)] // not every test uses every fixture
pub use af_test_support::*;

/// The config at `path`, with the export's evaluation by a pretrained LM off unless the config
/// names it (`eval` or `eval-model`): whether `AF_CAUSAL_LM` is set must not change what a test
/// does (tests/export.rs scores with a toy model, the CLI's export test with the installed one).
pub fn load(path: &Path) -> Config {
    let mut config = af_pipeline::load_config(Some(path))
        .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    if config.export.eval.is_none() && config.export.eval_model.is_none() {
        config.export.eval = Some(false);
    }
    config
}

/// What became of a stage, in a word: "done", "up-to-date" or "partial".
pub fn outcome(run: &StageRun) -> (Option<StageName>, &'static str) {
    match run {
        StageRun::UpToDate { stage, .. } => (Some(*stage), "up-to-date"),
        StageRun::Done { record, .. } => (Some(record.stage), "done"),
        StageRun::Partial { .. } => (None, "partial"),
    }
}

/// Runs `stages` as `af run` does (threads from the config, a forced stage forces the rest) and
/// returns what became of each.
pub fn run_stages(
    config: &Config,
    stages: &[StageName],
    force: &[StageName],
) -> Vec<(Option<StageName>, &'static str)> {
    let mut outcomes = Vec::new();
    runner::run_stages(config, stages, force, &NoProgress, |r| {
        outcomes.push(outcome(r))
    })
    .unwrap_or_else(|e| panic!("{e:#}"));
    outcomes
}

/// Runs `stages` as [`run_stages`] does, expecting a refusal: its message with the whole cause
/// chain. `why` says what should have refused.
pub fn run_stages_err(
    config: &Config,
    stages: &[StageName],
    force: &[StageName],
    why: &str,
) -> String {
    let err = runner::run_stages(config, stages, force, &NoProgress, |_| {}).expect_err(why);
    format!("{err:#}")
}

/// Every stage up to and including `last`.
pub fn until(last: StageName) -> &'static [StageName] {
    let n = af_pipeline::ALL_STAGES
        .iter()
        .position(|&s| s == last)
        .unwrap()
        + 1;
    &af_pipeline::ALL_STAGES[..n]
}

/// Runs one stage as its own command does (threads from the config first).
pub fn run_stage(config: &Config, stage: StageName, force: bool) -> anyhow::Result<StageRun> {
    af_pipeline::setup::init_threads(config);
    runner::run_stage(config, stage, force, None, &NoProgress)
}

pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

pub fn jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
