//! `af lm score` in-process: with the generating LM it reproduces the pool's own LM features
//! (an independent code path: the pool shares each item's prefix state), the default LM is the
//! other fold's, and a question the run does not know is named.

use crate::common;

use std::collections::HashMap;

use af_pipeline::lm_score::{score_datasets, LmChoice};
use af_pipeline::stages::generate::NAME as GENERATE;
use common::*;

#[test]
fn the_own_lm_reproduces_the_pools_features_and_the_default_is_the_other_folds() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    let config = load(&fixture_config(d.path(), 1, 1, ""));
    let outcomes = run_stages(&config, until(GENERATE), &[]);
    assert!(outcomes.iter().all(|o| o.1 == "done"), "{outcomes:?}");

    // A generic JSONL dataset of the first 40 items: the gold and three generated endings each,
    // the gold second, with the pool's forward log-perplexity of each option kept aside.
    let items = af_io::items::read_items(&d.path().join("run/pairs/items.jsonl")).unwrap();
    let mut pool: HashMap<String, Vec<af_core::Candidate>> = HashMap::new();
    for part in af_io::pool::parts(&d.path().join("run/generate/pool")).unwrap() {
        for c in af_io::pool::read_part(&part).unwrap() {
            pool.entry(c.item_id.clone()).or_default().push(c);
        }
    }
    let mut lines = Vec::new();
    let mut expected: HashMap<(String, usize), (f32, u32)> = HashMap::new();
    let mut folds = HashMap::new();
    for item in items
        .iter()
        .filter(|i| pool.get(&i.id).is_some_and(|c| c.len() >= 4))
        .take(40)
    {
        let cands = &pool[&item.id];
        let gold = cands.iter().find(|c| c.is_gold()).unwrap();
        let generated: Vec<&af_core::Candidate> =
            cands.iter().filter(|c| !c.is_gold()).take(3).collect();
        let options = [generated[0], gold, generated[1], generated[2]];
        for (o, c) in options.iter().enumerate() {
            expected.insert((item.id.clone(), o), (c.features[0], c.tokens));
        }
        folds.insert(item.id.clone(), item.fold);
        let endings: Vec<&str> = options.iter().map(|c| c.ending.as_str()).collect();
        lines.push(serde_json::json!({"id": item.id, "group": item.group, "context": item.context, "prefix": item.noun_phrase, "endings": endings, "label": 1}).to_string());
    }
    assert_eq!(
        lines.len(),
        40,
        "the fixture pool has 40 items with three generated endings"
    );
    let dataset = d.path().join("options.jsonl");
    std::fs::write(&dataset, lines.join("\n") + "\n").unwrap();

    let own = score_datasets(
        &config,
        std::slice::from_ref(&dataset),
        LmChoice::Own,
        &d.path().join("own"),
    )
    .unwrap();
    let rows = read_rows(&own.datasets[0].csv);
    assert_eq!(rows.len(), 160);
    let mut compared = 0;
    for r in &rows {
        let (want, tokens) = expected[&(r.question.clone(), r.option)];
        assert_eq!(r.gold, r.option == 1);
        assert_eq!(r.fold, folds[&r.question]);
        // A generated ending is stored as text; where re-reading it gives other tokens the two
        // scores read different sequences.
        if r.tokens as u32 == tokens {
            assert!(
                (r.forward_log_ppl - want).abs() < 1e-3,
                "{}/{}: {} against the pool's {want}",
                r.question,
                r.option,
                r.forward_log_ppl
            );
            compared += 1;
        }
    }
    assert!(
        compared >= 150,
        "only {compared} of 160 options re-read to the pool's tokens"
    );
    assert_eq!(own.datasets[0].gold.options, 40);
    assert_eq!(own.datasets[0].distractors.options, 120);

    let other = score_datasets(
        &config,
        std::slice::from_ref(&dataset),
        LmChoice::Other,
        &d.path().join("other"),
    )
    .unwrap();
    let other_rows = read_rows(&other.datasets[0].csv);
    let n = config.pairs.folds;
    assert!(n >= 2, "the fixture has {n} folds");
    assert!(
        other_rows
            .iter()
            .all(|r| r.fold == (folds[&r.question] + 1) % n),
        "the other fold's LM scores each item"
    );
    let moved = other_rows
        .iter()
        .zip(&rows)
        .filter(|(a, b)| (a.forward_log_ppl - b.forward_log_ppl).abs() > 1e-3)
        .count();
    assert!(
        moved > 150,
        "another LM gives other scores ({moved} of 160 differ)"
    );
    let summary = json(&d.path().join("other/summary.json"));
    assert_eq!(summary["lm"], "other");
    assert_eq!(summary["datasets"][0]["questions"], 40);

    // A question the run never saw: named with its file and line, unless one fold scores all.
    std::fs::write(
        &dataset,
        format!(
            "{}\n{}\n",
            lines[0],
            lines[1].replace(
                &format!("\"id\":\"{}\"", items_id(&lines[1])),
                "\"id\":\"not-an-item\""
            )
        ),
    )
    .unwrap();
    let err = format!(
        "{:#}",
        score_datasets(
            &config,
            std::slice::from_ref(&dataset),
            LmChoice::Other,
            &d.path().join("bad")
        )
        .unwrap_err()
    );
    assert!(
        err.contains("options.jsonl:2") && err.contains("not-an-item") && err.contains("--lm N"),
        "{err}"
    );
    let one = score_datasets(
        &config,
        std::slice::from_ref(&dataset),
        LmChoice::Fold(0),
        &d.path().join("fold0"),
    )
    .unwrap();
    assert_eq!(one.datasets[0].questions, 2);
    assert!(
        score_datasets(
            &config,
            &[dataset],
            LmChoice::Fold(n),
            &d.path().join("beyond")
        )
        .is_err(),
        "no fold {n}"
    );
}

fn items_id(line: &str) -> String {
    serde_json::from_str::<serde_json::Value>(line).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[derive(serde::Deserialize)]
struct Row {
    question: String,
    option: usize,
    gold: bool,
    fold: u32,
    tokens: usize,
    forward_log_ppl: f32,
}

fn read_rows(path: &std::path::Path) -> Vec<Row> {
    csv::Reader::from_path(path)
        .unwrap()
        .deserialize()
        .map(Result::unwrap)
        .collect()
}
