//! The `lm-likelihood` member's scores of a pool: every candidate's log-likelihood under the
//! pretrained causal LM its settings name, requested as `af eval` requests an option of af's
//! layout ([`crate::eval::tokenised_prompts`]: the item's context and noun phrase as context, a
//! space and the ending as continuation; and the same continuation after nothing but the BOS
//! token, `af eval`'s choices-only condition) and scored by the same code
//! ([`af_nn::causal_lm::CausalLm::loglikelihoods`]), so the member reads the numbers `af eval`
//! would report for the same options. Computed once per run and cached in `<run>/lm-likelihood/`
//! (keyed by the requests and the model), so a resumed or repeated filter, `af ablate` and the
//! export read them back; scoring keeps its chunks in `partial/` as it goes, so a killed run
//! resumes where it stopped. The member's features of the scores
//! ([`af_nn::committee::members::lm_likelihood::features`]) are attached to the table.

use std::path::{Path, PathBuf};

use af_core::Config;
use af_io::pool_index::Pool;
use af_io::questions::QuestionFormat;
use af_nn::causal_lm::{CausalLm, Continuation};
/// The pool's scores, per row: the member's own type, which its features read.
pub use af_nn::committee::members::lm_likelihood::PoolScores;
use af_nn::committee::members::{lm_likelihood, LmLikelihoodSource};
use af_nn::committee::Registry;
use af_nn::table::CandidateTable;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::progress::Progress;

/// Candidates per kept chunk: a kill loses at most one.
const CHUNK: usize = 1024;

/// Where a run keeps its pool's LM scores. Beside the stages rather than in one: forcing the
/// filter again need not score again.
pub fn cache_dir(config: &Config) -> PathBuf {
    config.run.dir.join("lm-likelihood")
}

/// One pool row's request, as `af eval` makes it for the option in af's layout. The
/// choices-only request is the same continuation after an empty context.
#[derive(Clone, Debug, PartialEq)]
pub struct RowRequest {
    pub context: String,
    pub continuation: String,
    /// The ending's characters (`acc_norm`'s divisor).
    pub chars: usize,
}

/// Every pool row's request, in row order.
pub fn pool_requests(pool: &Pool) -> anyhow::Result<Vec<RowRequest>> {
    let mut out = Vec::with_capacity(pool.rows);
    let mut item_at = 0;
    pool.for_each_part(|first, part| -> anyhow::Result<()> {
        for (r, cand) in (first..).zip(part) {
            while item_at + 1 < pool.offsets.len() && pool.offsets[item_at + 1] <= r {
                item_at += 1;
            }
            let item = &pool.items[item_at];
            let prompt = crate::eval::tokenised_prompts(
                QuestionFormat::AF,
                &item.context,
                &item.noun_phrase,
                [cand.ending.as_str()],
            )
            .remove(0);
            let [(context, continuation), ..] = prompt.requests;
            out.push(RowRequest {
                context,
                continuation,
                chars: prompt.norm_chars[0],
            });
        }
        Ok(())
    })?;
    Ok(out)
}

/// What `key.json` says of the cached scores.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct CacheKey {
    model: PathBuf,
    model_bytes: u64,
    rows: usize,
    /// `af eval`'s conditions scored, in the order of the cached columns (a cache written
    /// before the member read the ending alone has no such field, and is scored again).
    conditions: Vec<String>,
    /// FNV-1a over every request (context, continuation), in order (hex).
    requests: String,
}

#[derive(PartialEq, Serialize, Deserialize)]
struct PartialKey {
    cache: CacheKey,
    chunk: usize,
}

/// `af eval`'s conditions the member's scores are of ([`crate::eval::CONDITIONS`]).
const SCORED_CONDITIONS: [&str; 2] = ["full", "choices-only"];

/// Scores of some rows in both conditions, as a chunk or the whole cache holds them.
#[derive(Default)]
struct Scored {
    logprob: Vec<f64>,
    tokens: Vec<i64>,
    choices_only: Vec<f64>,
    choices_only_tokens: Vec<i64>,
}

impl Scored {
    fn extend(&mut self, other: Scored) {
        self.logprob.extend(other.logprob);
        self.tokens.extend(other.tokens);
        self.choices_only.extend(other.choices_only);
        self.choices_only_tokens.extend(other.choices_only_tokens);
    }

    fn with_chars(self, chars: Vec<i64>) -> PoolScores {
        PoolScores {
            logprob: self.logprob,
            tokens: self.tokens,
            choices_only: self.choices_only,
            choices_only_tokens: self.choices_only_tokens,
            chars,
        }
    }
}

/// What scoring a pool did, for the stage's log.
#[derive(Debug, Serialize)]
pub struct PoolLikelihood {
    pub model: PathBuf,
    pub rows: usize,
    /// Read from the cache rather than scored.
    pub cached: bool,
    /// Rows an interrupted run had scored, read back.
    pub resumed: usize,
    pub seconds: f64,
    /// Where the golds fall among their pools (also `gold-place.json` in the cache); set where the
    /// scores were attached to a table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gold_place: Option<GoldPlace>,
}

/// Where each item's gold falls among its pool by the LM's scores. A gold less likely than every
/// candidate of its pool is told from any choice of its distractors by a reader of likelihood
/// (decision 483): this is the pool's floor for such a reader, as the filter's pool floor is for
/// the committee's head.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GoldPlace {
    /// Items with at least one candidate besides the gold.
    pub items: usize,
    /// By log-probability per character of the ending (`acc_norm`'s reading).
    pub per_char: PlaceAmong,
    /// By log-probability per token of the continuation.
    pub per_token: PlaceAmong,
    /// By the ending's log-probability per character on its own (after the BOS token alone):
    /// the reading `af eval`'s probe finds the gold by where an LM wrote the pool (decision 485).
    pub choices_only_per_char: PlaceAmong,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlaceAmong {
    /// Share of items whose gold is less likely than every candidate.
    pub least_likely: f64,
    /// Share of items whose gold is likelier than every candidate.
    pub most_likely: f64,
    /// Mean over items of the share of candidates less likely than the gold (a tie counts
    /// half): 0.5 where the gold is like its candidates, 0 where it is below them all.
    pub share_below: f64,
}

/// [`GoldPlace`] of a pool's scores; `item_rows` as in
/// [`af_nn::committee::members::lm_likelihood::features`] (each item's rows, gold first).
pub fn gold_place(scores: &PoolScores, item_rows: &[usize]) -> GoldPlace {
    let place = |score: &dyn Fn(usize) -> f64| {
        let (mut items, mut least, mut most, mut below) = (0usize, 0usize, 0usize, 0.0);
        let mut at = 0;
        for &n in item_rows {
            let (gold, rows) = (score(at), at + 1..at + n);
            at += n;
            if rows.is_empty() {
                continue;
            }
            items += 1;
            let candidates = rows.len() as f64;
            let under: f64 = rows
                .map(|r| match score(r).total_cmp(&gold) {
                    std::cmp::Ordering::Less => 1.0,
                    std::cmp::Ordering::Equal => 0.5,
                    std::cmp::Ordering::Greater => 0.0,
                })
                .sum();
            least += usize::from(under == 0.0);
            most += usize::from(under == candidates);
            below += under / candidates;
        }
        let share = |k: f64| if items == 0 { 0.0 } else { k / items as f64 };
        (
            items,
            PlaceAmong {
                least_likely: share(least as f64),
                most_likely: share(most as f64),
                share_below: share(below),
            },
        )
    };
    let (items, per_char) = place(&|r| scores.logprob[r] / scores.chars[r].max(1) as f64);
    let (_, per_token) = place(&|r| scores.logprob[r] / scores.tokens[r].max(1) as f64);
    let (_, choices_only_per_char) =
        place(&|r| scores.choices_only[r] / scores.chars[r].max(1) as f64);
    GoldPlace {
        items,
        per_char,
        per_token,
        choices_only_per_char,
    }
}

fn requests_hash(requests: &[RowRequest]) -> String {
    let mut h = af_core::hash::Fnv1a::default();
    for r in requests {
        h.update(r.context.as_bytes());
        h.update(&[0]);
        h.update(r.continuation.as_bytes());
        h.update(&[0]);
    }
    format!("{:016x}", h.finish())
}

/// Attaches the member's features of the pool's LM scores to `table`: the scores read from
/// `cache` when it holds them for the same requests and model, else scored on the table's device
/// and written there.
pub fn attach_pool(
    table: &mut CandidateTable,
    pool: &Pool,
    source: &LmLikelihoodSource,
    cache: &Path,
    progress: &dyn Progress,
) -> anyhow::Result<PoolLikelihood> {
    attach_pool_in_chunks(table, pool, source, cache, progress, CHUNK)
}

/// [`attach_pool`] with `chunk` candidates per kept chunk (tests resume small pools).
#[doc(hidden)]
pub fn attach_pool_in_chunks(
    table: &mut CandidateTable,
    pool: &Pool,
    source: &LmLikelihoodSource,
    cache: &Path,
    progress: &dyn Progress,
    chunk: usize,
) -> anyhow::Result<PoolLikelihood> {
    let (scores, done) = score_pool(
        pool,
        source,
        cache,
        Scorer::Load(table.device),
        progress,
        chunk,
    )?;
    let item_rows: Vec<usize> = pool.sizes.iter().map(|s| s + 1).collect();
    table.attach_lm_likelihood(lm_likelihood::features(&scores, &item_rows))?;
    let place = gold_place(&scores, &item_rows);
    af_core::atomic::write(
        cache.join("gold-place.json"),
        serde_json::to_string_pretty(&place)?.as_bytes(),
    )?;
    Ok(PoolLikelihood {
        gold_place: Some(place),
        ..done
    })
}

/// What scores a pool when its cache does not hold the scores.
pub enum Scorer<'a> {
    /// The source's model, loaded on this device.
    Load(Device),
    /// The source's model, loaded already (`af bench lm-likelihood` times scoring alone).
    Loaded(&'a CausalLm),
}

/// The pool's scores under `source`'s model: from `cache`, or scored by `scorer` and cached.
pub fn score_pool(
    pool: &Pool,
    source: &LmLikelihoodSource,
    cache: &Path,
    scorer: Scorer,
    progress: &dyn Progress,
    chunk: usize,
) -> anyhow::Result<(PoolScores, PoolLikelihood)> {
    let started = std::time::Instant::now();
    let chunk = chunk.max(1);
    let requests = pool_requests(pool)?;
    let chars: Vec<i64> = requests.iter().map(|r| r.chars as i64).collect();
    let model_bytes = std::fs::metadata(&source.model)
        .with_context(|| format!("cannot read {}", source.model.display()))?
        .len();
    let key = CacheKey {
        model: source.model.clone(),
        model_bytes,
        rows: requests.len(),
        conditions: SCORED_CONDITIONS.map(String::from).to_vec(),
        requests: requests_hash(&requests),
    };
    let (key_path, scores_path) = (cache.join("key.json"), cache.join("scores.safetensors"));
    let cached = std::fs::read_to_string(&key_path)
        .ok()
        .and_then(|t| serde_json::from_str::<CacheKey>(&t).ok())
        .is_some_and(|k| k == key);
    let done = |cached, resumed| PoolLikelihood {
        gold_place: None,
        model: source.model.clone(),
        rows: requests.len(),
        cached,
        resumed,
        seconds: started.elapsed().as_secs_f64(),
    };
    if cached {
        match read_scores(&scores_path, requests.len()) {
            Ok(scored) => return Ok((scored.with_chars(chars), done(true, 0))),
            Err(e) => tracing::warn!("{e:#}: scoring the pool again"),
        }
    }
    let loaded;
    let lm = match scorer {
        Scorer::Loaded(lm) => lm,
        Scorer::Load(device) => {
            loaded = CausalLm::load(&source.model, device).with_context(|| {
                format!(
                    "[committee.member.{}] model {}",
                    lm_likelihood::NAME,
                    source.model.display()
                )
            })?;
            &loaded
        }
    };
    let partial = cache.join("partial");
    open_partial(
        &partial,
        &PartialKey {
            cache: key.clone(),
            chunk,
        },
    )?;
    let bar = progress.bar("LM likelihood of the pool", requests.len() as u64);
    let mut scored = Scored::default();
    let mut resumed = 0;
    let mut keeping = true;
    for (c, rows) in requests.chunks(chunk).enumerate() {
        let path = partial.join(format!("chunk-{c:06}.safetensors"));
        if let Ok(kept) = read_scores(&path, rows.len()) {
            scored.extend(kept);
            resumed += rows.len();
            bar.inc(rows.len() as u64);
            continue;
        }
        let mut now = Scored::default();
        // Several forward passes per call, so the bar moves within a chunk.
        for part in rows.chunks(source.batch_size * 4) {
            // Both conditions in one call: the LM batches requests by length, and the endings
            // alone are short.
            let continuations: Vec<Continuation> = part
                .iter()
                .map(|r| Continuation {
                    context: &r.context,
                    continuation: &r.continuation,
                })
                .chain(part.iter().map(|r| Continuation {
                    context: "",
                    continuation: &r.continuation,
                }))
                .collect();
            let scores = lm.loglikelihoods(&continuations, source.batch_size)?;
            let (full, alone) = scores.split_at(part.len());
            now.logprob.extend(full.iter().map(|s| s.logprob));
            now.tokens.extend(full.iter().map(|s| s.tokens as i64));
            now.choices_only.extend(alone.iter().map(|s| s.logprob));
            now.choices_only_tokens
                .extend(alone.iter().map(|s| s.tokens as i64));
            bar.inc(part.len() as u64);
        }
        if keeping {
            if let Err(e) = write_scores(&path, &now) {
                tracing::warn!("{e:#}: the pool's LM scores go on without keeping chunks, so a kill now loses them");
                keeping = false;
            }
        }
        scored.extend(now);
    }
    bar.finish();
    for (condition, scores) in SCORED_CONDITIONS
        .iter()
        .zip([&scored.logprob, &scored.choices_only])
    {
        if let Some(bad) = scores.iter().position(|l| !l.is_finite()) {
            anyhow::bail!(
                "the LM scored pool row {bad} {} ({condition}): its scores must be finite",
                scores[bad]
            );
        }
    }
    let _ = std::fs::remove_file(&key_path);
    write_scores(&scores_path, &scored)?;
    af_core::atomic::write(&key_path, serde_json::to_string_pretty(&key)?.as_bytes())?;
    // The whole pool is in the cache now: its chunks are not needed.
    let _ = std::fs::remove_dir_all(&partial);
    Ok((scored.with_chars(chars), done(false, resumed)))
}

/// Makes `dir` hold the chunks of `key`: chunks of another key are removed.
fn open_partial(dir: &Path, key: &PartialKey) -> anyhow::Result<()> {
    let key_path = dir.join("key.json");
    let same = std::fs::read_to_string(&key_path)
        .ok()
        .and_then(|t| serde_json::from_str::<PartialKey>(&t).ok())
        .is_some_and(|k| k == *key);
    if !same {
        if dir.exists() {
            std::fs::remove_dir_all(dir)
                .with_context(|| format!("cannot remove {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        af_core::atomic::write(&key_path, serde_json::to_string_pretty(key)?.as_bytes())?;
    }
    Ok(())
}

/// Writes scores (f64) and token counts of both conditions, renamed into place once written
/// whole.
fn write_scores(path: &Path, scored: &Scored) -> anyhow::Result<()> {
    let tmp = path.with_extension("safetensors.tmp");
    Tensor::write_safetensors(
        &[
            ("logprob", Tensor::from_slice(&scored.logprob)),
            ("tokens", Tensor::from_slice(&scored.tokens)),
            (
                "choices_only_logprob",
                Tensor::from_slice(&scored.choices_only),
            ),
            (
                "choices_only_tokens",
                Tensor::from_slice(&scored.choices_only_tokens),
            ),
        ],
        &tmp,
    )
    .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Scores and token counts of `rows` rows, checked.
fn read_scores(path: &Path, rows: usize) -> anyhow::Result<Scored> {
    let named: std::collections::HashMap<String, Tensor> = Tensor::read_safetensors(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .into_iter()
        .collect();
    let get = |name: &str, kind: Kind| -> anyhow::Result<&Tensor> {
        let t = named
            .get(name)
            .with_context(|| format!("{} has no `{name}`", path.display()))?;
        anyhow::ensure!(
            t.size() == [rows as i64] && t.kind() == kind,
            "{}: `{name}` is {:?} {:?}, expected [{rows}] {kind:?}",
            path.display(),
            t.size(),
            t.kind()
        );
        Ok(t)
    };
    Ok(Scored {
        logprob: Vec::<f64>::try_from(get("logprob", Kind::Double)?)?,
        tokens: Vec::<i64>::try_from(get("tokens", Kind::Int64)?)?,
        choices_only: Vec::<f64>::try_from(get("choices_only_logprob", Kind::Double)?)?,
        choices_only_tokens: Vec::<i64>::try_from(get("choices_only_tokens", Kind::Int64)?)?,
    })
}

/// Attaches the features when a member the config names reads them (the filter's and
/// `[ablate]`'s members share the pool's table).
pub(crate) fn attach_for_config(
    config: &Config,
    registry: &Registry,
    pool: &Pool,
    table: &mut CandidateTable,
    progress: &dyn Progress,
) -> anyhow::Result<()> {
    let members = crate::committee::named_members(config);
    let Some(source) = registry.lm_likelihood(&members, &config.committee)? else {
        return Ok(());
    };
    let done = attach_pool(table, pool, &source, &cache_dir(config), progress)?;
    tracing::info!(
        "{}: {} candidates scored by {} ({} in {:.1} s)",
        lm_likelihood::NAME,
        done.rows,
        done.model.display(),
        match (done.cached, done.resumed) {
            (true, _) => "read from the cache".to_string(),
            (false, 0) => "scored".to_string(),
            (false, n) => format!("scored, {n} of them kept by an interrupted run"),
        },
        done.seconds
    );
    if let Some(p) = &done.gold_place {
        tracing::info!(
            "{}: the gold is the least likely option of its pool on {:.0}% of {} items per character ({:.0}% per token, {:.0}% by the ending alone); {:.2} of its candidates are less likely than it on average per character ({:.2} by the ending alone; 0.5: like them; {})",
            lm_likelihood::NAME,
            100.0 * p.per_char.least_likely,
            p.items,
            100.0 * p.per_token.least_likely,
            100.0 * p.choices_only_per_char.least_likely,
            p.per_char.share_below,
            p.choices_only_per_char.share_below,
            cache_dir(config).join("gold-place.json").display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{EvalRequest, ScoredQuestion};
    use crate::stages::export::{write_jsonl, Chosen};
    use crate::NoProgress;
    use af_filter::Assignment;

    /// A progress whose bars panic at their `after`-th step: a run killed while scoring.
    struct KillAt(u64, std::sync::Arc<std::sync::atomic::AtomicU64>);

    impl Progress for KillAt {
        fn bar(&self, _: &str, _: u64) -> Box<dyn crate::Bar> {
            Box::new(KillAt(self.0, self.1.clone()))
        }
    }

    impl crate::Bar for KillAt {
        fn inc(&self, _: u64) {
            if self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == self.0 {
                panic!("killed while scoring (the test's simulated kill)");
            }
        }
        fn set_position(&self, _: u64) {}
        fn set_length(&self, _: u64) {}
        fn set_message(&self, _: String) {}
        fn finish(&self) {}
    }

    /// The pool's scores are `af eval`'s scores of the same options in the dataset the export
    /// writes (af's layout, every candidate an option), cached, and resumed after a kill.
    fn scores_are_af_evals(model: &Path) {
        let _lock = af_test_support::lock();
        let dir = tempfile::tempdir().unwrap();
        af_io::pool_index::write_synthetic_pool(dir.path(), 6, 4, 4).unwrap();
        let pool = Pool::load(dir.path()).unwrap();
        let source = LmLikelihoodSource {
            model: model.to_path_buf(),
            batch_size: 3,
        };
        let cache = dir.path().join("lm-likelihood");
        // Chunks of 7 rows, bars that move every 12: killed in the second chunk, one chunk kept.
        let killed = std::panic::catch_unwind(|| {
            let kill = KillAt(2, Default::default());
            score_pool(&pool, &source, &cache, Scorer::Load(Device::Cpu), &kill, 7)
        });
        assert!(killed.is_err());
        assert!(cache.join("partial/chunk-000000.safetensors").is_file());
        let (scores, done) = score_pool(
            &pool,
            &source,
            &cache,
            Scorer::Load(Device::Cpu),
            &NoProgress,
            7,
        )
        .unwrap();
        assert!(!done.cached && done.resumed == 7, "{done:?}");
        assert!(!cache.join("partial").exists());
        assert_eq!(scores.logprob.len(), pool.rows);

        let assignment = Assignment::random(&pool.sizes, 4, 1).unwrap();
        let chosen = Chosen::read(&pool, &[&assignment]).unwrap();
        let dataset = dir.path().join("dataset.jsonl");
        write_jsonl(&dataset, &chosen, &assignment, None, &["train"; 6]).unwrap();
        let out = dir.path().join("eval");
        crate::eval::run(
            &EvalRequest {
                dataset: &dataset,
                name: None,
                format: None,
                skip_bad: false,
                model,
                ways: None,
                seed: 1,
                batch_size: 5,
                device: "cpu".into(),
                threads: 1,
                out: &out,
                force: false,
            },
            &NoProgress,
        )
        .unwrap();
        let evaluated: Vec<ScoredQuestion> = std::fs::read_to_string(out.join("scores.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(evaluated.len(), 6);
        let mut compared = 0;
        for q in &evaluated {
            let i = pool.items.iter().position(|it| it.id == q.id).unwrap();
            for (o, (logprob, tokens)) in q.logprob.iter().zip(&q.tokens).enumerate() {
                // af's layout: the gold first, then the distractors in the assignment's order.
                let c = if o == 0 {
                    0
                } else {
                    assignment.distractors[i][o - 1]
                };
                let row = pool.row(i, c) as usize;
                assert_eq!(q.norm_chars[o][0] as i64, scores.chars[row]);
                // af eval's full condition (0) and the ending alone, its choices-only (2).
                let conditions = [
                    (0, &scores.logprob, &scores.tokens),
                    (2, &scores.choices_only, &scores.choices_only_tokens),
                ];
                for (condition, member, member_tokens) in conditions {
                    assert!(
                        (logprob[condition] - member[row]).abs() < 1e-4,
                        "{} option {o}, condition {condition}: af eval {}, the member {}",
                        q.id,
                        logprob[condition],
                        member[row]
                    );
                    assert_eq!(tokens[condition] as i64, member_tokens[row]);
                }
                compared += 1;
            }
        }
        assert_eq!(compared, pool.rows);

        // Read back, not scored again; another model's scores are not taken.
        let (again, done) = score_pool(
            &pool,
            &source,
            &cache,
            Scorer::Load(Device::Cpu),
            &NoProgress,
            7,
        )
        .unwrap();
        assert!(done.cached);
        assert_eq!(again, scores);
        let other = dir.path().join("other.gguf");
        af_nn::causal_lm::toy::write_toy_llama(&other, 99).unwrap();
        let (rescored, done) = score_pool(
            &pool,
            &LmLikelihoodSource {
                model: other,
                ..source
            },
            &cache,
            Scorer::Load(Device::Cpu),
            &NoProgress,
            64,
        )
        .unwrap();
        assert!(!done.cached);
        assert_ne!(rescored.logprob, scores.logprob);
    }

    #[test]
    fn the_gold_s_place_among_its_pool_counts_floors_ceilings_and_ties() {
        // Item 0: gold below both candidates per character and per token. Item 1: gold above
        // both per character, and below both per token (1 token against 10). Item 2: a tie and
        // one below, both ways. Item 3: the gold alone, left out.
        // Alone, every ending is as likely per character as after its context, but item 0's
        // gold is above both.
        let mut choices_only = vec![
            -30.0, -10.0, -20.0, -10.0, -30.0, -20.0, -20.0, -20.0, -40.0, -5.0,
        ];
        choices_only[0] = -5.0;
        let scores = PoolScores {
            logprob: vec![
                -30.0, -10.0, -20.0, -10.0, -30.0, -20.0, -20.0, -20.0, -40.0, -5.0,
            ],
            chars: vec![10; 10],
            tokens: vec![5, 5, 5, 1, 10, 10, 5, 5, 5, 5],
            choices_only,
            choices_only_tokens: vec![5; 10],
        };
        let place = gold_place(&scores, &[3, 3, 3, 1]);
        assert_eq!(place.items, 3);
        let third = |x: f64| x / 3.0;
        assert_eq!(place.per_char.least_likely, third(1.0));
        assert_eq!(place.per_char.most_likely, third(1.0));
        // Shares below the gold: 0, 1 and (0.5 + 1) / 2.
        assert!((place.per_char.share_below - third(1.75)).abs() < 1e-12);
        assert_eq!(place.per_token.least_likely, third(2.0));
        assert_eq!(place.per_token.most_likely, 0.0);
        assert!((place.per_token.share_below - third(0.75)).abs() < 1e-12);
        assert_eq!(place.choices_only_per_char.least_likely, 0.0);
        assert_eq!(place.choices_only_per_char.most_likely, third(2.0));
        assert!((place.choices_only_per_char.share_below - third(2.75)).abs() < 1e-12);
    }

    /// A cache written before the member scored the ending alone (its key names no conditions)
    /// is scored again rather than read.
    #[test]
    fn a_cache_without_the_ending_alone_is_scored_again() {
        let _lock = af_test_support::lock();
        let dir = tempfile::tempdir().unwrap();
        af_io::pool_index::write_synthetic_pool(dir.path(), 3, 2, 4).unwrap();
        let pool = Pool::load(dir.path()).unwrap();
        let model = dir.path().join("toy.gguf");
        af_nn::causal_lm::toy::write_toy_llama(&model, 11).unwrap();
        let source = LmLikelihoodSource {
            model,
            batch_size: 4,
        };
        let cache = dir.path().join("cache");
        let score = || {
            score_pool(
                &pool,
                &source,
                &cache,
                Scorer::Load(Device::Cpu),
                &NoProgress,
                CHUNK,
            )
            .unwrap()
        };
        let (first, _) = score();
        assert!(score().1.cached);
        let key_path = cache.join("key.json");
        let mut key: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&key_path).unwrap()).unwrap();
        key.as_object_mut().unwrap().remove("conditions");
        std::fs::write(&key_path, key.to_string()).unwrap();
        let (again, done) = score();
        assert!(!done.cached, "{done:?}");
        assert_eq!(again, first);
        assert!(first.choices_only.iter().all(|l| l.is_finite() && *l < 0.0));
    }

    #[test]
    fn a_pools_scores_are_af_evals_with_a_toy_lm() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("toy.gguf");
        af_nn::causal_lm::toy::write_toy_llama(&model, 11).unwrap();
        scores_are_af_evals(&model);
    }

    #[test]
    fn a_pools_scores_are_af_evals_with_the_installed_lm() {
        let Some(model) =
            af_test_support::causal_lm("a_pools_scores_are_af_evals_with_the_installed_lm")
        else {
            return;
        };
        scores_are_af_evals(&model);
    }

    /// The filter's committee with the member: the table carries its features, a committee of
    /// it and a text member trains and scores every candidate.
    #[test]
    fn a_committee_with_the_member_trains_and_scores() {
        let _lock = af_test_support::lock();
        let dir = tempfile::tempdir().unwrap();
        af_io::pool_index::write_synthetic_pool(dir.path(), 20, 5, 8).unwrap();
        let pool = Pool::load(dir.path()).unwrap();
        let model = dir.path().join("toy.gguf");
        af_nn::causal_lm::toy::write_toy_llama(&model, 11).unwrap();
        let config = af_core::CommitteeConfig {
            epochs: 2,
            batch_items: 8,
            embedding: 8,
            joint_hidden: 8,
            max_vocab: 50,
            ..Default::default()
        };
        let (mut table, _) =
            crate::table::candidate_table(&pool, &config, &af_text::Tagger::builtin(), Device::Cpu)
                .unwrap();
        let source = LmLikelihoodSource {
            model,
            batch_size: 16,
        };
        let done = attach_pool(
            &mut table,
            &pool,
            &source,
            &dir.path().join("cache"),
            &NoProgress,
        )
        .unwrap();
        // Where the golds fall is written beside the scores, as the log reports it.
        let written: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("cache/gold-place.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(written, serde_json::to_value(&done.gold_place).unwrap());
        assert_eq!(written["items"], 20);
        let features = table.lm_likelihood.as_ref().unwrap();
        assert_eq!(
            features.size(),
            [pool.rows as i64, lm_likelihood::FEATURES.len() as i64]
        );
        let registry = Registry::builtin();
        let committee =
            crate::committee::TorchCommittee::new(&pool, &table, &config, &registry, Device::Cpu);
        let assignment = crate::committee::random_assignment(&pool, 3, 2).unwrap();
        let questions: Vec<Vec<i64>> = (0..16)
            .map(|i| committee.question(i, &assignment))
            .collect();
        let members = af_core::member_names(&["bow", lm_likelihood::NAME]);
        let (_vs, model) = committee.train(&members, &questions, 5).unwrap();
        let rows: Vec<i64> = (0..table.rows).collect();
        let scores =
            af_nn::committee::score(&model, &table, &rows, af_core::ScoreBatch::Candidates(32));
        let heads: Vec<&str> = scores.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(heads, ["joint", "bow", lm_likelihood::NAME]);
        assert!(scores
            .iter()
            .all(|(_, s)| s.len() == pool.rows && s.iter().all(|v| v.is_finite())));
    }
}
