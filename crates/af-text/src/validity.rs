//! Validity rules for generated endings, checked before Adversarial Filtering (the fluency issue):
//! an ending that is a second right answer, plainly broken, or much longer or shorter than the
//! right one makes a question either wrong or easy, whatever the committee thinks of its style.
//!
//! Each rule reads the ending's tokens and tags (the tagger's, on the ending alone) and, for two
//! of them, the gold ending's tokens:
//! - `near-copy`: the share of tokens the ending shares with the gold (as multisets, final
//!   punctuation left out, over the longer of the two) reaches `near_copy_overlap`;
//! - `repeat`: a word three times in a row, or a content word (noun, verb, adjective, adverb,
//!   proper noun) three times anywhere;
//! - `dangling`: the last word (before final punctuation) is a determiner, adposition,
//!   conjunction or the infinitive "to": the sentence stops mid-phrase;
//! - `no-verb`: no token is tagged as a verb or auxiliary;
//! - `length-gap`: the ending is more than `max_length_gap` tokens longer or shorter than the
//!   gold.

use std::collections::HashMap;

use crate::tagger::upos;

pub use af_core::ValidityRule;

/// The thresholds of the two rules that compare with the gold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValidityRules {
    pub near_copy_overlap: f64,
    pub max_length_gap: usize,
}

fn is_punctuation(word: &str) -> bool {
    word.chars().all(|c| !c.is_alphanumeric())
}

/// Every rule `ending` breaks, in [`ValidityRule::ALL`]'s order; `tags` are the tagger's tags of
/// `ending` (one per token). `gold` None checks the rules of the ending alone.
pub fn check<S: AsRef<str>, T: AsRef<str>>(
    ending: &[S],
    tags: &[T],
    gold: Option<&[S]>,
    rules: &ValidityRules,
) -> Vec<ValidityRule> {
    assert_eq!(ending.len(), tags.len(), "a tag per token");
    let words: Vec<String> = ending.iter().map(|w| w.as_ref().to_lowercase()).collect();
    let tags: Vec<&str> = tags.iter().map(|t| upos(t.as_ref())).collect();
    let mut out = Vec::new();
    if let Some(gold) = gold {
        let gold: Vec<String> = gold.iter().map(|w| w.as_ref().to_lowercase()).collect();
        if overlap(&words, &gold) >= rules.near_copy_overlap {
            out.push(ValidityRule::NearCopy);
        }
    }
    if repeats(&words, &tags) {
        out.push(ValidityRule::Repeat);
    }
    let last_word = (0..words.len()).rev().find(|&i| !is_punctuation(&words[i]));
    if last_word.is_some_and(|i| {
        matches!(tags[i], "DET" | "ADP" | "CCONJ" | "SCONJ")
            || (tags[i] == "PART" && words[i] == "to")
    }) {
        out.push(ValidityRule::Dangling);
    }
    if !tags.iter().any(|t| matches!(*t, "VERB" | "AUX")) {
        out.push(ValidityRule::NoVerb);
    }
    if let Some(gold) = gold {
        if ending.len().abs_diff(gold.len()) > rules.max_length_gap {
            out.push(ValidityRule::LengthGap);
        }
    }
    out
}

/// How an ending begins, for fitting another item's ending after a noun phrase: the tag of its
/// first word past any adverbs, a verb or auxiliary by its Penn form alone (`runs` and `is` are
/// both `VBZ`, `run` is `VBP`, `ran` `VBD`), anything else by its universal tag (`NOUN` when the
/// split left the subject's noun in the ending). `None` for an ending of adverbs or nothing.
pub fn onset<T: AsRef<str>>(tags: &[T]) -> Option<String> {
    let first = tags.iter().map(AsRef::as_ref).find(|t| upos(t) != "ADV")?;
    Some(match first.split_once('_') {
        Some(("VERB" | "AUX", form)) => form.to_string(),
        _ => upos(first).to_string(),
    })
}

/// Shared tokens (as multisets, punctuation left out) over the longer of the two.
fn overlap(a: &[String], b: &[String]) -> f64 {
    let (ba, bb) = (bag(a), bag(b));
    let (na, nb): (usize, usize) = (ba.values().sum(), bb.values().sum());
    if na.max(nb) == 0 {
        return 1.0;
    }
    let shared: usize = ba
        .iter()
        .map(|(w, &n)| n.min(bb.get(w).copied().unwrap_or(0)))
        .sum();
    shared as f64 / na.max(nb) as f64
}

/// Counts of the words that are not punctuation.
fn bag(words: &[String]) -> HashMap<&str, usize> {
    let mut m = HashMap::new();
    for x in words.iter().filter(|x| !is_punctuation(x)) {
        *m.entry(x.as_str()).or_default() += 1;
    }
    m
}

fn repeats(words: &[String], tags: &[&str]) -> bool {
    if words
        .windows(3)
        .any(|w| w[0] == w[1] && w[1] == w[2] && !is_punctuation(&w[0]))
    {
        return true;
    }
    let mut content: HashMap<&str, usize> = HashMap::new();
    for (w, t) in words.iter().zip(tags) {
        if matches!(*t, "NOUN" | "PROPN" | "VERB" | "ADJ" | "ADV") {
            *content.entry(w.as_str()).or_default() += 1;
        }
    }
    content.values().any(|&n| n >= 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: ValidityRules = ValidityRules {
        near_copy_overlap: 0.8,
        max_length_gap: 6,
    };

    #[test]
    fn an_endings_onset_is_its_first_non_adverb_tag_verbs_by_form() {
        assert_eq!(
            onset(&["ADV", "VERB_VBZ", "DET", "NOUN"]).as_deref(),
            Some("VBZ")
        );
        assert_eq!(
            onset(&["AUX_VBZ", "VERB_VBG"]).as_deref(),
            Some("VBZ"),
            "`is` like `runs`"
        );
        assert_eq!(onset(&["VERB_VBP", "NOUN"]).as_deref(), Some("VBP"));
        assert_eq!(onset(&["NOUN", "VERB_VBZ"]).as_deref(), Some("NOUN"));
        assert_eq!(onset(&["ADV", "ADV"]), None);
        assert_eq!(onset::<&str>(&[]), None);
    }

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    fn reasons(ending: &str, tags: &str, gold: Option<&str>) -> Vec<&'static str> {
        let (e, t) = (words(ending), words(tags));
        let g = gold.map(words);
        check(&e, &t, g.as_deref(), &RULES)
            .into_iter()
            .map(ValidityRule::name)
            .collect()
    }

    #[test]
    fn each_rule_fires_on_its_own_case_and_not_on_fluent_text() {
        let gold = "puts the ball in the hole .";
        assert!(
            reasons(
                "puts the ball in the hole .",
                "VERB_VBZ DET NOUN ADP DET NOUN PUNCT",
                None
            )
            .is_empty(),
            "the gold alone is fine"
        );
        assert_eq!(
            reasons(
                "puts the ball in a hole .",
                "VERB_VBZ DET NOUN ADP DET NOUN PUNCT",
                Some(gold)
            ),
            ["near-copy"]
        );
        assert!(reasons(
            "walks away from the table .",
            "VERB_VBZ ADV ADP DET NOUN PUNCT",
            Some(gold)
        )
        .is_empty());
        // Three "the" in a long fluent ending is not a repeat; "ball" three times is.
        assert!(reasons(
            "puts the cap on the pen and the box .",
            "VERB_VBZ DET NOUN ADP DET NOUN CCONJ DET NOUN PUNCT",
            Some(gold)
        )
        .is_empty());
        assert_eq!(
            reasons(
                "kicks ball ball ball .",
                "VERB_VBZ NOUN NOUN NOUN PUNCT",
                Some(gold)
            ),
            ["repeat"]
        );
        assert_eq!(
            reasons("is is is .", "AUX_VBZ AUX_VBZ AUX_VBZ PUNCT", None),
            ["repeat"]
        );
        assert_eq!(
            reasons(
                "walks over to the .",
                "VERB_VBZ ADP ADP DET PUNCT",
                Some(gold)
            ),
            ["dangling"]
        );
        assert_eq!(
            reasons("wants to", "VERB_VBZ PART", Some(gold)),
            ["dangling"]
        );
        assert_eq!(
            reasons(
                "the man and his dog .",
                "DET NOUN CCONJ PRON NOUN PUNCT",
                Some(gold)
            ),
            ["no-verb"]
        );
        assert_eq!(
            reasons("walks over to the wall and then slowly climbs up the long rope to the very top .", "VERB_VBZ ADP ADP DET NOUN CCONJ ADV ADV VERB_VBZ ADP DET ADJ NOUN ADP DET ADV NOUN PUNCT", Some(gold)),
            ["length-gap"]
        );
        // Several at once, in order.
        assert_eq!(
            reasons("the the the", "DET DET DET", Some(gold)),
            ["repeat", "dangling", "no-verb"]
        );
    }
}
