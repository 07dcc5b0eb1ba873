//! The filter's data map (issue 16): the AF loop records the training dynamics of each
//! iteration's training items, and `final_dynamics` sorts a pool where half the gold endings carry
//! a word no distractor has (easy to learn) from the half where nothing tells gold from the
//! distractors (hard to learn).

use crate::common;
use af_core::{member_names, Candidate, CommitteeConfig, Config, FilterConfig, Item, Phase};
use af_filter::FilterState;
use af_io::pool_index::Pool;
use af_nn::committee::Registry;
use af_pipeline::committee::{random_assignment, TorchCommittee};
use af_pipeline::stages::filter::final_dynamics;
use rand::{Rng, SeedableRng};
use tch::Device;

const WORDS: [&str; 12] = [
    "the", "man", "walks", "dog", "runs", "park", "sits", "woman", "ball", "water", "jumps",
    "fence",
];

/// `n` items with 12 generated endings each, four random words and a full stop; the gold ending
/// of every even item has "zork" as its second word.
fn pool_with_cued_golds(dir: &std::path::Path, n: usize) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let mut ending = |cue: bool| {
        let mut w: Vec<&str> = (0..4)
            .map(|_| WORDS[rng.random_range(0..WORDS.len())])
            .collect();
        if cue {
            w[1] = "zork";
        }
        w.join(" ") + " ."
    };
    let items: Vec<Item> = (0..n)
        .map(|i| Item {
            id: format!("item-{i}"),
            group: format!("g{i}"),
            fold: (i % 2) as u32,
            context: "someone is outside .".into(),
            noun_phrase: "the man".into(),
            ending: ending(i % 2 == 0),
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
            rows.push(Candidate {
                item_index: i as u32,
                item_id: item.id.clone(),
                fold: item.fold,
                candidate: c,
                ending: if c == 0 {
                    item.ending.clone()
                } else {
                    ending(false)
                },
                tokens: 5,
                truncated: false,
                features: [0.0; 8],
                origin: None,
            });
        }
    }
    af_io::pool::write_part(&af_io::pool::part_path(&pool, 0), &rows).unwrap();
}

#[test]
fn the_filters_data_map_puts_cued_items_in_easy_to_learn() {
    let _lock = common::lock();
    let d = tempfile::tempdir().unwrap();
    pool_with_cued_golds(d.path(), 160);
    let pool = Pool::load(d.path()).unwrap();
    let committee = CommitteeConfig {
        epochs: 5,
        batch_items: 16,
        max_vocab: 30,
        embedding: 16,
        joint_hidden: 16,
        learning_rate: 3e-2,
        validation_share: 0.0,
        ..Default::default()
    };
    let (table, _) = af_pipeline::table::candidate_table(
        &pool,
        &committee,
        &af_text::Tagger::builtin(),
        Device::Cpu,
    )
    .unwrap();
    let registry = Registry::builtin();
    let mut torch = TorchCommittee::new(&pool, &table, &committee, &registry, Device::Cpu);
    let filter = FilterConfig {
        k: 3,
        patience: 100,
        stages: vec![Phase {
            name: "bow".into(),
            members: member_names(&["bow"]),
            iterations: 4,
            swap_head: None,
        }],
        ..Config::default().filter
    };
    let mut state = FilterState::new(random_assignment(&pool, 3, 1).unwrap());
    while state.step(&mut torch, &pool.groups(), &filter, 9).unwrap() {}

    let rows = final_dynamics(&state);
    // Four iterations training on 80% each: every item trained on at least once, with no
    // early-stopping share every epoch recorded.
    assert_eq!(rows.len(), 160);
    assert!(rows.iter().all(|r| r.dynamics.gold_probability.len() == 5));
    // An item's question is final exactly when no swap touched it after the recorded iteration.
    for r in &rows {
        let swapped_later = state
            .swaps
            .iter()
            .any(|s| s.item == r.item && s.iteration > r.iteration);
        assert_eq!(r.final_question, !swapped_later, "item {}", r.item);
    }
    let mean = |cued: bool| {
        let picked: Vec<f64> = rows
            .iter()
            .filter(|r| (r.item % 2 == 0) == cued)
            .map(|r| r.dynamics.confidence)
            .collect();
        picked.iter().sum::<f64>() / picked.len() as f64
    };
    let (cued, plain) = (mean(true), mean(false));
    eprintln!("mean confidence: cued {cued:.3}, plain {plain:.3}");
    assert!(
        cued > plain + 0.25,
        "mean confidence: cued {cued:.3}, plain {plain:.3}"
    );
    // Cartography's easy-to-learn third, among the final questions, is the cued items'.
    let finals: Vec<_> = rows.iter().filter(|r| r.final_question).collect();
    let dynamics: Vec<_> = finals.iter().map(|r| r.dynamics.clone()).collect();
    let regions =
        af_pipeline::datamap::regions(&dynamics, &af_pipeline::datamap::DatamapOptions::default());
    let cued_easy = regions
        .easy
        .iter()
        .filter(|&&i| finals[i].item % 2 == 0)
        .count();
    assert!(
        cued_easy as f64 >= 0.9 * regions.easy.len() as f64,
        "{cued_easy} of {} easy-to-learn are cued",
        regions.easy.len()
    );
    let plain_hard = regions
        .hard
        .iter()
        .filter(|&&i| finals[i].item % 2 == 1)
        .count();
    assert!(
        plain_hard as f64 >= 0.9 * regions.hard.len() as f64,
        "{plain_hard} of {} hard-to-learn are plain",
        regions.hard.len()
    );
}
