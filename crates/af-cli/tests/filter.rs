//! The filter, export and report stages on the caption fixture with tiny models: outputs that
//! agree with each other, an exact resume after `kill -9`, and clear errors for bad input.

mod common;

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
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

fn copy_run(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    assert!(Command::new("cp").arg("-r").arg(from.join("run")).arg(to).status().unwrap().success());
}

#[test]
fn filter_export_and_report_agree() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path(), 3, 3, "");
    ok(&af(&["run", cfg.to_str().unwrap()], d.path()));
    let run = d.path().join("run");
    let state = json(&run.join("filter/state.json"));
    let iterations = state["iterations"].as_array().unwrap();
    assert!(!iterations.is_empty() && iterations.len() <= 6);
    assert!(state["finished"].as_bool().unwrap());

    // metrics.csv: one row per iteration and head, heads of the stage's committee plus joint.
    let metrics = std::fs::read_to_string(run.join("filter/metrics.csv")).unwrap();
    let rows: Vec<&str> = metrics.lines().skip(1).collect();
    let heads: usize = iterations.iter().map(|i| i["heads"].as_array().unwrap().len()).sum();
    assert_eq!(rows.len(), heads);
    assert!(rows[0].starts_with("0,mlp,joint,true,"), "{}", rows[0]);
    assert!(rows.iter().any(|r| r.contains(",full,pos-lstm,")) || iterations.len() <= 3);

    // The history replays onto the random start to give the final assignment.
    let history = std::fs::read_to_string(run.join("filter/history.csv")).unwrap();
    let swaps: usize = iterations.iter().map(|i| i["swaps"].as_u64().unwrap() as usize).sum();
    assert_eq!(history.lines().count(), swaps + 1);

    // dataset.jsonl: one line per item in the pool, k distinct distractors, none the gold.
    let dataset = std::fs::read_to_string(run.join("export/dataset.jsonl")).unwrap();
    let random = std::fs::read_to_string(run.join("export/random.jsonl")).unwrap();
    let items = std::fs::read_to_string(run.join("pairs/items.jsonl")).unwrap().lines().count();
    assert_eq!(dataset.lines().count(), items);
    assert_eq!(random.lines().count(), items);
    let mut differs = 0;
    for (a, r) in dataset.lines().zip(random.lines()) {
        let (a, r): (serde_json::Value, serde_json::Value) = (serde_json::from_str(a).unwrap(), serde_json::from_str(r).unwrap());
        assert_eq!(a["id"], r["id"]);
        let ends: Vec<&str> = a["distractors"].as_array().unwrap().iter().map(|d| d["ending"].as_str().unwrap()).collect();
        assert_eq!(ends.len(), 3);
        assert!(!ends.contains(&a["gold"]["ending"].as_str().unwrap()));
        let mut ids: Vec<u64> = a["distractors"].as_array().unwrap().iter().map(|d| d["candidate"].as_u64().unwrap()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 3);
        assert_eq!(a["distractors"][0]["features"].as_object().unwrap().len(), 8);
        differs += usize::from(a["distractors"] != r["distractors"]);
    }
    assert_eq!(differs > 0, swaps > 0, "AF changed exactly the items it swapped in");

    // SWAG's full CSV: header with 3 distractor columns, one row per item.
    let full = std::fs::read_to_string(run.join("export/dataset-full.csv")).unwrap();
    assert!(full.starts_with("video-id,fold-ind,startphrase,gold-ending,distractor-0,distractor-1,distractor-2,gold-source,"));
    let mut reader = csv::Reader::from_reader(full.as_bytes());
    assert_eq!(reader.records().count(), items);

    // With k = 3 the regular layout is SWAG's own, header for header.
    let regular = std::fs::read_to_string(run.join("export/swag/train.csv")).unwrap();
    let header = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label";
    assert_eq!(regular.lines().next().unwrap(), header);
    if let Some(data) = shared_data("filter_export_and_report_agree (SWAG header)") {
        let sample = std::fs::read_to_string(data.join("format-samples/swag/train.csv")).unwrap();
        assert_eq!(sample.lines().next().unwrap(), header);
    }

    let eval = json(&run.join("export/evaluation.json"));
    for side in ["af", "random"] {
        let names: Vec<&str> = eval[side]["detectors"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["joint", "mlp", "bow", "cnn", "pos-lstm", "longest-ending", "shortest-ending"]);
        for d in eval[side]["detectors"].as_array().unwrap() {
            let (a, lo, hi) = (d["accuracy"].as_f64().unwrap(), d["ci_low"].as_f64().unwrap(), d["ci_high"].as_f64().unwrap());
            assert!(lo <= a && a <= hi, "{d}");
        }
    }

    // The audit's detectors the committee (mlp, bow, cnn, pos-lstm on noun phrase + ending) never
    // was: every [audit] model on every view but the CNN on the committee's own view, token
    // statistics and baselines, on both datasets.
    let audit = &eval["audit"];
    assert_eq!(audit["models"], serde_json::json!(["ngram", "cnn", "lstm"]));
    assert_eq!(audit["left_out_as_committee_members"], serde_json::json!(["cnn/second-sentence"]));
    let compared: Vec<&str> = audit["comparison"].as_array().unwrap().iter().map(|c| c["detector"].as_str().unwrap()).collect();
    assert_eq!(
        compared,
        [
            "random", "shortest-ending", "longest-ending", "token-statistics/ending", "ngram/ending", "cnn/ending", "lstm/ending",
            "ngram/second-sentence", "lstm/second-sentence", "ngram/full", "cnn/full", "lstm/full"
        ]
    );
    for name in ["af", "random"] {
        let full = json(&run.join(format!("export/audit-{name}.json")));
        assert_eq!(full["detectors"].as_array().unwrap().len(), compared.len());
    }
    let csv_rows = std::fs::read_to_string(run.join("export/audit-comparison.csv")).unwrap().lines().count();
    assert_eq!(csv_rows, compared.len() + 1);

    // The report: self-contained, the plot in both formats.
    let html = std::fs::read_to_string(run.join("report/report.html")).unwrap();
    for needle in ["Held-out accuracy during filtering", "random assignment", "Audit detectors the committee never saw", "Perplexity of gold endings", "class=\"right\"", "<svg", "Compute", "Generation arithmetic: fp32"] {
        assert!(html.contains(needle), "report lacks {needle}");
    }
    // Every stage records its time and peak host memory (no device memory on the CPU).
    for stage in ["pairs", "lm", "generate", "filter", "export"] {
        let record = json(&run.join(format!("{stage}/stage.json")));
        assert!(record["peak_host_bytes"].as_u64().is_some_and(|b| b > 10 << 20), "{stage}: {record}");
        assert!(record["device_bytes"].is_null(), "{stage}: {record}");
    }
    // The filter leaves its table for the export, which loads it rather than tagging again.
    assert!(run.join("filter/table/table.json").exists() && run.join("filter/table/part-000.safetensors").exists());
    let table = json(&run.join("filter/table.json"));
    assert!(table["rows"].as_u64().unwrap() > 0 && table["peak_host_bytes_after_table"].as_u64().is_some());
    assert!(!html.contains(" src=") && !html.contains("<link") && !html.contains("<script"), "nothing is fetched");
    assert_eq!(&std::fs::read(run.join("report/accuracy.png")).unwrap()[1..4], b"PNG");
    assert!(std::fs::read_to_string(run.join("report/accuracy.svg")).unwrap().contains("chance"));

    // `af report RUN_DIR` rebuilds the same page from the files alone.
    std::fs::remove_file(run.join("report/report.html")).unwrap();
    ok(&af(&["report", run.to_str().unwrap()], d.path()));
    assert_eq!(std::fs::read_to_string(run.join("report/report.html")).unwrap(), html);
}

#[test]
fn a_killed_filter_resumes_and_ends_exactly_where_an_uninterrupted_one_does() {
    let a = tempfile::tempdir().unwrap();
    let cfg_a = config(a.path(), 20, 20, "");
    ok(&af(&["run", cfg_a.to_str().unwrap(), "--until", "generate"], a.path()));
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
        assert!(started.elapsed() < Duration::from_secs(120), "the filter made no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = json(&state_b);
    assert!(!killed["finished"].as_bool().unwrap(), "killed before the end: the test tests something");
    assert!(!b.path().join("run/filter/stage.json").exists());

    let resumed = af(&["filter", "--resume", cfg_b.to_str().unwrap()], b.path());
    ok(&resumed);
    let (sa, sb) = (json(&a.path().join("run/filter/state.json")), json(&state_b));
    assert_eq!(sa["assignment"], sb["assignment"], "same final assignment");
    assert_eq!(sa["swaps"], sb["swaps"], "same history");
    let strip = |s: &serde_json::Value| {
        let mut v = s["iterations"].clone();
        v.as_array_mut().unwrap().iter_mut().for_each(|i| i["seconds"] = 0.into());
        v
    };
    assert_eq!(strip(&sa), strip(&sb), "same metrics");
    // history.csv is appended to per iteration and rewritten from the state on resume.
    let history = |dir: &Path| std::fs::read_to_string(dir.join("run/filter/history.csv")).unwrap();
    assert_eq!(history(a.path()), history(b.path()), "same history.csv");
    assert_eq!(history(a.path()).lines().count(), sa["swaps"].as_array().unwrap().len() + 1);

    // --resume under a changed config refuses instead of silently starting over.
    let text = std::fs::read_to_string(&cfg_b).unwrap().replace("k = 3", "k = 3\nepsilon = 0.01");
    std::fs::write(&cfg_b, text).unwrap();
    let o = af(&["filter", "--resume", cfg_b.to_str().unwrap()], b.path());
    assert!(!o.status.success() && stderr(&o).contains("started with another config"), "{}", stderr(&o));
    assert_eq!(json(&state_b)["assignment"], sa["assignment"], "and leaves the state alone");

    // --resume with nothing to resume is an error, not a fresh start.
    let c = tempfile::tempdir().unwrap();
    let cfg_c = config(c.path(), 20, 20, "");
    let o = af(&["filter", "--resume", cfg_c.to_str().unwrap()], c.path());
    assert!(!o.status.success() && stderr(&o).contains("no interrupted filter run"), "{}", stderr(&o));
}

#[test]
fn bad_filter_inputs_fail_clearly_and_overwrite_nothing() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path(), 1, 1, "");
    ok(&af(&["run", cfg.to_str().unwrap(), "--until", "generate"], d.path()));

    // A config naming an unknown member: the file, the line, what was expected.
    let text = std::fs::read_to_string(&cfg).unwrap().replace("\"cnn\", \"pos-lstm\"", "\"cnn\", \"gru\"");
    std::fs::write(d.path().join("bad-member.toml"), &text).unwrap();
    let o = af(&["filter", "bad-member.toml"], d.path());
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("bad-member.toml:") && e.contains("unknown variant `gru`") && e.contains("pos-lstm"), "{e}");

    // k larger than the pool (15 endings per item).
    let text = std::fs::read_to_string(&cfg).unwrap().replace("k = 3", "k = 20");
    std::fs::write(&cfg, &text).unwrap();
    let o = af(&["filter", cfg.to_str().unwrap()], d.path());
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("fewer than [filter] k = 20"), "{e}");
    assert!(!d.path().join("run/filter/state.json").exists());
    std::fs::write(&cfg, text.replace("k = 20", "k = 3")).unwrap();

    // A corrupted state: an error that says what to do, and the file is left as it is.
    ok(&af(&["filter", cfg.to_str().unwrap()], d.path()));
    std::fs::remove_file(d.path().join("run/filter/stage.json")).unwrap();
    let state = d.path().join("run/filter/state.json");
    std::fs::write(&state, b"{\"assignment\": {\"k\": 3, \"distr").unwrap();
    let o = af(&["filter", cfg.to_str().unwrap()], d.path());
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("state.json is corrupted") && e.contains("--force filter"), "{e}");
    assert_eq!(std::fs::read(&state).unwrap(), b"{\"assignment\": {\"k\": 3, \"distr");

    // A pool that does not match its items.
    let items = d.path().join("run/pairs/items.jsonl");
    let text = std::fs::read_to_string(&items).unwrap().replacen("\"id\":\"v_fixture000-0\"", "\"id\":\"other\"", 1);
    assert!(text.contains("\"other\""), "the fixture's first item id changed");
    std::fs::write(&items, text).unwrap();
    let o = af(&["filter", cfg.to_str().unwrap()], d.path());
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("does not match") && e.contains("`other`"), "{e}");
    assert_eq!(std::fs::read(&state).unwrap(), b"{\"assignment\": {\"k\": 3, \"distr", "checked before anything is written");
}
