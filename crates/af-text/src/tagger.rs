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
            let form = if VERB_FORMS.contains(&xpos) {
                xpos
            } else {
                "VB"
            };
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
    splitmix(af_core::hash::fnv1a64(bytes))
}

fn key(template: u64, a: u64, b: u64) -> u64 {
    splitmix(splitmix(template.wrapping_mul(0x1000_0000_01b3) ^ a) ^ b.rotate_left(29))
}

/// What the features need of one token, computed once per sentence.
struct TokenView {
    word: u64,
    /// The word with its case, for the lookup dictionary and case-sensitive features.
    cased: u64,
    suffixes: [u64; 4],
    prefixes: [u64; 3],
    shape: u64,
    /// Bit set of the tags this word had in training (0 when unseen).
    ambiguity: u64,
    /// What the whole sentence looks like (see [`views`]): headline case, fragment.
    sentence: u64,
}

/// The views of a sentence's words. Headlines ("Court Upholds Ban") and short fragments
/// (signatures, greetings) change what a capital letter means, so every token knows of them.
fn views<S: AsRef<str>>(words: &[S], ambiguity: &KeyMap<u64>) -> Vec<TokenView> {
    let mut views: Vec<TokenView> = words.iter().map(|w| view(w.as_ref(), ambiguity)).collect();
    let alpha: Vec<&str> = words
        .iter()
        .map(AsRef::as_ref)
        .filter(|w| w.chars().next().is_some_and(char::is_alphabetic))
        .collect();
    let capitalised = alpha
        .iter()
        .filter(|w| w.chars().next().is_some_and(char::is_uppercase))
        .count();
    let headline = alpha.len() >= 3 && capitalised * 10 >= alpha.len() * 6;
    let fragment = words.len() <= 3;
    let sentence = 4 | u64::from(headline) | u64::from(fragment) << 1;
    for v in &mut views {
        v.sentence = sentence;
    }
    views
}

const START: u64 = 0x0053_5441_5254;
const END: u64 = 0x0045_4e44;

/// Lowercased word with numbers collapsed, as the features see it.
fn normalise(word: &str) -> String {
    let first_digit = word.chars().next().is_some_and(|c| c.is_ascii_digit());
    if first_digit
        && word
            .chars()
            .all(|c| c.is_ascii_digit() || ",.:/-".contains(c))
    {
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
        let s: String = if suffix {
            chars[chars.len() - n..].iter().collect()
        } else {
            chars[..n].iter().collect()
        };
        fnv(s.as_bytes())
    };
    let w = fnv(norm.as_bytes());
    TokenView {
        word: w,
        cased: fnv(word.as_bytes()),
        suffixes: [
            affix(1, true),
            affix(2, true),
            affix(3, true),
            affix(4, true),
        ],
        prefixes: [affix(1, false), affix(2, false), affix(3, false)],
        shape: fnv(shape(word).as_bytes()),
        ambiguity: ambiguity.get(&w).copied().unwrap_or(0),
        sentence: 0,
    }
}

/// Features of the first pass; the second adds [`N_LOOKAHEAD`] on the first pass's tags ahead.
const N_BASE: usize = 38;
const N_LOOKAHEAD: usize = 6;
const N_FEATURES: usize = N_BASE + N_LOOKAHEAD;

/// The feature keys of token `i`, given the tags already chosen for tokens before it.
/// The feature keys of token `i`; with `ahead` (the first pass's tags, as tag id + 1), the
/// lookahead features too. Returns how many of `out` are set.
fn features(
    views: &[TokenView],
    i: usize,
    prev: u64,
    prev2: u64,
    ahead: Option<&[u64]>,
    out: &mut [u64; N_FEATURES],
) -> usize {
    let at =
        |j: isize| -> Option<&TokenView> { usize::try_from(j).ok().and_then(|j| views.get(j)) };
    let i_ = i as isize;
    let w = |j: isize| at(i_ + j).map_or(if j < 0 { START } else { END }, |v| v.word);
    let amb = |j: isize| at(i_ + j).map_or(if j < 0 { START } else { END }, |v| v.ambiguity);
    let suf3 = |j: isize| at(i_ + j).map_or(if j < 0 { START } else { END }, |v| v.suffixes[2]);
    let shape = |j: isize| at(i_ + j).map_or(if j < 0 { START } else { END }, |v| v.shape);
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
        key(30, v.cased, 0),
        key(31, shape(-1), v.shape),
        key(32, v.shape, shape(1)),
        key(33, prev, v.shape),
        key(34, v.cased, w(1)),
        key(35, w(-1), v.cased),
        key(36, v.shape, v.sentence),
        key(37, v.word, v.sentence),
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    let Some(ahead) = ahead else { return N_BASE };
    let tag_at = |j: usize| ahead.get(j).copied().unwrap_or(END);
    let (next, next2) = (tag_at(i + 1), tag_at(i + 2));
    out[N_BASE..].copy_from_slice(&[
        key(40, next, 0),
        key(41, next, next2),
        key(42, prev, next),
        key(43, v.word, next),
        key(44, tag_at(i), 0),
        key(45, tag_at(i), v.word),
    ]);
    N_FEATURES
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
                self.totals[j] +=
                    f64::from(self.clock - self.stamps[j]) * f64::from(self.weights[j]);
                self.stamps[j] = self.clock;
                self.weights[j] += delta;
            }
        }
    }

    fn averaged(&self) -> Vec<f32> {
        (0..self.weights.len())
            .map(|j| {
                let total = self.totals[j]
                    + f64::from(self.clock - self.stamps[j]) * f64::from(self.weights[j]);
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
    /// Folds for the jackknifed first-pass tags the second pass learns from (as it will see
    /// first-pass mistakes when tagging new text, it must see them in training too).
    pub jackknife_folds: usize,
    /// Words seen fewer times get no ambiguity class.
    pub ambiguity_min_count: u32,
    /// 1: left to right only; 2: a second pass that sees the first pass's tags ahead.
    pub passes: usize,
}

impl Default for TrainOptions {
    fn default() -> Self {
        Self {
            epochs: 10,
            seed: 13,
            dict_min_count: 20,
            dict_purity: 0.99,
            jackknife_folds: 5,
            ambiguity_min_count: 5,
            passes: 1,
        }
    }
}

/// The averaged weights of one pass, sparse: feature -> (first entry, entry count).
struct Weights {
    index: KeyMap<(u32, u8)>,
    entries: Vec<(u8, f32)>,
}

/// A trained tagger, ready to tag. Two passes: the first tags left to right; the second tags
/// again, seeing the first pass's tags of the words ahead.
pub struct Tagger {
    tags: Vec<String>,
    dict: KeyMap<u8>,
    ambiguity: KeyMap<u64>,
    passes: Vec<Weights>,
}

/// Tag ids as the features see them (id + 1; 0 is never a tag).
fn feature_tags(ids: &[usize]) -> Vec<u64> {
    ids.iter().map(|&t| t as u64 + 1).collect()
}

/// Greedy left-to-right decoding. With `margins`, also records for every token the score of
/// each tag minus the chosen tag's (None for dictionary words, which are not scored).
fn decode(
    views: &[TokenView],
    dict: &KeyMap<u8>,
    n_tags: usize,
    ahead: Option<&[u64]>,
    mut margins: Option<&mut Vec<Option<Vec<f32>>>>,
    mut score: impl FnMut(&[u64], &mut [f32]),
) -> Vec<usize> {
    let mut out = Vec::with_capacity(views.len());
    let mut scores = vec![0.0f32; n_tags];
    let mut feats = [0u64; N_FEATURES];
    let (mut prev, mut prev2) = (START, START);
    for i in 0..views.len() {
        let (t, margin) = match dict.get(&views[i].cased) {
            Some(&t) => (t as usize, None),
            None => {
                let n = features(views, i, prev, prev2, ahead, &mut feats);
                score(&feats[..n], &mut scores);
                let t = argmax(&scores);
                (
                    t,
                    margins
                        .is_some()
                        .then(|| scores.iter().map(|s| s - scores[t]).collect()),
                )
            }
        };
        if let Some(m) = margins.as_deref_mut() {
            m.push(margin);
        }
        out.push(t);
        prev2 = prev;
        prev = t as u64 + 1;
    }
    out
}

impl Weights {
    fn score(&self, feats: &[u64], scores: &mut [f32]) {
        scores.fill(0.0);
        for f in feats {
            if let Some(&(start, n)) = self.index.get(f) {
                for &(c, w) in &self.entries[start as usize..start as usize + n as usize] {
                    scores[c as usize] += w;
                }
            }
        }
    }
}

/// What one pass trains on: a sentence's token views, gold tag ids and, for the second pass,
/// the first pass's tags.
struct Example<'a> {
    views: &'a [TokenView],
    gold: &'a [usize],
    ahead: Option<&'a [u64]>,
}

fn train_pass(
    examples: &[Example],
    dict: &KeyMap<u8>,
    n_tags: usize,
    options: &TrainOptions,
    mut on_epoch: impl FnMut(usize, f64),
) -> Weights {
    let mut model = Averaged {
        n_tags,
        rows: KeyMap::default(),
        weights: Vec::new(),
        totals: Vec::new(),
        stamps: Vec::new(),
        clock: 0,
    };
    let mut order: Vec<usize> = (0..examples.len()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let mut scores = vec![0.0f32; n_tags];
    let mut feats = [0u64; N_FEATURES];
    for epoch in 0..options.epochs {
        let (mut right, mut seen) = (0usize, 0usize);
        for &e in &order {
            let ex = &examples[e];
            let (mut prev, mut prev2) = (START, START);
            for (i, &truth) in ex.gold.iter().enumerate() {
                let guess = match dict.get(&ex.views[i].cased) {
                    Some(&t) => t as usize,
                    None => {
                        let n = features(ex.views, i, prev, prev2, ex.ahead, &mut feats);
                        model.clock += 1;
                        model.scores(&feats[..n], &mut scores);
                        let guess = argmax(&scores);
                        if guess != truth {
                            model.update(&feats[..n], truth, guess);
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
        entries.extend(
            row.iter()
                .enumerate()
                .filter(|(_, w)| **w != 0.0)
                .map(|(c, w)| (c as u8, *w)),
        );
        let n = entries.len() as u32 - start;
        if n > 0 {
            index.insert(f, (start, n as u8));
        }
    }
    Weights { index, entries }
}

impl Tagger {
    /// Trains on `sentences`; `on_epoch(pass_epochs_done, training_accuracy)` reports progress,
    /// over `Tagger::training_epochs(options)` epochs in all.
    pub fn train(
        sentences: &[TaggedSentence],
        options: &TrainOptions,
        mut on_epoch: impl FnMut(usize, f64),
    ) -> Result<Self, TaggerError> {
        if sentences.is_empty() {
            return Err(TaggerError::NoData);
        }
        let mut tags: Vec<String> = sentences
            .iter()
            .flat_map(|s| s.tags.iter().cloned())
            .collect();
        tags.sort();
        tags.dedup();
        if tags.len() > 64 {
            return Err(TaggerError::TooManyTags(tags.len()));
        }
        let n_tags = tags.len();
        let tag_id: HashMap<&str, usize> = tags
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i))
            .collect();

        // The dictionary is case-sensitive ("US" is not "us"); ambiguity classes are not.
        let mut counts: KeyMap<Vec<u32>> = KeyMap::default();
        let mut cased_counts: KeyMap<Vec<u32>> = KeyMap::default();
        for s in sentences {
            for (w, t) in s.words.iter().zip(&s.tags) {
                counts
                    .entry(fnv(normalise(w).as_bytes()))
                    .or_insert_with(|| vec![0; n_tags])[tag_id[t.as_str()]] += 1;
                cased_counts
                    .entry(fnv(w.as_bytes()))
                    .or_insert_with(|| vec![0; n_tags])[tag_id[t.as_str()]] += 1;
            }
        }
        let mut dict = KeyMap::default();
        for (w, c) in &cased_counts {
            let total: u32 = c.iter().sum();
            let (best, n) = c
                .iter()
                .enumerate()
                .max_by_key(|(_, n)| **n)
                .expect("at least one tag");
            if total >= options.dict_min_count
                && f64::from(*n) / f64::from(total) >= options.dict_purity
            {
                dict.insert(*w, best as u8);
            }
        }
        let mut ambiguity = KeyMap::default();
        for (w, c) in &counts {
            let total: u32 = c.iter().sum();
            // Ambiguity class: tags that make up at least 5% of the word's uses. Rare words get
            // none: a class read off one or two uses is the gold tag itself in training, and
            // the model would learn to trust a feature that new text never has.
            if total < options.ambiguity_min_count {
                continue;
            }
            let mask = c
                .iter()
                .enumerate()
                .filter(|(_, n)| **n * 20 >= total)
                .fold(0u64, |m, (i, _)| m | 1 << i);
            ambiguity.insert(*w, mask);
        }

        let views: Vec<Vec<TokenView>> = sentences
            .iter()
            .map(|s| views(&s.words, &ambiguity))
            .collect();
        let gold: Vec<Vec<usize>> = sentences
            .iter()
            .map(|s| s.tags.iter().map(|t| tag_id[t.as_str()]).collect())
            .collect();
        fn examples<'a>(
            views: &'a [Vec<TokenView>],
            gold: &'a [Vec<usize>],
            ahead: Option<&'a [Vec<u64>]>,
            keep: impl Fn(usize) -> bool,
        ) -> Vec<Example<'a>> {
            (0..views.len())
                .filter(|&i| keep(i))
                .map(|i| Example {
                    views: &views[i],
                    gold: &gold[i],
                    ahead: ahead.map(|a| a[i].as_slice()),
                })
                .collect()
        }
        let mut epochs_done = 0;
        let mut report = |acc: f64| {
            epochs_done += 1;
            on_epoch(epochs_done, acc);
        };

        if options.passes < 2 {
            let first = train_pass(
                &examples(&views, &gold, None, |_| true),
                &dict,
                n_tags,
                options,
                |_, a| report(a),
            );
            return Ok(Self {
                tags,
                dict,
                ambiguity,
                passes: vec![first],
            });
        }
        // First-pass tags of every training sentence from a model that did not see it.
        let k = options.jackknife_folds.max(2);
        let mut ahead: Vec<Vec<u64>> = vec![Vec::new(); sentences.len()];
        for fold in 0..k {
            let weights = train_pass(
                &examples(&views, &gold, None, |i| i % k != fold),
                &dict,
                n_tags,
                options,
                |_, a| report(a),
            );
            for i in (fold..sentences.len()).step_by(k) {
                ahead[i] = feature_tags(&decode(&views[i], &dict, n_tags, None, None, |f, s| {
                    weights.score(f, s)
                }));
            }
        }
        let first = train_pass(
            &examples(&views, &gold, None, |_| true),
            &dict,
            n_tags,
            options,
            |_, a| report(a),
        );
        let second = train_pass(
            &examples(&views, &gold, Some(&ahead), |_| true),
            &dict,
            n_tags,
            options,
            |_, a| report(a),
        );
        Ok(Self {
            tags,
            dict,
            ambiguity,
            passes: vec![first, second],
        })
    }

    /// How many epochs [`Tagger::train`] runs in all (jackknife, then both passes).
    pub fn training_epochs(options: &TrainOptions) -> usize {
        if options.passes < 2 {
            options.epochs
        } else {
            options.epochs * (options.jackknife_folds.max(2) + 2)
        }
    }

    pub fn tags(&self) -> &[String] {
        &self.tags
    }

    /// Tags one tokenized sentence.
    pub fn tag<S: AsRef<str>>(&self, words: &[S]) -> Vec<&str> {
        self.tag_ids(words)
            .into_iter()
            .map(|t| self.tags[t].as_str())
            .collect()
    }

    /// Tags one tokenized sentence, as indices into [`Tagger::tags`].
    pub fn tag_ids<S: AsRef<str>>(&self, words: &[S]) -> Vec<usize> {
        self.decode_all(words, None)
    }

    /// Tags a sentence and says, per token, how far each other tag scored below the chosen one
    /// (0 for the chosen tag; None for words tagged by dictionary lookup). Lets a caller ask
    /// for the best tagging under a constraint, as the subject/ending split does.
    pub fn tag_with_margins<S: AsRef<str>>(
        &self,
        words: &[S],
    ) -> (Vec<usize>, Vec<Option<Vec<f32>>>) {
        let mut margins = Vec::with_capacity(words.len());
        let tags = self.decode_all(words, Some(&mut margins));
        (tags, margins)
    }

    fn decode_all<S: AsRef<str>>(
        &self,
        words: &[S],
        mut margins: Option<&mut Vec<Option<Vec<f32>>>>,
    ) -> Vec<usize> {
        let views = views(words, &self.ambiguity);
        let n = self.tags.len();
        let mut ahead: Option<Vec<u64>> = None;
        let mut tags = Vec::new();
        for (p, pass) in self.passes.iter().enumerate() {
            let last = p + 1 == self.passes.len();
            let m = if last { margins.as_deref_mut() } else { None };
            tags = decode(&views, &self.dict, n, ahead.as_deref(), m, |f, s| {
                pass.score(f, s)
            });
            ahead = Some(feature_tags(&tags));
        }
        tags
    }

    /// The model as bytes: header, tags, lookup dictionary, ambiguity classes, then per pass the
    /// features sorted by key, delta-encoded, each with its non-zero weights quantised to i16
    /// against one global scale. Weights that quantise to zero are dropped.
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
        put_varint(&mut out, self.passes.len() as u64);
        for pass in &self.passes {
            let max = pass
                .entries
                .iter()
                .map(|(_, w)| w.abs())
                .fold(0.0f32, f32::max)
                .max(f32::MIN_POSITIVE);
            let scale = max / f32::from(i16::MAX);
            out.extend_from_slice(&scale.to_le_bytes());
            let mut feats: Vec<(u64, Vec<(u8, i16)>)> = pass
                .index
                .iter()
                .map(|(k, &(start, n))| {
                    let ws = pass.entries[start as usize..start as usize + n as usize]
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
        }
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, TaggerError> {
        let mut r = Reader { bytes, pos: 0 };
        if r.take(MAGIC.len())? != MAGIC {
            return Err(TaggerError::BadModel(
                "wrong header (expected an af tagger model, version 2)".into(),
            ));
        }
        let n_tags = r.varint()? as usize;
        if n_tags == 0 || n_tags > 64 {
            return Err(TaggerError::BadModel(format!("{n_tags} tags")));
        }
        let mut tags = Vec::with_capacity(n_tags);
        for _ in 0..n_tags {
            let n = r.varint()? as usize;
            let t = std::str::from_utf8(r.take(n)?)
                .map_err(|_| TaggerError::BadModel("tag is not UTF-8".into()))?;
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
        let n_passes = r.varint()?;
        if n_passes == 0 || n_passes > 2 {
            return Err(TaggerError::BadModel(format!("{n_passes} passes")));
        }
        let mut passes = Vec::new();
        for _ in 0..n_passes {
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
                        return Err(TaggerError::BadModel(
                            "weight for a tag out of range".into(),
                        ));
                    }
                    let q = i16::from_le_bytes(r.take(2)?.try_into().expect("2 bytes"));
                    entries.push((c, f32::from(q) * scale));
                }
                index.insert(k, (start, n));
            }
            passes.push(Weights { index, entries });
        }
        if r.pos != bytes.len() {
            return Err(TaggerError::BadModel(format!(
                "{} trailing bytes",
                bytes.len() - r.pos
            )));
        }
        Ok(Self {
            tags,
            dict,
            ambiguity,
            passes,
        })
    }

    /// The model trained on UD English-EWT that ships inside `af` (see models/README.md).
    pub fn builtin() -> Self {
        Self::from_bytes(BUILTIN_MODEL).expect("the built-in tagger model is valid")
    }
}

const MAGIC: &[u8] = b"AFTAGGER2\n";
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
        let end =
            end.ok_or_else(|| TaggerError::BadModel(format!("truncated at byte {}", self.pos)))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u64(&mut self) -> Result<u64, TaggerError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
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
        Err(TaggerError::BadModel(format!(
            "bad varint at byte {}",
            self.pos
        )))
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
            v.push(mk(&[
                ("the", "DET"),
                ("man", "NOUN"),
                ("runs", "VERB_VBZ"),
                (".", "PUNCT"),
            ]));
            v.push(mk(&[
                ("a", "DET"),
                ("dog", "NOUN"),
                ("runs", "VERB_VBZ"),
                ("fast", "ADV"),
                (".", "PUNCT"),
            ]));
            v.push(mk(&[
                ("the", "DET"),
                ("runs", "NOUN"),
                ("end", "VERB_VBP"),
                (".", "PUNCT"),
            ]));
        }
        v
    }

    #[test]
    fn learns_context_and_survives_a_round_trip() {
        let t = Tagger::train(
            &toy(),
            &TrainOptions {
                epochs: 5,
                ..Default::default()
            },
            |_, _| {},
        )
        .unwrap();
        assert_eq!(
            t.tag(&["the", "man", "runs", "."]),
            ["DET", "NOUN", "VERB_VBZ", "PUNCT"]
        );
        assert_eq!(
            t.tag(&["the", "runs", "end", "."]),
            ["DET", "NOUN", "VERB_VBP", "PUNCT"]
        );
        let back = Tagger::from_bytes(&t.to_bytes()).unwrap();
        for s in toy() {
            assert_eq!(back.tag(&s.words), t.tag(&s.words));
        }
    }

    #[test]
    fn corrupt_models_are_rejected() {
        let t = Tagger::train(
            &toy(),
            &TrainOptions {
                epochs: 1,
                ..Default::default()
            },
            |_, _| {},
        )
        .unwrap();
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
