//! `af audit` as a user meets a bad file: the exit status, the file and line on stderr, nothing
//! written, and `--models` checked. What the audit finds (planted artifacts, skipped rows, real
//! samples) is tested in-process in crates/af-pipeline/tests/audit.rs.

use crate::common;

use common::{af, stderr};

#[test]
fn bad_rows_stop_with_file_and_line_and_unknown_models_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    common::write_bad_labels(dir.path());
    let o = af(&["audit", "bad.jsonl", "--models", "ngram"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("bad.jsonl:8:") && e.contains(": field `label` is 9, expected 0..=3"),
        "{e}"
    );
    assert!(
        !dir.path().join("audit/bad").exists(),
        "nothing written for a failed read"
    );

    let o = af(&["audit", "bad.jsonl", "--models", "mlp"], dir.path());
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--models: unknown detector `mlp`"),
        "{}",
        stderr(&o)
    );
}
