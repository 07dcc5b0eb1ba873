//! `af ablate`: one pool filtered by several committee compositions (`[ablate]`), and the
//! cross-matrix that asks of each filtered dataset whether what its committee removed is also gone
//! for detectors it never trained against.
//!
//! Every composition starts from the same pool, candidate table (built once here) and random
//! assignment, so differences come from the committee alone. Files under `<run>/ablate/`
//! (docs/formats.md):
//! - `NAME/`: the composition's AF run as the filter stage writes it (`state.json`, `metrics.csv`,
//!   `history.csv`, `report.json`), with `started.json`, `config.toml` and `stage.json`. It
//!   resumes after a kill and is skipped when up to date; one started by another config is
//!   refused unless forced.
//! - `NAME/dataset.jsonl`, `random/dataset.jsonl`: each dataset in the export's layout, for
//!   `af audit` and `af refilter`.
//! - `NAME/cross.json`, `random/cross.json`: every detector on that dataset, kept while the
//!   dataset and the detectors are the same, so adding a composition evaluates only the new one.
//! - `cross-matrix.csv` (long format, each cell paired with the random assignment's),
//!   `composition-pairs.csv` (every two compositions, paired), `summary.csv`, `cross-matrix.svg` and `.png`,
//!   `ablate.html` and `ablate.json` (every number above, the split and the compositions).
//!
//! The detectors, all on one group split shared by every dataset (or on every item, cross-fitted
//! over `[audit] eval-folds` group folds): each member trained fresh
//! alone (`committee:MEMBER`), the joint committee of every ablated member (`committee:joint`),
//! and every audit detector (`[audit]`: baselines, token statistics, learned partial-input views).

use std::path::{Path, PathBuf};
use std::time::Instant;

use af_core::ablate::{Composition, RANDOM};
use af_core::{CommitteeConfig, Config, MemberName};
use af_filter::Assignment;
use af_io::pool_index::Pool;
use af_nn::committee::{self as nnc, MemberKind, Registry};
use af_nn::table::CandidateTable;
use anyhow::Context;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::committee::{random_assignment, TorchCommittee};
use crate::progress::Progress;
use crate::runner::{self, StageContext, StageRecord};
use crate::stages::export::{export_splits, pool_questions, write_jsonl, Chosen};
use crate::stages::filter::{filter_pool, FilterReport};

/// What `af ablate` is asked to do.
pub struct AblateRequest<'a> {
    pub config: &'a Config,
    pub registry: &'a Registry,
    /// Discard every composition's run and evaluation and start over.
    pub force: bool,
}

/// Whether a composition's AF run was done now or found done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    UpToDate,
    Ran,
}

/// One composition's AF run.
#[derive(Serialize)]
pub struct CompositionRun {
    pub name: String,
    pub members: Vec<MemberName>,
    pub stages: Vec<af_core::Phase>,
    pub outcome: Outcome,
    pub report: FilterReport,
    pub dir: PathBuf,
}

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

/// A composition at a glance: how far its own driving head got, and the mean edge left to the
/// detectors inside it and outside it ("transfer": what it removed for detectors it never saw).
#[derive(Clone, Debug, Serialize)]
pub struct SummaryRow {
    pub composition: String,
    pub members: String,
    pub driving_head_first: Option<f64>,
    pub driving_head_last: Option<f64>,
    pub chance: f64,
    pub detectors_inside: usize,
    pub mean_edge_inside: Option<f64>,
    pub detectors_outside: usize,
    pub mean_edge_outside: Option<f64>,
    /// Detectors (inside or outside) whose paired change from the random assignment has a 95%
    /// interval wholly below 0 / wholly above 0; none for the random assignment.
    pub detectors_down: Option<usize>,
    pub detectors_up: Option<usize>,
}

/// A finished ablation.
pub struct AblateRun {
    pub dir: PathBuf,
    pub compositions: Vec<CompositionRun>,
    pub cells: Vec<Cell>,
    /// Every two compositions compared question by question (`composition-pairs.csv`).
    pub pairs: Vec<PairedChange>,
    pub summary: Vec<SummaryRow>,
    pub seconds: f64,
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

/// Runs every composition that is not up to date, then the cross-matrix; `done` hears of each
/// composition as it is settled.
pub fn run(
    request: &AblateRequest,
    progress: &dyn Progress,
    done: impl FnMut(&CompositionRun),
) -> anyhow::Result<AblateRun> {
    let config = request.config;
    let generate = crate::stages::generate::NAME;
    if !runner::up_to_date(config, generate)? {
        anyhow::bail!(
            "af ablate filters the pool of this config's run, and {} has none that is up to date: run `af run CONFIG --until generate` first",
            config.run.dir.join(generate.dir_name()).display()
        );
    }
    let upstream = runner::fingerprint(config, generate)?;
    let load = || -> anyhow::Result<(Pool, CandidateTable, tch::Device)> {
        let (pool, table, _summary, device) =
            crate::committee::load(config, request.registry, progress)?;
        Ok((pool, table, device))
    };
    run_on(request, &upstream, load, progress, done)
}

/// [`run`] on the pool `load` gives, which `upstream` identifies (the generate stage's
/// fingerprint, for `af ablate`): compositions are checked, and other configs' runs refused,
/// before it is called.
pub fn run_on(
    request: &AblateRequest,
    upstream: &serde_json::Value,
    load: impl FnOnce() -> anyhow::Result<(Pool, CandidateTable, tch::Device)>,
    progress: &dyn Progress,
    mut done: impl FnMut(&CompositionRun),
) -> anyhow::Result<AblateRun> {
    let start = Instant::now();
    let config = request.config;
    let compositions = plan(config, request.registry)?;
    let dir = config.run.dir.join("ablate");
    // Refuse another config's runs before any work, as `af filter --resume` does.
    let mut stamps = Vec::new();
    for c in &compositions {
        let cdir = dir.join(&c.name);
        let stamp = composition_stamp(config, c, upstream)?;
        if !request.force
            && cdir.join("started.json").exists()
            && !runner::started_with(&cdir, &stamp)
        {
            anyhow::bail!(
                "{} holds the run of composition `{}` started with another config (committee, schedule, seed or pool differ); resuming it would mix the two: pass --force to start the compositions over",
                cdir.display(),
                c.name
            );
        }
        stamps.push(stamp);
    }
    crate::setup::init_threads(config);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    af_core::atomic::write(dir.join("config.toml"), config.to_toml().as_bytes())?;
    let (pool, table, device) = load()?;

    let bar = progress.bar("compositions", compositions.len() as u64);
    let mut runs = Vec::new();
    for (c, stamp) in compositions.iter().zip(&stamps) {
        bar.set_message(c.name.clone());
        let run = run_composition(
            config,
            c,
            stamp,
            &dir.join(&c.name),
            request,
            &pool,
            &table,
            device,
            progress,
        )?;
        done(&run);
        runs.push(run);
        bar.inc(1);
    }
    bar.finish();

    let (cells, pairs, split) = cross_matrix(
        config,
        request,
        &compositions,
        &runs,
        &stamps,
        upstream,
        &pool,
        &table,
        device,
        &dir,
        progress,
    )?;
    let summary = summarise(
        &compositions,
        &runs,
        &cells,
        af_filter::chance(config.filter.k),
    );
    let seconds = start.elapsed().as_secs_f64();
    write_outputs(
        &dir, config, &runs, &cells, &pairs, &summary, split, seconds,
    )?;
    Ok(AblateRun {
        dir,
        compositions: runs,
        cells,
        pairs,
        summary,
        seconds,
    })
}

/// The compositions of `[ablate]`, each member checked against the registry.
pub fn plan(config: &Config, registry: &Registry) -> anyhow::Result<Vec<Composition>> {
    let compositions = config
        .ablate
        .compositions(&config.filter)
        .map_err(anyhow::Error::msg)?;
    for c in &compositions {
        for m in c
            .members
            .iter()
            .chain(c.stages.iter().flat_map(|p| &p.members))
        {
            registry
                .lookup(m)
                .with_context(|| format!("[ablate] composition `{}`", c.name))?;
        }
        if let Some(p) = c.stages.iter().find(|p| {
            p.members.iter().all(|m| {
                registry
                    .get(m.as_str())
                    .is_some_and(MemberKind::is_fine_tuned)
            })
        }) {
            anyhow::bail!(
                "[ablate] composition `{}`, stage `{}`: only fine-tuned members ({}) are left, and they re-score what other members shortlist; give the composition its own `stages` or leave it out",
                c.name,
                p.name,
                p.members.iter().map(MemberName::as_str).collect::<Vec<_>>().join(", ")
            );
        }
    }
    Ok(compositions)
}

/// The config a composition's AF run is: the run's, with the composition's schedule.
fn composition_config(config: &Config, c: &Composition) -> Config {
    let mut own = config.clone();
    own.filter.stages.clone_from(&c.stages);
    own
}

/// What a composition's run depends on: what the filter stage's does, with its schedule, and the
/// candidate table it reads, built once for the whole config (every member the config names).
fn composition_stamp(
    config: &Config,
    c: &Composition,
    upstream: &serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    use crate::runner::Stage;
    let mut stamp = crate::stages::filter::Filter.inputs(&composition_config(config, c))?;
    stamp["table-members"] = json!(config.named_members());
    stamp["upstream"] = upstream.clone();
    Ok(stamp)
}

#[allow(clippy::too_many_arguments)]
fn run_composition(
    config: &Config,
    c: &Composition,
    stamp: &serde_json::Value,
    cdir: &Path,
    request: &AblateRequest,
    pool: &Pool,
    table: &CandidateTable,
    device: tch::Device,
    progress: &dyn Progress,
) -> anyhow::Result<CompositionRun> {
    let own = composition_config(config, c);
    let report_path = cdir.join("report.json");
    let finished = |outcome, report| CompositionRun {
        name: c.name.clone(),
        members: c.members.clone(),
        stages: c.stages.clone(),
        outcome,
        report,
        dir: cdir.to_path_buf(),
    };
    if !request.force && runner::is_up_to_date(&cdir.join("stage.json"), stamp) {
        let text = std::fs::read_to_string(&report_path)
            .with_context(|| format!("cannot read {}", report_path.display()))?;
        let report: FilterReport = serde_json::from_str(&text)
            .with_context(|| format!("{} is corrupted: pass --force", report_path.display()))?;
        return Ok(finished(Outcome::UpToDate, report));
    }
    runner::prepare_dir(cdir, None, stamp, request.force, false)?;
    crate::resources::reset_host_peak();
    let host_at_start = crate::resources::host_bytes();
    let start = Instant::now();
    let ctx = StageContext {
        config: &own,
        dir: cdir.to_path_buf(),
        shard: None,
        progress,
    };
    let report = filter_pool(&ctx, pool, table, device, request.registry)
        .with_context(|| format!("composition `{}`", c.name))?;
    af_core::atomic::write(cdir.join("config.toml"), own.to_toml().as_bytes())?;
    let record = StageRecord {
        stage: crate::stages::filter::NAME,
        fingerprint: stamp.clone(),
        seconds: start.elapsed().as_secs_f64(),
        af_version: env!("CARGO_PKG_VERSION").to_string(),
        resources: crate::resources::measure(host_at_start, Some(device)),
    };
    af_core::atomic::write(
        cdir.join("stage.json"),
        serde_json::to_string_pretty(&record)?.as_bytes(),
    )?;
    Ok(finished(Outcome::Ran, report))
}

/// Every dataset (the random assignment, then each composition's) scored by every detector.
#[allow(clippy::too_many_arguments)]
fn cross_matrix(
    config: &Config,
    request: &AblateRequest,
    compositions: &[Composition],
    runs: &[CompositionRun],
    stamps: &[serde_json::Value],
    upstream: &serde_json::Value,
    pool: &Pool,
    table: &CandidateTable,
    device: tch::Device,
    dir: &Path,
    progress: &dyn Progress,
) -> anyhow::Result<(Vec<Cell>, Vec<PairedChange>, SplitSizes)> {
    let members = config.ablate.members(&config.filter);
    let random = random_assignment(pool, config.filter.k, config.run.seed)?;
    // (name, assignment, its last scores (none for the random one), what it was made from)
    type Dataset<'n> = (
        &'n str,
        Assignment,
        Option<Vec<Option<af_filter::ItemScores>>>,
        serde_json::Value,
    );
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
    // One group split for every dataset and detector, or group folds (`[audit] eval-folds`).
    let groups = pool.groups();
    let folds: Vec<(Vec<usize>, Vec<usize>)> = if config.audit.eval_folds > 1 {
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
                let mut detectors = committee_detectors(
                    config,
                    request.registry,
                    &members,
                    pool,
                    table,
                    device,
                    assignment,
                    &folds,
                )?;
                let questions = pool_questions(&chosen, assignment, &vec![""; pool.items.len()]);
                detectors.extend(audit_detectors(
                    config,
                    request.registry,
                    name,
                    &questions,
                    &folds,
                    &tagger,
                    device,
                    dir,
                    progress,
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
    // Every two datasets, the later against the earlier, detector by detector: against the
    // random assignment (listed first) a cell's own change, between compositions a pair.
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
                        held_by(
                            c,
                            &score,
                            members,
                            request.registry,
                            &request.config.committee,
                        )
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

/// Each ablated member trained fresh alone, then the joint committee of all of them, on each
/// fold's training items' questions; scored on its evaluation items'.
#[allow(clippy::too_many_arguments)]
fn committee_detectors(
    config: &Config,
    registry: &Registry,
    members: &[MemberName],
    pool: &Pool,
    table: &CandidateTable,
    device: tch::Device,
    assignment: &Assignment,
    folds: &[(Vec<usize>, Vec<usize>)],
) -> anyhow::Result<Vec<DetectorScore>> {
    let alone = CommitteeConfig {
        joint: false,
        ..config.committee.clone()
    };
    let joint = CommitteeConfig {
        joint: true,
        ..config.committee.clone()
    };
    // A fine-tuned member (`encoder-ft`) has no detector of its own here: it is not a member of
    // a joint committee, and training it per composition would cost more than the ablation.
    let members: Vec<MemberName> = members
        .iter()
        .filter(|m| {
            !registry
                .get(m.as_str())
                .is_some_and(MemberKind::is_fine_tuned)
        })
        .cloned()
        .collect();
    let mut runs: Vec<(MemberName, Vec<MemberName>, &CommitteeConfig)> = members
        .iter()
        .map(|m| (m.clone(), vec![m.clone()], &alone))
        .collect();
    runs.push((
        MemberName::new(af_core::JOINT_HEAD),
        members.to_vec(),
        &joint,
    ));
    let width = assignment.k + 1;
    let chance = af_filter::chance(assignment.k);
    let mut out = Vec::new();
    for (head, on, committee_config) in runs {
        let name = format!("committee:{head}");
        let committee = TorchCommittee::new(pool, table, committee_config, registry, device);
        let mut per_question = Vec::new();
        for (fold, (train, eval)) in folds.iter().enumerate() {
            let questions: Vec<Vec<i64>> = train
                .iter()
                .map(|&i| committee.question(i, assignment))
                .collect();
            // Fold 0 keeps the seed one split gives (the measured runs reproduce).
            let seed = (config.run.seed ^ af_core::hash::fnv1a64(name.as_bytes()))
                .wrapping_add(fold as u64);
            let (_vs, model) = committee
                .train(&on, &questions, seed)
                .with_context(|| format!("detector {name}"))?;
            let rows: Vec<i64> = eval
                .iter()
                .flat_map(|&i| committee.question(i, assignment))
                .collect();
            let flat = nnc::score(&model, table, &rows, committee_config.score_batch)
                .into_iter()
                .find(|(h, _)| h.as_str() == head.as_str())
                .with_context(|| format!("detector {name}: the committee has no head `{head}`"))?
                .1;
            per_question.extend(eval.iter().zip(flat.chunks(width)).map(|(&i, s)| {
                af_audit::QuestionCredit {
                    id: pool.items[i].id.clone(),
                    credit: af_audit::credit(s, 0),
                    chance,
                }
            }));
        }
        let right: f64 = per_question.iter().map(|q| q.credit).sum();
        let measured = per_question.len();
        let (ci_low, ci_high) = af_audit::stats::wilson(right, measured);
        let accuracy = right / measured.max(1) as f64;
        out.push(DetectorScore {
            detector: name,
            family: "committee".into(),
            model: Some(head.to_string()),
            view: None,
            questions: measured,
            accuracy,
            ci_low,
            ci_high,
            chance,
            edge: accuracy - chance,
            p_value: af_audit::stats::above_chance_p(right, &vec![chance; measured]),
            per_question,
        });
    }
    Ok(out)
}

/// The audit's detectors (none excluded) trained on the training items' questions and measured
/// on the evaluation items'; cross-fitted by the audit itself over the same folds when there are
/// several.
#[allow(clippy::too_many_arguments)]
fn audit_detectors(
    config: &Config,
    registry: &Registry,
    name: &str,
    questions: &[af_core::Question],
    folds: &[(Vec<usize>, Vec<usize>)],
    tagger: &af_text::Tagger,
    device: tch::Device,
    dir: &Path,
    progress: &dyn Progress,
) -> anyhow::Result<Vec<DetectorScore>> {
    let file = |idx: &[usize], part: &str| af_io::questions::QuestionFile {
        path: dir.join(name).join(format!("{part} questions")),
        format: af_io::questions::QuestionFormat::Af,
        questions: idx
            .iter()
            .map(|&i| af_core::Question {
                split: None,
                ..questions[i].clone()
            })
            .collect(),
        skipped: Vec::new(),
    };
    let (report, _) = match folds {
        [(train, eval)] => crate::audit::audit_questions(
            &file(train, "training"),
            Some(&file(eval, "evaluation")),
            config,
            registry,
            &[],
            config.run.seed,
            tagger,
            device,
            progress,
        )?,
        _ => {
            let every: Vec<usize> = (0..questions.len()).collect();
            let (report, cut) = crate::audit::audit_questions(
                &file(&every, "all"),
                None,
                config,
                registry,
                &[],
                config.run.seed,
                tagger,
                device,
                progress,
            )?;
            anyhow::ensure!(
                report.split.folds == folds.len(),
                "the audit made {} folds where {} were asked",
                report.split.folds,
                folds.len()
            );
            (report, cut)
        }
    };
    Ok(report
        .detectors
        .into_iter()
        .map(|d| DetectorScore {
            detector: d.name,
            family: d.family,
            model: d.model,
            view: d.view,
            questions: d.eval_questions,
            accuracy: d.accuracy,
            ci_low: d.ci_low,
            ci_high: d.ci_high,
            chance: d.chance,
            edge: d.edge,
            p_value: d.p_value,
            per_question: d.per_question,
        })
        .collect())
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn summarise(
    compositions: &[Composition],
    runs: &[CompositionRun],
    cells: &[Cell],
    chance: f64,
) -> Vec<SummaryRow> {
    let row = |name: &str, members: String, run: Option<&CompositionRun>| {
        let mine: Vec<&Cell> = cells.iter().filter(|c| c.composition == name).collect();
        // The random baseline is a check of the scoring, not a detector anything could fool.
        let (inside, outside): (Vec<&Cell>, Vec<&Cell>) = mine
            .into_iter()
            .filter(|c| c.score.detector != "random")
            .partition(|c| c.in_composition);
        let edges = |v: &[&Cell]| v.iter().map(|c| c.score.edge).collect::<Vec<_>>();
        let changes: Vec<af_audit::EdgeChange> = inside
            .iter()
            .chain(&outside)
            .filter_map(|c| c.edge_change)
            .collect();
        let count = |f: fn(&af_audit::EdgeChange) -> bool| {
            run.map(|_| changes.iter().filter(|e| f(e)).count())
        };
        SummaryRow {
            composition: name.to_string(),
            members,
            driving_head_first: run.map(|r| r.report.driving_head_first),
            driving_head_last: run.map(|r| r.report.driving_head_last),
            chance,
            detectors_inside: inside.len(),
            mean_edge_inside: mean(&edges(&inside)),
            detectors_outside: outside.len(),
            mean_edge_outside: mean(&edges(&outside)),
            detectors_down: count(|e| e.ci_high < 0.0),
            detectors_up: count(|e| e.ci_low > 0.0),
        }
    };
    std::iter::once(row(RANDOM, String::new(), None))
        .chain(compositions.iter().zip(runs).map(|(c, r)| {
            row(
                &c.name,
                c.members
                    .iter()
                    .map(MemberName::as_str)
                    .collect::<Vec<_>>()
                    .join("+"),
                Some(r),
            )
        }))
        .collect()
}

fn opt(x: Option<f64>) -> String {
    x.map_or(String::new(), |x| format!("{x:.4}"))
}

#[allow(clippy::too_many_arguments)]
fn write_outputs(
    dir: &Path,
    config: &Config,
    runs: &[CompositionRun],
    cells: &[Cell],
    pairs: &[PairedChange],
    summary: &[SummaryRow],
    split: SplitSizes,
    seconds: f64,
) -> anyhow::Result<()> {
    let csv_bytes =
        |w: csv::Writer<Vec<u8>>| w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"));
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "composition",
        "detector",
        "family",
        "questions",
        "accuracy",
        "ci_low",
        "ci_high",
        "chance",
        "edge",
        "p_value",
        "in_composition",
        "edge_change",
        "edge_change_ci_low",
        "edge_change_ci_high",
    ])?;
    for c in cells {
        let s = &c.score;
        let [change, change_low, change_high] = crate::refilter::edge_change_fields(c.edge_change);
        w.write_record([
            c.composition.clone(),
            s.detector.clone(),
            s.family.clone(),
            s.questions.to_string(),
            format!("{:.4}", s.accuracy),
            format!("{:.4}", s.ci_low),
            format!("{:.4}", s.ci_high),
            format!("{:.4}", s.chance),
            format!("{:.4}", s.edge),
            format!("{:.3e}", s.p_value),
            c.in_composition.to_string(),
            change,
            change_low,
            change_high,
        ])?;
    }
    af_core::atomic::write(dir.join("cross-matrix.csv"), &csv_bytes(w)?)?;
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "composition",
        "members",
        "driving_head_first",
        "driving_head_last",
        "chance",
        "detectors_inside",
        "mean_edge_inside",
        "detectors_outside",
        "mean_edge_outside",
        "detectors_down",
        "detectors_up",
    ])?;
    for r in summary {
        w.write_record([
            r.composition.clone(),
            r.members.clone(),
            opt(r.driving_head_first),
            opt(r.driving_head_last),
            format!("{:.4}", r.chance),
            r.detectors_inside.to_string(),
            opt(r.mean_edge_inside),
            r.detectors_outside.to_string(),
            opt(r.mean_edge_outside),
            r.detectors_down.map_or(String::new(), |n| n.to_string()),
            r.detectors_up.map_or(String::new(), |n| n.to_string()),
        ])?;
    }
    af_core::atomic::write(dir.join("summary.csv"), &csv_bytes(w)?)?;
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "before",
        "after",
        "detector",
        "questions",
        "edge_change",
        "edge_change_ci_low",
        "edge_change_ci_high",
    ])?;
    for p in pairs {
        let [change, low, high] = crate::refilter::edge_change_fields(Some(p.change));
        w.write_record([
            p.before.clone(),
            p.after.clone(),
            p.detector.clone(),
            p.change.questions.to_string(),
            change,
            low,
            high,
        ])?;
    }
    af_core::atomic::write(dir.join("composition-pairs.csv"), &csv_bytes(w)?)?;
    let record = json!({
        "run": config.run.dir,
        "k": config.filter.k,
        "chance": af_filter::chance(config.filter.k),
        "split": split,
        "members": config.ablate.members(&config.filter),
        "compositions": runs,
        "summary": summary,
        "cells": cells,
        "pairs": pairs,
        "seconds": seconds,
    });
    af_core::atomic::write(
        dir.join("ablate.json"),
        serde_json::to_string_pretty(&record)?.as_bytes(),
    )?;
    let map = heatmap(summary, cells);
    let svg = af_report::heatmap_svg(&map)?;
    af_core::atomic::write(dir.join("cross-matrix.svg"), svg.as_bytes())?;
    af_report::heatmap_png(&map, &dir.join("cross-matrix.png"))?;
    af_core::atomic::write(
        dir.join("ablate.html"),
        html(summary, cells, pairs, runs, &svg, split).as_bytes(),
    )?;
    Ok(())
}

/// Detectors down, datasets across (detector names are long, dataset names short).
fn heatmap(summary: &[SummaryRow], cells: &[Cell]) -> af_report::Heatmap<'static> {
    let columns: Vec<String> = summary.iter().map(|r| r.composition.clone()).collect();
    let mut rows: Vec<String> = Vec::new();
    for c in cells {
        if !rows.contains(&c.score.detector) {
            rows.push(c.score.detector.clone());
        }
    }
    let find = |d: &str, comp: &str| {
        cells
            .iter()
            .find(|c| c.score.detector == d && c.composition == comp)
    };
    let values = rows
        .iter()
        .map(|d| {
            columns
                .iter()
                .map(|comp| find(d, comp).map(|c| c.score.edge))
                .collect()
        })
        .collect();
    let marked = rows
        .iter()
        .map(|d| {
            columns
                .iter()
                .map(|comp| find(d, comp).is_some_and(|c| c.in_composition))
                .collect()
        })
        .collect();
    af_report::Heatmap {
        title: "Cross-matrix: each detector's edge over chance on each dataset",
        legend: "red: the detector beats chance, blue: below it; outlined: the composition's committee held this detector",
        rows,
        columns,
        values,
        marked,
    }
}

fn html(
    summary: &[SummaryRow],
    cells: &[Cell],
    pairs: &[PairedChange],
    runs: &[CompositionRun],
    svg: &str,
    split: SplitSizes,
) -> String {
    let pair_rows: Vec<Vec<String>> = pairs
        .iter()
        .map(|p| {
            let c = p.change;
            let verdict = if c.ci_high < 0.0 {
                format!("{} leaves less", p.after)
            } else if c.ci_low > 0.0 {
                format!("{} leaves less", p.before)
            } else {
                "no difference measured".into()
            };
            vec![
                p.before.clone(),
                p.after.clone(),
                p.detector.clone(),
                c.to_string(),
                verdict,
            ]
        })
        .collect();
    let summary_rows: Vec<Vec<String>> = summary
        .iter()
        .map(|r| {
            vec![
                r.composition.clone(),
                r.members.clone(),
                r.driving_head_first
                    .zip(r.driving_head_last)
                    .map_or("-".into(), |(a, b)| format!("{a:.3} → {b:.3}")),
                r.mean_edge_inside
                    .map_or("-".into(), |x| format!("{x:+.3} ({})", r.detectors_inside)),
                r.mean_edge_outside
                    .map_or("-".into(), |x| format!("{x:+.3} ({})", r.detectors_outside)),
                r.detectors_down
                    .zip(r.detectors_up)
                    .map_or("-".into(), |(down, up)| format!("{down} / {up}")),
            ]
        })
        .collect();
    let cell_rows: Vec<Vec<String>> = cells
        .iter()
        .map(|c| {
            let s = &c.score;
            vec![
                c.composition.clone(),
                s.detector.clone(),
                format!("{:.3}", s.accuracy),
                format!("{:.3}-{:.3}", s.ci_low, s.ci_high),
                format!("{:.3}", s.chance),
                format!("{:+.3}", s.edge),
                c.edge_change.map_or("-".into(), |e| e.to_string()),
                if c.in_composition { "yes" } else { "" }.into(),
            ]
        })
        .collect();
    let schedules: String = runs
        .iter()
        .map(|r| {
            let phases: Vec<String> = r
                .stages
                .iter()
                .map(|p| {
                    format!(
                        "{} ({}, up to {} iterations)",
                        p.name,
                        p.members
                            .iter()
                            .map(MemberName::as_str)
                            .collect::<Vec<_>>()
                            .join("+"),
                        p.iterations
                    )
                })
                .collect();
            format!(
                "<li><b>{}</b>: {}; ran {} iterations, {} swaps, {:.0} s</li>",
                af_report::escape(&r.name),
                af_report::escape(&phases.join(", then ")),
                r.report.iterations,
                r.report.swaps,
                r.report.seconds
            )
        })
        .collect();
    af_report::Page {
        title: "Ablation over committee compositions".into(),
        subtitle: format!(
            "{} compositions and the random assignment, every detector on {} ({} training, {} evaluation items); every number is in ablate.json and cross-matrix.csv",
            runs.len(),
            if split.folds > 1 { format!("{} group folds, cross-fitted", split.folds) } else { "one group split".into() },
            split.train,
            split.eval
        ),
        sections: vec![
            af_report::Section {
                title: "Summary".into(),
                html: format!(
                    "<p>Own driving head: first and last held-out accuracy of the AF run. Inside / outside: the mean edge over chance of the detectors the composition's committee held / did not hold (their number in brackets); the outside edge is what the composition's filtering leaves to detectors it never trained against. Down / up: the detectors whose edge is lower / higher than on the random assignment, question by question on the same items, with a 95% interval that excludes 0.</p>{}",
                    af_report::table(&["composition", "members", "own driving head", "mean edge inside", "mean edge outside", "detectors down / up"], &summary_rows)
                ),
            },
            af_report::Section { title: "Cross-matrix".into(), html: svg.to_string() },
            af_report::Section { title: "Schedules".into(), html: format!("<ul>{schedules}</ul>") },
            af_report::Section {
                title: "Composition against composition".into(),
                html: if pair_rows.is_empty() {
                    "<p>One composition: nothing to compare.</p>".into()
                } else {
                    format!(
                        "<p>Each detector's edge on the second composition's dataset less its edge on the first's, question by question on the same items, with a 95% interval (composition-pairs.csv).</p>{}",
                        af_report::table(&["first", "second", "detector", "edge change (95% interval)", "reading"], &pair_rows)
                    )
                },
            },
            af_report::Section {
                title: "Every cell".into(),
                html: af_report::table(&["dataset", "detector", "accuracy", "95% interval", "chance", "edge", "edge change from random, paired (95% interval)", "in composition"], &cell_rows),
            },
        ],
        questions: Vec::new(),
    }
    .render()
}

impl std::fmt::Display for AblateRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ablate: {} compositions; mean edge over chance of the detectors inside / outside each committee", self.compositions.len())?;
        let show = |x: Option<f64>| x.map_or("    -".to_string(), |x| format!("{x:+.3}"));
        for r in &self.summary {
            let driving = r
                .driving_head_last
                .map_or(String::new(), |x| format!("  own driving head -> {x:.3}"));
            let moved = r
                .detectors_down
                .zip(r.detectors_up)
                .map_or(String::new(), |(down, up)| {
                    format!("  detectors down {down}, up {up}")
                });
            write!(
                f,
                "\n  {:<22} inside {}  outside {}{driving}{moved}",
                r.composition,
                show(r.mean_edge_inside),
                show(r.mean_edge_outside)
            )?;
        }
        write!(f, "\n  (down / up: edge lower / higher than on the random assignment, paired on the same items, 95% interval excluding 0)")?;
        write!(
            f,
            "\nablate: {:.1} s; cross-matrix in {}",
            self.seconds,
            self.dir.join("ablate.html").display()
        )
    }
}
