//! `af aflite`: AFLite over instances with feature vectors from any encoder (DESIGN §1.6).
//!
//! Writes into `--out`: `kept.jsonl` and `removed.jsonl` (the input lines, unchanged, so a
//! WinoGrande file stays a WinoGrande file), `scores.csv` (per instance its last predictability
//! and the iteration that removed it), `iterations.csv`, `report.json`, and `aflite.svg`/`.png`
//! (share of instances left and a fresh probe's held-out accuracy against iteration).

use std::path::PathBuf;
use std::process::ExitCode;

use af_filter::aflite::AfliteOptions;
use af_io::features::InstanceFields;
use af_nn::aflite::ProbeSettings;
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
    /// Predictability an instance needs to be removed.
    #[arg(long, default_value_t = 0.75)]
    tau: f64,
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

pub fn run(a: AfliteArgs) -> anyhow::Result<ExitCode> {
    let fields = if a.winogrande {
        InstanceFields { id: "qID".into(), label: "answer".into(), group: None, twins_from_id: true }
    } else {
        InstanceFields { id: a.id_field.clone(), label: a.label_field.clone(), group: a.group_field.clone(), twins_from_id: false }
    };
    let request = AfliteRequest {
        instances: &a.instances,
        features: &a.features,
        out: &a.out,
        fields,
        options: AfliteOptions { m: a.m, t: a.t, k: a.k, tau: a.tau, n: a.n, max_iterations: a.max_iterations, seed: a.compute.seed },
        probe: ProbeSettings { steps: a.steps, learning_rate: a.learning_rate, ..Default::default() },
        device: a.compute.device.clone(),
        threads: a.compute.threads,
        force: a.compute.force,
    };
    println!("{}", af_pipeline::aflite::run(&request)?);
    Ok(ExitCode::SUCCESS)
}
