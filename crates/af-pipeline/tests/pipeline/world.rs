//! The demo's caption world (fixtures/world/captions.json): the committed file is exactly what
//! af-text's grammar writes (AF_BLESS=1 rewrites it after a change to the grammar), and the
//! pairs stage splits its captions as it splits real ones.

use crate::common;

use common::*;

const VIDEOS: usize = 600;
const SEED: u64 = 2026;

fn world_json() -> String {
    let videos: serde_json::Map<String, serde_json::Value> = af_text::world::videos(VIDEOS, SEED)
        .into_iter()
        .map(|(id, sentences)| (id, serde_json::json!({ "sentences": sentences })))
        .collect();
    serde_json::to_string_pretty(&videos).unwrap() + "\n"
}

#[test]
fn the_committed_world_is_the_grammars_and_splits_like_captions() {
    let path = repo().join("fixtures/world/captions.json");
    let text = world_json();
    if std::env::var_os("AF_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
    }
    assert!(
        std::fs::read_to_string(&path).unwrap() == text,
        "{} is not what af_text::world writes: rerun this test with AF_BLESS=1",
        path.display()
    );

    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let cfg = config_in(
        d.path(),
        &format!(
            "[[pairs.inputs]]\npath = \"{}\"\nformat = \"activitynet\"\n",
            path.display()
        ),
    );
    run_stage(&load(&cfg), af_pipeline::stages::pairs::NAME, true)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let report = json(&d.path().join("run/pairs/report.json"));
    let (items, pairs) = (
        report["items"].as_u64().unwrap(),
        report["candidate_pairs"].as_u64().unwrap(),
    );
    assert!(
        items as f64 >= 0.95 * pairs as f64,
        "the tagger splits nearly every caption: {report}"
    );
    for item in jsonl(&d.path().join("run/pairs/items.jsonl")) {
        let np = item["noun_phrase"].as_str().unwrap();
        assert!(
            ["He", "She", "The"].iter().any(|s| np.starts_with(s)),
            "the subject, and any adverb after it: {item}"
        );
    }
}
