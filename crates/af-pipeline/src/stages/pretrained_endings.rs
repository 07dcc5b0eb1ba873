//! Pretrained endings (`[generate] pretrained-endings`): for each item, endings a pretrained causal
//! LM (af-nn's `causal_lm`) writes after the item's context and noun phrase, kept when they are
//! new to the item's pool and pass the `[generate] reject` rules.
//!
//! Written per block of `block-items` items to `generate/pretrained/part-NNNNN.json` as each is
//! done, so an interrupted run keeps what it wrote; draws come from per-item seeds, so a block's
//! endings do not depend on the batching or on which blocks ran before.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use af_core::config::GenerateConfig;
use af_core::Item;
use af_nn::causal_lm::{CausalLm, CausalSampleSettings, PromptJob};
use rand::Rng;
use serde::{Deserialize, Serialize};
use tch::Device;

use super::generate::{item_rng, Validity};

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
}

#[derive(Default, Serialize, Deserialize)]
struct Part {
    endings: Vec<Vec<String>>,
    draws: usize,
    duplicates: usize,
    rejected: usize,
    rejected_by_rule: BTreeMap<String, usize>,
}

/// Salt of the pretrained generator's random streams, apart from sampling's and borrowing's.
const SALT: u64 = 0x7072_6574_7261_696e;

fn part_path(dir: &Path, block: usize) -> PathBuf {
    dir.join(format!("part-{block:05}.json"))
}

/// The prompt the generator continues: what a reader of the item sees before the ending.
pub fn prompt(item: &Item) -> String {
    format!("{} {}", item.context.trim(), item.noun_phrase.trim())
}

/// Every item's pretrained endings (in item order), writing missing parts under `dir`.
pub(super) fn pretrained_endings(dir: &Path, items: &[Item], g: &GenerateConfig, validity: &Validity, seed: u64, device: Device, bar: &dyn crate::progress::Bar) -> anyhow::Result<(Vec<Vec<String>>, PretrainedSummary)> {
    std::fs::create_dir_all(dir)?;
    let model_path = match &g.pretrained_model {
        Some(p) => p.clone(),
        None => af_nn::causal_lm::default_path().ok_or_else(|| {
            anyhow::anyhow!("[generate] pretrained-endings needs a generator: set [generate] pretrained-model to a GGUF file, or run `source <(scripts/setup --env)` so that {} names the one scripts/setup installs", af_nn::causal_lm::CAUSAL_LM_ENV)
        })?,
    };
    let mut model: Option<CausalLm> = None;
    let settings = CausalSampleSettings { max_tokens: g.max_tokens, temperature: g.temperature, top_k: g.top_k, top_p: g.top_p };
    let start = Instant::now();
    let mut wrote = false;
    let mut all = Vec::with_capacity(items.len());
    let mut total = Part::default();
    for (b, block) in items.chunks(g.block_items.max(1)).enumerate() {
        let path = part_path(dir, b);
        let part = if path.exists() {
            let text = std::fs::read_to_string(&path)?;
            let part: Part = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e} (remove it to write it again)", path.display()))?;
            anyhow::ensure!(part.endings.len() == block.len(), "{}: {} items, its block has {} (remove it to write it again)", path.display(), part.endings.len(), block.len());
            part
        } else {
            if model.is_none() {
                let lm = CausalLm::load(&model_path, device)?;
                tracing::info!("generate: pretrained generator {} ({:.0}M parameters) from {}", lm.name, lm.parameters() as f64 / 1e6, model_path.display());
                model = Some(lm);
            }
            let part = write_block(model.as_ref().expect("loaded above"), block, b * g.block_items.max(1), g, &settings, validity, seed)?;
            af_core::atomic::write(&path, serde_json::to_string(&part)?.as_bytes())?;
            wrote = true;
            part
        };
        bar.inc(block.len() as u64);
        total.draws += part.draws;
        total.duplicates += part.duplicates;
        total.rejected += part.rejected;
        for (rule, n) in &part.rejected_by_rule {
            *total.rejected_by_rule.entry(rule.clone()).or_default() += n;
        }
        all.extend(part.endings);
    }
    let (name, parameters) = match &model {
        Some(m) => (m.name.clone(), m.parameters()),
        None => (String::new(), 0),
    };
    let summary = PretrainedSummary {
        model: name,
        path: model_path,
        parameters,
        endings_wanted: g.pretrained_endings,
        endings: all.iter().map(Vec::len).sum(),
        items_short: all.iter().filter(|e: &&Vec<String>| e.len() < g.pretrained_endings).count(),
        draws: total.draws,
        duplicates: total.duplicates,
        rejected: total.rejected,
        rejected_by_rule: total.rejected_by_rule,
        seconds_this_run: if wrote { start.elapsed().as_secs_f64() } else { 0.0 },
    };
    Ok((all, summary))
}

/// One block: rounds of draws (at most `max-rounds`) until each item has its endings.
fn write_block(lm: &CausalLm, block: &[Item], first_index: usize, g: &GenerateConfig, s: &CausalSampleSettings, validity: &Validity, seed: u64) -> anyhow::Result<Part> {
    let want = g.pretrained_endings;
    let prompts: Vec<String> = block.iter().map(prompt).collect();
    let mut part = Part { endings: vec![Vec::new(); block.len()], ..Part::default() };
    let mut seen: Vec<HashSet<String>> =
        block.iter().map(|item| std::iter::once(&item.ending).chain(&item.distractors).map(|e| e.trim().to_lowercase()).collect()).collect();
    let golds: Vec<Vec<String>> = block.iter().map(|item| af_text::tokenize_lowercase(&item.ending)).collect();
    for round in 0..g.max_rounds.max(1) {
        // (item in block, count, uniforms), items split so no job exceeds a batch.
        let mut jobs: Vec<(usize, usize, Vec<f32>)> = Vec::new();
        for (i, got) in part.endings.iter().enumerate() {
            let need = want.saturating_sub(got.len());
            if need == 0 {
                continue;
            }
            let mut rng = item_rng(seed ^ SALT, first_index + i, round);
            let mut left = need;
            while left > 0 {
                let count = left.min(g.pretrained_batch);
                let uniforms: Vec<f32> = (0..count * s.max_tokens).map(|_| rng.random::<f32>()).collect();
                jobs.push((i, count, uniforms));
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
            while end < jobs.len() && (end == start || rows + jobs[end].1 <= g.pretrained_batch) {
                rows += jobs[end].1;
                end += 1;
            }
            let batch: Vec<PromptJob> = jobs[start..end].iter().map(|(i, count, u)| PromptJob { prompt: &prompts[*i], count: *count, uniforms: u }).collect();
            let drawn = lm.sample(&batch, s)?;
            for ((i, _, _), endings) in jobs[start..end].iter().zip(drawn) {
                for ending in endings {
                    part.draws += 1;
                    if part.endings[*i].len() == want {
                        break;
                    }
                    if ending.is_empty() || !seen[*i].insert(ending.to_lowercase()) {
                        part.duplicates += 1;
                        continue;
                    }
                    if !validity.reject.is_empty() {
                        let broken = validity.broken(&af_text::tokenize_lowercase(&ending), Some(&golds[*i]));
                        let rejected: Vec<_> = broken.iter().filter(|r| validity.reject.contains(r)).collect();
                        if !rejected.is_empty() {
                            part.rejected += 1;
                            for r in rejected {
                                *part.rejected_by_rule.entry(r.name().to_string()).or_default() += 1;
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
