//! The `encoder-ft` member through the pipeline's committee, on a tiny BERT directory the test
//! writes (af_nn::encoder::toy::write_toy_bert): it re-scores exactly each held-out item's
//! shortlist (gold, assigned distractors, the joint head's best others), drives the phase that
//! names it as its swap-head, and a config is refused where it cannot run.

use crate::common;

use af_core::{member_names, CommitteeConfig, FilterConfig, MemberName, Phase, SwapHead};
use af_filter::{Assignment, Committee, FilterState, IterationPlan};
use af_io::pool_index::{write_synthetic_pool, Pool};
use af_nn::encoder::toy::write_toy_bert;
use af_nn::Registry;
use af_pipeline::committee::TorchCommittee;
use af_pipeline::fine_tuned::{shortlist, NOT_SHORTLISTED};
use tch::Device;

/// A tiny BERT over the words of af-io's synthetic pool.
fn toy_bert(dir: &std::path::Path) {
    let mut words: Vec<String> = (0..300).map(|i| format!("w{i}")).collect();
    words.extend(["the", "man", "a", "dog", "someone", "is", "outside", "."].map(String::from));
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    std::fs::create_dir_all(dir).unwrap();
    write_toy_bert(dir, &words, 16, 1, 2, 3).unwrap();
}

#[test]
fn encoder_ft_rescores_each_shortlist_and_drives_its_phase() {
    let _lock = common::lock();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("bert");
    toy_bert(&model);
    write_synthetic_pool(dir.path(), 20, 8, 5).unwrap();
    let pool = Pool::load(dir.path()).unwrap();
    let mut config = CommitteeConfig {
        epochs: 1,
        validation_share: 0.0,
        embedding: 16,
        joint_hidden: 16,
        ..CommitteeConfig::default()
    };
    let table: toml::Table = format!(
        "model = {:?}\nshortlist = 2\ntrain-items = 6\nmax-length = 48",
        model.display().to_string()
    )
    .parse()
    .unwrap();
    config.member.insert("encoder-ft".into(), table);
    let tagger = af_text::Tagger::builtin();
    let (table, _) =
        af_pipeline::table::candidate_table(&pool, &config, &tagger, Device::Cpu).unwrap();
    let registry = Registry::builtin();
    let mut committee = TorchCommittee::new(&pool, &table, &config, &registry, Device::Cpu);
    let assignment = Assignment::random(&pool.sizes, 3, 1).unwrap();
    let mut phase = Phase {
        name: "ft".into(),
        members: member_names(&["bow", "encoder-ft"]),
        iterations: 2,
        swap_head: None,
    };
    phase.swap_head = Some(SwapHead::Member(MemberName::new("encoder-ft")));

    let (train, heldout): (Vec<usize>, Vec<usize>) = ((0..14).collect(), (14..20).collect());
    let heads = committee
        .train_and_score(
            &phase,
            &train,
            &heldout,
            &assignment,
            &IterationPlan {
                seed: 3,
                learning_rate: None,
            },
        )
        .unwrap();
    assert_eq!(
        heads.iter().map(|h| h.head.as_str()).collect::<Vec<_>>(),
        ["joint", "bow", "encoder-ft"]
    );
    let (joint, ft) = (&heads[0], &heads[2]);
    for (h, &item) in heldout.iter().enumerate() {
        let read: Vec<u32> = (0..ft.scores[h].len() as u32)
            .filter(|&c| ft.scores[h][c as usize] != NOT_SHORTLISTED)
            .collect();
        assert_eq!(
            read,
            shortlist(&joint.scores[h], &assignment.distractors[item], 2),
            "item {item}"
        );
        assert_eq!(read.len(), 1 + 3 + 2);
    }

    // In the loop: the phase is driven by it, and every candidate swapped in was on its shortlist
    // (scored above the gold, which NOT_SHORTLISTED never is).
    let filter = FilterConfig {
        k: 3,
        patience: 100,
        stages: vec![phase],
        ..FilterConfig::default()
    };
    let groups = pool.groups();
    let mut state = FilterState::new(assignment);
    while state.step(&mut committee, &groups, &filter, 5).unwrap() {}
    assert_eq!(
        state
            .iterations
            .iter()
            .map(|i| i.driving_head.as_str())
            .collect::<Vec<_>>(),
        ["encoder-ft", "encoder-ft"]
    );
    assert!(state
        .iterations
        .iter()
        .all(|i| i.heads.iter().any(|h| h.head == "encoder-ft")));
    assert!(state
        .last_scores
        .iter()
        .flatten()
        .all(|s| s.head == "encoder-ft"
            && s.gold != NOT_SHORTLISTED
            && s.distractors.iter().all(|&d| d != NOT_SHORTLISTED)));
}

#[test]
fn a_config_is_refused_where_encoder_ft_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let write = |extra: &str| common::config_in(dir.path(), extra);
    let refused = |extra: &str| {
        format!(
            "{:#}",
            af_pipeline::load_config(Some(&write(extra))).unwrap_err()
        )
    };
    // Alone in a stage, nothing shortlists for it.
    let e = refused("[[filter.stages]]\nname = \"ft\"\nmembers = [\"encoder-ft\"]\niterations = 1\nswap-head = \"encoder-ft\"\n");
    assert!(e.contains("`ft`: `encoder-ft` re-scores a shortlist that the stage's other members choose, and the stage has none"), "{e}");
    // Not an audit detector.
    let e = refused("[audit]\nmodels = [\"ngram\", \"encoder-ft\"]\n");
    assert!(
        e.contains("[audit] models: `encoder-ft` is fine-tuned inside the AF loop"),
        "{e}"
    );
    // Its settings are checked when the config loads.
    let e = refused("[committee.member.encoder-ft]\nshortlist = 0\n");
    assert!(
        e.contains("[committee.member.encoder-ft] shortlist = 0: must be positive"),
        "{e}"
    );
    // With another member it loads, driven by it in its own stage.
    let ok = common::load(&write(
        "[[filter.stages]]\nname = \"mlp\"\nmembers = [\"mlp\"]\niterations = 1\n\n\
         [[filter.stages]]\nname = \"ft\"\nmembers = [\"mlp\", \"encoder-ft\"]\niterations = 1\nswap-head = \"encoder-ft\"\n",
    ));
    assert_eq!(
        ok.filter.stages[1].driving(&ok.filter.swap_head),
        &SwapHead::Member(MemberName::new("encoder-ft"))
    );
    // `af ablate`'s leave-one-out would leave `without-mlp` with encoder-ft alone: refused first.
    let e = af_pipeline::ablate::plan(&ok, &Registry::builtin())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "composition `without-mlp`, stage `ft`: only fine-tuned members (encoder-ft) are left"
        ),
        "{e}"
    );
}
