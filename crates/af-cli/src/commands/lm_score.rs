//! `af lm score DATASET...`: the arguments, then af-pipeline's scoring of each dataset's options
//! by a run's LMs, whose per-kind figures are printed.

use std::path::PathBuf;
use std::process::ExitCode;

use af_pipeline::lm_score::{score_datasets, LmChoice};
use clap::Args;

#[derive(Args)]
pub struct LmScoreArgs {
    /// Multiple-choice datasets (any layout `af audit` reads), typically a run's
    /// export/dataset.jsonl (AF's distractors) and export/random.jsonl (random ones, same pool).
    #[arg(required = true)]
    datasets: Vec<PathBuf>,
    /// The run's config: its run directory holds the LMs (after `af lm train`).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Which LM scores a question: `other` (the fold after the item's own: an LM that never
    /// sampled its endings, though it trained on its found ending), `own` (the generating LM),
    /// or a fold number for every question (datasets not made by this run).
    #[arg(long, default_value = "other", value_parser = LmChoice::parse)]
    lm: LmChoice,
    /// Where the CSVs and summary.json go (default: RUN/lm-score).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(a: LmScoreArgs) -> anyhow::Result<ExitCode> {
    let config = af_pipeline::load_config(a.config.as_deref())?;
    af_pipeline::setup::init_threads(&config);
    let out = a.out.unwrap_or_else(|| config.run.dir.join("lm-score"));
    let report = score_datasets(&config, &a.datasets, a.lm, &out)?;
    let lm = match report.lm {
        LmChoice::Other => "each item's other fold's (never sampled its endings)".to_string(),
        LmChoice::Own => "each item's own fold's (the generating LM)".to_string(),
        LmChoice::Fold(n) => format!("fold {n}'s"),
    };
    println!("lm score: forward log-perplexity of each ending given its context (natural log, per token), LM: {lm}, of {}", report.run.display());
    println!(
        "{:>9}  {:<24}  {:<24}  {:>5}  dataset",
        "questions", "gold mean [95%]", "distractors mean [95%]", "KS"
    );
    for d in &report.datasets {
        let show = |k: &af_pipeline::lm_score::KindSummary| {
            format!("{:.3} [{:.3}, {:.3}]", k.mean, k.mean_ci.0, k.mean_ci.1)
        };
        println!(
            "{:>9}  {:<24}  {:<24}  {:>5.3}  {}",
            d.questions,
            show(&d.gold),
            show(&d.distractors),
            d.ks_gold_distractors,
            d.dataset.display()
        );
    }
    println!(
        "lm score: per option in {}, figures in {}",
        out.display(),
        out.join("summary.json").display()
    );
    if report.lm != LmChoice::Own {
        println!("lm score: every LM but the item's own fold's trained on its found ending, so the gold's figure is optimistic: compare distractors with distractors");
    }
    Ok(ExitCode::SUCCESS)
}
