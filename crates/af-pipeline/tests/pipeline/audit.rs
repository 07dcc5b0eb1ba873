//! The audit in-process with the libtorch detectors: synthetic datasets with a planted artifact
//! are flagged by the detectors that can see it and by no other; a clean one by none. Bad rows
//! skipped and counted; real WinoGrande and SWAG samples read and audited.

use crate::common;

use std::path::{Path, PathBuf};

use af_audit::synthetic::{questions, Planted};
use af_core::{Config, MemberName};
use af_pipeline::audit::{AuditRequest, AuditRun};
use af_pipeline::NoProgress;
use common::{json, lock, shared_data};
use serde_json::Value;

/// Detectors small enough for CI, trained for all 4 epochs: with validation, a detector that has
/// not learned after its first epoch can stop there
/// (docs/decisions/072-how-much-one-audit-number-can-be.md); the audit's defaults otherwise.
const SMALL: &str = "[run]\nthreads = 1\ndevice = \"cpu\"\nseed = 7\n\n[committee]\nembedding = 24\ncnn-filters = 16\nlstm-hidden = 24\nepochs = 4\nvalidation-share = 0.0\nngram-buckets = 5000\n";

fn small_config(dir: &Path) -> Config {
    let path = dir.join("small.toml");
    std::fs::write(&path, SMALL).unwrap();
    common::load(&path)
}

/// Audits `dataset` into `out` with `config`'s seed, threads and device, as `af audit` does.
fn audit_with(
    config: &Config,
    dataset: &Path,
    out: &Path,
    skip_bad: bool,
) -> anyhow::Result<AuditRun> {
    let request = AuditRequest {
        dataset,
        eval: None,
        format: None,
        skip_bad,
        config,
        seed: config.run.seed,
        threads: config.run.threads,
        device: config.run.device.clone(),
        out,
        force: false,
        lm_eval: None,
    };
    af_pipeline::audit::run(&request, &NoProgress)
}

fn write_generic(dir: &Path, name: &str, planted: Planted, seed: u64) -> PathBuf {
    let p = dir.join(name);
    let lines: Vec<String> = questions(600, 4, planted, seed)
        .iter()
        .map(|q| serde_json::json!({"id": q.id, "group": q.group, "context": q.context, "prefix": q.prefix, "endings": q.endings, "label": q.label}).to_string())
        .collect();
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

fn audit(dir: &Path, dataset: &Path) -> Value {
    let out = dir.join(format!(
        "out-{}",
        dataset.file_stem().unwrap().to_string_lossy()
    ));
    let run =
        audit_with(&small_config(dir), dataset, &out, false).unwrap_or_else(|e| panic!("{e:#}"));
    for f in [
        "audit.md",
        "audit.html",
        "detectors.csv",
        "tokens.csv",
        "detectors.svg",
        "audit-config.toml",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let a = json(&out.join("audit.json"));
    assert_eq!(
        a["report"],
        serde_json::to_value(&run.report).unwrap(),
        "audit.json holds the report returned"
    );
    a
}

/// The flagged detectors; every detector's accuracy is printed for `--nocapture` readers.
fn flagged(a: &Value) -> Vec<String> {
    let detectors = a["report"]["detectors"].as_array().unwrap();
    for d in detectors {
        println!(
            "{} {:<26} {:.3} [{:.3}, {:.3}] flagged {}",
            a["dataset"],
            d["name"].as_str().unwrap(),
            d["accuracy"].as_f64().unwrap(),
            d["ci_low"].as_f64().unwrap(),
            d["ci_high"].as_f64().unwrap(),
            d["flagged"]
        );
    }
    detectors
        .iter()
        .filter(|d| d["flagged"] == true)
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn planted_artifacts_are_flagged_by_the_matching_detectors_and_a_clean_set_by_none() {
    let _lock = lock();
    let dir = tempfile::tempdir().unwrap();

    let word = audit(
        dir.path(),
        &write_generic(dir.path(), "word.jsonl", Planted::Word("zzgold"), 1),
    );
    // The planted word is longer than the filler words: the longest-words baseline reads it too.
    let mut want: Vec<String> = vec![
        "longest-words-ending".into(),
        "token-statistics/ending".into(),
    ];
    for view in ["ending", "second-sentence", "full"] {
        for model in ["ngram", "cnn", "lstm"] {
            want.push(format!("{model}/{view}"));
        }
    }
    assert_eq!(flagged(&word), want, "a word only right answers contain");
    assert_eq!(word["report"]["tokens"]["top"][0]["token"], "zzgold");

    // The length artifact: the baselines that read length, and no lexical detector. The CNN
    // (max over more windows) and the BiLSTM can see length too; the test does not ask them to
    // stay blind (docs/decisions/053-what-each-detector-can-see.md).
    let long = audit(
        dir.path(),
        &write_generic(dir.path(), "long.jsonl", Planted::Longest, 2),
    );
    let f = flagged(&long);
    assert!(f.contains(&"longest-ending".to_string()), "{f:?}");
    for blind in [
        "random",
        "shortest-ending",
        "shortest-words-ending",
        "longest-words-ending",
        "token-statistics/ending",
        "ngram/ending",
        "ngram/second-sentence",
        "ngram/full",
    ] {
        assert!(
            !f.contains(&blind.to_string()),
            "{blind} cannot see length but was flagged: {f:?}"
        );
    }

    let clean = audit(
        dir.path(),
        &write_generic(dir.path(), "clean.jsonl", Planted::Nothing, 3),
    );
    assert_eq!(flagged(&clean), Vec::<String>::new());
    for d in clean["report"]["detectors"].as_array().unwrap() {
        let (acc, lo, hi, chance) = (
            d["accuracy"].as_f64().unwrap(),
            d["ci_low"].as_f64().unwrap(),
            d["ci_high"].as_f64().unwrap(),
            d["chance"].as_f64().unwrap(),
        );
        assert!(
            lo <= chance && chance <= hi,
            "{}: {acc:.3} [{lo:.3}, {hi:.3}] leaves chance {chance}",
            d["name"]
        );
    }
}

#[test]
fn bad_rows_are_skipped_and_counted_when_asked() {
    let _lock = lock();
    let dir = tempfile::tempdir().unwrap();
    let p = common::write_bad_labels(dir.path());
    // The defaults with the n-gram detector alone, on one CPU thread (`af audit bad.jsonl
    // --models ngram --skip-bad --threads 1 --device cpu`).
    let mut config = Config::default();
    config.audit.models = vec![MemberName::new("ngram")];
    config.run.threads = 1;
    config.run.device = "cpu".into();
    let out = dir.path().join("audit/bad");

    let e = format!(
        "{:#}",
        audit_with(&config, &p, &out, false)
            .err()
            .expect("a bad row stops the audit")
    );
    assert!(
        e.contains("bad.jsonl:8:") && e.contains(": field `label` is 9, expected 0..=3"),
        "{e}"
    );
    assert!(!out.exists(), "nothing written for a failed read");

    let run = audit_with(&config, &p, &out, true).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(run.report.questions, 199);
    let a = json(&out.join("audit.json"));
    assert_eq!(a["report"]["questions"], 199);
    assert_eq!(a["skipped_rows"][0]["line"], 8);
}

#[test]
fn real_winogrande_and_swag_samples_are_read_and_audited() {
    let Some(data) = shared_data("real_winogrande_and_swag_samples_are_read_and_audited") else {
        return;
    };
    let _lock = lock();
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config(dir.path());
    config.audit.models = vec![MemberName::new("ngram")];
    let out = dir.path().join("w");
    audit_with(&config, &data.join("winogrande/train_s.jsonl"), &out, false)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let a = json(&out.join("audit.json"));
    assert_eq!(a["format"], "winogrande");
    assert_eq!(
        a["report"]["twins"]["pairs"], 320,
        "train_s is 320 twin pairs"
    );
    let names: Vec<&str> = a["report"]["detectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"ngram/no-candidates") && names.contains(&"ngram/partial-sentence"),
        "{names:?}"
    );
    // Every SWAG and HellaSwag sample file with answers is read (the test split has none).
    for f in [
        "swag/train.csv",
        "swag/val.csv",
        "swag/train_full.csv",
        "swag/val_full.csv",
        "hellaswag/hellaswag_train.jsonl",
        "hellaswag/hellaswag_val.jsonl",
    ] {
        let path = data.join("format-samples").join(f);
        let file = af_io::questions::read_questions(&path, None, false)
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(
            !file.questions.is_empty() && file.questions.iter().all(|q| q.endings.len() >= 4),
            "{f}"
        );
    }
    let e =
        af_io::questions::read_questions(&data.join("format-samples/swag/test.csv"), None, false)
            .unwrap_err()
            .to_string();
    assert!(e.contains("cannot be audited"), "{e}");
}

/// Issue 17: one option of 65,600 words (more than a 16-bit length holds) used to panic in the
/// table; it is cut to `[committee] max-tokens` and the cut is counted, printed and recorded.
#[test]
fn a_very_long_option_is_cut_to_max_tokens_and_counted() {
    let _torch = lock();
    let dir = tempfile::tempdir().unwrap();
    let long = vec!["word"; 65_600].join(" ");
    let lines: Vec<String> = (0..40)
        .map(|i| {
            let endings = if i == 7 { vec![long.clone(), "a short one .".into()] } else { vec![format!("ending {i} a ."), format!("other {i} b .")] };
            serde_json::json!({"id": format!("q{i}"), "group": format!("g{i}"), "context": "someone does something .", "endings": endings, "label": i % 2}).to_string()
        })
        .collect();
    let dataset = dir.path().join("long.jsonl");
    std::fs::write(&dataset, lines.join("\n") + "\n").unwrap();
    let mut config = small_config(dir.path());
    config.audit.models = vec![MemberName::new("ngram")];
    config.audit.views = vec![af_core::View::Ending];
    config.committee.max_tokens = 64;
    let out = dir.path().join("out");
    let run = audit_with(&config, &dataset, &out, false).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(run.options_cut, 1);
    assert!(
        run.to_string()
            .contains("1 options longer than 64 tokens were cut"),
        "{run}"
    );
    assert_eq!(
        json(&out.join("audit.json"))["options_cut_to_max_tokens"],
        1
    );
}

/// `af audit --lm-eval DIR`: `af eval`'s table of the same file joins the audit's page; the
/// folder of another file's `af eval` is refused before any detector is trained.
#[test]
fn the_audit_page_shows_af_eval_of_the_same_file() {
    let _lock = lock();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, seed: u64| {
        let p = dir.path().join(name);
        let lines: Vec<String> = questions(80, 4, Planted::Longest, seed)
            .iter()
            .map(|q| serde_json::json!({"id": q.id, "group": q.group, "context": q.context, "prefix": q.prefix, "endings": q.endings, "label": q.label}).to_string())
            .collect();
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        p
    };
    let data = write("shown.jsonl", 3);
    let other = write("other.jsonl", 4);
    let model = dir.path().join("toy.gguf");
    af_nn::causal_lm::toy::write_toy_llama(&model, 4).unwrap();
    let eval_into = |dataset: &Path, out: &Path| {
        let request = af_pipeline::eval::EvalRequest {
            dataset,
            name: None,
            format: None,
            skip_bad: false,
            model: &model,
            ways: None,
            seed: 3,
            batch_size: 16,
            device: "cpu".into(),
            threads: 1,
            out,
            force: false,
        };
        af_pipeline::eval::run(&request, &NoProgress).unwrap();
    };
    let mut config = Config::default();
    config.audit.models = vec![MemberName::new("ngram")];
    config.run.threads = 1;
    config.run.device = "cpu".into();
    let audit = |lm_eval: &Path, out: &Path| {
        let request = AuditRequest {
            dataset: &data,
            eval: None,
            format: None,
            skip_bad: false,
            config: &config,
            seed: 7,
            threads: 1,
            device: "cpu".into(),
            out,
            force: false,
            lm_eval: Some(lm_eval),
        };
        af_pipeline::audit::run(&request, &NoProgress)
    };
    let shown = dir.path().join("eval-shown");
    eval_into(&data, &shown);
    let out = dir.path().join("audit");
    audit(&shown, &out).unwrap_or_else(|e| panic!("{e:#}"));
    let html = std::fs::read_to_string(out.join("audit.html")).unwrap();
    assert!(html.contains("How hard it is for a language model (af eval)"));
    assert!(html.contains("acc_norm") && html.contains("choices-only"));

    let elsewhere = dir.path().join("eval-other");
    eval_into(&other, &elsewhere);
    let refused = dir.path().join("audit-refused");
    let e = format!("{:#}", audit(&elsewhere, &refused).err().expect("refused"));
    assert!(e.contains("--lm-eval") && e.contains("shown.jsonl"), "{e}");
    assert!(!refused.exists(), "refused before anything is written");
}
