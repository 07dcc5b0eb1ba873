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

mod composition;
mod cross_matrix;
mod detectors;
mod report;

use std::path::{Path, PathBuf};
use std::time::Instant;

use af_core::ablate::Composition;
use af_core::{Config, MemberName};
use af_io::pool_index::Pool;
use af_nn::committee::{MemberKind, Registry};
use af_nn::table::CandidateTable;
use anyhow::Context;
use serde::Serialize;

pub use cross_matrix::{Cell, DetectorScore, PairedChange, SplitSizes};
pub use report::SummaryRow;

use crate::progress::Progress;
use crate::runner;
use crate::stages::filter::FilterReport;

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

/// A finished ablation.
pub struct AblateRun {
    pub dir: PathBuf,
    pub compositions: Vec<CompositionRun>,
    pub cells: Vec<Cell>,
    /// Every two compositions compared question by question (`composition-pairs.csv`).
    pub pairs: Vec<PairedChange>,
    pub summary: Vec<SummaryRow>,
    /// What every detector was trained and measured on.
    pub split: SplitSizes,
    pub seconds: f64,
}

/// What every composition's run and every detector of one ablation read: the request, the pool
/// and its candidate table (built once), the device, and the ablation's directory.
struct Ablation<'a> {
    request: &'a AblateRequest<'a>,
    pool: &'a Pool,
    table: &'a CandidateTable,
    device: tch::Device,
    dir: &'a Path,
    progress: &'a dyn Progress,
}

impl Ablation<'_> {
    fn config(&self) -> &Config {
        self.request.config
    }

    fn registry(&self) -> &Registry {
        self.request.registry
    }
}

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
        let stamp = composition::stamp(config, c, upstream)?;
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

    let ablation = Ablation {
        request,
        pool: &pool,
        table: &table,
        device,
        dir: &dir,
        progress,
    };

    let bar = progress.bar("compositions", compositions.len() as u64);
    let mut runs = Vec::new();
    for (c, stamp) in compositions.iter().zip(&stamps) {
        bar.set_message(c.name.clone());
        let run = composition::run(&ablation, c, stamp)?;
        done(&run);
        runs.push(run);
        bar.inc(1);
    }
    bar.finish();

    let (cells, pairs, split) =
        cross_matrix::cross_matrix(&ablation, &compositions, &runs, &stamps, upstream)?;
    let summary = report::summarise(
        &compositions,
        &runs,
        &cells,
        af_filter::chance(config.filter.k),
    );
    let run = AblateRun {
        dir,
        compositions: runs,
        cells,
        pairs,
        summary,
        split,
        seconds: start.elapsed().as_secs_f64(),
    };
    report::write_outputs(config, &run)?;
    Ok(run)
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
