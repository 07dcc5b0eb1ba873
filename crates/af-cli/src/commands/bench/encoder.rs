//! `af bench encoder`: the pretrained sentence encoder's throughput, and its agreement with the CPU.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;

use super::{caption_sentences, default_encoder_dir, machine};

#[derive(clap::Args)]
pub struct EncoderArgs {
    /// A Hugging Face BERT-family directory (default: $AF_ENCODER_DIR, set by scripts/setup).
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, default_value_t = 2048)]
    sentences: usize,
    /// Sentences per forward pass (after sorting by length).
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Timed passes over the sentences (after one warm-up pass over a batch).
    #[arg(long, default_value_t = 1)]
    passes: usize,
    #[arg(long, default_value = "auto")]
    device: String,
    /// Half-precision weights and activations on CUDA (ignored on the CPU).
    #[arg(long)]
    half: bool,
    /// Random weights in the model's architecture (its config.json and tokenizer.json only):
    /// the same speed, for machines model.safetensors cannot be carried to.
    #[arg(long)]
    random_weights: bool,
    /// Also encode the first 256 sentences on the CPU in fp32 with the same weights and report
    /// the least cosine between the two (exit 1 under 0.9999 in fp32, 0.999 in fp16).
    #[arg(long)]
    check_cpu: bool,
    /// A TorchScript module (`scripts/export-torchscript`) instead of a BERT directory, with
    /// the tokenizer.json beside it.
    #[arg(long, conflicts_with_all = ["model", "random_weights", "half"])]
    torchscript: Option<PathBuf>,
    /// With --torchscript: tokens per text, special tokens included.
    #[arg(long, requires = "torchscript", default_value_t = af_nn::encoder::TORCHSCRIPT_DEFAULT_MAX_LENGTH)]
    max_length: usize,
}

pub fn run(args: EncoderArgs) -> anyhow::Result<ExitCode> {
    let EncoderArgs {
        model,
        sentences,
        batch,
        passes,
        device,
        half,
        random_weights,
        check_cpu,
        torchscript,
        max_length,
    } = args;
    use af_nn::encoder::{Encoder, EncoderOptions, EncoderSource};
    let source = match (torchscript, model) {
        (Some(module), _) => EncoderSource::TorchScript {
            tokenizer: module.with_file_name("tokenizer.json"),
            module,
        },
        (None, Some(dir)) => EncoderSource::Bert { dir },
        (None, None) => EncoderSource::Bert {
            dir: default_encoder_dir()?,
        },
    };
    let max_length = matches!(source, EncoderSource::TorchScript { .. }).then_some(max_length);
    let n = sentences;
    let device = crate::commands::device_named(&device)?;
    const SEED: i64 = 19;
    let load = |device: tch::Device, half: bool| {
        let options = EncoderOptions {
            batch_size: batch,
            max_length,
            half,
        };
        match &source {
            EncoderSource::Bert { dir } if random_weights => {
                Encoder::load_with_random_weights(dir, device, &options, SEED)
            }
            source => Encoder::open(source, device, &options),
        }
    };
    let start = Instant::now();
    let encoder = load(device, half)?;
    let load_seconds = start.elapsed().as_secs_f64();
    let texts = caption_sentences(n);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let tokens: usize = encoder.tokenize(&refs)?.iter().map(|e| e.len()).sum();
    let _ = encoder.encode(&refs[..batch.min(refs.len())])?; // warm-up
    let start = Instant::now();
    let mut checksum = 0.0;
    for _ in 0..passes.max(1) {
        checksum += encoder
            .encode(&refs)?
            .sum(tch::Kind::Double)
            .double_value(&[]);
    }
    let seconds = start.elapsed().as_secs_f64();
    let encoded = n * passes.max(1);
    let half_used = half && device.is_cuda();
    let cpu_check = if check_cpu {
        let some = &refs[..refs.len().min(256)];
        let here = encoder.encode(some)?;
        let cpu = load(tch::Device::Cpu, false)?.encode(some)?;
        // Both are unit vectors: the dot product is the cosine.
        let least = (&here * &cpu)
            .sum_dim_intlist(1, false, tch::Kind::Double)
            .min()
            .double_value(&[]);
        let floor = if half_used { 0.999 } else { 0.9999 };
        Some((least, floor))
    } else {
        None
    };
    let out = json!({
        "benchmark": "encoder",
        "machine": machine(),
        "device": format!("{device:?}"),
        "torch_threads": tch::get_num_threads(),
        "model": source.path().display().to_string(),
        "backend": if matches!(source, EncoderSource::TorchScript { .. }) { "torchscript" } else { "bert" },
        "max_length": encoder.max_length(),
        "dim": encoder.dim(),
        "precision": if half_used { "fp16" } else { "fp32" },
        "weights": match &source {
            EncoderSource::TorchScript { .. } => "the module's",
            EncoderSource::Bert { .. } if random_weights => "random (seed 19)",
            EncoderSource::Bert { .. } => "model.safetensors",
        },
        "sentences": n,
        "passes": passes.max(1),
        "batch": batch,
        "mean_tokens": tokens as f64 / n.max(1) as f64,
        "load_seconds": load_seconds,
        "seconds": seconds,
        "sentences_per_second": encoded as f64 / seconds,
        "tokens_per_second": (tokens * passes.max(1)) as f64 / seconds,
        "checksum": checksum,
        "cpu_check": cpu_check.map(|(least, floor)| json!({"sentences": refs.len().min(256), "min_cosine": least, "floor": floor})),
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(match cpu_check {
        Some((least, floor)) if least < floor => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    })
}
