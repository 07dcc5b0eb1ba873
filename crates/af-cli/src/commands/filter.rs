//! The `filter` stage: Adversarial Filtering of the pool (DESIGN §1.3).
//!
//! After every iteration, each written atomically:
//! - `state.json`: the whole loop state (assignment, history, per-item scores, stage position),
//!   from which a killed run resumes and ends exactly as an uninterrupted one;
//! - `metrics.csv`: per iteration and head, held-out (k+1)-way and pairwise accuracy, items
//!   changed, swaps, seconds;
//! - `history.csv`: every swap (iteration, item id, removed candidate, added candidate).
//!
//! At the end, `report.json` sums it up.

use std::fmt::Write as _;

use af_filter::{chance, FilterState};
use anyhow::Context;
use serde::Serialize;

use super::committee::{filter_options, load, TorchCommittee};
use crate::stage::StageContext;

pub fn run(ctx: &StageContext) -> anyhow::Result<()> {
    let config = ctx.config;
    let (pool, table, summary, device) = load(config)?;
    let k = config.filter.k;
    tracing::info!(
        "filter: {} items, {} candidates ({} words, {} POS-view ids, up to {} tokens) on {device:?}",
        pool.items.len(),
        summary.rows,
        summary.vocabulary,
        summary.pos_vocabulary,
        summary.max_tokens
    );
    let state_path = ctx.dir.join("state.json");
    let mut state = if state_path.exists() {
        let text = std::fs::read_to_string(&state_path).with_context(|| format!("cannot read {}", state_path.display()))?;
        let state: FilterState = serde_json::from_str(&text).with_context(|| {
            format!("{} is corrupted; `af run --force filter` starts the filter over (it is left as it is)", state_path.display())
        })?;
        anyhow::ensure!(
            state.assignment.distractors.len() == pool.items.len() && state.assignment.k == k,
            "{} is for {} items and k = {}, the pool has {} items and the config k = {k}; `af run --force filter` starts over",
            state_path.display(),
            state.assignment.distractors.len(),
            state.assignment.k,
            pool.items.len()
        );
        tracing::info!("filter: resuming after iteration {}", state.iterations.len());
        state
    } else {
        FilterState::new(pool.random_assignment(k, config.run.seed)?)
    };
    let options = filter_options(config);
    let groups = pool.groups();
    let max_iterations: usize = options.stages.iter().map(|s| s.iterations).sum();
    let mut committee = TorchCommittee { pool: &pool, table: &table, config: &config.committee, device, reports: Vec::new() };
    let bar = crate::progress::bar(max_iterations as u64, "filter");
    bar.set_position(state.iterations.len() as u64);
    while !state.finished {
        let more = state.step(&mut committee, &groups, &options)?;
        save(ctx, &state, &pool)?;
        if let Some(it) = state.iterations.last() {
            let driving = it.heads.iter().find(|h| h.head == it.driving_head).expect("the driving head has metrics");
            tracing::debug!(
                "iteration {} ({}): {} {:.3} (chance {:.3}), {} swaps in {:.1} s",
                it.iteration,
                it.stage,
                it.driving_head,
                driving.accuracy,
                chance(k),
                it.swaps,
                it.seconds
            );
            bar.set_message(format!("{} {:.3}", it.driving_head, driving.accuracy));
        }
        bar.inc(1);
        if !more {
            break;
        }
    }
    bar.finish_and_clear();
    write_report(ctx, &state, &pool, k)?;
    Ok(())
}

fn save(ctx: &StageContext, state: &FilterState, pool: &super::committee::Pool) -> anyhow::Result<()> {
    af_core::atomic::write(ctx.dir.join("state.json"), serde_json::to_string(state)?.as_bytes())?;
    af_core::atomic::write(ctx.dir.join("metrics.csv"), metrics_csv(state).as_bytes())?;
    let mut history = String::from("iteration,item_id,removed,added\n");
    for s in &state.swaps {
        writeln!(history, "{},{},{},{}", s.iteration, pool.items[s.item].id, s.removed, s.added).expect("writing to a String");
    }
    af_core::atomic::write(ctx.dir.join("history.csv"), history.as_bytes())?;
    Ok(())
}

/// One row per iteration and head.
pub fn metrics_csv(state: &FilterState) -> String {
    let mut out = String::from("iteration,stage,head,driving,accuracy,pairwise_accuracy,heldout_items,items_changed,swaps,seconds\n");
    for it in &state.iterations {
        for h in &it.heads {
            writeln!(
                out,
                "{},{},{},{},{:.6},{:.6},{},{},{},{:.3}",
                it.iteration,
                it.stage,
                h.head,
                h.head == it.driving_head,
                h.accuracy,
                h.pairwise_accuracy,
                it.heldout_items,
                it.items_changed,
                it.swaps,
                it.seconds
            )
            .expect("writing to a String");
        }
    }
    out
}

#[derive(Serialize)]
struct FilterReport {
    items: usize,
    k: usize,
    chance: f64,
    iterations: usize,
    swaps: usize,
    items_ever_changed: usize,
    first: Vec<af_filter::HeadMetrics>,
    last: Vec<af_filter::HeadMetrics>,
    driving_head_first: f64,
    driving_head_last: f64,
    seconds: f64,
}

fn write_report(ctx: &StageContext, state: &FilterState, pool: &super::committee::Pool, k: usize) -> anyhow::Result<()> {
    let first = state.iterations.first().context("the filter ran no iteration")?;
    let last = state.iterations.last().expect("there is a first");
    let driving = |it: &af_filter::IterationRecord| it.heads.iter().find(|h| h.head == it.driving_head).map_or(f64::NAN, |h| h.accuracy);
    let mut changed: Vec<usize> = state.swaps.iter().map(|s| s.item).collect();
    changed.sort_unstable();
    changed.dedup();
    let report = FilterReport {
        items: pool.items.len(),
        k,
        chance: chance(k),
        iterations: state.iterations.len(),
        swaps: state.swaps.len(),
        items_ever_changed: changed.len(),
        first: first.heads.clone(),
        last: last.heads.clone(),
        driving_head_first: driving(first),
        driving_head_last: driving(last),
        seconds: state.iterations.iter().map(|i| i.seconds).sum(),
    };
    af_core::atomic::write(ctx.dir.join("report.json"), serde_json::to_string_pretty(&report)?.as_bytes())?;
    println!(
        "filter: {} iterations, driving head {:.3} -> {:.3} (chance {:.3}), {} swaps in {} items",
        report.iterations, report.driving_head_first, report.driving_head_last, report.chance, report.swaps, report.items_ever_changed
    );
    Ok(())
}
