//! Synthetic multiple-choice data with a known artifact, for the audit's own tests and for
//! checking a detector set before trusting it on real data.

use af_core::Question;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What distinguishes the right ending, if anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planted {
    /// Nothing: every ending is drawn the same way.
    Nothing,
    /// The right ending contains this word (in place of one of its words, so lengths stay
    /// identically distributed); no wrong ending ever does. A word longer than the filler
    /// words (`zzgold`) makes the right ending's words longer on average too.
    Word(&'static str),
    /// The right ending is longer than every wrong one.
    Longest,
    /// The right ending has 7 words, the wrong ones alternate between 4-5 and 9-10: with an odd
    /// number of options the right one is the median length, nearest the middle by 2 words or more.
    MedianLength,
    /// The right ending's words are the 4-character ones (`w100` to `w299`), the wrong ones'
    /// any of the 300 (2 to 4 characters): the same number of words, longer words.
    LongWords,
}

/// `n` questions of `options` endings: a context of 8 words, a second-sentence start of 2, endings
/// of 5 to 9 words, all drawn from the same 300 filler words; each question its own group.
pub fn questions(n: usize, options: usize, planted: Planted, seed: u64) -> Vec<Question> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let words: Vec<String> = (0..300).map(|i| format!("w{i}")).collect();
    let sentence = |rng: &mut ChaCha8Rng, len: usize| -> Vec<String> {
        (0..len)
            .map(|_| words.choose(rng).expect("words").clone())
            .collect()
    };
    (0..n)
        .map(|i| {
            let label = rng.random_range(0..options);
            let mut lengths: Vec<usize> = (0..options).map(|_| rng.random_range(5..=9)).collect();
            if planted == Planted::MedianLength {
                let mut side = 0;
                for (o, len) in lengths.iter_mut().enumerate() {
                    *len = if o == label {
                        7
                    } else {
                        side += 1;
                        if side % 2 == 0 {
                            rng.random_range(4..=5)
                        } else {
                            rng.random_range(9..=10)
                        }
                    };
                }
            }
            if planted == Planted::Longest {
                let longest_wrong = lengths
                    .iter()
                    .enumerate()
                    .filter(|(o, _)| *o != label)
                    .map(|(_, l)| *l)
                    .max()
                    .unwrap_or(5);
                lengths[label] = longest_wrong + rng.random_range(1..=2);
            }
            let endings = lengths
                .iter()
                .enumerate()
                .map(|(o, &len)| {
                    let mut e = if planted == Planted::LongWords && o == label {
                        (0..len)
                            .map(|_| words[100..].choose(&mut rng).expect("words").clone())
                            .collect()
                    } else {
                        sentence(&mut rng, len)
                    };
                    if let (Planted::Word(w), true) = (planted, o == label) {
                        let at = rng.random_range(0..len);
                        e[at] = w.to_string();
                    }
                    format!("{}.", e.join(" "))
                })
                .collect();
            Question {
                id: format!("q{i}"),
                group: format!("g{i}"),
                context: format!("{}.", sentence(&mut rng, 8).join(" ")),
                prefix: sentence(&mut rng, 2).join(" "),
                endings,
                label,
                split: None,
                blank: None,
                line: i + 1,
            }
        })
        .collect()
}
