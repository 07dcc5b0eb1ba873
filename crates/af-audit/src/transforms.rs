//! "Back to Square One" (Elazar et al. 2021) transforms of WinoGrande-style questions. Both make
//! the question unanswerable for a reader; a detector above chance on them exploits artifacts.
//! - no-candidates: every mention of the two candidates is removed from the sentence, so the
//!   blank's filler no longer refers to anything;
//! - partial-sentence: only the text after the last discourse marker before the blank is kept.

use af_core::{Blank, Question};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transform {
    NoCandidates,
    PartialSentence,
}

impl Transform {
    pub const ALL: [Transform; 2] = [Transform::NoCandidates, Transform::PartialSentence];

    pub fn name(self) -> &'static str {
        match self {
            Transform::NoCandidates => "no-candidates",
            Transform::PartialSentence => "partial-sentence",
        }
    }
}

/// The transformed question, or `None` when the transform does not apply (no blank; no discourse
/// marker before it).
pub fn apply(t: Transform, q: &Question, markers: &[String]) -> Option<Question> {
    let b = q.blank.as_ref()?;
    let (before, after) = match t {
        Transform::NoCandidates => (
            remove_mentions(&b.before, &b.options),
            remove_mentions(&b.after, &b.options),
        ),
        Transform::PartialSentence => (after_last_marker(&b.before, markers)?, b.after.clone()),
    };
    let blank = Blank {
        before,
        after,
        options: b.options.clone(),
    };
    Some(Question {
        context: blank.before.clone(),
        endings: (0..blank.options.len())
            .map(|i| blank.filled_ending(i))
            .collect(),
        blank: Some(blank),
        ..q.clone()
    })
}

/// Removes whole-word, case-insensitive mentions of each option (longest first), then tidies spaces.
fn remove_mentions(text: &str, options: &[String]) -> String {
    let mut words: Vec<String> = text.split_whitespace().map(String::from).collect();
    let mut options: Vec<Vec<String>> = options
        .iter()
        .map(|o| o.split_whitespace().map(str::to_lowercase).collect())
        .collect();
    options.sort_by_key(|o| std::cmp::Reverse(o.len()));
    for option in options.iter().filter(|o| !o.is_empty()) {
        let mut i = 0;
        while i + option.len() <= words.len() {
            let matches = option.iter().enumerate().all(|(j, o)| {
                let w = words[i + j].to_lowercase();
                // The last word may carry punctuation or a possessive: "Dennis's", "Ian,".
                if j + 1 == option.len() {
                    w == *o
                        || w.strip_prefix(o.as_str()).is_some_and(|rest| {
                            rest.starts_with(['\'', '’', ',', '.', ';', ':', '!', '?'])
                        })
                } else {
                    w == *o
                }
            });
            if matches {
                let last = words[i + option.len() - 1].clone();
                let rest = &last[option.last().expect("non-empty").len().min(last.len())..];
                words.splice(
                    i..i + option.len(),
                    (!rest.is_empty()).then(|| rest.to_string()),
                );
            } else {
                i += 1;
            }
        }
    }
    words.join(" ")
}

fn after_last_marker(before: &str, markers: &[String]) -> Option<String> {
    let words: Vec<&str> = before.split_whitespace().collect();
    let bare = |w: &str| {
        w.trim_matches(|c: char| !c.is_alphanumeric())
            .to_lowercase()
    };
    let at = words
        .iter()
        .rposition(|w| markers.iter().any(|m| *m == bare(w)))?;
    Some(words[at + 1..].join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wino(sentence: &str, options: [&str; 2]) -> Question {
        let (before, after) = sentence.split_once('_').unwrap();
        let blank = Blank {
            before: before.trim().into(),
            after: after.trim().into(),
            options: options.map(String::from).to_vec(),
        };
        Question {
            id: "q".into(),
            group: "q".into(),
            context: blank.before.clone(),
            prefix: String::new(),
            endings: (0..2).map(|i| blank.filled_ending(i)).collect(),
            label: 1,
            split: None,
            blank: Some(blank),
            line: 1,
        }
    }

    #[test]
    fn no_candidates_removes_every_mention_and_keeps_possessives_apart() {
        let q = wino("Ian volunteered to eat Dennis's menudo after already having a bowl because _ despised eating intestine.", ["Ian", "Dennis"]);
        let t = apply(Transform::NoCandidates, &q, &[]).unwrap();
        assert_eq!(
            t.context,
            "volunteered to eat 's menudo after already having a bowl because"
        );
        assert_eq!(
            t.endings,
            [
                "Ian despised eating intestine.",
                "Dennis despised eating intestine."
            ]
        );
        assert_eq!(t.label, 1);
        let q = wino(
            "The trophy didn't fit in the brown suitcase because _ was too big.",
            ["the trophy", "the suitcase"],
        );
        let t = apply(Transform::NoCandidates, &q, &[]).unwrap();
        assert_eq!(
            t.context, "didn't fit in the brown suitcase because",
            "only whole mentions go"
        );
    }

    #[test]
    fn partial_sentence_keeps_what_follows_the_last_marker() {
        let markers: Vec<String> = ["because", "so"].map(String::from).to_vec();
        let q = wino(
            "Ian ate it so he was full, because _ was hungry.",
            ["Ian", "Dennis"],
        );
        let t = apply(Transform::PartialSentence, &q, &markers).unwrap();
        assert_eq!(t.context, "");
        assert_eq!(t.endings, ["Ian was hungry.", "Dennis was hungry."]);
        let q = wino("Ian ate it so _ was full.", ["Ian", "Dennis"]);
        assert_eq!(
            apply(Transform::PartialSentence, &q, &markers)
                .unwrap()
                .context,
            ""
        );
        let q = wino(
            "Ian gave Dennis the keys and then _ drove.",
            ["Ian", "Dennis"],
        );
        assert!(
            apply(Transform::PartialSentence, &q, &markers).is_none(),
            "no marker: the transform does not apply"
        );
    }
}
