//! `af ablate` on a pool with two planted cues, each visible to exactly one member: a word in the
//! ending that only `bow` reads (and the audit's n-gram detector), and an LM feature that only
//! `mlp` reads. A composition removes the cue of its own members and leaves the other's, and the
//! cross-matrix shows it; runs are skipped when up to date, a new composition runs alone, and a
//! changed config is refused.

use crate::common;

use af_core::ablate::{CompositionSpec, Design};
use af_core::{member_names, Candidate, Config, Item, MemberName, Phase, View};
use af_io::pool_index::Pool;
use af_nn::committee::Registry;
use af_pipeline::ablate::{AblateRequest, AblateRun, Outcome};
use common::*;
use rand::{Rng, SeedableRng};
use tch::Device;

const WORDS: [&str; 16] = [
    "the", "man", "walks", "dog", "runs", "park", "sits", "woman", "ball", "water", "jumps",
    "fence", "smiles", "camera", "boy", "car",
];

/// 400 items with 12 generated endings each: a generated ending carries the word cue ("zork")
/// with probability 1/2 and the feature cue (first LM feature raised by 4) with probability 1/2,
/// independently; gold endings carry neither, and every ending has five tokens.
fn planted_pool(dir: &std::path::Path) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let ending = |word_cue: bool, rng: &mut rand_chacha::ChaCha8Rng| {
        let mut w: Vec<&str> = (0..4)
            .map(|_| WORDS[rng.random_range(0..WORDS.len())])
            .collect();
        if word_cue {
            w[1] = "zork";
        }
        w.join(" ") + " ."
    };
    let items: Vec<Item> = (0..400)
        .map(|i| Item {
            id: format!("item-{i}"),
            group: format!("g{}", i / 2),
            fold: (i % 2) as u32,
            context: "someone is outside .".into(),
            noun_phrase: "the man".into(),
            ending: ending(false, &mut rng),
            context_tokens: 4,
            noun_phrase_tokens: 2,
            ending_tokens: 5,
            distractors: Vec::new(),
        })
        .collect();
    std::fs::create_dir_all(dir.join("pairs")).unwrap();
    af_io::items::write_items(&dir.join("pairs/items.jsonl"), &items).unwrap();
    let pool = dir.join("generate/pool");
    std::fs::create_dir_all(&pool).unwrap();
    let mut rows = Vec::new();
    for (i, item) in items.iter().enumerate() {
        for c in 0..=12u32 {
            let (word_cue, feature_cue) = if c == 0 {
                (false, false)
            } else {
                (rng.random_bool(0.5), rng.random_bool(0.5))
            };
            let mut features: [f32; 8] = std::array::from_fn(|_| rng.random_range(2.0..4.0));
            if feature_cue {
                features[0] += 4.0;
            }
            rows.push(Candidate {
                item_index: i as u32,
                item_id: item.id.clone(),
                fold: item.fold,
                candidate: c,
                ending: if c == 0 {
                    item.ending.clone()
                } else {
                    ending(word_cue, &mut rng)
                },
                tokens: 5,
                truncated: false,
                features,
                origin: None,
            });
        }
    }
    af_io::pool::write_part(&af_io::pool::part_path(&pool, 0), &rows).unwrap();
}

fn config(dir: &std::path::Path) -> Config {
    let mut c = Config::default();
    c.run.dir = dir.to_path_buf();
    c.run.threads = 2;
    c.run.device = "cpu".into();
    let m = &mut c.committee;
    (
        m.embedding,
        m.mlp_hidden,
        m.joint_hidden,
        m.max_vocab,
        m.cnn_filters,
        m.lstm_hidden,
    ) = (16, 32, 16, 60, 8, 8);
    (m.epochs, m.batch_items, m.learning_rate, m.validation_share) = (4, 32, 5e-3, 0.0);
    (c.filter.k, c.filter.patience) = (3, 100);
    c.filter.stages = vec![Phase {
        name: "all".into(),
        members: member_names(&["mlp", "bow"]),
        iterations: 14,
        swap_head: None,
    }];
    c.audit.models = member_names(&["ngram"]);
    c.audit.views = vec![View::Ending];
    c.ablate.design = Design::Singletons;
    c
}

fn ablate(config: &Config, force: bool) -> anyhow::Result<(AblateRun, Vec<(String, Outcome)>)> {
    let registry = Registry::builtin();
    let request = AblateRequest {
        config,
        registry: &registry,
        force,
    };
    let dir = config.run.dir.clone();
    let load = || {
        let pool = Pool::load(&dir)?;
        let (table, _) = af_pipeline::table::candidate_table(
            &pool,
            &config.committee,
            &af_text::Tagger::builtin(),
            Device::Cpu,
        )?;
        Ok((pool, table, Device::Cpu))
    };
    let mut outcomes = Vec::new();
    let run = af_pipeline::ablate::run_on(
        &request,
        &serde_json::json!("planted pool"),
        load,
        &af_pipeline::NoProgress,
        |c| outcomes.push((c.name.clone(), c.outcome)),
    )?;
    Ok((run, outcomes))
}

fn edge(run: &AblateRun, composition: &str, detector: &str) -> (f64, bool) {
    let c = run
        .cells
        .iter()
        .find(|c| c.composition == composition && c.score.detector == detector)
        .unwrap_or_else(|| panic!("no cell {composition} x {detector}"));
    (c.score.edge, c.in_composition)
}

#[test]
fn each_composition_removes_only_the_cue_its_members_see() {
    let _lock = lock();
    let d = tempfile::tempdir().unwrap();
    planted_pool(d.path());
    let mut config = config(d.path());
    let (run, outcomes) = ablate(&config, false).unwrap_or_else(|e| panic!("{e:#}"));
    let names: Vec<&str> = outcomes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["full", "only-mlp", "only-bow"]);
    assert!(outcomes.iter().all(|(_, o)| *o == Outcome::Ran));
    let table: Vec<String> = run
        .cells
        .iter()
        .map(|c| {
            format!(
                "{} {} {:+.3} {}",
                c.composition, c.score.detector, c.score.edge, c.in_composition
            )
        })
        .collect();
    let show = table.join("\n");

    // On the random assignment every detector sees its cue (k = 3: chance 0.25, the cue alone gives 0.47).
    for detector in [
        "committee:mlp",
        "committee:bow",
        "committee:joint",
        "ngram/ending",
    ] {
        assert!(
            edge(&run, "random", detector).0 > 0.15,
            "{detector} on random:\n{show}"
        );
    }
    // Each singleton removes its member's cue and leaves the other's.
    assert_eq!(
        edge(&run, "only-bow", "committee:bow"),
        (edge(&run, "only-bow", "committee:bow").0, true)
    );
    assert!(
        edge(&run, "only-bow", "committee:bow").0 < 0.08,
        "bow's cue removed by bow:\n{show}"
    );
    assert!(
        edge(&run, "only-bow", "committee:mlp").0 > 0.15,
        "mlp's cue left by bow:\n{show}"
    );
    assert!(!edge(&run, "only-bow", "committee:mlp").1);
    assert!(
        edge(&run, "only-mlp", "committee:mlp").0 < 0.08,
        "mlp's cue removed by mlp:\n{show}"
    );
    assert!(
        edge(&run, "only-mlp", "committee:bow").0 > 0.15,
        "bow's cue left by mlp:\n{show}"
    );
    // Transfer: the n-gram detector was never in a committee, and reads the word cue only.
    assert!(!edge(&run, "only-bow", "ngram/ending").1);
    assert!(
        edge(&run, "only-bow", "ngram/ending").0 < 0.08,
        "bow's filtering fools the n-gram detector:\n{show}"
    );
    assert!(
        edge(&run, "only-mlp", "ngram/ending").0 > 0.15,
        "mlp's filtering does not:\n{show}"
    );
    // The full committee removes both cues: the feature cue for mlp, the word cue for the n-gram
    // detector. (bow alone is not asked: on a 16-word vocabulary, AF's choice among cue-free
    // endings leaves word frequencies a fresh bow can learn, which is AF's own artifact.)
    for detector in ["committee:mlp", "ngram/ending"] {
        assert!(
            edge(&run, "full", detector).0 < 0.08,
            "{detector} on full:\n{show}"
        );
    }
    for detector in ["committee:mlp", "committee:bow", "committee:joint"] {
        assert!(
            edge(&run, "full", detector).1,
            "{detector} is in the full committee"
        );
    }
    // Paired against the random assignment on the same held-out items: where bow removed the
    // word cue, the n-gram detector's drop has an interval that excludes 0.
    let paired = |comp: &str, det: &str| {
        run.cells
            .iter()
            .find(|c| c.composition == comp && c.score.detector == det)
            .and_then(|c| c.edge_change)
            .unwrap()
    };
    let ngram = paired("only-bow", "ngram/ending");
    assert!(
        ngram.ci_high < 0.0
            && (ngram.change
                - (edge(&run, "only-bow", "ngram/ending").0
                    - edge(&run, "random", "ngram/ending").0))
                .abs()
                < 1e-9,
        "{ngram:?}\n{show}"
    );
    // Every two compositions, paired: the later's edge less the earlier's, the difference of
    // their edges on the same held-out items; only-bow left the n-gram detector less than only-mlp.
    let pair = |before: &str, after: &str, det: &str| {
        run.pairs
            .iter()
            .find(|p| p.before == before && p.after == after && p.detector == det)
            .map(|p| p.change)
    };
    let mlp_to_bow = pair("only-mlp", "only-bow", "ngram/ending")
        .expect("only-mlp then only-bow, in the config's order");
    assert!(
        (mlp_to_bow.change
            - (edge(&run, "only-bow", "ngram/ending").0
                - edge(&run, "only-mlp", "ngram/ending").0))
            .abs()
            < 1e-9
            && mlp_to_bow.ci_high < 0.0,
        "{mlp_to_bow:?}"
    );
    assert!(
        pair("only-bow", "only-mlp", "ngram/ending").is_none()
            && pair("random", "full", "ngram/ending").is_none(),
        "each pair once, random only in the cells"
    );
    assert_eq!(
        run.pairs.len(),
        3 * run.cells.iter().filter(|c| c.composition == "full").count(),
        "3 pairs of compositions x every detector"
    );
    let pairs_csv = std::fs::read_to_string(run.dir.join("composition-pairs.csv")).unwrap();
    assert_eq!(pairs_csv.lines().count(), 1 + run.pairs.len());
    let page = std::fs::read_to_string(run.dir.join("ablate.html")).unwrap();
    assert!(
        page.contains("Composition against composition") && page.contains("only-bow leaves less"),
        "the report reads the pairs"
    );
    let summary = |name: &str| run.summary.iter().find(|r| r.composition == name).unwrap();
    assert!(
        summary("only-bow").mean_edge_outside.unwrap()
            > summary("full").mean_edge_outside.unwrap_or(0.0)
    );
    // The paired counts: bow's filtering lowers the n-gram detector significantly (above), and
    // the random assignment is compared with nothing.
    assert!(
        summary("only-bow").detectors_down.unwrap() >= 1
            && summary("random").detectors_down.is_none(),
        "{:?}",
        run.summary
    );
    let down = |name: &str| {
        run.cells
            .iter()
            .filter(|c| {
                c.composition == name
                    && c.score.detector != "random"
                    && c.edge_change.is_some_and(|e| e.ci_high < 0.0)
            })
            .count()
    };
    assert_eq!(summary("full").detectors_down, Some(down("full")));
    for file in [
        "cross-matrix.csv",
        "summary.csv",
        "composition-pairs.csv",
        "cross-matrix.svg",
        "cross-matrix.png",
        "ablate.html",
        "ablate.json",
        "only-bow/state.json",
        "random/cross.json",
    ] {
        assert!(run.dir.join(file).exists(), "{file}");
    }
    // Each dataset is written in af's layout and reads back as the questions its assignment made:
    // bow's has removed the word cue that half the random assignment's distractors carry.
    let cue_share = |name: &str| {
        let file = af_io::questions::read_questions(
            &run.dir.join(name).join("dataset.jsonl"),
            None,
            false,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(file.questions.len(), 400, "{name}");
        assert_eq!(file.questions[7].id, "item-7");
        assert!(
            file.questions
                .iter()
                .all(|q| q.endings.len() == 4 && q.label == 0 && !q.endings[0].contains("zork")),
            "{name}: 4-way, gold first"
        );
        let carried = file
            .questions
            .iter()
            .flat_map(|q| &q.endings[1..])
            .filter(|e| e.contains("zork"))
            .count();
        carried as f64 / (3.0 * 400.0)
    };
    let (random, bow) = (cue_share("random"), cue_share("only-bow"));
    assert!(
        random > 0.4 && bow < 0.5 * random,
        "share of distractors with the word cue: random {random:.2}, only-bow {bow:.2}"
    );
    let csv = std::fs::read_to_string(run.dir.join("cross-matrix.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + run.cells.len());
    assert!(csv.starts_with("composition,detector,family,questions,accuracy,ci_low,ci_high,chance,edge,p_value,in_composition"));

    // Up to date: nothing runs again; a new composition runs alone.
    config.ablate.compositions = vec![CompositionSpec {
        name: "bow-twice".into(),
        members: member_names(&["bow"]),
        stages: vec![Phase {
            name: "b".into(),
            members: member_names(&["bow"]),
            iterations: 2,
            swap_head: None,
        }],
    }];
    let before = std::fs::read(run.dir.join("only-bow/cross.json")).unwrap();
    let (_, outcomes) = ablate(&config, false).unwrap_or_else(|e| panic!("{e:#}"));
    let ran: Vec<&str> = outcomes
        .iter()
        .filter(|(_, o)| *o == Outcome::Ran)
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(ran, ["bow-twice"]);
    assert_eq!(
        std::fs::read(run.dir.join("only-bow/cross.json")).unwrap(),
        before,
        "evaluations kept"
    );

    // Another config's runs are refused before any work, and replaced with --force.
    config.committee.epochs = 3;
    let Err(e) = ablate(&config, false) else {
        panic!("a changed config's runs are refused")
    };
    let e = format!("{e:#}");
    assert!(
        e.contains("started with another config") && e.contains("--force"),
        "{e}"
    );
    config.ablate.compositions.clear();
    config.ablate.design = Design::List;
    config.ablate.compositions = vec![CompositionSpec {
        name: "only-bow".into(),
        members: vec![MemberName::new("bow")],
        stages: Vec::new(),
    }];
    config.filter.stages[0].iterations = 1;
    let (run, outcomes) = ablate(&config, true).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(outcomes, [("only-bow".to_string(), Outcome::Ran)]);
    assert_eq!(run.compositions[0].report.iterations, 1);

    // Cross-fitted (`[audit] eval-folds`): the filter runs are kept, and every detector, the
    // committee's and the audit's, measures all 400 items.
    config.audit.eval_folds = 2;
    let (run, outcomes) = ablate(&config, false).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(outcomes, [("only-bow".to_string(), Outcome::UpToDate)]);
    assert!(
        run.cells.iter().all(|c| c.score.questions == 400),
        "{:?}",
        run.cells
            .iter()
            .map(|c| (&c.score.detector, c.score.questions))
            .collect::<Vec<_>>()
    );
    assert!(
        run.cells
            .iter()
            .any(|c| c.score.detector == "committee:joint")
            && run.cells.iter().any(|c| c.score.detector == "ngram/ending")
    );
    let written = common::json(&run.dir.join("ablate.json"));
    assert_eq!(
        (
            written["split"]["folds"].as_u64(),
            written["split"]["eval"].as_u64()
        ),
        (Some(2), Some(400))
    );
    // Paired against the random assignment on the same 400 items: the mean change is the
    // difference of the edges.
    let edge_on = |comp: &str, det: &str| {
        run.cells
            .iter()
            .find(|c| c.composition == comp && c.score.detector == det)
            .unwrap_or_else(|| panic!("{comp} {det}"))
    };
    for c in &run.cells {
        match (c.composition.as_str(), c.edge_change) {
            ("random", None) => {}
            ("random", Some(_)) => panic!("the random assignment is not compared with itself"),
            (_, None) => panic!("{}: no paired change", c.score.detector),
            (_, Some(e)) => {
                let difference = c.score.edge - edge_on("random", &c.score.detector).score.edge;
                assert!(
                    (e.change - difference).abs() < 1e-9
                        && e.questions == 400
                        && e.ci_low <= e.change
                        && e.change <= e.ci_high,
                    "{}: {e:?} against {difference}",
                    c.score.detector
                );
            }
        }
    }
    let csv = std::fs::read_to_string(run.dir.join("cross-matrix.csv")).unwrap();
    assert!(csv
        .lines()
        .next()
        .unwrap()
        .ends_with("in_composition,edge_change,edge_change_ci_low,edge_change_ci_high"));
    assert!(
        !std::fs::read_to_string(run.dir.join("ablate.json"))
            .unwrap()
            .contains("per_question"),
        "per-question credits stay in cross.json"
    );
}

#[test]
fn a_config_naming_an_unknown_member_in_ablate_fails_on_load() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("c.toml");
    std::fs::write(
        &file,
        "[ablate]\ndesign = \"singletons\"\nmembers = [\"bow\", \"nope\"]\n",
    )
    .unwrap();
    let e = format!("{:#}", af_pipeline::load_config(Some(&file)).unwrap_err());
    assert!(
        e.contains("c.toml:3")
            && e.contains("unknown committee member `nope`")
            && e.contains("pos-lstm"),
        "{e}"
    );
    std::fs::write(
        &file,
        "[ablate]\ndesign = \"leave-one-out\"\nmembers = [\"bow\"]\n",
    )
    .unwrap();
    let e = format!("{:#}", af_pipeline::load_config(Some(&file)).unwrap_err());
    assert!(
        e.contains("leave-one-out") && e.contains("at least 2 members"),
        "{e}"
    );
}
