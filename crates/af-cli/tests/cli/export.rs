//! The annotation round trip through `af run` and `af assemble`: sheets filled by three simulated
//! annotators, assembled into exactly the items SWAG's rules keep; bad sheets fail with their
//! row, or are skipped and listed. The export's layouts are tested in-process in
//! crates/af-pipeline/tests/export.rs.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::*;
use serde_json::Value;

fn ok(o: &std::process::Output) {
    assert!(o.status.success(), "{}", stderr(o));
}

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A fixture run with k = 6 (five distractors shown per sheet row, one held back) and sheets of
/// ten items.
fn run(dir: &Path) -> std::path::PathBuf {
    let cfg = fixture_config(
        dir,
        1,
        1,
        "[export]\nannotation = true\nsheet-items = 10\ntrain-share = 0.6\nvalidation-share = 0.2\ntest-share = 0.2\ntask = \"af_fixture\"\n",
    );
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("k = 3", "k = 6");
    std::fs::write(&cfg, text).unwrap();
    let o = af(&["run", cfg.to_str().unwrap(), "--until", "export"], dir);
    ok(&o);
    // `af` runs without AF_CAUSAL_LM here: the export says, in a line of its own, that it did
    // not score the datasets with a pretrained LM, and why.
    assert!(
        stdout(&o).lines().any(|l| l.starts_with(
            "export: af eval skipped: no pretrained LM (AF_CAUSAL_LM is not set; scripts/setup installs"
        )),
        "{}",
        stdout(&o)
    );
    dir.join("run/export")
}

/// How a simulated annotator fills row `i`: the found ending's slot is `found`, generated slots
/// `gen` in sheet order. Four kinds of item, by i % 4: found best; a generated ending best with
/// the found one second; found best but three generated endings gibberish; found unranked.
fn fill(i: usize, found: usize, gen: &[usize], n: usize) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut labels = vec!["likely"; n];
    let mut ranks = vec![""; n];
    match i % 4 {
        0 => {
            ranks[found] = "best";
            ranks[gen[0]] = "second";
        }
        1 => {
            ranks[gen[0]] = "best";
            ranks[found] = "second";
        }
        2 => {
            ranks[found] = "best";
            ranks[gen[0]] = "second";
            for &g in &gen[2..5] {
                labels[g] = "gibberish";
            }
        }
        _ => {
            ranks[gen[0]] = "best";
            ranks[gen[1]] = "second";
        }
    }
    (labels, ranks)
}

/// Writes a filled copy of every sheet for `annotator`; `noise` flips one label on even rows.
fn fill_sheets(
    annotation: &Path,
    out: &Path,
    annotator: &str,
    noise: bool,
) -> Vec<std::path::PathBuf> {
    let key: BTreeMap<String, Value> = jsonl(&annotation.join("key.jsonl"))
        .into_iter()
        .map(|k| (k["item"].as_str().unwrap().to_string(), k))
        .collect();
    let mut files = Vec::new();
    let mut sheets: Vec<_> = std::fs::read_dir(annotation)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    sheets.sort();
    let mut index = 0;
    for sheet in sheets {
        let mut r = csv::Reader::from_path(&sheet).unwrap();
        let header = r.headers().unwrap().clone();
        let n = header.iter().filter(|h| h.starts_with("ending_")).count();
        let path = out.join(format!(
            "{annotator}-{}",
            sheet.file_name().unwrap().to_string_lossy()
        ));
        let mut w = csv::Writer::from_path(&path).unwrap();
        w.write_record(&header).unwrap();
        for row in r.records() {
            let mut row: Vec<String> = row.unwrap().iter().map(String::from).collect();
            let k = &key[&row[2]];
            let sources: Vec<&str> = k["slots"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["source"].as_str().unwrap())
                .collect();
            let found = sources.iter().position(|s| *s == "found").unwrap();
            let gen: Vec<usize> = (0..sources.len()).filter(|&s| s != found).collect();
            let (mut labels, ranks) = fill(index, found, &gen, sources.len());
            if noise && index % 2 == 0 {
                labels[gen[1]] = "unlikely";
            }
            for s in 0..sources.len() {
                row[4 + n + s] = labels[s].into();
                row[4 + 2 * n + s] = ranks[s].into();
            }
            row[4 + 3 * n] = annotator.into();
            w.write_record(&row).unwrap();
            index += 1;
        }
        w.flush().unwrap();
        files.push(path);
    }
    files
}

fn ids(path: &Path, field: &str) -> BTreeSet<String> {
    jsonl(path)
        .iter()
        .map(|v| v[field].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn annotation_round_trip_keeps_exactly_what_the_rules_keep_and_bad_sheets_fail_by_row() {
    let d = tempfile::tempdir().unwrap();
    let export = run(d.path());
    let annotation = export.join("annotation");
    let key = jsonl(&annotation.join("key.jsonl"));
    assert!(key.iter().all(|k| k["slots"].as_array().unwrap().len() == 6
        && k["replacements"].as_array().unwrap().len() == 1));
    let html = std::fs::read_to_string(annotation.join("sheet-001.html")).unwrap();
    assert_eq!(html.matches("<fieldset").count(), 10);
    assert!(
        html.contains("value=\"gibberish\"")
            && html.contains("function save()")
            && !html.contains("http"),
        "a form that saves locally"
    );

    // Three annotators: two agree, the third adds label noise that the majority overrules.
    let filled = d.path().join("filled");
    std::fs::create_dir_all(&filled).unwrap();
    let mut sheets = fill_sheets(&annotation, &filled, "ann", false);
    sheets.extend(fill_sheets(&annotation, &filled, "bo", false));
    sheets.extend(fill_sheets(&annotation, &filled, "cy", true));
    let mut args = vec![
        "assemble".to_string(),
        "--key".into(),
        annotation.join("key.jsonl").to_string_lossy().into(),
        "--out".into(),
        "asm".into(),
    ];
    args.extend(sheets.iter().map(|s| s.to_string_lossy().into_owned()));
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&af(&args_ref, d.path()));

    // What the rules keep, item by item (key order = fill order).
    let (mut kept, mut extra, mut queue, mut dropped) = (
        BTreeSet::new(),
        BTreeSet::new(),
        BTreeSet::new(),
        BTreeSet::new(),
    );
    for (i, k) in key.iter().enumerate() {
        let id = k["item"].as_str().unwrap().to_string();
        match i % 4 {
            0 => {
                kept.insert(id);
            }
            1 => {
                if k["split"] == "train" {
                    extra.insert(id.clone());
                }
                kept.insert(id);
            }
            2 => {
                queue.insert(id);
            }
            _ => {
                dropped.insert(id);
            }
        }
    }
    let asm = d.path().join("asm");
    assert_eq!(ids(&asm.join("dataset.jsonl"), "id"), kept);
    let extra_ids: BTreeSet<String> = ids(&asm.join("extra-train.jsonl"), "id")
        .into_iter()
        .map(|i| i.split(":gen").next().unwrap().to_string())
        .collect();
    assert_eq!(extra_ids, extra);
    assert_eq!(ids(&asm.join("reannotate.jsonl"), "item"), queue);
    assert_eq!(ids(&asm.join("dropped.jsonl"), "item"), dropped);
    let kind: BTreeMap<&str, usize> = key
        .iter()
        .enumerate()
        .map(|(i, k)| (k["item"].as_str().unwrap(), i % 4))
        .collect();
    for v in jsonl(&asm.join("dataset.jsonl")) {
        // Kind 0: every shown ending but the found one; kind 1: also not the generated best.
        let want = if kind[v["id"].as_str().unwrap()] == 0 {
            5
        } else {
            4
        };
        assert_eq!(v["distractors"].as_array().unwrap().len(), want, "{v}");
        assert_eq!(v["gold"]["source"], "found");
    }
    for v in jsonl(&asm.join("extra-train.jsonl")) {
        assert_eq!(v["split"], "train");
        assert_eq!(v["gold"]["source"], "generated");
        assert_eq!(
            v["distractors"].as_array().unwrap().len(),
            4,
            "neither the found nor the best ending"
        );
    }
    for v in jsonl(&asm.join("reannotate.jsonl")) {
        assert_eq!(v["replacements"].as_array().unwrap().len(), 1);
    }
    // The assembled dataset is af's own layout: the audit reads it.
    assert!(af_io::questions::read_questions(&asm.join("dataset.jsonl"), None, false).is_ok());
    // The published layouts: every kept item, four options each (the found ending and the
    // first three usable distractors), in its split's files; HellaSwag's read back as such.
    let mut published = BTreeSet::new();
    for (swag, hf) in [("train", "train"), ("val", "validation"), ("test", "test")] {
        let path = asm.join(format!("hellaswag/hellaswag_{swag}.jsonl"));
        if !path.exists() {
            continue;
        }
        let qs = af_io::questions::read_questions(&path, None, false)
            .unwrap()
            .questions;
        assert!(qs.iter().all(|q| q.endings.len() == 4), "{swag}");
        let lines = jsonl(&asm.join(format!("hf/{hf}.jsonl")));
        assert_eq!(lines.len(), qs.len());
        published.extend(lines.iter().map(|v| v["id"].as_str().unwrap().to_string()));
    }
    assert_eq!(published, kept);
    assert!(asm.join("lm-eval/af_assembled.yaml").exists());
    let stats: Value =
        serde_json::from_str(&std::fs::read_to_string(asm.join("stats.json")).unwrap()).unwrap();
    assert_eq!(stats["annotators"], 3);
    assert_eq!(
        stats["annotations"].as_u64().unwrap() as usize,
        3 * key.len()
    );
    let alpha = stats["label_alpha"].as_f64().unwrap();
    assert!(
        alpha > 0.5 && alpha < 1.0,
        "noise on one annotator's labels: {alpha}"
    );
    assert_eq!(stats["best_pairwise_agreement"], 1.0);
    // Table 2: found endings ranked best in kinds 0 and 2 (half the items).
    let best = stats["found"]["best"].as_f64().unwrap();
    assert!((best - 0.5).abs() < 0.06, "{best}");

    check_round(d.path(), &args, &asm);

    // The stricter rule: every annotator called the shown endings likely (but for one's noise),
    // so no item keeps three distractors; those SWAG's rule kept wait for re-annotation.
    let mut strict = args.clone();
    strict[4] = "asm-unlikely".into();
    strict.splice(1..1, ["--distractors".to_string(), "unlikely".into()]);
    let strict_ref: Vec<&str> = strict.iter().map(String::as_str).collect();
    ok(&af(&strict_ref, d.path()));
    let asm = d.path().join("asm-unlikely");
    assert!(jsonl(&asm.join("dataset.jsonl")).is_empty());
    let waiting = jsonl(&asm.join("reannotate.jsonl"));
    assert_eq!(
        waiting.len(),
        kept.len() + queue.len(),
        "kept by SWAG's rule, or short of distractors already"
    );
    assert!(waiting
        .iter()
        .all(|v| v["usable_slots"].as_array().unwrap().is_empty()
            || v["reason"].as_str().unwrap().contains("tie")));
    let stats: Value =
        serde_json::from_str(&std::fs::read_to_string(asm.join("stats.json")).unwrap()).unwrap();
    assert_eq!(stats["distractor_rule"], "unlikely");

    // Bad sheets: each fails with its file and line, and nothing is written.
    let bad = |edit: &dyn Fn(&mut Vec<Vec<String>>), expect: &str, name: &str| {
        let mut rows: Vec<Vec<String>> = csv::Reader::from_path(&sheets[0])
            .unwrap()
            .records()
            .map(|r| r.unwrap().iter().map(String::from).collect())
            .collect();
        let header: Vec<String> = csv::Reader::from_path(&sheets[0])
            .unwrap()
            .headers()
            .unwrap()
            .iter()
            .map(String::from)
            .collect();
        edit(&mut rows);
        let path = d.path().join(name);
        let mut w = csv::Writer::from_path(&path).unwrap();
        w.write_record(&header).unwrap();
        for r in &rows {
            w.write_record(r).unwrap();
        }
        w.flush().unwrap();
        let key = annotation.join("key.jsonl");
        let o = af(
            &[
                "assemble",
                "--key",
                key.to_str().unwrap(),
                "--out",
                "bad-out",
                path.to_str().unwrap(),
            ],
            d.path(),
        );
        assert!(!o.status.success());
        assert!(
            stderr(&o).contains(&format!("{name}:")) && stderr(&o).contains(expect),
            "{name}: {}",
            stderr(&o)
        );
        assert!(!d.path().join("bad-out").exists());
        let o = af(
            &[
                "assemble",
                "--key",
                key.to_str().unwrap(),
                "--out",
                "skip-out",
                "--force",
                "--skip-bad",
                path.to_str().unwrap(),
            ],
            d.path(),
        );
        ok(&o);
        let stats: Value = serde_json::from_str(
            &std::fs::read_to_string(d.path().join("skip-out/stats.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(stats["skipped_rows"].as_array().unwrap().len(), 1, "{name}");
        assert_eq!(
            stats["annotations"].as_u64().unwrap(),
            rows.len() as u64 - 1
        );
    };
    let n = 6;
    bad(
        &|rows| rows[3][4 + n] = "maybe".into(),
        ":5: label_1 is \"maybe\", expected likely, unlikely or gibberish",
        "label.csv",
    );
    bad(
        &|rows| {
            let second = (0..n)
                .find(|&s| rows[2][4 + 2 * n + s] == "second")
                .unwrap();
            rows[2][4 + 2 * n + second] = "best".into();
        },
        ":4: two endings are ranked best",
        "two-best.csv",
    );
    bad(
        &|rows| rows[0][2] = "no-such-item".into(),
        ":2: item `no-such-item` is not in the key",
        "unknown.csv",
    );
    bad(&|rows| rows[1][1] = "7".into(), ":3: item", "moved.csv");

    lm_eval_by_default(d.path(), &export);
}

/// Fills every check sheet in `dir` (sorted): `could_be_right` from `flag(item, the row's place
/// among its item's rows)`, `fluent = yes`. Returns the filled files and the rows read.
fn fill_checks(
    dir: &Path,
    out: &Path,
    prefix: &str,
    flag: &dyn Fn(&str, usize) -> bool,
) -> (Vec<String>, Vec<Vec<String>>) {
    let mut sheets: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    // Each sheet comes with its form.
    for csv in &sheets {
        assert!(csv.with_extension("html").exists(), "{}", csv.display());
    }
    sheets.sort();
    let (mut filled, mut rows) = (Vec::new(), Vec::new());
    for (i, sheet) in sheets.iter().enumerate() {
        let mut r = csv::Reader::from_path(sheet).unwrap();
        let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(header[7..], ["ask", "could_be_right", "fluent", "checker"]);
        let path = out.join(format!("{prefix}-{i}.csv"));
        let mut w = csv::Writer::from_path(&path).unwrap();
        w.write_record(&header).unwrap();
        let (mut last_item, mut place) = (String::new(), 0);
        for rec in r.records() {
            let mut rec: Vec<String> = rec.unwrap().iter().map(String::from).collect();
            place = if rec[2] == last_item { place + 1 } else { 0 };
            last_item = rec[2].clone();
            assert_eq!(rec[7], "both", "nothing answered yet: {rec:?}");
            rec[8] = if flag(&rec[2], place) { "yes" } else { "no" }.into();
            rec[9] = "yes".into();
            rec[10] = "checker".into();
            w.write_record(&rec).unwrap();
            rows.push(rec);
        }
        w.flush().unwrap();
        filled.push(path.to_string_lossy().into_owned());
    }
    (filled, rows)
}

/// The second-answer check, two rounds. The first assembly's sheets ask about every distractor a
/// kept item keeps and every usable ending and replacement of an item short of distractors; a
/// checker who answers `yes` for the first two rows of each kept item sets exactly those aside,
/// an item so left short goes to re-annotation and its replacement is asked about next; once it
/// passes, the item is kept with it.
fn check_round(dir: &Path, args: &[String], asm: &Path) {
    let key: BTreeMap<String, Value> = jsonl(Path::new(&args[2]))
        .into_iter()
        .map(|k| (k["item"].as_str().unwrap().to_string(), k))
        .collect();
    let shown = |item: &str| key[item]["slots"].as_array().unwrap().len();
    let kept: Vec<Value> = jsonl(&asm.join("dataset.jsonl"));
    let kept_ids: BTreeSet<String> = kept
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect();
    let mut flagged: BTreeSet<(String, String)> = BTreeSet::new();
    let (filled, rows) = fill_checks(&asm.join("check"), dir, "check-filled", &|item, place| {
        place < 2 && kept_ids.contains(item)
    });
    for r in &rows {
        if r[8] == "yes" {
            flagged.insert((r[2].clone(), r[6].clone()));
        }
    }
    let distractors: usize = kept
        .iter()
        .map(|v| v["distractors"].as_array().unwrap().len())
        .sum();
    let (of_kept, others): (Vec<&Vec<String>>, Vec<&Vec<String>>) =
        rows.iter().partition(|r| kept_ids.contains(&r[2]));
    assert_eq!(of_kept.len(), distractors, "one row per kept distractor");
    assert!(
        !others.is_empty(),
        "the fixture has items short of distractors"
    );
    // The others: items short of distractors (not tied), their usable shown endings and their
    // replacements.
    let short: BTreeSet<String> = jsonl(&asm.join("reannotate.jsonl"))
        .iter()
        .filter(|w| !w["reason"].as_str().unwrap().contains("tie"))
        .map(|w| w["item"].as_str().unwrap().to_string())
        .collect();
    for r in &others {
        assert!(short.contains(&r[2]), "{r:?}");
    }
    assert!(others
        .iter()
        .any(|r| r[3].parse::<usize>().unwrap() > shown(&r[2])));
    assert_eq!(flagged.len(), 2 * kept.len(), "two flags per kept item");
    let assemble_with = |out: &str, checks: &[String]| {
        let mut a = args.to_vec();
        a[4] = out.into();
        a.push("--checks".into());
        a.extend(checks.iter().cloned());
        let a_ref: Vec<&str> = a.iter().map(String::as_str).collect();
        ok(&af(&a_ref, dir));
        dir.join(out)
    };
    // A filled sheet given twice would count its answers twice: an error naming both places.
    let mut twice = args.to_vec();
    twice[4] = "asm-twice".into();
    twice.push("--checks".into());
    twice.extend(filled.iter().cloned());
    twice.push(filled[0].clone());
    let twice_ref: Vec<&str> = twice.iter().map(String::as_str).collect();
    let o = af(&twice_ref, dir);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("`checker` already answered slot")
            && stderr(&o).contains("give each filled sheet once"),
        "{}",
        stderr(&o)
    );
    let out = assemble_with("asm-checked", &filled);
    let after = jsonl(&out.join("dataset.jsonl"));
    for v in &after {
        for e in v["distractors"].as_array().unwrap() {
            let pair = (
                v["id"].as_str().unwrap().to_string(),
                e["ending"].as_str().unwrap().to_string(),
            );
            assert!(
                !flagged.contains(&pair),
                "{pair:?} was answered could-be-right"
            );
        }
    }
    let still: BTreeSet<&str> = after.iter().map(|v| v["id"].as_str().unwrap()).collect();
    let waiting: Vec<Value> = jsonl(&out.join("reannotate.jsonl"));
    let mut short_now = BTreeSet::new();
    for v in &kept {
        let id = v["id"].as_str().unwrap();
        let left = v["distractors"].as_array().unwrap().len() - 2;
        if left >= 3 {
            assert!(still.contains(id), "{id} keeps {left}");
        } else {
            assert!(!still.contains(id), "{id} keeps only {left}");
            assert!(waiting.iter().any(|w| w["item"] == id
                && w["reason"]
                    .as_str()
                    .unwrap()
                    .contains("not set aside by the second-answer check")));
            short_now.insert(id.to_string());
        }
    }
    // Items the check passed a replacement for use it.
    let with_replacement = after
        .iter()
        .filter(|v| {
            let replacements = key[v["id"].as_str().unwrap()]["replacements"]
                .as_array()
                .unwrap();
            v["distractors"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| replacements.iter().any(|r| r["ending"] == e["ending"]))
        })
        .count();
    let stats: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("stats.json")).unwrap()).unwrap();
    let check = &stats["check"];
    assert_eq!(check["candidates_checked"], rows.len());
    assert_eq!(check["candidates_could_be_right"], 2 * kept.len());
    assert_eq!(check["set_aside_could_be_right"], 2 * kept.len());
    assert_eq!(check["set_aside_not_fluent"], 0);
    assert_eq!(check["replacements_used"], with_replacement);
    // Round two: the replacements of the items the flags left short, and nothing else.
    assert!(!short_now.is_empty(), "the flags leave some item short");
    let (second, rows2) = fill_checks(&out.join("check"), dir, "check-second", &|_, _| false);
    let asked: BTreeSet<String> = rows2.iter().map(|r| r[2].clone()).collect();
    assert_eq!(asked, short_now);
    let mut all = filled.clone();
    all.extend(second);
    let out = assemble_with("asm-checked-2", &all);
    let after2: BTreeSet<String> = jsonl(&out.join("dataset.jsonl"))
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect();
    for v in &kept {
        let id = v["id"].as_str().unwrap();
        let left = v["distractors"].as_array().unwrap().len() - 2;
        let replacements = key[id]["replacements"].as_array().unwrap().len();
        assert_eq!(after2.contains(id), left + replacements >= 3, "{id}");
    }
}

/// The run above had no pretrained LM: its card says the LM's figures were not measured and
/// why. `eval = true` without one is an error that names the missing model. With the installed
/// model, a config that does not mention eval is scored by it (two questions here), and the
/// card and the report show the figures of its files.
fn lm_eval_by_default(dir: &Path, export: &Path) {
    let card = std::fs::read_to_string(export.join("README.md")).unwrap();
    assert!(
        card.contains("Not measured: no pretrained LM (AF_CAUSAL_LM is not set"),
        "{card}"
    );
    assert!(!export.join("eval").exists());
    let cfg = dir.join("config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let with = |line: &str| {
        text.replace(
            "task = \"af_fixture\"\n",
            &format!("task = \"af_fixture\"\n{line}\n"),
        )
    };
    std::fs::write(&cfg, with("eval = true")).unwrap();
    // `af run` says so before its first stage, `af export` before it starts.
    for args in [
        vec!["run", cfg.to_str().unwrap(), "--force", "pairs"],
        vec!["export", cfg.to_str().unwrap()],
    ] {
        let o = af(&args, dir);
        assert!(!o.status.success());
        assert!(
            stderr(&o)
                .contains("[export] eval = true, but no pretrained LM: AF_CAUSAL_LM is not set"),
            "{}",
            stderr(&o)
        );
        assert!(stdout(&o).is_empty(), "no stage ran: {}", stdout(&o));
    }

    let Some(model) = causal_lm("lm_eval_by_default (annotation_round_trip_...)") else {
        return;
    };
    std::fs::write(&cfg, with("eval-questions = 2")).unwrap();
    let o = af_with_lm(&["export", cfg.to_str().unwrap()], dir, &model);
    ok(&o);
    assert!(
        stdout(&o).contains("export: af eval, ") && stdout(&o).contains(" zero-shot on 2 of the "),
        "{}",
        stdout(&o)
    );
    let af_eval: Value =
        serde_json::from_str(&std::fs::read_to_string(export.join("eval/af/eval.json")).unwrap())
            .unwrap();
    assert_eq!(af_eval["questions"], 2);
    let name = af_eval["model_name"].as_str().unwrap();
    let card = std::fs::read_to_string(export.join("README.md")).unwrap();
    assert!(
        card.contains(&format!("{name}, zero-shot, on 2 questions")),
        "{card}"
    );
    let full = &af_eval["conditions"][0]["acc"];
    assert!(card.contains(&format!(
        "| full | acc | {:.1}% [",
        100.0
            * json_at(export, "eval/random/eval.json")["conditions"][0]["acc"]["accuracy"]
                .as_f64()
                .unwrap()
    )));
    assert!(card.contains(&format!(
        "{:.1}% [{:.1}, {:.1}] | 14.3% |",
        100.0 * full["accuracy"].as_f64().unwrap(),
        100.0 * full["low"].as_f64().unwrap(),
        100.0 * full["high"].as_f64().unwrap()
    )));
    ok(&af(&["report", dir.join("run").to_str().unwrap()], dir));
    let html = std::fs::read_to_string(dir.join("run/report/report.html")).unwrap();
    assert!(html.contains("How hard it is for a pretrained LM"));
    assert!(html.contains(&format!("{name}, zero-shot, on 2 questions")));
}

fn json_at(dir: &Path, name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
}
