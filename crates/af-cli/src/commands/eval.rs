//! `af eval DATASET`: the arguments, then af-pipeline's evaluation by a pretrained causal LM,
//! whose summary is printed.

use std::path::PathBuf;
use std::process::ExitCode;

use af_io::questions::QuestionFormat;
use af_pipeline::eval::EvalRequest;
use clap::Args;

#[derive(Args)]
pub struct EvalArgs {
    /// The dataset: any layout `af audit` reads (SWAG CSV, HellaSwag, WinoGrande, generic JSONL,
    /// af's dataset.jsonl). The layout is detected.
    #[arg(required_unless_present = "summarise")]
    dataset: Option<PathBuf>,
    /// Summarise an earlier run's folder again from its scores.csv, without the LM or the
    /// dataset: its eval.json and eval.html are rewritten with every reading af now makes of the
    /// scores (the likelihood probe among them). For results written before such a reading.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["dataset", "model", "ways", "format", "out"])]
    summarise: Option<PathBuf>,
    /// The pretrained LM, a Llama-architecture GGUF file (default: $AF_CAUSAL_LM, SmolLM2-135M,
    /// which scripts/setup installs).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Score the gold and K-1 distractors drawn with --seed (all options when a question has K
    /// or fewer): compares a 10-way dataset with 4-way HellaSwag.
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..))]
    ways: Option<u64>,
    /// Name the layout instead of detecting it.
    #[arg(long, value_parser = super::parse_question_format)]
    format: Option<QuestionFormat>,
    /// Skip bad rows instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// Output directory (default: eval/<dataset file name without extension>). Scores already
    /// there (scores.jsonl, same dataset, model, ways and seed) are kept: a rerun resumes.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Sequences per forward pass.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    #[command(flatten)]
    compute: super::ComputeArgs,
}

pub fn run(a: EvalArgs) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &a.summarise {
        let summary = af_pipeline::eval::resummarise(dir)?;
        print!("{summary}");
        println!("rewrote {} and eval.html", dir.join("eval.json").display());
        return Ok(ExitCode::SUCCESS);
    }
    let dataset = a
        .dataset
        .expect("clap requires a dataset without --summarise");
    let model = a
        .model
        .or_else(af_nn::causal_lm::default_path)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no model: pass --model FILE.gguf, or set {} (scripts/setup --env sets it)",
                af_nn::causal_lm::CAUSAL_LM_ENV
            )
        })?;
    let out = a.out.unwrap_or_else(|| {
        let stem = dataset
            .file_stem()
            .map_or("dataset".into(), |s| s.to_string_lossy().into_owned());
        PathBuf::from("eval").join(stem)
    });
    let request = EvalRequest {
        dataset: &dataset,
        name: None,
        format: a.format,
        skip_bad: a.skip_bad,
        model: &model,
        ways: a.ways.map(|k| k as usize),
        seed: a.compute.seed,
        batch_size: a.batch_size,
        device: a.compute.device,
        threads: a.compute.threads,
        out: &out,
        force: a.compute.force,
    };
    let summary = af_pipeline::eval::run(&request, &crate::progress::Bars)?;
    print!("{summary}");
    println!("wrote {}", out.display());
    Ok(ExitCode::SUCCESS)
}
