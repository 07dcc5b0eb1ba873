//! Helpers for the in-process tests: the repository, the shared data, small configs on the
//! fixtures, and the lock every test that runs a stage or trains anything holds.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use af_core::Config;
use af_pipeline::runner::{self, StageRun};
use af_pipeline::{NoProgress, StageName};

static LOCK: Mutex<()> = Mutex::new(());

/// Held for the whole body of a test that runs a stage or trains anything: libtorch's random
/// generator and thread settings are global to the process, and the tests of one file share it.
/// A test that panicked while holding it leaves nothing behind that the next one depends on.
pub fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// `../shared/data` (or $AF_SHARED_DATA), or None after saying SKIPPED where the test runner does
/// not hide it (a direct write to stderr is not captured).
pub fn shared_data(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("AF_SHARED_DATA").map(PathBuf::from).unwrap_or_else(|| repo().join("../shared/data"));
    if dir.is_dir() {
        return Some(dir);
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {} is absent (real data is not part of the repository)", dir.display());
    None
}

/// `[lm]`, `[generate]`, `[committee]` and `[filter]` sections small enough for a test to run
/// every stage in seconds.
pub const TINY_MODELS: &str = "[lm]\nmin-count = 1\nembedding = 16\nhidden = 16\nbatch-size = 16\nmax-epochs = 2\n\n\
    [generate]\nendings = 15\nmax-tokens = 10\nblock-items = 32\nbatch-sequences = 512\n\n\
    [committee]\nembedding = 8\nindicator-embedding = 4\nmlp-hidden = 16\ncnn-filters = 4\nlstm-hidden = 8\njoint-hidden = 8\n\
    epochs = 1\nbatch-items = 16\nmax-vocab = 500\n\n\
    [filter]\nk = 3\n\n\
    [[filter.stages]]\nname = \"mlp\"\nmembers = [\"mlp\"]\niterations = 2\n\n\
    [[filter.stages]]\nname = \"full\"\nmembers = [\"mlp\", \"bow\", \"cnn\", \"pos-lstm\"]\niterations = 2\n\n";

/// A config in a fresh directory whose run dir is inside it; `inputs` is the rest of the TOML.
/// Relative paths resolve against the config's directory, so no test depends on the process's
/// working directory.
pub fn config_in(dir: &Path, inputs: &str) -> PathBuf {
    let p = dir.join("config.toml");
    std::fs::write(&p, format!("[run]\ndir = \"run\"\nthreads = 1\ndevice = \"cpu\"\n\n{inputs}")).unwrap();
    p
}

/// The caption fixture as the pairs stage's input.
pub fn captions_input() -> String {
    format!("[[pairs.inputs]]\npath = \"{}\"\nformat = \"activitynet\"\n", repo().join("fixtures/captions/captions.json").display())
}

/// A config on the caption fixture with tiny models and `mlp`/`full` stages of the given lengths.
pub fn fixture_config(dir: &Path, mlp: usize, full: usize, extra: &str) -> PathBuf {
    let tiny = TINY_MODELS.replace("iterations = 2\n\n[[filter.stages]]", &format!("iterations = {mlp}\n\n[[filter.stages]]"));
    let tiny = tiny.replacen("pos-lstm\"]\niterations = 2", &format!("pos-lstm\"]\niterations = {full}"), 1);
    assert_ne!(tiny, TINY_MODELS.to_string(), "the stage lengths were replaced");
    config_in(dir, &format!("{tiny}{extra}\n{}", captions_input()))
}

pub fn load(path: &Path) -> Config {
    af_pipeline::load_config(Some(path)).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()))
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
pub fn run_stages(config: &Config, stages: &[StageName], force: &[StageName]) -> Vec<(Option<StageName>, &'static str)> {
    let mut outcomes = Vec::new();
    runner::run_stages(config, stages, force, &NoProgress, |r| outcomes.push(outcome(r))).unwrap_or_else(|e| panic!("{e:#}"));
    outcomes
}

/// Every stage up to and including `last`.
pub fn until(last: StageName) -> &'static [StageName] {
    let n = af_pipeline::ALL_STAGES.iter().position(|&s| s == last).unwrap() + 1;
    &af_pipeline::ALL_STAGES[..n]
}

/// Runs one stage as its own command does (threads from the config first).
pub fn run_stage(config: &Config, stage: StageName, force: bool) -> anyhow::Result<StageRun> {
    af_pipeline::setup::init_threads(config);
    runner::run_stage(config, stage, force, None, &NoProgress)
}

pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

pub fn jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}
