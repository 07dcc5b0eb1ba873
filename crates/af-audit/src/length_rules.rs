//! The baselines that pick an option by its length alone. Longest and shortest are the classic
//! ones; the median-length rule catches the opposite artifact: a pool whose wrong endings are
//! spread around the right one's length (a generator aimed at the gold's length, a length-gap
//! filter centred on it) makes the right ending the most typical length among its options, which
//! neither extreme sees (docs/notebook/2026-12-03-pretrained-length-shaping.md). The same
//! extremes of the mean length of an option's words catch a writer whose vocabulary is plainer
//! than the people's: counted on whole 4-way datasets, SmolLM2-135M's endings average 4.0
//! characters a word against the captions' 4.35, and the option with the longest words is the
//! gold on 37-46% of the questions (docs/notebook/2026-12-06-recipe-nucleus-095.md), whatever
//! the endings' lengths.

/// A rule that scores each option of a question from the options' lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LengthRule {
    Shortest,
    Longest,
    /// The option whose length is closest to the median of its question's option lengths.
    Median,
}

impl LengthRule {
    /// In the order the audit reports them.
    pub const ALL: [LengthRule; 3] = [
        LengthRule::Shortest,
        LengthRule::Longest,
        LengthRule::Median,
    ];

    /// The detector's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            LengthRule::Shortest => "shortest-ending",
            LengthRule::Longest => "longest-ending",
            LengthRule::Median => "median-length-ending",
        }
    }

    /// One score per option, higher for the option the rule picks; ties are left as ties (the
    /// audit credits 1/(options tied), see [`crate::credit`]).
    pub fn scores(self, lengths: &[f32]) -> Vec<f32> {
        match self {
            LengthRule::Shortest => lengths.iter().map(|l| -l).collect(),
            LengthRule::Longest => lengths.to_vec(),
            LengthRule::Median => {
                let m = median(lengths);
                lengths.iter().map(|l| -(l - m).abs()).collect()
            }
        }
    }
}

/// The baselines on the mean length of an option's words, in the order the audit reports them:
/// the rule and the detector's name.
pub const WORD_LENGTH_RULES: [(LengthRule, &str); 2] = [
    (LengthRule::Shortest, "shortest-words-ending"),
    (LengthRule::Longest, "longest-words-ending"),
];

/// The mean length in characters of the tokens that hold a letter or digit (punctuation is not
/// a word), leaving out a token between `[` and `]` (HellaSwag's `[title]`, `[step]`, which are
/// markup, not words); `None` for an option with no word.
pub fn mean_word_length(tokens: &[String]) -> Option<f32> {
    let is_tag =
        |i: usize| i > 0 && tokens[i - 1] == "[" && tokens.get(i + 1).is_some_and(|t| t == "]");
    let (chars, words) = tokens
        .iter()
        .enumerate()
        .filter(|&(i, t)| t.chars().any(char::is_alphanumeric) && !is_tag(i))
        .fold((0usize, 0usize), |(c, w), (_, t)| {
            (c + t.chars().count(), w + 1)
        });
    (words > 0).then(|| chars as f32 / words as f32)
}

/// A word-length rule's scores over the options that have words (so a median is theirs); an
/// option with no word is never picked (unless no option has one, when all tie).
pub fn word_length_scores(rule: LengthRule, lengths: &[Option<f32>]) -> Vec<f32> {
    let present: Vec<f32> = lengths.iter().flatten().copied().collect();
    let mut scores = rule.scores(&present).into_iter();
    lengths
        .iter()
        .map(|l| match l {
            Some(_) => scores.next().expect("one score per option with words"),
            None => f32::NEG_INFINITY,
        })
        .collect()
}

/// The median, the mean of the two middle values for an even count; 0 for none.
fn median(values: &[f32]) -> f32 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f32::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credit;

    #[test]
    fn each_rule_credits_its_option_and_shares_ties() {
        let lengths = [3.0, 7.0, 12.0, 8.0, 5.0];
        assert_eq!(credit(&LengthRule::Shortest.scores(&lengths), 0), 1.0);
        assert_eq!(credit(&LengthRule::Longest.scores(&lengths), 2), 1.0);
        assert_eq!(
            credit(&LengthRule::Median.scores(&lengths), 1),
            1.0,
            "median 7"
        );
        // An even count: the median of [4, 6, 9, 10] is 7.5, 6 and 9 are 1.5 away.
        let even = [4.0, 6.0, 9.0, 10.0];
        assert_eq!(credit(&LengthRule::Median.scores(&even), 1), 0.5);
        assert_eq!(credit(&LengthRule::Median.scores(&even), 0), 0.0);
    }

    #[test]
    fn a_mean_word_length_counts_characters_of_words_not_punctuation_or_tags() {
        let tokens = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            mean_word_length(&tokens("the dog runs .")),
            Some(10.0 / 3.0)
        );
        assert_eq!(mean_word_length(&tokens("café , 2 ...")), Some(2.5));
        assert_eq!(mean_word_length(&tokens("[ substeps ] go on")), Some(2.0));
        assert_eq!(mean_word_length(&tokens("[ a , b ]")), Some(1.0));
        assert_eq!(mean_word_length(&tokens(". !")), None);
        assert_eq!(mean_word_length(&[]), None);
    }

    #[test]
    fn an_option_with_no_word_is_picked_by_neither_word_length_rule() {
        let lengths = [Some(4.0), None, Some(3.0)];
        let (shortest, longest) = (
            word_length_scores(LengthRule::Shortest, &lengths),
            word_length_scores(LengthRule::Longest, &lengths),
        );
        assert_eq!((credit(&shortest, 2), credit(&shortest, 1)), (1.0, 0.0));
        assert_eq!((credit(&longest, 0), credit(&longest, 1)), (1.0, 0.0));
        let none = [None, None];
        assert_eq!(
            credit(&word_length_scores(LengthRule::Shortest, &none), 0),
            0.5
        );
    }
}
