//! AFLite over instances with feature vectors from any encoder (docs/design.md §1.6): af-filter's loop
//! with af-nn's batched linear probes.
//!
//! Writes into `out`: `kept.jsonl` and `removed.jsonl` (the input lines, unchanged, so a
//! WinoGrande file stays a WinoGrande file), `scores.csv` (per instance its last predictability,
//! the mean probability of its label, and the iteration that removed it), `iterations.csv` (with
//! each iteration's threshold, the null's quantiles and the expected false removals),
//! `report.json`, and `aflite.svg`/`.png` (share of instances left and a fresh probe's held-out
//! accuracy against iteration).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use af_filter::aflite_loop::{aflite, AfliteIteration, AfliteOptions, LinearProbes};
use af_io::features::{read_features, read_instances, InstanceFields};
use af_nn::linear_probes::{BatchedProbes, ProbeSettings};
use serde_json::json;

/// What `af aflite` is asked to do.
pub struct AfliteRequest<'a> {
    pub instances: &'a Path,
    pub features: &'a Path,
    pub out: &'a Path,
    pub fields: InstanceFields,
    pub options: AfliteOptions,
    pub probe: ProbeSettings,
    pub device: String,
    pub threads: usize,
    pub force: bool,
}

/// A finished AFLite run (every number is also in `out/report.json`).
pub struct AfliteRun {
    pub instances: usize,
    pub kept: usize,
    pub iterations: usize,
    pub seconds: f64,
    pub probe_before: f64,
    pub probe_after: f64,
    pub chance: f64,
    pub out: PathBuf,
    /// Every iteration, for the caller to show (threshold, null, expected false removals).
    pub per_iteration: Vec<AfliteIteration>,
}

impl std::fmt::Display for AfliteRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "aflite: kept {} of {} instances in {} iterations ({:.1} s); fresh probe {:.3} -> {:.3} (chance {:.3}); outputs in {}",
            self.kept,
            self.instances,
            self.iterations,
            self.seconds,
            self.probe_before,
            self.probe_after,
            self.chance,
            self.out.display()
        )
    }
}

struct Probes<'a>(&'a BatchedProbes);

impl LinearProbes for Probes<'_> {
    type Error = af_nn::NnError;
    fn fit_probabilities(
        &mut self,
        active: &[usize],
        labels: &[u32],
        train: &[Vec<bool>],
        _seed: u64,
    ) -> Result<Vec<Vec<f32>>, af_nn::NnError> {
        self.0.fit_probabilities(active, labels, train)
    }
}

/// Runs AFLite and writes its outputs.
pub fn run(a: &AfliteRequest) -> anyhow::Result<AfliteRun> {
    af_nn::runtime::set_threads(a.threads);
    let instances = read_instances(a.instances, &a.fields)?;
    let features = read_features(a.features)?;
    anyhow::ensure!(
        features.rows == instances.len(),
        "{} has {} rows but {} has {} instances: one feature row per instance, in order",
        a.features.display(),
        features.rows,
        a.instances.display(),
        instances.len()
    );
    crate::setup::empty_out_dir(a.out, a.force)?;
    let classes: BTreeMap<&str, u32> = {
        let mut names: Vec<&str> = instances.iter().map(|i| i.label.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .enumerate()
            .map(|(i, n)| (n, i as u32))
            .collect()
    };
    anyhow::ensure!(
        classes.len() >= 2,
        "{}: every instance has the same label",
        a.instances.display()
    );
    let labels: Vec<u32> = instances
        .iter()
        .map(|i| classes[i.label.as_str()])
        .collect();
    let groups: Vec<String> = instances.iter().map(|i| i.group.clone()).collect();
    let device = crate::setup::device_named(&a.device)?;
    let batched = BatchedProbes::new(
        &features.data,
        features.rows,
        features.dim,
        &labels,
        classes.len(),
        a.probe.clone(),
        device,
    )
    .map_err(|e| anyhow::anyhow!("{}: {e}", a.features.display()))?;
    let options = a.options.clone();
    let start = std::time::Instant::now();
    let result = aflite(&mut Probes(&batched), &labels, &groups, &options)?;
    let seconds = start.elapsed().as_secs_f64();
    no_nan_in(&result)?;

    let (mut kept, mut removed) = (String::new(), String::new());
    let mut scores = csv::Writer::from_writer(Vec::new());
    scores.write_record([
        "id",
        "label",
        "group",
        "predictability",
        "confidence",
        "removed_in_iteration",
        "removal_rank",
    ])?;
    let mut rank = vec![None; instances.len()];
    for (r, &i) in result.removal_order.iter().enumerate() {
        rank[i] = Some(r);
    }
    for (i, inst) in instances.iter().enumerate() {
        let target = if result.removed_in[i].is_some() {
            &mut removed
        } else {
            &mut kept
        };
        target.push_str(&inst.line);
        target.push('\n');
        let p = result.predictability[i].map_or(String::new(), |p| format!("{p:.4}"));
        let c = result.confidence[i].map_or(String::new(), |c| format!("{c:.4}"));
        let r = result.removed_in[i].map_or(String::new(), |r| r.to_string());
        let k = rank[i].map_or(String::new(), |k: usize| k.to_string());
        scores.write_record([inst.id.as_str(), &inst.label, &inst.group, &p, &c, &r, &k])?;
    }
    let mut iterations = csv::Writer::from_writer(Vec::new());
    iterations.write_record([
        "iteration",
        "size",
        "removed",
        "above_tau",
        "mean_predictability",
        "probe_accuracy",
        "threshold",
        "threshold_confidence",
        "null_q50",
        "null_q90",
        "null_q95",
        "null_q99",
        "null_max",
        "expected_false_at_tau",
        "expected_false_removals",
    ])?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
    for it in &result.iterations {
        let q = it.null.as_ref();
        iterations.write_record([
            it.iteration.to_string(),
            it.size.to_string(),
            it.removed.to_string(),
            it.above_tau.to_string(),
            format!("{:.4}", it.mean_predictability),
            format!("{:.4}", it.probe_accuracy),
            opt(it.threshold),
            opt(it.threshold_confidence),
            opt(q.map(|q| q.q50)),
            opt(q.map(|q| q.q90)),
            opt(q.map(|q| q.q95)),
            opt(q.map(|q| q.q99)),
            opt(q.map(|q| q.max)),
            opt(it.expected_false_at_tau),
            opt(it.expected_false_removals),
        ])?;
    }
    let write = |name: &str, bytes: &[u8]| af_core::atomic::write(a.out.join(name), bytes);
    write("kept.jsonl", kept.as_bytes())?;
    write("removed.jsonl", removed.as_bytes())?;
    write(
        "scores.csv",
        &scores
            .into_inner()
            .map_err(|e| anyhow::anyhow!("csv: {e}"))?,
    )?;
    write(
        "iterations.csv",
        &iterations
            .into_inner()
            .map_err(|e| anyhow::anyhow!("csv: {e}"))?,
    )?;
    let n_kept = result.kept().count();
    let first_probe = result
        .iterations
        .first()
        .map_or(result.final_probe_accuracy, |i| i.probe_accuracy);
    let report = json!({
        "instances": a.instances, "features": a.features, "rows": features.rows, "dim": features.dim,
        "classes": classes.keys().collect::<Vec<_>>(), "chance": 1.0 / classes.len() as f64,
        "options": options, "probe_steps": a.probe.steps, "probe_learning_rate": a.probe.learning_rate, "device": format!("{device:?}"),
        "kept": n_kept, "removed": instances.len() - n_kept, "iterations": result.iterations.len(),
        "tau_mode": if options.tau.is_some() { "fixed" } else { "auto" },
        "per_iteration": &result.iterations,
        "expected_false_removals": result.iterations.iter().filter_map(|i| i.expected_false_removals).sum::<f64>(),
        "probe_accuracy_before": first_probe, "probe_accuracy_after": result.final_probe_accuracy,
        "seconds": seconds, "seconds_per_iteration": seconds / result.iterations.len().max(1) as f64,
    });
    write(
        "report.json",
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    let total = instances.len() as f64;
    let mut size: Vec<(f64, f64)> = result
        .iterations
        .iter()
        .map(|i| (i.iteration as f64, i.size as f64 / total))
        .collect();
    let mut probe: Vec<(f64, f64)> = result
        .iterations
        .iter()
        .map(|i| (i.iteration as f64, i.probe_accuracy))
        .collect();
    let end = result.iterations.len() as f64;
    size.push((end, n_kept as f64 / total));
    probe.push((end, result.final_probe_accuracy));
    let curves = [
        af_report::Curve {
            name: "share of instances left".into(),
            points: size,
        },
        af_report::Curve {
            name: "fresh linear probe, held-out accuracy".into(),
            points: probe,
        },
    ];
    let plot = af_report::LinePlot {
        title: "AFLite",
        x_desc: "AFLite iteration",
        y_desc: "share / accuracy",
        reference: Some(("chance", 1.0 / classes.len() as f64)),
    };
    write(
        "aflite.svg",
        af_report::lines_svg(&curves, &plot)?.as_bytes(),
    )?;
    af_report::lines_png(&curves, &plot, &a.out.join("aflite.png"))?;
    Ok(AfliteRun {
        instances: instances.len(),
        kept: n_kept,
        iterations: result.iterations.len(),
        seconds,
        probe_before: first_probe,
        probe_after: result.final_probe_accuracy,
        chance: 1.0 / classes.len() as f64,
        out: a.out.to_path_buf(),
        per_iteration: result.iterations,
    })
}

/// No NaN or infinity may reach an output file (issue 44): one would read as a number in
/// `scores.csv` and silently remove nothing. The readers and the standardisation refuse what could
/// make one, so this is the last check, naming the first instance or iteration that has one.
fn no_nan_in(result: &af_filter::aflite_loop::AfliteResult) -> anyhow::Result<()> {
    let per_instance = result
        .predictability
        .iter()
        .zip(&result.confidence)
        .enumerate()
        .find(|(_, (p, c))| p.is_some_and(|p| !p.is_finite()) || c.is_some_and(|c| !c.is_finite()));
    if let Some((i, (p, c))) = per_instance {
        anyhow::bail!("aflite: instance {i} (counting from 0) has predictability {p:?} and confidence {c:?}: not finite, so nothing is written");
    }
    for it in &result.iterations {
        let q = it.null.as_ref();
        let values = [
            Some(it.mean_predictability),
            Some(it.probe_accuracy),
            it.threshold,
            it.threshold_confidence,
            it.expected_false_at_tau,
            it.expected_false_removals,
            q.map(|q| q.q50),
            q.map(|q| q.q90),
            q.map(|q| q.q95),
            q.map(|q| q.q99),
            q.map(|q| q.max),
        ];
        anyhow::ensure!(
            values.iter().flatten().all(|v| v.is_finite()),
            "aflite: iteration {} has a value that is not finite ({values:?}), so nothing is written",
            it.iteration
        );
    }
    anyhow::ensure!(
        result.final_probe_accuracy.is_finite(),
        "aflite: the final probe accuracy is not finite, so nothing is written"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use tch::Device;

    /// The AFLite-null request's setting at half size (2,000 instances and t = 1,000 take half a
    /// minute of CPU here; docs/notebook/2026-12-01-aflite-null-and-data-maps.md has that run): 1,000 WinoGrande-style twins, 16 uniform noise
    /// features; the first `planted` carry their label in feature 0 (+-2.5).
    fn synthetic(planted: usize) -> (Vec<f32>, Vec<u32>, Vec<String>) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let (n, d) = (1000, 16);
        let labels: Vec<u32> = (0..n).map(|i| (i % 2) as u32).collect();
        let groups: Vec<String> = (0..n).map(|i| format!("q{}", i / 2)).collect();
        let mut x: Vec<f32> = (0..n * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        for i in 0..planted {
            x[i * d] = if labels[i] == 1 { 2.5 } else { -2.5 };
        }
        (x, labels, groups)
    }

    fn run(planted: usize, tau: Option<f64>) -> af_filter::aflite_loop::AfliteResult {
        let (x, labels, groups) = synthetic(planted);
        let probes = BatchedProbes::new(
            &x,
            1000,
            16,
            &labels,
            2,
            ProbeSettings {
                steps: 60,
                ..Default::default()
            },
            Device::Cpu,
        )
        .unwrap();
        let options = AfliteOptions {
            m: 32,
            t: 500,
            k: 50,
            tau,
            ..Default::default()
        };
        aflite(&mut Probes(&probes), &labels, &groups, &options).unwrap()
    }

    #[test]
    fn the_first_removed_are_the_planted_ones() {
        let r = run(200, None);
        let first: Vec<usize> = r.removal_order.iter().copied().take(200).collect();
        let hits = first.iter().filter(|&&i| i < 200).count();
        // The last iteration may stop a few short of 200 (fewer than k qualify); the planted
        // ones must still be nearly all removed, and at least 90% of what is removed.
        assert!(
            first.len() >= 180 && hits * 10 >= first.len() * 9,
            "{hits} of the first {} removed are planted: {:?}",
            first.len(),
            r.iterations
        );
        let it = &r.iterations[0];
        assert!(it.expected_false_removals.unwrap() < 10.0, "{it:?}");
    }

    #[test]
    fn features_without_signal_lose_at_most_one_percent() {
        for tau in [None, Some(0.75)] {
            let r = run(0, tau);
            let removed = r.removed_in.iter().filter(|x| x.is_some()).count();
            assert!(
                removed <= 10,
                "tau {tau:?}: {removed} removed of 1000: {:?}",
                r.iterations
            );
        }
    }
}
