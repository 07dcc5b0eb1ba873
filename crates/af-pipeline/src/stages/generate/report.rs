//! The stage's report (`generate/report.json`, and what is printed) and `samples.txt`, from the
//! pool's rows as they are written or read back: counts by the `origin` each row carries.

use std::collections::{BTreeMap, HashMap, HashSet};

use af_core::{Candidate, Item, ValidityRule};
use serde::Serialize;

use super::sources::sampled::Rejected;
use super::sources::{borrowed, own, sampled, SourceSummary};
use super::Validity;

/// `fp32` or `mixed`, and for `mixed` the check of what it moved.
pub(super) type PrecisionReport = (&'static str, Option<serde_json::Value>);

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
    /// What each ending source that reports says, under its name (`pretrained`: what the
    /// pretrained generator did; `pretrained.json` and `pretrained.tsv` say the same); its
    /// endings are counted in the shares and validity counts too.
    #[serde(flatten)]
    pub sources: BTreeMap<&'static str, serde_json::Value>,
    /// The pool's wrong endings per origin (the source that gave them, as the pool's `origin`).
    pub endings_by_origin: BTreeMap<String, usize>,
    /// The sources' lines for the printed report.
    #[serde(skip)]
    pub source_lines: Vec<String>,
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
    /// Where this run's time in the blocks went; absent when earlier runs wrote every block.
    pub block_time: Option<BlockTime>,
}

/// Where the time of the blocks a run wrote went, in seconds of wall time. The sources and the
/// scoring run one after the other on the stage's thread; the writing runs on its own thread,
/// beside them, so it adds to the whole only when it is the slower.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BlockTime {
    pub blocks: usize,
    /// From the first block's start to the last part written.
    pub seconds: f64,
    /// Per streaming source (`sampled`: af's LMs drawing, with their deduplication and validity
    /// checks; its own summary splits the two).
    pub sources: BTreeMap<&'static str, f64>,
    /// The LM features of every row of the blocks (af's LMs, both directions where needed).
    pub scoring: f64,
    /// Writing the parts (Parquet) and counting them for this report.
    pub writing: f64,
}

impl BlockTime {
    /// One line for the log.
    pub fn line(&self) -> String {
        let sources: Vec<String> = self
            .sources
            .iter()
            .map(|(name, s)| format!("{name} {s:.1} s"))
            .collect();
        format!(
            "{} blocks in {:.1} s: {}, scoring {:.1} s, writing {:.1} s (beside them)",
            self.blocks,
            self.seconds,
            sources.join(", "),
            self.scoring,
            self.writing
        )
    }
}

/// What a run of the stage did: the whole pool, or its shard with blocks of others missing.
pub enum GenerateOutcome {
    /// Boxed: the report is large, and a shard's outcome carries three numbers.
    Complete(Box<GenerateReport>),
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
                for line in &r.source_lines {
                    write!(f, "\n  {line}")?;
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

/// Distinct-1 and distinct-2 of the generated endings: the distinct words and word pairs over
/// all of them. Words are numbered as they first come, so a pair is two numbers and a word seen
/// before costs a lookup, not a copy.
#[derive(Default)]
struct DistinctNgrams {
    words: HashMap<String, u32>,
    pairs: HashSet<(u32, u32)>,
    n_words: usize,
    n_pairs: usize,
}

impl DistinctNgrams {
    fn add<S: AsRef<str>>(&mut self, tokens: &[S]) {
        let ids: Vec<u32> = tokens.iter().map(|t| self.id(t.as_ref())).collect();
        self.n_words += ids.len();
        self.n_pairs += ids.len().saturating_sub(1);
        self.pairs.extend(ids.windows(2).map(|w| (w[0], w[1])));
    }

    fn id(&mut self, word: &str) -> u32 {
        if let Some(&id) = self.words.get(word) {
            return id;
        }
        let id = self.words.len() as u32;
        self.words.insert(word.to_owned(), id);
        id
    }

    fn distinct_1(&self) -> f64 {
        self.words.len() as f64 / self.n_words.max(1) as f64
    }

    fn distinct_2(&self) -> f64 {
        self.pairs.len() as f64 / self.n_pairs.max(1) as f64
    }
}

/// The pool statistics, added to one part at a time (in any order). Counts and sets do not
/// depend on the order; the log-perplexity sums are kept per block and added in block order, so
/// the report is the same whether a block was counted as it was written or read back later.
#[derive(Default)]
pub(super) struct PoolStats {
    per_item: HashMap<u32, usize>,
    /// Per item, the endings af's LMs sampled for it.
    sampled_per_item: HashMap<u32, usize>,
    /// The wrong endings per origin.
    by_origin: BTreeMap<String, usize>,
    pub(super) generated: usize,
    truncated: usize,
    distinct: DistinctNgrams,
    /// Per block: the sums of gold and of generated endings' forward log-perplexity.
    pub(super) logppl: BTreeMap<usize, (f64, f64)>,
    /// The pool's endings that break each validity rule, and that break none.
    kept_broken: BTreeMap<ValidityRule, usize>,
    kept_valid: usize,
    /// The gold endings that break each rule of the ending alone, and that break none.
    gold: usize,
    gold_broken: BTreeMap<ValidityRule, usize>,
    gold_valid: usize,
}

impl PoolStats {
    pub(super) fn add(&mut self, block: usize, rows: &[Candidate], validity: &Validity) {
        use rayon::prelude::*;
        // Tokenised once, in parallel, for the validity rules and distinct-n both: on a GPU this
        // thread counts a block while the device draws the next, and a serial pass over every
        // ending was slower than the drawing.
        let words: Vec<Vec<&str>> = rows
            .par_iter()
            .map(|row| af_text::tokenize(&row.ending).to_vec())
            .collect();
        self.count_validity(rows, &words, validity);
        let (mut gold, mut generated) = (0.0, 0.0);
        for (row, toks) in rows.iter().zip(&words) {
            let entry = self.per_item.entry(row.item_index).or_default();
            if row.is_gold() {
                gold += f64::from(row.features[0]);
                continue;
            }
            *entry += 1;
            let origin = row.origin.as_deref().unwrap_or("unknown");
            match self.by_origin.get_mut(origin) {
                Some(n) => *n += 1,
                None => {
                    self.by_origin.insert(origin.to_string(), 1);
                }
            }
            if origin == sampled::NAME {
                *self.sampled_per_item.entry(row.item_index).or_default() += 1;
            }
            self.generated += 1;
            self.truncated += usize::from(row.truncated);
            generated += f64::from(row.features[0]);
            self.distinct.add(toks);
        }
        self.logppl.insert(block, (gold, generated));
    }

    /// Every row's validity: a generated ending against its item's gold (the row before it with
    /// candidate 0), a gold ending by the rules of the ending alone. `words`: each row's tokens.
    fn count_validity(&mut self, rows: &[Candidate], words: &[Vec<&str>], validity: &Validity) {
        use rayon::prelude::*;
        // As `af_text::tokenize_lowercase` gives them.
        let tokens: Vec<Vec<String>> = words
            .par_iter()
            .map(|w| w.iter().map(|t| t.to_lowercase()).collect())
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

    pub(super) fn report(
        &self,
        items: &[Item],
        endings: usize,
        summaries: Vec<(&'static str, SourceSummary)>,
        precision: PrecisionReport,
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
            .filter(|(i, _)| {
                self.sampled_per_item
                    .get(&(*i as u32))
                    .copied()
                    .unwrap_or(0)
                    == endings
            })
            .count();
        let count = |origin: &str| self.by_origin.get(origin).copied().unwrap_or(0);
        let (gold_ppl, generated_ppl) = self
            .logppl
            .values()
            .fold((0.0, 0.0), |(a, b), (g, x)| (a + g, b + x));
        Ok(GenerateReport {
            items: n_items,
            endings_wanted: endings,
            endings_generated: count(sampled::NAME),
            given_endings: count(own::NAME),
            borrowed_endings: count(borrowed::NAME),
            sources: summaries
                .iter()
                .map(|(name, s)| (*name, s.json.clone()))
                .collect(),
            endings_by_origin: self.by_origin.clone(),
            source_lines: summaries.into_iter().map(|(_, s)| s.line).collect(),
            items_with_all_endings: full,
            items_short: n_items - full,
            share_with_all_endings: full as f64 / n_items.max(1) as f64,
            truncated_share: self.truncated as f64 / self.generated.max(1) as f64,
            distinct_1: self.distinct.distinct_1(),
            distinct_2: self.distinct.distinct_2(),
            mean_gold_fwd_logppl_v_given_sn: gold_ppl / n_items.max(1) as f64,
            mean_generated_fwd_logppl_v_given_sn: generated_ppl / self.generated.max(1) as f64,
            precision: precision.0,
            precision_check: precision.1,
            validity,
            block_time: None,
        })
    }

    /// The validity part of the report, with the draws rejected while sampling.
    pub(super) fn validity_report(&self, v: &Validity, rejected: &Rejected) -> ValidityReport {
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

/// A few items as text: context, noun phrase, the gold ending, the first two endings of each
/// source in `order`, and the first `per_item` sampled ones (`gen:`), by the rows' origins.
pub(super) fn samples(
    pool: &std::path::Path,
    items: &[Item],
    before: &[Vec<super::sources::Ending>],
    order: &[&'static str],
    n_items: usize,
    per_item: usize,
) -> anyhow::Result<String> {
    let mut out = String::new();
    let Some(first) = af_io::pool::parts(pool)?.into_iter().next() else {
        return Ok(out);
    };
    let mut rows = af_io::pool::read_part(&first)?;
    super::infer_origins(&mut rows, before);
    let mut shown = 0;
    for item_rows in rows.chunk_by(|a, b| a.item_index == b.item_index) {
        let item = &items[item_rows[0].item_index as usize];
        out.push_str(&format!(
            "{}\n  {} ...\n  gold: {}\n",
            item.context, item.noun_phrase, item.ending
        ));
        for &origin in order {
            let (label, n) = match origin {
                sampled::NAME => ("gen:  ".to_string(), per_item),
                own::NAME => ("own:  ".to_string(), 2),
                other => (format!("{other}: "), 2),
            };
            for r in item_rows
                .iter()
                .filter(|r| r.origin.as_deref() == Some(origin))
                .take(n)
            {
                out.push_str(&format!("  {label}{}\n", r.ending));
            }
        }
        out.push('\n');
        shown += 1;
        if shown == n_items {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::DistinctNgrams;
    use std::collections::HashSet;

    #[test]
    fn distinct_ngrams_count_what_sets_of_strings_count() {
        let endings = [
            "the man walks to the car .",
            "the man walks away",
            "a dog runs to the car",
            "",
            "walks walks walks",
        ];
        let mut distinct = DistinctNgrams::default();
        let (mut words, mut pairs) = (HashSet::new(), HashSet::new());
        let (mut n_words, mut n_pairs) = (0, 0);
        for e in endings {
            let toks: Vec<String> = e.split_whitespace().map(String::from).collect();
            distinct.add(&toks);
            n_words += toks.len();
            n_pairs += toks.len().saturating_sub(1);
            pairs.extend(toks.windows(2).map(|w| (w[0].clone(), w[1].clone())));
            words.extend(toks);
        }
        assert_eq!(distinct.distinct_1(), words.len() as f64 / n_words as f64);
        assert_eq!(distinct.distinct_2(), pairs.len() as f64 / n_pairs as f64);
        assert!(distinct.distinct_2() < 1.0 && distinct.distinct_1() < 1.0);
        assert_eq!(DistinctNgrams::default().distinct_1(), 0.0);
    }
}
