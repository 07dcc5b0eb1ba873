//! `af aflite`: AFLite over instances with feature vectors from any encoder (docs/design.md §1.6).
//!
//! Writes into `--out`: `kept.jsonl` and `removed.jsonl` (the input lines, unchanged, so a
//! WinoGrande file stays a WinoGrande file), `scores.csv` (per instance its last predictability
//! and the iteration that removed it), `iterations.csv`, `report.json`, and `aflite.svg`/`.png`
//! (share of instances left and a fresh probe's held-out accuracy against iteration).

use std::path::PathBuf;
use std::process::ExitCode;

use af_filter::aflite_loop::AfliteOptions;
use af_io::features::InstanceFields;
use af_nn::linear_probes::ProbeSettings;
use af_pipeline::aflite::AfliteRequest;
use clap::Args;

#[derive(Args)]
pub struct AfliteArgs {
    /// Instances, one JSON object per line, in the order of the feature rows.
    #[arg(long)]
    instances: PathBuf,
    /// Feature matrix, one row per instance: .npy (float32/64), .safetensors (one 2-D tensor) or .csv.
    #[arg(long)]
    features: PathBuf,
    /// Output directory (must be empty or absent unless --force).
    #[arg(long)]
    out: PathBuf,
    /// WinoGrande layout: id `qID`, label `answer`, twins grouped by qID without -1/-2.
    #[arg(long)]
    winogrande: bool,
    #[arg(long, default_value = "id")]
    id_field: String,
    #[arg(long, default_value = "label")]
    label_field: String,
    /// Instances sharing a group are never split between training and predicted sides.
    #[arg(long)]
    group_field: Option<String>,
    /// Classifiers (random partitions) per iteration.
    #[arg(long, default_value_t = 64)]
    m: usize,
    /// Training instances per partition.
    #[arg(long, default_value_t = 10_000)]
    t: usize,
    /// Instances removed per iteration at most.
    #[arg(long, default_value_t = 500)]
    k: usize,
    /// Predictability an instance needs to be removed: a number (checked against the null too,
    /// unless --null-permutations 0), or `auto`: the lowest the null allows.
    #[arg(long, default_value = "auto", value_parser = parse_tau)]
    tau: Tau,
    /// The share of an iteration's qualifying instances the null may explain (estimated false
    /// removals over qualifying instances).
    #[arg(long, default_value_t = 0.05)]
    false_removal_rate: f64,
    /// Label-permuted copies per iteration that make the null; 0: none (the paper's plain tau,
    /// which must then be a number).
    #[arg(long, default_value_t = 1)]
    null_permutations: usize,
    /// Stop at this many instances (0: only when fewer than k qualify).
    #[arg(long, default_value_t = 0)]
    n: usize,
    #[arg(long, default_value_t = 1000)]
    max_iterations: usize,
    /// Full-batch optimisation steps per classifier.
    #[arg(long, default_value_t = 100)]
    steps: usize,
    #[arg(long, default_value_t = 0.05)]
    learning_rate: f64,
    #[command(flatten)]
    compute: super::ComputeArgs,
}

#[derive(Clone, Copy)]
struct Tau(Option<f64>);

fn parse_tau(s: &str) -> Result<Tau, String> {
    if s == "auto" {
        return Ok(Tau(None));
    }
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(Tau(Some(v))),
        _ => Err("expected `auto` or a number in [0, 1]".into()),
    }
}

pub fn run(a: AfliteArgs) -> anyhow::Result<ExitCode> {
    let fields = if a.winogrande {
        InstanceFields {
            id: "qID".into(),
            label: "answer".into(),
            group: None,
            twins_from_id: true,
        }
    } else {
        InstanceFields {
            id: a.id_field.clone(),
            label: a.label_field.clone(),
            group: a.group_field.clone(),
            twins_from_id: false,
        }
    };
    let request = AfliteRequest {
        instances: &a.instances,
        features: &a.features,
        out: &a.out,
        fields,
        options: AfliteOptions {
            m: a.m,
            t: a.t,
            k: a.k,
            tau: a.tau.0,
            false_removal_rate: a.false_removal_rate,
            null_permutations: a.null_permutations,
            n: a.n,
            max_iterations: a.max_iterations,
            seed: a.compute.seed,
        },
        probe: ProbeSettings {
            steps: a.steps,
            learning_rate: a.learning_rate,
            ..Default::default()
        },
        device: a.compute.device.clone(),
        threads: a.compute.threads,
        force: a.compute.force,
    };
    let run = af_pipeline::aflite::run(&request)?;
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    for it in &run.per_iteration {
        let null = it.null.as_ref().map_or("-".to_string(), |q| {
            format!(
                "{:.3}/{:.3}/{:.3}/{:.3}/{:.3}",
                q.q50, q.q90, q.q95, q.q99, q.max
            )
        });
        println!(
            "iteration {:>3}: {} instances, {} qualify (threshold {}, confidence {}), {} removed, expected false removals {}; null q50/q90/q95/q99/max {}",
            it.iteration,
            it.size,
            it.above_tau,
            f(it.threshold),
            f(it.threshold_confidence),
            it.removed,
            f(it.expected_false_removals),
            null
        );
    }
    println!("{run}");
    Ok(ExitCode::SUCCESS)
}
