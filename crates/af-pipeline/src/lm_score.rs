//! `af lm score`: the log-perplexity of every option of a multiple-choice dataset under one of a
//! run's trained LMs, a judge of fluency that is not the generator (issue 18).
//!
//! The generating LM cannot judge its own samples (it rates its word salad as likely as the
//! found endings), so the default LM is the *other* fold's: for an item of fold f, the LM of
//! fold (f + 1) mod folds, which never sampled that item's endings. It did train on the item's
//! found ending (cross-fitting trains every LM but the own fold's on it), so its figure for the
//! gold is optimistic: compare distractors with distractors (AF against random), not with the gold.
//!
//! Writes, per dataset, `OUT/<stem>.csv` (one row per option) and `OUT/summary.json` (every
//! dataset's per-kind figures).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use af_core::{Config, Question};
use af_io::questions::read_questions;
use af_nn::lm_files::{load_fold, load_vocab, token_ids};
use af_nn::sample::{features, FeatureInput};
use anyhow::Context;
use serde::Serialize;

/// Which of the run's LMs scores an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LmChoice {
    /// The LM of the fold after the item's own (never sampled the item's endings).
    Other,
    /// The item's own fold's LM: the one that generated its endings (the pool's LM features).
    Own,
    /// One fold's LM for every question (any dataset, also one not made by this run).
    Fold(u32),
}

impl LmChoice {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "other" => Ok(Self::Other),
            "own" => Ok(Self::Own),
            n => n
                .parse()
                .map(Self::Fold)
                .map_err(|_| format!("`{s}`: expected `other`, `own` or a fold number")),
        }
    }

    fn fold_of(self, item_fold: Option<u32>, folds: u32) -> Option<u32> {
        match self {
            Self::Other => item_fold.map(|f| (f + 1) % folds),
            Self::Own => item_fold,
            Self::Fold(n) => Some(n),
        }
    }
}

/// One option's scores: mean negative log-likelihood per token (natural log) of the ending
/// given context and noun phrase, forward, and of the reversed ending given nothing, backward.
#[derive(Clone, Debug, Serialize)]
pub struct OptionScore {
    pub question: String,
    pub option: usize,
    pub gold: bool,
    pub fold: u32,
    pub tokens: usize,
    pub forward_log_ppl: f32,
    pub backward_log_ppl: f32,
}

/// Forward log-perplexities of one kind of option.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct KindSummary {
    pub options: usize,
    pub mean: f64,
    /// 95% normal interval of the mean.
    pub mean_ci: (f64, f64),
    pub median: f64,
    /// Share of options with at least one word outside the LM's vocabulary (`<unk>`).
    pub unknown_token_share: f64,
}

/// One dataset's figures.
#[derive(Clone, Debug, Serialize)]
pub struct DatasetScore {
    pub dataset: PathBuf,
    pub csv: PathBuf,
    pub questions: usize,
    pub gold: KindSummary,
    pub distractors: KindSummary,
    /// Two-sample Kolmogorov-Smirnov statistic between the gold and the distractors' forward
    /// log-perplexities (0: the same distribution, 1: disjoint).
    pub ks_gold_distractors: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LmScoreReport {
    pub run: PathBuf,
    pub lm: LmChoice,
    pub folds: u32,
    pub datasets: Vec<DatasetScore>,
}

/// Scores every option of each dataset with the run's LMs (`config`'s run directory, after its
/// `lm` stage) and writes the CSVs and `summary.json` into `out`.
pub fn score_datasets(
    config: &Config,
    datasets: &[PathBuf],
    choice: LmChoice,
    out: &Path,
) -> anyhow::Result<LmScoreReport> {
    let run = &config.run.dir;
    let folds = config.pairs.folds;
    if let LmChoice::Fold(n) = choice {
        anyhow::ensure!(
            n < folds,
            "fold {n}: the run has folds 0..{} ([pairs] folds = {folds})",
            folds - 1
        );
    }
    let lm_dir = run.join(crate::stages::lm::NAME.dir_name());
    let vocab = load_vocab(&lm_dir).with_context(|| {
        format!(
            "{} holds no trained LMs: run `af lm train` first",
            run.display()
        )
    })?;
    let items_path = run
        .join(crate::stages::pairs::NAME.dir_name())
        .join("items.jsonl");
    let item_folds: HashMap<String, u32> = if matches!(choice, LmChoice::Fold(_)) {
        HashMap::new()
    } else {
        af_io::items::read_items(&items_path)?
            .into_iter()
            .map(|i| (i.id, i.fold))
            .collect()
    };
    let device = crate::setup::device(config)?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;

    // Every dataset read and every question's LM chosen before any LM is loaded.
    let mut files = Vec::new();
    for path in datasets {
        let file = read_questions(path, None, false)?;
        let mut by_fold: HashMap<u32, Vec<Question>> = HashMap::new();
        let questions = file.questions.len();
        for q in file.questions {
            let fold = choice.fold_of(item_folds.get(&q.id).copied(), folds).ok_or_else(|| {
                anyhow::anyhow!(
                    "{}:{}: question `{}` is not an item of the run {} (its pairs/items.jsonl): `--lm other` and `--lm own` need the run's own items; give `--lm N` to score every question with fold N's LM",
                    path.display(),
                    q.line,
                    q.id,
                    run.display()
                )
            })?;
            by_fold.entry(fold).or_default().push(q);
        }
        files.push((path.clone(), questions, by_fold));
    }

    let unk = i64::from(vocab.unk_id());
    let mut loaded = HashMap::new();
    let mut datasets_out = Vec::new();
    for (path, questions, by_fold) in files {
        let mut rows = Vec::new();
        let mut unknown = Vec::new();
        let mut order: Vec<_> = by_fold.keys().copied().collect();
        order.sort_unstable();
        for fold in order {
            if let std::collections::hash_map::Entry::Vacant(e) = loaded.entry(fold) {
                e.insert(load_fold(&config.lm, &vocab, &lm_dir, fold, device)?);
            }
            let (_, lm) = &loaded[&fold];
            // Each question with its context, noun phrase and options as LM token ids.
            type QuestionIds<'q> = (&'q Question, Vec<i64>, Vec<i64>, Vec<Vec<i64>>);
            let question_ids: Vec<QuestionIds> = by_fold[&fold]
                .iter()
                .map(|q| {
                    (
                        q,
                        token_ids(&vocab, &q.context),
                        token_ids(&vocab, &q.prefix),
                        q.endings.iter().map(|e| token_ids(&vocab, e)).collect(),
                    )
                })
                .collect();
            let inputs: Vec<FeatureInput> = question_ids
                .iter()
                .flat_map(|(_, s, n, vs)| {
                    vs.iter().map(move |v| FeatureInput {
                        s: s.as_slice(),
                        n: n.as_slice(),
                        v: v.as_slice(),
                    })
                })
                .collect();
            let scored = score_in_budget(lm, &inputs, device);
            let mut next = scored.iter();
            for (q, _, _, vs) in &question_ids {
                for (option, v) in vs.iter().enumerate() {
                    let f = next.next().expect("one feature row per option");
                    unknown.push(v.contains(&unk));
                    rows.push(OptionScore {
                        question: q.id.clone(),
                        option,
                        gold: option == q.label,
                        fold,
                        tokens: v.len(),
                        forward_log_ppl: f[0],
                        backward_log_ppl: f[1],
                    });
                }
            }
        }
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "dataset".into());
        let csv_path = out.join(format!("{stem}.csv"));
        let mut w = csv::Writer::from_writer(Vec::new());
        for r in &rows {
            w.serialize(r)?;
        }
        af_core::atomic::write(
            &csv_path,
            &w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))?,
        )?;
        let kind = |gold: bool| {
            let picked: Vec<(f64, bool)> = rows
                .iter()
                .zip(&unknown)
                .filter(|(r, _)| r.gold == gold)
                .map(|(r, &u)| (f64::from(r.forward_log_ppl), u))
                .collect();
            summarise(&picked)
        };
        let gold: Vec<f64> = rows
            .iter()
            .filter(|r| r.gold)
            .map(|r| f64::from(r.forward_log_ppl))
            .collect();
        let wrong: Vec<f64> = rows
            .iter()
            .filter(|r| !r.gold)
            .map(|r| f64::from(r.forward_log_ppl))
            .collect();
        datasets_out.push(DatasetScore {
            dataset: path,
            csv: csv_path,
            questions,
            gold: kind(true),
            distractors: kind(false),
            ks_gold_distractors: ks_statistic(&gold, &wrong),
        });
    }
    let report = LmScoreReport {
        run: run.clone(),
        lm: choice,
        folds,
        datasets: datasets_out,
    };
    af_core::atomic::write(
        out.join("summary.json"),
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    Ok(report)
}

/// [`features`] of every input, in order, in batches of similar lengths whose logits stay within
/// the device's budget (a batch of long sentences over a large vocabulary would not fit).
fn score_in_budget(
    lm: &af_nn::lm::BiLm,
    inputs: &[FeatureInput],
    device: tch::Device,
) -> Vec<[f32; 8]> {
    let len = |&i: &usize| 1 + inputs[i].s.len() + inputs[i].n.len() + inputs[i].v.len();
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by_key(len);
    let mut out = vec![[0f32; 8]; inputs.len()];
    for chunk in af_nn::lm::budgeted_batches(
        &order,
        len,
        4096,
        lm.shape.vocab,
        af_nn::lm::logit_budget(device),
    ) {
        let batch: Vec<FeatureInput> = chunk
            .iter()
            .map(|&i| FeatureInput {
                s: inputs[i].s,
                n: inputs[i].n,
                v: inputs[i].v,
            })
            .collect();
        for (&i, f) in chunk.iter().zip(features(lm, &batch, batch.len(), device)) {
            out[i] = f;
        }
    }
    out
}

fn summarise(values: &[(f64, bool)]) -> KindSummary {
    let n = values.len();
    if n == 0 {
        return KindSummary {
            options: 0,
            mean: f64::NAN,
            mean_ci: (f64::NAN, f64::NAN),
            median: f64::NAN,
            unknown_token_share: f64::NAN,
        };
    }
    let xs: Vec<f64> = values.iter().map(|v| v.0).collect();
    let mean = xs.iter().sum::<f64>() / n as f64;
    let var = if n > 1 {
        xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
    } else {
        0.0
    };
    let half = af_audit::stats::Z95 * (var / n as f64).sqrt();
    let mut sorted = xs.clone();
    sorted.sort_by(f64::total_cmp);
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    let unknown = values.iter().filter(|v| v.1).count() as f64 / n as f64;
    KindSummary {
        options: n,
        mean,
        mean_ci: (mean - half, mean + half),
        median,
        unknown_token_share: unknown,
    }
}

/// The two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical
/// distribution functions (0 when either sample is empty).
pub fn ks_statistic(a: &[f64], b: &[f64]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let (mut i, mut j, mut gap) = (0, 0, 0f64);
    while i < a.len() && j < b.len() {
        // Step past every value equal to the smaller one in both samples, so ties do not count.
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        gap = gap.max((i as f64 / a.len() as f64 - j as f64 / b.len() as f64).abs());
    }
    gap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ks_is_zero_for_equal_samples_and_one_for_disjoint_ones() {
        assert_eq!(ks_statistic(&[1.0, 2.0, 3.0], &[3.0, 1.0, 2.0]), 0.0);
        assert_eq!(ks_statistic(&[1.0, 2.0], &[5.0, 6.0, 7.0]), 1.0);
        // a = {1,2,3,4}, b = {3,4,5,6}: after 2 the gap is 2/4 - 0.
        assert!((ks_statistic(&[1.0, 2.0, 3.0, 4.0], &[3.0, 4.0, 5.0, 6.0]) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn the_other_fold_is_the_next_one_round_the_folds() {
        assert_eq!(LmChoice::Other.fold_of(Some(0), 2), Some(1));
        assert_eq!(LmChoice::Other.fold_of(Some(1), 2), Some(0));
        assert_eq!(LmChoice::Own.fold_of(Some(1), 2), Some(1));
        assert_eq!(LmChoice::Other.fold_of(None, 2), None);
        assert_eq!(LmChoice::Fold(1).fold_of(None, 2), Some(1));
        assert_eq!(LmChoice::parse("other"), Ok(LmChoice::Other));
        assert_eq!(LmChoice::parse("3"), Ok(LmChoice::Fold(3)));
        assert!(LmChoice::parse("first").is_err());
    }
}
