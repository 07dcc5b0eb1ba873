//! `sampled` (`[generate] endings`): endings af's own LMs draw after the item's context and noun
//! phrase, the LM of the item's fold (which never trained on it), in rounds (`max-rounds`) until
//! the item has its `endings` new ones: temperature, top-k and nucleus sampling from per-item
//! streams, so a block draws the same whatever the batching or sharding. A draw that repeats an
//! ending of the item's pool, or breaks a `[generate] reject` rule, is turned away; the draws the
//! rules turned away are counted per block in `generate/rejected/`.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use af_core::config::GenerateConfig;
use af_core::ValidityRule;
use af_nn::runtime::in_precision;
use af_nn::sample::{sample, Drawn, SampleJob};
use af_text::detokenize;
use rand::Rng;
use rayon::prelude::*;
use serde::Serialize;

use super::{Ending, EndingSource, Items, SourceContext, SourceSummary};
use crate::progress::Bar;
use crate::stages::generate::{endings_ids, item_rng, ItemIds};

pub const NAME: &str = "sampled";

/// The sampler, with what this run's blocks cost it.
#[derive(Default)]
pub struct Sampled {
    draws: usize,
    /// Drawing, the host copy of the tokens included (the device has finished by then).
    draw_seconds: f64,
    /// Deduplication and the validity rules, on the host.
    check_seconds: f64,
}

/// Draws an item's sampling rejected, per rule broken (a draw may break several), and in all.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub(crate) struct Rejected {
    pub(crate) draws: usize,
    pub(crate) by_rule: BTreeMap<ValidityRule, usize>,
}

impl Rejected {
    /// One draw turned away for breaking `rules`.
    fn add(&mut self, rules: Vec<ValidityRule>) {
        self.draws += 1;
        for r in rules {
            *self.by_rule.entry(r).or_default() += 1;
        }
    }

    fn merge(&mut self, other: Rejected) {
        self.draws += other.draws;
        for (rule, n) in other.by_rule {
            *self.by_rule.entry(rule).or_default() += n;
        }
    }
}

fn rejected_path(dir: &Path, block: usize) -> PathBuf {
    dir.join("rejected").join(format!("part-{block:05}.json"))
}

/// The draws the rules turned away in the first `blocks` blocks, from their records.
pub(crate) fn rejected_draws(dir: &Path, blocks: usize) -> anyhow::Result<Rejected> {
    let mut rejected = Rejected::default();
    for b in 0..blocks {
        let path = rejected_path(dir, b);
        // A pool made before the rules existed has no record: nothing was rejected then.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let block: Rejected =
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        rejected.merge(block);
    }
    Ok(rejected)
}

impl EndingSource for Sampled {
    fn name(&self) -> &'static str {
        NAME
    }

    fn enabled(&self, g: &GenerateConfig) -> bool {
        g.endings > 0
    }

    fn streams(&self) -> bool {
        true
    }

    fn summary(&self) -> Option<SourceSummary> {
        (self.draws > 0).then(|| SourceSummary {
            json: serde_json::json!({
                "draws": self.draws,
                "draw_seconds": self.draw_seconds,
                "check_seconds": self.check_seconds,
            }),
            line: format!(
                "sampled: {} draws in {:.1} s ({:.0}/s), deduplicated and checked in {:.1} s (this run's blocks)",
                self.draws,
                self.draw_seconds,
                self.draws as f64 / self.draw_seconds.max(1e-9),
                self.check_seconds
            ),
        })
    }

    fn endings(
        &mut self,
        items: &Items,
        so_far: &[Vec<Ending>],
        ctx: &SourceContext,
        _bar: &dyn Bar,
    ) -> anyhow::Result<Vec<Vec<Ending>>> {
        let lms = ctx
            .lms
            .ok_or_else(|| anyhow::anyhow!("the sampler needs af's LMs, loaded for the blocks"))?;
        let g = &ctx.config.generate;
        let (vocab, settings, validity) = (lms.vocab, &lms.settings, ctx.validity);
        let block = items.items;
        let item_ids: Vec<ItemIds> = block
            .iter()
            .map(|(_, item)| ItemIds::new(vocab, item))
            .collect();
        let gold_tokens: Vec<Vec<String>> = block
            .iter()
            .map(|(_, item)| af_text::tokenize_lowercase(&item.ending))
            .collect();
        let mut rejected = Rejected::default();
        let mut seen: Vec<HashSet<Vec<i64>>> = item_ids
            .iter()
            .map(|e| HashSet::from([e.v.clone()]))
            .collect();
        // The endings of the sources before come first, as they are; sampled ones repeat none.
        for (seen, before) in seen.iter_mut().zip(endings_ids(vocab, so_far)) {
            seen.extend(before);
        }
        // Each item's new endings, `[generate] endings` of them once it has them all.
        let mut found: Vec<Vec<Drawn>> = vec![Vec::new(); block.len()];
        let target = g.endings;
        let t = settings.max_tokens;
        for round in 0..g.max_rounds {
            // Duplicates are common for short contexts: ask for more than is missing.
            let wanted: Vec<usize> = found
                .iter()
                .map(|f| {
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
                    let mut rng = item_rng(ctx.config.run.seed, *index, round);
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
                let (_, lm) = &lms.models[&fold];
                let mut start = 0;
                while start < members.len() {
                    let mut end = start;
                    let mut seqs = 0;
                    while end < members.len()
                        && (end == start || seqs + wanted[members[end]] <= lms.batch)
                    {
                        seqs += wanted[members[end]];
                        end += 1;
                    }
                    let jobs: Vec<SampleJob> = members[start..end]
                        .iter()
                        .map(|&i| SampleJob {
                            prefix: &item_ids[i].prefix,
                            count: wanted[i],
                            uniforms: &uniforms[i],
                        })
                        .collect();
                    let began = Instant::now();
                    let drawn = in_precision(lms.mixed, ctx.device, || sample(lm, &jobs, settings));
                    self.draw_seconds += began.elapsed().as_secs_f64();
                    self.draws += drawn.iter().map(Vec::len).sum::<usize>();
                    let began = Instant::now();
                    // Each item's draws are checked in their order against its own pool, and no
                    // item's checks read another's: items in parallel, the same endings as in
                    // sequence. The device waits while the host checks, so they are kept short.
                    let checked: Vec<_> = members[start..end]
                        .iter()
                        .zip(drawn)
                        .map(|(&i, d)| {
                            (
                                i,
                                d,
                                std::mem::take(&mut found[i]),
                                std::mem::take(&mut seen[i]),
                            )
                        })
                        .collect::<Vec<_>>()
                        .into_par_iter()
                        .map(|(i, drawn, mut found, mut seen)| {
                            let mut turned_away = Rejected::default();
                            for e in drawn {
                                if found.len() == target {
                                    break;
                                }
                                if !seen.insert(e.tokens.clone()) {
                                    continue;
                                }
                                if !validity.reject.is_empty() {
                                    // The ending as the pool will hold it, read back as the
                                    // report reads it.
                                    let words: Vec<&str> =
                                        e.tokens.iter().map(|&id| vocab.word(id as u32)).collect();
                                    let ending = af_text::tokenize_lowercase(&detokenize(&words));
                                    let broken = validity.broken(&ending, Some(&gold_tokens[i]));
                                    if broken.iter().any(|r| validity.reject.contains(r)) {
                                        turned_away.add(broken);
                                        continue;
                                    }
                                }
                                found.push(e);
                            }
                            (i, found, seen, turned_away)
                        })
                        .collect();
                    for (i, f, s, turned_away) in checked {
                        found[i] = f;
                        seen[i] = s;
                        rejected.merge(turned_away);
                    }
                    self.check_seconds += began.elapsed().as_secs_f64();
                    start = end;
                }
            }
        }
        if let Some(b) = items.block {
            // Written before the block's part, so a finished part always has its record.
            let path = rejected_path(ctx.dir, b);
            std::fs::create_dir_all(path.parent().expect("a file in rejected/"))?;
            af_core::atomic::write(&path, serde_json::to_string(&rejected)?.as_bytes())?;
        }
        Ok(found
            .into_iter()
            .map(|found| {
                found
                    .into_iter()
                    .map(|d| {
                        let v = &d.tokens;
                        let words: Vec<&str> = v.iter().map(|&id| vocab.word(id as u32)).collect();
                        Ending {
                            text: detokenize(&words),
                            truncated: v.len() == t
                                && !settings.stop.contains(v.last().unwrap_or(&0)),
                            drawn: Some(d),
                            origin: NAME,
                        }
                    })
                    .collect()
            })
            .collect())
    }
}
