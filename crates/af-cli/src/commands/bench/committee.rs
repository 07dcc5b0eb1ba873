//! `af bench committee`: one AF iteration of the committee on a synthetic table.

use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;

use super::{machine, PrecisionArg};

#[derive(clap::Args)]
pub struct CommitteeArgs {
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
}

pub fn run(args: CommitteeArgs) -> anyhow::Result<ExitCode> {
    let CommitteeArgs {
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
    } = args;
    use af_core::{CommitteeConfig, MemberName};
    use af_nn::committee::{score, train, CommitteeModel, Registry};
    let device = crate::commands::device_named(&device)?;
    let precision = af_core::config::Precision::from(precision);
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
