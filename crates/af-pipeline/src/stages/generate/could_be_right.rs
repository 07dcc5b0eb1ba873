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
    let (encoder, dir) = super::load_encoder("could-be-right", ctx.device)?;
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

    let mut flags: Vec<Flag> = vec![None; texts.len()];
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

    // Every item keeps enough endings for AF's questions.
    let keep = super::candidates_before_sampling(ctx.config);
    let sizes: Vec<usize> = endings.iter().map(Vec::len).collect();
    let kept_for_k = keep_at_least(&mut flags, &sizes, keep);
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
        "could be right: {} of {} endings set aside ({}; {} more kept so that every item keeps {keep} for AF's questions)",
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

/// A check's verdict on one ending: which check, its score and the bar it reached.
type Flag = Option<(CouldBeRight, f32, f32)>;

/// Unflags, item by item (`sizes[i]` consecutive rows of `flags`), the flagged endings that passed
/// their bar by least, until the item keeps `keep` endings or has none flagged left; returns how
/// many were unflagged.
fn keep_at_least(flags: &mut [Flag], sizes: &[usize], keep: usize) -> usize {
    let mut unflagged = 0;
    let mut first = 0;
    for &size in sizes {
        let rows = first..first + size;
        first += size;
        let mut flagged: Vec<usize> = rows.filter(|&r| flags[r].is_some()).collect();
        let short = keep.saturating_sub(size - flagged.len()).min(flagged.len());
        let margin = |r: usize| flags[r].map_or(0.0, |(_, score, bar)| score - bar);
        flagged.sort_by(|&a, &b| margin(a).total_cmp(&margin(b)).then(a.cmp(&b)));
        for &r in &flagged[..short] {
            flags[r] = None;
            unflagged += 1;
        }
    }
    unflagged
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An item short of `keep` gets back its flagged endings that passed their bar by least;
    /// one with enough, or with nothing flagged, is left as it is.
    #[test]
    fn items_keep_enough_endings_the_least_flagged_first() {
        let flag = |margin: f32| Some((CouldBeRight::Similar, 0.8 + margin, 0.8));
        let mut flags = vec![
            // Item 0: one kept, three flagged by margins 0.3, 0.1, 0.2.
            None,
            flag(0.3),
            flag(0.1),
            flag(0.2),
            // Item 1: both flagged, by 0.05 and 0.01.
            flag(0.05),
            flag(0.01),
            // Item 2: nothing flagged.
            None,
            None,
            None,
            // Item 3: three kept, one flagged.
            None,
            None,
            None,
            flag(0.4),
        ];
        let unflagged = keep_at_least(&mut flags, &[4, 2, 3, 4], 2);
        assert_eq!(unflagged, 3);
        let kept: Vec<bool> = flags.iter().map(Option::is_none).collect();
        assert_eq!(
            kept,
            [
                true, false, true, false, // the 0.1 one is back
                true, true, // both back: the item has only two
                true, true, true, //
                true, true, true, false, // enough already
            ]
        );
        // Nothing to keep: nothing unflagged.
        let mut again = flags.clone();
        assert_eq!(keep_at_least(&mut again, &[4, 2, 3, 4], 0), 0);
        assert_eq!(again, flags);
    }
}
