//! What the `filter` and `export` stages share: loading the pool and its candidate table (or the
//! table the filter saved), and the libtorch committee behind af-filter's `Committee` trait.

use af_core::{CommitteeConfig, Config, MemberName, Phase};
use af_filter::{Assignment, EpochRecord, HeadScores, IterationPlan};
use af_io::pool_index::Pool;
use af_nn::committee::{self as nnc, CommitteeModel, Registry};
use af_nn::table::CandidateTable;
use af_nn::NnError;
use anyhow::Context;
use tch::{nn, Device};

use crate::progress::Progress;
use crate::table::{candidate_table_with, TableSummary};

/// The libtorch committee: a fresh model per iteration, seeded by the iteration, trained on the
/// training items' current questions, scoring every pool candidate of the held-out items. It
/// records the training items' dynamics (their questions scored after every epoch) for the data
/// map of the filtered dataset.
pub struct TorchCommittee<'a> {
    pub pool: &'a Pool,
    pub table: &'a CandidateTable,
    pub config: &'a CommitteeConfig,
    pub registry: &'a Registry,
    pub device: Device,
    /// The last `train_and_score`'s dynamics, until taken.
    dynamics: Vec<Option<EpochRecord>>,
}

/// Why an iteration's committee failed; the libtorch error stays its cause.
#[derive(Debug, thiserror::Error)]
pub enum CommitteeError {
    #[error("cannot build the committee of phase `{phase}`")]
    Build {
        phase: String,
        #[source]
        source: NnError,
    },
    #[error("training the committee failed")]
    Train(#[source] NnError),
    #[error("head `{head}` scored candidate {candidate} of item `{item}` {score}: a committee's scores must be finite")]
    NonFiniteScore {
        head: String,
        item: String,
        candidate: usize,
        score: f32,
    },
    #[error("member `{member}`")]
    FineTune {
        member: &'static str,
        #[source]
        source: anyhow::Error,
    },
}

impl<'a> TorchCommittee<'a> {
    pub fn new(
        pool: &'a Pool,
        table: &'a CandidateTable,
        config: &'a CommitteeConfig,
        registry: &'a Registry,
        device: Device,
    ) -> Self {
        Self {
            pool,
            table,
            config,
            registry,
            device,
            dynamics: Vec::new(),
        }
    }

    /// One item's question under `assignment`: gold first, then its distractors.
    pub fn question(&self, item: usize, assignment: &Assignment) -> Vec<i64> {
        std::iter::once(self.pool.row(item, 0))
            .chain(
                assignment.distractors[item]
                    .iter()
                    .map(|&c| self.pool.row(item, c)),
            )
            .collect()
    }

    /// Trains a fresh committee of `members` on `questions`.
    pub fn train(
        &self,
        members: &[MemberName],
        questions: &[Vec<i64>],
        seed: u64,
    ) -> Result<(nn::VarStore, CommitteeModel), CommitteeError> {
        let (vs, model, _) = self.train_observed(
            members,
            questions,
            &IterationPlan {
                seed,
                learning_rate: None,
            },
            &mut |_, _| Ok(()),
        )?;
        Ok((vs, model))
    }

    fn train_observed(
        &self,
        members: &[MemberName],
        questions: &[Vec<i64>],
        plan: &IterationPlan,
        on_epoch: &mut nnc::EpochHook<'_>,
    ) -> Result<(nn::VarStore, CommitteeModel, nnc::TrainReport), CommitteeError> {
        let seed = plan.seed;
        // HellaSwag's random hyperparameters: this iteration's learning rate, when drawn.
        let drawn;
        let config = match plan.learning_rate {
            Some(learning_rate) => {
                drawn = CommitteeConfig {
                    learning_rate,
                    ..self.config.clone()
                };
                &drawn
            }
            None => self.config,
        };
        tch::manual_seed(seed as i64);
        let vs = nn::VarStore::new(self.device);
        let model = CommitteeModel::new(
            &vs.root(),
            self.config,
            self.registry,
            members,
            self.config.joint,
            self.table,
        )
        .map_err(|source| CommitteeError::Build {
            phase: members
                .iter()
                .map(MemberName::as_str)
                .collect::<Vec<_>>()
                .join("+"),
            source,
        })?;
        let report =
            nnc::train_observed(&vs, &model, self.table, questions, config, seed, on_epoch)
                .map_err(CommitteeError::Train)?;
        Ok((vs, model, report))
    }

    /// Trains on `questions` (gold first), recording each one's dynamics: after every epoch, the
    /// committee's probability of its gold option (`nnc::gold_probabilities`, as `af datamap`).
    /// Scoring between epochs draws nothing at random, so the weights are those of [`Self::train`].
    fn train_recording(
        &self,
        members: &[MemberName],
        questions: &[Vec<i64>],
        plan: &IterationPlan,
    ) -> Result<(nn::VarStore, CommitteeModel, Vec<Option<EpochRecord>>), CommitteeError> {
        let rows: Vec<i64> = questions.iter().flatten().copied().collect();
        let shapes: Vec<(usize, usize)> = questions.iter().map(|q| (q.len(), 0)).collect();
        let mut records = vec![EpochRecord::default(); questions.len()];
        let mut on_epoch = |_epoch: usize, m: &CommitteeModel| -> Result<(), NnError> {
            let heads = nnc::score(m, self.table, &rows, self.config.score_batch);
            for (record, (p, right)) in records
                .iter_mut()
                .zip(nnc::gold_probabilities(&heads, &shapes))
            {
                record.gold_probability.push(p as f32);
                record.right.push(right);
            }
            Ok(())
        };
        let (vs, model, report) = self.train_observed(members, questions, plan, &mut on_epoch)?;
        let mut records: Vec<Option<EpochRecord>> = records.into_iter().map(Some).collect();
        // Early stopping's share was scored but never fitted: its numbers are not training dynamics.
        for &q in &report.validation_questions {
            records[q] = None;
        }
        Ok((vs, model, records))
    }
}

impl af_filter::Committee for TorchCommittee<'_> {
    type Error = CommitteeError;

    fn train_and_score(
        &mut self,
        phase: &Phase,
        train: &[usize],
        heldout: &[usize],
        assignment: &Assignment,
        plan: &IterationPlan,
    ) -> Result<Vec<HeadScores>, CommitteeError> {
        let fine_tuned = self
            .registry
            .fine_tuned(&phase.members, self.config)
            .map_err(|source| CommitteeError::Build {
                phase: phase.name.clone(),
                source,
            })?;
        let mut heads = self.train_and_score_joint(phase, train, heldout, assignment, plan)?;
        if let Some((member, settings)) = fine_tuned {
            // The committee's answer picks the shortlist: its joint head, else its first member.
            let by = heads.iter().position(|h| !h.is_member).unwrap_or(0);
            let iteration = crate::fine_tuned::Iteration {
                pool: self.pool,
                member,
                recipe: &settings,
                device: self.device,
                train,
                heldout,
                assignment,
                plan,
            };
            let head = crate::fine_tuned::train_and_score(&iteration, &heads[by])
                .map_err(|source| CommitteeError::FineTune { member, source })?;
            heads.push(head);
        }
        Ok(heads)
    }

    fn take_dynamics(&mut self) -> Vec<Option<EpochRecord>> {
        std::mem::take(&mut self.dynamics)
    }
}

impl TorchCommittee<'_> {
    /// The phase's joint committee (every member but a fine-tuned one) trained on the training
    /// items and scoring every candidate of the held-out ones.
    fn train_and_score_joint(
        &mut self,
        phase: &Phase,
        train: &[usize],
        heldout: &[usize],
        assignment: &Assignment,
        plan: &IterationPlan,
    ) -> Result<Vec<HeadScores>, CommitteeError> {
        let questions: Vec<Vec<i64>> = train
            .iter()
            .map(|&i| self.question(i, assignment))
            .collect();
        let (_vs, model, dynamics) = self.train_recording(&phase.members, &questions, plan)?;
        self.dynamics = dynamics;
        let rows: Vec<i64> = heldout
            .iter()
            .flat_map(|&i| (0..=self.pool.sizes[i] as u32).map(move |c| (i, c)))
            .map(|(i, c)| self.pool.row(i, c))
            .collect();
        let scores = nnc::score(&model, self.table, &rows, self.config.score_batch);
        for (head, flat) in &scores {
            if let Some(at) = flat.iter().position(|s| !s.is_finite()) {
                // Row `at` of the held-out items' candidates, in order: find its item.
                let (mut item, mut first) = (0, 0);
                for &i in heldout {
                    if at < first + self.pool.sizes[i] + 1 {
                        item = i;
                        break;
                    }
                    first += self.pool.sizes[i] + 1;
                }
                return Err(CommitteeError::NonFiniteScore {
                    head: head.clone(),
                    item: self.pool.items[item].id.clone(),
                    candidate: at - first,
                    score: flat[at],
                });
            }
        }
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
                HeadScores {
                    head,
                    is_member,
                    scores: per_item,
                }
            })
            .collect())
    }
}

/// The pool's random assignment of `k` distractors per item (the starting point of AF, and the
/// baseline the export compares it with).
pub fn random_assignment(pool: &Pool, k: usize, seed: u64) -> anyhow::Result<Assignment> {
    Assignment::random(&pool.sizes, k, seed).map_err(|e| match e {
        af_filter::AssignmentError::PoolTooSmall { item, pool: size, k } => anyhow::anyhow!(
            "item `{}` has {size} generated endings, fewer than [filter] k = {k}: lower k or generate more endings",
            pool.items[item].id
        ),
        other => other.into(),
    })
}

/// Where the filter stage leaves its table for the export stage.
pub fn saved_table_dir(config: &Config) -> std::path::PathBuf {
    config.run.dir.join("filter/table")
}

/// The pool and the table the filter stage saved (the export's way: building the table again
/// would tag the whole pool again); built afresh if it is missing or does not fit the pool. The
/// pool's frozen embeddings (and LM scores) are attached when a member the config names reads
/// them.
pub fn load_saved(
    config: &Config,
    registry: &Registry,
    progress: &dyn Progress,
) -> anyhow::Result<(Pool, CandidateTable, Device)> {
    let pool = Pool::load(&config.run.dir).context("cannot load the candidate pool")?;
    let device = crate::setup::device(config)?;
    let dir = saved_table_dir(config);
    let mut table = None;
    if dir.join("table.json").exists() {
        match CandidateTable::load(&dir, device) {
            Ok(t)
                if t.rows as usize == pool.rows
                    && (t.full_view.is_some() || !reads_full_view(config, registry)) =>
            {
                table = Some(t)
            }
            Ok(t) if t.rows as usize == pool.rows => tracing::warn!(
                "{} has no full-view rows, which a member reads: building the table again",
                dir.display()
            ),
            Ok(t) => tracing::warn!(
                "{} has {} rows, the pool {}: building the table again",
                dir.display(),
                t.rows,
                pool.rows
            ),
            Err(e) => tracing::warn!("{e}: building the table again"),
        }
    }
    let mut table = match table {
        Some(t) => t,
        None => build_table(config, registry, &pool, device)?.0,
    };
    attach_encoded(config, registry, &pool, &mut table, progress)?;
    crate::lm_likelihood::attach_for_config(config, registry, &pool, &mut table, progress)?;
    Ok((pool, table, device))
}

/// Loads the pool and builds its table for a config's run, with the pool's frozen embeddings
/// (and LM scores) when a member the config names reads them.
pub fn load(
    config: &Config,
    registry: &Registry,
    progress: &dyn Progress,
) -> anyhow::Result<(Pool, CandidateTable, TableSummary, Device)> {
    let pool = Pool::load(&config.run.dir).context("cannot load the candidate pool")?;
    let device = crate::setup::device(config)?;
    let (mut table, summary) = build_table(config, registry, &pool, device)?;
    attach_encoded(config, registry, &pool, &mut table, progress)?;
    crate::lm_likelihood::attach_for_config(config, registry, &pool, &mut table, progress)?;
    Ok((pool, table, summary, device))
}

/// Where a run keeps its pool's frozen embeddings (`encoded.json` says for which texts and model).
/// Beside the stages rather than in one: forcing the filter again need not encode again.
pub fn encoded_cache_dir(config: &Config) -> std::path::PathBuf {
    config.run.dir.join("encoded")
}

/// Every member a config names: its filter phases' and `[ablate]`'s (they share the pool's table).
pub(crate) fn named_members(config: &Config) -> Vec<MemberName> {
    let phases = config.filter.stages.iter().flat_map(|s| &s.members);
    let ablate = config
        .ablate
        .members
        .iter()
        .chain(config.ablate.compositions.iter().flat_map(|c| &c.members));
    phases.chain(ablate).cloned().collect()
}

fn attach_encoded(
    config: &Config,
    registry: &Registry,
    pool: &Pool,
    table: &mut CandidateTable,
    progress: &dyn Progress,
) -> anyhow::Result<()> {
    let Some(encoder) = registry.frozen_encoder(&named_members(config), &config.committee)? else {
        return Ok(());
    };
    let done =
        crate::encoded::attach_pool(table, pool, &encoder, &encoded_cache_dir(config), progress)?;
    tracing::info!(
        "{}: {} second sentences and {} contexts, {}-d, from {} ({} in {:.1} s)",
        done.member,
        done.rows,
        done.contexts,
        done.dim,
        done.model.display(),
        match (done.cached, done.resumed) {
            (true, _) => "read from the cache".to_string(),
            (false, 0) => "encoded".to_string(),
            (false, n) => format!("encoded, {n} of them kept by an interrupted run"),
        },
        done.seconds
    );
    Ok(())
}

fn build_table(
    config: &Config,
    registry: &Registry,
    pool: &Pool,
    device: Device,
) -> anyhow::Result<(CandidateTable, TableSummary)> {
    let tagger = crate::setup::load_tagger(config.tagger.model.as_deref())?;
    let full_view = reads_full_view(config, registry);
    candidate_table_with(pool, &config.committee, &tagger, device, full_view)
}

/// Whether a member the config names reads full-view rows (`[committee.member.NAME] view = "full"`).
fn reads_full_view(config: &Config, registry: &Registry) -> bool {
    named_members(config).iter().any(|m| {
        registry
            .get(m.as_str())
            .and_then(nnc::MemberKind::joint)
            .is_some_and(|member| nnc::reads_full_view_rows(member, &config.committee))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::candidate_table;

    #[test]
    fn recording_dynamics_leaves_the_trained_committee_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        af_io::pool_index::write_synthetic_pool(dir.path(), 30, 6, 8).unwrap();
        let pool = Pool::load(dir.path()).unwrap();
        let config = CommitteeConfig {
            epochs: 3,
            batch_items: 8,
            max_vocab: 20,
            embedding: 8,
            mlp_hidden: 8,
            joint_hidden: 8,
            validation_share: 0.2,
            ..Default::default()
        };
        let (table, _) =
            candidate_table(&pool, &config, &af_text::Tagger::builtin(), Device::Cpu).unwrap();
        let registry = Registry::builtin();
        let committee = TorchCommittee::new(&pool, &table, &config, &registry, Device::Cpu);
        let assignment = random_assignment(&pool, 3, 2).unwrap();
        let questions: Vec<Vec<i64>> = (0..30)
            .map(|i| committee.question(i, &assignment))
            .collect();
        let members = af_core::member_names(&["bow", "mlp"]);
        let rows: Vec<i64> = (0..table.rows).collect();
        let (_vs, plain) = committee.train(&members, &questions, 11).unwrap();
        let (_vs2, recorded, records) = committee
            .train_recording(
                &members,
                &questions,
                &IterationPlan {
                    seed: 11,
                    learning_rate: None,
                },
            )
            .unwrap();
        assert_eq!(
            nnc::score(&plain, &table, &rows, af_core::ScoreBatch::Candidates(64)),
            nnc::score(
                &recorded,
                &table,
                &rows,
                af_core::ScoreBatch::Candidates(64)
            )
        );
        // 30 questions, 20% for early stopping: 6 unrecorded, the rest one value per epoch run.
        assert_eq!(records.iter().filter(|r| r.is_none()).count(), 6);
        for r in records.iter().flatten() {
            assert!(
                !r.gold_probability.is_empty()
                    && r.gold_probability.len() == r.right.len()
                    && r.gold_probability.len() <= 3
            );
            assert!(r.gold_probability.iter().all(|p| (0.0..=1.0).contains(p)));
        }
    }
}
