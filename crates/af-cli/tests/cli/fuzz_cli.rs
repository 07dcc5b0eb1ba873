//! The readers' fuzzer at the command line (issue 17): mutated inputs that the reader refuses
//! make `af pairs` and `af audit` exit 1 with a message naming the file, and write and destroy
//! nothing: the last good outputs stay byte for byte. The readers themselves are fuzzed at length
//! in crates/af-io/tests/fuzz.rs, whose mutations this test shares.

use crate::common;

#[path = "../../../af-io/tests/fuzz/mutate.rs"]
mod mutate;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use mutate::{mutate, Rng};

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
