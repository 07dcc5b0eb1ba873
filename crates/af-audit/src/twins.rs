//! Twin questions (WinoGrande's pairs that differ in a trigger word and flip the answer): found
//! from ids (`...-1` / `...-2`, which the reader turns into a shared group) or, as "Back to Square
//! One" does for data without them, by a small word edit distance between sentences that have the
//! same options. A twin pair counts only when both of its questions are right.

use std::collections::HashMap;

use af_core::Question;
use serde::Serialize;

/// How the twins were found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TwinSource {
    /// Groups of exactly two questions (WinoGrande qIDs).
    Groups,
    /// Pairing by word edit distance.
    EditDistance,
}

/// Pairs of question indices that are twins: the groups of exactly two questions.
pub fn pairs_from_groups(questions: &[Question]) -> Vec<(usize, usize)> {
    let mut by_group: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, q) in questions.iter().enumerate() {
        by_group.entry(q.group.as_str()).or_default().push(i);
    }
    let mut pairs: Vec<(usize, usize)> = by_group
        .into_values()
        .filter(|v| v.len() == 2)
        .map(|v| (v[0], v[1]))
        .collect();
    pairs.sort_unstable();
    pairs
}

/// Pairs blank questions with the same options (in any order) whose sentences differ by at most
/// `max_edits` words, closest first; each question joins at most one pair.
pub fn pairs_by_edit_distance(
    questions: &[Question],
    tokens: &[Vec<String>],
    max_edits: usize,
) -> Vec<(usize, usize)> {
    let mut buckets: HashMap<Vec<String>, Vec<usize>> = HashMap::new();
    for (i, q) in questions.iter().enumerate() {
        if let Some(b) = &q.blank {
            let mut key: Vec<String> = b.options.iter().map(|o| o.to_lowercase()).collect();
            key.sort();
            buckets.entry(key).or_default().push(i);
        }
    }
    let mut candidates = Vec::new();
    for members in buckets.values() {
        for (x, &a) in members.iter().enumerate() {
            for &b in &members[x + 1..] {
                let d = word_edit_distance(&tokens[a], &tokens[b]);
                if d <= max_edits {
                    candidates.push((d, a.min(b), a.max(b)));
                }
            }
        }
    }
    candidates.sort_unstable();
    let mut taken = vec![false; questions.len()];
    let mut pairs = Vec::new();
    for (_, a, b) in candidates {
        if !taken[a] && !taken[b] {
            taken[a] = true;
            taken[b] = true;
            pairs.push((a, b));
        }
    }
    pairs.sort_unstable();
    pairs
}

/// Levenshtein distance over words.
pub fn word_edit_distance(a: &[String], b: &[String]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, x) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(x != y))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn edit_distance_counts_words() {
        assert_eq!(word_edit_distance(&words("a b c"), &words("a x c")), 1);
        assert_eq!(word_edit_distance(&words("a b c"), &words("a c")), 1);
        assert_eq!(word_edit_distance(&words("a b"), &words("c d e")), 3);
    }

    #[test]
    fn twins_pair_by_options_and_distance() {
        let q = |s: &str, o: [&str; 2]| Question {
            id: s.into(),
            group: s.into(),
            context: String::new(),
            prefix: String::new(),
            endings: vec![],
            label: 0,
            split: None,
            blank: Some(af_core::Blank {
                before: s.into(),
                after: String::new(),
                options: o.map(String::from).to_vec(),
            }),
            line: 0,
        };
        let qs = vec![
            q("Ian liked _ a lot", ["Ian", "Bo"]),
            q("Ian hated _ a lot", ["Bo", "Ian"]),
            q("Ian liked _ a lot", ["Ann", "Bo"]),
            q("something else entirely and long", ["Ian", "Bo"]),
        ];
        let tokens: Vec<Vec<String>> = qs
            .iter()
            .map(|q| words(&q.blank.as_ref().unwrap().before))
            .collect();
        assert_eq!(pairs_by_edit_distance(&qs, &tokens, 2), vec![(0, 1)]);
    }
}
