//! A word vocabulary with counts, a minimum count and the special tokens the models need.

use std::collections::HashMap;

pub const PAD: &str = "<pad>";
pub const UNK: &str = "<unk>";
pub const BOS: &str = "<bos>";
pub const EOS: &str = "<eos>";
/// The special tokens, always the first ids in this order.
pub const SPECIALS: [&str; 4] = [PAD, UNK, BOS, EOS];

#[derive(Clone, Debug, PartialEq)]
pub struct Vocab {
    words: Vec<String>,
    counts: Vec<u64>,
    index: HashMap<String, u32>,
}

impl Vocab {
    /// Keeps words seen at least `min_count` times, most frequent first (ties by the word, so
    /// the ids do not depend on input order), after the special tokens.
    pub fn from_counts(counts: &HashMap<String, u64>, min_count: u64) -> Self {
        let mut kept: Vec<(&String, u64)> = counts
            .iter()
            .filter(|(w, c)| **c >= min_count && !SPECIALS.contains(&w.as_str()))
            .map(|(w, c)| (w, *c))
            .collect();
        kept.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut words: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
        let mut cs = vec![0; SPECIALS.len()];
        for (w, c) in kept {
            words.push(w.clone());
            cs.push(c);
        }
        Self::from_parts(words, cs)
    }

    /// The same vocabulary with words seen fewer than `min_count` times dropped (ids re-packed,
    /// order kept).
    pub fn with_min_count(&self, min_count: u64) -> Self {
        let n = SPECIALS.len();
        let keep = |i: &usize| *i < n || self.counts[*i] >= min_count;
        let idx: Vec<usize> = (0..self.words.len()).filter(keep).collect();
        Self::from_parts(
            idx.iter().map(|&i| self.words[i].clone()).collect(),
            idx.iter().map(|&i| self.counts[i]).collect(),
        )
    }

    fn from_parts(words: Vec<String>, counts: Vec<u64>) -> Self {
        let index = words
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), i as u32))
            .collect();
        Self {
            words,
            counts,
            index,
        }
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
    pub fn id(&self, word: &str) -> u32 {
        self.index.get(word).copied().unwrap_or(1)
    }
    pub fn word(&self, id: u32) -> &str {
        &self.words[id as usize]
    }
    pub fn pad_id(&self) -> u32 {
        0
    }
    pub fn unk_id(&self) -> u32 {
        1
    }
    pub fn bos_id(&self) -> u32 {
        2
    }
    pub fn eos_id(&self) -> u32 {
        3
    }

    /// One `word<TAB>count` line per id; the file a user opens to see what the models know.
    pub fn to_tsv(&self) -> String {
        let mut s = String::from("word\tcount\n");
        for (w, c) in self.words.iter().zip(&self.counts) {
            s.push_str(w);
            s.push('\t');
            s.push_str(&c.to_string());
            s.push('\n');
        }
        s
    }

    pub fn from_tsv(text: &str) -> Result<Self, String> {
        let mut words = Vec::new();
        let mut counts = Vec::new();
        for (i, line) in text.lines().enumerate().skip(1) {
            let (w, c) = line
                .split_once('\t')
                .ok_or_else(|| format!("line {}: expected word<TAB>count", i + 1))?;
            counts.push(
                c.parse()
                    .map_err(|_| format!("line {}: count `{c}` is not a number", i + 1))?,
            );
            words.push(w.to_string());
        }
        if words.len() < SPECIALS.len() || words[..SPECIALS.len()] != SPECIALS {
            return Err(format!(
                "the first {} words must be {}",
                SPECIALS.len(),
                SPECIALS.join(", ")
            ));
        }
        Ok(Self::from_parts(words, counts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_count_order_specials_and_round_trip() {
        let counts: HashMap<String, u64> = [("the", 10), ("a", 10), ("man", 3), ("rare", 1)]
            .iter()
            .map(|(w, c)| (w.to_string(), *c))
            .collect();
        let v = Vocab::from_counts(&counts, 2);
        assert_eq!(v.len(), 7);
        assert_eq!(
            (v.word(0), v.word(1), v.word(2), v.word(3)),
            (PAD, UNK, BOS, EOS)
        );
        assert_eq!((v.word(4), v.word(5), v.word(6)), ("a", "the", "man"));
        assert_eq!(v.id("rare"), v.unk_id());
        assert_eq!(Vocab::from_tsv(&v.to_tsv()).unwrap(), v);
        assert_eq!(
            Vocab::from_counts(&counts, 1).with_min_count(2),
            v,
            "re-thresholding equals counting anew"
        );
    }
}
