//! Tests on the real data in ../shared/data; each says SKIPPED when it is absent.

use crate::common;

use common::*;

#[test]
fn shipped_tagger_reaches_95_percent_upos_on_ewt_test() {
    let Some(data) = shared_data("shipped_tagger_reaches_95_percent_upos_on_ewt_test") else {
        return;
    };
    let test = data.join("ud-english-ewt/en_ewt-ud-test.conllu");
    let o = af(
        &[
            "tagger",
            "eval",
            "--json",
            "--conllu",
            test.to_str().unwrap(),
        ],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["tokens"], 25094, "EWT test has 25,094 words");
    let acc = v["upos_accuracy"].as_f64().unwrap();
    assert!(acc >= 0.95, "UPOS accuracy {acc}");
}

#[test]
fn tagger_train_reproduces_the_shipped_model() {
    let Some(data) = shared_data("tagger_train_reproduces_the_shipped_model") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("model.aftag");
    let train = data.join("ud-english-ewt/en_ewt-ud-train.conllu");
    let o = af(
        &[
            "tagger",
            "train",
            "--conllu",
            train.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let shipped = std::fs::read(repo().join("models/pos-tagger-ewt.aftag")).unwrap();
    assert!(
        std::fs::read(&out).unwrap() == shipped,
        "`af tagger train` with defaults must rebuild models/pos-tagger-ewt.aftag byte for byte"
    );
}

#[test]
fn activitynet_pairs_counts() {
    let Some(data) = shared_data("activitynet_pairs_counts") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let input = data.join("activitynet-captions/train.json");
    let cfg = config_in(
        d.path(),
        &format!(
            "[[pairs.inputs]]\npath = \"{}\"\nformat = \"activitynet\"\n",
            input.display()
        ),
    );
    let o = af(&["pairs", cfg.to_str().unwrap()], d.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(d.path().join("run/pairs/report.json")).unwrap(),
    )
    .unwrap();
    // The data README: 10,009 videos, 37,421 captions, 27,412 consecutive pairs.
    assert_eq!(report["groups"], 10009);
    assert_eq!(report["sentences"], 37421);
    assert_eq!(report["candidate_pairs"], 27412);
    let items = report["items"].as_u64().unwrap();
    let split_drops: u64 = report["dropped"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("split-"))
        .map(|(_, v)| v.as_u64().unwrap())
        .sum();
    assert!(items > 23_000, "{report}");
    assert!(
        split_drops * 20 < 27_412,
        "more than 5% of pairs failed to split: {report}"
    );
}
