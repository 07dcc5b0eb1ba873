//! `af audit DATASET`: the arguments, then af-pipeline's audit, whose summary is printed.
//!
//! Writes into `--out` (docs/formats.md): `audit.json` (every number, the input and the settings),
//! `detectors.csv`, `tokens.csv` (every tested token), `detectors.svg`, `audit.md` and
//! `audit.html`, and `audit-config.toml` (the settings, loadable with `--config`).

use std::path::PathBuf;
use std::process::ExitCode;

use af_core::{Config, MemberName};
use af_io::questions::QuestionFormat;
use af_nn::committee::{Column, Registry};
use af_pipeline::audit::AuditRequest;
use clap::Args;

#[derive(Args)]
pub struct AuditArgs {
    /// The dataset: SWAG regular or full CSV, HellaSwag / WinoGrande / generic JSONL
    /// (`context`, `endings`, `label`), or af's dataset.jsonl. The layout is detected.
    dataset: PathBuf,
    /// A separate evaluation file (same layouts). Without it a `split` field (train against
    /// val/dev/test) or a split by group (`[audit] eval-share`) makes the evaluation split, or
    /// `--eval-folds` cross-fits.
    #[arg(long)]
    eval: Option<PathBuf>,
    /// Cross-fit over this many group folds: every question is scored by detectors trained on
    /// the other folds, so intervals cover every question (about sqrt(5) narrower than a fifth
    /// held out) at K times the training. 1: one held-out split. Overrides [audit] eval-folds;
    /// does not apply with --eval.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    eval_folds: Option<u64>,
    /// Name the layout instead of detecting it.
    #[arg(long, value_parser = super::parse_question_format)]
    format: Option<QuestionFormat>,
    /// Skip bad rows (listed in audit.json) instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// An af config: its [audit] section, the detector sizes of [committee], and [run] seed,
    /// threads and device. Defaults otherwise (docs/configs.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Learned detectors, comma-separated: any committee member that reads text (ngram, bow,
    /// cnn, lstm, pos-lstm, encoder or torchscript, not both); overrides [audit] models.
    #[arg(long, value_delimiter = ',')]
    models: Option<Vec<String>>,
    /// Output directory (default: audit/<dataset file name without extension>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// auto, cpu, cuda or cuda:N (overrides [run] device).
    #[arg(long)]
    device: Option<String>,
    /// CPU threads, 0: one per core (overrides [run] threads).
    #[arg(long)]
    threads: Option<usize>,
    /// Seed of the split and of every detector (overrides [run] seed).
    #[arg(long)]
    seed: Option<u64>,
    /// Replace what is in the output directory.
    #[arg(long)]
    force: bool,
    /// The folder of an `af eval` of the same dataset (`af eval DATASET --out DIR`): its acc and
    /// acc_norm table joins audit.html, so one page says what the detectors and an LM see.
    #[arg(long, value_name = "DIR")]
    lm_eval: Option<PathBuf>,
}

pub fn run(a: AuditArgs) -> anyhow::Result<ExitCode> {
    let registry = Registry::builtin();
    let mut config = match &a.config {
        Some(p) => af_pipeline::load_config(Some(p))?,
        None => Config::default(),
    };
    if let Some(models) = &a.models {
        config.audit.models = models
            .iter()
            .map(|m| {
                let name = MemberName::new(m.trim());
                match registry.get(name.as_str()) {
                    // A fine-tuned member passes here, to be refused with its reason by the
                    // config check.
                    Some(member)
                        if !member
                            .joint()
                            .is_some_and(|m| m.columns().contains(&Column::Features)) =>
                    {
                        Ok(name)
                    }
                    _ => Err(anyhow::anyhow!(
                        "--models: unknown detector `{m}`: expected one of {}",
                        registry.text_members().join(", ")
                    )),
                }
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(k) = a.eval_folds {
        config.audit.eval_folds = k as usize;
    }
    let out = a.out.clone().unwrap_or_else(|| {
        let stem = a
            .dataset
            .file_stem()
            .map_or("dataset".into(), |s| s.to_string_lossy().into_owned());
        PathBuf::from("audit").join(stem)
    });
    let request = AuditRequest {
        dataset: &a.dataset,
        eval: a.eval.as_deref(),
        format: a.format,
        skip_bad: a.skip_bad,
        config: &config,
        seed: a.seed.unwrap_or(config.run.seed),
        threads: a.threads.unwrap_or(config.run.threads),
        device: a
            .device
            .clone()
            .unwrap_or_else(|| config.run.device.clone()),
        out: &out,
        force: a.force,
        lm_eval: a.lm_eval.as_deref(),
    };
    let run = af_pipeline::audit::run(&request, &crate::progress::Bars)?;
    println!("{run}");
    Ok(ExitCode::SUCCESS)
}
