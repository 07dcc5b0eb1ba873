//! `borrowed` (`[generate] borrowed-endings`, `borrowed-agree`): other items' gold endings, after
//! the item's own options. Fluent by construction, at a measured risk of a second right answer.
//! `generate/borrowed.tsv` says whose gold each one is.

use std::collections::{HashMap, HashSet};

use af_core::config::GenerateConfig;
use af_core::Item;
use rand::Rng;

use super::{Ending, EndingSource, Items, SourceContext};
use crate::progress::Bar;
use crate::stages::generate::{item_rng, Validity};

pub const NAME: &str = "borrowed";

pub struct Borrowed;

impl EndingSource for Borrowed {
    fn name(&self) -> &'static str {
        NAME
    }

    fn enabled(&self, g: &GenerateConfig) -> bool {
        g.borrowed_endings > 0
    }

    fn endings(
        &mut self,
        items: &Items,
        so_far: &[Vec<Ending>],
        ctx: &SourceContext,
        _bar: &dyn Bar,
    ) -> anyhow::Result<Vec<Vec<Ending>>> {
        let g = &ctx.config.generate;
        let borrowed = borrowed_endings(
            ctx.all,
            items.items.len(),
            g.borrowed_endings,
            g.borrowed_agree,
            ctx.config.run.seed,
            ctx.validity,
        );
        // Where each borrowed ending came from, for the reader who wants to check one.
        let mut tsv = String::from("item_index\titem_id\tcandidate\tsource_index\tsource_id\n");
        for (((index, item), endings), before) in items.items.iter().zip(&borrowed).zip(so_far) {
            for (j, (source, _)) in endings.iter().enumerate() {
                tsv.push_str(&format!(
                    "{index}\t{}\t{}\t{source}\t{}\n",
                    item.id,
                    before.len() + j + 1,
                    ctx.all[*source].id
                ));
            }
        }
        af_core::atomic::write(ctx.dir.join("borrowed.tsv"), tsv.as_bytes())?;
        Ok(borrowed
            .into_iter()
            .map(|endings| endings.into_iter().map(|(_, e)| Ending::text(e)).collect())
            .collect())
    }
}

/// Borrowed endings (`[generate] borrowed-endings`): for each of the first `questions` items, up to `n`
/// gold endings of other items, as (source item's index, ending). A source is of the item's fold,
/// so the LM that scores the item never trained on it, as it never trained on the gold; of
/// another group, so it is not the next sentence of the same video; and, while there are such
/// items, past the questions, so it is not another question's right answer. Drawn with the
/// item's own random stream; the `[generate] reject` rules apply as to sampled endings. With
/// `agree`, a source's ending begins as the item's gold does (`validity::onset`).
pub(crate) fn borrowed_endings(
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
                if validity.rejects(&candidate.ending, &gold) {
                    continue;
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

#[cfg(test)]
mod tests {
    use af_core::ValidityRule;
    use af_text::Tagger;

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
        let validity = Validity::for_tests(&tagger, &reject);
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
        let validity = Validity::for_tests(&tagger, &[]);
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
}
