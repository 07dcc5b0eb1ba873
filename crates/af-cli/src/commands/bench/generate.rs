//! `af bench generate`: sampling throughput of af's own LM, and the LM features of what it drew
//! as the generate stage computes them (the forward LM's from the draw, decision 474, so
//! `features_per_second` times the backward LM's pass and the forward LM's one pass over each
//! context), and the two one after the other.

use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;

use super::{machine, PrecisionArg};

#[derive(clap::Args)]
pub struct GenerateArgs {
    #[arg(long, default_value_t = 10_000)]
    vocab: i64,
    #[arg(long, default_value_t = 512)]
    embedding: i64,
    #[arg(long, default_value_t = 512)]
    hidden: i64,
    #[arg(long, default_value_t = 1)]
    layers: i64,
    /// Contexts sampled together in one batch.
    #[arg(long, default_value_t = 16)]
    contexts: usize,
    /// Endings drawn per context in one batch.
    #[arg(long, default_value_t = 1023)]
    per_context: usize,
    /// Tokens in each synthetic context.
    #[arg(long, default_value_t = 30)]
    context_tokens: usize,
    #[arg(long, default_value_t = 25)]
    max_tokens: usize,
    /// Timed batches (after one warm-up batch).
    #[arg(long, default_value_t = 3)]
    batches: usize,
    /// auto, cpu, cuda or cuda:N.
    #[arg(long, default_value = "auto")]
    device: String,
    /// auto (mixed on a GPU), fp32 or mixed (CUDA autocast).
    #[arg(long, value_enum, default_value = "auto")]
    precision: PrecisionArg,
    /// Sequences per batch when timing the LM features of the sampled endings.
    #[arg(long, default_value_t = 16_384)]
    feature_batch: usize,
    /// Nucleus sampling, as `[generate] top-p` (1: off). The weights are random, so the
    /// nucleus holds thousands of tokens, more than a trained LM's (a median of about 1,500 of
    /// 6,000 for af's 256-d LMs): on a GPU, where the nucleus is looked for among the top 512
    /// tokens first, this times the truncation's worst case.
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// Locally typical sampling, as `[generate] typical-p` (1: off): a sort of the whole
    /// vocabulary per step.
    #[arg(long, default_value_t = 1.0)]
    typical_p: f64,
}

pub fn run(args: GenerateArgs) -> anyhow::Result<ExitCode> {
    let GenerateArgs {
        vocab,
        embedding,
        hidden,
        layers,
        contexts,
        per_context,
        context_tokens,
        max_tokens,
        batches,
        device,
        precision,
        feature_batch,
        top_p,
        typical_p,
    } = args;
    anyhow::ensure!(
        top_p > 0.0 && top_p <= 1.0 && typical_p > 0.0 && typical_p <= 1.0,
        "--top-p {top_p}, --typical-p {typical_p}: each must be in (0, 1]"
    );
    use af_nn::lm::{BiLm, LmShape, BOS};
    use af_nn::runtime::in_precision;
    use af_nn::sample::{
        items_features, sample, EndingToScore, ItemEndings, SampleJob, SampleSettings,
    };
    let device = crate::commands::device_named(&device)?;
    let mixed = af_core::config::Precision::from(precision).mixed_on(device.is_cuda());
    tch::manual_seed(1);
    let vs = tch::nn::VarStore::new(device);
    let lm = BiLm::new(
        &vs.root(),
        LmShape {
            vocab,
            embedding,
            hidden,
            layers,
            dropout: 0.0,
        },
    );
    // Weights are random: speed does not depend on them. Token 4 stops an ending.
    let settings = SampleSettings {
        max_tokens,
        temperature: 1.0,
        top_k: 0,
        top_p,
        typical_p,
        stop: vec![4],
        device,
    };
    let prefixes: Vec<Vec<i64>> = (0..contexts)
        .map(|c| {
            std::iter::once(BOS)
                .chain((0..context_tokens).map(|t| 5 + ((c * 31 + t * 7) as i64 % (vocab - 5))))
                .collect()
        })
        .collect();
    let uniforms: Vec<f32> = (0..per_context * max_tokens)
        .map(|i| ((i * 2_654_435_761) % 1000) as f32 / 1000.0)
        .collect();
    let jobs: Vec<SampleJob> = prefixes
        .iter()
        .map(|p| SampleJob {
            prefix: p,
            count: per_context,
            uniforms: &uniforms,
        })
        .collect();
    let _ = in_precision(mixed, device, || sample(&lm, &jobs, &settings)); // warm-up
    let start = Instant::now();
    let mut endings = 0usize;
    let mut last = Vec::new();
    for _ in 0..batches {
        last = in_precision(mixed, device, || sample(&lm, &jobs, &settings));
        endings += last.iter().map(Vec::len).sum::<usize>();
    }
    let seconds = start.elapsed().as_secs_f64();
    // The LM features of the last batch's endings, as the generate stage scores them: the
    // forward LM's from the draw, the backward LM's in a pass of their own.
    let items: Vec<ItemEndings> = prefixes
        .iter()
        .zip(&last)
        .map(|(p, drawn)| ItemEndings {
            s: &p[1..],
            n: &[],
            endings: drawn.iter().map(EndingToScore::from).collect(),
        })
        .collect();
    let scored: usize = items.iter().map(|i| i.endings.len()).sum();
    let start = Instant::now();
    let _ = in_precision(mixed, device, || {
        items_features(
            &lm,
            &items,
            feature_batch,
            af_nn::lm::logit_budget(device),
            device,
        )
    });
    let feature_seconds = start.elapsed().as_secs_f64();
    // Drawing and scoring one after the other, per ending: what the stage pays before its
    // deduplication, validity rules and Parquet.
    let both = seconds / endings as f64 + feature_seconds / scored as f64;
    let out = json!({
        "benchmark": "generate",
        "machine": machine(),
        "device": format!("{device:?}"),
        "torch_threads": tch::get_num_threads(),
        "lm": {"vocab": vocab, "embedding": embedding, "hidden": hidden, "layers": layers},
        "contexts_per_batch": contexts,
        "endings_per_context": per_context,
        "sequences_per_batch": contexts * per_context,
        "max_tokens": max_tokens,
        "top_p": top_p,
        "typical_p": typical_p,
        "batches": batches,
        "precision": if mixed { "mixed" } else { "fp32" },
        "endings": endings,
        "seconds": seconds,
        "endings_per_second": endings as f64 / seconds,
        "feature_batch": feature_batch,
        "featured_endings": scored,
        "feature_seconds": feature_seconds,
        "features_per_second": scored as f64 / feature_seconds,
        "sampled_and_scored_per_second": 1.0 / both,
        "sampled_and_scored_over_sampling": (seconds / endings as f64) / both,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}
