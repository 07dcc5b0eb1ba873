//! `af features`: the arguments of af-pipeline's `features`, af's own encoders as a feature extractor for AFLite, as WinoGrande used a
//! fine-tuned RoBERTa. On a WinoGrande-style file, each instance becomes a two-way question (the
//! sentence with each option filled in for `_`); the committee's text members (bag of words, CNN,
//! POS-BiLSTM) and joint head are trained on a slice of the instances, which is then discarded,
//! and the rest get their features: the members' representations of both filled-in sentences,
//! side by side.
//!
//! Writes into `--out`: `features.npy` (float32, one row per kept instance), `instances.jsonl`
//! (their lines, unchanged, in the same order), `report.json` (sizes, and the encoders' own two-way
//! accuracy on the kept instances: how far style alone gets on this data).

use std::path::PathBuf;
use std::process::ExitCode;

use af_pipeline::features::FeaturesRequest;
use clap::Args;
#[derive(Args)]
pub struct FeaturesArgs {
    /// WinoGrande-style JSONL: `qID`, `sentence` (with one `_`), `option1`, `option2`, `answer`.
    #[arg(long)]
    winogrande: PathBuf,
    #[arg(long)]
    out: PathBuf,
    /// Share of instances (whole twin groups) that train the encoders and are then dropped.
    #[arg(long, default_value_t = 0.15)]
    slice: f64,
    #[arg(long, default_value_t = 5)]
    epochs: usize,
    #[command(flatten)]
    compute: super::ComputeArgs,
}

pub fn run(a: FeaturesArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.slice > 0.0 && a.slice < 1.0,
        "--slice must be strictly between 0 and 1"
    );
    let request = FeaturesRequest {
        winogrande: &a.winogrande,
        out: &a.out,
        slice: a.slice,
        epochs: a.epochs,
        seed: a.compute.seed,
        device: a.compute.device.clone(),
        threads: a.compute.threads,
        force: a.compute.force,
    };
    println!("{}", af_pipeline::features::run(&request)?);
    Ok(ExitCode::SUCCESS)
}
