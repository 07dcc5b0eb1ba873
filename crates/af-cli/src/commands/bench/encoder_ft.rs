//! `af bench encoder-ft`: what fine-tuning and scoring the `encoder-ft` member costs.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;

use super::{caption_sentences, default_encoder_dir, machine};

#[derive(clap::Args)]
pub struct EncoderFtArgs {
    /// A Hugging Face BERT-family directory (default: $AF_ENCODER_DIR, set by scripts/setup).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Questions fine-tuned on (one epoch), each of --options pairs.
    #[arg(long, default_value_t = 32)]
    questions: usize,
    #[arg(long, default_value_t = 10)]
    options: usize,
    /// Questions per optimisation step.
    #[arg(long, default_value_t = 4)]
    batch_items: usize,
    /// Pairs scored after the fine-tuning.
    #[arg(long, default_value_t = 512)]
    scored: usize,
    /// Pairs per scoring pass.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    #[arg(long, default_value_t = 128)]
    max_length: usize,
    #[arg(long, default_value = "auto")]
    device: String,
    /// Random weights in the model's architecture (its config.json and tokenizer.json only).
    #[arg(long)]
    random_weights: bool,
}

pub fn run(args: EncoderFtArgs) -> anyhow::Result<ExitCode> {
    let EncoderFtArgs {
        model,
        questions,
        options,
        batch_items,
        scored,
        batch,
        max_length,
        device,
        random_weights,
    } = args;
    use af_nn::encoder::{CrossEncoder, FineTuneOptions};
    let model_dir = match model {
        Some(dir) => dir,
        None => default_encoder_dir()?,
    };
    anyhow::ensure!(
        questions > 0 && options > 1 && scored > 0,
        "--questions, --scored must be positive and --options at least 2"
    );
    let device = crate::commands::device_named(&device)?;
    let random_dir = tempfile::tempdir()?;
    let dir = if random_weights {
        af_nn::encoder::write_random_weights(&model_dir, random_dir.path(), 19)?;
        random_dir.path()
    } else {
        &model_dir
    };
    let fine_tune = FineTuneOptions {
        max_length,
        batch_size: batch,
        epochs: 1,
        batch_items,
        ..FineTuneOptions::default()
    };
    tch::manual_seed(19);
    let start = Instant::now();
    let mut encoder = CrossEncoder::fresh(dir, device, &fine_tune)?;
    let load_seconds = start.elapsed().as_secs_f64();
    // Question q: one context, `options` second sentences; then `scored` pairs more.
    let sentences = caption_sentences(questions * (options + 1) + scored * 2);
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for q in 0..questions {
        let at = q * (options + 1);
        pairs.extend((1..=options).map(|o| (sentences[at].as_str(), sentences[at + o].as_str())));
    }
    let base = questions * (options + 1);
    pairs.extend((0..scored).map(|i| {
        (
            sentences[base + 2 * i].as_str(),
            sentences[base + 2 * i + 1].as_str(),
        )
    }));
    let encodings = encoder.tokenize_pairs(&pairs)?;
    let n_train = questions * options;
    let mean_tokens =
        encodings.iter().map(|e| e.len()).sum::<usize>() as f64 / encodings.len() as f64;
    let groups: Vec<Vec<usize>> = (0..questions)
        .map(|q| (q * options..(q + 1) * options).collect())
        .collect();
    let start = Instant::now();
    let report = encoder.fine_tune(&encodings[..n_train], &groups, 19)?;
    let train_seconds = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let scores = encoder.score(&encodings[n_train..]);
    let score_seconds = start.elapsed().as_secs_f64();
    let (train_rate, score_rate) = (
        n_train as f64 / train_seconds,
        scored as f64 / score_seconds,
    );
    // The ActivityNet CPU config: 1,000 items, 10-way, 80% trained on, shortlist 16.
    let (train_pairs, score_pairs) = (800.0 * 10.0, 200.0 * (10.0 + 16.0));
    let out = json!({
        "benchmark": "encoder-ft",
        "machine": machine(),
        "device": format!("{device:?}"),
        "torch_threads": tch::get_num_threads(),
        "model": dir.display().to_string(),
        "weights": if random_weights { "random (seed 19)" } else { "model.safetensors" },
        "max_length": max_length,
        "mean_tokens": mean_tokens,
        "load_seconds": load_seconds,
        "fine_tune": { "questions": questions, "options": options, "batch_items": batch_items, "steps": report.steps, "seconds": train_seconds, "pairs_per_second": train_rate, "loss": report.train_loss },
        "score": { "pairs": scored, "batch": batch, "seconds": score_seconds, "pairs_per_second": score_rate },
        "activitynet_cpu_iteration_estimate": {
            "fine_tune_pairs": train_pairs,
            "scored_pairs": score_pairs,
            "seconds_at_these_rates": train_pairs / train_rate + score_pairs / score_rate,
        },
        "checksum": scores.iter().map(|&s| f64::from(s)).sum::<f64>(),
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}
