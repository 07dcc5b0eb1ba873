//! The `generate` stage: for every item, up to N unique endings sampled from the LM of its fold
//! (which never saw the item), with the LM features of each and of the gold ending, written to the
//! candidate pool (`generate/pool/part-*.parquet`).
//!
//! Items are processed in blocks of `block-items`, in item order. A block is the unit of work: its
//! part file appears whole when it is done, a resumed run skips finished blocks, `--shard I/N`
//! takes the blocks with `block % N == I`, and every block is computed the same way whatever
//! the sharding, with random numbers drawn from per-item seeds, so the merged pool equals an
//! unsharded run's.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use af_core::{Candidate, Item};
use af_nn::lm::BiLm;
use af_nn::sample::{item_features, sample, SampleJob, SampleSettings};
use af_text::{detokenize, Vocab};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tch::{nn, Device};

use super::lm::{encode, load_fold, load_vocab};
use crate::stage::{StageContext, StageName};

/// The random stream of one item in one sampling round.
fn item_rng(seed: u64, item_index: usize, round: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6765_6e65_7261_7465);
    rng.set_stream(((item_index as u64) << 8) | round as u64);
    rng
}

struct Encoded {
    s: Vec<i64>,
    n: Vec<i64>,
    v: Vec<i64>,
    prefix: Vec<i64>,
}

/// Samples and scores one block; returns its rows (gold first for each item).
#[allow(clippy::too_many_arguments)]
fn run_block(
    block: &[(usize, &Item)],
    models: &HashMap<u32, (nn::VarStore, BiLm)>,
    vocab: &Vocab,
    settings: &SampleSettings,
    endings: usize,
    max_rounds: usize,
    batch: usize,
    seed: u64,
    device: Device,
) -> Vec<Candidate> {
    let enc: Vec<Encoded> = block
        .iter()
        .map(|(_, item)| {
            let (s, n, v) = (encode(vocab, &item.context), encode(vocab, &item.noun_phrase), encode(vocab, &item.ending));
            let prefix = [&[af_nn::lm::BOS][..], &s, &n].concat();
            Encoded { s, n, v, prefix }
        })
        .collect();
    let mut seen: Vec<HashSet<Vec<i64>>> = enc.iter().map(|e| HashSet::from([e.v.clone()])).collect();
    let mut found: Vec<Vec<Vec<i64>>> = vec![Vec::new(); block.len()];
    let t = settings.max_tokens;
    for round in 0..max_rounds {
        // Duplicates are common for short contexts: ask for more than is missing.
        let wanted: Vec<usize> = found
            .iter()
            .map(|f| {
                let missing = endings - f.len();
                if missing == 0 { 0 } else { missing + missing / 4 + 8 }
            })
            .collect();
        if wanted.iter().all(|&w| w == 0) {
            break;
        }
        let uniforms: Vec<Vec<f32>> = block
            .iter()
            .zip(&wanted)
            .map(|((index, _), &w)| {
                let mut rng = item_rng(seed, *index, round);
                (0..w * t).map(|_| rng.random::<f32>()).collect()
            })
            .collect();
        // One model per fold: jobs of a fold together, in batches of at most `batch` sequences.
        let mut by_fold: Vec<(u32, Vec<usize>)> = Vec::new();
        for (i, (_, item)) in block.iter().enumerate() {
            if wanted[i] == 0 {
                continue;
            }
            match by_fold.iter_mut().find(|(f, _)| *f == item.fold) {
                Some((_, v)) => v.push(i),
                None => by_fold.push((item.fold, vec![i])),
            }
        }
        for (fold, members) in by_fold {
            let (_, lm) = &models[&fold];
            let mut start = 0;
            while start < members.len() {
                let mut end = start;
                let mut seqs = 0;
                while end < members.len() && (end == start || seqs + wanted[members[end]] <= batch) {
                    seqs += wanted[members[end]];
                    end += 1;
                }
                let jobs: Vec<SampleJob> = members[start..end]
                    .iter()
                    .map(|&i| SampleJob { prefix: &enc[i].prefix, count: wanted[i], uniforms: &uniforms[i] })
                    .collect();
                let drawn = sample(lm, &jobs, settings);
                for (&i, endings_drawn) in members[start..end].iter().zip(drawn) {
                    for e in endings_drawn {
                        if found[i].len() == endings {
                            break;
                        }
                        if seen[i].insert(e.clone()) {
                            found[i].push(e);
                        }
                    }
                }
                start = end;
            }
        }
    }

    // Features of the gold and every candidate, batched per fold.
    let mut rows = Vec::new();
    for (i, (index, item)) in block.iter().enumerate() {
        let (_, lm) = &models[&item.fold];
        let e = &enc[i];
        let endings: Vec<&[i64]> = std::iter::once(e.v.as_slice()).chain(found[i].iter().map(Vec::as_slice)).collect();
        let feats = item_features(lm, &e.s, &e.n, &endings, batch, device);
        for (c, f) in feats.into_iter().enumerate() {
            let (ending, tokens, truncated) = if c == 0 {
                (item.ending.clone(), e.v.len() as u32, false)
            } else {
                let v = &found[i][c - 1];
                let words: Vec<&str> = v.iter().map(|&id| vocab.word(id as u32)).collect();
                (detokenize(&words), v.len() as u32, v.len() == t && !settings.stop.contains(v.last().unwrap_or(&0)))
            };
            rows.push(Candidate {
                item_index: *index as u32,
                item_id: item.id.clone(),
                fold: item.fold,
                candidate: c as u32,
                ending,
                tokens,
                truncated,
                features: f,
            });
        }
    }
    rows
}

#[derive(Serialize)]
struct GenerateReport {
    items: usize,
    endings_wanted: usize,
    endings_generated: usize,
    items_with_all_endings: usize,
    items_short: usize,
    share_with_all_endings: f64,
    truncated_share: f64,
    distinct_1: f64,
    distinct_2: f64,
    mean_gold_fwd_logppl_v_given_sn: f64,
    mean_generated_fwd_logppl_v_given_sn: f64,
}

/// Returns whether the pool is complete (every block done), so that the runner can record it.
pub fn run(ctx: &StageContext) -> anyhow::Result<bool> {
    let config = ctx.config;
    let g = &config.generate;
    let mut items = af_io::items::read_items(&ctx.stage_dir(StageName::Pairs).join("items.jsonl"))?;
    if g.limit_items > 0 && g.limit_items < items.len() {
        tracing::info!("generate: the first {} of {} items only ([generate] limit-items)", g.limit_items, items.len());
        items.truncate(g.limit_items);
    }
    let lm_dir = ctx.stage_dir(StageName::Lm);
    let vocab = load_vocab(&lm_dir)?;
    let device = super::device(config)?;
    let pool = ctx.dir.join("pool");
    std::fs::create_dir_all(&pool)?;

    let indexed: Vec<(usize, &Item)> = items.iter().enumerate().collect();
    let blocks: Vec<&[(usize, &Item)]> = indexed.chunks(g.block_items).collect();
    let (shard, shards) = ctx.shard.unwrap_or((0, 1));
    let mine: Vec<usize> = (0..blocks.len()).filter(|b| b % shards == shard).collect();
    let todo: Vec<usize> = mine.iter().copied().filter(|&b| !af_io::pool::part_path(&pool, b).exists()).collect();
    if todo.len() < mine.len() {
        tracing::info!("generate: resuming, {} of {} blocks already done", mine.len() - todo.len(), mine.len());
    }
    let stop: Vec<i64> = [".", "!", "?"].iter().map(|p| i64::from(vocab.id(p))).filter(|&id| id != 1).collect();
    let settings = SampleSettings { max_tokens: g.max_tokens, temperature: g.temperature, stop, device };
    let mut models = HashMap::new();
    if !todo.is_empty() {
        for fold in 0..config.pairs.folds {
            models.insert(fold, load_fold(config, &vocab, &lm_dir, fold, device)?);
        }
    }
    let todo_items: usize = todo.iter().map(|&b| blocks[b].len()).sum();
    let bar = crate::progress::bar(todo_items as u64, "items");
    let start = Instant::now();
    let mut generated = 0usize;
    for &b in &todo {
        let rows = run_block(blocks[b], &models, &vocab, &settings, g.endings, g.max_rounds, g.batch_sequences, config.run.seed, device);
        generated += rows.iter().filter(|r| !r.is_gold()).count();
        af_io::pool::write_part(&af_io::pool::part_path(&pool, b), &rows)?;
        bar.inc(blocks[b].len() as u64);
        bar.set_message(format!("{:.0} endings/s", generated as f64 / start.elapsed().as_secs_f64()));
    }
    bar.finish_and_clear();
    if !todo.is_empty() {
        tracing::info!(
            "generate: {generated} endings for {todo_items} items in {:.1} s ({:.0} endings/s)",
            start.elapsed().as_secs_f64(),
            generated as f64 / start.elapsed().as_secs_f64()
        );
    }
    let missing = (0..blocks.len()).filter(|&b| !af_io::pool::part_path(&pool, b).exists()).count();
    if missing > 0 {
        println!("generate: shard {shard}/{shards} done; {missing} blocks of other shards are missing. Run `af generate` without --shard once all shards finished, to check the pool and write its report.");
        return Ok(false);
    }
    let report = summarize(&pool, items.len(), g.endings)?;
    af_core::atomic::write(ctx.dir.join("report.json"), serde_json::to_string_pretty(&report)?.as_bytes())?;
    af_core::atomic::write(ctx.dir.join("samples.txt"), samples(&pool, &items, 8, 6)?.as_bytes())?;
    println!(
        "generate: {} endings for {} items; {:.1}% of items have all {}; distinct-1 {:.3}, distinct-2 {:.3}",
        report.endings_generated,
        report.items,
        100.0 * report.share_with_all_endings,
        g.endings,
        report.distinct_1,
        report.distinct_2
    );
    Ok(true)
}

/// A few items as text: context, noun phrase, the gold ending and the first generated ones.
fn samples(pool: &std::path::Path, items: &[Item], n_items: usize, per_item: usize) -> anyhow::Result<String> {
    let mut out = String::new();
    let Some(first) = af_io::pool::parts(pool)?.into_iter().next() else { return Ok(out) };
    let rows = af_io::pool::read_part(&first)?;
    let mut shown = 0;
    for item_rows in rows.chunk_by(|a, b| a.item_index == b.item_index) {
        let item = &items[item_rows[0].item_index as usize];
        out.push_str(&format!("{}\n  {} ...\n  gold: {}\n", item.context, item.noun_phrase, item.ending));
        for r in item_rows.iter().filter(|r| !r.is_gold()).take(per_item) {
            out.push_str(&format!("  gen:  {}\n", r.ending));
        }
        out.push('\n');
        shown += 1;
        if shown == n_items {
            break;
        }
    }
    Ok(out)
}

/// Pool statistics, read back from the part files one at a time.
fn summarize(pool: &std::path::Path, n_items: usize, endings: usize) -> anyhow::Result<GenerateReport> {
    let mut per_item: HashMap<u32, usize> = HashMap::new();
    let (mut generated, mut truncated) = (0usize, 0usize);
    let (mut uni, mut bi): (HashSet<String>, HashSet<(String, String)>) = (HashSet::new(), HashSet::new());
    let (mut n_uni, mut n_bi) = (0usize, 0usize);
    let (mut gold_ppl, mut gen_ppl) = (0.0f64, 0.0f64);
    let mut seen_items = HashSet::new();
    for part in af_io::pool::parts(pool)? {
        for row in af_io::pool::read_part(&part)? {
            seen_items.insert(row.item_index);
            if row.is_gold() {
                gold_ppl += f64::from(row.features[0]);
                continue;
            }
            generated += 1;
            truncated += usize::from(row.truncated);
            gen_ppl += f64::from(row.features[0]);
            *per_item.entry(row.item_index).or_default() += 1;
            let toks = af_text::tokenize::tokenize_owned(&row.ending);
            n_uni += toks.len();
            n_bi += toks.len().saturating_sub(1);
            for w in toks.windows(2) {
                bi.insert((w[0].clone(), w[1].clone()));
            }
            uni.extend(toks);
        }
    }
    anyhow::ensure!(seen_items.len() == n_items, "the pool covers {} items, the items file has {n_items}", seen_items.len());
    let full = per_item.values().filter(|&&c| c == endings).count();
    Ok(GenerateReport {
        items: n_items,
        endings_wanted: endings,
        endings_generated: generated,
        items_with_all_endings: full,
        items_short: n_items - full,
        share_with_all_endings: full as f64 / n_items.max(1) as f64,
        truncated_share: truncated as f64 / generated.max(1) as f64,
        distinct_1: uni.len() as f64 / n_uni.max(1) as f64,
        distinct_2: bi.len() as f64 / n_bi.max(1) as f64,
        mean_gold_fwd_logppl_v_given_sn: gold_ppl / n_items.max(1) as f64,
        mean_generated_fwd_logppl_v_given_sn: gen_ppl / generated.max(1) as f64,
    })
}
