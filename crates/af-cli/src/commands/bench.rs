//! `af bench`: measurements printed as JSON, recorded in docs/benchmarks.md. Never timed tests.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Subcommand;
use serde_json::json;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Sampling throughput: endings per second for an LM of the given size and batch shape
    /// (sampling only, without deduplication or features). `--contexts 1` is the original's way:
    /// one context's endings per batch.
    Generate {
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
    },
    /// Tagger throughput on one core: tokens per second over a CoNLL-U file's sentences.
    Tagger {
        /// The sentences to tag (default: the project's caption fixture).
        #[arg(long)]
        conllu: Option<PathBuf>,
        /// Repeat the corpus until at least this many tokens were tagged.
        #[arg(long, default_value_t = 1_000_000)]
        min_tokens: usize,
        #[arg(long)]
        model: Option<PathBuf>,
    },
}

pub fn run(command: BenchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Generate { vocab, embedding, hidden, layers, contexts, per_context, context_tokens, max_tokens, batches, device } => {
            use af_nn::lm::{BiLm, LmShape, BOS};
            use af_nn::sample::{sample, SampleJob, SampleSettings};
            let device = af_nn::select_device(af_core::config::parse_device(&device).map_err(anyhow::Error::msg)?)?;
            tch::manual_seed(1);
            let vs = tch::nn::VarStore::new(device);
            let lm = BiLm::new(&vs.root(), LmShape { vocab, embedding, hidden, layers, dropout: 0.0 });
            // Weights are random: speed does not depend on them. Token 4 stops an ending.
            let settings = SampleSettings { max_tokens, temperature: 1.0, stop: vec![4], device };
            let prefixes: Vec<Vec<i64>> =
                (0..contexts).map(|c| std::iter::once(BOS).chain((0..context_tokens).map(|t| 5 + ((c * 31 + t * 7) as i64 % (vocab - 5)))).collect()).collect();
            let uniforms: Vec<f32> = (0..per_context * max_tokens).map(|i| ((i * 2_654_435_761) % 1000) as f32 / 1000.0).collect();
            let jobs: Vec<SampleJob> = prefixes.iter().map(|p| SampleJob { prefix: p, count: per_context, uniforms: &uniforms }).collect();
            let _ = sample(&lm, &jobs, &settings); // warm-up
            let start = Instant::now();
            let mut endings = 0usize;
            for _ in 0..batches {
                endings += sample(&lm, &jobs, &settings).iter().map(Vec::len).sum::<usize>();
            }
            let seconds = start.elapsed().as_secs_f64();
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
                "batches": batches,
                "endings": endings,
                "seconds": seconds,
                "endings_per_second": endings as f64 / seconds,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Tagger { conllu, min_tokens, model } => {
            let tagger = super::load_tagger(model.as_deref())?;
            let (source, sentences): (String, Vec<Vec<String>>) = match &conllu {
                Some(p) => (
                    p.display().to_string(),
                    af_io::conllu::read_conllu(p)?.into_iter().map(|s| s.words).collect(),
                ),
                None => {
                    let path = PathBuf::from("fixtures/text/splits.tsv");
                    let text = af_io::read_utf8(&path)?;
                    let rows = text.lines().skip(1).map(|l| af_text::tokenize::tokenize_owned(&l.replace('\t', " "))).collect();
                    (path.display().to_string(), rows)
                }
            };
            let per_pass: usize = sentences.iter().map(Vec::len).sum();
            anyhow::ensure!(per_pass > 0, "no tokens in {source}");
            // One core: the figure the issue asks for is single-threaded throughput.
            let start = Instant::now();
            let mut tagged = 0usize;
            let mut checksum = 0usize;
            while tagged < min_tokens {
                for s in &sentences {
                    checksum = checksum.wrapping_add(tagger.tag_ids(s).iter().sum::<usize>());
                    tagged += s.len();
                }
            }
            let seconds = start.elapsed().as_secs_f64();
            let out = json!({
                "benchmark": "tagger",
                "machine": machine(),
                "threads": 1,
                "source": source,
                "tokens": tagged,
                "seconds": seconds,
                "tokens_per_second": tagged as f64 / seconds,
                "checksum": checksum,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// What the figures were measured on.
pub fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_else(|| "unknown".into());
    json!({
        "cpu": cpu,
        "cores": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "os": std::env::consts::OS,
    })
}
