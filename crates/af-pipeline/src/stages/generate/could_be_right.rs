//! `[generate] could-be-right`: endings that could be right answers, set aside before the pool is
//! written. AF keeps what looks like the gold, so a fluent writer's second right answers are what
//! it prefers; these checks take them out first. `similar`: the pretrained sentence encoder
//! places the ending as near the gold ending as a paraphrase (cosine at least
//! `could-be-right-similarity`; the endings alone, since a long shared noun phrase would make any
//! two second sentences alike).
//!
//! A second check was built and measured, and not kept: a right-answer scorer (a logistic
//! regression on the encoder's vectors of the context and the second sentence, trained on the
//! run's golds against other videos' endings). Blind reads found the endings it set aside no more
//! often could-be-right than those it kept (docs/notebook/2026-12-05-could-be-right.md).
//!
//! Endings set aside leave the item's pool (its pool is that much smaller; an item keeps at least
//! `[filter] k`, the flagged ones that passed their bar by least, counted) and are listed in
//! `generate/set-aside.tsv` with the check, their score and the bar it reached; the report counts
//! them per check and source. af's LM samples, which stream block by block, are not checked.

use std::collections::BTreeMap;

use af_core::config::CouldBeRight;
use af_core::Item;
use af_nn::encoder::{Encoder, EncoderOptions};
use anyhow::Context;
use serde::Serialize;
use tch::{Kind, Tensor};

use super::sources::{Ending, SourceContext, SourceSummary};

/// Its key in the report's `sources`.
pub const NAME: &str = "could-be-right";

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
    let unit = |texts: &[&str]| -> anyhow::Result<Tensor> { Ok(encoder.encode(texts)?) };
    let golds = unit(
        &questions
            .iter()
            .map(|q| q.ending.as_str())
            .collect::<Vec<_>>(),
    )?;
    let texts: Vec<&str> = endings
        .iter()
        .flat_map(|es| es.iter().map(|e| e.text.as_str()))
        .collect();
    let candidates = unit(&texts)?;
    let owner: Vec<i64> = endings
        .iter()
        .enumerate()
        .flat_map(|(q, es)| std::iter::repeat_n(q as i64, es.len()))
        .collect();

    let mut flags: Vec<Option<(CouldBeRight, f32, f32)>> = vec![None; texts.len()];
    if g.could_be_right.contains(&CouldBeRight::Similar) && !texts.is_empty() {
        let cos = (&candidates * golds.index_select(0, &Tensor::from_slice(&owner)))
            .sum_dim_intlist(1, false, Kind::Float);
        let bar = g.could_be_right_similarity as f32;
        for (flag, c) in flags.iter_mut().zip(Vec::<f32>::try_from(cos)?) {
            if c >= bar {
                *flag = Some((CouldBeRight::Similar, c, bar));
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
        "could be right: {} of {} endings set aside ({}; {} more kept so that every item has k = {k})",
        summary.set_aside,
        summary.checked,
        if by_check.is_empty() { "none".into() } else { by_check.join(", ") },
        summary.kept_for_k,
    );
    Ok(Some(SourceSummary {
        json: serde_json::to_value(&summary)?,
        line,
    }))
}
