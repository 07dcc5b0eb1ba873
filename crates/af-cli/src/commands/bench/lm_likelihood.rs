//! `af bench lm-likelihood`: candidates per second of the `lm-likelihood` member's pool scoring.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;

use super::generator_file;

#[derive(clap::Args)]
pub struct LmLikelihoodArgs {
    /// A GGUF file (default: $AF_CAUSAL_LM, set by scripts/setup).
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, default_value_t = 64)]
    items: usize,
    /// Generated candidates per item (the gold makes one more).
    #[arg(long, default_value_t = 31)]
    per_item: usize,
    /// Sequences per forward pass (`[committee.member.lm-likelihood] batch-size`).
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    #[arg(long, default_value = "auto")]
    device: String,
    /// A random model of SmolLM2-135M's shape instead of a file.
    #[arg(long, conflicts_with = "model")]
    random_weights: bool,
    #[arg(long)]
    check_cpu: bool,
}

pub fn run(args: LmLikelihoodArgs) -> anyhow::Result<ExitCode> {
    let random = tempfile::tempdir()?;
    let path = generator_file(args.model.clone(), args.random_weights, random.path())?;
    bench_lm_likelihood(&path, &args)
}

fn bench_lm_likelihood(
    path: &std::path::Path,
    args: &LmLikelihoodArgs,
) -> anyhow::Result<ExitCode> {
    let &LmLikelihoodArgs {
        items,
        per_item,
        batch_size,
        ref device,
        random_weights,
        check_cpu,
        ..
    } = args;
    use af_io::pool_index::{write_synthetic_pool, Pool};
    use af_nn::committee::members::LmLikelihoodSource;
    use af_pipeline::lm_likelihood::{score_pool, Scorer};
    anyhow::ensure!(
        items > 0 && per_item > 0 && batch_size > 0,
        "--items, --per-item and --batch-size must be positive"
    );
    let device = crate::commands::device_named(device)?;
    let source = LmLikelihoodSource {
        model: path.to_path_buf(),
        batch_size,
    };
    let dir = tempfile::tempdir()?;
    write_synthetic_pool(dir.path(), items, per_item, 16)?;
    let pool = Pool::load(dir.path())?;
    let no = &af_pipeline::NoProgress;
    let sync = || {
        if let tch::Device::Cuda(d) = device {
            tch::Cuda::synchronize(d as i64);
        }
    };
    // Loading the model and a first pass (CUDA's kernels) are not the rate.
    let start = Instant::now();
    let lm = af_nn::causal_lm::CausalLm::load(path, device)?;
    let load_seconds = start.elapsed().as_secs_f64();
    let warm = tempfile::tempdir()?;
    write_synthetic_pool(warm.path(), 2, per_item.min(7), 16)?;
    let small = Pool::load(warm.path())?;
    let scorer = || Scorer::Loaded(&lm);
    let (on_device, _) = score_pool(&small, &source, &warm.path().join("a"), scorer(), no, 1024)?;
    sync();
    let start = Instant::now();
    let (scores, _) = score_pool(
        &pool,
        &source,
        &dir.path().join("cache"),
        scorer(),
        no,
        1024,
    )?;
    sync();
    let seconds = start.elapsed().as_secs_f64();
    // Every candidate is scored after its context and alone (decision 486): both count.
    let tokens: i64 = scores
        .tokens
        .iter()
        .chain(&scores.choices_only_tokens)
        .sum();
    let mut out = json!({
        "model": path.display().to_string(),
        "weights": if random_weights { "random (seed 19)" } else { "the file's" },
        "device": format!("{device:?}"),
        "items": items,
        "candidates": pool.rows,
        "batch_size": batch_size,
        "seconds": seconds,
        "load_seconds": load_seconds,
        "candidates_per_second": pool.rows as f64 / seconds,
        "continuation_tokens_per_second": tokens as f64 / seconds,
        "threads": tch::get_num_threads(),
    });
    let mut code = ExitCode::SUCCESS;
    if check_cpu {
        let (cpu, _) = score_pool(
            &small,
            &source,
            &warm.path().join("b"),
            Scorer::Load(tch::Device::Cpu),
            no,
            1024,
        )?;
        let (mut abs, mut rel) = (0f64, 0f64);
        // Both conditions the member reads: after the context and the ending alone.
        let device_scores = on_device.logprob.iter().chain(&on_device.choices_only);
        for (a, b) in device_scores.zip(cpu.logprob.iter().chain(&cpu.choices_only)) {
            abs = abs.max((a - b).abs());
            rel = rel.max((a - b).abs() / b.abs().max(1.0));
        }
        out["cpu_check"] = json!({
            "candidates": cpu.logprob.len(),
            "max_abs_difference": abs,
            "max_relative_difference": rel,
            "tolerance_relative": 1e-3,
        });
        if rel > 1e-3 || !rel.is_finite() {
            code = ExitCode::FAILURE;
        }
    }
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(code)
}
