//! The `filter` stage: Adversarial Filtering of the pool (docs/design.md §1.3).
//!
//! After every iteration, each written atomically:
//! - `state.json`: the whole loop state (assignment, history, per-item scores, stage position),
//!   from which a killed run resumes and ends exactly as an uninterrupted one;
//! - `metrics.csv`: per iteration and head, held-out (k+1)-way and pairwise accuracy, items
//!   changed, swaps, seconds;
//! - `history.csv`: every swap (iteration, item id, removed candidate, added candidate).
//!
//! At the end, `report.json` sums it up, and `datamap.csv` (with its plot, `datamap.svg` and
//! `.png`) holds the training dynamics of the filtered dataset's questions (`final_dynamics`).

use af_filter::{chance, FilterState};
use af_io::pool_index::Pool;
use af_nn::committee::Registry;
use af_nn::table::CandidateTable;
use anyhow::Context;
use serde::Serialize;

use crate::committee::{load, random_assignment, saved_table_dir, TorchCommittee};
use crate::datamap::Dynamics;
use crate::runner::StageContext;

pub fn run(ctx: &StageContext) -> anyhow::Result<FilterReport> {
    let config = ctx.config;
    let registry = Registry::builtin();
    let (pool, table, mut summary, device) = load(config, &registry, ctx.progress)?;
    // With the frozen embeddings, if a member reads them.
    summary.device_bytes = table.bytes();
    let host_after_table = crate::resources::host_peak_bytes();
    tracing::info!(
        "filter: {} items, {} candidates ({} words, {} POS-view ids, {:.1} tokens on average, up to {}; {:.2} GB on {device:?})",
        pool.items.len(),
        summary.rows,
        summary.vocabulary,
        summary.pos_vocabulary,
        summary.mean_tokens,
        summary.max_tokens,
        summary.device_bytes as f64 / 1e9
    );
    let mut table_json = serde_json::to_value(&summary)?;
    // The pool is read one part at a time: this is what reading it and building the table took.
    table_json["peak_host_bytes_after_table"] = serde_json::json!(host_after_table);
    af_core::atomic::write(
        ctx.dir.join("table.json"),
        serde_json::to_string_pretty(&table_json)?.as_bytes(),
    )?;
    // For the export stage, which would otherwise tag the whole pool again.
    table.save(&saved_table_dir(config), 1 << 20)?;
    filter_pool(ctx, &pool, &table, device, &registry)
}

/// Sizes the committee's scoring batches to `[run] device-memory` and checks that a training step
/// fits, for every phase of the schedule (the candidate table is resident throughout), logs the
/// plan and leaves it for `stage.json`. Returns the committee settings to run with: the config's,
/// with a smaller `score-batch` where the plan needs one.
fn plan_committee_batches(
    ctx: &StageContext,
    table: &CandidateTable,
    device: tch::Device,
    registry: &Registry,
) -> anyhow::Result<af_core::CommitteeConfig> {
    let config = ctx.config;
    let c = &config.committee;
    let mut plan = crate::setup::memory_plan(config, device);
    // The widest row any member reads: the full view's where a member reads it.
    let widest = |t: &CandidateTable| t.lengths.iter().copied().max().unwrap_or(1) as u64;
    let tokens = widest(table).max(table.full_view.as_deref().map_or(0, widest));
    let resident = table.bytes();
    let configured = c.score_batch.candidates_on(device.is_cuda()) as u64;
    let mut score = configured;
    let options = config.filter.k as u64 + 1;
    for phase in &config.filter.stages {
        // A fine-tuned member runs apart, with its own batch keys: the estimate leaves it out.
        let per_row = |training| {
            af_nn::committee::committee_row_bytes(registry, &phase.members, c, tokens, training)
        };
        let rows = c.batch_items as u64 * options;
        plan.size(
            &format!("committee training step, phase `{}`", phase.name),
            "[committee] batch-items",
            "rows",
            rows,
            rows,
            per_row(true)?,
            resident,
        )?;
        score = score.min(plan.size(
            &format!("committee scoring, phase `{}`", phase.name),
            "[committee] score-batch",
            "candidates",
            configured,
            1,
            per_row(false)?,
            resident,
        )?);
    }
    // One committee scores every phase: each phase's entry says the batch it ran with.
    for b in plan
        .batches
        .iter_mut()
        .filter(|b| b.key == "[committee] score-batch")
    {
        b.planned = score;
        b.peak_bytes = b.resident_bytes + score * b.bytes_per_unit;
    }
    tracing::info!("filter: {}", plan.line());
    ctx.record_memory_plan(plan);
    let mut planned = c.clone();
    if score < configured {
        planned.score_batch = af_core::ScoreBatch::Candidates(score as usize);
    }
    Ok(planned)
}

/// The AF loop over a loaded pool and table, into `ctx.dir` (resuming from its `state.json`):
/// the filter stage's, and each of `af ablate`'s compositions.
pub fn filter_pool(
    ctx: &StageContext,
    pool: &Pool,
    table: &CandidateTable,
    device: tch::Device,
    registry: &Registry,
) -> anyhow::Result<FilterReport> {
    let config = ctx.config;
    let k = config.filter.k;
    let state_path = ctx.dir.join("state.json");
    let mut state = if state_path.exists() {
        let text = std::fs::read_to_string(&state_path)
            .with_context(|| format!("cannot read {}", state_path.display()))?;
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
        tracing::info!(
            "filter: resuming after iteration {}",
            state.iterations.len()
        );
        state
    } else {
        FilterState::new(random_assignment(pool, k, config.run.seed)?)
    };
    // A fine-tuned member's model is read in its first iteration, possibly after a long MLP
    // phase: a missing or broken directory is better found now.
    for phase in &config.filter.stages {
        if let Some((member, settings)) = registry.fine_tuned(&phase.members, &config.committee)? {
            let dir = settings.model_dir()?;
            af_nn::encoder::inspect(&dir)
                .with_context(|| format!("member `{member}` of stage `{}`", phase.name))?;
        }
    }
    let groups = pool.groups();
    let max_iterations: usize = config.filter.stages.iter().map(|s| s.iterations).sum();
    let committee_config = plan_committee_batches(ctx, table, device, registry)?;
    let mut committee = TorchCommittee::new(pool, table, &committee_config, registry, device);
    let bar = ctx.progress.bar("filter", max_iterations as u64);
    bar.set_position(state.iterations.len() as u64);
    // history.csv is derived from the state: written whole now (a crash may have left it with a
    // partial or extra iteration), then appended to, so that an iteration's cost does not grow
    // with the swaps of all the iterations before it.
    let history_path = ctx.dir.join("history.csv");
    af_core::atomic::write(&history_path, &history_csv(&state.swaps, pool, true)?)?;
    while !state.finished {
        let before = state.swaps.len();
        let more = state.step(&mut committee, &groups, &config.filter, config.run.seed)?;
        save(ctx, &state)?;
        append(
            &history_path,
            &history_csv(&state.swaps[before..], pool, false)?,
        )?;
        if let Some(it) = state.iterations.last() {
            let driving = it
                .heads
                .iter()
                .find(|h| h.head == it.driving_head)
                .expect("the driving head has metrics");
            tracing::debug!(
                "iteration {} ({}): {} {:.3} (chance {:.3}), {} swaps in {:.1} s",
                it.iteration,
                it.phase,
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
    bar.finish();
    write_datamap(ctx, &state, pool)?;
    write_report(ctx, &state, pool, k)
}

/// One item's row of the filtered dataset's data map.
pub struct FinalDynamics {
    pub item: usize,
    /// The last iteration that trained on the item.
    pub iteration: usize,
    /// Whether the item's question is still the one trained on then (no swap since): only those
    /// items' dynamics describe the filtered dataset.
    pub final_question: bool,
    pub dynamics: Dynamics,
}

/// Every item's dynamics from the last iteration that trained on it
/// (docs/decisions/136-recorded-while-af-runs-not-by-a.md), in item order; items never trained on
/// are left out.
pub fn final_dynamics(state: &FilterState) -> Vec<FinalDynamics> {
    let mut last_swap: Vec<Option<usize>> = vec![None; state.assignment.distractors.len()];
    for s in &state.swaps {
        last_swap[s.item] = Some(s.iteration);
    }
    state
        .dynamics
        .iter()
        .enumerate()
        .filter_map(|(item, d)| {
            let d = d.as_ref()?;
            let p: Vec<f64> = d
                .epochs
                .gold_probability
                .iter()
                .map(|&p| f64::from(p))
                .collect();
            Some(FinalDynamics {
                item,
                iteration: d.iteration,
                // An iteration swaps only its held-out items, never the ones it trained on.
                final_question: last_swap[item].is_none_or(|t| t < d.iteration),
                dynamics: Dynamics::from_epochs(p, &d.epochs.right, 0),
            })
        })
        .collect()
}

/// `filter/datamap.csv`: one row per item trained on at least once; the regions are
/// Cartography's thirds among the items whose question is final.
fn write_datamap(ctx: &StageContext, state: &FilterState, pool: &Pool) -> anyhow::Result<()> {
    let rows = final_dynamics(state);
    let current: Vec<&FinalDynamics> = rows.iter().filter(|r| r.final_question).collect();
    let dynamics: Vec<Dynamics> = current.iter().map(|r| r.dynamics.clone()).collect();
    let regions = crate::datamap::regions(&dynamics, &crate::datamap::DatamapOptions::default());
    let mut in_region: Vec<Vec<&str>> = vec![Vec::new(); pool.items.len()];
    for (name, list) in [
        ("easy-to-learn", &regions.easy),
        ("ambiguous", &regions.ambiguous),
        ("hard-to-learn", &regions.hard),
    ] {
        for &r in list {
            in_region[current[r].item].push(name);
        }
    }
    let epochs = rows
        .iter()
        .map(|r| r.dynamics.gold_probability.len())
        .max()
        .unwrap_or(0);
    let mut out = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = [
        "item_id",
        "iteration",
        "final_question",
        "confidence",
        "variability",
        "correctness",
        "forgetfulness",
        "regions",
    ]
    .map(String::from)
    .to_vec();
    header.extend((1..=epochs).map(|e| format!("gold_probability_{e}")));
    out.write_record(&header)?;
    for r in &rows {
        let d = &r.dynamics;
        let mut row = vec![
            pool.items[r.item].id.clone(),
            r.iteration.to_string(),
            r.final_question.to_string(),
            format!("{:.4}", d.confidence),
            format!("{:.4}", d.variability),
            format!("{:.4}", d.correctness),
            d.forgetfulness.to_string(),
            in_region[r.item].join(";"),
        ];
        // Early stopping may end an iteration's training before the others' epochs: blank cells.
        row.extend((0..epochs).map(|e| {
            d.gold_probability
                .get(e)
                .map_or(String::new(), |p| format!("{p:.4}"))
        }));
        out.write_record(&row)?;
    }
    af_core::atomic::write(ctx.dir.join("datamap.csv"), &csv_bytes(out)?)?;
    // The map itself beside it, so that each of `af ablate`'s compositions has one too (the
    // report draws its own into the page).
    if !dynamics.is_empty() {
        let points: Vec<af_report::MapPoint> = dynamics
            .iter()
            .map(|d| af_report::MapPoint {
                variability: d.variability,
                confidence: d.confidence,
                correctness: d.correctness,
            })
            .collect();
        let title = "Data map of the filtered dataset";
        af_core::atomic::write(
            ctx.dir.join("datamap.svg"),
            af_report::datamap_svg(&points, title)?.as_bytes(),
        )?;
        af_report::datamap_png(&points, title, &ctx.dir.join("datamap.png"))?;
    }
    Ok(())
}

fn save(ctx: &StageContext, state: &FilterState) -> anyhow::Result<()> {
    af_core::atomic::write(
        ctx.dir.join("state.json"),
        serde_json::to_string(state)?.as_bytes(),
    )?;
    af_core::atomic::write(ctx.dir.join("metrics.csv"), &metrics_csv(state)?)?;
    Ok(())
}

/// Swaps as `history.csv` rows, with the header or without.
fn history_csv(swaps: &[af_filter::Swap], pool: &Pool, header: bool) -> anyhow::Result<Vec<u8>> {
    let mut history = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    if header {
        history.write_record(["iteration", "item_id", "removed", "added"])?;
    }
    for s in swaps {
        history.write_record([
            s.iteration.to_string(),
            pool.items[s.item].id.clone(),
            s.removed.to_string(),
            s.added.to_string(),
        ])?;
    }
    csv_bytes(history)
}

fn append(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("cannot append to {}", path.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("cannot append to {}", path.display()))?;
    Ok(())
}

fn csv_bytes(w: csv::Writer<Vec<u8>>) -> anyhow::Result<Vec<u8>> {
    w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))
}

/// One row per iteration and head.
pub fn metrics_csv(state: &FilterState) -> anyhow::Result<Vec<u8>> {
    let mut out = csv::Writer::from_writer(Vec::new());
    out.write_record([
        "iteration",
        "stage",
        "head",
        "driving",
        "accuracy",
        "pairwise_accuracy",
        "heldout_items",
        "items_changed",
        "swaps",
        "seconds",
        "items_gold_above_pool",
    ])?;
    for it in &state.iterations {
        for h in &it.heads {
            out.write_record([
                it.iteration.to_string(),
                it.phase.clone(),
                h.head.clone(),
                (h.head == it.driving_head).to_string(),
                format!("{:.6}", h.accuracy),
                format!("{:.6}", h.pairwise_accuracy),
                it.heldout_items.to_string(),
                it.items_changed.to_string(),
                it.swaps.to_string(),
                format!("{:.3}", it.seconds),
                it.items_gold_above_pool.to_string(),
            ])?;
        }
    }
    csv_bytes(out)
}

/// `filter/report.json`.
#[derive(Serialize, serde::Deserialize)]
pub struct FilterReport {
    pub items: usize,
    pub k: usize,
    pub chance: f64,
    pub iterations: usize,
    pub swaps: usize,
    pub items_ever_changed: usize,
    pub first: Vec<af_filter::HeadMetrics>,
    pub last: Vec<af_filter::HeadMetrics>,
    pub driving_head_first: f64,
    pub driving_head_last: f64,
    pub seconds: f64,
    /// Items in `datamap.csv` whose question is final (absent from an older af's reports).
    #[serde(default)]
    pub datamap_items: usize,
    /// When the last iteration was driven by another head than the first (a schedule that
    /// alternates `swap-head`), that head's own first and last measurement: comparing the first
    /// head's first accuracy with another head's last would not say what AF removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_driver: Option<LastDriver>,
    /// The last iteration's held-out items, and those of them whose gold its driving head
    /// scored above every candidate of the pool: the floor this pool sets (0 from an older af).
    #[serde(default)]
    pub last_heldout_items: usize,
    #[serde(default)]
    pub last_gold_above_pool: usize,
}

/// The head that drove the last iteration, from the first iteration that measured it.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct LastDriver {
    pub head: String,
    pub first_iteration: usize,
    pub first_accuracy: f64,
    pub last_accuracy: f64,
}

impl std::fmt::Display for FilterReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "filter: {} iterations, driving head {:.3} -> {:.3} (chance {:.3}), {} swaps in {} items\n  {}",
            self.iterations,
            self.driving_head_first,
            self.driving_head_last,
            self.chance,
            self.swaps,
            self.items_ever_changed,
            what_it_means(self.driving_head_first, self.driving_head_last, self.chance)
        )?;
        if let Some(d) = &self.last_driver {
            write!(
                f,
                "\n  The last iteration was driven by another head, `{}`: {:.3} at iteration {} (its first measurement) -> {:.3} at the last; {}.",
                d.head,
                d.first_accuracy,
                d.first_iteration,
                d.last_accuracy,
                edge_taken(d.first_accuracy, d.last_accuracy, self.chance)
            )?;
        }
        if self.last_gold_above_pool > 0 {
            write!(
                f,
                "\n  In the last iteration the driving head scored the gold above every candidate of the pool on {} of {} held-out items ({:.0}%): no choice of distractors from this pool fools it there.",
                self.last_gold_above_pool,
                self.last_heldout_items,
                100.0 * self.last_gold_above_pool as f64 / self.last_heldout_items.max(1) as f64
            )?;
        }
        Ok(())
    }
}

/// How much of a head's edge over chance AF took away, in words.
fn edge_taken(first: f64, last: f64, chance: f64) -> String {
    if first - chance <= 0.02 {
        return "it had no edge to take away".into();
    }
    format!(
        "AF took away {:.0}% of its edge",
        100.0 * edge_removed(first, last, chance)
    )
}

/// The share of a head's edge over chance (`first - chance`) gone by `last`, in [0, 1].
fn edge_removed(first: f64, last: f64, chance: f64) -> f64 {
    ((first - last) / (first - chance)).clamp(0.0, 1.0)
}

/// The filter's outcome in one sentence for a reader new to AF: what the driving head's first
/// and last accuracies say, and where real runs' figures are.
pub fn what_it_means(first: f64, last: f64, chance: f64) -> String {
    let pct = |x: f64| format!("{:.0}%", 100.0 * x);
    let start = format!(
        "The committee picked the right ending {} of the time against random distractors and {} against AF's (chance {})",
        pct(first),
        pct(last),
        pct(chance)
    );
    let verdict = if first - chance <= 0.02 {
        "it could not tell them apart by style to begin with, so AF had nothing to remove"
            .to_string()
    } else if last - chance <= 0.03 {
        format!("AF took away {} of its edge, so by the style it reads AF's distractors can no longer be told from the right ending", pct(edge_removed(first, last, chance)))
    } else {
        format!(
            "AF took away {} of its edge; {:.0} points above chance remain, which the pool's candidates could not remove",
            pct(edge_removed(first, last, chance)),
            100.0 * (last - chance)
        )
    };
    format!("{start}: {verdict}. The audit in the export measures detectors AF never trained against; real runs' figures are in docs/results.md.")
}

fn write_report(
    ctx: &StageContext,
    state: &FilterState,
    pool: &Pool,
    k: usize,
) -> anyhow::Result<FilterReport> {
    let first = state
        .iterations
        .first()
        .context("the filter ran no iteration")?;
    let last = state.iterations.last().expect("there is a first");
    let driving = |it: &af_filter::IterationRecord| {
        it.heads
            .iter()
            .find(|h| h.head == it.driving_head)
            .map_or(f64::NAN, |h| h.accuracy)
    };
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
        datamap_items: final_dynamics(state)
            .iter()
            .filter(|r| r.final_question)
            .count(),
        last_driver: last_driver(state),
        last_heldout_items: last.heldout_items,
        last_gold_above_pool: last.items_gold_above_pool,
    };
    af_core::atomic::write(
        ctx.dir.join("report.json"),
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    Ok(report)
}

/// The last iteration's driving head, when another head drove the first.
fn last_driver(state: &FilterState) -> Option<LastDriver> {
    let (first, last) = (state.iterations.first()?, state.iterations.last()?);
    if first.driving_head == last.driving_head {
        return None;
    }
    let head = &last.driving_head;
    let accuracy = |it: &af_filter::IterationRecord| {
        it.heads
            .iter()
            .find(|h| &h.head == head)
            .map(|h| h.accuracy)
    };
    let (first_iteration, first_accuracy) = state
        .iterations
        .iter()
        .find_map(|it| accuracy(it).map(|a| (it.iteration, a)))?;
    Some(LastDriver {
        head: head.clone(),
        first_iteration,
        first_accuracy,
        last_accuracy: accuracy(last)?,
    })
}

/// Bumped when the committee computes other numbers from the same config, so that filter and
/// export outputs of an older af are redone rather than taken as up to date. 2: scores that do
/// not depend on padding (2026-11-30). 3: training dynamics recorded for the data map (2026-12-01).
const COMMITTEE_VERSION: u32 = 3;

/// The `filter` stage.
pub struct Filter;

/// The stage's name (its directory, its `--force` spelling).
pub const NAME: crate::runner::StageName = crate::runner::StageName::new("filter");

impl crate::runner::Stage for Filter {
    fn name(&self) -> crate::runner::StageName {
        NAME
    }

    fn upstream(&self) -> Option<crate::runner::StageName> {
        Some(super::generate::NAME)
    }

    /// Its state: the iterations a rerun continues from (the table it builds again anyway).
    fn holds_progress(&self, file: &std::path::Path) -> bool {
        file == std::path::Path::new("state.json")
    }

    fn uses_device(&self) -> bool {
        true
    }

    fn resumable(&self) -> bool {
        true
    }

    fn inputs(&self, config: &af_core::Config) -> anyhow::Result<serde_json::Value> {
        use serde_json::json;
        let mut stamp = json!({
            "committee_version": COMMITTEE_VERSION,
            "seed": config.run.seed,
            "committee": config.committee.fingerprint(),
            "filter": config.filter.fingerprint(),
            "tagger": config.tagger.fingerprint(),
        });
        // The candidate table is built for every member the config names, [ablate]'s too: where
        // those are more than the schedule's, they change the table (its vocabulary, its views)
        // and with it the assignment.
        let table = config.named_members();
        if table != config.filter.members() {
            stamp["table-members"] = json!(table);
        }
        Ok(stamp)
    }

    fn run(
        &self,
        ctx: &crate::runner::StageContext,
    ) -> anyhow::Result<(Box<dyn super::StageOutcome>, bool)> {
        Ok((Box::new(run(ctx)?), true))
    }
}

#[cfg(test)]
mod tests {
    use super::what_it_means;

    #[test]
    fn the_sentence_says_what_the_driving_head_did() {
        let done = what_it_means(0.44, 0.24, 0.25);
        assert!(
            done.contains(
                "44% of the time against random distractors and 24% against AF's (chance 25%)"
            ),
            "{done}"
        );
        assert!(
            done.contains("took away 100% of its edge") && done.contains("can no longer be told"),
            "{done}"
        );
        let partial = what_it_means(1.0, 0.957, 0.25);
        assert!(
            partial.contains("took away 6% of its edge; 71 points above chance remain"),
            "{partial}"
        );
        assert!(what_it_means(0.26, 0.25, 0.25)
            .contains("could not tell them apart by style to begin with"));
        assert!(
            done.contains("docs/results.md"),
            "every run points at real runs' figures"
        );
    }

    #[test]
    fn an_alternating_schedule_reports_the_last_driving_head_from_its_own_first_measurement() {
        use af_filter::{Assignment, FilterState, HeadMetrics, IterationRecord};
        let heads = |pairs: &[(&str, f64)]| {
            pairs
                .iter()
                .map(|&(head, accuracy)| HeadMetrics {
                    head: head.into(),
                    accuracy,
                    pairwise_accuracy: accuracy,
                })
                .collect()
        };
        let record = |iteration: usize, driving: &str, pairs: &[(&str, f64)]| IterationRecord {
            iteration,
            phase: driving.into(),
            driving_head: driving.into(),
            heads: heads(pairs),
            heldout_items: 10,
            items_changed: 0,
            items_gold_above_pool: 0,
            swaps: 0,
            seconds: 0.0,
            learning_rate: None,
        };
        let mut state = FilterState::new(Assignment {
            k: 3,
            distractors: vec![vec![1, 2, 3]],
        });
        // An MLP-only stage (no encoder head yet), then joint, then encoder-driven.
        state.iterations = vec![
            record(0, "joint", &[("joint", 0.6), ("mlp", 0.6)]),
            record(1, "joint", &[("joint", 0.5), ("encoder", 0.8)]),
            record(2, "encoder", &[("joint", 0.45), ("encoder", 0.55)]),
        ];
        let d = super::last_driver(&state).expect("another head drove the last iteration");
        assert_eq!(
            (
                d.head.as_str(),
                d.first_iteration,
                d.first_accuracy,
                d.last_accuracy
            ),
            ("encoder", 1, 0.8, 0.55)
        );
        state.iterations.pop();
        assert!(
            super::last_driver(&state).is_none(),
            "one head drove both ends"
        );
        assert_eq!(
            super::edge_taken(0.8, 0.55, 0.25),
            "AF took away 45% of its edge"
        );
    }
}
