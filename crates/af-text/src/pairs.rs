//! `af pairs`: from documents to items. Consecutive sentences of one document make a pair
//! (context s, second sentence); the second sentence is split into noun phrase and ending; length
//! filters apply; every group gets a cross-fitting fold. Every dropped pair is counted by reason.

use std::collections::{BTreeMap, HashMap};

use af_core::{Document, Item};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::split::split_sentence;
use crate::tagger::Tagger;
use crate::tokenize::tokenize;

#[derive(Debug, Error)]
pub enum PairsError {
    #[error("duplicate item id `{id}`: from {first} and from {second} (are two inputs sharing group ids?)")]
    DuplicateId {
        id: String,
        first: String,
        second: String,
    },
}

#[derive(Clone, Debug)]
pub struct PairOptions {
    pub folds: u32,
    pub min_context_tokens: u32,
    pub max_context_tokens: u32,
    pub min_ending_tokens: u32,
    pub max_ending_tokens: u32,
    pub adverbs: crate::split::AdverbSide,
    pub seed: u64,
}

impl From<(&af_core::config::PairsConfig, u64)> for PairOptions {
    fn from((c, seed): (&af_core::config::PairsConfig, u64)) -> Self {
        Self {
            folds: c.folds,
            min_context_tokens: c.min_context_tokens,
            max_context_tokens: c.max_context_tokens,
            min_ending_tokens: c.min_ending_tokens,
            max_ending_tokens: c.max_ending_tokens,
            adverbs: c.adverbs,
            seed,
        }
    }
}

/// What `af pairs` reports: every count a user may ask about, written to `report.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PairsReport {
    pub documents: u64,
    pub groups: u64,
    pub sentences: u64,
    /// Consecutive sentence pairs considered.
    pub candidate_pairs: u64,
    pub items: u64,
    /// Pairs dropped, by the first reason that applied; and sentences (captions, rows) dropped
    /// before pairing (`empty-caption`, `control-character`: each counts one sentence, and no
    /// pair is made with it) and questions left out (`unreadable`, `too-few-options`).
    pub dropped: BTreeMap<String, u64>,
    /// Items per fold.
    pub items_per_fold: Vec<u64>,
    /// Groups per fold.
    pub groups_per_fold: Vec<u64>,
    /// Items read as they stand from multiple-choice questions (`questions` inputs), among `items`.
    #[serde(default)]
    pub questions: u64,
    /// Questions left out under `skip-bad`: where, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_questions: Vec<SkippedQuestion>,
    /// Items that took their fold from the same text in another run (`[lm] from`), so that the
    /// LMs adopted from it never score an item they trained on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folds_followed: Option<u64>,
}

/// A question of a `questions` input left out under `skip-bad`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkippedQuestion {
    /// `file:line`.
    pub origin: String,
    /// `unreadable` or `too-few-options`: the key it is counted under in `dropped`.
    pub reason: String,
    pub detail: String,
}

/// An item read as it stands from a multiple-choice question, with where it came from.
pub struct GivenItem {
    pub item: Item,
    /// `file:line`, for messages.
    pub origin: String,
}

/// A question as an item: its context, the start of its second sentence as the noun phrase, its
/// right ending, and its wrong options as the item's distractors (the fold is dealt later).
pub fn question_item(q: &af_core::Question) -> Item {
    let count = |t: &str| tokenize(t).len() as u32;
    Item {
        id: q.id.clone(),
        group: q.group.clone(),
        fold: 0,
        context: q.context.clone(),
        noun_phrase: q.prefix.clone(),
        ending: q.endings[q.label].clone(),
        context_tokens: count(&q.context),
        noun_phrase_tokens: count(&q.prefix),
        ending_tokens: count(&q.endings[q.label]),
        distractors: q
            .endings
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != q.label)
            .map(|(_, e)| e.clone())
            .collect(),
    }
}

pub struct PairsOutput {
    pub items: Vec<Item>,
    pub report: PairsReport,
    /// Token counts over every kept item's context and second sentence (for the vocabulary).
    pub token_counts: HashMap<String, u64>,
}

enum Outcome {
    Kept(Item),
    Dropped(&'static str),
}

/// Why a sentence (a caption, a row) cannot be in any pair, if it cannot: it is empty, or it
/// holds a control character that is not whitespace (a NUL byte, an escape: a damaged caption,
/// which would reach items.jsonl and every file after it). Line breaks and tabs inside a
/// caption are whitespace, as the tokenizer reads them (five ActivityNet captions have one).
pub fn unusable_sentence(s: &str) -> Option<&'static str> {
    if s.trim().is_empty() {
        Some("empty-caption")
    } else if s.chars().any(|c| c.is_control() && !c.is_whitespace()) {
        Some("control-character")
    } else {
        None
    }
}

/// The reason each caption of a document that is in no candidate pair is dropped: its own
/// ([`unusable_sentence`]), or `unpaired-caption` when it is usable but both its neighbours are
/// missing or dropped (a one-caption video).
fn dropped_captions(sentences: &[String]) -> Vec<&'static str> {
    let problems: Vec<Option<&'static str>> =
        sentences.iter().map(|s| unusable_sentence(s)).collect();
    let usable = |k: Option<usize>| k.and_then(|k| problems.get(k)).is_some_and(Option::is_none);
    problems
        .iter()
        .enumerate()
        .filter_map(|(k, p)| match p {
            Some(reason) => Some(*reason),
            None if !usable(k.checked_sub(1)) && !usable(Some(k + 1)) => Some("unpaired-caption"),
            None => None,
        })
        .collect()
}

fn make_pair(doc: &Document, k: usize, tagger: &Tagger, o: &PairOptions) -> Outcome {
    let (s, s2) = (&doc.sentences[k], &doc.sentences[k + 1]);
    let ctx = tokenize(s);
    let n_ctx = ctx.len() as u32;
    if n_ctx < o.min_context_tokens {
        return Outcome::Dropped("context-too-short");
    }
    if n_ctx > o.max_context_tokens {
        return Outcome::Dropped("context-too-long");
    }
    let toks = tokenize(s2);
    let words = toks.to_vec();
    let split = match split_sentence(tagger, &words, o.adverbs) {
        Ok((i, _)) => i,
        Err(e) => return Outcome::Dropped(e.as_str()),
    };
    let n_end = (words.len() - split) as u32;
    if n_end < o.min_ending_tokens {
        return Outcome::Dropped("ending-too-short");
    }
    if n_end > o.max_ending_tokens {
        return Outcome::Dropped("ending-too-long");
    }
    let cut = toks.spans[split].start;
    let id = match &doc.id {
        Some(id) => id.clone(),
        None => format!("{}-{k}", doc.group),
    };
    Outcome::Kept(Item {
        id,
        group: doc.group.clone(),
        fold: 0,
        context: s.clone(),
        noun_phrase: s2[..cut].trim_end().to_string(),
        ending: s2[cut..].to_string(),
        context_tokens: n_ctx,
        noun_phrase_tokens: split as u32,
        ending_tokens: n_end,
        distractors: Vec::new(),
    })
}

/// Assigns each group a fold: groups in sorted order, shuffled by the seed, dealt round-robin,
/// so the folds hold equal numbers of groups and the result does not depend on input order.
pub fn assign_folds<'a>(
    groups: impl IntoIterator<Item = &'a str>,
    folds: u32,
    seed: u64,
) -> HashMap<String, u32> {
    let mut groups: Vec<&str> = groups.into_iter().collect();
    groups.sort_unstable();
    groups.dedup();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0066_6f6c_6473);
    groups.shuffle(&mut rng);
    groups
        .into_iter()
        .enumerate()
        .map(|(i, g)| (g.to_string(), (i % folds as usize) as u32))
        .collect()
}

/// Makes the items of `docs`, in document order, then takes the `given` items (read from
/// multiple-choice questions) as they are; `on_document` is called once per document done (from
/// worker threads), for progress bars.
pub fn make_pairs(
    docs: &[Document],
    given: Vec<GivenItem>,
    tagger: &Tagger,
    options: &PairOptions,
    on_document: &(dyn Fn() + Sync),
) -> Result<PairsOutput, PairsError> {
    // A sentence that cannot be in a pair is dropped and counted once, by its reason; the pairs
    // around it are not made (its neighbours were not consecutive), and the others keep their
    // ids (`<group>-<k>`, k its place in the document).
    let per_doc: Vec<Vec<(Outcome, usize)>> = docs
        .par_iter()
        .enumerate()
        .map(|(d, doc)| {
            let usable: Vec<bool> = doc
                .sentences
                .iter()
                .map(|s| unusable_sentence(s).is_none())
                .collect();
            let pairs = (0..doc.sentences.len().saturating_sub(1))
                .filter(|&k| usable[k] && usable[k + 1])
                .map(|k| (make_pair(doc, k, tagger, options), d))
                .collect();
            on_document();
            pairs
        })
        .collect();

    let mut report = PairsReport {
        documents: docs.len() as u64,
        sentences: docs.iter().map(|d| d.sentences.len() as u64).sum(),
        ..Default::default()
    };
    let mut groups: Vec<&str> = docs.iter().map(|d| d.group.as_str()).collect();
    groups.sort_unstable();
    groups.dedup();
    report.groups = groups.len() as u64;

    let mut items = Vec::new();
    let mut origin_of: HashMap<String, String> = HashMap::new();
    let mut keep = |item: Item, origin: &str, items: &mut Vec<Item>| {
        if let Some(first) = origin_of.insert(item.id.clone(), origin.to_string()) {
            return Err(PairsError::DuplicateId {
                id: item.id,
                first,
                second: origin.to_string(),
            });
        }
        items.push(item);
        Ok(())
    };
    for doc in docs {
        for reason in dropped_captions(&doc.sentences) {
            *report.dropped.entry(reason.to_string()).or_default() += 1;
        }
    }
    for (outcome, d) in per_doc.into_iter().flatten() {
        report.candidate_pairs += 1;
        match outcome {
            Outcome::Kept(item) => keep(item, &docs[d].origin, &mut items)?,
            Outcome::Dropped(reason) => *report.dropped.entry(reason.to_string()).or_default() += 1,
        }
    }
    report.questions = given.len() as u64;
    let new_groups: std::collections::HashSet<&str> = given
        .iter()
        .map(|g| g.item.group.as_str())
        .filter(|g| groups.binary_search(g).is_err())
        .collect();
    report.groups += new_groups.len() as u64;
    for g in given {
        keep(g.item, &g.origin, &mut items)?;
    }

    let folds = assign_folds(
        items.iter().map(|i| i.group.as_str()),
        options.folds,
        options.seed,
    );
    report.items_per_fold = vec![0; options.folds as usize];
    report.groups_per_fold = vec![0; options.folds as usize];
    for f in folds.values() {
        report.groups_per_fold[*f as usize] += 1;
    }
    let mut token_counts: HashMap<String, u64> = HashMap::new();
    for item in &mut items {
        item.fold = folds[&item.group];
        report.items_per_fold[item.fold as usize] += 1;
        for text in [&item.context, &item.noun_phrase, &item.ending]
            .into_iter()
            .chain(&item.distractors)
        {
            for t in tokenize(text).iter() {
                *token_counts.entry(t.to_string()).or_default() += 1;
            }
        }
    }
    report.items = items.len() as u64;
    Ok(PairsOutput {
        items,
        report,
        token_counts,
    })
}

/// What identifies an item across runs and layouts: its context and second sentence, lowercased,
/// with runs of whitespace as one space (so a different noun-phrase split still matches).
fn text_key(item: &Item) -> String {
    let text = format!("{} {} {}", item.context, item.noun_phrase, item.ending).to_lowercase();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Gives each of `items` whose text is one of `source`'s the fold it has there (the fold of the
/// source item with its own id, when that one has the same text: two videos may share a caption
/// pair, and the run's own items then keep exactly their folds), and recounts the report's
/// folds; returns how many matched. An item matching none takes the fold of its group's
/// first matched item (the source's LM for that fold never trained on the video's other pairs,
/// whose contexts it may share), else keeps its own: no LM of the source run trained on it.
pub fn follow_folds(items: &mut [Item], source: &[Item], report: &mut PairsReport) -> u64 {
    // A text in several folds (every LM then trained on it) takes its first item's fold.
    let mut folds: HashMap<String, u32> = HashMap::new();
    for i in source {
        folds.entry(text_key(i)).or_insert(i.fold);
    }
    let by_id: HashMap<&str, &Item> = source.iter().map(|i| (i.id.as_str(), i)).collect();
    let found: Vec<Option<u32>> = items
        .iter()
        .map(|i| {
            let key = text_key(i);
            match by_id.get(i.id.as_str()) {
                Some(same) if text_key(same) == key => Some(same.fold),
                _ => folds.get(&key).copied(),
            }
        })
        .collect();
    let mut group_fold: HashMap<String, u32> = HashMap::new();
    for (item, fold) in items.iter().zip(&found) {
        if let Some(fold) = fold {
            group_fold.entry(item.group.clone()).or_insert(*fold);
        }
    }
    let mut matched = 0;
    for (item, fold) in items.iter_mut().zip(found) {
        if let Some(fold) = fold {
            item.fold = fold;
            matched += 1;
        } else if let Some(&fold) = group_fold.get(&item.group) {
            item.fold = fold;
        }
    }
    let n = report
        .items_per_fold
        .len()
        .max(items.iter().map(|i| i.fold as usize + 1).max().unwrap_or(0));
    report.items_per_fold = vec![0; n];
    let mut groups: Vec<std::collections::HashSet<&str>> = vec![Default::default(); n];
    for item in items.iter() {
        report.items_per_fold[item.fold as usize] += 1;
        groups[item.fold as usize].insert(item.group.as_str());
    }
    report.groups_per_fold = groups.iter().map(|g| g.len() as u64).collect();
    report.folds_followed = Some(matched);
    matched
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 44: an empty caption vanished without a count (a one-caption video), and a NUL byte
    /// in a caption reached items.jsonl. Each is now dropped once, by its reason; line breaks
    /// inside a caption stay whitespace.
    #[test]
    fn every_dropped_caption_is_counted_by_reason() {
        let doc = |group: &str, sentences: &[&str]| Document {
            group: group.into(),
            id: None,
            sentences: sentences.iter().map(|s| s.to_string()).collect(),
            origin: group.into(),
        };
        let docs = [
            doc("lone", &[""]),
            doc("single", &["A cat sleeps on the warm mat."]),
            doc(
                "v",
                &[
                    "A man walks into the room.",
                    "He sits down on a chair.",
                    "",
                    "A woman waves at\nthe camera.",
                    "She then picks up a ball.",
                    "The dog runs after the ball\0.",
                    "It brings the ball back to her.",
                ],
            ),
        ];
        let options = PairOptions {
            folds: 2,
            min_context_tokens: 1,
            max_context_tokens: 100,
            min_ending_tokens: 1,
            max_ending_tokens: 100,
            adverbs: crate::split::AdverbSide::NounPhrase,
            seed: 1,
        };
        let out = make_pairs(&docs, Vec::new(), &Tagger::builtin(), &options, &|| {}).unwrap();
        let r = &out.report;
        assert_eq!(r.dropped.get("empty-caption"), Some(&2), "{r:?}");
        assert_eq!(r.dropped.get("control-character"), Some(&1), "{r:?}");
        // The one-caption video, and the last caption of `v`, whose only neighbour is damaged.
        assert_eq!(r.dropped.get("unpaired-caption"), Some(&2), "{r:?}");
        // Every caption is in a candidate pair or counted under a caption reason.
        let in_pairs = 4; // captions 0, 1, 3, 4 of `v`
        let caption_drops: u64 = ["empty-caption", "control-character", "unpaired-caption"]
            .iter()
            .filter_map(|k| r.dropped.get(*k))
            .sum();
        assert_eq!(r.sentences, in_pairs + caption_drops, "{r:?}");
        // Pairs 0-1 and 3-4 only: none with the empty or the damaged caption.
        assert_eq!(r.candidate_pairs, 2, "{r:?}");
        let ids: Vec<&str> = out.items.iter().map(|i| i.id.as_str()).collect();
        assert!(ids.iter().all(|id| ["v-0", "v-3"].contains(id)), "{ids:?}");
        assert!(out
            .items
            .iter()
            .all(|i| !format!("{}{}{}", i.context, i.noun_phrase, i.ending).contains('\0')));
        assert_eq!(unusable_sentence("tab\there"), None);
        assert_eq!(unusable_sentence("esc\u{1b}[0m"), Some("control-character"));
        assert_eq!(unusable_sentence("   "), Some("empty-caption"));
    }

    /// Items found in the source run (whatever their split or spacing) take its folds; others
    /// follow their video's matched items or keep theirs; the report's counts follow.
    #[test]
    fn folds_follow_the_source_run_by_text() {
        let item = |id: &str, group: &str, fold: u32, context: &str, np: &str, ending: &str| Item {
            id: id.into(),
            group: group.into(),
            fold,
            context: context.into(),
            noun_phrase: np.into(),
            ending: ending.into(),
            context_tokens: 0,
            noun_phrase_tokens: 0,
            ending_tokens: 0,
            distractors: Vec::new(),
        };
        // s3 repeats s2's text in another video and fold; q5 is s3 itself.
        let source = [
            item("s1", "v1", 1, "A man walks in.", "He then", "sits down."),
            item("s2", "v2", 0, "A dog runs.", "It", "barks loudly."),
            item("s3", "v3", 1, "A dog runs.", "It", "barks loudly."),
        ];
        let mut items = vec![
            item("q1", "q1", 0, "A man  walks in.", "He", "then sits down."),
            item("q2", "q2", 1, "a dog runs.", "It", "barks loudly."),
            item("q3", "q3", 1, "A cat sleeps.", "It", "purrs."),
            item("q4", "q1", 0, "He sits down.", "He", "reads a paper."),
            item("s3", "v3", 0, "A dog runs.", "It", "barks loudly."),
        ];
        let mut report = PairsReport {
            items_per_fold: vec![3, 2],
            groups_per_fold: vec![2, 2],
            ..Default::default()
        };
        assert_eq!(follow_folds(&mut items, &source, &mut report), 3);
        // q4, unmatched, follows q1 of its video into fold 1; s3 keeps its own fold, not its twin's.
        assert_eq!(
            items.iter().map(|i| i.fold).collect::<Vec<_>>(),
            [1, 0, 1, 1, 1]
        );
        assert_eq!(
            (
                report.items_per_fold,
                report.groups_per_fold,
                report.folds_followed
            ),
            (vec![1, 4], vec![1, 3], Some(3))
        );
    }

    #[test]
    fn folds_are_balanced_seeded_and_order_free() {
        let groups: Vec<String> = (0..103).map(|i| format!("g{i}")).collect();
        let a = assign_folds(groups.iter().map(String::as_str), 5, 7);
        let b = assign_folds(groups.iter().rev().map(String::as_str), 5, 7);
        assert_eq!(a, b);
        let mut sizes = [0; 5];
        for f in a.values() {
            sizes[*f as usize] += 1;
        }
        assert!(sizes.iter().all(|&s| s == 20 || s == 21), "{sizes:?}");
        let c = assign_folds(groups.iter().map(String::as_str), 5, 8);
        assert_ne!(a, c, "another seed, another assignment");
    }
}
