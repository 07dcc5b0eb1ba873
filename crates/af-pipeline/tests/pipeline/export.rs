//! The export stage in-process: every layout reads back to the same questions, and the lm-eval
//! task parses field by field.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use af_pipeline::stages::export::NAME as EXPORT;
use common::*;
use serde_json::Value;

#[test]
fn every_layout_reads_back_to_the_exported_questions_and_the_lm_eval_task_is_complete() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    // A toy Llama stands in for the pretrained LM: what the export writes of `af eval` is
    // checked without the installed model (the CLI's export test runs that one).
    let toy = d.path().join("toy.gguf");
    af_nn::causal_lm::toy::write_toy_llama(&toy, 5).unwrap();
    // The annotation test's run (crates/af-cli/tests/export.rs): k = 6, three splits, sheets of
    // ten items.
    let cfg = fixture_config(
        d.path(),
        1,
        1,
        &format!("[export]\nannotation = true\nsheet-items = 10\ntrain-share = 0.6\nvalidation-share = 0.2\ntest-share = 0.2\ntask = \"af_fixture\"\neval-model = \"{}\"\neval-questions = 3\n", toy.display()),
    );
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("k = 3", "k = 6");
    std::fs::write(&cfg, text).unwrap();
    let outcomes = run_stages(&load(&cfg), until(EXPORT), &[]);
    assert!(outcomes.iter().all(|o| o.1 == "done"), "{outcomes:?}");
    let export = d.path().join("run/export");

    // The exported questions by id: (split, tidied gold, tidied distractor set).
    let tidy = af_io::export::tidy;
    let mut want: BTreeMap<String, (String, String, BTreeSet<String>)> = BTreeMap::new();
    for v in jsonl(&export.join("dataset.jsonl")) {
        let distractors = v["distractors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| tidy(x["ending"].as_str().unwrap()))
            .collect();
        want.insert(
            v["id"].as_str().unwrap().into(),
            (
                v["split"].as_str().unwrap().into(),
                tidy(v["gold"]["ending"].as_str().unwrap()),
                distractors,
            ),
        );
    }
    let splits: BTreeSet<&str> = want.values().map(|w| w.0.as_str()).collect();
    assert_eq!(
        splits,
        ["test", "train", "validation"].into_iter().collect(),
        "three splits"
    );

    // SWAG regular and HellaSwag files, read back with af's own readers: same gold, same distractors.
    let mut seen = 0;
    for (swag, hs, split) in [
        ("train", "train", "train"),
        ("val", "val", "validation"),
        ("test", "test", "test"),
    ] {
        let regular =
            af_io::questions::read_questions(&export.join(format!("swag/{swag}.csv")), None, false)
                .unwrap();
        let full = af_io::questions::read_questions(
            &export.join(format!("swag/{swag}_full.csv")),
            None,
            false,
        )
        .unwrap();
        let hella = af_io::questions::read_questions(
            &export.join(format!("hellaswag/hellaswag_{hs}.jsonl")),
            None,
            false,
        )
        .unwrap();
        assert_eq!(regular.questions.len(), full.questions.len());
        assert_eq!(regular.questions.len(), hella.questions.len());
        for ((r, f), h) in regular
            .questions
            .iter()
            .zip(&full.questions)
            .zip(&hella.questions)
        {
            assert_eq!(h.split.as_deref(), Some(split));
            for q in [r, f, h] {
                let gold = &q.endings[q.label];
                let others: BTreeSet<String> = q
                    .endings
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != q.label)
                    .map(|(_, e)| e.clone())
                    .collect();
                let matches: Vec<_> = want
                    .values()
                    .filter(|w| w.0 == split && &w.1 == gold && w.2 == others)
                    .collect();
                assert!(
                    !matches.is_empty(),
                    "{split}: {q:?} is not an exported question"
                );
            }
            assert_eq!(r.endings, h.endings, "one shuffled order per question");
            seen += 1;
        }
    }
    assert_eq!(seen, want.len());

    // Hugging Face JSONL: the same keys and types on every line.
    for split in ["train", "validation", "test"] {
        for v in jsonl(&export.join(format!("hf/{split}.jsonl"))) {
            let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(
                keys,
                ["context", "endings", "group", "id", "label", "prefix", "split"]
            );
            assert!(
                v["label"].is_u64()
                    && v["endings"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(Value::is_string)
            );
            assert_eq!(want[v["id"].as_str().unwrap()].0, split);
        }
    }

    // The lm-eval task, parsed as YAML and checked field by field.
    let yaml: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(export.join("lm-eval/af_fixture.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(yaml["task"].as_str(), Some("af_fixture"));
    assert_eq!(yaml["dataset_path"].as_str(), Some("json"));
    assert_eq!(yaml["output_type"].as_str(), Some("multiple_choice"));
    assert_eq!(yaml["doc_to_text"].as_str(), Some("{{query}}"));
    assert_eq!(yaml["doc_to_choice"].as_str(), Some("choices"));
    assert_eq!(yaml["doc_to_target"].as_str(), Some("{{label}}"));
    let metrics: Vec<&str> = yaml["metric_list"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| m["metric"].as_str().unwrap())
        .collect();
    assert_eq!(metrics, ["acc", "acc_norm"]);
    // The task moves with its folder: file names relative to it, read by the loader beside the
    // YAML (lm-eval's `!function` is resolved from the YAML's folder).
    let moved = tempfile::tempdir().unwrap();
    let folder = moved.path().join("shared-with-a-colleague");
    copy_dir(&export.join("lm-eval"), &folder);
    match &yaml["custom_dataset"] {
        serde_yaml::Value::Tagged(t) => assert_eq!(
            (t.tag.to_string().as_str(), t.value.as_str()),
            ("!function", Some("af_fixture_data.load"))
        ),
        other => panic!("custom_dataset is {other:?}"),
    }
    assert!(folder.join("af_fixture_data.py").exists());
    loader_finds_the_files_after_a_move(&folder);
    for (split, key) in [
        ("train", "training_split"),
        ("validation", "validation_split"),
        ("test", "test_split"),
    ] {
        assert_eq!(yaml[key].as_str(), Some(split));
        let name = yaml["dataset_kwargs"]["data_files"][split]
            .as_str()
            .unwrap();
        assert!(
            Path::new(name).is_relative() && !name.contains('/'),
            "{name}: a file beside the YAML"
        );
        for doc in jsonl(&folder.join(name)) {
            let (query, choices, label) = (
                doc["query"].as_str().unwrap(),
                doc["choices"].as_array().unwrap(),
                doc["label"].as_u64().unwrap() as usize,
            );
            assert_eq!(choices.len(), 7);
            let (_, gold, _) = &want[doc["id"].as_str().unwrap()];
            assert_eq!(choices[label].as_str().unwrap(), gold);
            for text in std::iter::once(query).chain(choices.iter().map(|c| c.as_str().unwrap())) {
                for bad in [" 's", " n't", " ,", " .", " ?", " !", "( "] {
                    assert!(!text.contains(bad), "{text:?} has {bad:?}: not detokenized");
                }
            }
        }
    }
    eval_and_card_read_from_the_files(&export, &want);
}

/// `eval/{random,af}/`: the same three test questions under both assignments, scored by the
/// toy LM; the card's header as the Hub reads it, pointing at the split files, and its tables
/// the numbers of the files.
fn eval_and_card_read_from_the_files(
    export: &Path,
    want: &BTreeMap<String, (String, String, BTreeSet<String>)>,
) {
    let ids = |name: &str| -> Vec<String> {
        jsonl(&export.join(format!("eval/{name}/questions.jsonl")))
            .iter()
            .map(|q| q["id"].as_str().unwrap().to_string())
            .collect()
    };
    let af_ids = ids("af");
    assert_eq!(af_ids.len(), 3);
    assert_eq!(af_ids, ids("random"), "the same questions in both");
    assert!(af_ids.iter().all(|id| want[id].0 == "test"));
    let test_lines: Vec<Value> = jsonl(&export.join("hf/test.jsonl"));
    for q in jsonl(&export.join("eval/af/questions.jsonl")) {
        assert!(test_lines.contains(&q), "the lines of hf/test.jsonl");
    }
    let summary = |name: &str| json(&export.join(format!("eval/{name}/eval.json")));
    let (random, af) = (summary("random"), summary("af"));
    assert_eq!(af["questions"], 3);
    assert_eq!(af["dataset"], "eval/af/questions.jsonl");
    assert!((af["chance"].as_f64().unwrap() - 1.0 / 7.0).abs() < 1e-12);
    for name in ["random", "af"] {
        for f in ["scores.csv", "eval.html"] {
            assert!(
                export.join("eval").join(name).join(f).is_file(),
                "{name}/{f}"
            );
        }
    }
    let evaluation = json(&export.join("evaluation.json"));
    assert_eq!(evaluation["lm_eval"]["results"]["af"], "eval/af/eval.json");
    assert_eq!(evaluation["lm_eval"]["questions"], 3);

    let card = std::fs::read_to_string(export.join("README.md")).unwrap();
    let (header, body) = card
        .strip_prefix("---\n")
        .and_then(|t| t.split_once("\n---\n"))
        .expect("YAML front matter");
    let y: serde_yaml::Value = serde_yaml::from_str(header).unwrap();
    for key in [
        "license",
        "language",
        "task_categories",
        "size_categories",
        "pretty_name",
        "configs",
    ] {
        assert!(y.get(key).is_some(), "the header has {key}");
    }
    let files = y["configs"][0]["data_files"].as_sequence().unwrap();
    assert_eq!(files.len(), 3);
    for f in files {
        let split = f["split"].as_str().unwrap();
        let path = export.join(f["path"].as_str().unwrap());
        let lines = jsonl(&path);
        assert!(
            !lines.is_empty() && lines.iter().all(|l| l["split"] == split),
            "{}",
            path.display()
        );
    }
    // The table's cells are the files' figures.
    let cell = |v: &Value, condition: usize, measure: &str| {
        let a = &v["conditions"][condition][measure];
        format!(
            "{:.1}% [{:.1}, {:.1}]",
            100.0 * a["accuracy"].as_f64().unwrap(),
            100.0 * a["low"].as_f64().unwrap(),
            100.0 * a["high"].as_f64().unwrap()
        )
    };
    for (c, condition) in ["full", "zero-prompt", "choices-only"].iter().enumerate() {
        for measure in ["acc", "acc_norm"] {
            let row = format!(
                "| {condition} | {measure} | {} | {} | 14.3% |",
                cell(&random, c, measure),
                cell(&af, c, measure)
            );
            assert!(body.contains(&row), "{row} in\n{body}");
        }
    }
    let audit_rows = evaluation["audit"]["comparison"].as_array().unwrap();
    assert!(!audit_rows.is_empty());
    for c in audit_rows {
        let row = format!(
            "| {} | {:.3} | {:.3} |",
            c["detector"].as_str().unwrap(),
            c["random"].as_f64().unwrap(),
            c["af"].as_f64().unwrap()
        );
        assert!(body.contains(&row), "{row}");
    }
    // The fixture's input says nothing of its source: the card says so.
    assert!(body.contains("| `captions.json` | activitynet | unknown | unknown |"));
    assert_eq!(y["license"], "unknown");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

/// Runs the task's loader as lm-eval would, from another working directory, with a stand-in for
/// the `datasets` library that checks every file it is handed exists. Without python3 the check
/// says SKIPPED (the YAML and the file names above are still checked).
fn loader_finds_the_files_after_a_move(folder: &Path) {
    use std::io::Write;
    let stub = tempfile::tempdir().unwrap();
    std::fs::write(
        stub.path().join("datasets.py"),
        "import os\ndef load_dataset(kind, data_files):\n    assert kind == 'json'\n    for p in data_files.values():\n        assert os.path.isfile(p), p\n    return data_files\n",
    )
    .unwrap();
    let program = "import importlib.util, sys\n\
        spec = importlib.util.spec_from_file_location('loader', sys.argv[1] + '/af_fixture_data.py')\n\
        m = importlib.util.module_from_spec(spec)\n\
        spec.loader.exec_module(m)\n\
        print(len(m.load(data_files={'train': 'af_fixture_train.jsonl', 'test': 'af_fixture_test.jsonl'}, version=1.0)))\n";
    let out = match std::process::Command::new("python3")
        .arg("-c")
        .arg(program)
        .arg(folder)
        .env("PYTHONPATH", stub.path())
        .current_dir(stub.path())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED the lm-eval loader check: python3 does not run ({e})"
            );
            return;
        }
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2");
}
