//! `af refilter DATASET [--config CONFIG]`: the arguments, the re-filtering config written into
//! its run directory, the run's stages (each printed as it ends), then the audit of the dataset
//! before and after.

use std::path::PathBuf;
use std::process::ExitCode;

use af_nn::committee::Registry;
use af_pipeline::refilter::{audit_before_after, refilter_config, RefilterOptions};
use af_pipeline::StageName;
use clap::Args;

#[derive(Args)]
pub struct RefilterArgs {
    /// The multiple-choice dataset: SWAG (regular or full CSV), HellaSwag JSONL, WinoGrande
    /// JSONL, generic JSONL (`context`, `endings`, `label`) or af's dataset.jsonl.
    dataset: PathBuf,
    /// The config whose LM, committee, [filter] and [audit] the re-filtering uses (default:
    /// configs/default.toml); its inputs and `[generate] endings` are replaced.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The dataset's layout, when its first line does not tell (docs/formats.md).
    #[arg(long, value_parser = super::parse_question_format)]
    format: Option<af_io::questions::QuestionFormat>,
    /// New endings per question from af's LMs, trained on the dataset's own questions, added to
    /// each question's own wrong options before filtering (0: filter among its own options).
    #[arg(long, default_value_t = 0, value_name = "N")]
    generate: usize,
    /// Distractors per re-filtered question (default: the config's [filter] k). Each question
    /// needs at least k wrong options, counting the generated ones.
    #[arg(long)]
    k: Option<usize>,
    /// Leave out the questions that cannot be read or have too few options (listed in
    /// pairs/report.json) instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// The run directory (default: beside the config's, named after the dataset).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Adopt the trained LMs of this run directory instead of training LMs on the dataset's own
    /// questions (which, for a few hundred questions, give useless LM features and endings):
    /// usually the run that made the dataset. Its [lm] shape and folds replace the config's, and
    /// each question found among its items keeps the fold it had there, so no LM scores or
    /// completes a question it trained on.
    #[arg(long, value_name = "RUN_DIR")]
    lms: Option<PathBuf>,
    /// Rerun this stage and every one after it even if up to date.
    #[arg(long, value_name = "STAGE")]
    force: Vec<StageName>,
}

pub fn run(a: RefilterArgs) -> anyhow::Result<ExitCode> {
    let registry = Registry::builtin();
    let base = af_pipeline::load_config(a.config.as_deref())?;
    let options = RefilterOptions {
        input: a.dataset,
        layout: a.format.map(|f| f.name().to_string()),
        generate: a.generate,
        skip_bad: a.skip_bad,
        k: a.k,
        out: a.out,
        lms: a.lms,
    };
    let config = refilter_config(&base, &options)?;
    // A first run that fails (a bad question) leaves no run directory behind.
    let fresh = !config.run.dir.exists();
    let outcome = (|| -> anyhow::Result<_> {
        std::fs::create_dir_all(&config.run.dir)?;
        let written = config.run.dir.join("refilter.toml");
        af_core::atomic::write(&written, config.to_toml().as_bytes())?;
        eprintln!(
            "refilter: run directory {} (config {})",
            config.run.dir.display(),
            written.display()
        );
        af_pipeline::runner::run_stages(
            &config,
            &af_pipeline::ALL_STAGES,
            &a.force,
            &crate::progress::Bars,
            crate::print_stage,
        )?;
        audit_before_after(&config, &registry, &crate::progress::Bars)
    })();
    let report = match outcome {
        Ok(report) => report,
        Err(e) => {
            if fresh && !config.run.dir.join("pairs/stage.json").exists() {
                let _ = std::fs::remove_dir_all(&config.run.dir);
            }
            return Err(e);
        }
    };
    println!("{report}");
    println!(
        "refilter: the re-filtered dataset is in {}, the comparison in {}",
        config.run.dir.join("export").display(),
        config.run.dir.join("refilter").display()
    );
    Ok(ExitCode::SUCCESS)
}
