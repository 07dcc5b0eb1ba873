//! `af filter` on the caption fixture with tiny models: an exact resume after `kill -9`, and clear
//! errors for bad input. What the filter, export and report stages write is tested in-process in
//! crates/af-pipeline/tests/stages.rs.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn config(dir: &Path, mlp: usize, full: usize, extra: &str) -> PathBuf {
    fixture_config(dir, mlp, full, extra)
}

fn ok(o: &std::process::Output) {
    assert!(o.status.success(), "{}", stderr(o));
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

fn copy_run(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    assert!(Command::new("cp")
        .arg("-r")
        .arg(from.join("run"))
        .arg(to)
        .status()
        .unwrap()
        .success());
}

#[test]
fn a_killed_filter_resumes_and_ends_exactly_where_an_uninterrupted_one_does() {
    let a = tempfile::tempdir().unwrap();
    let cfg_a = config(a.path(), 20, 20, "");
    ok(&af(
        &["run", cfg_a.to_str().unwrap(), "--until", "generate"],
        a.path(),
    ));
    let b = tempfile::tempdir().unwrap();
    copy_run(a.path(), b.path());
    let cfg_b = config(b.path(), 20, 20, "");
    ok(&af(&["filter", cfg_a.to_str().unwrap()], a.path()));

    let mut child = Command::new(env!("CARGO_BIN_EXE_af"))
        .args(["filter", cfg_b.to_str().unwrap()])
        .current_dir(b.path())
        .env("AF_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let state_b = b.path().join("run/filter/state.json");
    let started = Instant::now();
    loop {
        let done = std::fs::read_to_string(&state_b)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|s| s["iterations"].as_array().unwrap().len() >= 3);
        if done {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the filter made no progress"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = json(&state_b);
    assert!(
        !killed["finished"].as_bool().unwrap(),
        "killed before the end: the test tests something"
    );
    assert!(!b.path().join("run/filter/stage.json").exists());

    let resumed = af(&["filter", "--resume", cfg_b.to_str().unwrap()], b.path());
    ok(&resumed);
    let (sa, sb) = (
        json(&a.path().join("run/filter/state.json")),
        json(&state_b),
    );
    assert_eq!(sa["assignment"], sb["assignment"], "same final assignment");
    assert_eq!(sa["swaps"], sb["swaps"], "same history");
    let strip = |s: &serde_json::Value| {
        let mut v = s["iterations"].clone();
        v.as_array_mut()
            .unwrap()
            .iter_mut()
            .for_each(|i| i["seconds"] = 0.into());
        v
    };
    assert_eq!(strip(&sa), strip(&sb), "same metrics");
    // history.csv is appended to per iteration and rewritten from the state on resume.
    let history = |dir: &Path| std::fs::read_to_string(dir.join("run/filter/history.csv")).unwrap();
    assert_eq!(history(a.path()), history(b.path()), "same history.csv");
    assert_eq!(
        history(a.path()).lines().count(),
        sa["swaps"].as_array().unwrap().len() + 1
    );

    // --resume under a changed config refuses instead of silently starting over.
    let text = std::fs::read_to_string(&cfg_b)
        .unwrap()
        .replace("k = 3", "k = 3\nepsilon = 0.01");
    std::fs::write(&cfg_b, text).unwrap();
    let o = af(&["filter", "--resume", cfg_b.to_str().unwrap()], b.path());
    assert!(
        !o.status.success() && stderr(&o).contains("started with another config"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        json(&state_b)["assignment"],
        sa["assignment"],
        "and leaves the state alone"
    );

    // --resume with nothing to resume is an error, not a fresh start.
    let c = tempfile::tempdir().unwrap();
    let cfg_c = config(c.path(), 20, 20, "");
    let o = af(&["filter", "--resume", cfg_c.to_str().unwrap()], c.path());
    assert!(
        !o.status.success() && stderr(&o).contains("no interrupted filter run"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_filter_inputs_fail_clearly_and_overwrite_nothing() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path(), 1, 1, "");
    ok(&af(
        &["run", cfg.to_str().unwrap(), "--until", "generate"],
        d.path(),
    ));

    // A config naming an unknown member: the file, the line, what was expected.
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("\"cnn\", \"pos-lstm\"", "\"cnn\", \"gru\"");
    std::fs::write(d.path().join("bad-member.toml"), &text).unwrap();
    let o = af(&["filter", "bad-member.toml"], d.path());
    let e = stderr(&o);
    assert!(
        !o.status.success()
            && e.contains("bad-member.toml:")
            && e.contains("unknown committee member `gru`")
            && e.contains("pos-lstm"),
        "{e}"
    );

    // k larger than the pool (15 endings per item).
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("k = 3", "k = 20");
    std::fs::write(&cfg, &text).unwrap();
    let o = af(&["filter", cfg.to_str().unwrap()], d.path());
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains("fewer than [filter] k = 20"),
        "{e}"
    );
    assert!(!d.path().join("run/filter/state.json").exists());
    std::fs::write(&cfg, text.replace("k = 20", "k = 3")).unwrap();

    // A corrupted state: an error that says what to do, and the file is left as it is.
    ok(&af(&["filter", cfg.to_str().unwrap()], d.path()));
    std::fs::remove_file(d.path().join("run/filter/stage.json")).unwrap();
    let state = d.path().join("run/filter/state.json");
    std::fs::write(&state, b"{\"assignment\": {\"k\": 3, \"distr").unwrap();
    let o = af(&["filter", cfg.to_str().unwrap()], d.path());
    let e = stderr(&o);
    assert!(
        !o.status.success()
            && e.contains("state.json is corrupted")
            && e.contains("--force filter"),
        "{e}"
    );
    assert_eq!(
        std::fs::read(&state).unwrap(),
        b"{\"assignment\": {\"k\": 3, \"distr"
    );

    // A pool that does not match its items.
    let items = d.path().join("run/pairs/items.jsonl");
    let text = std::fs::read_to_string(&items).unwrap().replacen(
        "\"id\":\"v_fixture000-0\"",
        "\"id\":\"other\"",
        1,
    );
    assert!(
        text.contains("\"other\""),
        "the fixture's first item id changed"
    );
    std::fs::write(&items, text).unwrap();
    let o = af(&["filter", cfg.to_str().unwrap()], d.path());
    let e = stderr(&o);
    assert!(
        !o.status.success() && e.contains("does not match") && e.contains("`other`"),
        "{e}"
    );
    assert_eq!(
        std::fs::read(&state).unwrap(),
        b"{\"assignment\": {\"k\": 3, \"distr",
        "checked before anything is written"
    );
}
