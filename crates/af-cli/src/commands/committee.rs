//! What the `filter` and `export` stages share: loading the pool and its candidate table (or the
//! table the filter saved), and the libtorch committee behind af-filter's `Committee` trait.

use af_core::{CommitteeConfig, Config, Member};
use af_filter::{Assignment, HeadScores, Stage};
use af_nn::committee::{self as nnc, CommitteeModel};
use af_nn::table::CandidateTable;
use anyhow::Context;
use tch::{nn, Device};

use super::pool::Pool;
use super::table::{candidate_table, TableSummary};

/// The libtorch committee: a fresh model per iteration, seeded by the iteration, trained on the
/// training items' current questions, scoring every pool candidate of the held-out items.
pub struct TorchCommittee<'a> {
    pub pool: &'a Pool,
    pub table: &'a CandidateTable,
    pub config: &'a CommitteeConfig,
    pub device: Device,
}

impl TorchCommittee<'_> {
    /// One item's question under `assignment`: gold first, then its distractors.
    pub fn question(&self, item: usize, assignment: &Assignment) -> Vec<i64> {
        std::iter::once(self.pool.row(item, 0)).chain(assignment.distractors[item].iter().map(|&c| self.pool.row(item, c))).collect()
    }

    /// Trains a fresh committee of `members` on `questions`.
    pub fn train(&self, members: &[Member], questions: &[Vec<i64>], seed: u64) -> anyhow::Result<(nn::VarStore, CommitteeModel)> {
        tch::manual_seed(seed as i64);
        let vs = nn::VarStore::new(self.device);
        let model = CommitteeModel::new(&vs.root(), self.config, members, self.config.joint, self.table);
        nnc::train(&vs, &model, self.table, questions, self.config, seed)?;
        Ok((vs, model))
    }
}

impl af_filter::Committee for TorchCommittee<'_> {
    type Error = CommitteeError;

    fn train_and_score(
        &mut self,
        stage: &Stage,
        train: &[usize],
        heldout: &[usize],
        assignment: &Assignment,
        seed: u64,
    ) -> Result<Vec<HeadScores>, CommitteeError> {
        let members: Vec<Member> = stage
            .members
            .iter()
            .map(|m| Member::parse(m).ok_or_else(|| CommitteeError(format!("unknown committee member `{m}`"))))
            .collect::<Result<_, _>>()?;
        let questions: Vec<Vec<i64>> = train.iter().map(|&i| self.question(i, assignment)).collect();
        let (_vs, model) = self.train(&members, &questions, seed).map_err(|e| CommitteeError(format!("{e:#}")))?;
        let rows: Vec<i64> = heldout.iter().flat_map(|&i| (0..=self.pool.sizes[i] as u32).map(move |c| (i, c))).map(|(i, c)| self.pool.row(i, c)).collect();
        let scores = nnc::score(&model, self.table, &rows, self.config.score_batch);
        let heads = model.heads();
        Ok(scores
            .into_iter()
            .zip(heads)
            .map(|((head, flat), (_, is_member))| {
                let mut per_item = Vec::with_capacity(heldout.len());
                let mut at = 0;
                for &i in heldout {
                    let n = self.pool.sizes[i] + 1;
                    per_item.push(flat[at..at + n].to_vec());
                    at += n;
                }
                HeadScores { head, is_member, scores: per_item }
            })
            .collect())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CommitteeError(String);

/// The filter options of a config, in af-filter's terms.
pub fn filter_options(config: &Config) -> af_filter::FilterOptions {
    let f = &config.filter;
    af_filter::FilterOptions {
        seed: config.run.seed,
        train_share: f.train_share,
        swap_head: if f.swap_head == "best-member" {
            af_filter::SwapHead::BestMember
        } else {
            af_filter::SwapHead::Named(f.swap_head.clone())
        },
        budget: match f.budget {
            af_core::BudgetRule::Fixed => af_filter::SwapBudget::Fixed(f.n_easy),
            af_core::BudgetRule::PairwiseAccuracy => af_filter::SwapBudget::ByPairwiseAccuracy,
        },
        epsilon: f.epsilon,
        patience: f.patience,
        stages: f
            .stages
            .iter()
            .map(|s| Stage { name: s.name.clone(), members: s.members.iter().map(|m| m.name().to_string()).collect(), iterations: s.iterations })
            .collect(),
    }
}

/// Where the filter stage leaves its table for the export stage.
pub fn saved_table_dir(config: &Config) -> std::path::PathBuf {
    config.run.dir.join("filter/table")
}

/// The pool and the table the filter stage saved (the export's way: building the table again
/// would tag the whole pool again); built afresh if it is missing or does not fit the pool.
pub fn load_saved(config: &Config) -> anyhow::Result<(Pool, CandidateTable, Device)> {
    let pool = Pool::load(&config.run.dir).context("cannot load the candidate pool")?;
    let device = super::device(config)?;
    let dir = saved_table_dir(config);
    if dir.join("table.json").exists() {
        match CandidateTable::load(&dir, device) {
            Ok(table) if table.rows as usize == pool.rows => return Ok((pool, table, device)),
            Ok(table) => tracing::warn!("{} has {} rows, the pool {}: building the table again", dir.display(), table.rows, pool.rows),
            Err(e) => tracing::warn!("{e}: building the table again"),
        }
    }
    let (table, _) = build_table(config, &pool, device)?;
    Ok((pool, table, device))
}

/// Loads the pool and builds its table for a config's run.
pub fn load(config: &Config) -> anyhow::Result<(Pool, CandidateTable, TableSummary, Device)> {
    let pool = Pool::load(&config.run.dir).context("cannot load the candidate pool")?;
    let device = super::device(config)?;
    let (table, summary) = build_table(config, &pool, device)?;
    Ok((pool, table, summary, device))
}

fn build_table(config: &Config, pool: &Pool, device: Device) -> anyhow::Result<(CandidateTable, TableSummary)> {
    let tagger = super::load_tagger(config.tagger.model.as_deref())?;
    candidate_table(pool, &config.committee, &tagger, device)
}
