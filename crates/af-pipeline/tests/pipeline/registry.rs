//! A member registered by a test alone runs through the config check and the AF loop with the
//! built-in members, with nothing changed in af-filter or af-nn.

use crate::common;
use af_core::{member_names, BudgetRule, Config, FilterConfig, Phase, SwapHead};
use af_filter::FilterState;
use af_io::pool_index::{write_synthetic_pool, Pool};
use af_nn::committee::{Batch, BuildContext, Column, Member, MemberNet, Registry};
use af_nn::NnError;
use af_pipeline::committee::{random_assignment, TorchCommittee};
use tch::{nn, Device, Kind, Tensor};

/// The share of a candidate's tokens that are the unknown word (id 1): a one-number summary with
/// no parameters of its own (the committee adds the score layer).
struct UnknownShare;

#[derive(Debug)]
struct UnknownShareNet;

impl Member for UnknownShare {
    fn name(&self) -> &'static str {
        "unknown-share"
    }
    fn describe(&self) -> &'static str {
        "share of unknown words (a test's member)"
    }
    fn columns(&self) -> &'static [Column] {
        &[Column::Words]
    }
    fn settings(&self, _: &af_core::CommitteeConfig) -> Result<serde_json::Value, String> {
        Ok(serde_json::json!({}))
    }
    fn build(&self, _: &nn::Path, _: &BuildContext) -> Result<Box<dyn MemberNet>, NnError> {
        Ok(Box::new(UnknownShareNet))
    }
}

impl MemberNet for UnknownShareNet {
    fn width(&self) -> i64 {
        1
    }
    fn represent(&self, batch: &Batch, _train: bool) -> Tensor {
        let unknown = batch
            .words
            .eq(1)
            .to_kind(Kind::Float)
            .sum_dim_intlist(1, false, Kind::Float);
        (unknown / batch.lengths.to_kind(Kind::Float).clamp_min(1.0)).unsqueeze(1)
    }
}

fn registry() -> Registry {
    let mut registry = Registry::builtin();
    registry.register(UnknownShare).unwrap();
    registry
}

#[test]
fn a_registered_member_is_accepted_by_configs_that_name_it_and_refused_elsewhere() {
    let _lock = common::lock();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "[filter]\nswap-head = \"joint\"\n\n[[filter.stages]]\nname = \"toy\"\nmembers = [\"mlp\", \"unknown-share\"]\niterations = 1\n").unwrap();
    let config = af_pipeline::load_config_with(Some(&file), &registry()).unwrap();
    assert_eq!(
        config.filter.stages[0].members,
        member_names(&["mlp", "unknown-share"])
    );
    let e = format!("{:#}", af_pipeline::load_config(Some(&file)).unwrap_err());
    assert!(
        e.contains("c.toml:6")
            && e.contains("unknown committee member `unknown-share`")
            && e.contains("pos-lstm"),
        "{e}"
    );
    assert!(Registry::builtin().register(UnknownShare).is_ok());
    let mut twice = registry();
    assert!(
        twice.register(UnknownShare).is_err(),
        "a name is registered once"
    );
    // A member's flat key is checked by the member itself, when the config is loaded.
    std::fs::write(&file, "[committee]\ncnn-filters = 0\n").unwrap();
    let e = format!("{:#}", af_pipeline::load_config(Some(&file)).unwrap_err());
    assert!(
        e.contains("[committee] cnn-filters = 0: must be positive"),
        "{e}"
    );
}

#[test]
fn the_af_loop_runs_with_a_member_only_this_test_knows() {
    let _lock = common::lock();
    let dir = tempfile::tempdir().unwrap();
    write_synthetic_pool(dir.path(), 40, 12, 16).unwrap();
    let pool = Pool::load(dir.path()).unwrap();
    let mut committee_config = af_core::CommitteeConfig {
        epochs: 1,
        batch_items: 8,
        max_vocab: 12,
        embedding: 8,
        mlp_hidden: 8,
        joint_hidden: 8,
        ..Default::default()
    };
    committee_config.validation_share = 0.0;
    let tagger = af_text::Tagger::builtin();
    let (table, _) =
        af_pipeline::table::candidate_table(&pool, &committee_config, &tagger, Device::Cpu)
            .unwrap();
    let registry = registry();
    let mut committee =
        TorchCommittee::new(&pool, &table, &committee_config, &registry, Device::Cpu);
    let filter = FilterConfig {
        k: 3,
        swap_head: SwapHead::BestMember,
        budget: BudgetRule::Fixed,
        stages: vec![Phase {
            name: "toy".into(),
            members: member_names(&["unknown-share", "bow"]),
            iterations: 3,
            swap_head: None,
        }],
        ..Config::default().filter
    };
    let mut state = FilterState::new(random_assignment(&pool, 3, 1).unwrap());
    while state
        .step(&mut committee, &pool.groups(), &filter, 5)
        .unwrap()
    {}
    assert_eq!(state.iterations.len(), 3);
    let heads: Vec<&str> = state.iterations[0]
        .heads
        .iter()
        .map(|h| h.head.as_str())
        .collect();
    assert_eq!(heads, ["joint", "unknown-share", "bow"]);
    assert!(state.iterations.iter().all(|it| it.heldout_items > 0));
    assert!(state
        .swaps
        .iter()
        .all(|s| s.added as usize <= 12 && s.removed != s.added));
}
