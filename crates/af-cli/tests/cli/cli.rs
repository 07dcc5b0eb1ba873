//! `af` as a user runs it: doctor, config, what `af run` prints, and clear errors on bad input.
//! What the stages write and how the runner skips them is tested in-process in
//! crates/af-pipeline/tests/stages.rs.

use crate::common;

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
    assert!(
        out.contains("min-ending-tokens = 4"),
        "the file's own value: {out}"
    );
    assert!(
        out.contains("max-rounds = 6"),
        "a default the file does not set: {out}"
    );
    assert!(
        out.contains(&format!("dir = \"{}/runs/default\"", repo().display())),
        "{out}"
    );
}

#[test]
fn unknown_config_key_is_an_error_with_file_line_and_key() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("bad.toml");
    std::fs::write(&p, "[run]\nseed = 3\n[pairs]\nfold = 4\n").unwrap();
    let o = af(&["config", "show", p.to_str().unwrap()], d.path());
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("bad.toml:4:") && e.contains("unknown field `fold`"),
        "{e}"
    );
}

#[test]
fn run_prints_the_report_of_each_stage_it_runs_and_nothing_for_up_to_date_ones() {
    let d = tempfile::tempdir().unwrap();
    let captions = repo().join("fixtures/captions/captions.json");
    let cfg = config_in(
        d.path(),
        &format!(
            "[[pairs.inputs]]\npath = \"{}\"\nformat = \"activitynet\"\n",
            captions.display()
        ),
    );
    let cfg = cfg.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", cfg, "--until", "pairs"];
        args.extend(extra);
        let o = af(&args, d.path());
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let first = run(&[]);
    assert!(
        first.starts_with("pairs: ") && first.contains(" items from 122 candidate pairs"),
        "{first}"
    );
    assert_eq!(run(&[]), "", "up-to-date stages print nothing");
    assert_eq!(
        run(&["--force", "pairs"]),
        first,
        "--force reruns it: same seed, same report"
    );
    let o = af(&["pairs", cfg], d.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), first, "`af pairs` always runs");
}

#[test]
fn bad_inputs_fail_clearly_and_write_nothing() {
    let d = tempfile::tempdir().unwrap();
    let cases: [(&str, &[u8], &str, &str); 5] = [
        (
            "broken.json",
            b"{\"v1\": {\"sentences\": [\"A man runs.\"\n",
            "format = \"activitynet\"",
            "broken.json:2:",
        ),
        (
            "latin1.json",
            b"{\"v1\": {\"sentences\": [\"Caf\xe9\"]}}",
            "format = \"activitynet\"",
            "latin1.json:1:27: invalid UTF-8 at byte offset 26",
        ),
        (
            "empty.json",
            b"",
            "format = \"activitynet\"",
            "empty.json: empty file",
        ),
        (
            "dup.json",
            b"{\"v\": {\"sentences\": []},\n\"v\": {\"sentences\": []}}",
            "format = \"activitynet\"",
            "duplicate video id `v`",
        ),
        (
            "cols.csv",
            b"vid,text\nv,A man runs.\n",
            "format = \"csv\"\ngroup-field = \"vid\"\ntext-field = \"caption\"",
            "missing column `caption`",
        ),
    ];
    for (name, content, format, expected) in cases {
        let input = d.path().join(name);
        std::fs::write(&input, content).unwrap();
        let run_dir = d.path().join(format!("run-{name}"));
        let cfg = d.path().join(format!("{name}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "[run]\ndir = \"{}\"\n[[pairs.inputs]]\npath = \"{}\"\n{format}\n",
                run_dir.display(),
                input.display()
            ),
        )
        .unwrap();
        let o = af(&["pairs", cfg.to_str().unwrap()], d.path());
        assert_eq!(o.status.code(), Some(1), "{name}");
        let e = stderr(&o);
        assert!(
            e.starts_with("error: ") && e.contains(expected),
            "{name}: {e}"
        );
        assert!(
            !run_dir.join("pairs/items.jsonl").exists(),
            "{name}: nothing written"
        );
    }
}

#[test]
fn eval_summarise_reads_a_folder_back_from_its_scores_without_the_lm() {
    // A committed `af eval` folder of a pool the LM wrote (200 questions, 4-way).
    let committed = repo().join("docs/runs/activitynet-lm-likelihood/eval/swag");
    let d = tempfile::tempdir().unwrap();
    for name in ["eval.json", "scores.csv"] {
        std::fs::copy(committed.join(name), d.path().join(name)).unwrap();
    }
    let before: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("eval.json")).unwrap())
            .unwrap();
    let o = af(
        &["eval", "--summarise", d.path().to_str().unwrap()],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("read the other way"), "{}", stdout(&o));
    let after: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("eval.json")).unwrap())
            .unwrap();
    assert_eq!(after["conditions"], before["conditions"]);
    assert_eq!(after["model"], before["model"]);
    let probe = &after["likelihood_probe"];
    assert_eq!(probe["folds"], 5);
    let readings = probe["readings"].as_array().unwrap();
    assert_eq!(
        readings.len(),
        5,
        "the probe's four features and characters per token"
    );
    assert_eq!(readings[0]["gold_lowest"], probe["least_likely"]);
    let (probe_acc, least) = (
        probe["probe"]["accuracy"].as_f64().unwrap(),
        probe["least_likely"]["accuracy"].as_f64().unwrap(),
    );
    // Under chance as lm-eval reads it, far above chance read the other way.
    let acc_norm = after["conditions"][0]["acc_norm"]["accuracy"]
        .as_f64()
        .unwrap();
    assert!(
        acc_norm < 0.25 && least > 0.3 && probe_acc > 0.35,
        "{probe}"
    );
    assert!(std::fs::read_to_string(d.path().join("eval.html"))
        .unwrap()
        .contains("Read the other way"));

    let empty = tempfile::tempdir().unwrap();
    let o = af(
        &["eval", "--summarise", empty.path().to_str().unwrap()],
        &repo(),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("eval.json"), "{}", stderr(&o));
    let o = af(&["eval"], &repo());
    assert!(!o.status.success());
    assert!(stderr(&o).contains("DATASET"), "{}", stderr(&o));
}
