//! The cross-matrix: every dataset (the random assignment, then each composition's) scored by
//! every detector on one group split (or cross-fitted folds), kept in `cross.json` while its
//! inputs are the same, and every two datasets compared detector by detector.

use af_core::ablate::{Composition, RANDOM};
use af_core::{Config, MemberName};
use af_filter::Assignment;
use af_io::pool_index::Pool;
use af_nn::committee::Registry;
use anyhow::Context;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::detectors::{audit_detectors, committee_detectors};
use super::{Ablation, CompositionRun};
use crate::committee::random_assignment;
use crate::stages::export::{export_splits, pool_questions, write_jsonl, Chosen};

/// One detector's score on one dataset, as `cross.json` keeps it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DetectorScore {
    pub detector: String,
    /// `committee`, `baseline`, `token-statistics` or `learned`.
    pub family: String,
    /// The member the detector is (learned and committee detectors).
    pub model: Option<String>,
    /// The view a learned detector reads.
    pub view: Option<String>,
    pub questions: usize,
    pub accuracy: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    pub chance: f64,
    pub edge: f64,
    pub p_value: f64,
    /// Each measured question's credit, for the paired change against the random assignment
    /// (kept in `cross.json`, not in the cells).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_question: Vec<af_audit::QuestionCredit>,
}

/// A cell of the cross-matrix: a detector on a composition's dataset (or the random assignment).
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub composition: String,
    #[serde(flatten)]
    pub score: DetectorScore,
    /// The composition's committee held this detector (the same member on the view it reads).
    pub in_composition: bool,
    /// The detector's edge here less its edge on the random assignment, question by question on
    /// the same items, with a 95% interval; none for the random assignment itself.
    pub edge_change: Option<af_audit::EdgeChange>,
}

/// A detector's edge on one composition's dataset less its edge on another's, question by
/// question on the same items: whether one committee left a detector less than another did.
#[derive(Clone, Debug, Serialize)]
pub struct PairedChange {
    pub before: String,
    pub after: String,
    pub detector: String,
    pub change: af_audit::EdgeChange,
}

/// What `cross.json` holds: the scores, and what they were measured on and with.
#[derive(Serialize, Deserialize)]
struct CrossFile {
    fingerprint: serde_json::Value,
    split: SplitSizes,
    detectors: Vec<DetectorScore>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct SplitSizes {
    /// Items each detector trained on (the mean over folds when cross-fitted).
    pub train: usize,
    /// Items measured (every item when cross-fitted).
    pub eval: usize,
    /// 1, or `[audit] eval-folds`.
    #[serde(default = "one_fold")]
    pub folds: usize,
}

fn one_fold() -> usize {
    1
}

/// Bumped when the cross-matrix computes other numbers from the same inputs (2: per-question
/// credits, for the paired change against random).
const CROSS_VERSION: u32 = 2;

/// A fold's training items and evaluation items (indices into the pool).
pub(super) type Fold = (Vec<usize>, Vec<usize>);

/// A dataset of the cross-matrix: its name, its assignment, its last scores (none for the random
/// assignment) and what it was made from.
type Dataset<'n> = (
    &'n str,
    Assignment,
    Option<Vec<Option<af_filter::ItemScores>>>,
    serde_json::Value,
);

/// Every dataset (the random assignment, then each composition's) scored by every detector.
pub(super) fn cross_matrix(
    ablation: &Ablation,
    compositions: &[Composition],
    runs: &[CompositionRun],
    stamps: &[serde_json::Value],
    upstream: &serde_json::Value,
) -> anyhow::Result<(Vec<Cell>, Vec<PairedChange>, SplitSizes)> {
    let Ablation {
        request,
        pool,
        dir,
        progress,
        ..
    } = *ablation;
    let config = ablation.config();
    let members = config.ablate.members(&config.filter);
    let datasets = datasets(config, pool, runs, stamps, upstream)?;
    let (folds, split) = folds(config, pool)?;
    let assignments: Vec<&Assignment> = datasets.iter().map(|d| &d.1).collect();
    let chosen = Chosen::read(pool, &assignments)?;
    // Each dataset as the export writes it, so that a composition's dataset can be audited or
    // re-filtered (`af refilter`) without running it again through `af run`.
    let splits = export_splits(config, pool);
    for (name, assignment, scores, _) in &datasets {
        let path = dir.join(name).join("dataset.jsonl");
        std::fs::create_dir_all(path.parent().expect("a file in a directory"))?;
        write_jsonl(&path, &chosen, assignment, scores.as_deref(), &splits)?;
    }
    let tagger = crate::setup::load_tagger(config.tagger.model.as_deref())?;
    let bar = progress.bar("cross-matrix", datasets.len() as u64);
    let mut scores = Vec::new();
    for (name, assignment, _, stamp) in &datasets {
        bar.set_message(name.to_string());
        let path = dir.join(name).join("cross.json");
        let fingerprint = json!({
            "version": CROSS_VERSION,
            "dataset": stamp,
            "members": members,
            "committee": config.committee.fingerprint(),
            "table-members": config.named_members(),
            "audit": config.audit.fingerprint(),
            "seed": config.run.seed,
        });
        let kept = (!request.force)
            .then(|| std::fs::read_to_string(&path).ok())
            .flatten()
            .and_then(|t| serde_json::from_str::<CrossFile>(&t).ok())
            .filter(|f| f.fingerprint == fingerprint);
        let detectors = match kept {
            Some(file) => file.detectors,
            None => {
                let mut detectors = committee_detectors(ablation, &members, assignment, &folds)?;
                let questions = pool_questions(&chosen, assignment, &vec![""; pool.items.len()]);
                detectors.extend(audit_detectors(
                    ablation, name, &questions, &folds, &tagger,
                )?);
                std::fs::create_dir_all(path.parent().expect("a file in a directory"))?;
                let file = CrossFile {
                    fingerprint,
                    split,
                    detectors,
                };
                af_core::atomic::write(&path, serde_json::to_string_pretty(&file)?.as_bytes())?;
                file.detectors
            }
        };
        scores.push((name.to_string(), detectors));
        bar.inc(1);
    }
    bar.finish();
    let members = &members;
    let pairs = paired_changes(&scores);
    let (from_random, pairs): (Vec<PairedChange>, Vec<PairedChange>) =
        pairs.into_iter().partition(|p| p.before == RANDOM);
    let from_random = &from_random;
    let cells = scores
        .into_iter()
        .flat_map(|(name, detectors)| {
            let composition = compositions.iter().find(|c| c.name == name);
            detectors.into_iter().map(move |mut score| {
                score.per_question = Vec::new();
                let edge_change = from_random
                    .iter()
                    .find(|p| p.after == name && p.detector == score.detector)
                    .map(|p| p.change);
                Cell {
                    in_composition: composition.is_some_and(|c| {
                        held_by(c, &score, members, ablation.registry(), &config.committee)
                    }),
                    composition: name.clone(),
                    score,
                    edge_change,
                }
            })
        })
        .collect();
    Ok((cells, pairs, split))
}

/// Whether a composition's committee held this detector: the member itself (alone, or every
/// ablated member for the joint committee), or an audit detector of the same architecture on
/// the view that member reads.
fn held_by(
    c: &Composition,
    score: &DetectorScore,
    members: &[MemberName],
    registry: &Registry,
    committee: &af_core::CommitteeConfig,
) -> bool {
    match (score.family.as_str(), score.model.as_deref()) {
        ("committee", Some(af_core::JOINT_HEAD)) => members.iter().all(|m| c.members.contains(m)),
        ("committee", Some(model)) => c.members.iter().any(|m| m == model),
        ("learned", Some(model)) => c.members.iter().any(|m| {
            m == model
                && registry.lookup(m).is_ok_and(|member| {
                    Some(member.view(committee).name()) == score.view.as_deref()
                })
        }),
        _ => false,
    }
}

/// The datasets the detectors score: the random assignment, then each composition's final one.
fn datasets<'n>(
    config: &Config,
    pool: &Pool,
    runs: &'n [CompositionRun],
    stamps: &[serde_json::Value],
    upstream: &serde_json::Value,
) -> anyhow::Result<Vec<Dataset<'n>>> {
    let random = random_assignment(pool, config.filter.k, config.run.seed)?;
    let mut datasets: Vec<Dataset> = vec![(
        RANDOM,
        random,
        None,
        json!({"random-assignment": {"k": config.filter.k, "seed": config.run.seed}, "upstream": upstream}),
    )];
    for (run, stamp) in runs.iter().zip(stamps) {
        let path = run.dir.join("state.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let state: af_filter::FilterState = serde_json::from_str(&text)
            .with_context(|| format!("{} is corrupted: pass --force", path.display()))?;
        datasets.push((
            &run.name,
            state.assignment,
            Some(state.last_scores),
            stamp.clone(),
        ));
    }
    Ok(datasets)
}

/// One group split for every dataset and detector, or group folds (`[audit] eval-folds`): each
/// fold's (training, evaluation) items, and their sizes.
fn folds(config: &Config, pool: &Pool) -> anyhow::Result<(Vec<Fold>, SplitSizes)> {
    let groups = pool.groups();
    let folds: Vec<Fold> = if config.audit.eval_folds > 1 {
        let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
        af_audit::cross_fit_folds(&refs, config.audit.eval_folds, config.run.seed)
    } else {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(config.run.seed ^ 0x6162_6c61);
        vec![af_filter::split_by_group(
            &groups,
            1.0 - config.audit.eval_share,
            &mut rng,
        )]
    };
    anyhow::ensure!(
        folds.iter().all(|(t, e)| !t.is_empty() && !e.is_empty()),
        "[audit] eval-folds = {} (or eval-share) leaves a fold with no training or no evaluation item: the pool has {} groups",
        config.audit.eval_folds,
        groups.iter().collect::<std::collections::HashSet<_>>().len()
    );
    let split = SplitSizes {
        train: (folds.iter().map(|(t, _)| t.len()).sum::<usize>() as f64 / folds.len() as f64)
            .round() as usize,
        eval: folds.iter().map(|(_, e)| e.len()).sum(),
        folds: folds.len(),
    };
    Ok((folds, split))
}

/// Every two datasets, the later against the earlier, detector by detector: against the random
/// assignment (listed first) a cell's own change, between compositions a pair.
fn paired_changes(scores: &[(String, Vec<DetectorScore>)]) -> Vec<PairedChange> {
    let mut pairs = Vec::new();
    for (i, (before, on_before)) in scores.iter().enumerate() {
        for (after, on_after) in &scores[i + 1..] {
            for a in on_after {
                if let Some(change) = on_before
                    .iter()
                    .find(|b| b.detector == a.detector)
                    .and_then(|b| af_audit::paired_edge_change(&b.per_question, &a.per_question))
                {
                    pairs.push(PairedChange {
                        before: before.clone(),
                        after: after.clone(),
                        detector: a.detector.clone(),
                        change,
                    });
                }
            }
        }
    }
    pairs
}
