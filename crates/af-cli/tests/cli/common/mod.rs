//! Helpers for the CLI tests: run `af`, find the repository and the shared data.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// `af ARGS` in `cwd`, without `AF_CAUSAL_LM`: whether a pretrained LM is installed must not
/// change what a test does (an export scores its datasets with one by default); [`af_with_lm`]
/// names one.
pub fn af(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_af"))
        .args(args)
        .current_dir(cwd)
        .env("AF_LOG", "warn")
        .env_remove("AF_CAUSAL_LM")
        .output()
        .expect("af runs")
}

/// `af ARGS` in `cwd` with `AF_CAUSAL_LM` naming `model`, as `scripts/setup --env` sets it.
pub fn af_with_lm(args: &[&str], cwd: &Path, model: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_af"))
        .args(args)
        .current_dir(cwd)
        .env("AF_LOG", "warn")
        .env("AF_CAUSAL_LM", model)
        .output()
        .expect("af runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[allow(unused_imports)]
pub use af_test_support::*;
