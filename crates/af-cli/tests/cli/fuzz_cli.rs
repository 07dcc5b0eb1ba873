//! The readers' fuzzer at the command line (issue 17): mutated inputs that the reader refuses
//! make `af pairs` and `af audit` exit 1 with a message naming the file, and write and destroy
//! nothing: the last good outputs stay byte for byte. The readers themselves are fuzzed at length
//! in crates/af-io/tests/fuzz.rs, whose mutations this test shares.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use af_test_support::mutate::{self, mutate, Rng};
use common::*;

/// Every file under `dir` with its bytes (the stage directories and anything beside them).
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.insert(
                    format!("{}/", p.strip_prefix(root).unwrap().display()),
                    Vec::new(),
                );
                walk(root, &p, out);
            } else {
                out.insert(
                    p.strip_prefix(root).unwrap().display().to_string(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Up to `n` mutations of `seed` that `refused` says the reader refuses, from a fixed seed.
fn refused_mutations(
    seed: &[u8],
    n: usize,
    refused: impl Fn(&[u8]) -> bool,
) -> Vec<(Vec<u8>, Vec<&'static str>)> {
    let mut rng = Rng::new(17);
    let mut out = Vec::new();
    for _ in 0..200 {
        let (input, kinds) = mutate(seed, b"", &mut rng, 4096);
        if refused(&input) {
            out.push((input, kinds));
            if out.len() == n {
                break;
            }
        }
    }
    assert_eq!(out.len(), n, "the mutations found too few refused inputs");
    out
}

#[test]
fn mutated_pairs_inputs_fail_with_the_file_named_and_leave_the_run_as_it_was() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("captions.json");
    let good = std::fs::read(repo().join("fixtures/captions/captions.json")).unwrap();
    std::fs::write(&input, &good).unwrap();
    let cfg = config_in(
        d.path(),
        &format!(
            "[[pairs.inputs]]\npath = \"{}\"\nformat = \"activitynet\"\n",
            input.display()
        ),
    );
    let o = af(&["pairs", cfg.to_str().unwrap()], d.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let run = d.path().join("run");
    let before = snapshot(&run);
    assert!(before.contains_key("pairs/items.jsonl"));
    let probe = d.path().join("probe.json");
    let cases = refused_mutations(&good, 6, |bytes| {
        std::fs::write(&probe, bytes).unwrap();
        af_io::documents::read_activitynet(&probe).is_err()
    });
    for (bytes, kinds) in cases {
        std::fs::write(&input, &bytes).unwrap();
        let o = af(&["pairs", cfg.to_str().unwrap()], d.path());
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{kinds:?}: {e}");
        assert!(
            e.contains(&input.display().to_string()),
            "{kinds:?}: the error names the file: {e}"
        );
        assert!(
            snapshot(&run) == before,
            "{kinds:?}: the run directory is as it was"
        );
    }
}

#[test]
fn mutated_audit_inputs_fail_with_the_file_named_and_leave_the_last_audit_as_it_was() {
    let d = tempfile::tempdir().unwrap();
    let good = write_bad_labels(d.path());
    // write_bad_labels' file with its one bad label made good: 200 valid questions.
    let text = std::fs::read_to_string(&good)
        .unwrap()
        .replace("\"label\":9", "\"label\":1");
    let input = d.path().join("questions.jsonl");
    std::fs::write(&input, &text).unwrap();
    let out = d.path().join("audit");
    let args = |extra: &[&str]| {
        let mut v = vec![
            "audit".to_string(),
            input.display().to_string(),
            "--models".into(),
            "ngram".into(),
            "--out".into(),
            out.display().to_string(),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let run = |a: Vec<String>| af(&a.iter().map(String::as_str).collect::<Vec<_>>(), d.path());
    let o = run(args(&[]));
    assert!(o.status.success(), "{}", stderr(&o));
    let before = snapshot(d.path());
    let probe = d.path().join("probe.jsonl");
    let cases = refused_mutations(text.as_bytes(), 5, |bytes| {
        std::fs::write(&probe, bytes).unwrap();
        let refused = af_io::questions::read_questions(&probe, None, false).is_err();
        std::fs::remove_file(&probe).unwrap();
        refused
    });
    for (bytes, kinds) in cases {
        std::fs::write(&input, &bytes).unwrap();
        let o = run(args(&["--force"]));
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{kinds:?}: {e}");
        assert!(
            e.contains(&input.display().to_string()),
            "{kinds:?}: the error names the file: {e}"
        );
        let mut after = snapshot(d.path());
        after.insert("questions.jsonl".into(), before["questions.jsonl"].clone());
        assert!(
            after == before,
            "{kinds:?}: the last audit is as it was, and nothing else is written"
        );
    }
}

/// Issue 44's mutations at the command line: empty captions and control characters in `af
/// pairs`' captions are each counted under their reason, and none reaches items.jsonl.
#[test]
fn mutated_captions_are_dropped_and_counted_never_written() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("captions.json");
    let good = std::fs::read(repo().join("fixtures/captions/captions.json")).unwrap();
    let cfg = config_in(
        d.path(),
        &format!(
            "[[pairs.inputs]]\npath = \"{}\"\nformat = \"activitynet\"\n",
            input.display()
        ),
    );
    let mut rng = Rng::new(44);
    let mut counted = 0;
    for case in 0..8 {
        let kind = ["empty-value", "control-char"][case % 2];
        let bytes = mutate::apply(kind, &good, b"", &mut rng, 4096);
        std::fs::write(&input, &bytes).unwrap();
        let o = af(&["pairs", cfg.to_str().unwrap()], d.path());
        if !o.status.success() {
            // A mutation outside a caption (a key, a number) may make the file unreadable.
            assert!(
                stderr(&o).contains(&input.display().to_string()),
                "{}",
                stderr(&o)
            );
            continue;
        }
        // The captions as JSON reads them: what af must have dropped, by reason.
        let parsed: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let captions: Vec<String> = parsed
            .as_object()
            .unwrap()
            .values()
            .flat_map(|v| v["sentences"].as_array().unwrap().clone())
            .map(|s| s.as_str().unwrap().to_string())
            .collect();
        let empty = captions.iter().filter(|c| c.trim().is_empty()).count() as u64;
        let damaged = captions
            .iter()
            .filter(|c| {
                !c.trim().is_empty() && c.chars().any(|ch| ch.is_control() && !ch.is_whitespace())
            })
            .count() as u64;
        let report: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(d.path().join("run/pairs/report.json")).unwrap(),
        )
        .unwrap();
        let count = |k: &str| report["dropped"][k].as_u64().unwrap_or(0);
        assert_eq!(
            (count("empty-caption"), count("control-character")),
            (empty, damaged),
            "{kind}: {report}"
        );
        counted += empty + damaged;
        let items = std::fs::read_to_string(d.path().join("run/pairs/items.jsonl")).unwrap();
        for line in items.lines() {
            let item: serde_json::Value = serde_json::from_str(line).unwrap();
            for field in ["context", "noun_phrase", "ending"] {
                let text = item[field].as_str().unwrap();
                assert!(
                    !text.chars().any(|c| c.is_control() && !c.is_whitespace()),
                    "{kind}: a control character reached items.jsonl: {text:?}"
                );
            }
        }
    }
    assert!(counted > 0, "no mutation hit a caption");
}

/// Issue 44: features at float32's edge (a constant column of 3e38, -3.4e38, 1e-45) give scores
/// without a NaN, or an error naming the file; never a NaN in an output.
#[test]
fn float32_edge_features_never_make_a_nan_score() {
    let d = tempfile::tempdir().unwrap();
    let (n, dim) = (80, 4);
    let mut instances = String::new();
    let mut features = String::new();
    for i in 0..n {
        instances.push_str(&format!("{{\"id\": \"i{i}\", \"label\": {}}}\n", i % 2));
        let row: Vec<String> = (0..dim)
            .map(|j| format!("{}", ((i * 7 + j * 3) % 11) as f32 / 10.0))
            .collect();
        features.push_str(&row.join(","));
        features.push('\n');
    }
    std::fs::write(d.path().join("i.jsonl"), &instances).unwrap();
    let mut rng = Rng::new(3);
    let mut runs = 0;
    for _ in 0..4 {
        let bytes = mutate::apply("float32-edge", features.as_bytes(), b"", &mut rng, 4096);
        std::fs::write(d.path().join("f.csv"), &bytes).unwrap();
        let o = af(
            &[
                "aflite",
                "--instances",
                "i.jsonl",
                "--features",
                "f.csv",
                "--out",
                "out",
                "--device",
                "cpu",
                "--threads",
                "1",
                "--m",
                "4",
                "--t",
                "40",
                "--k",
                "5",
                "--steps",
                "5",
                "--force",
            ],
            d.path(),
        );
        if !o.status.success() {
            assert!(stderr(&o).contains("f.csv"), "{}", stderr(&o));
            continue;
        }
        runs += 1;
        let scores = std::fs::read_to_string(d.path().join("out/scores.csv")).unwrap();
        for cell in scores.lines().skip(1).flat_map(|l| l.split(',')) {
            assert!(
                cell.parse::<f64>().map_or(true, f64::is_finite),
                "{cell} in scores.csv"
            );
        }
    }
    assert!(runs > 0, "every mutation was refused");
}
