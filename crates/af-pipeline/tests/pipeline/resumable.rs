//! Issue 17, item 3 for the stages that resume (lm, generate, filter): a run of another config
//! keeps the last complete outputs until it completes, a failure before any work restores them
//! exactly and leaves no `started.json` of its own, and outputs kept aside come back when their
//! config is asked for again.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use af_pipeline::runner::StageRun;
use af_pipeline::stages::lm::NAME as LM;
use af_pipeline::stages::pairs::NAME as PAIRS;
use common::*;

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
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

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_resumable_stage_keeps_its_last_complete_outputs_until_a_new_run_completes() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let lm = |extra: &str| {
        format!(
            "[lm]\nmin-count = 1\nembedding = 8\nhidden = 8\nmax-epochs = 1\n{extra}\n{}",
            captions_input()
        )
    };
    let cfg = config_in(d.path(), &lm(""));
    let good = load(&cfg);
    run_stage(&good, PAIRS, false).unwrap_or_else(|e| panic!("{e:#}"));
    run_stage(&good, LM, false).unwrap_or_else(|e| panic!("{e:#}"));
    let run = d.path().join("run");
    let before = snapshot(&run.join("lm"));
    assert!(
        before.contains_key("stage.json") && before.contains_key("fold-0/best.safetensors"),
        "{:?}",
        before.keys()
    );

    // Another config whose pretraining prose is not UTF-8: found before any work.
    let prose = d.path().join("prose.txt");
    std::fs::write(
        &prose,
        b"A man walks in. He sits down on the caf\xe9 chair.\n",
    )
    .unwrap();
    let bad = format!(
        "pretrain-epochs = 1\n\n[[lm.pretrain]]\npath = \"{}\"\nformat = \"text\"\n",
        prose.display()
    );
    let cfg = config_in(d.path(), &lm(&bad));
    let e = format!(
        "{:#}",
        run_stage(&load(&cfg), LM, false)
            .err()
            .expect("the prose is not UTF-8")
    );
    assert!(
        e.contains("prose.txt:1:") && e.contains("invalid UTF-8"),
        "{e}"
    );
    assert!(
        snapshot(&run.join("lm")) == before,
        "the last complete outputs are as they were, started.json included"
    );
    assert_eq!(
        entries(&run),
        ["lm", "pairs"],
        "nothing is left beside them"
    );

    // A run of another config killed after some work, as it leaves the run directory: its
    // partial outputs in lm/, the complete ones kept aside. Asking for the old config again
    // brings them back without training.
    std::fs::rename(run.join("lm"), run.join(".lm.last")).unwrap();
    std::fs::create_dir_all(run.join("lm/fold-0")).unwrap();
    std::fs::write(run.join("lm/started.json"), b"{\"another\": \"config\"}").unwrap();
    std::fs::write(run.join("lm/fold-0/progress.json"), b"{}").unwrap();
    assert!(matches!(
        run_stage(&good, LM, false).unwrap_or_else(|e| panic!("{e:#}")),
        StageRun::UpToDate { .. }
    ));
    assert!(snapshot(&run.join("lm")) == before);
    assert_eq!(entries(&run), ["lm", "pairs"]);

    // A run of another config that completes replaces them, and nothing is left aside.
    let cfg = config_in(
        d.path(),
        &lm("max-epochs = 2").replace("max-epochs = 1\n", ""),
    );
    let StageRun::Done { .. } =
        run_stage(&load(&cfg), LM, false).unwrap_or_else(|e| panic!("{e:#}"))
    else {
        panic!("it ran")
    };
    assert!(snapshot(&run.join("lm")) != before);
    assert_eq!(entries(&run), ["lm", "pairs"]);
}
