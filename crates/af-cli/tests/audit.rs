//! `af audit` as a user meets a bad file: the exit status, the file and line on stderr, nothing
//! written, and `--models` checked. What the audit finds (planted artifacts, skipped rows, real
//! samples) is tested in-process in crates/af-pipeline/tests/audit.rs.

mod common;

use af_audit::synthetic::{questions, Planted};
use common::{af, stderr};

#[test]
fn bad_rows_stop_with_file_and_line_and_unknown_models_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.jsonl");
    let mut text = String::new();
    for (i, q) in questions(200, 4, Planted::Nothing, 5).iter().enumerate() {
        let label = if i == 7 { serde_json::json!(9) } else { serde_json::json!(q.label) };
        text.push_str(&serde_json::json!({"context": q.context, "endings": q.endings, "label": label}).to_string());
        text.push('\n');
    }
    std::fs::write(&p, text).unwrap();
    let o = af(&["audit", "bad.jsonl", "--models", "ngram"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("bad.jsonl:8: field `label` is \"9\", expected 0..=3"), "{e}");
    assert!(!dir.path().join("audit/bad").exists(), "nothing written for a failed read");

    let o = af(&["audit", "bad.jsonl", "--models", "mlp"], dir.path());
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--models: unknown detector `mlp`"), "{}", stderr(&o));
}
