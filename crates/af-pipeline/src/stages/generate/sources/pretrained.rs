//! `pretrained` (`[generate] pretrained-endings`): for each item, endings a pretrained causal LM
//! (af-nn's `causal_lm`) writes after the item's context and noun phrase, kept when they are new
//! to the item's pool and pass the `[generate] reject` rules. `generate/pretrained.json` says
//! what it did; `generate/pretrained.tsv` lists its endings (as the pool's `origin` does).
//!
//! Written per block of `block-items` items to `generate/pretrained/part-NNNNN.json` as each is
//! done, so an interrupted run keeps what it wrote; draws come from per-item seeds, so a block's
//! endings do not depend on the batching or on which blocks ran before.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use af_core::config::{GenerateConfig, LengthTarget};
use af_core::Item;
use af_nn::causal_lm::{
    AdaptExample, AdaptSettings, CausalLm, CausalSampleSettings, Lora, PromptJob,
};
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::{Ending, EndingSource, Items, SourceContext, SourceSummary};
use crate::progress::Bar;
use crate::stages::generate::{item_rng, Validity};

/// What the pretrained generator did for the whole pool (`generate/pretrained.json`).
#[derive(Clone, Debug, Serialize)]
pub struct PretrainedSummary {
    pub model: String,
    pub path: PathBuf,
    pub parameters: i64,
    pub endings_wanted: usize,
    pub endings: usize,
    pub items_short: usize,
    /// Continuations drawn, and those not kept: already in the item's pool (or drawn before), or
    /// broken by a `reject` rule (per rule; a draw may break several).
    pub draws: usize,
    pub duplicates: usize,
    pub rejected: usize,
    pub rejected_by_rule: BTreeMap<String, usize>,
    /// Wall time of the blocks this run wrote (0 when every block was there already).
    pub seconds_this_run: f64,
    /// Per question fold, its caption adapter (`pretrained-adapt-steps`); none without.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub adapters: Vec<AdapterSummary>,
}

#[derive(Default, Serialize, Deserialize)]
struct Part {
    endings: Vec<Vec<String>>,
    draws: usize,
    duplicates: usize,
    rejected: usize,
    rejected_by_rule: BTreeMap<String, usize>,
}

impl Part {
    /// Adds `other`'s counts (not its endings).
    fn add(&mut self, other: &Part) {
        self.draws += other.draws;
        self.duplicates += other.duplicates;
        self.rejected += other.rejected;
        for (rule, n) in &other.rejected_by_rule {
            *self.rejected_by_rule.entry(rule.clone()).or_default() += n;
        }
    }
}

/// Salt of the pretrained generator's random streams, apart from sampling's and borrowing's.
const SALT: u64 = 0x7072_6574_7261_696e;

fn part_path(dir: &Path, block: usize) -> PathBuf {
    dir.join(format!("part-{block:05}.json"))
}

/// Salt of the streams that choose each item's example captions.
const EXAMPLES_SALT: u64 = 0x6578_616d_706c_6573;

/// Salt of the streams that draw shaped endings' target lengths.
const LENGTH_SALT: u64 = 0x6c65_6e67_7468_7321;

/// The items other items' examples and target lengths come from: those past the questions while
/// there are such (so no example is another question's answer), else all.
fn source_range(sources: &[Item], questions: usize) -> std::ops::Range<usize> {
    if sources.len() > questions {
        questions..sources.len()
    } else {
        0..sources.len()
    }
}

/// What shaped endings aim at (`pretrained-length-bias`): per item, its gold's length, or per
/// ending the gold length of another item of another group, drawn from the item's own stream.
enum Targets {
    None,
    Gold(Vec<usize>),
    /// The source items' (group, gold length in the generator's words).
    OtherGold(Vec<(String, usize)>),
    /// The source items' golds as [`Nearby`], sorted by length in af's tokens (the unit of the
    /// `length-gap` rule) so an item's window is a slice; `own` is each question's gold length in
    /// the generator's words, the target when no other gold is near.
    NearbyGold {
        sources: Vec<Nearby>,
        gap: usize,
        own: Vec<usize>,
    },
}

/// One source item's gold for `nearby-gold`: its length in af's tokens (to find the window), its
/// group (to skip the item's own video) and its length in the generator's words (the target).
struct Nearby {
    tokens: usize,
    group: String,
    words: usize,
}

impl Targets {
    fn new(
        lm: &CausalLm,
        g: &GenerateConfig,
        items: &[&Item],
        sources: &[Item],
    ) -> anyhow::Result<Self> {
        if g.pretrained_length_bias == 0.0 {
            return Ok(Self::None);
        }
        let questions_gold_words = || {
            items
                .iter()
                .map(|i| lm.words(&i.ending))
                .collect::<Result<Vec<_>, _>>()
        };
        let others = &sources[source_range(sources, items.len())];
        Ok(match g.pretrained_length_target {
            LengthTarget::Gold => Self::Gold(questions_gold_words()?),
            LengthTarget::OtherGold => Self::OtherGold(
                others
                    .iter()
                    .map(|i| Ok((i.group.clone(), lm.words(&i.ending)?)))
                    .collect::<Result<_, af_nn::causal_lm::CausalLmError>>()?,
            ),
            LengthTarget::NearbyGold => {
                let mut near = others
                    .iter()
                    .map(|i| {
                        Ok(Nearby {
                            tokens: af_text::tokenize_lowercase(&i.ending).len(),
                            group: i.group.clone(),
                            words: lm.words(&i.ending)?,
                        })
                    })
                    .collect::<Result<Vec<_>, af_nn::causal_lm::CausalLmError>>()?;
                near.sort_by_key(|n| n.tokens);
                Self::NearbyGold {
                    sources: near,
                    gap: g.max_length_gap,
                    own: questions_gold_words()?,
                }
            }
        })
    }

    /// `count` targets for the item at `index` in its `round` of draws.
    fn draw(&self, item: &Item, index: usize, round: usize, count: usize, seed: u64) -> Vec<usize> {
        match self {
            Self::None => Vec::new(),
            Self::Gold(lengths) => vec![lengths[index]; count],
            Self::OtherGold(pool) => {
                let mut rng = item_rng(seed ^ LENGTH_SALT, index, round);
                (0..count)
                    .map(|_| other_group(pool, 0..pool.len(), |p| &p.0, &item.group, &mut rng).1)
                    .collect()
            }
            Self::NearbyGold { sources, gap, own } => {
                let gold = af_text::tokenize_lowercase(&item.ending).len();
                let window = sources.partition_point(|n| n.tokens < gold.saturating_sub(*gap))
                    ..sources.partition_point(|n| n.tokens <= gold + gap);
                if window.is_empty() {
                    return vec![own[index]; count];
                }
                let mut rng = item_rng(seed ^ LENGTH_SALT, index, round);
                (0..count)
                    .map(|_| {
                        other_group(sources, window.clone(), |n| &n.group, &item.group, &mut rng)
                            .words
                    })
                    .collect()
            }
        }
    }
}

/// An entry of `pool[range]` drawn at random, of a group other than `own`: a few tries, then
/// whatever the last one drew (a range of one group).
fn other_group<'a, T>(
    pool: &'a [T],
    range: std::ops::Range<usize>,
    group: impl Fn(&T) -> &String,
    own: &str,
    rng: &mut impl Rng,
) -> &'a T {
    let mut pick = &pool[rng.random_range(range.clone())];
    for _ in 0..20 {
        if group(pick) != own {
            break;
        }
        pick = &pool[rng.random_range(range.clone())];
    }
    pick
}

/// The prompt the generator continues: what a reader of the item sees before the ending, after
/// `examples` (other items' context and gold second sentence, one pair a line) that show the
/// generator the captions' style: a plain pretrained LM otherwise writes as the web does
/// ("We must be respectful.", "you", curly quotes, dates), which a detector of style reads.
pub fn prompt(item: &Item, examples: &[&Item]) -> String {
    let mut out = String::new();
    for e in examples {
        out.push_str(&format!("{} {}\n", e.context.trim(), e.sentence2().trim()));
    }
    out.push_str(&format!(
        "{} {}",
        item.context.trim(),
        item.noun_phrase.trim()
    ));
    out
}

/// `n` example items for the item at `index`: of other groups, drawn from the items past the
/// questions while there are such (so no example is another question's answer), with the item's
/// own random stream.
fn examples(sources: &[Item], questions: usize, index: usize, n: usize, seed: u64) -> Vec<&Item> {
    examples_where(sources, questions, index, n, seed, |_| true)
}

/// [`examples`] among the items `allowed` lets through (the same stream: with every item
/// allowed, the same examples).
fn examples_where(
    sources: &[Item],
    questions: usize,
    index: usize,
    n: usize,
    seed: u64,
    allowed: impl Fn(&Item) -> bool,
) -> Vec<&Item> {
    if n == 0 {
        return Vec::new();
    }
    let item = &sources[index];
    let range = source_range(sources, questions);
    let mut rng = item_rng(seed ^ EXAMPLES_SALT, index, 0);
    let mut out: Vec<&Item> = Vec::with_capacity(n);
    for _ in 0..n * 20 {
        if out.len() == n || range.is_empty() {
            break;
        }
        let e = &sources[rng.random_range(range.clone())];
        if e.group != item.group && allowed(e) && !out.iter().any(|o| o.id == e.id) {
            out.push(e);
        }
    }
    out
}

/// The training examples of fold `fold`'s adapter: every item of another fold (questions and the
/// items past them), as (its index, the prompt sampling would build for it, its gold ending). The
/// prompt's example captions are drawn as sampling draws them, from items of other folds only:
/// nothing of fold `fold` is read while its adapter trains (cross-fitting, as af's LMs).
fn adapt_examples(
    sources: &[Item],
    questions: usize,
    fold: u32,
    n_examples: usize,
    seed: u64,
) -> Vec<(usize, AdaptExample)> {
    sources
        .iter()
        .enumerate()
        .filter(|(_, item)| item.fold != fold)
        .map(|(index, item)| {
            let shown = examples_where(sources, questions, index, n_examples, seed, |e| {
                e.fold != fold
            });
            (
                index,
                AdaptExample {
                    prompt: prompt(item, &shown),
                    ending: item.ending.trim().to_string(),
                },
            )
        })
        .collect()
}

/// Questions of a fold whose gold endings measure its adapter (held out: it never trained on them).
const HELD_OUT: usize = 64;

/// What one fold's adapter did (`generate/pretrained/adapter-fold-K.json`, and the summary).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AdapterSummary {
    pub fold: u32,
    pub examples: usize,
    pub steps: usize,
    /// Mean training loss per ending token (nats) over the first and the last tenth of the steps.
    pub first_loss: f64,
    pub last_loss: f64,
    /// Mean loss per token of the fold's own questions' gold endings (up to 64 of them, which
    /// it never trained on), under the base model and under the adapter: how much closer to the
    /// captions the adapter writes.
    pub held_out_questions: usize,
    pub held_out_loss_base: f64,
    pub held_out_loss_adapted: f64,
    /// Training wall time (0 when this run found the adapter already trained).
    pub seconds_this_run: f64,
    /// What it was trained on ([`adapter_key`]): how `pretrained-adapters-from` knows an
    /// adapter another run trained is the one this run would train. Absent in adapters trained
    /// before af recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<String>,
    /// The directory it was copied from (`pretrained-adapters-from`), when it was not trained here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copied_from: Option<PathBuf>,
}

fn read_adapter_summary(report: &Path) -> anyhow::Result<AdapterSummary> {
    serde_json::from_str(&std::fs::read_to_string(report)?)
        .map_err(|e| anyhow::anyhow!("{}: {e} (remove it to train again)", report.display()))
}

/// Bumped whenever af-nn's adapter training changes what it computes from the same inputs (the
/// loss mask, the targets, the optimiser, the clipping, the shuffle): adapters trained before
/// are then not copied by `pretrained-adapters-from`.
const ADAPTER_TRAINING_VERSION: u64 = 1;

/// A key of everything an adapter's weights depend on: the generator file's bytes, the training
/// and held-out examples in order, and the settings (the seed included).
fn adapter_key(
    model_key: u64,
    train: &[AdaptExample],
    held_out: &[AdaptExample],
    settings: &AdaptSettings,
) -> String {
    let mut h = af_core::hash::Fnv1a::default();
    h.update(&ADAPTER_TRAINING_VERSION.to_le_bytes());
    h.update(&model_key.to_le_bytes());
    for (set, examples) in [(0u8, train), (1, held_out)] {
        h.update(&[set]);
        for e in examples {
            for text in [&e.prompt, &e.ending] {
                h.update(&(text.len() as u64).to_le_bytes());
                h.update(text.as_bytes());
            }
        }
    }
    for n in [
        settings.steps as u64,
        settings.batch as u64,
        settings.rank as u64,
        settings.alpha.to_bits(),
        settings.learning_rate.to_bits(),
        settings.weight_decay.to_bits(),
        settings.seed,
    ] {
        h.update(&n.to_le_bytes());
    }
    format!("{:016x}", h.finish())
}

/// Copies fold `fold`'s adapter from `from` (`pretrained-adapters-from`) into this run as
/// `path` and `report`, when its recorded inputs are `key`.
fn copy_adapter(
    from: &Path,
    fold: u32,
    key: &str,
    path: &Path,
    report: &Path,
) -> anyhow::Result<AdapterSummary> {
    let source = from.join(format!("adapter-fold-{fold}.safetensors"));
    let source_report = from.join(format!("adapter-fold-{fold}.json"));
    anyhow::ensure!(
        source.is_file() && source_report.is_file(),
        "[generate] pretrained-adapters-from: {} has no finished adapter for fold {fold} (adapter-fold-{fold}.safetensors and .json): name an earlier run's generate/pretrained/, or remove the key to train here",
        from.display()
    );
    let summary = read_adapter_summary(&source_report)?;
    anyhow::ensure!(
        summary.inputs.as_deref() == Some(key),
        "[generate] pretrained-adapters-from: {} was trained on other examples, settings or generator than this run's fold {fold} would be{}: remove the key to train it here",
        source_report.display(),
        if summary.inputs.is_none() { " (or by an af that did not record them)" } else { "" }
    );
    let partial = path.with_extension("safetensors.partial");
    std::fs::copy(&source, &partial)?;
    std::fs::rename(&partial, path)?;
    let summary = AdapterSummary {
        seconds_this_run: 0.0,
        copied_from: Some(from.to_path_buf()),
        ..summary
    };
    af_core::atomic::write(report, serde_json::to_string_pretty(&summary)?.as_bytes())?;
    tracing::info!(
        "generate: adapter fold {fold} copied from {} (trained on this run's inputs)",
        from.display()
    );
    Ok(summary)
}

/// Each question fold's adapter, trained (or read back when a finished one is there) with the
/// `pretrained-adapt-*` settings; `bar` shows the training steps.
fn fold_adapters(
    lm: &mut CausalLm,
    model_key: u64,
    items: &[&Item],
    ctx: &SourceContext,
    dir: &Path,
    bar: &dyn Bar,
) -> anyhow::Result<(HashMap<u32, Lora>, Vec<AdapterSummary>)> {
    let (g, seed, sources) = (&ctx.config.generate, ctx.config.run.seed, ctx.all);
    let mut folds: Vec<u32> = items.iter().map(|i| i.fold).collect();
    folds.sort_unstable();
    folds.dedup();
    let (mut adapters, mut summaries) = (HashMap::new(), Vec::new());
    for fold in folds {
        let path = dir.join(format!("adapter-fold-{fold}.safetensors"));
        let report = dir.join(format!("adapter-fold-{fold}.json"));
        let train: Vec<AdaptExample> =
            adapt_examples(sources, items.len(), fold, g.pretrained_examples, seed)
                .into_iter()
                .map(|(_, e)| e)
                .collect();
        anyhow::ensure!(
            !train.is_empty(),
            "[generate] pretrained-adapt-steps: fold {fold}'s adapter has no items of other folds to train on"
        );
        let held_out: Vec<AdaptExample> = items
            .iter()
            .enumerate()
            .filter(|(_, i)| i.fold == fold)
            .take(HELD_OUT)
            .map(|(index, item)| AdaptExample {
                prompt: prompt(
                    item,
                    &examples(sources, items.len(), index, g.pretrained_examples, seed),
                ),
                ending: item.ending.trim().to_string(),
            })
            .collect();
        let batch = g.pretrained_adapt_batch;
        let settings = AdaptSettings {
            steps: g.pretrained_adapt_steps,
            batch,
            rank: g.pretrained_adapt_rank,
            alpha: g.pretrained_adapt_alpha,
            learning_rate: g.pretrained_adapt_learning_rate,
            weight_decay: 0.01,
            seed: seed ^ ADAPT_SALT ^ u64::from(fold),
        };
        let key = adapter_key(model_key, &train, &held_out, &settings);
        if path.exists() && report.exists() {
            let summary = read_adapter_summary(&report)?;
            // The fingerprint does not see the generator file's bytes (`AF_CAUSAL_LM`, or a file
            // replaced in place): a key that differs means another generator's adapter.
            anyhow::ensure!(
                summary.inputs.as_deref().is_none_or(|k| k == key),
                "{} was trained on other inputs than this run's fold {fold} (another generator file?): remove {} and it to train it again",
                report.display(),
                path.display()
            );
            adapters.insert(fold, lm.load_adapter(&path)?);
            summaries.push(AdapterSummary {
                seconds_this_run: 0.0,
                ..summary
            });
            continue;
        }
        if let Some(from) = &g.pretrained_adapters_from {
            let summary = copy_adapter(from, fold, &key, &path, &report)?;
            adapters.insert(fold, lm.load_adapter(&path)?);
            summaries.push(summary);
            continue;
        }
        lm.set_adapter(None);
        let held_out_loss_base = lm.adapter_loss(&held_out, batch)?;
        bar.set_length(settings.steps as u64);
        bar.set_position(0);
        let trained = lm.train_adapter(&train, &settings, &mut |step, loss| {
            bar.set_position(step as u64 + 1);
            bar.set_message(format!("adapter fold {fold}: loss {loss:.2}"));
        })?;
        let held_out_loss_adapted = lm.adapter_loss(&held_out, batch)?;
        let tenth = (trained.losses.len() / 10).max(1);
        let mean = |l: &[f64]| l.iter().sum::<f64>() / l.len().max(1) as f64;
        let summary = AdapterSummary {
            fold,
            examples: trained.examples,
            steps: trained.steps,
            first_loss: mean(&trained.losses[..tenth.min(trained.losses.len())]),
            last_loss: mean(&trained.losses[trained.losses.len().saturating_sub(tenth)..]),
            held_out_questions: held_out.len(),
            held_out_loss_base,
            held_out_loss_adapted,
            seconds_this_run: trained.seconds,
            inputs: Some(key),
            copied_from: None,
        };
        tracing::info!(
            "generate: adapter fold {fold}: {} steps on {} examples in {:.0} s, training loss {:.2} -> {:.2}; held-out gold endings {:.2} -> {:.2} nats a token",
            summary.steps,
            summary.examples,
            summary.seconds_this_run,
            summary.first_loss,
            summary.last_loss,
            summary.held_out_loss_base,
            summary.held_out_loss_adapted
        );
        // The weights first, the report last: a report means a finished adapter.
        let partial = path.with_extension("safetensors.partial");
        lm.save_adapter(&partial)?;
        std::fs::rename(&partial, &path)?;
        af_core::atomic::write(&report, serde_json::to_string_pretty(&summary)?.as_bytes())?;
        adapters.insert(fold, lm.adapter().expect("trained above").shallow_clone());
        summaries.push(summary);
    }
    lm.set_adapter(None);
    bar.set_message(String::new());
    Ok((adapters, summaries))
}

/// Salt of the adapters' initialisation and example order.
const ADAPT_SALT: u64 = 0x6164_6170_7465_7273;

/// The pretrained generator as a source of the pool's endings; what it did, once it ran.
#[derive(Default)]
pub struct Pretrained {
    summary: Option<PretrainedSummary>,
    /// Rows per sampling batch, as the stage's memory plan sized them in `prepare`.
    rows: Option<usize>,
}

pub const NAME: &str = "pretrained";

impl EndingSource for Pretrained {
    fn name(&self) -> &'static str {
        NAME
    }

    fn enabled(&self, g: &GenerateConfig) -> bool {
        g.pretrained_endings > 0
    }

    fn bar_label(&self) -> Option<&'static str> {
        Some("items (pretrained generator)")
    }

    fn check(&self, config: &af_core::Config) -> anyhow::Result<()> {
        let g = &config.generate;
        let path = model_path(g)?;
        anyhow::ensure!(
            path.is_file(),
            "[generate] pretrained-model: {} is not a file (a GGUF generator is expected there)",
            path.display()
        );
        if let Some(from) = &g.pretrained_adapters_from {
            // This run's own stage directory is emptied or moved aside before the stage runs.
            anyhow::ensure!(
                !from.starts_with(config.run.dir.join(crate::stages::generate::NAME.dir_name())),
                "[generate] pretrained-adapters-from: {} is this run's own generate/ directory, which a new run of the stage empties first: name another run's generate/pretrained/ (copy this one elsewhere first)",
                from.display()
            );
            anyhow::ensure!(
                from.is_dir(),
                "[generate] pretrained-adapters-from: {} is not a directory (an earlier run's generate/pretrained/ is expected there)",
                from.display()
            );
        }
        Ok(())
    }

    /// Sizes the generator's batches before any source runs (its shape and the prompts' widths
    /// from the file, read on the CPU), so that a run that cannot fit stops before any work and
    /// every run's plan has the generator's rows, resumed or not.
    fn prepare(&mut self, ctx: &SourceContext) -> anyhow::Result<()> {
        let path = model_path(&ctx.config.generate)?;
        let lm = CausalLm::load(&path, tch::Device::Cpu)?;
        let questions: Vec<&Item> = ctx.all[..ctx.questions].iter().collect();
        self.rows = Some(plan_rows(&lm, &questions, ctx)?);
        Ok(())
    }

    /// Every item's pretrained endings (in item order), writing missing parts under
    /// `generate/pretrained/`; prompts' examples come from all the run's items.
    fn endings(
        &mut self,
        items: &Items,
        so_far: &[Vec<Ending>],
        ctx: &SourceContext,
        bar: &dyn Bar,
    ) -> anyhow::Result<Vec<Vec<Ending>>> {
        let items: Vec<&Item> = items.items.iter().map(|(_, item)| *item).collect();
        let rows = self.rows.unwrap_or(ctx.config.generate.pretrained_batch);
        let (written, summary) = pretrained_endings(&items, so_far, rows, ctx, bar)?;
        let mut tsv = String::from("item_index\titem_id\tcandidate\n");
        for (index, ((item, endings), before)) in items.iter().zip(&written).zip(so_far).enumerate()
        {
            for j in 0..endings.len() {
                tsv.push_str(&format!("{index}\t{}\t{}\n", item.id, before.len() + j + 1));
            }
        }
        af_core::atomic::write(ctx.dir.join("pretrained.tsv"), tsv.as_bytes())?;
        af_core::atomic::write(
            ctx.dir.join("pretrained.json"),
            serde_json::to_string_pretty(&summary)?.as_bytes(),
        )?;
        tracing::info!(
            "generate: {} pretrained endings ({} draws, {} duplicates, {} rejected)",
            summary.endings,
            summary.draws,
            summary.duplicates,
            summary.rejected
        );
        self.summary = Some(summary);
        Ok(written
            .into_iter()
            .map(|endings| endings.into_iter().map(Ending::text).collect())
            .collect())
    }

    fn summary(&self) -> Option<SourceSummary> {
        let p = self.summary.as_ref()?;
        let rules: Vec<String> = p
            .rejected_by_rule
            .iter()
            .map(|(rule, n)| format!("{rule} {n}"))
            .collect();
        // With `endings = 0` the report's first line counts nothing the pool holds: say what does.
        let line = format!(
            "and {} pretrained endings ({} items short of {}): {:.1}% of {} draws kept; rejected {}{}",
            p.endings,
            p.items_short,
            p.endings_wanted,
            100.0 * p.endings as f64 / p.draws.max(1) as f64,
            p.draws,
            p.rejected,
            if rules.is_empty() {
                String::new()
            } else {
                format!(" ({})", rules.join(", "))
            }
        );
        Some(SourceSummary {
            json: serde_json::to_value(p).expect("a plain struct"),
            line,
        })
    }
}

/// The generator's GGUF file: `[generate] pretrained-model`, else the one `scripts/setup` installs.
fn model_path(g: &GenerateConfig) -> anyhow::Result<PathBuf> {
    match &g.pretrained_model {
        Some(p) => Ok(p.clone()),
        None => af_nn::causal_lm::default_path().ok_or_else(|| {
            anyhow::anyhow!("[generate] pretrained-endings needs a generator: set [generate] pretrained-model to a GGUF file, or run `source <(scripts/setup --env)` so that {} names the one scripts/setup installs", af_nn::causal_lm::CAUSAL_LM_ENV)
        }),
    }
}

/// The generator's rows per sampling batch under the stage's memory plan (`pretrained-batch`
/// when it fits): sized for the widest prompt of the run, beside the generator's f32 weights.
fn plan_rows(lm: &CausalLm, items: &[&Item], ctx: &SourceContext) -> anyhow::Result<usize> {
    let (g, seed) = (&ctx.config.generate, ctx.config.run.seed);
    let mut widest = 1;
    for (i, item) in items.iter().enumerate() {
        let text = prompt(
            item,
            &examples(ctx.all, items.len(), i, g.pretrained_examples, seed),
        );
        widest = widest.max(lm.prompt_tokens(&text)?);
    }
    let per_row =
        af_core::memory::llama_sampling_row_bytes(lm.shape(), widest as u64, g.max_tokens as u64);
    let mut plan = ctx.memory.lock().unwrap_or_else(|e| e.into_inner());
    let rows = plan.size(
        "pretrained generator rows",
        "[generate] pretrained-batch",
        "rows",
        g.pretrained_batch as u64,
        1,
        per_row,
        4 * lm.parameters().max(0) as u64,
    )?;
    if rows < g.pretrained_batch as u64 {
        tracing::info!(
            "generate: the pretrained generator samples {rows} rows at a time, not {} ([generate] pretrained-batch), to fit the device memory budget",
            g.pretrained_batch
        );
    }
    Ok(rows as usize)
}

/// Every item's pretrained endings (in item order), writing missing parts under `dir`.
fn pretrained_endings(
    items: &[&Item],
    so_far: &[Vec<Ending>],
    rows: usize,
    ctx: &SourceContext,
    bar: &dyn Bar,
) -> anyhow::Result<(Vec<Vec<String>>, PretrainedSummary)> {
    let (g, seed, sources) = (&ctx.config.generate, ctx.config.run.seed, ctx.all);
    let dir = ctx.dir.join("pretrained");
    std::fs::create_dir_all(&dir)?;
    let model_path = model_path(g)?;
    let mut model: Option<(CausalLm, Targets, HashMap<u32, Lora>)> = None;
    let mut adapters = Vec::new();
    let settings = CausalSampleSettings {
        length_bias: g.pretrained_length_bias,
        length_floor: g.max_length_gap / 2,
        typical_p: g.typical_p,
        ..CausalSampleSettings::new(g.max_tokens, g.temperature, g.top_k, g.top_p)
    };
    let start = Instant::now();
    let mut wrote = false;
    let mut all = Vec::with_capacity(items.len());
    let mut total = Part::default();
    let size = g.block_items.max(1);
    for (b, block) in items.chunks(size).enumerate() {
        let path = part_path(&dir, b);
        let part = if path.exists() {
            let text = std::fs::read_to_string(&path)?;
            let part: Part = serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!("{}: {e} (remove it to write it again)", path.display())
            })?;
            anyhow::ensure!(
                part.endings.len() == block.len(),
                "{}: {} items, its block has {} (remove it to write it again)",
                path.display(),
                part.endings.len(),
                block.len()
            );
            part
        } else {
            if model.is_none() {
                let mut lm = CausalLm::load(&model_path, ctx.device)?;
                tracing::info!(
                    "generate: pretrained generator {} ({:.0}M parameters) from {}",
                    lm.name,
                    lm.parameters() as f64 / 1e6,
                    model_path.display()
                );
                let by_fold = if g.pretrained_adapt_steps > 0 {
                    let (by_fold, summaries) = fold_adapters(
                        &mut lm,
                        crate::runner::content_hash(&model_path)?.1,
                        items,
                        ctx,
                        &dir,
                        bar,
                    )?;
                    adapters = summaries;
                    bar.set_length(items.len() as u64);
                    bar.set_position((b * size) as u64);
                    by_fold
                } else {
                    HashMap::new()
                };
                let targets = Targets::new(&lm, g, items, sources)?;
                model = Some((lm, targets, by_fold));
            }
            let (lm, targets, by_fold) = model.as_mut().expect("loaded above");
            let first = b * size;
            // With adapters, each fold's items are drawn under their fold's adapter; draws come
            // from per-item streams, so splitting a block changes no item's endings.
            let mut groups: BTreeMap<Option<u32>, Vec<usize>> = BTreeMap::new();
            for i in first..first + block.len() {
                let fold = (!by_fold.is_empty()).then_some(items[i].fold);
                groups.entry(fold).or_default().push(i);
            }
            let mut part = Part {
                endings: vec![Vec::new(); block.len()],
                ..Part::default()
            };
            for (fold, indices) in groups {
                lm.set_adapter(fold.map(|f| by_fold[&f].shallow_clone()));
                let prompts: Vec<String> = indices
                    .iter()
                    .map(|&i| {
                        prompt(
                            items[i],
                            &examples(sources, items.len(), i, g.pretrained_examples, seed),
                        )
                    })
                    .collect();
                let job = BlockJob {
                    lm,
                    targets,
                    g,
                    settings: &settings,
                    validity: ctx.validity,
                    seed,
                    rows,
                };
                let group = job.write(items, so_far, &prompts, &indices)?;
                part.add(&group);
                for (i, endings) in indices.iter().zip(group.endings) {
                    part.endings[i - first] = endings;
                }
            }
            af_core::atomic::write(&path, serde_json::to_string(&part)?.as_bytes())?;
            wrote = true;
            part
        };
        bar.inc(block.len() as u64);
        total.add(&part);
        all.extend(part.endings);
    }
    let (name, parameters) = match &model {
        Some((m, _, _)) => (m.name.clone(), m.parameters()),
        None => (String::new(), 0),
    };
    if adapters.is_empty() && g.pretrained_adapt_steps > 0 {
        // Every block was there: the adapters' reports are too.
        let mut folds: Vec<u32> = items.iter().map(|i| i.fold).collect();
        folds.sort_unstable();
        folds.dedup();
        for fold in folds {
            let report = dir.join(format!("adapter-fold-{fold}.json"));
            if let Ok(text) = std::fs::read_to_string(&report) {
                let summary: AdapterSummary = serde_json::from_str(&text)?;
                adapters.push(AdapterSummary {
                    seconds_this_run: 0.0,
                    ..summary
                });
            }
        }
    }
    let summary = PretrainedSummary {
        model: name,
        path: model_path,
        parameters,
        endings_wanted: g.pretrained_endings,
        endings: all.iter().map(Vec::len).sum(),
        items_short: all
            .iter()
            .filter(|e: &&Vec<String>| e.len() < g.pretrained_endings)
            .count(),
        draws: total.draws,
        duplicates: total.duplicates,
        rejected: total.rejected,
        rejected_by_rule: total.rejected_by_rule,
        seconds_this_run: if wrote {
            start.elapsed().as_secs_f64()
        } else {
            0.0
        },
        adapters,
    };
    Ok((all, summary))
}

/// What drawing one block's endings uses, the same for every block.
struct BlockJob<'a> {
    lm: &'a CausalLm,
    targets: &'a Targets,
    g: &'a GenerateConfig,
    settings: &'a CausalSampleSettings,
    validity: &'a Validity<'a>,
    seed: u64,
    /// Rows per sampling batch: `pretrained-batch`, or fewer where the memory plan says so.
    rows: usize,
}

impl BlockJob<'_> {
    /// The items at `indices` (of `items`, `prompts` theirs in that order): rounds of draws (at
    /// most `max-rounds`) until each has its endings, none repeating the item's gold or
    /// `so_far`; the part's endings in the order of `indices`.
    fn write(
        &self,
        items: &[&Item],
        so_far: &[Vec<Ending>],
        prompts: &[String],
        indices: &[usize],
    ) -> anyhow::Result<Part> {
        let block: Vec<&Item> = indices.iter().map(|&i| items[i]).collect();
        let so_far: Vec<&Vec<Ending>> = indices.iter().map(|&i| &so_far[i]).collect();
        let (g, s, validity, seed) = (self.g, self.settings, self.validity, self.seed);
        let want = g.pretrained_endings;
        let mut part = Part {
            endings: vec![Vec::new(); block.len()],
            ..Part::default()
        };
        let mut seen: Vec<HashSet<String>> = block
            .iter()
            .zip(so_far)
            .map(|(item, before)| {
                std::iter::once(&item.ending)
                    .chain(before.iter().map(|e| &e.text))
                    .map(|e| e.trim().to_lowercase())
                    .collect()
            })
            .collect();
        let golds: Vec<Vec<String>> = block
            .iter()
            .map(|item| af_text::tokenize_lowercase(&item.ending))
            .collect();
        for round in 0..g.max_rounds.max(1) {
            // (item in block, count, uniforms, target lengths), items split so no job exceeds a batch.
            let mut jobs: Vec<(usize, usize, Vec<f32>, Vec<usize>)> = Vec::new();
            for (i, got) in part.endings.iter().enumerate() {
                let need = want.saturating_sub(got.len());
                if need == 0 {
                    continue;
                }
                let mut rng = item_rng(seed ^ SALT, indices[i], round);
                let mut lengths = self
                    .targets
                    .draw(block[i], indices[i], round, need, seed)
                    .into_iter();
                let mut left = need;
                while left > 0 {
                    let count = left.min(self.rows);
                    let uniforms: Vec<f32> = (0..count * s.max_tokens)
                        .map(|_| rng.random::<f32>())
                        .collect();
                    jobs.push((i, count, uniforms, lengths.by_ref().take(count).collect()));
                    left -= count;
                }
            }
            if jobs.is_empty() {
                break;
            }
            let mut start = 0;
            while start < jobs.len() {
                let mut end = start;
                let mut rows = 0;
                while end < jobs.len() && (end == start || rows + jobs[end].1 <= self.rows) {
                    rows += jobs[end].1;
                    end += 1;
                }
                let batch: Vec<PromptJob> = jobs[start..end]
                    .iter()
                    .map(|(i, count, u, lengths)| PromptJob {
                        prompt: &prompts[*i],
                        count: *count,
                        uniforms: u,
                        lengths,
                    })
                    .collect();
                let drawn = self.lm.sample(&batch, s)?;
                for ((i, _, _, _), endings) in jobs[start..end].iter().zip(drawn) {
                    for ending in endings {
                        if part.endings[*i].len() == want {
                            break;
                        }
                        part.draws += 1;
                        if ending.is_empty() || !seen[*i].insert(ending.to_lowercase()) {
                            part.duplicates += 1;
                            continue;
                        }
                        if !validity.reject.is_empty() {
                            let broken = validity
                                .broken(&af_text::tokenize_lowercase(&ending), Some(&golds[*i]));
                            let rejected: Vec<_> = broken
                                .iter()
                                .filter(|r| validity.reject.contains(r))
                                .collect();
                            if !rejected.is_empty() {
                                part.rejected += 1;
                                for r in rejected {
                                    *part
                                        .rejected_by_rule
                                        .entry(r.name().to_string())
                                        .or_default() += 1;
                                }
                                continue;
                            }
                        }
                        part.endings[*i].push(ending);
                    }
                }
                start = end;
            }
        }
        Ok(part)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every input an adapter's weights depend on moves its key: the generator, each example,
    /// the held-out questions and each setting.
    #[test]
    fn an_adapters_key_changes_with_each_of_its_inputs() {
        let e = |p: &str, x: &str| AdaptExample {
            prompt: p.into(),
            ending: x.into(),
        };
        let train = vec![e("A man runs. He", "jumps."), e("A dog sits. It", "barks.")];
        let held_out = vec![e("A girl swims. She", "dives.")];
        let settings = AdaptSettings {
            steps: 10,
            batch: 2,
            rank: 8,
            alpha: 16.0,
            learning_rate: 1e-3,
            weight_decay: 0.01,
            seed: 7,
        };
        let base = adapter_key(1, &train, &held_out, &settings);
        assert_eq!(base, adapter_key(1, &train, &held_out, &settings));
        let mut keys = vec![
            adapter_key(2, &train, &held_out, &settings),
            adapter_key(1, &train[..1], &held_out, &settings),
            adapter_key(
                1,
                &[train[1].clone(), train[0].clone()],
                &held_out,
                &settings,
            ),
            adapter_key(
                1,
                &[e("A man runs. He", "jumps!"), train[1].clone()],
                &held_out,
                &settings,
            ),
            adapter_key(1, &train, &[], &settings),
            // The same texts moved from training to held out are other inputs.
            adapter_key(
                1,
                &train[..1],
                &[train[1].clone(), held_out[0].clone()],
                &settings,
            ),
        ];
        for change in [
            |s: &mut AdaptSettings| s.steps += 1,
            |s: &mut AdaptSettings| s.batch += 1,
            |s: &mut AdaptSettings| s.rank += 1,
            |s: &mut AdaptSettings| s.alpha += 1.0,
            |s: &mut AdaptSettings| s.learning_rate *= 2.0,
            |s: &mut AdaptSettings| s.weight_decay = 0.0,
            |s: &mut AdaptSettings| s.seed += 1,
        ] {
            let mut changed = settings.clone();
            change(&mut changed);
            keys.push(adapter_key(1, &train, &held_out, &changed));
        }
        for (i, k) in keys.iter().enumerate() {
            assert_ne!(k, &base, "change {i} kept the key");
        }
    }

    fn item(i: usize, group: &str) -> Item {
        Item {
            id: format!("i{i}"),
            group: group.into(),
            fold: 0,
            context: format!("Caption {i} ."),
            noun_phrase: "He".into(),
            ending: format!("does thing {i}."),
            context_tokens: 3,
            noun_phrase_tokens: 1,
            ending_tokens: 3,
            distractors: Vec::new(),
        }
    }

    #[test]
    fn other_gold_targets_are_other_videos_lengths_drawn_from_the_items_own_stream() {
        let pool: Vec<(String, usize)> = (0..30)
            .map(|i| (format!("g{}", i % 3), if i % 3 == 0 { 100 } else { i }))
            .collect();
        let targets = Targets::OtherGold(pool);
        let item = item(0, "g0");
        let drawn = targets.draw(&item, 4, 1, 50, 9);
        assert_eq!(drawn.len(), 50);
        assert!(
            drawn.iter().all(|&n| n != 100),
            "never the item's own group: {drawn:?}"
        );
        assert_eq!(
            drawn,
            targets.draw(&item, 4, 1, 50, 9),
            "the same item, round and seed draw the same"
        );
        assert_ne!(
            drawn,
            targets.draw(&item, 4, 2, 50, 9),
            "another round draws anew"
        );
        assert_eq!(
            Targets::Gold(vec![3, 7, 5]).draw(&item, 1, 0, 4, 9),
            vec![7; 4]
        );
        assert!(Targets::None.draw(&item, 1, 0, 4, 9).is_empty());
    }

    #[test]
    fn nearby_gold_targets_are_other_videos_lengths_within_the_gap_of_the_items_gold() {
        // Golds of 1..=30 tokens ("w w ... w."); words stand for the generator's count.
        let sources: Vec<Nearby> = (1..=30)
            .map(|t| Nearby {
                tokens: t,
                group: format!("g{}", t % 4),
                words: 100 + t,
            })
            .collect();
        let targets = Targets::NearbyGold {
            sources,
            gap: 3,
            own: vec![7, 55],
        };
        let mut item = item(0, "g2");
        item.ending = "w w w w w w w w w.".into(); // 10 tokens
        let drawn = targets.draw(&item, 0, 0, 200, 9);
        assert_eq!(drawn.len(), 200);
        assert!(
            drawn.iter().all(|&w| (107..=113).contains(&w) && w != 110),
            "lengths 7..=13, never g2's 10: {drawn:?}"
        );
        assert!(
            (107..=113)
                .filter(|&w| w != 110)
                .all(|w| drawn.contains(&w)),
            "every length in the window drawn: {drawn:?}"
        );
        assert_eq!(
            drawn,
            targets.draw(&item, 0, 0, 200, 9),
            "the item's own stream"
        );
        item.ending = (0..50).map(|_| "w ").collect::<String>() + "w."; // 52 tokens: no gold near
        assert_eq!(
            targets.draw(&item, 1, 0, 3, 9),
            vec![55; 3],
            "its own gold's length when none is near"
        );
    }

    #[test]
    fn examples_come_from_other_videos_past_the_questions_one_pair_a_line() {
        let sources: Vec<Item> = (0..40).map(|i| item(i, &format!("g{}", i % 7))).collect();
        for index in 0..10 {
            let chosen = examples(&sources, 10, index, 3, 5);
            assert_eq!(chosen.len(), 3);
            assert!(
                chosen.iter().all(|e| e.group != sources[index].group
                    && e.id[1..].parse::<usize>().unwrap() >= 10),
                "{index}"
            );
            assert_eq!(
                chosen.iter().map(|e| &e.id).collect::<Vec<_>>(),
                examples(&sources, 10, index, 3, 5)
                    .iter()
                    .map(|e| &e.id)
                    .collect::<Vec<_>>(),
                "drawn from the item's own stream"
            );
        }
        let p = prompt(&sources[0], &examples(&sources, 10, 0, 2, 5));
        let lines: Vec<&str> = p.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with("Caption ") && lines[0].contains(" He does thing "),
            "{p}"
        );
        assert_eq!(lines[2], "Caption 0 . He");
        assert_eq!(prompt(&sources[0], &[]), "Caption 0 . He");
    }

    /// Cross-fitting: fold k's adapter trains on every item of the other folds and on nothing of
    /// fold k, not even as an example caption in a prompt; sampling's own examples are unchanged.
    #[test]
    fn a_folds_adapter_never_reads_its_folds_items() {
        let sources: Vec<Item> = (0..40)
            .map(|i| Item {
                fold: (i % 3) as u32,
                ..item(i, &format!("g{}", i % 7))
            })
            .collect();
        let line_item = |line: &str| -> usize { line.split(' ').nth(1).unwrap().parse().unwrap() };
        for fold in 0..3 {
            let chosen = adapt_examples(&sources, 10, fold, 3, 5);
            assert_eq!(
                chosen.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
                (0..40)
                    .filter(|i| i % 3 != fold as usize)
                    .collect::<Vec<_>>(),
                "every item of another fold, questions and the rest"
            );
            for (index, e) in &chosen {
                assert_eq!(e.ending, sources[*index].ending);
                let lines: Vec<&str> = e.prompt.lines().collect();
                assert_eq!(lines.len(), 4, "{}", e.prompt);
                assert_eq!(line_item(lines[3]), *index, "the item's own prompt last");
                for l in &lines {
                    assert_ne!(sources[line_item(l)].fold, fold, "{}", e.prompt);
                }
            }
        }
        for index in 0..10 {
            let ids = |v: Vec<&Item>| v.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
            assert_eq!(
                ids(examples(&sources, 10, index, 3, 5)),
                ids(examples_where(&sources, 10, index, 3, 5, |_| true))
            );
        }
    }
}
