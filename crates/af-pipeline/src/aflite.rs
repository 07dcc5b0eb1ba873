//! AFLite over instances with feature vectors from any encoder (DESIGN §1.6): af-filter's loop
//! with af-nn's batched linear probes.
//!
//! Writes into `out`: `kept.jsonl` and `removed.jsonl` (the input lines, unchanged, so a
//! WinoGrande file stays a WinoGrande file), `scores.csv` (per instance its last predictability
//! and the iteration that removed it), `iterations.csv`, `report.json`, and `aflite.svg`/`.png`
//! (share of instances left and a fresh probe's held-out accuracy against iteration).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use af_filter::aflite::{aflite, AfliteOptions, LinearProbes};
use af_io::features::{read_features, read_instances, InstanceFields};
use af_nn::aflite::{BatchedProbes, ProbeSettings};
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
    fn fit_predict(&mut self, active: &[usize], train: &[Vec<bool>], _seed: u64) -> Result<Vec<Vec<u32>>, af_nn::NnError> {
        self.0.fit_predict(active, train)
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
        names.into_iter().enumerate().map(|(i, n)| (n, i as u32)).collect()
    };
    anyhow::ensure!(classes.len() >= 2, "{}: every instance has the same label", a.instances.display());
    let labels: Vec<u32> = instances.iter().map(|i| classes[i.label.as_str()]).collect();
    let groups: Vec<String> = instances.iter().map(|i| i.group.clone()).collect();
    let device = crate::setup::device_named(&a.device)?;
    let batched = BatchedProbes::new(&features.data, features.rows, features.dim, &labels, classes.len(), a.probe.clone(), device);
    let options = a.options.clone();
    let start = std::time::Instant::now();
    let result = aflite(&mut Probes(&batched), &labels, &groups, &options)?;
    let seconds = start.elapsed().as_secs_f64();

    let (mut kept, mut removed) = (String::new(), String::new());
    let mut scores = csv::Writer::from_writer(Vec::new());
    scores.write_record(["id", "label", "group", "predictability", "removed_in_iteration"])?;
    for (i, inst) in instances.iter().enumerate() {
        let target = if result.removed_in[i].is_some() { &mut removed } else { &mut kept };
        target.push_str(&inst.line);
        target.push('\n');
        let p = result.predictability[i].map_or(String::new(), |p| format!("{p:.4}"));
        let r = result.removed_in[i].map_or(String::new(), |r| r.to_string());
        scores.write_record([inst.id.as_str(), &inst.label, &inst.group, &p, &r])?;
    }
    let mut iterations = csv::Writer::from_writer(Vec::new());
    iterations.write_record(["iteration", "size", "removed", "above_tau", "mean_predictability", "probe_accuracy"])?;
    for it in &result.iterations {
        iterations.write_record([
            it.iteration.to_string(),
            it.size.to_string(),
            it.removed.to_string(),
            it.above_tau.to_string(),
            format!("{:.4}", it.mean_predictability),
            format!("{:.4}", it.probe_accuracy),
        ])?;
    }
    let write = |name: &str, bytes: &[u8]| af_core::atomic::write(a.out.join(name), bytes);
    write("kept.jsonl", kept.as_bytes())?;
    write("removed.jsonl", removed.as_bytes())?;
    write("scores.csv", &scores.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))?)?;
    write("iterations.csv", &iterations.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))?)?;
    let n_kept = result.kept().count();
    let first_probe = result.iterations.first().map_or(result.final_probe_accuracy, |i| i.probe_accuracy);
    let report = json!({
        "instances": a.instances, "features": a.features, "rows": features.rows, "dim": features.dim,
        "classes": classes.keys().collect::<Vec<_>>(), "chance": 1.0 / classes.len() as f64,
        "options": options, "probe_steps": a.probe.steps, "probe_learning_rate": a.probe.learning_rate, "device": format!("{device:?}"),
        "kept": n_kept, "removed": instances.len() - n_kept, "iterations": result.iterations.len(),
        "probe_accuracy_before": first_probe, "probe_accuracy_after": result.final_probe_accuracy,
        "seconds": seconds, "seconds_per_iteration": seconds / result.iterations.len().max(1) as f64,
    });
    write("report.json", serde_json::to_string_pretty(&report)?.as_bytes())?;
    let total = instances.len() as f64;
    let mut size: Vec<(f64, f64)> = result.iterations.iter().map(|i| (i.iteration as f64, i.size as f64 / total)).collect();
    let mut probe: Vec<(f64, f64)> = result.iterations.iter().map(|i| (i.iteration as f64, i.probe_accuracy)).collect();
    let end = result.iterations.len() as f64;
    size.push((end, n_kept as f64 / total));
    probe.push((end, result.final_probe_accuracy));
    let curves = [af_report::Curve { name: "share of instances left".into(), points: size }, af_report::Curve { name: "fresh linear probe, held-out accuracy".into(), points: probe }];
    let plot = af_report::LinePlot { title: "AFLite", x_desc: "AFLite iteration", y_desc: "share / accuracy", reference: Some(("chance", 1.0 / classes.len() as f64)) };
    write("aflite.svg", af_report::lines_svg(&curves, &plot)?.as_bytes())?;
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
    })
}
