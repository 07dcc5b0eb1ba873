//! `[generate] could-be-right`: endings that could be right answers, set aside before the pool is
//! written. AF keeps what looks like the gold, so a fluent writer's second right answers are what
//! it prefers; these checks take them out first. Read with the pretrained sentence encoder:
//! - `similar`: the ending's second sentence (noun phrase and ending) is as near the gold's as a
//!   paraphrase (cosine at least `could-be-right-similarity`);
//! - `scorer`: a right-answer scorer, a logistic regression on the context's and the second
//!   sentence's vectors trained on the run's golds against other videos' endings (with the item's
//!   own noun phrase), one per fold and trained on the other folds' items, rates the ending at
//!   least as right as the item's own gold and a typical gold (the median of the fold's).
//!
//! Endings set aside leave the item's pool (its pool is that much smaller; an item keeps at least
//! `[filter] k`, the flagged ones that passed their bar by least, counted) and are listed in
//! `generate/set-aside.tsv` with the check, their score and the bar it reached (`similar`: the
//! cosine and its threshold); the report counts them per
//! check and source. af's LM samples, which stream block by block, are not checked.

use std::collections::BTreeMap;

use af_core::config::CouldBeRight;
use af_core::Item;
use af_nn::encoder::{Encoder, EncoderOptions};
use anyhow::Context;
use rand::Rng;
use serde::Serialize;
use tch::{nn, nn::OptimizerConfig, Device, Kind, Tensor};

use super::sources::{Ending, SourceContext, SourceSummary};

/// Its key in the report's `sources`.
pub const NAME: &str = "could-be-right";

/// Negatives per gold when a scorer is trained: other videos' endings after the item's context.
const NEGATIVES: usize = 3;
const STEPS: usize = 300;

/// What the report says of the checks.
#[derive(Clone, Debug, Default, Serialize)]
struct Summary {
    checked: usize,
    set_aside: usize,
    /// Per check (an ending both checks flag counts under the first, `similar`).
    by_check: BTreeMap<&'static str, usize>,
    /// Per source of the endings set aside.
    by_origin: BTreeMap<&'static str, usize>,
    /// Flagged endings kept all the same so that an item has `[filter] k` distractors to choose.
    kept_for_k: usize,
    /// The scorers' held-out pairwise accuracy: how often a fold's scorer rates an item's gold
    /// above one other video's ending after the same context (0.5: chance).
    #[serde(skip_serializing_if = "Option::is_none")]
    scorer_heldout_pairwise: Option<f64>,
    encoder: std::path::PathBuf,
}

/// Sets aside, from each question's endings (`endings[q]`, the endings of the sources that run
/// before the blocks), those the configured checks flag; returns the report's summary.
pub fn set_aside(
    questions: &[&Item],
    endings: &mut [Vec<Ending>],
    ctx: &SourceContext,
) -> anyhow::Result<Option<SourceSummary>> {
    let g = &ctx.config.generate;
    if g.could_be_right.is_empty() {
        return Ok(None);
    }
    let dir = super::encoder_dir("could-be-right")?;
    let encoder =
        Encoder::load(&dir, ctx.device, &EncoderOptions::default()).with_context(|| {
            format!(
                "loading the encoder of [generate] could-be-right from {}",
                dir.display()
            )
        })?;
    let second = |item: &Item, ending: &str| format!("{} {}", item.noun_phrase, ending.trim());
    let unit = |texts: &[String]| -> anyhow::Result<Tensor> {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        Ok(encoder.encode(&refs)?)
    };
    // Every item of the run trains the scorers; the questions' endings are judged.
    let all = ctx.all;
    let contexts = unit(&all.iter().map(|i| i.context.clone()).collect::<Vec<_>>())?;
    let golds = unit(&all.iter().map(|i| second(i, &i.ending)).collect::<Vec<_>>())?;
    let texts: Vec<String> = questions
        .iter()
        .zip(endings.iter())
        .flat_map(|(q, es)| es.iter().map(move |e| second(q, &e.text)))
        .collect();
    let candidates = unit(&texts)?;
    let owner_ids: Vec<i64> = endings
        .iter()
        .enumerate()
        .flat_map(|(q, es)| std::iter::repeat_n(q as i64, es.len()))
        .collect();
    let owner = Tensor::from_slice(&owner_ids);

    let mut flags: Vec<Option<(CouldBeRight, f32, f32)>> = vec![None; texts.len()];
    if g.could_be_right.contains(&CouldBeRight::Similar) {
        let cos =
            (&candidates * golds.index_select(0, &owner)).sum_dim_intlist(1, false, Kind::Float);
        let cos = Vec::<f32>::try_from(cos)?;
        let bar = g.could_be_right_similarity as f32;
        for (flag, &c) in flags.iter_mut().zip(&cos) {
            if c >= bar {
                *flag = Some((CouldBeRight::Similar, c, bar));
            }
        }
    }
    let mut heldout = None;
    if g.could_be_right.contains(&CouldBeRight::Scorer) {
        // Each item's negatives: endings of other videos' items after its own noun phrase, drawn
        // once for every fold.
        let mut rng = super::item_rng(ctx.config.run.seed ^ 0x0072_6967_6874, 0, 0);
        let negatives: Vec<usize> = (0..all.len())
            .flat_map(|i| {
                (0..NEGATIVES)
                    .map(|_| loop {
                        let j = rng.random_range(0..all.len());
                        if all[j].group != all[i].group || all.len() < 2 {
                            break j;
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let negative_texts: Vec<String> = negatives
            .iter()
            .enumerate()
            .map(|(n, &j)| second(&all[n / NEGATIVES], &all[j].ending))
            .collect();
        let vectors = Vectors {
            contexts: &contexts,
            golds: &golds,
            negatives: &unit(&negative_texts)?,
            candidates: &candidates,
            owner: &owner,
        };
        let (scores, bars, pairwise) = scorer_scores(all, questions, &vectors, ctx)?;
        heldout = Some(pairwise);
        for (r, flag) in flags.iter_mut().enumerate() {
            let q = owner_ids[r] as usize;
            if flag.is_none() && scores[r] >= bars[q] {
                *flag = Some((CouldBeRight::Scorer, scores[r], bars[q]));
            }
        }
    }

    // Every item keeps at least k endings for AF's questions: where the checks would leave fewer,
    // the flagged endings that passed their bar by least stay.
    let k = ctx.config.filter.k;
    let mut kept_for_k = 0;
    let mut first = 0;
    for es in endings.iter() {
        let rows = first..first + es.len();
        first += es.len();
        let flagged = flags[rows.clone()].iter().filter(|f| f.is_some()).count();
        let short = k.saturating_sub(es.len() - flagged).min(flagged);
        let mut by_margin: Vec<usize> = rows.filter(|&r| flags[r].is_some()).collect();
        by_margin.sort_by(|&a, &b| {
            let margin = |r: usize| flags[r].map_or(0.0, |(_, score, bar)| score - bar);
            margin(a).total_cmp(&margin(b)).then(a.cmp(&b))
        });
        for &r in &by_margin[..short] {
            flags[r] = None;
            kept_for_k += 1;
        }
    }
    let mut summary = Summary {
        checked: texts.len(),
        kept_for_k,
        scorer_heldout_pairwise: heldout,
        encoder: dir,
        ..Summary::default()
    };
    let mut tsv = String::from("item_index\titem_id\torigin\tcheck\tscore\tbar\tending\n");
    let mut r = 0;
    for (q, es) in endings.iter_mut().enumerate() {
        let mut kept = Vec::with_capacity(es.len());
        for e in es.drain(..) {
            match flags[r] {
                Some((check, score, gold)) => {
                    summary.set_aside += 1;
                    *summary.by_check.entry(check.name()).or_default() += 1;
                    *summary.by_origin.entry(e.origin).or_default() += 1;
                    tsv.push_str(&format!(
                        "{q}\t{}\t{}\t{}\t{score:.4}\t{gold:.4}\t{}\n",
                        questions[q].id,
                        e.origin,
                        check.name(),
                        e.text.replace(['\t', '\n'], " ")
                    ));
                }
                None => kept.push(e),
            }
            r += 1;
        }
        *es = kept;
    }
    af_core::atomic::write(ctx.dir.join("set-aside.tsv"), tsv.as_bytes())?;
    let by_check: Vec<String> = summary
        .by_check
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let line = format!(
        "could be right: {} of {} endings set aside ({}; {} more kept so that every item has k = {k}){}",
        summary.set_aside,
        summary.checked,
        if by_check.is_empty() { "none".into() } else { by_check.join(", ") },
        summary.kept_for_k,
        summary.scorer_heldout_pairwise.map_or(String::new(), |p| format!(
            "; the right-answer scorer ranks a gold above another video's ending {:.0}% of the time, held out",
            100.0 * p
        ))
    );
    Ok(Some(SourceSummary {
        json: serde_json::to_value(&summary)?,
        line,
    }))
}

/// The scorer's features of (context, second sentence) pairs: both vectors, their product and
/// their absolute difference.
fn features(context: &Tensor, second: &Tensor) -> Tensor {
    Tensor::cat(
        &[
            context,
            second,
            &(context * second),
            &(context - second).abs(),
        ],
        1,
    )
}

/// The sentence vectors the scorers read (unit rows, f32 on the CPU): every item's context and
/// gold second sentence (the questions first), `NEGATIVES` other videos' endings per item after
/// its noun phrase, and the questions' candidates with the question each belongs to.
struct Vectors<'a> {
    contexts: &'a Tensor,
    golds: &'a Tensor,
    negatives: &'a Tensor,
    candidates: &'a Tensor,
    owner: &'a Tensor,
}

/// Per candidate, the right-answer score under the scorer of its question's fold (trained on
/// every item of the run outside that fold); per question, the bar a candidate is set aside at:
/// its own gold's score, or a typical gold's (the median over the fold's items) where that is
/// higher, so that an item whose gold reads as unlikely does not lose every ending; and the
/// scorers' held-out pairwise accuracy.
fn scorer_scores(
    all: &[Item],
    questions: &[&Item],
    v: &Vectors,
    ctx: &SourceContext,
) -> anyhow::Result<(Vec<f32>, Vec<f32>, f64)> {
    let seed = ctx.config.run.seed;
    let Vectors {
        contexts,
        golds,
        negatives,
        candidates,
        owner,
    } = *v;
    let q_context = contexts.narrow(0, 0, questions.len() as i64);
    let q_gold = golds.narrow(0, 0, questions.len() as i64);
    let mut scores = vec![0f32; candidates.size()[0] as usize];
    let mut gold_scores = vec![0f32; questions.len()];
    let (mut right, mut pairs) = (0usize, 0usize);
    let mut folds: Vec<u32> = questions.iter().map(|q| q.fold).collect();
    folds.sort_unstable();
    folds.dedup();
    for fold in folds {
        let train: Vec<i64> = (0..all.len() as i64)
            .filter(|&i| all[i as usize].fold != fold)
            .collect();
        anyhow::ensure!(
            !train.is_empty(),
            "[generate] could-be-right = [\"scorer\"] trains on the other folds' items, and fold {fold} is the only one: set [pairs] folds to 2 or more"
        );
        let neg: Vec<i64> = train
            .iter()
            .flat_map(|&i| (0..NEGATIVES as i64).map(move |k| i * NEGATIVES as i64 + k))
            .collect();
        let train_t = Tensor::from_slice(&train);
        let repeated = train_t.repeat_interleave_self_int(NEGATIVES as i64, 0, None);
        let x = Tensor::cat(
            &[
                features(
                    &contexts.index_select(0, &train_t),
                    &golds.index_select(0, &train_t),
                ),
                features(
                    &contexts.index_select(0, &repeated),
                    &negatives.index_select(0, &Tensor::from_slice(&neg)),
                ),
            ],
            0,
        )
        .to_device(ctx.device);
        let y = Tensor::cat(
            &[
                Tensor::ones([train.len() as i64], (Kind::Float, Device::Cpu)),
                Tensor::zeros([neg.len() as i64], (Kind::Float, Device::Cpu)),
            ],
            0,
        )
        .to_device(ctx.device);
        let weight = Tensor::cat(
            &[
                Tensor::full(
                    [train.len() as i64],
                    NEGATIVES as f64,
                    (Kind::Float, Device::Cpu),
                ),
                Tensor::ones([neg.len() as i64], (Kind::Float, Device::Cpu)),
            ],
            0,
        )
        .to_device(ctx.device);
        tch::manual_seed((seed ^ u64::from(fold)) as i64);
        let vs = nn::VarStore::new(ctx.device);
        let linear = nn::linear(vs.root(), x.size()[1], 1, Default::default());
        let mut opt = nn::Adam {
            wd: 1e-4,
            ..Default::default()
        }
        .build(&vs, 1e-2)?;
        for _ in 0..STEPS {
            let logits = x.apply(&linear).squeeze_dim(1);
            let loss = logits.binary_cross_entropy_with_logits::<&Tensor>(
                &y,
                Some(&weight),
                None,
                tch::Reduction::Mean,
            );
            opt.backward_step(&loss);
        }
        let _guard = tch::no_grad_guard();
        let score = |c: &Tensor, s: &Tensor| -> anyhow::Result<Vec<f32>> {
            let out = features(c, s)
                .to_device(ctx.device)
                .apply(&linear)
                .squeeze_dim(1);
            Ok(Vec::<f32>::try_from(out.to_device(Device::Cpu))?)
        };
        // This fold's questions: their golds, their candidates, and one pair for the accuracy.
        let members: Vec<i64> = (0..questions.len() as i64)
            .filter(|&q| questions[q as usize].fold == fold)
            .collect();
        let m = Tensor::from_slice(&members);
        let gold = score(&q_context.index_select(0, &m), &q_gold.index_select(0, &m))?;
        let other: Vec<i64> = members.iter().map(|&q| q * NEGATIVES as i64).collect();
        let against = score(
            &q_context.index_select(0, &m),
            &negatives.index_select(0, &Tensor::from_slice(&other)),
        )?;
        // A typical gold: the median score of every held-out item's gold (this fold's items).
        let heldout = Tensor::from_slice(
            &(0..all.len() as i64)
                .filter(|&i| all[i as usize].fold == fold)
                .collect::<Vec<_>>(),
        );
        let mut typical = score(
            &contexts.index_select(0, &heldout),
            &golds.index_select(0, &heldout),
        )?;
        typical.sort_by(f32::total_cmp);
        let median = typical[typical.len() / 2];
        for ((&q, g), a) in members.iter().zip(&gold).zip(&against) {
            gold_scores[q as usize] = g.max(median);
            right += usize::from(g > a);
            pairs += 1;
        }
        let rows: Vec<i64> = Vec::<i64>::try_from(owner.shallow_clone())?
            .iter()
            .enumerate()
            .filter(|(_, &q)| questions[q as usize].fold == fold)
            .map(|(r, _)| r as i64)
            .collect();
        if !rows.is_empty() {
            let r = Tensor::from_slice(&rows);
            let c = score(
                &contexts.index_select(0, &owner.index_select(0, &r)),
                &candidates.index_select(0, &r),
            )?;
            for (&row, s) in rows.iter().zip(c) {
                scores[row as usize] = s;
            }
        }
    }
    Ok((scores, gold_scores, right as f64 / pairs.max(1) as f64))
}
