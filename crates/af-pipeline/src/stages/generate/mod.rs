//! The `generate` stage: for every item, the candidate pool's wrong endings from the ending
//! sources of [`sources::sources`] in order (the question's own options, other items' golds, a
//! pretrained generator, and up to N unique endings sampled from af's LM of the item's fold, which
//! never saw the item), each scored by that LM with the gold ending (the LM features), written to
//! the candidate pool (`generate/pool/part-*.parquet`) with its `origin`.
//!
//! Items are processed in blocks of `block-items`, in item order. A block is the unit of work: its
//! part file appears whole when it is done, a resumed run skips finished blocks, `--shard I/N`
//! takes the blocks with `block % N == I`, and every block is computed the same way whatever
//! the sharding, with random numbers drawn from per-item seeds, so the merged pool equals an
//! unsharded run's.
//!
//! Every ending is checked against af-text's validity rules (second right answers, broken text,
//! length gaps): counted in the report, and kept out of the pool for the rules `[generate]
//! reject` names (more are sampled in later rounds).
//!
//! The device samples and scores block b+1 while a writer thread writes block b's part and adds
//! it to the pool statistics, so host memory holds at most two blocks' candidates (besides the
//! endings of the sources that run before the blocks), and the report needs no second pass over
//! the pool (blocks done by an earlier run or another shard are read back for it).

mod could_be_right;
mod report;
pub mod sources;

use std::collections::HashMap;
use std::time::Instant;

use anyhow::Context;

use af_core::config::GenerateConfig;
use af_core::{Candidate, Item, ValidityRule, GOLD_ORIGIN};
use af_nn::lm::BiLm;
use af_nn::lm_files::{load_fold, load_vocab, token_ids};
use af_nn::runtime::in_precision;
use af_nn::sample::{
    first_token_distribution, items_features, EndingToScore, ItemEndings, SampleSettings,
};
use af_text::validity::ValidityRules;
use af_text::{Tagger, Vocab};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tch::{nn, Device};

pub use report::{BlockTime, GenerateOutcome, GenerateReport, RuleCount, ValidityReport};
use report::{PoolStats, PrecisionReport};
use sources::{AfLms, Ending, EndingSource, Items, SourceContext};

use crate::progress::Progress;
use crate::runner::{StageContext, StageName};

/// The candidates every item needs before af's own LMs sample theirs: `[filter] k`, less the
/// `endings` they add. Shared endings fill an item up to it and the could-be-right check sets
/// none aside below it, so where either runs it shapes the pool (and the stage's fingerprint).
pub(crate) fn candidates_before_sampling(config: &af_core::Config) -> usize {
    config.filter.k.saturating_sub(config.generate.endings)
}

/// The random stream of one item in one sampling round.
pub(crate) fn item_rng(seed: u64, item_index: usize, round: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6765_6e65_7261_7465);
    rng.set_stream(((item_index as u64) << 8) | round as u64);
    rng
}

/// An item's context `s`, noun phrase `n` and gold ending `v` as LM ids, and the sampling prefix
/// `<bos> s n`.
pub(crate) struct ItemIds {
    s: Vec<i64>,
    n: Vec<i64>,
    v: Vec<i64>,
    prefix: Vec<i64>,
}

impl ItemIds {
    pub(crate) fn new(vocab: &Vocab, item: &Item) -> Self {
        let (s, n, v) = (
            token_ids(vocab, &item.context),
            token_ids(vocab, &item.noun_phrase),
            token_ids(vocab, &item.ending),
        );
        let prefix = [&[af_nn::lm::BOS][..], &s, &n].concat();
        Self { s, n, v, prefix }
    }
}

/// Each item's endings as af LM ids: those the source drew (the sampler's), else their text's.
pub(crate) fn endings_ids(vocab: &Vocab, endings: &[Vec<Ending>]) -> Vec<Vec<Vec<i64>>> {
    endings
        .iter()
        .map(|endings| {
            endings
                .iter()
                .map(|e| match &e.drawn {
                    Some(d) => d.tokens.clone(),
                    None => token_ids(vocab, &e.text),
                })
                .collect()
        })
        .collect()
}

/// The validity rules as the stage applies them (af-text's `validity`): which reject an ending,
/// the thresholds, and the tagger that reads the endings.
pub struct Validity<'a> {
    tagger: &'a Tagger,
    rules: ValidityRules,
    /// `[generate] reject`: the rules that turn an ending away.
    pub reject: &'a [ValidityRule],
}

impl Validity<'_> {
    /// The rules `ending` breaks (with the gold: every rule; without: the ending's own).
    pub fn broken<S: AsRef<str>>(&self, ending: &[S], gold: Option<&[S]>) -> Vec<ValidityRule> {
        let tags = self.tagger.tag(ending);
        af_text::validity::check(ending, &tags, gold, &self.rules)
    }

    /// Whether `[generate] reject` turns the ending `text` away, read against `gold` (its tokens).
    pub fn rejects(&self, text: &str, gold: &[String]) -> bool {
        !self.reject.is_empty()
            && self
                .broken(&af_text::tokenize_lowercase(text), Some(gold))
                .iter()
                .any(|r| self.reject.contains(r))
    }
}

/// Sizes the device batches of af's LMs to `[run] device-memory` (rows sampled and scored
/// together, logit elements per scoring batch) and logs the plan; the pretrained generator adds
/// its rows to it when it loads. Without a bound (the CPU, `auto`) all are as configured. The
/// scene check's encoder keeps its own batch size.
fn plan_device_batches(
    ctx: &StageContext,
    vocab: u64,
    device: Device,
) -> anyhow::Result<(usize, usize, af_core::memory::MemoryPlan)> {
    use af_core::memory;
    let (config, g, lm) = (ctx.config, &ctx.config.generate, &ctx.config.lm);
    let mut plan = crate::setup::memory_plan(config, device);
    let (e, h, l) = (lm.embedding as u64, lm.hidden as u64, lm.layers as u64);
    let resident = u64::from(config.pairs.folds) * memory::lstm_lm_bytes(vocab, e, h, l);
    // The sampler draws an item's first round whole, whatever the batch: its rows are the least.
    let first_round = if g.endings > 0 {
        g.endings + g.endings / 4 + 8
    } else {
        1
    };
    let rows = plan.size(
        "af's LM sampling and scoring rows",
        "[generate] batch-sequences",
        "rows",
        g.batch_sequences as u64,
        first_round as u64,
        memory::lstm_sampling_row_bytes(vocab, h, l, g.max_tokens as u64),
        resident,
    )?;
    let longest_row = vocab * (g.max_tokens as u64 + 2);
    let logits = plan.size(
        "af's LM feature scoring",
        "the LM logit budget",
        "logit elements",
        af_nn::lm::logit_budget(device) as u64,
        longest_row,
        memory::LM_FEATURE_BYTES_PER_LOGIT,
        resident,
    )?;
    tracing::info!("generate: {}", plan.line());
    Ok((rows as usize, logits as usize, plan))
}

/// The pretrained sentence encoder a `[generate]` check reads with (`key` names the check in the
/// error): `$AF_ENCODER_DIR`, else the first installed; its files checked (not its weights
/// loaded), so that a run stops before any source runs rather than when the check comes.
pub(crate) fn encoder_dir(key: &str) -> anyhow::Result<std::path::PathBuf> {
    let dir = af_nn::encoder::known_model_dirs()
        .into_iter()
        .next()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "[generate] {key} needs a pretrained sentence encoder and none was found: `scripts/setup` installs all-MiniLM-L6-v2 and sets {}",
                af_nn::encoder::ENCODER_DIR_ENV
            )
        })?;
    af_nn::encoder::inspect(&dir).with_context(|| {
        format!(
            "[generate] {key} reads with the sentence encoder in {}",
            dir.display()
        )
    })?;
    Ok(dir)
}

/// The sources `[generate]` asks for, in pool order.
fn enabled_sources(g: &GenerateConfig) -> Vec<Box<dyn EndingSource>> {
    sources::sources()
        .into_iter()
        .filter(|s| s.enabled(g))
        .collect()
}

/// The encoder of [`encoder_dir`], loaded on `device`, and its directory.
pub(crate) fn load_encoder(
    key: &str,
    device: Device,
) -> anyhow::Result<(af_nn::encoder::Encoder, std::path::PathBuf)> {
    let dir = encoder_dir(key)?;
    let encoder =
        af_nn::encoder::Encoder::load(&dir, device, &af_nn::encoder::EncoderOptions::default())
            .with_context(|| {
                format!(
                    "loading the encoder of [generate] {key} from {}",
                    dir.display()
                )
            })?;
    Ok((encoder, dir))
}

#[cfg(test)]
impl<'a> Validity<'a> {
    /// The rules the sources' tests read endings with: near copies from 0.8 of the gold's words,
    /// length gaps over 5 tokens, `reject` turning endings away.
    pub(crate) fn for_tests(tagger: &'a Tagger, reject: &'a [ValidityRule]) -> Self {
        Self {
            tagger,
            rules: ValidityRules {
                near_copy_overlap: 0.8,
                max_length_gap: 5,
            },
            reject,
        }
    }
}

/// The pool is complete when every block is done; only then does the runner record the stage.
pub fn run(ctx: &StageContext) -> anyhow::Result<GenerateOutcome> {
    let config = ctx.config;
    let g = &config.generate;
    let all = af_io::items::read_items(&ctx.stage_dir(super::pairs::NAME).join("items.jsonl"))?;
    let questions = if g.limit_items > 0 && g.limit_items < all.len() {
        tracing::info!(
            "generate: the first {} of {} items only ([generate] limit-items)",
            g.limit_items,
            all.len()
        );
        g.limit_items
    } else {
        all.len()
    };
    let lm_dir = ctx.stage_dir(super::lm::NAME);
    let vocab = load_vocab(&lm_dir)?;
    let device = crate::setup::device(config)?;
    let mixed = g.precision.mixed_on(device.is_cuda());
    let precision = if mixed { "mixed" } else { "fp32" };
    let pool = ctx.dir.join("pool");
    std::fs::create_dir_all(&pool)?;
    let tagger = crate::setup::load_tagger(config.tagger.model.as_deref())?;
    let validity = Validity {
        tagger: &tagger,
        rules: ValidityRules {
            near_copy_overlap: g.near_copy_overlap,
            max_length_gap: g.max_length_gap,
        },
        reject: &g.reject,
    };
    // Sized before any source runs, so that a run that cannot fit stops before its work.
    let (rows, logit_budget, plan) = plan_device_batches(ctx, vocab.len() as u64, device)?;
    let memory = std::sync::Mutex::new(plan);
    let mut sources = enabled_sources(g);
    if let Some(w) = sources
        .windows(2)
        .find(|w| w[0].streams() && !w[1].streams())
    {
        anyhow::bail!(
            "ending source `{}` runs before the blocks and cannot follow `{}`, which streams: list it earlier in generate::sources::sources()",
            w[1].name(),
            w[0].name()
        );
    }
    let items: Vec<(usize, &Item)> = all[..questions].iter().enumerate().collect();
    // Each question's endings from the sources that run before the blocks, in their order.
    let mut before: Vec<Vec<Ending>> = vec![Vec::new(); questions];
    let mut source_ctx = SourceContext {
        config,
        dir: &ctx.dir,
        all: &all,
        questions,
        validity: &validity,
        device,
        memory: &memory,
        lms: None,
    };
    for source in sources.iter_mut() {
        source.prepare(&source_ctx)?;
    }
    for source in sources.iter_mut().filter(|s| !s.streams()) {
        let bar = match source.bar_label() {
            Some(label) => ctx.progress.bar(label, questions as u64),
            None => crate::progress::NoProgress.bar("", 0),
        };
        let whole = Items {
            block: None,
            items: &items,
        };
        let endings = source.endings(&whole, &before, &source_ctx, bar.as_ref())?;
        bar.finish();
        join(source.as_ref(), &mut before, endings)?;
    }
    ctx.record_memory_plan(memory.lock().unwrap_or_else(|e| e.into_inner()).clone());
    let question_refs: Vec<&Item> = all[..questions].iter().collect();
    let set_aside = could_be_right::set_aside(&question_refs, &mut before, &source_ctx)?;

    let blocks: Vec<&[(usize, &Item)]> = items.chunks(g.block_items).collect();
    let (shard, shards) = ctx.shard.unwrap_or((0, 1));
    let mine: Vec<usize> = (0..blocks.len()).filter(|b| b % shards == shard).collect();
    let todo: Vec<usize> = mine
        .iter()
        .copied()
        .filter(|&b| !af_io::pool::part_path(&pool, b).exists())
        .collect();
    if todo.len() < mine.len() {
        tracing::info!(
            "generate: resuming, {} of {} blocks already done",
            mine.len() - todo.len(),
            mine.len()
        );
    }
    let stop: Vec<i64> = [".", "!", "?"]
        .iter()
        .map(|p| i64::from(vocab.id(p)))
        .filter(|&id| id != 1)
        .collect();
    let mut lms = AfLms {
        vocab: &vocab,
        models: HashMap::new(),
        settings: SampleSettings {
            max_tokens: g.max_tokens,
            temperature: g.temperature,
            top_k: g.top_k,
            top_p: g.top_p,
            typical_p: g.typical_p,
            stop,
            device,
        },
        mixed,
        batch: rows,
        logit_budget,
    };
    if !todo.is_empty() {
        for fold in 0..config.pairs.folds {
            lms.models
                .insert(fold, load_fold(&config.lm, &vocab, &lm_dir, fold, device)?);
        }
    }
    let check_path = ctx.dir.join("precision-check.json");
    if mixed && !todo.is_empty() {
        let check = precision_check(
            blocks[todo[0]],
            &lms.models,
            &vocab,
            &lms.settings,
            lms.batch,
            lms.logit_budget,
            device,
        );
        tracing::info!(
            "generate: mixed precision moves the first token's distribution by {:.2e} (mean TV distance) and the LM features by at most {:.3}",
            check.first_token_tv_mean,
            check.feature_max_abs_difference.iter().copied().fold(0f32, f32::max)
        );
        af_core::atomic::write(
            &check_path,
            serde_json::to_string_pretty(&check)?.as_bytes(),
        )?;
    }
    source_ctx.lms = Some(&lms);
    let todo_items: usize = todo.iter().map(|&b| blocks[b].len()).sum();
    let bar = ctx.progress.bar("items", todo_items as u64);
    let start = Instant::now();
    let mut time = BlockTime {
        blocks: todo.len(),
        ..BlockTime::default()
    };
    // The writer: writes each block's part and counts it, while the device goes on.
    let (sender, receiver) = std::sync::mpsc::sync_channel::<(usize, Vec<Candidate>)>(1);
    let (mut stats, writing) = std::thread::scope(|scope| -> anyhow::Result<(PoolStats, f64)> {
        let writer = scope.spawn(|| -> anyhow::Result<(PoolStats, f64)> {
            let mut stats = PoolStats::default();
            let mut writing = 0.0;
            for (b, rows) in receiver {
                let began = Instant::now();
                af_io::pool::write_part(&af_io::pool::part_path(&pool, b), &rows)?;
                stats.add(b, &rows, &validity);
                writing += began.elapsed().as_secs_f64();
                bar.inc(blocks[b].len() as u64);
                bar.set_message(format!(
                    "{:.0} endings/s",
                    stats.generated as f64 / start.elapsed().as_secs_f64()
                ));
            }
            Ok((stats, writing))
        });
        let produced = (|| -> anyhow::Result<()> {
            for &b in &todo {
                let block = blocks[b];
                let first = block[0].0;
                let mut endings = before[first..first + block.len()].to_vec();
                for source in sources.iter_mut().filter(|s| s.streams()) {
                    let these = Items {
                        block: Some(b),
                        items: block,
                    };
                    let began = Instant::now();
                    let new = source.endings(
                        &these,
                        &endings,
                        &source_ctx,
                        crate::progress::NoProgress.bar("", 0).as_ref(),
                    )?;
                    *time.sources.entry(source.name()).or_default() +=
                        began.elapsed().as_secs_f64();
                    join(source.as_ref(), &mut endings, new)?;
                }
                let began = Instant::now();
                let rows = score_block(block, &endings, &lms, device);
                time.scoring += began.elapsed().as_secs_f64();
                if sender.send((b, rows)).is_err() {
                    break; // the writer failed: its error is reported below
                }
            }
            Ok(())
        })();
        drop(sender);
        let written = writer
            .join()
            .map_err(|_| anyhow::anyhow!("the pool writer panicked"))?;
        produced?;
        written
    })?;
    bar.finish();
    time.seconds = start.elapsed().as_secs_f64();
    time.writing = writing;
    if !todo.is_empty() {
        let generated = stats.generated;
        tracing::info!(
            "generate: {generated} endings for {todo_items} items in {:.1} s ({:.0} endings/s)",
            time.seconds,
            generated as f64 / time.seconds
        );
        tracing::info!("generate: {}", time.line());
    }
    let missing = (0..blocks.len())
        .filter(|&b| !af_io::pool::part_path(&pool, b).exists())
        .count();
    if missing > 0 {
        return Ok(GenerateOutcome::Shard {
            shard,
            shards,
            missing_blocks: missing,
        });
    }
    // Blocks written by an earlier run or another shard are read back to be counted.
    for b in 0..blocks.len() {
        if !stats.logppl.contains_key(&b) {
            let mut rows = af_io::pool::read_part(&af_io::pool::part_path(&pool, b))?;
            infer_origins(&mut rows, &before);
            stats.add(b, &rows, &validity);
        }
    }
    let rejected = sources::sampled::rejected_draws(&ctx.dir, blocks.len())?;
    let validity_report = stats.validity_report(&validity, &rejected);
    let check = if mixed && check_path.exists() {
        Some(serde_json::from_str(&std::fs::read_to_string(
            &check_path,
        )?)?)
    } else {
        None
    };
    let precision: PrecisionReport = (precision, check);
    let summaries = sources
        .iter()
        .filter_map(|s| s.summary().map(|summary| (s.name(), summary)))
        .chain(set_aside.map(|summary| (could_be_right::NAME, summary)))
        .collect();
    let questions_only = &all[..questions];
    let mut report = stats.report(
        questions_only,
        g.endings,
        summaries,
        precision,
        validity_report,
    )?;
    report.block_time = (!todo.is_empty()).then_some(time);
    af_core::atomic::write(
        ctx.dir.join("report.json"),
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    let order: Vec<&'static str> = sources.iter().map(|s| s.name()).collect();
    af_core::atomic::write(
        ctx.dir.join("samples.txt"),
        report::samples(&pool, questions_only, &before, &order, 8, 6)?.as_bytes(),
    )?;
    Ok(GenerateOutcome::Complete(Box::new(report)))
}

/// Adds a source's endings to each item's, marked with its name.
fn join(
    source: &dyn EndingSource,
    endings: &mut [Vec<Ending>],
    new: Vec<Vec<Ending>>,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        new.len() == endings.len(),
        "ending source `{}` gave endings for {} items of {}",
        source.name(),
        new.len(),
        endings.len()
    );
    for (endings, new) in endings.iter_mut().zip(new) {
        endings.extend(new.into_iter().map(|e| Ending {
            origin: source.name(),
            ..e
        }));
    }
    Ok(())
}

/// The rows of one block (gold first for each item, then its endings in order), each scored by
/// the LM of the item's fold: the block's items of one fold together.
fn score_block(
    block: &[(usize, &Item)],
    endings: &[Vec<Ending>],
    lms: &AfLms,
    device: Device,
) -> Vec<Candidate> {
    let vocab = lms.vocab;
    let item_ids: Vec<ItemIds> = block
        .iter()
        .map(|(_, item)| ItemIds::new(vocab, item))
        .collect();
    let ids = endings_ids(vocab, endings);
    let mut feats: Vec<Vec<[f32; 8]>> = vec![Vec::new(); block.len()];
    let mut folds: Vec<u32> = block.iter().map(|(_, item)| item.fold).collect();
    folds.sort_unstable();
    folds.dedup();
    for fold in folds {
        let members: Vec<usize> = (0..block.len())
            .filter(|&i| block[i].1.fold == fold)
            .collect();
        let jobs: Vec<ItemEndings> = members
            .iter()
            .map(|&i| ItemEndings {
                s: &item_ids[i].s,
                n: &item_ids[i].n,
                endings: std::iter::once(item_ids[i].v.as_slice().into())
                    .chain(ids[i].iter().zip(&endings[i]).map(|(ids, e)| {
                        e.drawn
                            .as_ref()
                            .map_or_else(|| ids.as_slice().into(), EndingToScore::from)
                    }))
                    .collect(),
            })
            .collect();
        let (_, lm) = &lms.models[&fold];
        for (&i, f) in members.iter().zip(in_precision(lms.mixed, device, || {
            items_features(lm, &jobs, lms.batch, lms.logit_budget, device)
        })) {
            feats[i] = f;
        }
    }
    let mut rows = Vec::new();
    for (i, (index, item)) in block.iter().enumerate() {
        for (c, f) in std::mem::take(&mut feats[i]).into_iter().enumerate() {
            let (ending, tokens, truncated, origin) = if c == 0 {
                (item.ending.clone(), item_ids[i].v.len(), false, GOLD_ORIGIN)
            } else {
                let e = &endings[i][c - 1];
                (e.text.clone(), ids[i][c - 1].len(), e.truncated, e.origin)
            };
            rows.push(Candidate {
                item_index: *index as u32,
                item_id: item.id.clone(),
                fold: item.fold,
                candidate: c as u32,
                ending,
                tokens: tokens as u32,
                truncated,
                features: f,
                origin: Some(origin.to_string()),
            });
        }
    }
    rows
}

/// The origins of rows from a pool written before the pool stored them, inferred from where they
/// stand as the stage used to: candidate 0 is the gold, the next ones are the endings of the
/// sources that run before the blocks (`before`, this run's), and the rest were sampled.
fn infer_origins(rows: &mut [Candidate], before: &[Vec<Ending>]) {
    for row in rows.iter_mut().filter(|r| r.origin.is_none()) {
        let c = row.candidate as usize;
        let origin = if c == 0 {
            GOLD_ORIGIN
        } else {
            before
                .get(row.item_index as usize)
                .and_then(|b| b.get(c - 1))
                .map_or(sources::sampled::NAME, |e| e.origin)
        };
        row.origin = Some(origin.to_string());
    }
}

/// How far mixed precision moves what the stage computes, on one block's items with the real
/// LMs: the first sampled token's distribution (total variation distance to fp32's) and the
/// LM features of the gold endings (largest absolute difference per feature).
#[derive(Serialize)]
struct PrecisionCheck {
    items: usize,
    first_token_tv_mean: f64,
    first_token_tv_max: f64,
    feature_max_abs_difference: [f32; 8],
}

fn precision_check(
    block: &[(usize, &Item)],
    models: &HashMap<u32, (nn::VarStore, BiLm)>,
    vocab: &Vocab,
    settings: &SampleSettings,
    batch: usize,
    logit_budget: usize,
    device: Device,
) -> PrecisionCheck {
    let mut check = PrecisionDifference::default();
    for (fold, (_, lm)) in models {
        let item_ids: Vec<ItemIds> = block
            .iter()
            .filter(|(_, item)| item.fold == *fold)
            .map(|(_, item)| ItemIds::new(vocab, item))
            .collect();
        if item_ids.is_empty() {
            continue;
        }
        let refs: Vec<&[i64]> = item_ids.iter().map(|e| e.prefix.as_slice()).collect();
        let full = first_token_distribution(lm, &refs, settings);
        let mixed = in_precision(true, device, || {
            first_token_distribution(lm, &refs, settings)
        });
        let jobs: Vec<ItemEndings> = item_ids
            .iter()
            .map(|e| ItemEndings {
                s: &e.s,
                n: &e.n,
                endings: vec![e.v.as_slice().into()],
            })
            .collect();
        let full_features = items_features(lm, &jobs, batch, logit_budget, device);
        let mixed_features = in_precision(true, device, || {
            items_features(lm, &jobs, batch, logit_budget, device)
        });
        check.add(&full, &mixed, &full_features, &mixed_features);
    }
    check.finish()
}

/// The running sums of [`PrecisionCheck`]: first-token distributions and gold features computed
/// twice, in fp32 and in the precision under test.
#[derive(Default)]
struct PrecisionDifference {
    tv_sum: f64,
    tv_max: f64,
    items: usize,
    features: [f32; 8],
}

impl PrecisionDifference {
    fn add(
        &mut self,
        full: &[Vec<f32>],
        lowered: &[Vec<f32>],
        full_features: &[Vec<[f32; 8]>],
        lowered_features: &[Vec<[f32; 8]>],
    ) {
        for (p, q) in full.iter().zip(lowered) {
            let tv = 0.5
                * p.iter()
                    .zip(q)
                    .map(|(a, b)| f64::from((a - b).abs()))
                    .sum::<f64>();
            self.tv_sum += tv;
            self.tv_max = self.tv_max.max(tv);
            self.items += 1;
        }
        for (a, b) in full_features
            .iter()
            .flatten()
            .zip(lowered_features.iter().flatten())
        {
            for f in 0..8 {
                self.features[f] = self.features[f].max((a[f] - b[f]).abs());
            }
        }
    }

    fn finish(self) -> PrecisionCheck {
        PrecisionCheck {
            items: self.items,
            first_token_tv_mean: self.tv_sum / self.items.max(1) as f64,
            first_token_tv_max: self.tv_max,
            feature_max_abs_difference: self.features,
        }
    }
}

/// The `generate` stage.
pub struct Generate;

/// The stage's name (its directory, its `--force` spelling).
pub const NAME: StageName = StageName::new("generate");

impl crate::runner::Stage for Generate {
    fn name(&self) -> StageName {
        NAME
    }

    fn upstream(&self) -> Option<StageName> {
        Some(super::lm::NAME)
    }

    /// Its pool parts, and the pretrained generator's adapters and parts: a run that fails
    /// after training an adapter (twenty minutes on 2 cores) keeps it for the next.
    fn holds_progress(&self, file: &std::path::Path) -> bool {
        file.starts_with("pool") || file.starts_with("pretrained")
    }

    /// The files the stage will read (each enabled source's models, the could-be-right check's
    /// encoder), checked without loading them.
    fn check(&self, config: &af_core::Config) -> anyhow::Result<()> {
        for source in enabled_sources(&config.generate) {
            source.check(config)?;
        }
        if !config.generate.could_be_right.is_empty() {
            encoder_dir("could-be-right")?;
        }
        Ok(())
    }

    fn uses_device(&self) -> bool {
        true
    }

    fn resumable(&self) -> bool {
        true
    }

    fn inputs(&self, config: &af_core::Config) -> anyhow::Result<serde_json::Value> {
        use serde_json::json;
        let g = &config.generate;
        let mut inputs = json!({"seed": config.run.seed, "generate": g.fingerprint()});
        // See `candidates_before_sampling`: k shapes the pool where these run.
        if g.shared_endings > 0 || !g.could_be_right.is_empty() {
            inputs["filter-k"] = json!(config.filter.k);
        }
        Ok(inputs)
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<(Box<dyn super::StageOutcome>, bool)> {
        let outcome = run(ctx)?;
        let complete = matches!(outcome, GenerateOutcome::Complete(_));
        Ok((Box::new(outcome), complete))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed run keeps what a rerun continues from: pool parts, and the pretrained
    /// generator's adapters (minutes each to train) and parts; a bare start record is nothing.
    #[test]
    fn adapters_and_parts_are_progress_a_failed_run_keeps() {
        use crate::runner::Stage;
        for kept in [
            "pool/part-00000.parquet",
            "pretrained/adapter-fold-0.safetensors",
            "pretrained/adapter-fold-1.json",
            "pretrained/part-00003.json",
        ] {
            assert!(
                Generate.holds_progress(std::path::Path::new(kept)),
                "{kept}"
            );
        }
        assert!(!Generate.holds_progress(std::path::Path::new("started.json")));
    }

    /// A pool written before the pool stored origins reads them as the stage used to infer them:
    /// the gold, then the endings of the sources that ran before the blocks, then sampled ones.
    #[test]
    fn rows_without_origins_get_them_from_where_they_stand() {
        let row = |item_index: u32, candidate: u32, origin: Option<&str>| Candidate {
            item_index,
            item_id: format!("i{item_index}"),
            fold: 0,
            candidate,
            ending: "runs .".into(),
            tokens: 2,
            truncated: false,
            features: [0.0; 8],
            origin: origin.map(str::to_string),
        };
        let ending = |origin: &'static str| Ending {
            origin,
            ..Ending::text("walks .")
        };
        let before = vec![vec![ending("own"), ending("borrowed")], vec![]];
        let mut rows = vec![
            row(0, 0, None),
            row(0, 1, None),
            row(0, 2, None),
            row(0, 3, None),
            row(1, 0, None),
            row(1, 1, None),
            row(1, 2, Some("pretrained")),
        ];
        infer_origins(&mut rows, &before);
        let origins: Vec<&str> = rows.iter().map(|r| r.origin.as_deref().unwrap()).collect();
        assert_eq!(
            origins,
            [
                "gold",
                "own",
                "borrowed",
                "sampled",
                "gold",
                "sampled",
                "pretrained"
            ]
        );
    }

    /// The check's arithmetic on distributions and features whose differences are known: the
    /// total variation distance is half the L1 distance, its mean is over items, and each
    /// feature's largest difference is taken over every ending.
    #[test]
    fn the_precision_check_measures_known_differences() {
        let mut d = PrecisionDifference::default();
        let full = vec![vec![0.5, 0.5, 0.0], vec![1.0, 0.0, 0.0]];
        let lowered = vec![vec![0.4, 0.5, 0.1], vec![0.7, 0.2, 0.1]];
        let mut a = [0f32; 8];
        let mut b = [0f32; 8];
        a[0] = -2.0;
        b[0] = -2.25;
        b[7] = 3.0;
        d.add(&full, &lowered, &[vec![a, a]], &[vec![a, b]]);
        let check = d.finish();
        assert_eq!(check.items, 2);
        assert!(
            (check.first_token_tv_max - 0.3).abs() < 1e-6,
            "{}",
            check.first_token_tv_max
        );
        assert!(
            (check.first_token_tv_mean - 0.2).abs() < 1e-6,
            "{}",
            check.first_token_tv_mean
        );
        assert_eq!(check.feature_max_abs_difference[0], 0.25);
        assert_eq!(check.feature_max_abs_difference[7], 3.0);
        assert_eq!(check.feature_max_abs_difference[3], 0.0);
    }

    /// On the CPU autocast does nothing, so the check must find no difference at all; this runs
    /// the code path the GPU takes before its first block, end to end with real LMs.
    #[test]
    fn the_precision_check_measures_nothing_where_nothing_changes() {
        let words: HashMap<String, u64> = ["a", "man", "walks", "dog", ".", "the", "runs"]
            .iter()
            .map(|w| (w.to_string(), 5))
            .collect();
        let vocab = Vocab::from_counts(&words, 1);
        let mut models = HashMap::new();
        for fold in 0..2u32 {
            let vs = nn::VarStore::new(Device::Cpu);
            let lm = BiLm::new(
                &vs.root(),
                af_nn::lm::LmShape {
                    vocab: vocab.len() as i64,
                    embedding: 8,
                    hidden: 8,
                    layers: 1,
                    dropout: 0.0,
                },
            );
            models.insert(fold, (vs, lm));
        }
        let items: Vec<Item> = (0..3)
            .map(|i| Item {
                id: format!("i{i}"),
                group: format!("g{i}"),
                fold: i % 2,
                context: "a man walks .".into(),
                noun_phrase: "the dog".into(),
                ending: "runs .".into(),
                context_tokens: 4,
                noun_phrase_tokens: 2,
                ending_tokens: 2,
                distractors: Vec::new(),
            })
            .collect();
        let block: Vec<(usize, &Item)> = items.iter().enumerate().collect();
        let settings = SampleSettings {
            max_tokens: 5,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            typical_p: 1.0,
            stop: vec![i64::from(vocab.id("."))],
            device: Device::Cpu,
        };
        let check = precision_check(
            &block,
            &models,
            &vocab,
            &settings,
            64,
            af_nn::lm::logit_budget(Device::Cpu),
            Device::Cpu,
        );
        assert_eq!(check.items, 3);
        assert_eq!(
            (check.first_token_tv_mean, check.first_token_tv_max),
            (0.0, 0.0)
        );
        assert_eq!(check.feature_max_abs_difference, [0.0; 8]);
    }
}
