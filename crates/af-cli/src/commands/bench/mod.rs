//! `af bench`: measurements printed as JSON, recorded in docs/benchmarks.md. Never timed tests.
//! One file per benchmark: its arguments and its run.

mod adapt;
mod aflite;
mod committee;
mod encoder;
mod encoder_ft;
mod generate;
mod lm_likelihood;
mod pool;
mod pretrained;
mod tagger;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Sampling throughput: endings per second for an LM of the given size and batch shape
    /// (sampling only, without deduplication or features). `--contexts 1` is the original's way:
    /// one context's endings per batch.
    Generate(generate::GenerateArgs),
    /// Committee speed on a synthetic pool: one AF iteration (train on 80% of the items' k+1
    /// options, score every pool candidate of the other 20%), sequences and candidates per second.
    /// `--check-cpu` scores the trained weights on the CPU too and reports the largest difference.
    Committee(committee::CommitteeArgs),
    /// AFLite speed: one iteration's m batched linear classifiers (each trained on t of the
    /// instances, full batch) on random features.
    Aflite(aflite::AfliteArgs),
    /// The filter's pool loading on a synthetic pool of any size (no LM needed): index the
    /// Parquet parts, then build the committee's table one part at a time. Reports seconds, the
    /// table's bytes on the device and the peak host memory of the build, which the part size
    /// bounds rather than the pool size.
    Pool(pool::PoolArgs),
    /// Pretrained encoder throughput: sentences per second for caption-like sentences (a
    /// context and a noun phrase + ending each, 10 to 40 tokens), tokenizing included.
    Encoder(encoder::EncoderArgs),
    /// What the fine-tuned `encoder-ft` member costs: (context, second sentence) pairs per second
    /// fine-tuned (forward and backward, AdamW) and scored, on caption-like pairs, and what one
    /// AF iteration of the ActivityNet CPU config would take at those rates.
    EncoderFt(encoder_ft::EncoderFtArgs),
    /// The pretrained generator (`[generate] pretrained-endings`): continuations per second of
    /// caption-like prompts, sampled as the generate stage samples (top-p, stop at a sentence end).
    Pretrained(pretrained::PretrainedArgs),
    /// Caption-adapter training of the pretrained generator (`[generate] pretrained-adapt-steps`):
    /// optimiser steps per second on caption-like "prompt -> ending" examples, trained as the
    /// generate stage trains a fold's adapter (low-rank adapters on the query and value
    /// projections, loss on the ending's tokens, AdamW).
    Adapt(adapt::AdaptArgs),
    /// The `lm-likelihood` member's scoring of a pool (the filter's code: a synthetic pool's
    /// candidates after their contexts, as `af eval` requests them, cached in a temporary
    /// directory): candidates per second. `--check-cpu` scores a few items on the CPU too and
    /// reports the largest difference (exit 1 beyond 1e-3 of a score).
    LmLikelihood(lm_likelihood::LmLikelihoodArgs),
    /// Tagger throughput on one core: tokens per second over a CoNLL-U file's sentences.
    Tagger(tagger::TaggerArgs),
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum PrecisionArg {
    Auto,
    Fp32,
    Mixed,
}

impl From<PrecisionArg> for af_core::config::Precision {
    fn from(p: PrecisionArg) -> Self {
        match p {
            PrecisionArg::Auto => Self::Auto,
            PrecisionArg::Fp32 => Self::Fp32,
            PrecisionArg::Mixed => Self::Mixed,
        }
    }
}

pub fn run(command: BenchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Generate(args) => generate::run(args),
        BenchCommand::Committee(args) => committee::run(args),
        BenchCommand::Aflite(args) => aflite::run(args),
        BenchCommand::Pool(args) => pool::run(args),
        BenchCommand::Encoder(args) => encoder::run(args),
        BenchCommand::EncoderFt(args) => encoder_ft::run(args),
        BenchCommand::Pretrained(args) => pretrained::run(args),
        BenchCommand::Adapt(args) => adapt::run(args),
        BenchCommand::LmLikelihood(args) => lm_likelihood::run(args),
        BenchCommand::Tagger(args) => tagger::run(args),
    }
}

/// The pretrained generator a bench runs: `--model`, else `$AF_CAUSAL_LM`; with `--random-weights`
/// a random model of SmolLM2-135M's shape written into `dir` (the architecture's speed).
fn generator_file(
    model: Option<PathBuf>,
    random_weights: bool,
    dir: &std::path::Path,
) -> anyhow::Result<PathBuf> {
    if random_weights {
        let path = dir.join("random-smollm2-135m.gguf");
        af_nn::causal_lm::toy::write_random_llama(
            &path,
            af_nn::causal_lm::toy::LlamaShape::SMOLLM2_135M,
            19,
        )?;
        return Ok(path);
    }
    model
        .or_else(af_nn::causal_lm::default_path)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no --model and {} is not set: run scripts/setup (source <(scripts/setup --env))",
                af_nn::causal_lm::CAUSAL_LM_ENV
            )
        })
}

/// `$AF_ENCODER_DIR`, for a bench without `--model`.
fn default_encoder_dir() -> anyhow::Result<PathBuf> {
    std::env::var_os(af_nn::encoder::ENCODER_DIR_ENV)
        .map(PathBuf::from)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no --model and {} is not set: run scripts/setup (source <(scripts/setup --env))",
                af_nn::encoder::ENCODER_DIR_ENV
            )
        })
}

/// Deterministic caption-like sentences, as the encoder member reads them (ActivityNet style).
fn caption_sentences(n: usize) -> Vec<String> {
    const WHO: &[&str] = &[
        "A man",
        "A young woman",
        "Two boys",
        "The girl",
        "A group of people",
        "An older man in a red shirt",
        "The instructor",
        "A little child",
    ];
    const DOES: &[&str] = &[
        "is seen speaking to the camera while holding a guitar",
        "begins chopping onions on a wooden board in a bright kitchen",
        "kicks a soccer ball back and forth across a grassy field",
        "puts on goggles and dives into the swimming pool",
        "spreads blue paint along the fence with a wide brush",
        "skis down a snowy mountain, waving at the people below",
        "lifts a heavy barbell over his head and drops it on the mat",
        "rides a horse around the ring while a woman watches",
    ];
    const THEN: &[&str] = &[
        "Then the camera pans to the crowd cheering.",
        "She smiles and continues.",
        "Afterwards he explains each step to the audience, pointing at the tools on the table.",
        "The video ends with the closing credits.",
        "",
    ];
    (0..n)
        .map(|i| {
            let s = format!(
                "{} {}. {}",
                WHO[i % WHO.len()],
                DOES[(i / WHO.len()) % DOES.len()],
                THEN[(i / 7) % THEN.len()]
            );
            s.trim_end().to_string()
        })
        .collect()
}

/// What the figures were measured on.
pub fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    json!({
        "cpu": cpu,
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "os": std::env::consts::OS,
    })
}
