//! Helpers for the CLI tests: run `af`, find the repository and the shared data.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

pub fn af(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_af"))
        .args(args)
        .current_dir(cwd)
        .env("AF_LOG", "warn")
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
