//! `af refilter` in-process: a multiple-choice file of our own becomes items with their own wrong
//! options in their pools (topped up with generated endings), runs every stage, and is audited
//! before against after; questions with too few options stop the run or are listed.

use crate::common;

use af_audit::synthetic::{questions, Planted};
use af_pipeline::refilter::{audit_before_after, refilter_config, RefilterOptions};
use common::*;

/// `n` generic JSONL questions of `options` endings (ids `q0`..), one more line `short` with only
/// `short_options` when given; returns the file and the questions.
fn write_generic(
    dir: &std::path::Path,
    n: usize,
    options: usize,
    short_options: Option<usize>,
) -> (std::path::PathBuf, Vec<af_core::Question>) {
    let qs = questions(n, options, Planted::Nothing, 7);
    let mut text = String::new();
    for (i, q) in qs.iter().enumerate() {
        let line = serde_json::json!({"id": format!("q{i}"), "context": q.context, "prefix": q.prefix, "endings": q.endings, "label": q.label});
        text.push_str(&format!("{line}\n"));
    }
    if let Some(o) = short_options {
        let q = &questions(1, o, Planted::Nothing, 8)[0];
        text.push_str(&format!("{}\n", serde_json::json!({"id": "short", "context": q.context, "endings": q.endings, "label": q.label})));
    }
    let path = dir.join("questions.jsonl");
    std::fs::write(&path, text).unwrap();
    (path, qs)
}

fn base_config(dir: &std::path::Path) -> af_core::Config {
    // Some document input is needed for the file to load; refilter replaces it.
    load(&config_in(
        dir,
        &format!(
            "{TINY_MODELS}[audit]\nmodels = [\"ngram\"]\n\n{}",
            captions_input()
        ),
    ))
}

#[test]
fn refilter_chooses_among_each_questions_own_options_and_audits_before_and_after() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let (input, qs) = write_generic(d.path(), 60, 6, None);
    let options = RefilterOptions {
        input,
        layout: None,
        generate: 2,
        skip_bad: false,
        k: Some(3),
        out: Some(d.path().join("refiltered")),
        lms: None,
    };
    let config =
        refilter_config(&base_config(d.path()), &options).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!((config.generate.endings, config.filter.k), (2, 3));
    run_stages(&config, &af_pipeline::ALL_STAGES, &[]);
    let run = d.path().join("refiltered");

    // Each question is an item as it stands: its context, prefix, right ending, and its five
    // wrong options in order.
    let items = jsonl(&run.join("pairs/items.jsonl"));
    assert_eq!(items.len(), 60);
    for (item, q) in items.iter().zip(&qs) {
        assert_eq!(item["context"], q.context.as_str());
        assert_eq!(item["noun_phrase"], q.prefix.as_str());
        assert_eq!(item["ending"], q.endings[q.label].as_str());
        let wrong: Vec<&str> = q
            .endings
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != q.label)
            .map(|(_, e)| e.as_str())
            .collect();
        assert_eq!(
            item["distractors"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect::<Vec<_>>(),
            wrong
        );
    }

    // The pool: gold, the five own options as they are, then two generated endings; every row
    // scored by the LM that never saw its fold.
    let pool = af_io::pool_index::Pool::load(&run).unwrap();
    assert_eq!(pool.sizes, vec![7; 60]);
    let rows: Vec<af_core::Candidate> = af_io::pool::parts(&run.join("generate/pool"))
        .unwrap()
        .iter()
        .flat_map(|p| af_io::pool::read_part(p).unwrap())
        .collect();
    for r in &rows {
        assert!(
            r.features.iter().all(|f| f.is_finite()),
            "candidate {} of {} has LM features {:?}",
            r.candidate,
            r.item_id,
            r.features
        );
        if (1..=5).contains(&r.candidate) {
            let item = &items[r.item_index as usize];
            assert_eq!(
                r.ending,
                item["distractors"][r.candidate as usize - 1]
                    .as_str()
                    .unwrap()
            );
        }
    }
    let generate = json(&run.join("generate/report.json"));
    assert_eq!(
        (
            generate["given_endings"].as_u64(),
            generate["endings_generated"].as_u64()
        ),
        (Some(300), Some(120))
    );

    // The re-filtered dataset: 4-way, the right ending and context untouched.
    let dataset = af_io::questions::read_questions(&run.join("export/dataset.jsonl"), None, false)
        .unwrap()
        .questions;
    assert_eq!(dataset.len(), 60);
    for q in &dataset {
        let i: usize = q.id[1..].parse().unwrap();
        assert_eq!(q.endings.len(), 4);
        assert_eq!(q.endings[q.label], qs[i].endings[qs[i].label]);
        assert_eq!(q.context, qs[i].context);
    }

    let report = audit_before_after(
        &config,
        &af_nn::committee::Registry::builtin(),
        &af_pipeline::NoProgress,
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        (
            report.questions_in,
            report.questions_out,
            report.options_before,
            report.options_after
        ),
        (60, 60, (6, 6), 4)
    );
    let written = json(&run.join("refilter/report.json"));
    assert_eq!(
        written["detectors"].as_array().unwrap().len(),
        report.detectors.len()
    );
    let before = json(&run.join("refilter/audit-before.json"));
    let after = json(&run.join("refilter/audit-after.json"));
    assert_eq!(
        (
            before["options_max"].as_u64(),
            after["options_max"].as_u64()
        ),
        (Some(6), Some(4))
    );
    let random = report
        .detectors
        .iter()
        .find(|d| d.detector == "random")
        .expect("the random baseline is audited");
    assert!(
        (random.before_chance - 1.0 / 6.0).abs() < 1e-9
            && (random.after_chance - 0.25).abs() < 1e-9
    );
    let csv = std::fs::read_to_string(run.join("refilter/audit-comparison.csv")).unwrap();
    assert_eq!(csv.lines().count(), report.detectors.len() + 1);
    assert!(csv.lines().any(|l| l.starts_with("ngram/ending,")), "{csv}");

    // `--lms`: a second re-filtering adopts this run's LMs instead of training its own. Every
    // question keeps the fold it had there, so the gold endings get the very LM features they
    // got there (each from the LM that never trained on it).
    let adopting = RefilterOptions {
        lms: Some(run.clone()),
        out: Some(d.path().join("adopting")),
        ..options
    };
    let mut config =
        refilter_config(&base_config(d.path()), &adopting).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(config.lm.from.as_deref(), Some(run.as_path()));
    run_stages(
        &config,
        &[
            af_pipeline::stages::pairs::NAME,
            af_pipeline::stages::lm::NAME,
            af_pipeline::stages::generate::NAME,
        ],
        &[],
    );
    let second = d.path().join("adopting");
    assert_eq!(
        json(&second.join("pairs/report.json"))["folds_followed"],
        60
    );
    let folds = |run: &std::path::Path| {
        jsonl(&run.join("pairs/items.jsonl"))
            .iter()
            .map(|i| i["fold"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(folds(&second), folds(&run));
    assert_eq!(
        json(&second.join("lm/report.json"))["from"],
        run.to_str().unwrap()
    );
    for fold in 0..config.pairs.folds {
        let weights = |r: &std::path::Path| {
            std::fs::read(r.join(format!("lm/fold-{fold}/best.safetensors"))).unwrap()
        };
        assert!(
            weights(&second) == weights(&run),
            "fold {fold}: the weights are copied in"
        );
    }
    let gold = |r: &std::path::Path| -> Vec<(String, Vec<f32>)> {
        let mut rows: Vec<_> = af_io::pool::parts(&r.join("generate/pool"))
            .unwrap()
            .iter()
            .flat_map(|p| af_io::pool::read_part(p).unwrap())
            .filter(|c| c.candidate == 0)
            .map(|c| (c.item_id, c.features.to_vec()))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    };
    for ((id, a), (_, b)) in gold(&run).iter().zip(&gold(&second)) {
        assert!(
            a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-4),
            "{id}: {a:?} against {b:?}"
        );
    }
    // Items made again after the LMs trained: which LM trained on what is unknown, so refused.
    let record = run.join("pairs/stage.json");
    let kept = std::fs::read_to_string(&record).unwrap();
    let mut changed: serde_json::Value = serde_json::from_str(&kept).unwrap();
    changed["fingerprint"]["seed"] = serde_json::json!(99);
    std::fs::write(&record, changed.to_string()).unwrap();
    let e = format!(
        "{:#}",
        run_stage(&config, af_pipeline::stages::pairs::NAME, true)
            .err()
            .expect("the source's items are newer than its LMs")
    );
    assert!(
        e.contains("its LMs were trained on other items than its pairs/items.jsonl holds now"),
        "{e}"
    );
    std::fs::write(&record, kept).unwrap();
    // The adopted run's folds are this run's: another count is refused by the pairs stage.
    let theirs = config.pairs.folds;
    config.pairs.folds = theirs + 1;
    let e = format!(
        "{:#}",
        run_stage(&config, af_pipeline::stages::pairs::NAME, true)
            .err()
            .expect("one fold more than the adopted run")
    );
    assert!(
        e.contains(&format!(
            "that run has {theirs} folds, this one [pairs] folds = {}",
            theirs + 1
        )),
        "{e}"
    );
}

#[test]
fn a_question_with_too_few_options_stops_the_run_or_is_listed() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let (input, _) = write_generic(d.path(), 30, 4, Some(3));
    let out = d.path().join("refiltered");
    let mut options = RefilterOptions {
        input: input.clone(),
        layout: None,
        generate: 0,
        skip_bad: false,
        k: Some(3),
        out: Some(out.clone()),
        lms: None,
    };
    let config = refilter_config(&base_config(d.path()), &options).unwrap();
    let e = format!(
        "{:#}",
        run_stage(&config, af_pipeline::stages::pairs::NAME, true)
            .err()
            .expect("a 3-option question cannot make a 4-way one")
    );
    assert!(
        e.contains(&format!(
            "{}:31: question `short` has 3 options",
            input.display()
        )),
        "{e}"
    );
    assert!(!out.join("pairs").exists(), "nothing is written on failure");

    options.skip_bad = true;
    let config = refilter_config(&base_config(d.path()), &options).unwrap();
    run_stage(&config, af_pipeline::stages::pairs::NAME, true).unwrap_or_else(|e| panic!("{e:#}"));
    let report = json(&out.join("pairs/report.json"));
    assert_eq!(
        (report["items"].as_u64(), report["questions"].as_u64()),
        (Some(30), Some(30))
    );
    assert_eq!(report["dropped"]["too-few-options"], 1);
    assert_eq!(
        report["skipped_questions"][0]["origin"],
        format!("{}:31", input.display())
    );

    // One generated ending per question is enough to make it 4-way.
    options.skip_bad = false;
    options.generate = 1;
    let config = refilter_config(&base_config(d.path()), &options).unwrap();
    run_stage(&config, af_pipeline::stages::pairs::NAME, true).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(json(&out.join("pairs/report.json"))["items"], 31);

    // A layout af does not read is named.
    options.layout = Some("csv".into());
    let config = refilter_config(&base_config(d.path()), &options).unwrap();
    let e = format!(
        "{:#}",
        run_stage(&config, af_pipeline::stages::pairs::NAME, true)
            .err()
            .unwrap()
    );
    assert!(e.contains("layout `csv` is not one af reads"), "{e}");
}
