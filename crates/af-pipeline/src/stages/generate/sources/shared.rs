//! `shared` (`[generate] shared-endings`): endings the pretrained generator wrote for other
//! items, joined to this item's pool. They cost no draw: a pool of 8 written endings per item
//! grows to 8 + N candidates for the price of 8. An ending is shared only when it begins as
//! this item's gold does (the verb form or word class that follows the noun phrase,
//! af-text's `validity::onset`), so that it reads on after this item's subject; only from an
//! item of another group (another video: it was written for a different scene, so it is less
//! often a second right answer than the item's own endings); and only when it passes the
//! `[generate] reject` rules against this item's gold. `generate/shared.tsv` says whose each is.

use std::collections::{HashMap, HashSet};

use af_core::config::GenerateConfig;
use af_core::Item;
use rand::Rng;
use serde::Serialize;

use super::{pretrained, Ending, EndingSource, Items, SourceContext, SourceSummary};
use crate::progress::Bar;
use crate::stages::generate::{item_rng, Validity};

pub const NAME: &str = "shared";

#[derive(Default)]
pub struct Shared {
    summary: Option<SharedSummary>,
}

/// What the report says of the shared endings.
#[derive(Clone, Debug, Serialize)]
struct SharedSummary {
    endings: usize,
    endings_wanted: usize,
    items_short: usize,
    /// The other items' written endings there were to share.
    donors: usize,
}

impl EndingSource for Shared {
    fn name(&self) -> &'static str {
        NAME
    }

    fn enabled(&self, g: &GenerateConfig) -> bool {
        g.shared_endings > 0
    }

    fn endings(
        &mut self,
        items: &Items,
        so_far: &[Vec<Ending>],
        ctx: &SourceContext,
        _bar: &dyn Bar,
    ) -> anyhow::Result<Vec<Vec<Ending>>> {
        let g = &ctx.config.generate;
        let questions: Vec<&Item> = items.items.iter().map(|(_, item)| *item).collect();
        let shared = shared_endings(
            &questions,
            so_far,
            g.shared_endings,
            ctx.config.run.seed,
            ctx.validity,
        );
        let mut tsv = String::from("item_index\titem_id\tcandidate\tsource_item_id\n");
        for (((index, item), endings), before) in items.items.iter().zip(&shared).zip(so_far) {
            for (j, (donor, _)) in endings.iter().enumerate() {
                tsv.push_str(&format!(
                    "{index}\t{}\t{}\t{}\n",
                    item.id,
                    before.len() + j + 1,
                    questions[*donor].id
                ));
            }
        }
        af_core::atomic::write(ctx.dir.join("shared.tsv"), tsv.as_bytes())?;
        self.summary = Some(SharedSummary {
            endings: shared.iter().map(Vec::len).sum(),
            endings_wanted: g.shared_endings,
            items_short: shared.iter().filter(|e| e.len() < g.shared_endings).count(),
            donors: so_far
                .iter()
                .flatten()
                .filter(|e| e.origin == pretrained::NAME)
                .count(),
        });
        Ok(shared
            .into_iter()
            .map(|endings| endings.into_iter().map(|(_, e)| Ending::text(e)).collect())
            .collect())
    }

    fn summary(&self) -> Option<SourceSummary> {
        let s = self.summary.as_ref()?;
        Some(SourceSummary {
            json: serde_json::to_value(s).expect("a plain struct"),
            line: format!(
                "and {} endings shared from other items' pretrained ones ({} items short of {}; {} to share)",
                s.endings, s.items_short, s.endings_wanted, s.donors
            ),
        })
    }
}

/// For each question, up to `n` endings the pretrained source wrote for other questions
/// (`so_far[j]`'s endings of origin `pretrained`), as (donor question's position, ending): of
/// another group, beginning as the question's gold does, new to its pool, and passing the reject
/// rules against its gold. Drawn with the item's own random stream, so the same on every run.
pub(crate) fn shared_endings(
    questions: &[&Item],
    so_far: &[Vec<Ending>],
    n: usize,
    seed: u64,
    validity: &Validity,
) -> Vec<Vec<(usize, String)>> {
    use rayon::prelude::*;
    let onset = |text: &str| {
        af_text::validity::onset(&validity.tagger.tag(&af_text::tokenize_lowercase(text)))
    };
    // Every written ending by its onset: (donor, text).
    let donors: Vec<(usize, &str)> = so_far
        .iter()
        .enumerate()
        .flat_map(|(j, endings)| {
            endings
                .iter()
                .filter(|e| e.origin == pretrained::NAME)
                .map(move |e| (j, e.text.as_str()))
        })
        .collect();
    let onsets: Vec<Option<String>> = donors.par_iter().map(|(_, t)| onset(t)).collect();
    let mut by_onset: HashMap<&Option<String>, Vec<usize>> = HashMap::new();
    for (d, o) in onsets.iter().enumerate() {
        by_onset.entry(o).or_default().push(d);
    }
    let none = Vec::new();
    (0..questions.len().min(so_far.len()))
        .into_par_iter()
        .map(|q| {
            let item = questions[q];
            let gold = af_text::tokenize_lowercase(&item.ending);
            let candidates = by_onset.get(&onset(&item.ending)).unwrap_or(&none);
            let mut seen: HashSet<&str> = std::iter::once(item.ending.as_str())
                .chain(item.distractors.iter().map(String::as_str))
                .chain(so_far[q].iter().map(|e| e.text.as_str()))
                .collect();
            let mut rng = item_rng(seed ^ 0x7368_6172_6564, q, 0);
            let mut out = Vec::new();
            // Enough tries to fill from a few hundred donors; bounded where few agree.
            for _ in 0..n * 20 {
                if out.len() == n || candidates.is_empty() {
                    break;
                }
                let (donor, text) = donors[candidates[rng.random_range(0..candidates.len())]];
                if questions[donor].group == item.group || !seen.insert(text) {
                    continue;
                }
                if validity.rejects(text, &gold) {
                    continue;
                }
                out.push((donor, text.to_string()));
            }
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use af_core::ValidityRule;
    use af_text::validity::ValidityRules;
    use af_text::Tagger;

    use super::*;

    fn item(i: usize, group: &str, ending: &str) -> Item {
        Item {
            id: format!("i{i}"),
            group: group.into(),
            fold: 0,
            context: "a man walks .".into(),
            noun_phrase: "he".into(),
            ending: ending.into(),
            context_tokens: 4,
            noun_phrase_tokens: 1,
            ending_tokens: ending.split(' ').count() as u32,
            distractors: Vec::new(),
        }
    }

    fn written(text: &str, origin: &'static str) -> Ending {
        Ending {
            origin,
            ..Ending::text(text)
        }
    }

    /// Shared endings are other groups' pretrained endings that begin as the item's gold does,
    /// never the item's own, a borrowed one, a repeat or one the reject rules turn away; the same
    /// on every run with one seed.
    #[test]
    fn shared_endings_are_other_videos_written_endings_that_agree() {
        let golds = ["walks the dog .", "run across the field ."];
        // Questions in groups of two; each wrote three endings of each form and borrowed one.
        let items: Vec<Item> = (0..20)
            .map(|i| item(i, &format!("g{}", i / 2), golds[i % 2]))
            .collect();
        let so_far: Vec<Vec<Ending>> = (0..20)
            .map(|i| {
                vec![
                    written(&format!("paints fence number {i} ."), pretrained::NAME),
                    written(&format!("rides horse number {i} ."), pretrained::NAME),
                    written(&format!("run into lake number {i} ."), pretrained::NAME),
                    written(
                        &format!("climbs a very tall ladder and keeps on climbing until roof number {i} ."),
                        pretrained::NAME,
                    ),
                    written(&format!("reads book number {i} ."), "borrowed"),
                ]
            })
            .collect();
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
        let onset =
            |e: &str| af_text::validity::onset(&tagger.tag(&af_text::tokenize_lowercase(e)));
        assert_ne!(
            onset(golds[0]),
            onset(golds[1]),
            "the tagger tells them apart"
        );
        let refs: Vec<&Item> = items.iter().collect();
        let shared = shared_endings(&refs, &so_far, 4, 7, &validity);
        assert_eq!(shared.len(), items.len());
        for (q, endings) in shared.iter().enumerate() {
            assert_eq!(endings.len(), 4, "item {q}: {endings:?}");
            let texts: HashSet<&str> = endings.iter().map(|(_, e)| e.as_str()).collect();
            assert_eq!(texts.len(), 4, "no repeats: {endings:?}");
            for (donor, e) in endings {
                assert_ne!(items[*donor].group, items[q].group, "{e}");
                assert_eq!(onset(e), onset(&items[q].ending), "item {q} got {e}");
                assert!(!e.contains("book"), "a borrowed ending is not shared: {e}");
                assert!(!e.contains("ladder"), "the length-gap rule turns it away");
                assert!(so_far[*donor].iter().any(|w| &w.text == e));
            }
        }
        assert_eq!(shared, shared_endings(&refs, &so_far, 4, 7, &validity));
        assert_ne!(shared, shared_endings(&refs, &so_far, 4, 8, &validity));
        // With nothing written, nothing to share.
        let empty: Vec<Vec<Ending>> = vec![Vec::new(); items.len()];
        assert!(shared_endings(&refs, &empty, 4, 7, &validity)
            .iter()
            .all(Vec::is_empty));
    }
}
