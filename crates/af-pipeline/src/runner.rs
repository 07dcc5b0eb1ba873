//! The stage runner: the stages of a run in order, each writing into `<run dir>/<stage>/`.
//!
//! - `started.json`: the stage's fingerprint, written when it starts. A stage that finds a
//!   `started.json` with the same fingerprint resumes (keeps checkpoints and finished parts); one
//!   with another fingerprint, or `--force`, starts from an empty directory.
//! - its artifacts, each written atomically;
//! - `config.toml`: the resolved config it ran with;
//! - `stage.json`, written last: it finished, with what fingerprint and in how long. A stage whose
//!   `stage.json` matches the current fingerprint is skipped.
//!
//! A stage that does not resume works in `<run dir>/.<stage>.next` and replaces its directory
//! when done. One that resumes (lm, generate, filter) works in its directory, since its partial
//! outputs are what a rerun continues from; complete outputs of another config are first moved
//! to `.<stage>.last`, removed when the new run completes and moved back when their config is
//! run again. A run that fails before leaving anything to resume from (a bad input) removes its
//! directory and moves them back: the failure writes nothing.
//!
//! A fingerprint holds the stage's config sections, the seed, its input files' size and content hash, and
//! the fingerprint of the stage it reads from, so a change upstream reruns everything after it.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Instant;

use af_core::Config;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::progress::Progress;
use crate::stages::{self, StageOutcome};

/// A stage's name: its directory under the run, its `--force`/`--until` spelling and the `stage`
/// field of its `stage.json`. Every name the runner is handed is one of [`stages::STAGES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StageName(&'static str);

/// The stages `af run` runs, in order: the names of [`stages::STAGES`].
pub static ALL_STAGES: LazyLock<Vec<StageName>> =
    LazyLock::new(|| stages::STAGES.iter().map(|s| s.name()).collect());

impl std::str::FromStr for StageName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        stages::STAGES
            .iter()
            .map(|st| st.name())
            .find(|st| st.0 == s)
            .ok_or_else(|| {
                format!(
                    "unknown stage `{s}`: the stages are {}",
                    ALL_STAGES
                        .iter()
                        .map(|st| st.dir_name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }
}

impl std::fmt::Display for StageName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl Serialize for StageName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

impl<'de> Deserialize<'de> for StageName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

impl StageName {
    /// A stage's own name, as its module declares it.
    pub const fn new(name: &'static str) -> Self {
        Self(name)
    }

    pub fn dir_name(self) -> &'static str {
        self.0
    }

    /// The stage's recipe, from the list.
    pub fn stage(self) -> anyhow::Result<&'static dyn Stage> {
        stages::STAGES
            .iter()
            .copied()
            .find(|s| s.name() == self)
            .ok_or_else(|| {
                anyhow::anyhow!("`{self}` is not a stage in af_pipeline::stages::STAGES")
            })
    }
}

/// `stage.json`: a stage finished, with what fingerprint, in how long and with how much memory.
#[derive(Serialize, Deserialize, PartialEq)]
pub struct StageRecord {
    pub stage: StageName,
    pub fingerprint: serde_json::Value,
    pub seconds: f64,
    pub af_version: String,
    #[serde(flatten)]
    pub resources: crate::resources::Resources,
    /// How the stage sized its device batches, for a stage that plans them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_plan: Option<af_core::memory::MemoryPlan>,
}

/// What a stage's body may want from the runner.
pub struct StageContext<'a> {
    pub config: &'a Config,
    pub dir: PathBuf,
    /// `--shard I/N` for `af generate`.
    pub shard: Option<(usize, usize)>,
    pub progress: &'a dyn Progress,
    /// Where a stage that sizes its device batches leaves its plan for `stage.json`.
    pub memory_plan: std::sync::Mutex<Option<af_core::memory::MemoryPlan>>,
}

impl StageContext<'_> {
    /// Keeps the stage's memory plan for its `stage.json`.
    pub fn record_memory_plan(&self, plan: af_core::memory::MemoryPlan) {
        *self.memory_plan.lock().unwrap_or_else(|e| e.into_inner()) = Some(plan);
    }

    fn take_memory_plan(&self) -> Option<af_core::memory::MemoryPlan> {
        self.memory_plan
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// A stage of the pipeline: its name, what its outputs depend on, and how to make them. One per
/// module of [`crate::stages`], listed in order in [`stages::STAGES`].
pub trait Stage: Sync {
    /// Its directory under the run and its name on the command line.
    fn name(&self) -> StageName;

    /// The stage whose outputs it reads (its fingerprint holds that stage's).
    fn upstream(&self) -> Option<StageName>;

    /// Whether it puts tensors on the device (only those ask the device for its memory, since
    /// asking creates a CUDA context).
    fn uses_device(&self) -> bool {
        false
    }

    /// Whether a killed run of it continues where it stopped (LM checkpoints, pool parts, AF
    /// iterations): such a stage works in its own directory, the last complete outputs kept
    /// aside until it completes. One that is not works beside it and replaces the last good
    /// outputs only when it has finished. Either way a failure (a bad input found halfway)
    /// leaves them as they were.
    fn resumable(&self) -> bool {
        false
    }

    /// For a resumable stage: whether `file` (relative to its directory), left by a failed run,
    /// is something a rerun continues from (a checkpoint, a pool part, the filter's state). What
    /// comes before such work is not worth a stray directory.
    fn holds_progress(&self, file: &Path) -> bool {
        file != Path::new("started.json")
    }

    /// What must hold before it runs (a model it will need): `run_stages` asks every stage it will
    /// run (not up to date, or forced) before it runs the first, so that a late stage does not
    /// fail after the early ones spent their hours; `run_stage` asks again before it starts.
    fn check(&self, _config: &Config) -> anyhow::Result<()> {
        Ok(())
    }

    /// What its outputs depend on besides the upstream stage's outputs (the runner adds those):
    /// its config sections, the seed, the content of its input files.
    fn inputs(&self, config: &Config) -> anyhow::Result<serde_json::Value>;

    /// Does the work into `ctx.dir`; returns the report and whether the work is complete (a
    /// shard of `generate` is not, and is not recorded as done).
    fn run(&self, ctx: &StageContext) -> anyhow::Result<(Box<dyn StageOutcome>, bool)>;
}

/// What became of a stage the runner was asked to run.
pub enum StageRun {
    /// Its outputs were up to date.
    UpToDate { stage: StageName, dir: PathBuf },
    /// It ran to the end: its report and the record written to `stage.json`.
    Done {
        report: Box<dyn StageOutcome>,
        record: StageRecord,
        dir: PathBuf,
    },
    /// It did its share (a `--shard`) and left the rest to other runs.
    Partial { report: Box<dyn StageOutcome> },
}

impl StageContext<'_> {
    pub fn stage_dir(&self, stage: StageName) -> PathBuf {
        self.config.run.dir.join(stage.dir_name())
    }
}

/// Runs `stages` in order, handing each outcome to `done` as it comes. A forced stage forces
/// every stage after it: what it feeds is redone.
pub fn run_stages(
    config: &Config,
    stages: &[StageName],
    force: &[StageName],
    progress: &dyn Progress,
    mut done: impl FnMut(&StageRun),
) -> anyhow::Result<()> {
    crate::setup::init_threads(config);
    let forced: Vec<bool> = stages
        .iter()
        .scan(false, |forcing, stage| {
            *forcing |= force.contains(stage);
            Some(*forcing)
        })
        .collect();
    // Only the stages that will run: what an up-to-date stage needed (a model, another run's
    // files) may be gone, and is not needed again.
    for (&stage, &forced) in stages.iter().zip(&forced) {
        if forced || !up_to_date(config, stage)? {
            stage.stage()?.check(config)?;
        }
    }
    for (&stage, &forced) in stages.iter().zip(&forced) {
        done(&run_stage(config, stage, forced, None, progress)?);
    }
    Ok(())
}

/// Runs one stage (skipping it when up to date and not forced). With a shard, the stage's work
/// is split and `stage.json` is written only by a run that finds every part done.
pub fn run_stage(
    config: &Config,
    stage: StageName,
    force: bool,
    shard: Option<(usize, usize)>,
    progress: &dyn Progress,
) -> anyhow::Result<StageRun> {
    let dir = config.run.dir.join(stage.dir_name());
    let recipe = stage.stage()?;
    let stamp = fingerprint(config, stage)?;
    let record_path = dir.join("stage.json");
    let last = aside_dir(&dir, "last");
    // The outputs a newer run of another config moved aside, asked for again: they come back.
    if !force
        && !is_up_to_date(&record_path, &stamp)
        && is_up_to_date(&last.join("stage.json"), &stamp)
    {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        std::fs::rename(&last, &dir)
            .with_context(|| format!("cannot move {} back to {}", last.display(), dir.display()))?;
        tracing::info!(
            "{}: the last complete outputs for this config were kept aside; they are back in {}",
            stage.dir_name(),
            dir.display()
        );
    }
    if !force && is_up_to_date(&record_path, &stamp) {
        tracing::info!(
            "{}: up to date in {} (--force {} reruns it)",
            stage.dir_name(),
            dir.display(),
            stage.dir_name()
        );
        return Ok(StageRun::UpToDate { stage, dir });
    }
    if let Some(up) = recipe.upstream() {
        let up_dir = config.run.dir.join(up.dir_name());
        // The stage's fingerprint holds its upstream's: no second pass over the input files.
        if !is_up_to_date(&up_dir.join("stage.json"), &stamp["upstream"]) {
            anyhow::bail!(
                "the `{}` stage needs the `{}` stage's outputs for this config, and {} has none that are up to date: run `af run CONFIG` (it runs what is missing)",
                stage.dir_name(),
                up.dir_name(),
                up_dir.display()
            );
        }
    }
    // Again here for the commands that run one stage (`af generate`, a shard); cheap.
    recipe.check(config)?;
    let resumable = recipe.resumable();
    let work = if resumable {
        prepare_dir(&dir, Some(&last), &stamp, force, shard.is_some())?;
        dir.clone()
    } else {
        let work = aside_dir(&dir, "next");
        if work.exists() {
            std::fs::remove_dir_all(&work)
                .with_context(|| format!("cannot clear {}", work.display()))?;
        }
        std::fs::create_dir_all(&work)
            .with_context(|| format!("cannot create {}", work.display()))?;
        work
    };
    crate::resources::release_freed_memory();
    crate::resources::reset_host_peak();
    let host_at_start = crate::resources::host_bytes();
    let start = Instant::now();
    let ctx = StageContext {
        config,
        dir: work.clone(),
        shard,
        progress,
        memory_plan: Default::default(),
    };
    let (report, complete) = match recipe.run(&ctx) {
        Ok(done) => done,
        Err(e) => {
            if !resumable {
                let _ = std::fs::remove_dir_all(&work);
            } else if !holds_progress(recipe, &work) {
                // Nothing a rerun would continue from (a bad input found before any work): the
                // directory goes, and the last complete outputs come back as they were.
                let _ = std::fs::remove_dir_all(&work);
                if last.exists() {
                    let _ = std::fs::rename(&last, &work);
                }
            }
            return Err(e);
        }
    };
    if !complete {
        return Ok(StageRun::Partial { report });
    }
    af_core::atomic::write(work.join("config.toml"), config.to_toml().as_bytes())?;
    let seconds = start.elapsed().as_secs_f64();
    // Only stages that put tensors on the device ask it (asking creates a CUDA context).
    let device = if recipe.uses_device() {
        Some(crate::setup::device(config)?)
    } else {
        None
    };
    let resources = crate::resources::measure(host_at_start, device);
    let record = StageRecord {
        stage,
        fingerprint: stamp,
        seconds,
        af_version: env!("CARGO_PKG_VERSION").to_string(),
        resources,
        memory_plan: ctx.take_memory_plan(),
    };
    af_core::atomic::write(
        work.join("stage.json"),
        serde_json::to_string_pretty(&record)?.as_bytes(),
    )?;
    if !resumable {
        replace_dir(&work, &dir)?;
    } else if last.exists() {
        std::fs::remove_dir_all(&last)
            .with_context(|| format!("cannot remove {}", last.display()))?;
    }
    let gb = |b: Option<u64>| b.map_or("-".to_string(), |b| format!("{:.2} GB", b as f64 / 1e9));
    tracing::info!(
        "{}: done in {:.1} s (peak host memory {}, device memory {}), outputs in {}",
        stage.dir_name(),
        record.seconds,
        gb(record.resources.peak_host_bytes),
        gb(record.resources.device_bytes),
        dir.display()
    );
    Ok(StageRun::Done {
        report,
        record,
        dir,
    })
}

/// Whether `stage` has started work for exactly this config (so a rerun would resume it).
pub fn resumable(config: &Config, stage: StageName) -> anyhow::Result<bool> {
    Ok(started_with(
        &config.run.dir.join(stage.dir_name()),
        &fingerprint(config, stage)?,
    ))
}

/// Whether `dir/started.json` holds `fingerprint`.
pub(crate) fn started_with(dir: &Path, fingerprint: &serde_json::Value) -> bool {
    std::fs::read_to_string(dir.join("started.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| &v == fingerprint)
}

/// Puts the finished `work` directory where `dir` is. A crash between the two renames leaves
/// the old outputs in `.NAME.old` and the new, complete ones in `work`; neither is taken for
/// the stage's outputs (they have no `stage.json` where the runner looks), so the stage reruns.
fn replace_dir(work: &Path, dir: &Path) -> anyhow::Result<()> {
    let old = aside_dir(dir, "old");
    if old.exists() {
        std::fs::remove_dir_all(&old).with_context(|| format!("cannot clear {}", old.display()))?;
    }
    if dir.exists() {
        std::fs::rename(dir, &old)
            .with_context(|| format!("cannot move {} aside", dir.display()))?;
    }
    std::fs::rename(work, dir)
        .with_context(|| format!("cannot move {} to {}", work.display(), dir.display()))?;
    if old.exists() {
        std::fs::remove_dir_all(&old)
            .with_context(|| format!("cannot remove {}", old.display()))?;
    }
    Ok(())
}

/// `<run>/.<stage>.<what>` beside the stage directory `dir`: `next` (a stage that does not
/// resume works there) or `last` (a resumable stage's last complete outputs, kept while a run of
/// another config works in their place).
fn aside_dir(dir: &Path, what: &str) -> PathBuf {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.with_file_name(format!(".{name}.{what}"))
}

/// Whether a failed run of a resumable stage left something a rerun continues from, as the
/// stage counts progress ([`Stage::holds_progress`]).
fn holds_progress(stage: &dyn Stage, dir: &Path) -> bool {
    let mut files = Vec::new();
    collect_files(dir, &mut files);
    let rel = |p: &PathBuf| {
        p.strip_prefix(dir)
            .map(Path::to_path_buf)
            .unwrap_or_default()
    };
    files.iter().map(rel).any(|p| stage.holds_progress(&p))
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Makes `dir` ready: resumable when it was started with the same fingerprint, else emptied.
/// Complete outputs of another config (or forced) are moved to `last` when given, not deleted:
/// they stay the stage's outputs for their config until the new run completes.
pub(crate) fn prepare_dir(
    dir: &Path,
    last: Option<&Path>,
    fingerprint: &serde_json::Value,
    force: bool,
    shared: bool,
) -> anyhow::Result<()> {
    let started = dir.join("started.json");
    let same = started_with(dir, fingerprint);
    if dir.exists() && (force || !same) {
        if shared && !force && started.exists() {
            anyhow::bail!(
                "{} holds work started with another config; shards must share one config (or pass --force to discard it)",
                dir.display()
            );
        }
        if let Some(last) = last.filter(|_| dir.join("stage.json").exists()) {
            if last.exists() {
                std::fs::remove_dir_all(last)
                    .with_context(|| format!("cannot clear {}", last.display()))?;
            }
            std::fs::rename(dir, last).with_context(|| {
                format!("cannot move {} aside to {}", dir.display(), last.display())
            })?;
        } else {
            std::fs::remove_dir_all(dir)
                .with_context(|| format!("cannot clear {}", dir.display()))?;
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // Whatever happens next, an old record no longer describes what is on disk.
    match std::fs::remove_file(dir.join("stage.json")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).context("cannot remove stage.json")
        }
        _ => {}
    }
    af_core::atomic::write(
        &started,
        serde_json::to_string_pretty(fingerprint)?.as_bytes(),
    )?;
    Ok(())
}

/// Whether `stage`'s outputs are up to date for this config.
pub fn up_to_date(config: &Config, stage: StageName) -> anyhow::Result<bool> {
    Ok(is_up_to_date(
        &config.run.dir.join(stage.dir_name()).join("stage.json"),
        &fingerprint(config, stage)?,
    ))
}

pub(crate) fn is_up_to_date(record_path: &Path, fingerprint: &serde_json::Value) -> bool {
    let Ok(text) = std::fs::read_to_string(record_path) else {
        return false;
    };
    serde_json::from_str::<StageRecord>(&text).is_ok_and(|r| &r.fingerprint == fingerprint)
}

/// What a stage's outputs depend on: its own inputs and, under `upstream`, its upstream stage's
/// fingerprint, so that a change upstream reruns everything after it.
pub(crate) fn fingerprint(config: &Config, stage: StageName) -> anyhow::Result<serde_json::Value> {
    let recipe = stage.stage()?;
    let mut stamp = recipe.inputs(config)?;
    if let Some(up) = recipe.upstream() {
        stamp["upstream"] = fingerprint(config, up)?;
    }
    Ok(stamp)
}

/// The size and content hash of an input file, or of every file in a directory.
pub fn file_stamp(path: &Path) -> anyhow::Result<serde_json::Value> {
    let paths: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        v.sort();
        v
    } else {
        vec![path.to_path_buf()]
    };
    let mut stamps = Vec::new();
    for p in paths {
        let (bytes, hash) =
            content_hash(&p).with_context(|| format!("cannot read input {}", p.display()))?;
        stamps.push(json!({"path": p, "bytes": bytes, "fnv1a64": format!("{hash:016x}")}));
    }
    Ok(json!(stamps))
}

/// Size and FNV-1a hash of a file's bytes: inputs are identified by what they hold, not by when
/// they were written (a copied or re-mounted dataset keeps its runs up to date).
pub(crate) fn content_hash(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut hash, mut total) = (af_core::hash::Fnv1a::default(), 0u64);
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok((total, hash.finish()));
        }
        total += n as u64;
        hash.update(&buf[..n]);
    }
}
