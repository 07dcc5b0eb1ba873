//! The `generate` stage: for every item, up to N unique endings sampled from the LM of its fold
//! (which never saw the item), with the LM features of each and of the gold ending, written to the
//! candidate pool (`generate/pool/part-*.parquet`).
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
//! it to the pool statistics, so host memory holds at most two blocks' candidates, and the
//! report needs no second pass over the pool (blocks done by an earlier run or another shard are
//! read back for it).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use af_core::{Candidate, Item, ValidityRule};
use af_nn::lm::BiLm;
use af_nn::runtime::in_precision;
use af_nn::sample::{
    first_token_distribution, items_features, sample, ItemEndings, SampleJob, SampleSettings,
};
use af_text::validity::ValidityRules;
use af_text::{detokenize, Tagger, Vocab};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tch::{nn, Device};

use crate::runner::{StageContext, StageName};
use af_nn::lm_files::{encode, load_fold, load_vocab};

/// The random stream of one item in one sampling round.
pub(super) fn item_rng(seed: u64, item_index: usize, round: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6765_6e65_7261_7465);
    rng.set_stream(((item_index as u64) << 8) | round as u64);
    rng
}

/// An item's context `s`, noun phrase `n` and gold ending `v` as LM ids, and the sampling prefix
/// `<bos> s n`.
struct Encoded {
    s: Vec<i64>,
    n: Vec<i64>,
    v: Vec<i64>,
    prefix: Vec<i64>,
}

impl Encoded {
    fn new(vocab: &Vocab, item: &Item) -> Self {
        let (s, n, v) = (
            encode(vocab, &item.context),
            encode(vocab, &item.noun_phrase),
            encode(vocab, &item.ending),
        );
        let prefix = [&[af_nn::lm::BOS][..], &s, &n].concat();
        Self { s, n, v, prefix }
    }
}

/// The validity rules as the stage applies them (af-text's `validity`): which reject an ending,
/// the thresholds, and the tagger that reads the endings.
pub(super) struct Validity<'a> {
    tagger: &'a Tagger,
    rules: ValidityRules,
    pub(super) reject: &'a [ValidityRule],
}

impl Validity<'_> {
    /// The rules `ending` breaks (with the gold: every rule; without: the ending's own).
    pub(super) fn broken<S: AsRef<str>>(
        &self,
        ending: &[S],
        gold: Option<&[S]>,
    ) -> Vec<ValidityRule> {
        let tags = self.tagger.tag(ending);
        af_text::validity::check(ending, &tags, gold, &self.rules)
    }
}

/// Draws an item's sampling rejected, per rule broken (a draw may break several), and in all.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
struct Rejected {
    draws: usize,
    by_rule: BTreeMap<ValidityRule, usize>,
}

/// Borrowed endings (`[generate] borrowed-endings`): for each of the first `questions` items, up to `n`
/// gold endings of other items, as (source item's index, ending). A source is of the item's fold,
/// so the LM that scores the item never trained on it, as it never trained on the gold; of
/// another group, so it is not the next sentence of the same video; and, while there are such
/// items, past the questions, so it is not another question's right answer. Drawn with the
/// item's own random stream; the `[generate] reject` rules apply as to sampled endings. With
/// `agree`, a source's ending begins as the item's gold does (`validity::onset`).
fn borrowed_endings(
    all: &[Item],
    questions: usize,
    n: usize,
    agree: bool,
    seed: u64,
    validity: &Validity,
) -> Vec<Vec<(usize, String)>> {
    use rayon::prelude::*;
    // Every item's onset, or one for all when any source will do.
    let onsets: Vec<Option<String>> = if agree {
        all.par_iter()
            .map(|i| {
                af_text::validity::onset(
                    &validity.tagger.tag(&af_text::tokenize_lowercase(&i.ending)),
                )
            })
            .collect()
    } else {
        vec![None; all.len()]
    };
    // Per fold and onset: the items past the questions, and the questions themselves.
    let mut beyond: HashMap<(u32, &Option<String>), Vec<usize>> = HashMap::new();
    let mut within: HashMap<(u32, &Option<String>), Vec<usize>> = HashMap::new();
    for (i, item) in all.iter().enumerate() {
        let side = if i < questions {
            &mut within
        } else {
            &mut beyond
        };
        side.entry((item.fold, &onsets[i])).or_default().push(i);
    }
    let none = Vec::new();
    let pick = |index: usize| -> Vec<(usize, String)> {
        let item = &all[index];
        let key = (item.fold, &onsets[index]);
        let gold = af_text::tokenize_lowercase(&item.ending);
        let mut seen: HashSet<&str> = std::iter::once(item.ending.as_str())
            .chain(item.distractors.iter().map(String::as_str))
            .collect();
        let mut rng = item_rng(seed ^ 0x666f_756e_6420, index, 0);
        let mut out = Vec::new();
        for sources in [
            beyond.get(&key).unwrap_or(&none),
            within.get(&key).unwrap_or(&none),
        ] {
            // Enough tries that a fold of a few hundred items still fills; bounded for tiny folds.
            for _ in 0..n * 20 {
                if out.len() == n || sources.is_empty() {
                    break;
                }
                let source = sources[rng.random_range(0..sources.len())];
                let candidate = &all[source];
                if candidate.group == item.group || !seen.insert(candidate.ending.as_str()) {
                    continue;
                }
                if !validity.reject.is_empty() {
                    let broken = validity
                        .broken(&af_text::tokenize_lowercase(&candidate.ending), Some(&gold));
                    if broken.iter().any(|r| validity.reject.contains(r)) {
                        continue;
                    }
                }
                out.push((source, candidate.ending.clone()));
            }
        }
        out
    };
    (0..questions.min(all.len()))
        .into_par_iter()
        .map(pick)
        .collect()
}

/// Samples and scores one block; returns its rows (gold first for each item) and the draws the
/// validity rules rejected.
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
    mixed: bool,
    validity: &Validity,
) -> (Vec<Candidate>, Rejected) {
    let enc: Vec<Encoded> = block
        .iter()
        .map(|(_, item)| Encoded::new(vocab, item))
        .collect();
    let gold_tokens: Vec<Vec<String>> = block
        .iter()
        .map(|(_, item)| af_text::tokenize_lowercase(&item.ending))
        .collect();
    let mut rejected = Rejected::default();
    let mut seen: Vec<HashSet<Vec<i64>>> =
        enc.iter().map(|e| HashSet::from([e.v.clone()])).collect();
    // A question's own wrong options come first, as they are; sampled endings repeat none of them.
    let mut found: Vec<Vec<Vec<i64>>> = block
        .iter()
        .map(|(_, item)| item.distractors.iter().map(|d| encode(vocab, d)).collect())
        .collect();
    for (seen, found) in seen.iter_mut().zip(&found) {
        seen.extend(found.iter().cloned());
    }
    let target: Vec<usize> = block
        .iter()
        .map(|(_, item)| item.distractors.len() + endings)
        .collect();
    let t = settings.max_tokens;
    for round in 0..max_rounds {
        // Duplicates are common for short contexts: ask for more than is missing.
        let wanted: Vec<usize> = found
            .iter()
            .zip(&target)
            .map(|(f, &target)| {
                let missing = target - f.len();
                if missing == 0 {
                    0
                } else {
                    missing + missing / 4 + 8
                }
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
                while end < members.len() && (end == start || seqs + wanted[members[end]] <= batch)
                {
                    seqs += wanted[members[end]];
                    end += 1;
                }
                let jobs: Vec<SampleJob> = members[start..end]
                    .iter()
                    .map(|&i| SampleJob {
                        prefix: &enc[i].prefix,
                        count: wanted[i],
                        uniforms: &uniforms[i],
                    })
                    .collect();
                let drawn = in_precision(mixed, device, || sample(lm, &jobs, settings));
                for (&i, endings_drawn) in members[start..end].iter().zip(drawn) {
                    for e in endings_drawn {
                        if found[i].len() == target[i] {
                            break;
                        }
                        if !seen[i].insert(e.clone()) {
                            continue;
                        }
                        if !validity.reject.is_empty() {
                            // The ending as the pool will hold it, read back as the report reads it.
                            let words: Vec<&str> =
                                e.iter().map(|&id| vocab.word(id as u32)).collect();
                            let ending = af_text::tokenize_lowercase(&detokenize(&words));
                            let broken = validity.broken(&ending, Some(&gold_tokens[i]));
                            if broken.iter().any(|r| validity.reject.contains(r)) {
                                rejected.draws += 1;
                                for r in broken {
                                    *rejected.by_rule.entry(r).or_default() += 1;
                                }
                                continue;
                            }
                        }
                        found[i].push(e);
                    }
                }
                start = end;
            }
        }
    }

    // Features of the gold and every candidate, the block's items of one fold together.
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
                s: &enc[i].s,
                n: &enc[i].n,
                endings: std::iter::once(enc[i].v.as_slice())
                    .chain(found[i].iter().map(Vec::as_slice))
                    .collect(),
            })
            .collect();
        let (_, lm) = &models[&fold];
        for (&i, f) in members.iter().zip(in_precision(mixed, device, || {
            items_features(lm, &jobs, batch, device)
        })) {
            feats[i] = f;
        }
    }
    let mut rows = Vec::new();
    for (i, (index, item)) in block.iter().enumerate() {
        let e = &enc[i];
        for (c, f) in std::mem::take(&mut feats[i]).into_iter().enumerate() {
            let (ending, tokens, truncated) = if c == 0 {
                (item.ending.clone(), e.v.len() as u32, false)
            } else if c <= item.distractors.len() {
                (
                    item.distractors[c - 1].clone(),
                    found[i][c - 1].len() as u32,
                    false,
                )
            } else {
                let v = &found[i][c - 1];
                let words: Vec<&str> = v.iter().map(|&id| vocab.word(id as u32)).collect();
                (
                    detokenize(&words),
                    v.len() as u32,
                    v.len() == t && !settings.stop.contains(v.last().unwrap_or(&0)),
                )
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
    (rows, rejected)
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
    device: Device,
) -> PrecisionCheck {
    let (mut tv_sum, mut tv_max, mut n) = (0.0f64, 0.0f64, 0usize);
    let mut diff = [0f32; 8];
    for (fold, (_, lm)) in models {
        let enc: Vec<Encoded> = block
            .iter()
            .filter(|(_, item)| item.fold == *fold)
            .map(|(_, item)| Encoded::new(vocab, item))
            .collect();
        if enc.is_empty() {
            continue;
        }
        let refs: Vec<&[i64]> = enc.iter().map(|e| e.prefix.as_slice()).collect();
        let full = first_token_distribution(lm, &refs, settings);
        let mixed = in_precision(true, device, || {
            first_token_distribution(lm, &refs, settings)
        });
        for (p, q) in full.iter().zip(&mixed) {
            let tv = 0.5
                * p.iter()
                    .zip(q)
                    .map(|(a, b)| f64::from((a - b).abs()))
                    .sum::<f64>();
            tv_sum += tv;
            tv_max = tv_max.max(tv);
            n += 1;
        }
        let jobs: Vec<ItemEndings> = enc
            .iter()
            .map(|e| ItemEndings {
                s: &e.s,
                n: &e.n,
                endings: vec![e.v.as_slice()],
            })
            .collect();
        let full = items_features(lm, &jobs, batch, device);
        let mixed = in_precision(true, device, || items_features(lm, &jobs, batch, device));
        for (a, b) in full.iter().flatten().zip(mixed.iter().flatten()) {
            for f in 0..8 {
                diff[f] = diff[f].max((a[f] - b[f]).abs());
            }
        }
    }
    PrecisionCheck {
        items: n,
        first_token_tv_mean: tv_sum / n.max(1) as f64,
        first_token_tv_max: tv_max,
        feature_max_abs_difference: diff,
    }
}

/// `generate/report.json`.
#[derive(Serialize)]
pub struct GenerateReport {
    pub items: usize,
    /// New endings wanted per item.
    pub endings_wanted: usize,
    pub endings_generated: usize,
    /// The questions' own wrong options in the pool (`questions` inputs); the shares and
    /// validity counts below are over every pool ending, these included.
    pub given_endings: usize,
    /// Other items' gold endings in the pool (`[generate] borrowed-endings`; `borrowed.tsv` says
    /// which), also counted in the shares and validity counts.
    pub borrowed_endings: usize,
    /// Endings the pretrained generator wrote (`[generate] pretrained-endings`;
    /// `pretrained.json` and `pretrained.tsv` say more), also counted in the shares and validity
    /// counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pretrained: Option<super::pretrained_endings::PretrainedSummary>,
    pub items_with_all_endings: usize,
    pub items_short: usize,
    pub share_with_all_endings: f64,
    pub truncated_share: f64,
    pub distinct_1: f64,
    pub distinct_2: f64,
    pub mean_gold_fwd_logppl_v_given_sn: f64,
    pub mean_generated_fwd_logppl_v_given_sn: f64,
    /// `fp32` or `mixed` (CUDA autocast), as this run sampled and scored.
    pub precision: &'static str,
    /// For `mixed`: how far it moved the numbers (`precision-check.json`, from this or an
    /// earlier run of the stage).
    pub precision_check: Option<serde_json::Value>,
    pub validity: ValidityReport,
}

/// What a run of the stage did: the whole pool, or its shard with blocks of others missing.
pub enum GenerateOutcome {
    Complete(GenerateReport),
    Shard {
        shard: usize,
        shards: usize,
        missing_blocks: usize,
    },
}

impl std::fmt::Display for GenerateOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GenerateOutcome::Complete(r) => {
                write!(
                    f,
                    "generate: {} endings for {} items; {:.1}% of items have all {}; distinct-1 {:.3}, distinct-2 {:.3}; {:.1}% of endings pass the validity rules (gold {:.1}%)",
                    r.endings_generated,
                    r.items,
                    100.0 * r.share_with_all_endings,
                    r.endings_wanted,
                    r.distinct_1,
                    r.distinct_2,
                    100.0 * r.validity.valid_share,
                    100.0 * r.validity.gold_valid_share
                )?;
                if r.given_endings > 0 {
                    write!(f, "\n  and the questions' own {} wrong options", r.given_endings)?;
                }
                if r.borrowed_endings > 0 {
                    write!(f, "\n  and {} other items' gold endings (borrowed)", r.borrowed_endings)?;
                }
                // With `endings = 0` the first line counts nothing the pool holds: say what does.
                if let Some(p) = &r.pretrained {
                    let rules: Vec<String> = p.rejected_by_rule.iter().map(|(rule, n)| format!("{rule} {n}")).collect();
                    write!(
                        f,
                        "\n  and {} pretrained endings ({} items short of {}): {:.1}% of {} draws kept; rejected {}{}",
                        p.endings,
                        p.items_short,
                        p.endings_wanted,
                        100.0 * p.endings as f64 / p.draws.max(1) as f64,
                        p.draws,
                        p.rejected,
                        if rules.is_empty() { String::new() } else { format!(" ({})", rules.join(", ")) }
                    )?;
                }
                Ok(())
            }
            GenerateOutcome::Shard { shard, shards, missing_blocks } => write!(
                f,
                "generate: shard {shard}/{shards} done; {missing_blocks} blocks of other shards are missing. Run `af generate` without --shard once all shards finished, to check the pool and write its report."
            ),
        }
    }
}

/// The pool statistics, added to one part at a time (in any order). Counts and sets do not
/// depend on the order; the log-perplexity sums are kept per block and added in block order, so
/// the report is the same whether a block was counted as it was written or read back later.
#[derive(Default)]
struct PoolStats {
    per_item: HashMap<u32, usize>,
    generated: usize,
    truncated: usize,
    unigrams: HashSet<String>,
    bigrams: HashSet<(String, String)>,
    n_unigrams: usize,
    n_bigrams: usize,
    /// Per block: the sums of gold and of generated endings' forward log-perplexity.
    logppl: BTreeMap<usize, (f64, f64)>,
    /// The pool's endings that break each validity rule, and that break none.
    kept_broken: BTreeMap<ValidityRule, usize>,
    kept_valid: usize,
    /// The gold endings that break each rule of the ending alone, and that break none.
    gold: usize,
    gold_broken: BTreeMap<ValidityRule, usize>,
    gold_valid: usize,
}

impl PoolStats {
    fn add(&mut self, block: usize, rows: &[Candidate], validity: &Validity) {
        self.count_validity(rows, validity);
        let (mut gold, mut generated) = (0.0, 0.0);
        for row in rows {
            let entry = self.per_item.entry(row.item_index).or_default();
            if row.is_gold() {
                gold += f64::from(row.features[0]);
                continue;
            }
            *entry += 1;
            self.generated += 1;
            self.truncated += usize::from(row.truncated);
            generated += f64::from(row.features[0]);
            let toks = af_text::tokenize::tokenize_owned(&row.ending);
            self.n_unigrams += toks.len();
            self.n_bigrams += toks.len().saturating_sub(1);
            for w in toks.windows(2) {
                self.bigrams.insert((w[0].clone(), w[1].clone()));
            }
            self.unigrams.extend(toks);
        }
        self.logppl.insert(block, (gold, generated));
    }

    /// Every row's validity: a generated ending against its item's gold (the row before it with
    /// candidate 0), a gold ending by the rules of the ending alone.
    fn count_validity(&mut self, rows: &[Candidate], validity: &Validity) {
        use rayon::prelude::*;
        let tokens: Vec<Vec<String>> = rows
            .par_iter()
            .map(|r| af_text::tokenize_lowercase(&r.ending))
            .collect();
        let mut gold_of = Vec::with_capacity(rows.len());
        let mut gold = 0;
        for (r, row) in rows.iter().enumerate() {
            if row.is_gold() {
                gold = r;
            }
            gold_of.push(gold);
        }
        let broken: Vec<Vec<ValidityRule>> = (0..rows.len())
            .into_par_iter()
            .map(|r| {
                if rows[r].is_gold() {
                    validity.broken(&tokens[r], None)
                } else {
                    validity.broken(&tokens[r], Some(&tokens[gold_of[r]]))
                }
            })
            .collect();
        for (row, broken) in rows.iter().zip(broken) {
            let (counts, valid) = if row.is_gold() {
                self.gold += 1;
                (&mut self.gold_broken, &mut self.gold_valid)
            } else {
                (&mut self.kept_broken, &mut self.kept_valid)
            };
            *valid += usize::from(broken.is_empty());
            for rule in broken {
                *counts.entry(rule).or_default() += 1;
            }
        }
    }

    fn report(
        &self,
        items: &[Item],
        endings: usize,
        borrowed: usize,
        pretrained: Option<super::pretrained_endings::PretrainedSummary>,
        precision: &'static str,
        check: Option<serde_json::Value>,
        validity: ValidityReport,
    ) -> anyhow::Result<GenerateReport> {
        let n_items = items.len();
        anyhow::ensure!(
            self.per_item.len() == n_items,
            "the pool covers {} items, the items file has {n_items}",
            self.per_item.len()
        );
        let full = items
            .iter()
            .enumerate()
            .filter(|(i, item)| {
                self.per_item.get(&(*i as u32)) == Some(&(item.distractors.len() + endings))
            })
            .count();
        let written = pretrained.as_ref().map_or(0, |p| p.endings);
        let given: usize =
            items.iter().map(|i| i.distractors.len()).sum::<usize>() - borrowed - written;
        let (gold_ppl, generated_ppl) = self
            .logppl
            .values()
            .fold((0.0, 0.0), |(a, b), (g, x)| (a + g, b + x));
        Ok(GenerateReport {
            items: n_items,
            endings_wanted: endings,
            endings_generated: self.generated - given - borrowed - written,
            given_endings: given,
            borrowed_endings: borrowed,
            pretrained,
            items_with_all_endings: full,
            items_short: n_items - full,
            share_with_all_endings: full as f64 / n_items.max(1) as f64,
            truncated_share: self.truncated as f64 / self.generated.max(1) as f64,
            distinct_1: self.unigrams.len() as f64 / self.n_unigrams.max(1) as f64,
            distinct_2: self.bigrams.len() as f64 / self.n_bigrams.max(1) as f64,
            mean_gold_fwd_logppl_v_given_sn: gold_ppl / n_items.max(1) as f64,
            mean_generated_fwd_logppl_v_given_sn: generated_ppl / self.generated.max(1) as f64,
            precision,
            precision_check: check,
            validity,
        })
    }

    /// The validity part of the report, with the draws rejected while sampling.
    fn validity_report(&self, v: &Validity, rejected: &Rejected) -> ValidityReport {
        let share = |n: usize, of: usize| n as f64 / of.max(1) as f64;
        let rules = ValidityRule::ALL
            .iter()
            .map(|&r| {
                let kept = self.kept_broken.get(&r).copied().unwrap_or(0);
                let gold = r
                    .of_the_ending_alone()
                    .then(|| self.gold_broken.get(&r).copied().unwrap_or(0));
                let rule = RuleCount {
                    kept,
                    kept_share: share(kept, self.generated),
                    gold,
                    gold_share: gold.map(|g| share(g, self.gold)),
                    rejected_draws: rejected.by_rule.get(&r).copied().unwrap_or(0),
                };
                (r.name().to_string(), rule)
            })
            .collect();
        ValidityReport {
            reject: v.reject.iter().map(|r| r.name()).collect(),
            near_copy_overlap: v.rules.near_copy_overlap,
            max_length_gap: v.rules.max_length_gap,
            valid_share: share(self.kept_valid, self.generated),
            gold_valid_share: share(self.gold_valid, self.gold),
            rejected_draws: rejected.draws,
            rules,
        }
    }
}

/// How the pool's endings fare against the validity rules (`report.json`, `validity`).
#[derive(Serialize)]
pub struct ValidityReport {
    /// The rules that rejected draws while sampling (`[generate] reject`).
    pub reject: Vec<&'static str>,
    pub near_copy_overlap: f64,
    pub max_length_gap: usize,
    /// Generated endings in the pool that break no rule.
    pub valid_share: f64,
    /// Gold endings that break none of the rules of the ending alone.
    pub gold_valid_share: f64,
    /// Unique draws the `reject` rules turned away.
    pub rejected_draws: usize,
    pub rules: BTreeMap<String, RuleCount>,
}

/// One rule: the pool's endings that break it, the gold endings that do (for the rules of the
/// ending alone), and the draws it turned away.
#[derive(Serialize)]
pub struct RuleCount {
    pub kept: usize,
    pub kept_share: f64,
    pub gold: Option<usize>,
    pub gold_share: Option<f64>,
    pub rejected_draws: usize,
}

/// The pool is complete when every block is done; only then does the runner record the stage.
pub fn run(ctx: &StageContext) -> anyhow::Result<GenerateOutcome> {
    let config = ctx.config;
    let g = &config.generate;
    let mut items = af_io::items::read_items(&ctx.stage_dir(StageName::Pairs).join("items.jsonl"))?;
    let questions = if g.limit_items > 0 && g.limit_items < items.len() {
        tracing::info!(
            "generate: the first {} of {} items only ([generate] limit-items)",
            g.limit_items,
            items.len()
        );
        g.limit_items
    } else {
        items.len()
    };
    let lm_dir = ctx.stage_dir(StageName::Lm);
    let vocab = load_vocab(&lm_dir)?;
    let device = crate::setup::device(config)?;
    let mixed = g.precision.mixed_on(device.is_cuda());
    let precision = if mixed { "mixed" } else { "fp32" };
    let pool = ctx.dir.join("pool");
    std::fs::create_dir_all(&pool)?;
    // Each block's draws rejected by the validity rules, written before its part.
    let rejected_dir = ctx.dir.join("rejected");
    std::fs::create_dir_all(&rejected_dir)?;
    let rejected_path = |b: usize| rejected_dir.join(format!("part-{b:05}.json"));
    let tagger = crate::setup::load_tagger(config.tagger.model.as_deref())?;
    let validity = Validity {
        tagger: &tagger,
        rules: ValidityRules {
            near_copy_overlap: g.near_copy_overlap,
            max_length_gap: g.max_length_gap,
        },
        reject: &g.reject,
    };
    // Borrowed endings join an item's pool as if the item had come with them, after its own.
    let borrowed = if g.borrowed_endings > 0 {
        borrowed_endings(
            &items,
            questions,
            g.borrowed_endings,
            g.borrowed_agree,
            config.run.seed,
            &validity,
        )
    } else {
        Vec::new()
    };
    if !borrowed.is_empty() {
        // Where each borrowed ending came from, for the reader who wants to check one.
        let mut tsv = String::from("item_index\titem_id\tcandidate\tsource_index\tsource_id\n");
        for (index, endings) in borrowed.iter().enumerate() {
            let own = items[index].distractors.len();
            for (j, (source, _)) in endings.iter().enumerate() {
                tsv.push_str(&format!(
                    "{index}\t{}\t{}\t{source}\t{}\n",
                    items[index].id,
                    own + j + 1,
                    items[*source].id
                ));
            }
        }
        af_core::atomic::write(ctx.dir.join("borrowed.tsv"), tsv.as_bytes())?;
    }
    // Other items' captions for the pretrained generator: its prompts' examples
    // (`pretrained-examples`) and its shaped endings' target lengths (`pretrained-length-target`).
    let sources = if g.pretrained_endings > 0 {
        items.clone()
    } else {
        Vec::new()
    };
    items.truncate(questions);
    for (item, endings) in items.iter_mut().zip(&borrowed) {
        item.distractors
            .extend(endings.iter().map(|(_, e)| e.clone()));
    }
    // Pretrained endings join after the borrowed ones, new to the pool so far.
    let pretrained = if g.pretrained_endings > 0 {
        let bar = ctx
            .progress
            .bar("items (pretrained generator)", items.len() as u64);
        let (written, summary) = super::pretrained_endings::pretrained_endings(
            &ctx.dir.join("pretrained"),
            &items,
            &sources,
            g,
            &validity,
            config.run.seed,
            device,
            bar.as_ref(),
        )?;
        bar.finish();
        let mut tsv = String::from("item_index\titem_id\tcandidate\n");
        for (index, (item, endings)) in items.iter_mut().zip(written).enumerate() {
            for j in 0..endings.len() {
                tsv.push_str(&format!(
                    "{index}\t{}\t{}\n",
                    item.id,
                    item.distractors.len() + j + 1
                ));
            }
            item.distractors.extend(endings);
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
        Some(summary)
    } else {
        None
    };

    let indexed: Vec<(usize, &Item)> = items.iter().enumerate().collect();
    let blocks: Vec<&[(usize, &Item)]> = indexed.chunks(g.block_items).collect();
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
    let settings = SampleSettings {
        max_tokens: g.max_tokens,
        temperature: g.temperature,
        top_k: g.top_k,
        top_p: g.top_p,
        stop,
        device,
    };
    let mut models = HashMap::new();
    if !todo.is_empty() {
        for fold in 0..config.pairs.folds {
            models.insert(fold, load_fold(&config.lm, &vocab, &lm_dir, fold, device)?);
        }
    }
    let check_path = ctx.dir.join("precision-check.json");
    if mixed && !todo.is_empty() {
        let check = precision_check(
            blocks[todo[0]],
            &models,
            &vocab,
            &settings,
            g.batch_sequences,
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
    let todo_items: usize = todo.iter().map(|&b| blocks[b].len()).sum();
    let bar = ctx.progress.bar("items", todo_items as u64);
    let start = Instant::now();
    // The writer: writes each block's part and counts it, while the device goes on.
    let (sender, receiver) = std::sync::mpsc::sync_channel::<(usize, Vec<Candidate>, Rejected)>(1);
    let mut stats = std::thread::scope(|scope| -> anyhow::Result<PoolStats> {
        let writer = scope.spawn(|| -> anyhow::Result<PoolStats> {
            let mut stats = PoolStats::default();
            for (b, rows, rejected) in receiver {
                af_core::atomic::write(
                    rejected_path(b),
                    serde_json::to_string(&rejected)?.as_bytes(),
                )?;
                af_io::pool::write_part(&af_io::pool::part_path(&pool, b), &rows)?;
                stats.add(b, &rows, &validity);
                bar.inc(blocks[b].len() as u64);
                bar.set_message(format!(
                    "{:.0} endings/s",
                    stats.generated as f64 / start.elapsed().as_secs_f64()
                ));
            }
            Ok(stats)
        });
        for &b in &todo {
            let (rows, rejected) = run_block(
                blocks[b],
                &models,
                &vocab,
                &settings,
                g.endings,
                g.max_rounds,
                g.batch_sequences,
                config.run.seed,
                device,
                mixed,
                &validity,
            );
            if sender.send((b, rows, rejected)).is_err() {
                break; // the writer failed: its error is reported below
            }
        }
        drop(sender);
        writer
            .join()
            .map_err(|_| anyhow::anyhow!("the pool writer panicked"))?
    })?;
    bar.finish();
    if !todo.is_empty() {
        let generated = stats.generated;
        tracing::info!(
            "generate: {generated} endings for {todo_items} items in {:.1} s ({:.0} endings/s)",
            start.elapsed().as_secs_f64(),
            generated as f64 / start.elapsed().as_secs_f64()
        );
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
            stats.add(
                b,
                &af_io::pool::read_part(&af_io::pool::part_path(&pool, b))?,
                &validity,
            );
        }
    }
    let mut rejected = Rejected::default();
    for b in 0..blocks.len() {
        let path = rejected_path(b);
        // A pool made before the rules existed has no record: nothing was rejected then.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let block: Rejected =
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        rejected.draws += block.draws;
        for (rule, n) in block.by_rule {
            *rejected.by_rule.entry(rule).or_default() += n;
        }
    }
    let validity_report = stats.validity_report(&validity, &rejected);
    let check = if mixed && check_path.exists() {
        Some(serde_json::from_str(&std::fs::read_to_string(
            &check_path,
        )?)?)
    } else {
        None
    };
    let borrowed_counts: Vec<usize> = borrowed.iter().map(Vec::len).collect();
    let report = stats.report(
        &items,
        g.endings,
        borrowed_counts.iter().sum(),
        pretrained,
        precision,
        check,
        validity_report,
    )?;
    af_core::atomic::write(
        ctx.dir.join("report.json"),
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    af_core::atomic::write(
        ctx.dir.join("samples.txt"),
        samples(&pool, &items, &borrowed_counts, 8, 6)?.as_bytes(),
    )?;
    Ok(GenerateOutcome::Complete(report))
}

/// A few items as text: context, noun phrase, the gold ending, the first two of the item's own
/// wrong options and of its borrowed endings (`borrowed[i]` per item), and the first generated ones.
fn samples(
    pool: &std::path::Path,
    items: &[Item],
    borrowed: &[usize],
    n_items: usize,
    per_item: usize,
) -> anyhow::Result<String> {
    let mut out = String::new();
    let Some(first) = af_io::pool::parts(pool)?.into_iter().next() else {
        return Ok(out);
    };
    let rows = af_io::pool::read_part(&first)?;
    let mut shown = 0;
    for item_rows in rows.chunk_by(|a, b| a.item_index == b.item_index) {
        let item = &items[item_rows[0].item_index as usize];
        out.push_str(&format!(
            "{}\n  {} ...\n  gold: {}\n",
            item.context, item.noun_phrase, item.ending
        ));
        let index = item_rows[0].item_index as usize;
        let own = item.distractors.len() - borrowed.get(index).copied().unwrap_or(0);
        let is_borrowed = |r: &&Candidate| {
            (own as u32 + 1..=item.distractors.len() as u32).contains(&r.candidate)
        };
        for r in item_rows
            .iter()
            .filter(|r| !r.is_gold() && r.candidate as usize <= own)
            .take(2)
        {
            out.push_str(&format!("  own:  {}\n", r.ending));
        }
        for r in item_rows.iter().filter(is_borrowed).take(2) {
            out.push_str(&format!("  borrowed: {}\n", r.ending));
        }
        for r in item_rows
            .iter()
            .filter(|r| r.candidate as usize > item.distractors.len())
            .take(per_item)
        {
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

/// The `generate` stage.
pub struct Generate;

impl crate::runner::Stage for Generate {
    fn uses_device(&self) -> bool {
        true
    }

    fn resumable(&self) -> bool {
        true
    }

    fn inputs(&self, config: &af_core::Config) -> anyhow::Result<serde_json::Value> {
        use serde_json::json;
        Ok(json!({"seed": config.run.seed, "generate": config.generate.fingerprint()}))
    }

    fn run(&self, ctx: &crate::runner::StageContext) -> anyhow::Result<(super::StageReport, bool)> {
        use super::StageReport;
        Ok({
            let outcome = run(ctx)?;
            let complete = matches!(outcome, GenerateOutcome::Complete(_));
            (StageReport::Generate(outcome), complete)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(i: usize, fold: u32, group: &str, ending: &str) -> Item {
        Item {
            id: format!("i{i}"),
            group: group.into(),
            fold,
            context: "a man walks .".into(),
            noun_phrase: "he".into(),
            ending: ending.into(),
            context_tokens: 4,
            noun_phrase_tokens: 1,
            ending_tokens: ending.split(' ').count() as u32,
            distractors: Vec::new(),
        }
    }

    /// Borrowed endings come from the item's fold and other groups, from past the questions while
    /// there are enough, never repeat the gold or each other, obey the reject rules, and are the
    /// same on every run.
    #[test]
    fn borrowed_endings_are_other_videos_gold_of_the_same_fold() {
        let endings = [
            "walks the dog .",
            "paints the fence .",
            "washes the car .",
            "plays the drums .",
            "rides a horse .",
            "cooks some rice .",
            "reads a book .",
        ];
        let mut items = Vec::new();
        for i in 0..60 {
            // Groups of three consecutive items, two folds by group; one long ending per fold.
            let ending = if i == 30 || i == 31 {
                "climbs a very tall ladder and then keeps on climbing until he reaches the roof of the house ."
            } else {
                endings[i % endings.len()]
            };
            items.push(item(
                i,
                ((i / 3) % 2) as u32,
                &format!("g{}", i / 3),
                ending,
            ));
        }
        let tagger = Tagger::builtin();
        let reject = [ValidityRule::LengthGap];
        let validity = Validity {
            tagger: &tagger,
            rules: ValidityRules {
                near_copy_overlap: 0.8,
                max_length_gap: 5,
            },
            reject: &reject,
        };
        let questions = 12;
        let borrowed = borrowed_endings(&items, questions, 3, false, 7, &validity);
        assert_eq!(borrowed.len(), questions);
        for (q, f) in borrowed.iter().enumerate() {
            // Seven distinct short endings, all in every fold: six besides the item's own.
            assert_eq!(f.len(), 3, "item {q}: {f:?}");
            let mut texts: Vec<&str> = f.iter().map(|(_, e)| e.as_str()).collect();
            texts.sort();
            texts.dedup();
            assert_eq!(texts.len(), 3, "no repeats: {f:?}");
            for (source, ending) in f {
                let s = &items[*source];
                assert_eq!((s.fold, &s.ending), (items[q].fold, ending));
                assert_ne!(s.group, items[q].group);
                assert_ne!(ending, &items[q].ending);
                assert!(
                    *source >= questions,
                    "48 items past the questions are enough: {source}"
                );
                assert!(
                    !ending.contains("ladder"),
                    "the length-gap rule turns the long ending away"
                );
            }
        }
        assert_eq!(
            borrowed,
            borrowed_endings(&items, questions, 3, false, 7, &validity)
        );
        assert_ne!(
            borrowed,
            borrowed_endings(&items, questions, 3, false, 8, &validity),
            "another seed, other draws"
        );
        // Without items past the questions, the questions' own golds serve; the two long golds
        // (one video) find nothing within the length gap, and come short rather than break it.
        let all = borrowed_endings(&items, items.len(), 3, false, 7, &validity);
        for (q, f) in all.iter().enumerate() {
            assert_eq!(
                f.len(),
                if q == 30 || q == 31 { 0 } else { 3 },
                "item {q}: {f:?}"
            );
        }
    }

    /// With `agree`, a borrowed ending begins as the item's gold does: a plural verb for a
    /// plural one, never a noun where the gold starts with a verb.
    #[test]
    fn agreeing_borrowed_endings_begin_as_the_gold_does() {
        let endings = [
            "walks the dog .",
            "run across the field .",
            "ball is thrown .",
            "paints the fence .",
            "run into the pool .",
            "dog barks at them .",
            "rides a horse .",
            "run up the hill .",
            "ball flies away .",
        ];
        let items: Vec<Item> = (0..60)
            .map(|i| item(i, 0, &format!("g{i}"), endings[i % endings.len()]))
            .collect();
        let tagger = Tagger::builtin();
        let validity = Validity {
            tagger: &tagger,
            rules: ValidityRules {
                near_copy_overlap: 0.8,
                max_length_gap: 5,
            },
            reject: &[],
        };
        let onset =
            |e: &str| af_text::validity::onset(&tagger.tag(&af_text::tokenize_lowercase(e)));
        assert_ne!(
            onset("walks the dog ."),
            onset("run across the field ."),
            "the tagger tells the forms apart"
        );
        let agreeing = borrowed_endings(&items, 12, 2, true, 7, &validity);
        for (q, f) in agreeing.iter().enumerate() {
            assert!(!f.is_empty(), "item {q}: three endings of each onset");
            for (_, e) in f {
                assert_eq!(
                    onset(e),
                    onset(&items[q].ending),
                    "item {q} ({}) got {e}",
                    items[q].ending
                );
            }
        }
        let any = borrowed_endings(&items, 12, 2, false, 7, &validity);
        assert!(any
            .iter()
            .enumerate()
            .flat_map(|(q, f)| f.iter().map(move |(_, e)| (q, e)))
            .any(|(q, e)| onset(e) != onset(&items[q].ending)));
    }

    /// On the CPU autocast does nothing, so the check must find no difference at all; this runs
    /// the code path the GPU takes before its first block.
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
            stop: vec![i64::from(vocab.id("."))],
            device: Device::Cpu,
        };
        let check = precision_check(&block, &models, &vocab, &settings, 64, Device::Cpu);
        assert_eq!(check.items, 3);
        assert_eq!(
            (check.first_token_tv_mean, check.first_token_tv_max),
            (0.0, 0.0)
        );
        assert_eq!(check.feature_max_abs_difference, [0.0; 8]);
    }
}
