//! A greedy averaged-perceptron part-of-speech tagger (Collins 2002; the feature set follows
//! Honnibal's "A good POS tagger in about 200 lines", extended with lookahead ambiguity classes).
//!
//! It predicts universal tags (UPOS), with VERB and AUX refined by their Penn tag (`VERB_VBZ`,
//! `AUX_MD`, ...): the subject/ending split needs to tell a finite verb ("plays") from a
//! participle ("wearing"), which UPOS alone cannot. [`upos`] maps a tag back to plain UPOS.
//!
//! Features are 64-bit hashes of (template, word-hashes, tags), computed with a fixed hash so a
//! saved model means the same on every machine. The saved model keeps only the averaged
//! weights, sparse and quantised to 16 bits (see [`Tagger::to_bytes`]).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TaggerError {
    #[error("not a tagger model: {0}")]
    BadModel(String),
    #[error("no training sentences")]
    NoData,
    #[error("{0} tags in the training data; the tagger handles at most 64")]
    TooManyTags(usize),
}

/// A sentence with gold tags, as read from a treebank.
#[derive(Clone, Debug)]
pub struct TaggedSentence {
    pub words: Vec<String>,
    pub tags: Vec<String>,
}

/// The tag the tagger learns for a treebank token: UPOS, with VERB/AUX refined by the Penn tag.
pub fn training_tag(upos: &str, xpos: &str) -> String {
    const VERB_FORMS: [&str; 7] = ["VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "MD"];
    match upos {
        "VERB" | "AUX" => {
            let form = if VERB_FORMS.contains(&xpos) { xpos } else { "VB" };
            format!("{upos}_{form}")
        }
        _ => upos.to_string(),
    }
}

/// The universal tag of a tagger tag: `VERB_VBZ` -> `VERB`.
pub fn upos(tag: &str) -> &str {
    tag.split_once('_').map_or(tag, |(u, _)| u)
}

/// Identity hasher: feature keys are already well-mixed 64-bit hashes.
#[derive(Default)]
struct KeyHasher(u64);
impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys are hashed")
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}
type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    splitmix(h)
}

fn key(template: u64, a: u64, b: u64) -> u64 {
    splitmix(splitmix(template.wrapping_mul(0x1000_0000_01b3) ^ a) ^ b.rotate_left(29))
}

/// What the features need of one token, computed once per sentence.
struct TokenView {
    word: u64,
    suffixes: [u64; 4],
    prefixes: [u64; 3],
    shape: u64,
    /// Bit set of the tags this word had in training (0 when unseen).
    ambiguity: u64,
}

const START: u64 = 0x5354_4152_54;
const END: u64 = 0x454e_44;

/// Lowercased word with numbers collapsed, as the features see it.
fn normalise(word: &str) -> String {
    let first_digit = word.chars().next().is_some_and(|c| c.is_ascii_digit());
    if first_digit && word.chars().all(|c| c.is_ascii_digit() || ",.:/-".contains(c)) {
        return "!NUM".to_string();
    }
    word.to_lowercase()
}

fn shape(word: &str) -> String {
    let mut s = String::new();
    for c in word.chars() {
        let k = if c.is_uppercase() {
            'X'
        } else if c.is_lowercase() {
            'x'
        } else if c.is_ascii_digit() {
            'd'
        } else {
            c
        };
        if !s.ends_with(k) {
            s.push(k);
        }
    }
    s
}

fn view(word: &str, ambiguity: &KeyMap<u64>) -> TokenView {
    let norm = normalise(word);
    let chars: Vec<char> = norm.chars().collect();
    let affix = |n: usize, suffix: bool| -> u64 {
        let n = n.min(chars.len());
        let s: String = if suffix { chars[chars.len() - n..].iter().collect() } else { chars[..n].iter().collect() };
        fnv(s.as_bytes())
    };
    let w = fnv(norm.as_bytes());
    TokenView {
        word: w,
        suffixes: [affix(1, true), affix(2, true), affix(3, true), affix(4, true)],
        prefixes: [affix(1, false), affix(2, false), affix(3, false)],
        shape: fnv(shape(word).as_bytes()),
        ambiguity: ambiguity.get(&w).copied().unwrap_or(0),
    }
}

const N_FEATURES: usize = 30;

/// The feature keys of token `i`, given the tags already chosen for tokens before it.
fn features(views: &[TokenView], i: usize, prev: u64, prev2: u64, out: &mut [u64; N_FEATURES]) {
    let at = |j: isize| -> Option<&TokenView> { usize::try_from(j).ok().and_then(|j| views.get(j)) };
    let i_ = i as isize;
    let w = |j: isize| at(i_ + j).map_or(if j < 0 { START } else { END }, |v| v.word);
    let amb = |j: isize| at(i_ + j).map_or(if j < 0 { START } else { END }, |v| v.ambiguity);
    let suf3 = |j: isize| at(i_ + j).map_or(if j < 0 { START } else { END }, |v| v.suffixes[2]);
    let v = &views[i];
    let first = u64::from(i == 0);
    *out = [
        key(0, 0, 0),
        key(1, v.word, 0),
        key(2, v.suffixes[0], 0),
        key(3, v.suffixes[1], 0),
        key(4, v.suffixes[2], 0),
        key(5, v.suffixes[3], 0),
        key(6, v.prefixes[0], 0),
        key(7, v.prefixes[1], 0),
        key(8, v.prefixes[2], 0),
        key(9, v.shape, first),
        key(10, v.shape, 0),
        key(11, w(-1), 0),
        key(12, w(-2), 0),
        key(13, w(1), 0),
        key(14, w(2), 0),
        key(15, suf3(-1), 0),
        key(16, suf3(1), 0),
        key(17, prev, 0),
        key(18, prev2, 0),
        key(19, prev, prev2),
        key(20, prev, v.word),
        key(21, amb(1), 0),
        key(22, amb(2), 0),
        key(23, v.ambiguity, 0),
        key(24, w(-1), v.word),
        key(25, v.word, w(1)),
        key(26, prev, v.suffixes[2]),
        key(27, amb(1), v.word),
        key(28, prev, amb(1)),
        key(29, v.ambiguity, amb(1)),
    ];
}

/// Training-time weights: dense rows per feature, with the bookkeeping for averaging.
struct Averaged {
    n_tags: usize,
    rows: KeyMap<u32>,
    weights: Vec<f32>,
    totals: Vec<f64>,
    stamps: Vec<u32>,
    /// Instances seen so far.
    clock: u32,
}

impl Averaged {
    fn scores(&self, feats: &[u64], scores: &mut [f32]) {
        scores.fill(0.0);
        for f in feats {
            if let Some(&r) = self.rows.get(f) {
                let row = &self.weights[r as usize * self.n_tags..(r as usize + 1) * self.n_tags];
                for (s, w) in scores.iter_mut().zip(row) {
                    *s += w;
                }
            }
        }
    }

    fn update(&mut self, feats: &[u64], truth: usize, guess: usize) {
        for f in feats {
            let next = self.rows.len() as u32;
            let r = *self.rows.entry(*f).or_insert(next) as usize;
            if r == self.weights.len() / self.n_tags {
                self.weights.resize(self.weights.len() + self.n_tags, 0.0);
                self.totals.resize(self.totals.len() + self.n_tags, 0.0);
                self.stamps.resize(self.stamps.len() + self.n_tags, 0);
            }
            for (class, delta) in [(truth, 1.0f32), (guess, -1.0)] {
                let j = r * self.n_tags + class;
                self.totals[j] += f64::from(self.clock - self.stamps[j]) * f64::from(self.weights[j]);
                self.stamps[j] = self.clock;
                self.weights[j] += delta;
            }
        }
    }

    fn averaged(&self) -> Vec<f32> {
        (0..self.weights.len())
            .map(|j| {
                let total = self.totals[j] + f64::from(self.clock - self.stamps[j]) * f64::from(self.weights[j]);
                (total / f64::from(self.clock.max(1))) as f32
            })
            .collect()
    }
}

/// Training settings; the defaults are what the shipped model used.
#[derive(Clone, Debug)]
pub struct TrainOptions {
    pub epochs: usize,
    pub seed: u64,
    /// Words seen at least this often with one tag at least `dict_purity` of the time are tagged
    /// by lookup.
    pub dict_min_count: u32,
    pub dict_purity: f64,
}

impl Default for TrainOptions {
    fn default() -> Self {
        Self { epochs: 10, seed: 13, dict_min_count: 20, dict_purity: 0.99 }
    }
}

/// A trained tagger, ready to tag.
pub struct Tagger {
    tags: Vec<String>,
    dict: KeyMap<u8>,
    ambiguity: KeyMap<u64>,
    /// feature -> (first entry, entry count) in `entries`.
    index: KeyMap<(u32, u8)>,
    entries: Vec<(u8, f32)>,
}

impl Tagger {
    /// Trains on `sentences`; `on_epoch(epoch, training_accuracy)` reports progress.
    pub fn train(
        sentences: &[TaggedSentence],
        options: &TrainOptions,
        mut on_epoch: impl FnMut(usize, f64),
    ) -> Result<Self, TaggerError> {
        if sentences.is_empty() {
            return Err(TaggerError::NoData);
        }
        let mut tags: Vec<String> = sentences.iter().flat_map(|s| s.tags.iter().cloned()).collect();
        tags.sort();
        tags.dedup();
        if tags.len() > 64 {
            return Err(TaggerError::TooManyTags(tags.len()));
        }
        let tag_id: HashMap<&str, usize> = tags.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();

        // Per-word tag counts give the lookup dictionary and the ambiguity classes.
        let mut counts: KeyMap<Vec<u32>> = KeyMap::default();
        for s in sentences {
            for (w, t) in s.words.iter().zip(&s.tags) {
                counts.entry(fnv(normalise(w).as_bytes())).or_insert_with(|| vec![0; tags.len()])[tag_id[t.as_str()]] += 1;
            }
        }
        let mut dict = KeyMap::default();
        let mut ambiguity = KeyMap::default();
        for (w, c) in &counts {
            let total: u32 = c.iter().sum();
            let (best, n) = c.iter().enumerate().max_by_key(|(_, n)| **n).expect("at least one tag");
            if total >= options.dict_min_count && f64::from(*n) / f64::from(total) >= options.dict_purity {
                dict.insert(*w, best as u8);
            }
            // Ambiguity class: tags that make up at least 5% of the word's uses.
            let mask = c.iter().enumerate().filter(|(_, n)| **n * 20 >= total).fold(0u64, |m, (i, _)| m | 1 << i);
            ambiguity.insert(*w, mask);
        }

        let n_tags = tags.len();
        let mut model = Averaged {
            n_tags,
            rows: KeyMap::default(),
            weights: Vec::new(),
            totals: Vec::new(),
            stamps: Vec::new(),
            clock: 0,
        };
        let mut order: Vec<usize> = (0..sentences.len()).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
        let mut scores = vec![0.0f32; n_tags];
        let mut feats = [0u64; N_FEATURES];
        for epoch in 0..options.epochs {
            let (mut right, mut seen) = (0usize, 0usize);
            for &si in &order {
                let s = &sentences[si];
                let views: Vec<TokenView> = s.words.iter().map(|w| view(w, &ambiguity)).collect();
                let (mut prev, mut prev2) = (START, START);
                for (i, gold) in s.tags.iter().enumerate() {
                    let truth = tag_id[gold.as_str()];
                    let guess = match dict.get(&views[i].word) {
                        Some(&t) => t as usize,
                        None => {
                            features(&views, i, prev, prev2, &mut feats);
                            model.clock += 1;
                            model.scores(&feats, &mut scores);
                            let guess = argmax(&scores);
                            if guess != truth {
                                model.update(&feats, truth, guess);
                            }
                            guess
                        }
                    };
                    right += usize::from(guess == truth);
                    seen += 1;
                    prev2 = prev;
                    prev = guess as u64 + 1;
                }
            }
            on_epoch(epoch + 1, right as f64 / seen.max(1) as f64);
            order.shuffle(&mut rng);
        }

        let averaged = model.averaged();
        let mut index = KeyMap::default();
        let mut entries = Vec::new();
        for (&f, &r) in &model.rows {
            let row = &averaged[r as usize * n_tags..(r as usize + 1) * n_tags];
            let start = entries.len() as u32;
            entries.extend(row.iter().enumerate().filter(|(_, w)| **w != 0.0).map(|(c, w)| (c as u8, *w)));
            let n = entries.len() as u32 - start;
            if n > 0 {
                index.insert(f, (start, n as u8));
            }
        }
        Ok(Self { tags, dict, ambiguity, index, entries })
    }

    pub fn tags(&self) -> &[String] {
        &self.tags
    }

    /// Tags one tokenized sentence.
    pub fn tag<S: AsRef<str>>(&self, words: &[S]) -> Vec<&str> {
        self.tag_ids(words).into_iter().map(|t| self.tags[t].as_str()).collect()
    }

    /// Tags one tokenized sentence, as indices into [`Tagger::tags`].
    pub fn tag_ids<S: AsRef<str>>(&self, words: &[S]) -> Vec<usize> {
        let views: Vec<TokenView> = words.iter().map(|w| view(w.as_ref(), &self.ambiguity)).collect();
        let mut out = Vec::with_capacity(words.len());
        let mut scores = vec![0.0f32; self.tags.len()];
        let mut feats = [0u64; N_FEATURES];
        let (mut prev, mut prev2) = (START, START);
        for i in 0..views.len() {
            let t = match self.dict.get(&views[i].word) {
                Some(&t) => t as usize,
                None => {
                    features(&views, i, prev, prev2, &mut feats);
                    scores.fill(0.0);
                    for f in &feats {
                        if let Some(&(start, n)) = self.index.get(f) {
                            for &(c, w) in &self.entries[start as usize..start as usize + n as usize] {
                                scores[c as usize] += w;
                            }
                        }
                    }
                    argmax(&scores)
                }
            };
            out.push(t);
            prev2 = prev;
            prev = t as u64 + 1;
        }
        out
    }

    /// The model as bytes: header, tags, lookup dictionary, ambiguity classes, then the features
    /// sorted by key, delta-encoded, each with its non-zero weights quantised to i16 against one
    /// global scale. Weights that quantise to zero are dropped.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        put_varint(&mut out, self.tags.len() as u64);
        for t in &self.tags {
            put_varint(&mut out, t.len() as u64);
            out.extend_from_slice(t.as_bytes());
        }
        let mut dict: Vec<(u64, u8)> = self.dict.iter().map(|(k, v)| (*k, *v)).collect();
        dict.sort_unstable();
        put_varint(&mut out, dict.len() as u64);
        for (k, t) in dict {
            out.extend_from_slice(&k.to_le_bytes());
            out.push(t);
        }
        let mut amb: Vec<(u64, u64)> = self.ambiguity.iter().map(|(k, v)| (*k, *v)).collect();
        amb.sort_unstable();
        put_varint(&mut out, amb.len() as u64);
        for (k, m) in amb {
            out.extend_from_slice(&k.to_le_bytes());
            put_varint(&mut out, m);
        }
        let max = self.entries.iter().map(|(_, w)| w.abs()).fold(0.0f32, f32::max).max(f32::MIN_POSITIVE);
        let scale = max / f32::from(i16::MAX);
        out.extend_from_slice(&scale.to_le_bytes());
        let mut feats: Vec<(u64, Vec<(u8, i16)>)> = self
            .index
            .iter()
            .map(|(k, &(start, n))| {
                let ws = self.entries[start as usize..start as usize + n as usize]
                    .iter()
                    .map(|&(c, w)| (c, (w / scale).round() as i16))
                    .filter(|(_, q)| *q != 0)
                    .collect();
                (*k, ws)
            })
            .filter(|(_, ws): &(u64, Vec<(u8, i16)>)| !ws.is_empty())
            .collect();
        feats.sort_unstable_by_key(|(k, _)| *k);
        put_varint(&mut out, feats.len() as u64);
        let mut last = 0u64;
        for (k, ws) in feats {
            put_varint(&mut out, k - last);
            last = k;
            out.push(ws.len() as u8);
            for (c, q) in ws {
                out.push(c);
                out.extend_from_slice(&q.to_le_bytes());
            }
        }
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TaggerError> {
        let mut r = Reader { bytes, pos: 0 };
        if r.take(MAGIC.len())? != MAGIC {
            return Err(TaggerError::BadModel("wrong header (expected an af tagger model, version 1)".into()));
        }
        let n_tags = r.varint()? as usize;
        if n_tags == 0 || n_tags > 64 {
            return Err(TaggerError::BadModel(format!("{n_tags} tags")));
        }
        let mut tags = Vec::with_capacity(n_tags);
        for _ in 0..n_tags {
            let n = r.varint()? as usize;
            let t = std::str::from_utf8(r.take(n)?).map_err(|_| TaggerError::BadModel("tag is not UTF-8".into()))?;
            tags.push(t.to_string());
        }
        let mut dict = KeyMap::default();
        for _ in 0..r.varint()? {
            let k = r.u64()?;
            let t = r.take(1)?[0];
            if usize::from(t) >= n_tags {
                return Err(TaggerError::BadModel("dictionary tag out of range".into()));
            }
            dict.insert(k, t);
        }
        let mut ambiguity = KeyMap::default();
        for _ in 0..r.varint()? {
            let k = r.u64()?;
            ambiguity.insert(k, r.varint()?);
        }
        let scale = f32::from_le_bytes(r.take(4)?.try_into().expect("4 bytes"));
        let n_feats = r.varint()? as usize;
        let mut index = KeyMap::with_capacity_and_hasher(n_feats, Default::default());
        let mut entries = Vec::new();
        let mut k = 0u64;
        for _ in 0..n_feats {
            k = k.wrapping_add(r.varint()?);
            let n = r.take(1)?[0];
            let start = entries.len() as u32;
            for _ in 0..n {
                let c = r.take(1)?[0];
                if usize::from(c) >= n_tags {
                    return Err(TaggerError::BadModel("weight for a tag out of range".into()));
                }
                let q = i16::from_le_bytes(r.take(2)?.try_into().expect("2 bytes"));
                entries.push((c, f32::from(q) * scale));
            }
            index.insert(k, (start, n));
        }
        if r.pos != bytes.len() {
            return Err(TaggerError::BadModel(format!("{} trailing bytes", bytes.len() - r.pos)));
        }
        Ok(Self { tags, dict, ambiguity, index, entries })
    }

    /// The model trained on UD English-EWT that ships inside `af` (see models/README.md).
    pub fn builtin() -> Self {
        Self::from_bytes(BUILTIN_MODEL).expect("the built-in tagger model is valid")
    }
}

const MAGIC: &[u8] = b"AFTAGGER1\n";
static BUILTIN_MODEL: &[u8] = include_bytes!("../../../models/pos-tagger-ewt.aftag");

fn argmax(scores: &[f32]) -> usize {
    let mut best = 0;
    for (i, s) in scores.iter().enumerate() {
        if *s > scores[best] {
            best = i;
        }
    }
    best
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], TaggerError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(|| TaggerError::BadModel(format!("truncated at byte {}", self.pos)))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u64(&mut self) -> Result<u64, TaggerError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn varint(&mut self) -> Result<u64, TaggerError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(TaggerError::BadModel(format!("bad varint at byte {}", self.pos)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy() -> Vec<TaggedSentence> {
        let mk = |pairs: &[(&str, &str)]| TaggedSentence {
            words: pairs.iter().map(|p| p.0.to_string()).collect(),
            tags: pairs.iter().map(|p| p.1.to_string()).collect(),
        };
        let mut v = Vec::new();
        for _ in 0..30 {
            v.push(mk(&[("the", "DET"), ("man", "NOUN"), ("runs", "VERB_VBZ"), (".", "PUNCT")]));
            v.push(mk(&[("a", "DET"), ("dog", "NOUN"), ("runs", "VERB_VBZ"), ("fast", "ADV"), (".", "PUNCT")]));
            v.push(mk(&[("the", "DET"), ("runs", "NOUN"), ("end", "VERB_VBP"), (".", "PUNCT")]));
        }
        v
    }

    #[test]
    fn learns_context_and_survives_a_round_trip() {
        let t = Tagger::train(&toy(), &TrainOptions { epochs: 5, ..Default::default() }, |_, _| {}).unwrap();
        assert_eq!(t.tag(&["the", "man", "runs", "."]), ["DET", "NOUN", "VERB_VBZ", "PUNCT"]);
        assert_eq!(t.tag(&["the", "runs", "end", "."]), ["DET", "NOUN", "VERB_VBP", "PUNCT"]);
        let back = Tagger::from_bytes(&t.to_bytes()).unwrap();
        for s in toy() {
            assert_eq!(back.tag(&s.words), t.tag(&s.words));
        }
    }

    #[test]
    fn corrupt_models_are_rejected() {
        let t = Tagger::train(&toy(), &TrainOptions { epochs: 1, ..Default::default() }, |_, _| {}).unwrap();
        let bytes = t.to_bytes();
        assert!(Tagger::from_bytes(&bytes[..bytes.len() - 3]).is_err());
        assert!(Tagger::from_bytes(b"hello").is_err());
    }

    #[test]
    fn tags_map_to_upos() {
        assert_eq!(training_tag("VERB", "VBZ"), "VERB_VBZ");
        assert_eq!(training_tag("AUX", "GW"), "AUX_VB");
        assert_eq!(training_tag("NOUN", "NN"), "NOUN");
        assert_eq!(upos("AUX_MD"), "AUX");
    }
}
