//! `shared` (`[generate] shared-endings`): endings the pretrained generator wrote for other
//! items, joined to this item's pool. They cost no draw: a pool of 8 written endings per item
//! grows to 8 + N candidates for the price of 8. An ending is shared only when it begins as
//! this item's gold does (the verb form or word class that follows the noun phrase,
//! af-text's `validity::onset`), so that it reads on after this item's subject; only from an
//! item of another group (another video: it was written for a different scene, so it is less
//! often a second right answer than the item's own endings); and only when it passes the
//! `[generate] reject` rules against this item's gold. With `shared-topic = "encoder"` (the
//! default) it must also belong to this item's scene: the pretrained sentence encoder places it
//! at least as near the item's context as the nearer half of the item's own written endings.
//! An item the bar leaves short of `[filter] k` candidates takes the nearest agreeing endings
//! below it, then the nearest of any onset (never below k, as decision 472 keeps could-be-right
//! endings: AF cannot build a question from fewer). `generate/shared.tsv` says whose each is,
//! how near, and which were such fills.

use std::collections::{HashMap, HashSet};

use af_core::config::{GenerateConfig, SharedTopic};
use af_core::Item;
use af_nn::encoder::Encoder;
use rand::seq::SliceRandom;
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
    /// Endings taken to bring an item up to `[filter] k` candidates: agreeing ones below its
    /// scene's floor, then ones of another onset; and the items still short after both.
    filled_below_floor: usize,
    filled_other_onset: usize,
    items_short_of_k: usize,
    /// With the topic check: the encoder that read the scenes, and the mean over items of the
    /// endings that passed it (from other videos, before the repeat and reject checks) and of the floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    topic: Option<TopicSummary>,
}

#[derive(Clone, Debug, Serialize)]
struct TopicSummary {
    encoder: std::path::PathBuf,
    mean_passing: f64,
    mean_floor: f64,
    /// Items with no written ending of their own, so no floor: nothing is shared with them.
    items_without_floor: usize,
}

impl EndingSource for Shared {
    fn name(&self) -> &'static str {
        NAME
    }

    fn enabled(&self, g: &GenerateConfig) -> bool {
        g.shared_endings > 0
    }

    fn check(&self, config: &af_core::Config) -> anyhow::Result<()> {
        if config.generate.shared_topic == SharedTopic::Encoder {
            crate::stages::generate::encoder_dir("shared-topic")?;
        }
        Ok(())
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
        let (topic, encoder) = match g.shared_topic {
            SharedTopic::Off => (None, None),
            SharedTopic::Encoder => {
                let (encoder, dir) =
                    crate::stages::generate::load_encoder("shared-topic", ctx.device)?;
                (
                    Some(Topic::encode(&encoder, &questions, so_far)?),
                    Some(dir),
                )
            }
        };
        let at_least = crate::stages::generate::candidates_before_sampling(ctx.config);
        let picked = shared_endings(
            &questions,
            so_far,
            g.shared_endings,
            at_least,
            ctx.config.run.seed,
            ctx.validity,
            topic.as_ref(),
        );
        let mut tsv = String::from(
            "item_index\titem_id\tcandidate\tsource_item_id\ttopic_similarity\ttopic_floor\tfill\n",
        );
        let cell = |x: Option<f32>| x.map(|x| format!("{x:.4}")).unwrap_or_default();
        for (((index, item), endings), before) in
            items.items.iter().zip(&picked.endings).zip(so_far)
        {
            for (j, e) in endings.iter().enumerate() {
                tsv.push_str(&format!(
                    "{index}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                    item.id,
                    before.len() + j + 1,
                    questions[e.donor].id,
                    cell(e.similarity),
                    cell(e.floor),
                    e.fill.map_or("", Fill::name),
                ));
            }
        }
        af_core::atomic::write(ctx.dir.join("shared.tsv"), tsv.as_bytes())?;
        let shared = picked.endings;
        let floors: Vec<f32> = picked.floors.iter().flatten().copied().collect();
        let filled = |fill: Fill| {
            shared
                .iter()
                .flatten()
                .filter(|e| e.fill == Some(fill))
                .count()
        };
        self.summary = Some(SharedSummary {
            endings: shared.iter().map(Vec::len).sum(),
            endings_wanted: g.shared_endings,
            items_short: shared.iter().filter(|e| e.len() < g.shared_endings).count(),
            donors: so_far
                .iter()
                .flatten()
                .filter(|e| e.origin == pretrained::NAME)
                .count(),
            filled_below_floor: filled(Fill::BelowFloor),
            filled_other_onset: filled(Fill::OtherOnset),
            items_short_of_k: shared
                .iter()
                .zip(so_far)
                .filter(|(e, before)| before.len() + e.len() < at_least)
                .count(),
            topic: encoder.map(|encoder| TopicSummary {
                encoder,
                mean_passing: picked.passing.iter().sum::<usize>() as f64
                    / picked.passing.len().max(1) as f64,
                mean_floor: floors.iter().map(|&f| f64::from(f)).sum::<f64>()
                    / floors.len().max(1) as f64,
                items_without_floor: picked.floors.len() - floors.len(),
            }),
        });
        Ok(shared
            .into_iter()
            .map(|endings| endings.into_iter().map(|e| Ending::text(e.text)).collect())
            .collect())
    }

    fn summary(&self) -> Option<SourceSummary> {
        let s = self.summary.as_ref()?;
        Some(SourceSummary {
            json: serde_json::to_value(s).expect("a plain struct"),
            line: format!(
                "and {} endings shared from other items' pretrained ones ({} items short of {}; {} to share{}{})",
                s.endings,
                s.items_short,
                s.endings_wanted,
                s.donors,
                s.topic.as_ref().map_or(String::new(), |t| format!(
                    "; {:.1} per item near enough to its scene",
                    t.mean_passing
                )),
                if s.filled_below_floor + s.filled_other_onset + s.items_short_of_k > 0 {
                    format!(
                        "; to reach [filter] k: {} below the scene's floor, {} of another onset, {} items still short",
                        s.filled_below_floor, s.filled_other_onset, s.items_short_of_k
                    )
                } else {
                    String::new()
                }
            ),
        })
    }
}

/// Every written ending there is to share, as (its question's position, its text), in the order
/// of `so_far`: the donors [`shared_endings`] and [`Topic`] index alike.
fn written_endings(so_far: &[Vec<Ending>]) -> Vec<(usize, &str)> {
    so_far
        .iter()
        .enumerate()
        .flat_map(|(j, endings)| {
            endings
                .iter()
                .filter(|e| e.origin == pretrained::NAME)
                .map(move |e| (j, e.text.as_str()))
        })
        .collect()
}

/// Unit vectors of each question's context and of each written ending ([`written_endings`]'s
/// order): how near an ending is to a scene is their dot product.
pub(crate) struct Topic {
    dim: usize,
    contexts: Vec<f32>,
    endings: Vec<f32>,
}

impl Topic {
    fn encode(
        encoder: &Encoder,
        questions: &[&Item],
        so_far: &[Vec<Ending>],
    ) -> anyhow::Result<Self> {
        let contexts: Vec<&str> = questions.iter().map(|q| q.context.as_str()).collect();
        let endings: Vec<&str> = written_endings(so_far).iter().map(|(_, t)| *t).collect();
        let flat = |t: tch::Tensor| -> anyhow::Result<Vec<f32>> {
            Ok(Vec::<f32>::try_from(t.flatten(0, -1))?)
        };
        Ok(Self {
            dim: encoder.dim(),
            contexts: flat(encoder.encode(&contexts)?)?,
            endings: flat(encoder.encode(&endings)?)?,
        })
    }

    fn similarity(&self, question: usize, ending: usize) -> f32 {
        let (c, e) = (
            &self.contexts[question * self.dim..(question + 1) * self.dim],
            &self.endings[ending * self.dim..(ending + 1) * self.dim],
        );
        c.iter().zip(e).map(|(a, b)| a * b).sum()
    }
}

/// One shared ending: whose it was, its text, and with the topic check how near it is to this
/// item's scene and the floor it passed.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SharedEnding {
    pub donor: usize,
    pub text: String,
    pub similarity: Option<f32>,
    pub floor: Option<f32>,
    /// Set when it was taken only to bring the item up to `[filter] k` candidates.
    pub fill: Option<Fill>,
}

/// Why a shared ending that fails the usual bar was taken: the item was short of `[filter] k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    /// It agrees with the item's gold, but is further from the scene than the floor.
    BelowFloor,
    /// It begins otherwise than the item's gold (no agreeing ending was left).
    OtherOnset,
}

impl Fill {
    fn name(self) -> &'static str {
        match self {
            Fill::BelowFloor => "below-floor",
            Fill::OtherOnset => "other-onset",
        }
    }
}

/// What [`shared_endings`] chose, per question.
#[derive(Debug, PartialEq)]
pub(crate) struct Picked {
    pub endings: Vec<Vec<SharedEnding>>,
    /// With the topic check: the upper median of the similarities of the question's own written
    /// endings to its context (`None`: it has none, and shares nothing).
    pub floors: Vec<Option<f32>>,
    /// Endings of other videos that agree and are near enough to the scene, before the repeat and
    /// reject checks (with the topic check; without it, every ending that agrees).
    pub passing: Vec<usize>,
}

/// For each question, up to `n` endings the pretrained source wrote for other questions
/// (`so_far[j]`'s endings of origin `pretrained`): of another group, beginning as the question's
/// gold does, new to its pool, passing the reject rules against its gold, and with `topic` no
/// further from its context than the nearer half of its own written endings (their upper
/// median's similarity: the least writing drifts far off the scene). Drawn with the
/// item's own random stream, so the same on every run. An item whose pool (`so_far` and these)
/// is still under `at_least` takes, nearest its scene first (in its random order without
/// `topic`), agreeing endings the bar turned away, then endings of any onset, until it is not.
#[allow(clippy::too_many_arguments)]
pub(crate) fn shared_endings(
    questions: &[&Item],
    so_far: &[Vec<Ending>],
    n: usize,
    at_least: usize,
    seed: u64,
    validity: &Validity,
    topic: Option<&Topic>,
) -> Picked {
    use rayon::prelude::*;
    let onset = |text: &str| {
        af_text::validity::onset(&validity.tagger.tag(&af_text::tokenize_lowercase(text)))
    };
    let donors = written_endings(so_far);
    let onsets: Vec<Option<String>> = donors.par_iter().map(|(_, t)| onset(t)).collect();
    let mut by_onset: HashMap<&Option<String>, Vec<usize>> = HashMap::new();
    let mut own: Vec<Vec<usize>> = vec![Vec::new(); so_far.len()];
    for (d, o) in onsets.iter().enumerate() {
        by_onset.entry(o).or_default().push(d);
        own[donors[d].0].push(d);
    }
    let none = Vec::new();
    let chosen: Vec<(Vec<SharedEnding>, Option<f32>, usize)> = (0..questions
        .len()
        .min(so_far.len()))
        .into_par_iter()
        .map(|q| {
            let item = questions[q];
            let gold = af_text::tokenize_lowercase(&item.ending);
            let agree = by_onset.get(&onset(&item.ending)).unwrap_or(&none);
            let floor = topic.map(|t| {
                let mut near: Vec<f32> = own[q].iter().map(|&d| t.similarity(q, d)).collect();
                near.sort_by(f32::total_cmp);
                near.get(near.len() / 2).copied()
            });
            let candidates: Vec<usize> = match (topic, floor) {
                (Some(t), Some(Some(floor))) => agree
                    .iter()
                    .copied()
                    .filter(|&d| {
                        questions[donors[d].0].group != item.group && t.similarity(q, d) >= floor
                    })
                    .collect(),
                (Some(_), _) => Vec::new(),
                (None, _) => agree.clone(),
            };
            let floor = floor.flatten();
            let mut seen: HashSet<&str> = std::iter::once(item.ending.as_str())
                .chain(item.distractors.iter().map(String::as_str))
                .chain(so_far[q].iter().map(|e| e.text.as_str()))
                .collect();
            let mut rng = item_rng(seed ^ 0x7368_6172_6564, q, 0);
            let mut out = Vec::new();
            // Donor ending `d` joins the pool unless it is of the item's own video, already there
            // or turned away by the reject rules.
            let mut take = |d: usize, fill: Option<Fill>, out: &mut Vec<SharedEnding>| {
                let (donor, text) = donors[d];
                if questions[donor].group == item.group
                    || !seen.insert(text)
                    || validity.rejects(text, &gold)
                {
                    return;
                }
                out.push(SharedEnding {
                    donor,
                    text: text.to_string(),
                    similarity: topic.map(|t| t.similarity(q, d)),
                    floor,
                    fill,
                });
            };
            // Enough tries to fill from a few hundred donors; bounded where few agree.
            for _ in 0..n * 20 {
                if out.len() == n || candidates.is_empty() {
                    break;
                }
                take(
                    candidates[rng.random_range(0..candidates.len())],
                    None,
                    &mut out,
                );
            }
            if so_far[q].len() + out.len() < at_least {
                let taken: HashSet<usize> = candidates.iter().copied().collect();
                let agreeing: HashSet<usize> = agree.iter().copied().collect();
                let mut below: Vec<usize> = agree
                    .iter()
                    .copied()
                    .filter(|d| !taken.contains(d))
                    .collect();
                let mut other: Vec<usize> = (0..donors.len())
                    .filter(|d| !agreeing.contains(d))
                    .collect();
                for (tier, fill) in [
                    (&mut below, Fill::BelowFloor),
                    (&mut other, Fill::OtherOnset),
                ] {
                    match topic {
                        Some(t) => {
                            tier.sort_by(|&a, &b| t.similarity(q, b).total_cmp(&t.similarity(q, a)))
                        }
                        None => tier.shuffle(&mut rng),
                    }
                    for &d in tier.iter() {
                        if so_far[q].len() + out.len() >= at_least {
                            break;
                        }
                        take(d, Some(fill), &mut out);
                    }
                }
            }
            (out, floor, candidates.len())
        })
        .collect();
    let mut picked = Picked {
        endings: Vec::new(),
        floors: Vec::new(),
        passing: Vec::new(),
    };
    for (endings, floor, passing) in chosen {
        picked.endings.push(endings);
        picked.floors.push(floor);
        picked.passing.push(passing);
    }
    picked
}

#[cfg(test)]
mod tests {
    use af_core::ValidityRule;
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
        let validity = Validity::for_tests(&tagger, &reject);
        let onset =
            |e: &str| af_text::validity::onset(&tagger.tag(&af_text::tokenize_lowercase(e)));
        assert_ne!(
            onset(golds[0]),
            onset(golds[1]),
            "the tagger tells them apart"
        );
        let refs: Vec<&Item> = items.iter().collect();
        let picked = shared_endings(&refs, &so_far, 4, 0, 7, &validity, None);
        let shared = &picked.endings;
        assert_eq!(shared.len(), items.len());
        assert!(picked.floors.iter().all(Option::is_none));
        for (q, endings) in shared.iter().enumerate() {
            assert_eq!(endings.len(), 4, "item {q}: {endings:?}");
            let texts: HashSet<&str> = endings.iter().map(|e| e.text.as_str()).collect();
            assert_eq!(texts.len(), 4, "no repeats: {endings:?}");
            for SharedEnding {
                donor,
                text: e,
                similarity,
                ..
            } in endings
            {
                assert_eq!(*similarity, None);
                assert_ne!(items[*donor].group, items[q].group, "{e}");
                assert_eq!(onset(e), onset(&items[q].ending), "item {q} got {e}");
                assert!(!e.contains("book"), "a borrowed ending is not shared: {e}");
                assert!(!e.contains("ladder"), "the length-gap rule turns it away");
                assert!(so_far[*donor].iter().any(|w| &w.text == e));
            }
        }
        assert_eq!(
            picked,
            shared_endings(&refs, &so_far, 4, 0, 7, &validity, None)
        );
        assert_ne!(
            picked,
            shared_endings(&refs, &so_far, 4, 0, 8, &validity, None)
        );
        // With nothing written, nothing to share.
        let empty: Vec<Vec<Ending>> = vec![Vec::new(); items.len()];
        assert!(shared_endings(&refs, &empty, 4, 0, 7, &validity, None)
            .endings
            .iter()
            .all(Vec::is_empty));
    }

    /// `n` items of `n` videos, every gold "walks the dog .".
    fn dog_walkers(n: usize) -> Vec<Item> {
        (0..n)
            .map(|i| item(i, &format!("g{i}"), "walks the dog ."))
            .collect()
    }

    /// Scenes and endings as unit vectors in the plane, at angles in degrees (question `i`'s
    /// context at `scene(i)`, its `k`th written ending at `ending(i, k)`): nearness is the cosine
    /// of the angle between them.
    fn topic_in_the_plane(
        scene: impl Fn(usize) -> f32,
        so_far: &[Vec<Ending>],
        ending: impl Fn(usize, usize) -> f32,
    ) -> Topic {
        let unit = |deg: f32| [deg.to_radians().cos(), deg.to_radians().sin()];
        let ending = &ending;
        Topic {
            dim: 2,
            contexts: (0..so_far.len()).flat_map(|i| unit(scene(i))).collect(),
            endings: so_far
                .iter()
                .enumerate()
                .flat_map(|(i, written)| (0..written.len()).flat_map(move |k| unit(ending(i, k))))
                .collect(),
        }
    }

    /// An item the topic bar leaves short of `at_least` candidates takes agreeing endings below
    /// the bar, nearest its scene first, then endings of another onset; items the bar does not
    /// leave short get exactly what they got without the rule.
    #[test]
    fn an_item_short_of_k_is_filled_nearest_first_agreeing_before_other_onsets() {
        // Items 0-9 scene A (0 degrees), item 10 alone in scene B (180); all golds "walks the dog".
        let items = dog_walkers(11);
        let mut so_far: Vec<Vec<Ending>> = (0..11)
            .map(|i| {
                vec![written(
                    &format!("walks to park number {i} ."),
                    pretrained::NAME,
                )]
            })
            .collect();
        // Two endings of another onset (a noun first), on scene A and nearer B than any other.
        so_far[0].push(written("dog barks at number zero .", pretrained::NAME));
        so_far[1].push(written("dog barks at number one .", pretrained::NAME));
        // Item 10's own ending sits on scene B; scene A's endings are 10 degrees off A, except
        // item 9's, at 100 (the nearest agreeing one to B), and the other-onset ones at 60 and 120.
        let angle = |i: usize, k: usize| match (i, k) {
            (10, _) => 180f32,
            (9, _) => 100.0,
            (0, 1) => 60.0,
            (1, 1) => 120.0,
            _ => 10.0,
        };
        let topic = topic_in_the_plane(|i| if i == 10 { 180.0 } else { 0.0 }, &so_far, angle);
        let tagger = Tagger::builtin();
        let validity = Validity::for_tests(&tagger, &[]);
        let refs: Vec<&Item> = items.iter().collect();
        let plain = shared_endings(&refs, &so_far, 3, 0, 5, &validity, Some(&topic));
        assert!(
            plain.endings[10].is_empty(),
            "nothing is as near B as its own"
        );
        // Item 10 needs 12 candidates: 1 of its own, the 10 agreeing others, 1 of another onset.
        let filled = shared_endings(&refs, &so_far, 3, 12, 5, &validity, Some(&topic));
        let got = &filled.endings[10];
        assert_eq!(got.len(), 11, "{got:?}");
        assert!(got[..10].iter().all(|e| e.fill == Some(Fill::BelowFloor)));
        assert_eq!(got[0].text, "walks to park number 9 .", "nearest first");
        assert_eq!(got[10].fill, Some(Fill::OtherOnset));
        assert_eq!(
            got[10].text, "dog barks at number one .",
            "the nearer of the two"
        );
        // Scene A's items are short of 12 too (1-2 of their own, 3 shared): filled after what
        // they got without the rule, which stays as it was.
        for q in 0..10 {
            assert_eq!(
                filled.endings[q][..plain.endings[q].len()],
                plain.endings[q][..],
                "item {q}"
            );
            assert!(filled.endings[q][plain.endings[q].len()..]
                .iter()
                .all(|e| e.fill.is_some()));
        }
    }

    /// With the topic check, an item gets only endings at least as near its context as the nearer
    /// half of its own written endings; an item with none of its own gets nothing.
    #[test]
    fn the_topic_check_keeps_endings_no_further_from_the_scene_than_the_items_own() {
        // Two scenes in the plane: items 0-5 are at angle 0, items 6-11 at 180 degrees.
        let items = dog_walkers(12);
        // Each item wrote two endings: one on its scene (10 degrees off it), one drifting (50).
        let mut so_far: Vec<Vec<Ending>> = (0..12)
            .map(|i| {
                vec![
                    written(&format!("walks to park number {i} ."), pretrained::NAME),
                    written(&format!("walks to lake number {i} ."), pretrained::NAME),
                ]
            })
            .collect();
        so_far[11].clear();
        let scene = |i: usize| if i < 6 { 0f32 } else { 180f32 };
        let topic = topic_in_the_plane(scene, &so_far, |i, k| {
            scene(i) + if k == 0 { 10.0 } else { 50.0 }
        });
        let tagger = Tagger::builtin();
        let validity = Validity::for_tests(&tagger, &[]);
        let refs: Vec<&Item> = items.iter().collect();
        let picked = shared_endings(&refs, &so_far, 20, 0, 3, &validity, Some(&topic));
        for q in 0..12 {
            if q == 11 {
                assert_eq!(picked.floors[q], None);
                assert!(picked.endings[q].is_empty());
                continue;
            }
            let floor = picked.floors[q].expect("it wrote endings");
            assert!((floor - 10f32.to_radians().cos()).abs() < 1e-5, "{floor}");
            // Its scene's other items' near endings pass (10 degrees), their drifting ones (50) and
            // the other scene's (130 degrees at best) do not. Item 11 wrote none.
            let same_scene = if q < 6 { 5 } else { 4 };
            assert_eq!(picked.passing[q], same_scene, "item {q}");
            assert_eq!(picked.endings[q].len(), same_scene, "item {q}");
            for e in &picked.endings[q] {
                assert_eq!(scene(e.donor), scene(q), "item {q} got {}", e.text);
                assert!(e.similarity.unwrap() >= floor);
                assert_eq!(e.floor, Some(floor));
            }
        }
    }
}
