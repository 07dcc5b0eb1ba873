//! What af's tests share, as a dev-dependency of every crate whose tests need it: the
//! repository, the shared data and installed models, small configs on the project's fixtures, and
//! multiple-choice files with planted artifacts or bad rows, and the readers' fuzzer's mutations
//! ([`mutate`]). No libtorch.
//!
//! # Tests that need something from outside the repository
//! One convention: a test asks [`shared_data`] or [`installed`] for what it needs and returns when
//! it gets `None`, which happens only after `SKIPPED <test>: <what is missing>` was written to
//! stderr, where the test runner does not hide it. Where the need must be met (scripts/test sets
//! `AF_TEST_REQUIRE`: `models`, which scripts/setup installs, and `data` when `../shared/data` is
//! there, as in CI), a missing one fails the test instead, so nothing skips into a pass where it
//! could have run.

pub mod mutate;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// The directory of the crate whose test is running, as cargo says when it runs the test (every
/// crate is `crates/<name>`). Read at run time, not compiled in: checkouts that share one
/// `CARGO_TARGET_DIR` (as scripts/env.sh arranges) can reuse a test binary another checkout
/// built, and a compiled-in path would point the test at that checkout's files.
pub fn crate_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The repository's root.
pub fn repo() -> PathBuf {
    crate_dir().join("../..").canonicalize().unwrap()
}

/// What a test may need from outside the repository, as `AF_TEST_REQUIRE` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// `../shared/data` (or `$AF_SHARED_DATA`): real data, never part of the repository.
    Data,
    /// A model `scripts/setup` installs and names in an environment variable.
    Models,
    /// Something no set-up script provides (an exported TorchScript module): always optional.
    Extra,
}

impl Need {
    fn word(self) -> &'static str {
        match self {
            Need::Data => "data",
            Need::Models => "models",
            Need::Extra => "extra",
        }
    }

    /// Whether `AF_TEST_REQUIRE` (comma-separated words) says this need must be met.
    pub fn required(self) -> bool {
        std::env::var("AF_TEST_REQUIRE")
            .unwrap_or_default()
            .split(',')
            .any(|w| w.trim() == self.word())
    }
}

/// `None` after saying `SKIPPED <test>: <missing>`; a panic where `need` is required.
fn skip(test: &str, need: Need, missing: &str) {
    if need.required() {
        panic!(
            "{test}: {missing}, and AF_TEST_REQUIRE={} says it must be there",
            std::env::var("AF_TEST_REQUIRE").unwrap_or_default()
        );
    }
    // A direct write to stderr is not captured by the test runner.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {missing}");
}

/// `../shared/data` (or `$AF_SHARED_DATA`), or None after saying SKIPPED.
pub fn shared_data(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("AF_SHARED_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/data"));
    if dir.is_dir() {
        return Some(dir);
    }
    skip(
        test,
        Need::Data,
        &format!(
            "{} is absent (real data is not part of the repository)",
            dir.display()
        ),
    );
    None
}

/// The existing file or directory the environment variable `var` names, or None after saying
/// SKIPPED (with `how`: what sets it).
pub fn installed(test: &str, var: &str, need: Need, how: &str) -> Option<PathBuf> {
    match std::env::var_os(var).map(PathBuf::from) {
        Some(p) if p.exists() => Some(p),
        Some(p) => {
            skip(
                test,
                need,
                &format!("{var}={} does not exist ({how})", p.display()),
            );
            None
        }
        None => {
            skip(test, need, &format!("{var} is not set ({how})"));
            None
        }
    }
}

static TORCH: Mutex<()> = Mutex::new(());

/// Held for the whole body of a test that runs a stage, trains anything or seeds libtorch:
/// libtorch's random generator and thread settings are global to the process, and one test
/// binary holds many such tests. A test that panicked while holding it leaves nothing behind
/// that the next one depends on.
pub fn lock() -> MutexGuard<'static, ()> {
    TORCH.lock().unwrap_or_else(|e| e.into_inner())
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
    std::fs::write(
        &p,
        format!("[run]\ndir = \"run\"\nthreads = 1\ndevice = \"cpu\"\n\n{inputs}"),
    )
    .unwrap();
    p
}

/// The caption fixture as the pairs stage's input.
pub fn captions_input() -> String {
    format!(
        "[[pairs.inputs]]\npath = \"{}\"\nformat = \"activitynet\"\n",
        repo().join("fixtures/captions/captions.json").display()
    )
}

/// A config on the caption fixture with tiny models and `mlp`/`full` stages of the given lengths.
pub fn fixture_config(dir: &Path, mlp: usize, full: usize, extra: &str) -> PathBuf {
    let tiny = TINY_MODELS.replace(
        "iterations = 2\n\n[[filter.stages]]",
        &format!("iterations = {mlp}\n\n[[filter.stages]]"),
    );
    let tiny = tiny.replacen(
        "pos-lstm\"]\niterations = 2",
        &format!("pos-lstm\"]\niterations = {full}"),
        1,
    );
    assert_ne!(
        tiny,
        TINY_MODELS.to_string(),
        "the stage lengths were replaced"
    );
    config_in(dir, &format!("{tiny}{extra}\n{}", captions_input()))
}

/// af-audit's synthetic questions (`n` of `options` endings, `planted` in the right ones) as a
/// generic JSONL file at `path`.
pub fn write_synthetic_questions(
    path: &Path,
    n: usize,
    options: usize,
    planted: af_audit::synthetic::Planted,
    seed: u64,
) {
    let lines: Vec<String> = af_audit::synthetic::questions(n, options, planted, seed)
        .iter()
        .map(|q| serde_json::json!({"id": q.id, "group": q.group, "context": q.context, "prefix": q.prefix, "endings": q.endings, "label": q.label}).to_string())
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// 200 generic 4-way questions in `dir/bad.jsonl` whose 8th line has the label 9 (out of range).
pub fn write_bad_labels(dir: &Path) -> PathBuf {
    use af_audit::synthetic::{questions, Planted};
    let p = dir.join("bad.jsonl");
    let mut text = String::new();
    for (i, q) in questions(200, 4, Planted::Nothing, 5).iter().enumerate() {
        let label = if i == 7 {
            serde_json::json!(9)
        } else {
            serde_json::json!(q.label)
        };
        text.push_str(
            &serde_json::json!({"context": q.context, "endings": q.endings, "label": label})
                .to_string(),
        );
        text.push('\n');
    }
    std::fs::write(&p, text).unwrap();
    p
}

/// The installed pretrained LM (`AF_CAUSAL_LM`, which `scripts/setup --env` sets), or None after
/// saying SKIPPED (a failure where `AF_TEST_REQUIRE` names `models`).
pub fn causal_lm(test: &str) -> Option<PathBuf> {
    installed(
        test,
        "AF_CAUSAL_LM",
        Need::Models,
        "scripts/setup installs SmolLM2-135M and `scripts/setup --env` names it",
    )
}
