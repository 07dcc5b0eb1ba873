//! `af datamap DATASET`: the arguments, then af-pipeline's data map, whose summary is printed.
//!
//! Writes into `--out` (docs/formats.md): `datamap.csv`, `datamap.json`, `datamap.svg`/`.png`,
//! and `easy-to-learn`, `ambiguous`, `hard-to-learn` subsets in the input's own layout.

use std::path::PathBuf;
use std::process::ExitCode;

use af_core::{Config, MemberName};
use af_io::questions::QuestionFormat;
use af_pipeline::datamap::{DatamapOptions, DatamapRequest};
use clap::Args;

#[derive(Args)]
pub struct DatamapArgs {
    /// The dataset: any layout `af audit` reads (SWAG CSV, HellaSwag / WinoGrande / generic
    /// JSONL, af's dataset.jsonl); detected unless --format names it.
    dataset: PathBuf,
    #[arg(long, value_parser = super::parse_question_format)]
    format: Option<QuestionFormat>,
    /// Skip bad rows instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// An af config: [committee] sizes and training, [filter] (its last phase's members are the
    /// default committee), [tagger], [run] seed, threads and device.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Committee members, comma-separated (members that read text: bow, cnn, lstm, pos-lstm,
    /// ngram); default: the last [[filter.stages]]'s, less those reading LM features.
    #[arg(long, value_delimiter = ',')]
    members: Option<Vec<String>>,
    /// Epochs of training, each recorded.
    #[arg(long, default_value_t = 6)]
    epochs: usize,
    /// Group folds, one committee trained on each (a question's dynamics come from the one that
    /// trained on it); 1 is Cartography's single model.
    #[arg(long, default_value_t = 1)]
    folds: usize,
    /// Share of questions in easy-to-learn (highest confidence).
    #[arg(long, default_value_t = 0.33)]
    easy: f64,
    /// Share of questions in ambiguous (highest variability).
    #[arg(long, default_value_t = 0.33)]
    ambiguous: f64,
    /// Share of questions in hard-to-learn (lowest confidence).
    #[arg(long, default_value_t = 0.33)]
    hard: f64,
    /// Output directory (default: datamap/<dataset file name without extension>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// auto, cpu, cuda or cuda:N (overrides [run] device).
    #[arg(long)]
    device: Option<String>,
    /// CPU threads, 0: one per core (overrides [run] threads).
    #[arg(long)]
    threads: Option<usize>,
    /// Seed of the folds and the training (overrides [run] seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Replace what is in the output directory.
    #[arg(long)]
    force: bool,
}

pub fn run(a: DatamapArgs) -> anyhow::Result<ExitCode> {
    let config = match &a.config {
        Some(p) => af_pipeline::load_config(Some(p))?,
        None => Config::default(),
    };
    for (name, share) in [
        ("--easy", a.easy),
        ("--ambiguous", a.ambiguous),
        ("--hard", a.hard),
    ] {
        anyhow::ensure!(
            (0.0..=1.0).contains(&share),
            "{name} must be a share in [0, 1], not {share}"
        );
    }
    let out = a.out.clone().unwrap_or_else(|| {
        let stem = a
            .dataset
            .file_stem()
            .map_or("dataset".into(), |s| s.to_string_lossy().into_owned());
        PathBuf::from("datamap").join(stem)
    });
    let request = DatamapRequest {
        dataset: &a.dataset,
        format: a.format,
        skip_bad: a.skip_bad,
        config: &config,
        members: a
            .members
            .as_ref()
            .map(|m| m.iter().map(|n| MemberName::new(n.trim())).collect()),
        options: DatamapOptions {
            epochs: a.epochs,
            folds: a.folds,
            easy: a.easy,
            ambiguous: a.ambiguous,
            hard: a.hard,
        },
        seed: a.seed.unwrap_or(config.run.seed),
        threads: a.threads.unwrap_or(config.run.threads),
        device: a
            .device
            .clone()
            .unwrap_or_else(|| config.run.device.clone()),
        out: &out,
        force: a.force,
    };
    println!(
        "{}",
        af_pipeline::datamap::run(&request, &crate::progress::Bars)?
    );
    Ok(ExitCode::SUCCESS)
}
