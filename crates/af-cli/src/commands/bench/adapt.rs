//! `af bench adapt`: training steps per second of the generator's caption adapter.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;

use super::{caption_sentences, generator_file, machine};

#[derive(clap::Args)]
pub struct AdaptArgs {
    /// A GGUF file (default: $AF_CAUSAL_LM, set by scripts/setup).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Examples per step, as `[generate] pretrained-adapt-batch`.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    #[arg(long, default_value_t = 8)]
    rank: usize,
    /// Example caption pairs before each prompt, as `[generate] pretrained-examples`.
    #[arg(long, default_value_t = 3)]
    examples: usize,
    /// Timed steps (after one warm-up step).
    #[arg(long, default_value_t = 5)]
    steps: usize,
    #[arg(long, default_value = "auto")]
    device: String,
    /// A random model of SmolLM2-135M's shape instead of a file (the architecture's speed).
    #[arg(long, conflicts_with = "model")]
    random_weights: bool,
}

pub fn run(args: AdaptArgs) -> anyhow::Result<ExitCode> {
    let random = tempfile::tempdir()?;
    let path = generator_file(args.model.clone(), args.random_weights, random.path())?;
    bench_adapt(&path, &args)
}

fn bench_adapt(path: &std::path::Path, args: &AdaptArgs) -> anyhow::Result<ExitCode> {
    let &AdaptArgs {
        batch,
        rank,
        examples,
        steps,
        ref device,
        random_weights,
        ..
    } = args;
    use af_nn::causal_lm::{AdaptExample, AdaptSettings, CausalLm};
    anyhow::ensure!(
        batch > 0 && rank > 0 && steps > 0,
        "--batch, --rank and --steps must be positive"
    );
    let device = crate::commands::device_named(device)?;
    let mut lm = CausalLm::load(path, device)?;
    let n = batch * (steps + 1);
    let sentences = caption_sentences(n * (examples + 2) + 1);
    let data: Vec<AdaptExample> = (0..n)
        .map(|i| {
            let at = i * (examples + 2);
            let mut prompt: String = (0..examples)
                .map(|e| format!("{}\n", sentences[at + e]))
                .collect();
            prompt.push_str(&format!("{} He", sentences[at + examples]));
            let ending = sentences[at + examples + 1]
                .split_once(' ')
                .map_or("walks away.", |(_, rest)| rest)
                .to_string();
            AdaptExample { prompt, ending }
        })
        .collect();
    let settings = |steps| AdaptSettings {
        steps,
        batch,
        rank,
        alpha: 2.0 * rank as f64,
        learning_rate: 1e-3,
        weight_decay: 0.01,
        seed: 19,
    };
    // One warm-up step (allocator, kernels), then the timed steps.
    lm.train_adapter(&data[..batch], &settings(1), &mut |_, _| {})?;
    let report = lm.train_adapter(&data, &settings(steps), &mut |_, _| {})?;
    let out = json!({
        "benchmark": "adapt",
        "machine": machine(),
        "model": lm.name,
        "weights": if random_weights { "random (seed 19)" } else { "file" },
        "parameters": lm.parameters(),
        "adapter_parameters": lm.adapter().map_or(0, |a| a.named().iter().map(|(_, t)| t.numel()).sum::<usize>()),
        "batch": batch,
        "rank": rank,
        "examples": examples,
        "steps": report.steps,
        "first_loss": report.losses.first(),
        "last_loss": report.losses.last(),
        "seconds": report.seconds,
        "steps_per_second": report.steps as f64 / report.seconds,
        "examples_per_second": (report.steps * batch) as f64 / report.seconds,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}
