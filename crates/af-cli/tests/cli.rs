//! `af` as a user runs it: doctor, config, pairs/run with skipping, and clear errors on bad input.

mod common;

use common::*;

#[test]
fn doctor_reports_libtorch_2_11_and_succeeds_on_cpu() {
    let o = af(&["doctor", "--json"], &repo());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["version"].as_str().unwrap().starts_with("2.11.0"), "{v}");
    assert_eq!(v["devices"][0], "cpu");
    assert!(v["torch_threads"].as_i64().unwrap() >= 1);
    // The PyPI torch is a CUDA build: its CUDA backend must load even where there is no GPU.
    assert_eq!(v["cuda_backend"]["state"], "loaded", "{v}");
}

#[test]
fn config_show_resolves_defaults_and_paths() {
    let o = af(&["config", "show"], &repo());
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("min-ending-tokens = 5"), "{out}");
    assert!(out.contains(&format!("dir = \"{}/runs/default\"", repo().display())), "{out}");
}

#[test]
fn unknown_config_key_is_an_error_with_file_line_and_key() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("bad.toml");
    std::fs::write(&p, "[run]\nseed = 3\n[pairs]\nfold = 4\n").unwrap();
    let o = af(&["config", "show", p.to_str().unwrap()], d.path());
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("bad.toml:4:") && e.contains("unknown field `fold`"), "{e}");
}

#[test]
fn pairs_writes_items_report_config_and_skips_when_up_to_date() {
    let d = tempfile::tempdir().unwrap();
    let captions = repo().join("fixtures/captions/captions.json");
    let cfg = config_in(d.path(), &format!("{TINY_MODELS}[[pairs.inputs]]\npath = \"{}\"\nformat = \"activitynet\"\n", captions.display()));
    let o = af(&["run", cfg.to_str().unwrap()], d.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let run = d.path().join("run/pairs");
    let items = std::fs::read_to_string(run.join("items.jsonl")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    assert_eq!(items.lines().count() as u64, report["items"].as_u64().unwrap());
    let dropped: u64 = report["dropped"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(report["items"].as_u64().unwrap() + dropped, report["candidate_pairs"].as_u64().unwrap());
    assert_eq!(report["candidate_pairs"], 122, "163 captions in 41 videos make 122 pairs");
    // Every item: the second sentence is exactly noun phrase + ending, and folds are 0..5.
    for line in items.lines() {
        let item: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(item["fold"].as_u64().unwrap() < 5);
        assert!(!item["noun_phrase"].as_str().unwrap().is_empty());
        assert!(item["ending_tokens"].as_u64().unwrap() >= 5);
    }
    assert!(std::fs::read_to_string(run.join("config.toml")).unwrap().contains("[pairs]"));
    assert!(run.join("vocab.tsv").exists() && run.join("stage.json").exists());

    assert!(d.path().join("run/generate/stage.json").exists(), "`af run` runs every stage");
    let again = af(&["run", cfg.to_str().unwrap()], d.path());
    assert!(again.status.success());
    assert!(stdout(&again).is_empty(), "up-to-date stages are skipped: {}", stdout(&again));
    let forced = af(&["run", cfg.to_str().unwrap(), "--force", "pairs"], d.path());
    let out = stdout(&forced);
    assert!(out.contains("pairs:"), "--force reruns it");
    assert!(out.contains("lm fold 0") && out.contains("generate:"), "and what depends on it: {out}");
    assert_eq!(std::fs::read_to_string(run.join("items.jsonl")).unwrap(), items, "same seed, same items");

    // A changed config is not up to date.
    let text = std::fs::read_to_string(&cfg).unwrap().replace("threads = 1", "threads = 1\nseed = 99");
    std::fs::write(&cfg, text).unwrap();
    let changed = af(&["pairs", cfg.to_str().unwrap()], d.path());
    assert!(stdout(&changed).contains("pairs:"));
}

#[test]
fn csv_jsonl_and_text_inputs_make_items_together() {
    let d = tempfile::tempdir().unwrap();
    let f = repo().join("fixtures/inputs");
    let cfg = config_in(
        d.path(),
        &format!(
            "[pairs]\nmin-context-tokens = 3\nmin-ending-tokens = 2\n\n\
             [[pairs.inputs]]\npath = \"{0}/sentences.csv\"\nformat = \"csv\"\ngroup-field = \"video\"\ntext-field = \"caption\"\n\n\
             [[pairs.inputs]]\npath = \"{0}/pairs.jsonl\"\nformat = \"jsonl\"\ngroup-field = \"video\"\ncontext-field = \"context\"\nsentence2-field = \"next\"\nid-field = \"id\"\n\n\
             [[pairs.inputs]]\npath = \"{0}/prose\"\nformat = \"text\"\n",
            f.display()
        ),
    );
    let o = af(&["pairs", cfg.to_str().unwrap()], d.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let items = std::fs::read_to_string(d.path().join("run/pairs/items.jsonl")).unwrap();
    let ids: Vec<String> = items
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].as_str().unwrap().to_string())
        .collect();
    // CSV: v1 has three rows (not adjacent), v2 two; JSONL: two given pairs; prose: one file.
    for id in ["v1-0", "v1-1", "v2-0", "p1", "p2", "village-1"] {
        assert!(ids.contains(&id.to_string()), "{id} missing from {ids:?}");
    }
    let v1: serde_json::Value = serde_json::from_str(items.lines().find(|l| l.contains("\"v1-1\"")).unwrap()).unwrap();
    assert_eq!(v1["context"], "The man then picks up a guitar and starts playing a song.", "trimmed, in group order");
    assert_eq!(v1["noun_phrase"], "He");
}

#[test]
fn bad_inputs_fail_clearly_and_write_nothing() {
    let d = tempfile::tempdir().unwrap();
    let cases: [(&str, &[u8], &str, &str); 5] = [
        ("broken.json", b"{\"v1\": {\"sentences\": [\"A man runs.\"\n", "format = \"activitynet\"", "broken.json:2:"),
        ("latin1.json", b"{\"v1\": {\"sentences\": [\"Caf\xe9\"]}}", "format = \"activitynet\"", "latin1.json:1: invalid UTF-8 at byte offset 26"),
        ("empty.json", b"", "format = \"activitynet\"", "empty.json: empty file"),
        ("dup.json", b"{\"v\": {\"sentences\": []},\n\"v\": {\"sentences\": []}}", "format = \"activitynet\"", "duplicate video id `v`"),
        ("cols.csv", b"vid,text\nv,A man runs.\n", "format = \"csv\"\ngroup-field = \"vid\"\ntext-field = \"caption\"", "missing column `caption`"),
    ];
    for (name, content, format, expected) in cases {
        let input = d.path().join(name);
        std::fs::write(&input, content).unwrap();
        let run_dir = d.path().join(format!("run-{name}"));
        let cfg = d.path().join(format!("{name}.toml"));
        std::fs::write(
            &cfg,
            format!("[run]\ndir = \"{}\"\n[[pairs.inputs]]\npath = \"{}\"\n{format}\n", run_dir.display(), input.display()),
        )
        .unwrap();
        let o = af(&["pairs", cfg.to_str().unwrap()], d.path());
        assert_eq!(o.status.code(), Some(1), "{name}");
        let e = stderr(&o);
        assert!(e.starts_with("error: ") && e.contains(expected), "{name}: {e}");
        assert!(!run_dir.join("pairs/items.jsonl").exists(), "{name}: nothing written");
    }
}

#[test]
fn duplicate_item_ids_across_inputs_are_an_error() {
    let d = tempfile::tempdir().unwrap();
    let captions = repo().join("fixtures/captions/captions.json");
    let input = format!("[[pairs.inputs]]\npath = \"{}\"\nformat = \"activitynet\"\n", captions.display());
    let cfg = config_in(d.path(), &format!("{input}\n{input}"));
    let o = af(&["pairs", cfg.to_str().unwrap()], d.path());
    assert!(!o.status.success());
    assert!(stderr(&o).contains("duplicate item id `v_fixture000-0`"), "{}", stderr(&o));
}

#[test]
fn inputs_are_identified_by_content_not_by_mtime() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("captions.json");
    let original = std::fs::read(repo().join("fixtures/captions/captions.json")).unwrap();
    std::fs::write(&input, &original).unwrap();
    let cfg = config_in(d.path(), &format!("[[pairs.inputs]]\npath = \"{}\"\nformat = \"activitynet\"\n", input.display()));
    let run = |d: &std::path::Path| af(&["run", cfg.to_str().unwrap(), "--until", "pairs"], d);
    assert!(stdout(&run(d.path())).contains("pairs:"));
    // Rewritten with the same bytes (a copy, a re-mount): still up to date.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&input, &original).unwrap();
    assert_eq!(stdout(&run(d.path())), "", "same content, same fingerprint");
    // Different bytes: rerun.
    let changed = String::from_utf8(original).unwrap().replacen("A man", "A woman", 1);
    std::fs::write(&input, changed).unwrap();
    assert!(stdout(&run(d.path())).contains("pairs:"));
}
