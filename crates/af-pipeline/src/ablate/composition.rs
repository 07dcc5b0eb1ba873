//! One composition's AF run: the run's config with the composition's schedule, filtered on the
//! shared pool and table, resumed or skipped as the filter stage would be.

use std::time::Instant;

use af_core::ablate::Composition;
use af_core::Config;
use anyhow::Context;
use serde_json::json;

use super::{Ablation, CompositionRun, Outcome};
use crate::runner::{self, StageContext, StageRecord};
use crate::stages::filter::{filter_pool, FilterReport};

/// The config a composition's AF run is: the run's, with the composition's schedule.
fn composition_config(config: &Config, c: &Composition) -> Config {
    let mut own = config.clone();
    own.filter.stages.clone_from(&c.stages);
    own
}

/// What a composition's run depends on: what the filter stage's does, with its schedule, and the
/// candidate table it reads, built once for the whole config (every member the config names).
pub(super) fn stamp(
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

/// Runs the composition `c` in its own directory, unless its run there is up to date.
pub(super) fn run(
    ablation: &Ablation,
    c: &Composition,
    stamp: &serde_json::Value,
) -> anyhow::Result<CompositionRun> {
    let Ablation {
        request,
        pool,
        table,
        device,
        progress,
        ..
    } = *ablation;
    let cdir = ablation.dir.join(&c.name);
    let own = composition_config(ablation.config(), c);
    let report_path = cdir.join("report.json");
    let finished = |outcome, report| CompositionRun {
        name: c.name.clone(),
        members: c.members.clone(),
        stages: c.stages.clone(),
        outcome,
        report,
        dir: cdir.clone(),
    };
    if !request.force && runner::is_up_to_date(&cdir.join("stage.json"), stamp) {
        let text = std::fs::read_to_string(&report_path)
            .with_context(|| format!("cannot read {}", report_path.display()))?;
        let report: FilterReport = serde_json::from_str(&text)
            .with_context(|| format!("{} is corrupted: pass --force", report_path.display()))?;
        return Ok(finished(Outcome::UpToDate, report));
    }
    runner::prepare_dir(&cdir, None, stamp, request.force, false)?;
    crate::resources::reset_host_peak();
    let host_at_start = crate::resources::host_bytes();
    let start = Instant::now();
    let ctx = StageContext {
        config: &own,
        dir: cdir.clone(),
        shard: None,
        progress,
        memory_plan: Default::default(),
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
        memory_plan: ctx
            .memory_plan
            .into_inner()
            .unwrap_or_else(|e| e.into_inner()),
    };
    af_core::atomic::write(
        cdir.join("stage.json"),
        serde_json::to_string_pretty(&record)?.as_bytes(),
    )?;
    Ok(finished(Outcome::Ran, report))
}
