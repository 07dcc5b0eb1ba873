//! `af bench pretrained`: continuations per second of the pretrained generator, and where a
//! draw's time goes: the same batches are run again to one token only, which costs the prompt
//! pass (once per prompt, shared by its continuations) and one step; the rest is the steps.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;

use super::{caption_sentences, generator_file, machine};

#[derive(clap::Args)]
pub struct PretrainedArgs {
    /// A GGUF file (default: $AF_CAUSAL_LM, set by scripts/setup).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Prompts continued together in one batch.
    #[arg(long, default_value_t = 8)]
    prompts: usize,
    /// Continuations per prompt in one batch.
    #[arg(long, default_value_t = 32)]
    per_prompt: usize,
    /// Example caption pairs before each prompt, as `[generate] pretrained-examples`.
    #[arg(long, default_value_t = 0)]
    examples: usize,
    #[arg(long, default_value_t = 25)]
    max_tokens: usize,
    #[arg(long, default_value_t = 0.9)]
    top_p: f64,
    /// Locally typical sampling, as `[generate] typical-p` (1: off).
    #[arg(long, default_value_t = 1.0)]
    typical_p: f64,
    /// Timed batches (after one warm-up batch).
    #[arg(long, default_value_t = 2)]
    batches: usize,
    #[arg(long, default_value = "auto")]
    device: String,
    /// A random model of SmolLM2-135M's shape instead of a file (its speed is the
    /// architecture's; its text is noise, so endings run to --max-tokens).
    #[arg(long, conflicts_with = "model")]
    random_weights: bool,
}

pub fn run(args: PretrainedArgs) -> anyhow::Result<ExitCode> {
    let random = tempfile::tempdir()?;
    let path = generator_file(args.model.clone(), args.random_weights, random.path())?;
    bench(&path, &args)
}

/// The benchmark on the GGUF file at `path`.
fn bench(path: &std::path::Path, args: &PretrainedArgs) -> anyhow::Result<ExitCode> {
    let &PretrainedArgs {
        prompts,
        per_prompt,
        examples,
        max_tokens,
        top_p,
        typical_p,
        batches,
        ref device,
        ..
    } = args;
    use af_nn::causal_lm::{CausalLm, CausalSampleSettings, PromptJob};
    use rand::{Rng, SeedableRng};
    anyhow::ensure!(
        prompts > 0 && per_prompt > 0 && max_tokens > 0 && batches > 0,
        "--prompts, --per-prompt, --max-tokens and --batches must be positive"
    );
    anyhow::ensure!(
        top_p > 0.0 && top_p <= 1.0 && typical_p > 0.0 && typical_p <= 1.0,
        "--top-p {top_p}, --typical-p {typical_p}: each must be in (0, 1]"
    );
    let device = crate::commands::device_named(device)?;
    let start = Instant::now();
    let lm = CausalLm::load(path, device)?;
    let load_seconds = start.elapsed().as_secs_f64();
    let settings = CausalSampleSettings {
        typical_p,
        ..CausalSampleSettings::new(max_tokens, 1.0, 0, top_p)
    };
    let first_token = CausalSampleSettings {
        max_tokens: 1,
        ..settings.clone()
    };
    let sentences = caption_sentences((batches + 1) * prompts * (examples + 1) + 1);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(19);
    let (mut draws, mut words, mut seconds, mut prompt_seconds) = (0usize, 0usize, 0.0, 0.0);
    let mut steps = 0usize;
    for batch in 0..=batches {
        let texts: Vec<String> = (0..prompts)
            .map(|p| {
                let at = (batch * prompts + p) * (examples + 1);
                let mut text: String = (0..examples)
                    .map(|e| format!("{}\n", sentences[at + e]))
                    .collect();
                // The prompt ends as the stage's do: a context, then a noun phrase.
                text.push_str(&format!("{} He", sentences[at + examples]));
                text
            })
            .collect();
        let uniforms: Vec<Vec<f32>> = (0..prompts)
            .map(|_| {
                (0..per_prompt * max_tokens)
                    .map(|_| rng.random::<f32>())
                    .collect()
            })
            .collect();
        let jobs: Vec<PromptJob> = texts
            .iter()
            .zip(&uniforms)
            .map(|(t, u)| PromptJob {
                prompt: t,
                count: per_prompt,
                uniforms: u,
                lengths: &[],
            })
            .collect();
        let start = Instant::now();
        let out = lm.sample(&jobs, &settings)?;
        if batch > 0 {
            seconds += start.elapsed().as_secs_f64();
            draws += out.iter().map(Vec::len).sum::<usize>();
            words += out
                .iter()
                .flatten()
                .map(|e| e.split_whitespace().count())
                .sum::<usize>();
            steps += out
                .iter()
                .flatten()
                .map(|e| lm.prompt_tokens(e).unwrap_or(0))
                .sum::<usize>();
            let first: Vec<PromptJob> = jobs
                .iter()
                .map(|j| PromptJob {
                    uniforms: &j.uniforms[..j.count],
                    ..*j
                })
                .collect();
            let start = Instant::now();
            lm.sample(&first, &first_token)?;
            prompt_seconds += start.elapsed().as_secs_f64();
        }
    }
    let out = json!({
        "benchmark": "pretrained",
        "machine": machine(),
        "model": lm.name,
        "parameters": lm.parameters(),
        "load_seconds": load_seconds,
        "prompts": prompts,
        "per_prompt": per_prompt,
        "examples": examples,
        "max_tokens": max_tokens,
        "top_p": top_p,
        "typical_p": typical_p,
        "draws": draws,
        "mean_words": words as f64 / draws.max(1) as f64,
        "seconds": seconds,
        "draws_per_second": draws as f64 / seconds,
        // The same batches to one token: the prompt pass and a first step.
        "prompt_and_first_step_seconds": prompt_seconds,
        "prompt_share": prompt_seconds / seconds,
        "mean_ending_tokens": steps as f64 / draws.max(1) as f64,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}
