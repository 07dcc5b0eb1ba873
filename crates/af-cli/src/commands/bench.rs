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
        /// auto (mixed on a GPU), fp32 or mixed (CUDA autocast).
        #[arg(long, value_enum, default_value = "auto")]
        precision: PrecisionArg,
        /// Sequences per batch when timing the LM features of the sampled endings.
        #[arg(long, default_value_t = 16_384)]
        feature_batch: usize,
        /// Nucleus sampling, as `[generate] top-p` (1: off). The weights are random, so the
        /// nucleus is nearly the whole vocabulary: this times the truncation's worst case (on the
        /// CPU every row is sorted whole; a trained LM's nuclei mostly fit in its top 512 tokens).
        #[arg(long, default_value_t = 1.0)]
        top_p: f64,
    },
    /// Committee speed on a synthetic pool: one AF iteration (train on 80% of the items' k+1
    /// options, score every pool candidate of the other 20%), sequences and candidates per second.
    /// `--check-cpu` scores the trained weights on the CPU too and reports the largest difference.
    Committee {
        #[arg(long, default_value_t = 4_000)]
        items: usize,
        /// Generated candidates per item (the gold makes one more).
        #[arg(long, default_value_t = 1023)]
        pool: usize,
        #[arg(long, default_value_t = 9)]
        k: usize,
        /// Tokens per candidate (noun phrase + ending), padded.
        #[arg(long, default_value_t = 32)]
        tokens: i64,
        #[arg(long, default_value_t = 20_000)]
        vocab: i64,
        /// Comma-separated members.
        #[arg(long, default_value = "mlp,bow,cnn,pos-lstm")]
        members: String,
        #[arg(long, default_value_t = 1)]
        epochs: usize,
        /// Candidates per scoring pass (default: the pipeline's `auto`, 8192 on a GPU, 512 on the
        /// CPU).
        #[arg(long)]
        score_batch: Option<usize>,
        #[arg(long, default_value_t = 64)]
        batch_items: usize,
        #[arg(long, default_value = "auto")]
        device: String,
        /// Scoring arithmetic: auto (mixed on a GPU), fp32 or mixed (CUDA autocast).
        #[arg(long, value_enum, default_value = "auto")]
        precision: PrecisionArg,
        /// Also score on the CPU (fp32) with the same weights and compare (exit 1 beyond the
        /// tolerance: 1e-2 for fp32, 5e-2 for mixed).
        #[arg(long)]
        check_cpu: bool,
    },
    /// AFLite speed: one iteration's m batched linear classifiers (each trained on t of the
    /// instances, full batch) on random features.
    Aflite {
        #[arg(long, default_value_t = 40_000)]
        instances: usize,
        #[arg(long, default_value_t = 1024)]
        dim: usize,
        #[arg(long, default_value_t = 64)]
        m: usize,
        #[arg(long, default_value_t = 10_000)]
        t: usize,
        #[arg(long, default_value_t = 100)]
        steps: usize,
        #[arg(long, default_value = "auto")]
        device: String,
    },
    /// The filter's pool loading on a synthetic pool of any size (no LM needed): index the
    /// Parquet parts, then build the committee's table one part at a time. Reports seconds, the
    /// table's bytes on the device and the peak host memory of the build, which the part size
    /// bounds rather than the pool size.
    Pool {
        #[arg(long, default_value_t = 2_000)]
        items: usize,
        /// Generated endings per item (the gold makes one more).
        #[arg(long, default_value_t = 1023)]
        per_item: usize,
        /// Items per Parquet part (as `[generate] block-items`).
        #[arg(long, default_value_t = 64)]
        block_items: usize,
        #[arg(long, default_value = "auto")]
        device: String,
        /// Where to write the synthetic pool (default: a temporary directory, removed after).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Pretrained encoder throughput: sentences per second for caption-like sentences (a
    /// context and a noun phrase + ending each, 10 to 40 tokens), tokenizing included.
    Encoder {
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
    },
    /// What the fine-tuned `encoder-ft` member costs: (context, second sentence) pairs per second
    /// fine-tuned (forward and backward, AdamW) and scored, on caption-like pairs, and what one
    /// AF iteration of the ActivityNet CPU config would take at those rates.
    EncoderFt {
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
    },
    /// The pretrained generator (`[generate] pretrained-endings`): continuations per second of
    /// caption-like prompts, sampled as the generate stage samples (top-p, stop at a sentence end).
    Pretrained {
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
        /// Timed batches (after one warm-up batch).
        #[arg(long, default_value_t = 2)]
        batches: usize,
        #[arg(long, default_value = "auto")]
        device: String,
        /// A random model of SmolLM2-135M's shape instead of a file (its speed is the
        /// architecture's; its text is noise, so endings run to --max-tokens).
        #[arg(long, conflicts_with = "model")]
        random_weights: bool,
    },
    /// Caption-adapter training of the pretrained generator (`[generate] pretrained-adapt-steps`):
    /// optimiser steps per second on caption-like "prompt -> ending" examples, trained as the
    /// generate stage trains a fold's adapter (low-rank adapters on the query and value
    /// projections, loss on the ending's tokens, AdamW).
    Adapt {
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
    /// The `lm-likelihood` member's scoring of a pool (the filter's code: a synthetic pool's
    /// candidates after their contexts, as `af eval` requests them, cached in a temporary
    /// directory): candidates per second. `--check-cpu` scores a few items on the CPU too and
    /// reports the largest difference (exit 1 beyond 1e-3 of a score).
    LmLikelihood {
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
        BenchCommand::Generate {
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
        } => {
            anyhow::ensure!(
                top_p > 0.0 && top_p <= 1.0,
                "--top-p {top_p}: must be in (0, 1]"
            );
            use af_nn::lm::{BiLm, LmShape, BOS};
            use af_nn::runtime::in_precision;
            use af_nn::sample::{items_features, sample, ItemEndings, SampleJob, SampleSettings};
            let device = super::device_named(&device)?;
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
                stop: vec![4],
                device,
            };
            let prefixes: Vec<Vec<i64>> = (0..contexts)
                .map(|c| {
                    std::iter::once(BOS)
                        .chain(
                            (0..context_tokens)
                                .map(|t| 5 + ((c * 31 + t * 7) as i64 % (vocab - 5))),
                        )
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
            // The LM features of the last batch's endings, as the generate stage scores them.
            let items: Vec<ItemEndings> = prefixes
                .iter()
                .zip(&last)
                .map(|(p, drawn)| ItemEndings {
                    s: &p[1..],
                    n: &[],
                    endings: drawn.iter().map(Vec::as_slice).collect(),
                })
                .collect();
            let scored: usize = items.iter().map(|i| i.endings.len()).sum();
            let start = Instant::now();
            let _ = in_precision(mixed, device, || {
                items_features(&lm, &items, feature_batch, device)
            });
            let feature_seconds = start.elapsed().as_secs_f64();
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
                "batches": batches,
                "precision": if mixed { "mixed" } else { "fp32" },
                "endings": endings,
                "seconds": seconds,
                "endings_per_second": endings as f64 / seconds,
                "feature_batch": feature_batch,
                "featured_endings": scored,
                "feature_seconds": feature_seconds,
                "features_per_second": scored as f64 / feature_seconds,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Committee {
            items,
            pool,
            k,
            tokens,
            vocab,
            members,
            epochs,
            score_batch,
            batch_items,
            device,
            precision,
            check_cpu,
        } => bench_committee(
            items,
            pool,
            k,
            tokens,
            vocab,
            &members,
            epochs,
            score_batch,
            batch_items,
            &device,
            precision.into(),
            check_cpu,
        ),
        BenchCommand::Aflite {
            instances,
            dim,
            m,
            t,
            steps,
            device,
        } => {
            use rand::{Rng, SeedableRng};
            let device = super::device_named(&device)?;
            anyhow::ensure!(
                t < instances,
                "t must be smaller than the number of instances"
            );
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
            let features: Vec<f32> = (0..instances * dim)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let labels: Vec<u32> = (0..instances).map(|i| (i % 2) as u32).collect();
            let settings = af_nn::aflite::ProbeSettings {
                steps,
                ..Default::default()
            };
            let probes = af_nn::aflite::BatchedProbes::new(
                &features, instances, dim, &labels, 2, settings, device,
            )?;
            let active: Vec<usize> = (0..instances).collect();
            let train: Vec<Vec<bool>> = (0..m)
                .map(|_| {
                    let mut side = vec![false; instances];
                    for i in rand::seq::index::sample(&mut rng, instances, t) {
                        side[i] = true;
                    }
                    side
                })
                .collect();
            let _ = probes.fit_predict(&active, &train[..1])?; // warm-up
            let start = Instant::now();
            let predicted = probes.fit_predict(&active, &train)?;
            let seconds = start.elapsed().as_secs_f64();
            let out = json!({
                "benchmark": "aflite",
                "machine": machine(),
                "device": format!("{device:?}"),
                "torch_threads": tch::get_num_threads(),
                "instances": instances, "dim": dim, "m": m, "t": t, "steps": steps,
                "predictions": predicted.len() * instances,
                "seconds_per_iteration": seconds,
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Pool {
            items,
            per_item,
            block_items,
            device,
            dir,
        } => {
            use af_io::pool_index::{write_synthetic_pool, Pool};
            use af_pipeline::table::candidate_table;
            let device = super::device_named(&device)?;
            let temp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| temp.path().to_path_buf());
            let start = Instant::now();
            write_synthetic_pool(&dir, items, per_item, block_items)?;
            let write_seconds = start.elapsed().as_secs_f64();
            let tagger = super::load_tagger(None)?;
            af_pipeline::resources::reset_host_peak();
            let base = af_pipeline::resources::host_peak_bytes();
            let start = Instant::now();
            let pool = Pool::load(&dir)?;
            let index_seconds = start.elapsed().as_secs_f64();
            let start = Instant::now();
            let (table, summary) =
                candidate_table(&pool, &af_core::CommitteeConfig::default(), &tagger, device)?;
            let table_seconds = start.elapsed().as_secs_f64();
            let out = json!({
                "benchmark": "pool",
                "machine": machine(),
                "device": format!("{device:?}"),
                "items": items,
                "rows": pool.rows,
                "block_items": block_items,
                "mean_tokens": summary.mean_tokens,
                "max_tokens": summary.max_tokens,
                "write_seconds": write_seconds,
                "index_seconds": index_seconds,
                "table_seconds": table_seconds,
                "rows_per_second": pool.rows as f64 / table_seconds,
                "table_device_bytes": table.bytes(),
                "host_bytes_before": base,
                "peak_host_bytes": af_pipeline::resources::host_peak_bytes(),
                "device_bytes_in_use": af_nn::runtime::device_bytes_in_use(device),
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Encoder {
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
        } => {
            use af_nn::encoder::EncoderSource;
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
            let max_length =
                matches!(source, EncoderSource::TorchScript { .. }).then_some(max_length);
            bench_encoder(
                source,
                max_length,
                sentences,
                batch,
                passes,
                &device,
                half,
                random_weights,
                check_cpu,
            )
        }
        BenchCommand::EncoderFt {
            model,
            questions,
            options,
            batch_items,
            scored,
            batch,
            max_length,
            device,
            random_weights,
        } => {
            let dir = match model {
                Some(dir) => dir,
                None => default_encoder_dir()?,
            };
            bench_encoder_ft(
                &dir,
                questions,
                options,
                batch_items,
                scored,
                batch,
                max_length,
                &device,
                random_weights,
            )
        }
        BenchCommand::Pretrained {
            model,
            prompts,
            per_prompt,
            examples,
            max_tokens,
            top_p,
            batches,
            device,
            random_weights,
        } => {
            let random = tempfile::tempdir()?;
            if random_weights {
                let path = random.path().join("random-smollm2-135m.gguf");
                af_nn::causal_lm::toy::write_random_llama(
                    &path,
                    af_nn::causal_lm::toy::LlamaShape::SMOLLM2_135M,
                    19,
                )?;
                return bench_pretrained(
                    &path, prompts, per_prompt, examples, max_tokens, top_p, batches, &device,
                );
            }
            let path = match model.or_else(af_nn::causal_lm::default_path) {
                Some(p) => p,
                None => anyhow::bail!("no --model and {} is not set: run scripts/setup (source <(scripts/setup --env))", af_nn::causal_lm::CAUSAL_LM_ENV),
            };
            bench_pretrained(
                &path, prompts, per_prompt, examples, max_tokens, top_p, batches, &device,
            )
        }
        BenchCommand::Adapt {
            model,
            batch,
            rank,
            examples,
            steps,
            device,
            random_weights,
        } => {
            let random = tempfile::tempdir()?;
            let path = generator_file(model, random_weights, random.path())?;
            bench_adapt(&path, batch, rank, examples, steps, &device, random_weights)
        }
        BenchCommand::LmLikelihood {
            model,
            items,
            per_item,
            batch_size,
            device,
            random_weights,
            check_cpu,
        } => {
            let random = tempfile::tempdir()?;
            let path = generator_file(model, random_weights, random.path())?;
            bench_lm_likelihood(
                &path,
                random_weights,
                items,
                per_item,
                batch_size,
                &device,
                check_cpu,
            )
        }
        BenchCommand::Tagger {
            conllu,
            min_tokens,
            model,
        } => {
            let tagger = super::load_tagger(model.as_deref())?;
            let (source, sentences): (String, Vec<Vec<String>>) = match &conllu {
                Some(p) => (
                    p.display().to_string(),
                    af_io::conllu::read_conllu(p)?
                        .into_iter()
                        .map(|s| s.words)
                        .collect(),
                ),
                None => {
                    let path = PathBuf::from("fixtures/text/splits.tsv");
                    let text = af_io::read_utf8(&path)?;
                    let rows = text
                        .lines()
                        .skip(1)
                        .map(|l| af_text::tokenize::tokenize_owned(&l.replace('\t', " ")))
                        .collect();
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

fn bench_lm_likelihood(
    path: &std::path::Path,
    random_weights: bool,
    items: usize,
    per_item: usize,
    batch_size: usize,
    device: &str,
    check_cpu: bool,
) -> anyhow::Result<ExitCode> {
    use af_io::pool_index::{write_synthetic_pool, Pool};
    use af_nn::committee::members::LmLikelihoodSource;
    use af_pipeline::lm_likelihood::{score_pool, Scorer};
    anyhow::ensure!(
        items > 0 && per_item > 0 && batch_size > 0,
        "--items, --per-item and --batch-size must be positive"
    );
    let device = super::device_named(device)?;
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
    let tokens: i64 = scores.tokens.iter().sum();
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
        for (a, b) in on_device.logprob.iter().zip(&cpu.logprob) {
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

#[allow(clippy::too_many_arguments)]
fn bench_pretrained(
    path: &std::path::Path,
    prompts: usize,
    per_prompt: usize,
    examples: usize,
    max_tokens: usize,
    top_p: f64,
    batches: usize,
    device: &str,
) -> anyhow::Result<ExitCode> {
    use af_nn::causal_lm::{CausalLm, CausalSampleSettings, PromptJob};
    use rand::{Rng, SeedableRng};
    anyhow::ensure!(
        prompts > 0 && per_prompt > 0 && max_tokens > 0 && batches > 0,
        "--prompts, --per-prompt, --max-tokens and --batches must be positive"
    );
    let device = super::device_named(device)?;
    let start = Instant::now();
    let lm = CausalLm::load(path, device)?;
    let load_seconds = start.elapsed().as_secs_f64();
    let settings = CausalSampleSettings::new(max_tokens, 1.0, 0, top_p);
    let sentences = caption_sentences((batches + 1) * prompts * (examples + 1) + 1);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(19);
    let (mut draws, mut words, mut seconds) = (0usize, 0usize, 0.0);
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
        "draws": draws,
        "mean_words": words as f64 / draws.max(1) as f64,
        "seconds": seconds,
        "draws_per_second": draws as f64 / seconds,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}

fn bench_adapt(
    path: &std::path::Path,
    batch: usize,
    rank: usize,
    examples: usize,
    steps: usize,
    device: &str,
    random_weights: bool,
) -> anyhow::Result<ExitCode> {
    use af_nn::causal_lm::{AdaptExample, AdaptSettings, CausalLm};
    anyhow::ensure!(
        batch > 0 && rank > 0 && steps > 0,
        "--batch, --rank and --steps must be positive"
    );
    let device = super::device_named(device)?;
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
    match model.or_else(af_nn::causal_lm::default_path) {
        Some(p) => Ok(p),
        None => anyhow::bail!(
            "no --model and {} is not set: run scripts/setup (source <(scripts/setup --env))",
            af_nn::causal_lm::CAUSAL_LM_ENV
        ),
    }
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

#[allow(clippy::too_many_arguments)]
fn bench_encoder_ft(
    dir: &std::path::Path,
    questions: usize,
    options: usize,
    batch_items: usize,
    scored: usize,
    batch: usize,
    max_length: usize,
    device: &str,
    random_weights: bool,
) -> anyhow::Result<ExitCode> {
    use af_nn::encoder::{CrossEncoder, FineTuneOptions};
    anyhow::ensure!(
        questions > 0 && options > 1 && scored > 0,
        "--questions, --scored must be positive and --options at least 2"
    );
    let device = super::device_named(device)?;
    let random_dir = tempfile::tempdir()?;
    let dir = if random_weights {
        af_nn::encoder::write_random_weights(dir, random_dir.path(), 19)?;
        random_dir.path()
    } else {
        dir
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

#[allow(clippy::too_many_arguments)]
fn bench_encoder(
    source: af_nn::encoder::EncoderSource,
    max_length: Option<usize>,
    n: usize,
    batch: usize,
    passes: usize,
    device: &str,
    half: bool,
    random_weights: bool,
    check_cpu: bool,
) -> anyhow::Result<ExitCode> {
    use af_nn::encoder::{Encoder, EncoderOptions, EncoderSource};
    let device = super::device_named(device)?;
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

/// A synthetic candidate table built on the device: random words, lengths 8..=T, the first three
/// tokens a noun phrase, Gaussian features.
fn synthetic_table(
    rows: i64,
    t: i64,
    vocab: i64,
    device: tch::Device,
) -> af_nn::table::CandidateTable {
    use tch::{Kind, Tensor};
    let pos_vocab = 120;
    let opts = (Kind::Int, device);
    let lengths = Tensor::randint_low(8, t + 1, [rows, 1], opts);
    let positions = Tensor::arange(t, opts).unsqueeze(0);
    let present = positions.lt_tensor(&lengths);
    let words = Tensor::randint_low(2, vocab, [rows, t], opts) * present.to_kind(Kind::Int);
    let pos = (words.remainder(pos_vocab - 2) + 2) * present.to_kind(Kind::Int);
    let indicator = (positions.ge(3).to_kind(Kind::Int) + 1) * present.to_kind(Kind::Int);
    af_nn::table::CandidateTable::from_tensors(
        words,
        pos,
        indicator,
        Tensor::randn([rows, 8], (Kind::Float, device)),
        vocab,
        pos_vocab,
        5,
    )
}

#[allow(clippy::too_many_arguments)]
fn bench_committee(
    items: usize,
    pool: usize,
    k: usize,
    tokens: i64,
    vocab: i64,
    members: &str,
    epochs: usize,
    score_batch: Option<usize>,
    batch_items: usize,
    device: &str,
    precision: af_core::config::Precision,
    check_cpu: bool,
) -> anyhow::Result<ExitCode> {
    use af_core::{CommitteeConfig, MemberName};
    use af_nn::committee::{score, train, CommitteeModel, Registry};
    let device = super::device_named(device)?;
    let registry = Registry::builtin();
    let members: Vec<MemberName> = members
        .split(',')
        .map(|m| {
            let name = MemberName::new(m.trim());
            registry.lookup(&name)?;
            Ok(name)
        })
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(
        k <= pool && items >= 5,
        "need k <= pool and at least 5 items"
    );
    tch::manual_seed(3);
    let width = pool + 1;
    let mut table = synthetic_table((items * width) as i64, tokens, vocab, device);
    if registry.encoded_member(&members)?.is_some() {
        // all-MiniLM-L6-v2's width; the encoding itself is once per run (`af bench encoder`),
        // an iteration pays only the head over the cached embeddings.
        use tch::{Kind, Tensor};
        let (rows, dim) = ((items * width) as i64, 384);
        let text = Tensor::randn([rows, dim], (Kind::Float, device));
        let contexts = Tensor::randn([items as i64, dim], (Kind::Float, device));
        let of =
            Tensor::arange(rows, (Kind::Int64, device)).divide_scalar_mode(width as i64, "floor");
        table.attach_encoded(af_nn::table::EncodedRows {
            text,
            contexts: Some((contexts, of)),
        })?;
    }
    let reads_lm_likelihood = members.iter().any(|m| {
        registry
            .get(m.as_str())
            .and_then(af_nn::committee::MemberKind::joint)
            .is_some_and(|j| {
                j.columns()
                    .contains(&af_nn::committee::Column::LmLikelihood)
            })
    });
    if reads_lm_likelihood {
        // The LM's scores are once per run (`af bench lm-likelihood`): an iteration pays only the
        // head over them.
        let rows = (items * width) as i64;
        let features = af_nn::committee::members::lm_likelihood::FEATURES.len() as i64;
        table.attach_lm_likelihood(tch::Tensor::randn(
            [rows, features],
            (tch::Kind::Float, device),
        ))?;
    }
    let score_batch =
        score_batch.map_or(af_core::ScoreBatch::Auto, af_core::ScoreBatch::Candidates);
    let config = CommitteeConfig {
        epochs,
        validation_share: 0.0,
        batch_items,
        score_batch,
        precision,
        ..Default::default()
    };
    let mixed = precision.mixed_on(device.is_cuda());
    let n_train = items * 4 / 5;
    let questions: Vec<Vec<i64>> = (0..n_train)
        .map(|i| {
            (0..=k)
                .map(|c| (i * width + c * (pool / k.max(1)).max(1) % width) as i64)
                .collect()
        })
        .collect();
    let vs = tch::nn::VarStore::new(device);
    let model = CommitteeModel::new(&vs.root(), &config, &registry, &members, true, &table)?;
    let sync = || {
        if let tch::Device::Cuda(d) = device {
            tch::Cuda::synchronize(d as i64);
        }
    };
    sync();
    let start = Instant::now();
    train(&vs, &model, &table, &questions, &config, 1)?;
    sync();
    let train_seconds = start.elapsed().as_secs_f64();
    let heldout: Vec<i64> = ((n_train * width) as i64..(items * width) as i64).collect();
    let start = Instant::now();
    let scores = score(&model, &table, &heldout, score_batch);
    let score_seconds = start.elapsed().as_secs_f64();
    let sequences = n_train * (k + 1) * epochs;
    let mut out = json!({
        "benchmark": "committee",
        "machine": machine(),
        "device": format!("{device:?}"),
        "torch_threads": tch::get_num_threads(),
        "members": members,
        "items": items,
        "candidates_per_item": width,
        "k": k,
        "tokens": tokens,
        "epochs": epochs,
        "score_precision": if mixed { "mixed" } else { "fp32" },
        "score_batch": score_batch.candidates_on(device.is_cuda()),
        "train_sequences": sequences,
        "train_seconds": train_seconds,
        "train_sequences_per_second": sequences as f64 / train_seconds,
        "scored_candidates": heldout.len(),
        "score_seconds": score_seconds,
        "score_candidates_per_second": heldout.len() as f64 / score_seconds,
        "iteration_seconds": train_seconds + score_seconds,
    });
    let mut code = ExitCode::SUCCESS;
    if check_cpu && device != tch::Device::Cpu {
        let rows: Vec<i64> = heldout.iter().copied().take(8 * width).collect();
        let mut cpu_vs = tch::nn::VarStore::new(tch::Device::Cpu);
        let cpu_table = table.to_device(tch::Device::Cpu);
        let cpu_model = CommitteeModel::new(
            &cpu_vs.root(),
            &config,
            &registry,
            &members,
            true,
            &cpu_table,
        )?;
        cpu_vs.copy(&vs)?;
        let on_cpu = score(&cpu_model, &cpu_table, &rows, score_batch);
        let (mut max_diff, mut max_abs) = (0f32, 0f32);
        // What AF acts on: each item's hardest candidate (the top score) per head.
        let (mut same_top, mut tops) = (0usize, 0usize);
        let argmax = |s: &[f32]| {
            s.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(i, _)| i)
        };
        for ((_, a), (_, b)) in scores.iter().zip(&on_cpu) {
            for (x, y) in a.iter().zip(b) {
                max_diff = max_diff.max((x - y).abs());
                max_abs = max_abs.max(y.abs());
            }
            for (x, y) in a[..b.len()].chunks(width).zip(b.chunks(width)) {
                same_top += usize::from(argmax(x) == argmax(y));
                tops += 1;
            }
        }
        let tolerance = if mixed { 5e-2 } else { 1e-2 };
        let ok = max_diff <= tolerance;
        out["cpu_check"] = json!({
            "candidates": rows.len(),
            "heads": on_cpu.len(),
            "max_abs_difference": max_diff,
            "max_abs_score": max_abs,
            "same_top_candidate_share": same_top as f64 / tops.max(1) as f64,
            "tolerance": tolerance,
            "ok": ok,
        });
        if !ok {
            code = ExitCode::FAILURE;
        }
    }
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(code)
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
