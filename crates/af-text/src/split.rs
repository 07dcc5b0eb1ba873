//! Splits a second sentence into the noun phrase that starts it and the ending (the verb phrase
//! and everything after it), from the tagger's tags and a few chunking rules.
//!
//! The noun phrase runs from the start of the sentence to the main clause's finite verb: it keeps
//! leading adverbials ("Then, the man"), a leading subordinate clause that a comma closes
//! ("As he runs, the dog"), participles and relative clauses that modify the subject ("A man
//! wearing a hat", "The girl who is dancing"). Adverbs between the subject and the verb stay
//! with the noun phrase, as in SWAG's files ("The woman then | begins ..."), or go with the ending
//! when asked ([`AdverbSide::Ending`]). A sentence the rules cannot read is reported with
//! the reason, never guessed. docs/text.md has the rationale and the measured agreement.

use std::fmt;

pub use af_core::AdverbSide;

use crate::tagger::{upos, Tagger};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SplitFailure {
    /// No finite verb (e.g. a caption that is only a noun phrase).
    NoFiniteVerb,
    /// The first finite verb comes before any subject ("Then runs away.").
    NoSubject,
    /// Starts with a subordinate clause that no comma closes: where the main clause begins is a guess.
    UnclosedSubordinateClause,
    /// The only finite verb found sits in a dependent clause, and no earlier word reads as a verb.
    VerbOnlyInDependentClause,
}

impl SplitFailure {
    pub fn as_str(&self) -> &'static str {
        match self {
            SplitFailure::NoFiniteVerb => "split-no-finite-verb",
            SplitFailure::NoSubject => "split-no-subject",
            SplitFailure::UnclosedSubordinateClause => "split-unclosed-subordinate-clause",
            SplitFailure::VerbOnlyInDependentClause => "split-verb-only-in-dependent-clause",
        }
    }
}

impl fmt::Display for SplitFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn is_finite(tag: &str) -> bool {
    matches!(
        tag,
        "VERB_VBZ" | "VERB_VBP" | "VERB_VBD" | "AUX_VBZ" | "AUX_VBP" | "AUX_VBD" | "AUX_MD"
    )
}

fn is_nominal(tag: &str) -> bool {
    matches!(
        upos(tag),
        "NOUN" | "PROPN" | "PRON" | "NUM" | "DET" | "ADJ" | "SYM" | "X"
    )
}

/// How far below the tagger's choice a finite-verb reading may score and still be taken (in the
/// tagger's score units; docs/text.md says how it was chosen).
pub const MAX_FORCED_VERB_GAP: f32 = 32.0;

/// Tags `words` and splits them; returns the ending's first token and the tags used.
///
/// Captions are sentences, and a tagger trained on web text often reads their verbs as nouns
/// ("the crowd cheers"). So when the rules find no finite verb, or find one only inside a
/// dependent clause ("The boy laughs as he falls": `laughs` read as a noun leaves `falls`), the
/// token before that clause whose finite-verb reading scored closest to the tagger's choice is
/// taken as the verb, if within [`MAX_FORCED_VERB_GAP`]; otherwise the sentence is dropped.
pub fn split_sentence<'t, S: AsRef<str>>(
    tagger: &'t Tagger,
    words: &[S],
    adverbs: AdverbSide,
) -> Result<(usize, Vec<&'t str>), SplitFailure> {
    let (ids, margins) = tagger.tag_with_margins(words);
    let names = tagger.tags();
    let mut tags: Vec<&str> = ids.iter().map(|&t| names[t].as_str()).collect();
    let analysis = analyse(words, &tags, adverbs);
    let limit = match (&analysis.verb, analysis.clause_break) {
        (Ok(_), None) => return analysis.verb.map(|s| (s, tags)),
        (Ok(_), Some(b)) => b,
        (Err(SplitFailure::NoFiniteVerb), _) => tags.len(),
        (Err(e), _) => return Err(*e),
    };
    let Some(first_nominal) = analysis.first_nominal else {
        return Err(SplitFailure::NoFiniteVerb);
    };
    // Only open-class verb readings (auxiliaries are a closed class the tagger knows by heart),
    // and only right after something a verb can follow: not "A close | up of ...".
    let verb_tags: Vec<usize> = (0..names.len())
        .filter(|&t| matches!(names[t].as_str(), "VERB_VBZ" | "VERB_VBP" | "VERB_VBD"))
        .collect();
    let can_precede_verb = |i: usize| {
        (0..i)
            .rev()
            .find(|&j| upos(tags[j]) != "ADV")
            .is_some_and(|p| matches!(upos(tags[p]), "NOUN" | "PROPN" | "PRON" | "NUM" | "PUNCT"))
    };
    let best = (first_nominal + 1..limit)
        .filter(|&i| !is_finite(tags[i]) && can_precede_verb(i))
        .filter_map(|i| margins[i].as_ref().map(|m| (i, m)))
        .flat_map(|(i, m)| verb_tags.iter().map(move |&t| (i, t, m[t])))
        .max_by(|a, b| a.2.total_cmp(&b.2));
    match best {
        Some((i, t, gap)) if gap >= -MAX_FORCED_VERB_GAP => {
            tags[i] = names[t].as_str();
            let again = analyse(words, &tags, adverbs);
            match again.clause_break {
                None => again.verb.map(|s| (s, tags)),
                Some(_) => Err(SplitFailure::VerbOnlyInDependentClause),
            }
        }
        _ if analysis.verb.is_ok() => Err(SplitFailure::VerbOnlyInDependentClause),
        _ => Err(SplitFailure::NoFiniteVerb),
    }
}

/// The index of the first token of the ending, or why there is none, from tags alone.
pub fn split_subject<S: AsRef<str>>(
    words: &[S],
    tags: &[&str],
    adverbs: AdverbSide,
) -> Result<usize, SplitFailure> {
    let a = analyse(words, tags, adverbs);
    match a.clause_break {
        None => a.verb,
        Some(_) => a.verb.and(Err(SplitFailure::VerbOnlyInDependentClause)),
    }
}

const RELATIVE_PRONOUNS: [&str; 5] = ["who", "which", "that", "whom", "whose"];
/// Words that open a dependent clause after the subject ("watches as the band plays").
const CLAUSE_OPENERS: [&str; 9] = [
    "as", "while", "when", "after", "before", "until", "because", "once", "since",
];

struct Analysis {
    /// The ending's first token.
    verb: Result<usize, SplitFailure>,
    first_nominal: Option<usize>,
    /// Set when the finite verb found sits in a dependent or coordinated clause that starts here,
    /// so the main verb must come earlier (and was mis-tagged).
    clause_break: Option<usize>,
}

fn analyse<S: AsRef<str>>(words: &[S], tags: &[&str], adverbs: AdverbSide) -> Analysis {
    assert_eq!(words.len(), tags.len(), "one tag per word");
    let word = |i: usize| words[i].as_ref().to_lowercase();
    // Where the subject can start: after a leading subordinate or participial clause, if any.
    let mut start = 0;
    let lead = (0..tags.len())
        .find(|&i| !matches!(upos(tags[i]), "ADV" | "CCONJ" | "PUNCT"))
        .unwrap_or(0);
    if lead < tags.len() && (upos(tags[lead]) == "SCONJ" || tags[lead] == "VERB_VBG") {
        match (lead..tags.len()).find(|&i| words[i].as_ref() == ",") {
            Some(comma) => start = comma + 1,
            None if upos(tags[lead]) == "SCONJ" => {
                return Analysis {
                    verb: Err(SplitFailure::UnclosedSubordinateClause),
                    first_nominal: None,
                    clause_break: None,
                }
            }
            None => {}
        }
    }
    let mut first_nominal = None;
    let mut in_relative = false;
    let mut clause_opener = None;
    for i in start..tags.len() {
        let tag = tags[i];
        let previous = (start..i).rev().find(|&j| upos(tags[j]) != "ADV");
        let finite = is_finite(tag)
            // A plural present tense the tagger read as a base form: "two kids run".
            || (tag == "VERB_VB" && previous.is_some_and(|p| matches!(upos(tags[p]), "NOUN" | "PROPN" | "PRON")));
        if finite {
            if first_nominal.is_none() {
                return Analysis {
                    verb: Err(SplitFailure::NoSubject),
                    first_nominal,
                    clause_break: None,
                };
            }
            if in_relative {
                in_relative = false;
                continue;
            }
            // "sits at a piano and begins": a verb right after a coordinator coordinates with
            // a verb before it.
            let coordinated =
                previous.filter(|&p| upos(tags[p]) == "CCONJ" && p > first_nominal.unwrap_or(0));
            let mut split = i;
            while adverbs == AdverbSide::Ending
                && split > start + 1
                && upos(tags[split - 1]) == "ADV"
            {
                split -= 1;
            }
            return Analysis {
                verb: Ok(split),
                first_nominal,
                clause_break: clause_opener.or(coordinated),
            };
        }
        if first_nominal.is_some()
            && upos(tag) == "PRON"
            && RELATIVE_PRONOUNS.contains(&word(i).as_str())
        {
            in_relative = true;
        }
        if first_nominal.is_some()
            && clause_opener.is_none()
            && matches!(upos(tag), "SCONJ" | "ADP")
            && CLAUSE_OPENERS.contains(&word(i).as_str())
            && tags.get(i + 1).is_some_and(|t| is_nominal(t))
        {
            clause_opener = Some(i);
        }
        if is_nominal(tag) && first_nominal.is_none() {
            first_nominal = Some(i);
        }
    }
    Analysis {
        verb: Err(SplitFailure::NoFiniteVerb),
        first_nominal,
        clause_break: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pairs: &[(&str, &str)]) -> Result<usize, SplitFailure> {
        split_with(pairs, AdverbSide::NounPhrase)
    }

    fn split_with(pairs: &[(&str, &str)], adverbs: AdverbSide) -> Result<usize, SplitFailure> {
        let words: Vec<&str> = pairs.iter().map(|p| p.0).collect();
        let tags: Vec<&str> = pairs.iter().map(|p| p.1).collect();
        split_subject(&words, &tags, adverbs)
    }

    #[test]
    fn rules_on_gold_tags() {
        // "A man wearing a hat is seen ."
        assert_eq!(
            split(&[
                ("A", "DET"),
                ("man", "NOUN"),
                ("wearing", "VERB_VBG"),
                ("a", "DET"),
                ("hat", "NOUN"),
                ("is", "AUX_VBZ"),
                ("seen", "VERB_VBN")
            ]),
            Ok(5)
        );
        // "The woman then begins ." SWAG's side, and af's earlier one.
        let then = [
            ("The", "DET"),
            ("woman", "NOUN"),
            ("then", "ADV"),
            ("begins", "VERB_VBZ"),
        ];
        assert_eq!(split(&then), Ok(3));
        assert_eq!(split_with(&then, AdverbSide::Ending), Ok(2));
        // "Then the man slowly and carefully lifts": leading adverbs are the noun phrase's either way.
        let both = [
            ("Then", "ADV"),
            ("the", "DET"),
            ("man", "NOUN"),
            ("slowly", "ADV"),
            ("lifts", "VERB_VBZ"),
        ];
        assert_eq!(split(&both), Ok(4));
        assert_eq!(split_with(&both, AdverbSide::Ending), Ok(3));
        // "The girl who is dancing smiles ."
        assert_eq!(
            split(&[
                ("The", "DET"),
                ("girl", "NOUN"),
                ("who", "PRON"),
                ("is", "AUX_VBZ"),
                ("dancing", "VERB_VBG"),
                ("smiles", "VERB_VBZ")
            ]),
            Ok(5)
        );
        // "As he runs , the dog barks"
        assert_eq!(
            split(&[
                ("As", "SCONJ"),
                ("he", "PRON"),
                ("runs", "VERB_VBZ"),
                (",", "PUNCT"),
                ("the", "DET"),
                ("dog", "NOUN"),
                ("barks", "VERB_VBZ")
            ]),
            Ok(6)
        );
        assert_eq!(
            split(&[
                ("As", "SCONJ"),
                ("he", "PRON"),
                ("runs", "VERB_VBZ"),
                ("she", "PRON"),
                ("sits", "VERB_VBZ")
            ]),
            Err(SplitFailure::UnclosedSubordinateClause)
        );
        assert_eq!(
            split(&[("Then", "ADV"), ("jumps", "VERB_VBZ")]),
            Err(SplitFailure::NoSubject)
        );
        assert_eq!(
            split(&[("A", "DET"), ("man", "NOUN"), ("outside", "ADV")]),
            Err(SplitFailure::NoFiniteVerb)
        );
    }
}
