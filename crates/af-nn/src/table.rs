//! The committee's view of a pool: every candidate as token ids (words, the POS view, the
//! noun-phrase/ending indicator) and standardised LM features, on the device.
//!
//! [`TableAssembler`] builds a [`CandidateTable`] in chunks, so that the host never holds more
//! than one chunk of candidates; [`CandidateTable::save`] and [`CandidateTable::load`] move it
//! to and from files the same way. Tokens are stored unpadded, row after row; the committee pads
//! each batch on the device.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::NnError;

/// Indicator values of [`CandidateTable::indicator`].
pub const INDICATOR_PAD: i32 = 0;
pub const INDICATOR_NOUN_PHRASE: i32 = 1;
pub const INDICATOR_ENDING: i32 = 2;

/// Every candidate of a run, as tensors on the device. Tokens are stored unpadded, one row after
/// another (a pool's rows vary from a few tokens to the widest, and padding them all to the widest
/// would take three to four times the memory); ids are i16 where they fit and widened per batch.
pub struct CandidateTable {
    /// [tokens] word ids, row after row.
    pub words: Tensor,
    /// [tokens] POS-view ids.
    pub pos: Tensor,
    /// [tokens] 1 noun phrase (or marked), 2 ending.
    pub indicator: Tensor,
    /// [C] where each row's tokens start (i64).
    pub starts: Tensor,
    /// [C] tokens of each row (i64), on the device.
    pub lengths_on_device: Tensor,
    /// [C, 8] standardised LM features.
    pub features: Tensor,
    pub rows: i64,
    /// Tokens of each row (on the host: batches are cut and sorted by it).
    pub lengths: Vec<u16>,
    pub vocab: i64,
    pub pos_vocab: i64,
    /// The least width a batch is cut to: the widest convolution.
    pub min_len: i64,
    pub device: Device,
    /// Frozen sentence embeddings of the rows, when a member reads them ([`EncodedRows`]).
    pub encoded: Option<EncodedRows>,
    /// [C, F] f32 a pretrained LM's scores of the rows, when the `lm-likelihood` member reads
    /// them (its `features`), attached with [`CandidateTable::attach_lm_likelihood`]. Like the
    /// embeddings, not saved with the table: the caller caches them.
    pub lm_likelihood: Option<Tensor>,
    /// The same candidates as full-view rows (context, then second sentence; the context and
    /// noun phrase marked), with the same vocabulary, when a member reads the full view. Its own
    /// `encoded` and `full_view` are empty, its features zero.
    pub full_view: Option<Box<CandidateTable>>,
}

/// Frozen sentence embeddings of a table's rows (the `encoder` member's column), computed once
/// per run by the caller (af-pipeline owns the text) and attached with
/// [`CandidateTable::attach_encoded`].
pub struct EncodedRows {
    /// [C, D] each row's text: the second sentence in a pool's table, the view's text in an
    /// audit's. f32, or f16 on a GPU.
    pub text: Tensor,
    /// Where rows come with a context read apart (a pool's items): [K, D] each context's
    /// embedding and [C] (i64) the context of each row.
    pub contexts: Option<(Tensor, Tensor)>,
}

impl EncodedRows {
    /// Embedding size.
    pub fn dim(&self) -> i64 {
        self.text.size()[1]
    }

    fn to_device(&self, device: Device) -> Self {
        Self {
            text: self.text.to(device),
            contexts: self
                .contexts
                .as_ref()
                .map(|(c, of)| (c.to(device), of.to(device))),
        }
    }

    fn tensors(&self) -> Vec<&Tensor> {
        let mut v = vec![&self.text];
        if let Some((c, of)) = &self.contexts {
            v.extend([c, of]);
        }
        v
    }
}

/// The three token tensors of a table, flat.
struct FlatTokens {
    words: Tensor,
    pos: Tensor,
    indicator: Tensor,
}

/// The narrowest integer kind that holds ids below `n`.
fn id_kind(n: i64) -> Kind {
    if n <= i64::from(i16::MAX) {
        Kind::Int16
    } else {
        Kind::Int
    }
}

impl CandidateTable {
    /// A table from flat token tensors and per-row lengths (on the host).
    fn from_flat(
        tokens: FlatTokens,
        features: Tensor,
        lengths: Vec<u16>,
        vocab: i64,
        pos_vocab: i64,
        min_len: i64,
    ) -> Self {
        let FlatTokens {
            words,
            pos,
            indicator,
        } = tokens;
        let device = words.device();
        let lens: Vec<i64> = lengths.iter().map(|&l| i64::from(l)).collect();
        let mut starts = Vec::with_capacity(lens.len());
        let mut at = 0i64;
        for &l in &lens {
            starts.push(at);
            at += l;
        }
        Self {
            rows: lens.len() as i64,
            starts: Tensor::from_slice(&starts).to(device),
            lengths_on_device: Tensor::from_slice(&lens).to(device),
            lengths,
            words,
            pos,
            indicator,
            features,
            vocab,
            pos_vocab,
            min_len: min_len.max(1),
            device,
            encoded: None,
            lm_likelihood: None,
            full_view: None,
        }
    }

    /// Attaches the rows' frozen embeddings (moved to the table's device). Err: shapes that do
    /// not fit the table.
    pub fn attach_encoded(&mut self, encoded: EncodedRows) -> Result<(), NnError> {
        let bad = |message: String| NnError::InvalidSettings(format!("encoded rows: {message}"));
        let size = encoded.text.size();
        if size.len() != 2 || size[0] != self.rows {
            return Err(bad(format!(
                "text embeddings are {size:?}, the table has {} rows",
                self.rows
            )));
        }
        if let Some((contexts, of)) = &encoded.contexts {
            let (cs, os) = (contexts.size(), of.size());
            if cs.len() != 2 || cs[1] != size[1] || os != [self.rows] || of.kind() != Kind::Int64 {
                return Err(bad(format!(
                    "contexts {cs:?} and their index {os:?} {:?} do not fit {} rows of {}-d text",
                    of.kind(),
                    self.rows,
                    size[1]
                )));
            }
            if self.rows > 0
                && (of.min().int64_value(&[]) < 0 || of.max().int64_value(&[]) >= cs[0])
            {
                return Err(bad(format!(
                    "a row's context index is outside the {} contexts",
                    cs[0]
                )));
            }
        }
        self.encoded = Some(encoded.to_device(self.device));
        Ok(())
    }

    /// Attaches the rows' LM-likelihood features ([C, F], moved to the table's device as f32).
    /// Err: a shape that does not fit the table.
    pub fn attach_lm_likelihood(&mut self, features: Tensor) -> Result<(), NnError> {
        let size = features.size();
        if size.len() != 2 || size[0] != self.rows {
            return Err(NnError::InvalidSettings(format!(
                "LM-likelihood features are {size:?}, the table has {} rows",
                self.rows
            )));
        }
        self.lm_likelihood = Some(features.to_kind(Kind::Float).to(self.device));
        Ok(())
    }

    /// A table from padded [C, T] tensors (on any device); row lengths are read from `indicator`.
    pub fn from_tensors(
        words: Tensor,
        pos: Tensor,
        indicator: Tensor,
        features: Tensor,
        vocab: i64,
        pos_vocab: i64,
        min_len: usize,
    ) -> Self {
        let present = indicator.ne(i64::from(INDICATOR_PAD));
        let lengths = Vec::<i64>::try_from(
            present
                .sum_dim_intlist(1, false, Kind::Int64)
                .to_device(Device::Cpu),
        )
        .expect("i64 lengths");
        Self::from_flat(
            FlatTokens {
                words: words.masked_select(&present),
                pos: pos.masked_select(&present),
                indicator: indicator.masked_select(&present),
            },
            features,
            lengths
                .into_iter()
                .map(|l| u16::try_from(l).expect("a row is at most max-tokens (< 2^15) long"))
                .collect(),
            vocab,
            pos_vocab,
            min_len as i64,
        )
    }

    /// The same table on another device.
    pub fn to_device(&self, device: Device) -> Self {
        Self {
            words: self.words.to(device),
            pos: self.pos.to(device),
            indicator: self.indicator.to(device),
            starts: self.starts.to(device),
            lengths_on_device: self.lengths_on_device.to(device),
            features: self.features.to(device),
            rows: self.rows,
            lengths: self.lengths.clone(),
            vocab: self.vocab,
            pos_vocab: self.pos_vocab,
            min_len: self.min_len,
            device,
            encoded: self.encoded.as_ref().map(|e| e.to_device(device)),
            lm_likelihood: self.lm_likelihood.as_ref().map(|f| f.to(device)),
            full_view: self
                .full_view
                .as_ref()
                .map(|t| Box::new(t.to_device(device))),
        }
    }

    /// `rows` (table row ids) on the table's device, where the committee's batches gather them.
    pub fn upload(&self, rows: &[i64]) -> Tensor {
        Tensor::from_slice(rows).to(self.device)
    }

    /// Every batch's rows on the device in one copy: a view per batch of one tensor. On a GPU a
    /// copy from the host's pageable memory waits for the device's queue to drain, so a loop
    /// that uploaded each batch's rows would stop the device once per batch.
    pub fn upload_all<'a>(&self, batches: impl IntoIterator<Item = &'a [i64]>) -> Vec<Tensor> {
        let mut flat = Vec::new();
        let mut spans = Vec::new();
        for b in batches {
            spans.push((flat.len() as i64, b.len() as i64));
            flat.extend_from_slice(b);
        }
        let all = self.upload(&flat);
        spans
            .into_iter()
            .map(|(start, len)| all.narrow(0, start, len))
            .collect()
    }

    /// The width a batch of `rows` is cut to: its longest row, at least `min_len`.
    pub(crate) fn width_of(&self, rows: &[i64]) -> i64 {
        let longest = rows
            .iter()
            .map(|&r| i64::from(self.lengths[r as usize]))
            .max()
            .unwrap_or(0);
        longest.max(self.min_len)
    }

    /// Bytes the table's tensors take on its device.
    pub fn bytes(&self) -> u64 {
        [
            &self.words,
            &self.pos,
            &self.indicator,
            &self.starts,
            &self.lengths_on_device,
            &self.features,
        ]
        .into_iter()
        .chain(self.encoded.iter().flat_map(EncodedRows::tensors))
        .chain(self.lm_likelihood.iter())
        .map(|t| (t.numel() * t.kind().elt_size_in_bytes()) as u64)
        .sum::<u64>()
            + self.full_view.as_ref().map_or(0, |t| t.bytes())
    }

    /// Tokens in all rows.
    pub fn tokens(&self) -> i64 {
        self.words.size()[0]
    }
}

/// Where a saved table keeps its full-view rows: a saved table of its own.
const FULL_VIEW_DIR: &str = "full-view";

/// What a saved table's directory says about it (`table.json`).
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct SavedTable {
    rows: i64,
    tokens: i64,
    vocab: i64,
    pos_vocab: i64,
    min_len: i64,
    /// Rows per file; file i holds rows i*rows_per_file.. (the last fewer).
    rows_per_file: i64,
    files: usize,
}

impl CandidateTable {
    /// Writes the table to `dir` as `table.json` and `part-NNN.safetensors` files of at most
    /// `rows_per_file` rows each, so that the host holds one file's rows at a time.
    pub fn save(&self, dir: &std::path::Path, rows_per_file: i64) -> Result<(), NnError> {
        let bad = |path: &std::path::Path, e: &dyn std::fmt::Display| NnError::Checkpoint {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(dir).map_err(|e| bad(dir, &e))?;
        let per = rows_per_file.max(1);
        let files = (self.rows + per - 1) / per;
        let lengths = Tensor::from_slice(
            &self
                .lengths
                .iter()
                .map(|&l| i16::try_from(l).expect("a row is at most max-tokens (< 2^15) long"))
                .collect::<Vec<_>>(),
        );
        let mut token = 0i64;
        for f in 0..files {
            let (start, n) = (f * per, per.min(self.rows - f * per));
            let count: i64 = self.lengths[start as usize..(start + n) as usize]
                .iter()
                .map(|&l| i64::from(l))
                .sum();
            let flat = |t: &Tensor| {
                t.narrow(0, token, count)
                    .to_device(Device::Cpu)
                    .contiguous()
            };
            let named = [
                ("words", flat(&self.words)),
                ("pos", flat(&self.pos)),
                ("indicator", flat(&self.indicator)),
                (
                    "features",
                    self.features
                        .narrow(0, start, n)
                        .to_device(Device::Cpu)
                        .contiguous(),
                ),
                ("lengths", lengths.narrow(0, start, n).contiguous()),
            ];
            let path = dir.join(format!("part-{f:03}.safetensors"));
            Tensor::write_safetensors(&named, &path).map_err(|e| bad(&path, &e))?;
            token += count;
        }
        let meta = SavedTable {
            rows: self.rows,
            tokens: self.tokens(),
            vocab: self.vocab,
            pos_vocab: self.pos_vocab,
            min_len: self.min_len,
            rows_per_file: per,
            files: files as usize,
        };
        let full = dir.join(FULL_VIEW_DIR);
        match &self.full_view {
            Some(t) => t.save(&full, rows_per_file)?,
            None if full.exists() => std::fs::remove_dir_all(&full).map_err(|e| bad(&full, &e))?,
            None => {}
        }
        let path = dir.join("table.json");
        // Written last: a directory without it is an interrupted save.
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&meta).expect("plain struct"),
        )
        .map_err(|e| bad(&path, &e))
    }

    /// Reads a table written by [`CandidateTable::save`] onto `device`, one file at a time.
    pub fn load(dir: &std::path::Path, device: Device) -> Result<Self, NnError> {
        let bad = |path: &std::path::Path, message: String| NnError::Checkpoint {
            path: path.to_path_buf(),
            message,
        };
        let meta_path = dir.join("table.json");
        let text =
            std::fs::read_to_string(&meta_path).map_err(|e| bad(&meta_path, e.to_string()))?;
        let meta: SavedTable = serde_json::from_str(&text)
            .map_err(|e| bad(&meta_path, format!("not a saved table: {e}")))?;
        let words = Tensor::zeros([meta.tokens], (id_kind(meta.vocab), device));
        let pos = Tensor::zeros([meta.tokens], (id_kind(meta.pos_vocab), device));
        let indicator = Tensor::zeros([meta.tokens], (Kind::Int8, device));
        let features = Tensor::zeros([meta.rows, 8], (Kind::Float, device));
        let mut lengths: Vec<u16> = Vec::with_capacity(meta.rows as usize);
        let (mut row, mut token) = (0i64, 0i64);
        for f in 0..meta.files {
            let path = dir.join(format!("part-{f:03}.safetensors"));
            let named: HashMap<String, Tensor> = Tensor::read_safetensors(&path)
                .map_err(|e| bad(&path, e.to_string()))?
                .into_iter()
                .collect();
            let get = |name: &str| {
                named
                    .get(name)
                    .ok_or_else(|| bad(&path, format!("no tensor `{name}`")))
            };
            let file_lengths: Vec<i16> = Vec::<i16>::try_from(get("lengths")?)
                .map_err(|e: tch::TchError| bad(&path, e.to_string()))?;
            let n = file_lengths.len() as i64;
            let count: i64 = file_lengths.iter().map(|&l| i64::from(l)).sum();
            if row + n > meta.rows || token + count > meta.tokens {
                return Err(bad(
                    &path,
                    format!(
                        "more rows or tokens than the {} and {} of table.json",
                        meta.rows, meta.tokens
                    ),
                ));
            }
            for (dst, name, at, len) in [
                (&words, "words", token, count),
                (&pos, "pos", token, count),
                (&indicator, "indicator", token, count),
                (&features, "features", row, n),
            ] {
                let src = get(name)?;
                if src.size()[0] != len
                    || src.kind() != dst.kind()
                    || src.size()[1..] != dst.size()[1..]
                {
                    return Err(bad(
                        &path,
                        format!(
                            "`{name}` is {:?} {:?}, expected {len} rows of {:?}",
                            src.size(),
                            src.kind(),
                            dst.kind()
                        ),
                    ));
                }
                dst.narrow(0, at, len).copy_(src);
            }
            if let Some(l) = file_lengths.iter().find(|&&l| l < 0) {
                return Err(bad(
                    &path,
                    format!("a row of {l} tokens: not a table this af wrote"),
                ));
            }
            lengths.extend(file_lengths.into_iter().map(|l| l as u16));
            row += n;
            token += count;
        }
        if row != meta.rows || token != meta.tokens {
            return Err(bad(
                dir,
                format!(
                    "{row} rows and {token} tokens in the files, {} and {} in table.json",
                    meta.rows, meta.tokens
                ),
            ));
        }
        let mut table = Self::from_flat(
            FlatTokens {
                words,
                pos,
                indicator,
            },
            features,
            lengths,
            meta.vocab,
            meta.pos_vocab,
            meta.min_len,
        );
        let full = dir.join(FULL_VIEW_DIR);
        if full.join("table.json").exists() {
            let view = Self::load(&full, device)?;
            if view.rows != table.rows {
                return Err(bad(
                    &full,
                    format!("{} full-view rows for {} rows", view.rows, table.rows),
                ));
            }
            table.full_view = Some(Box::new(view));
        }
        Ok(table)
    }
}

/// A candidate before the vocabularies are known: ids into a run-wide list of distinct words
/// (in order of first sight), and tag ids.
pub struct RawCandidate<'a> {
    pub interned: &'a [u32],
    pub tags: &'a [u8],
    pub marked: std::ops::Range<usize>,
    /// Raw LM features (standardised when the table is finished).
    pub features: [f32; 8],
}

/// Builds a [`CandidateTable`] in chunks, so that the host never holds more than one chunk of
/// candidates: each chunk goes to the device as interned ids and tags, and only when every
/// word has been counted are the ids mapped to the committee's vocabularies, on the device.
pub struct TableAssembler {
    device: Device,
    /// Per chunk, flat: [tokens] i32 interned ids, [tokens] u8 tags, [tokens] i8 indicator, and
    /// [rows, 8] f32 features.
    chunks: Vec<(Tensor, Tensor, Tensor, Tensor)>,
    lengths: Vec<u16>,
}

/// How interned words become the committee's ids (see `af-cli`'s table builder).
pub struct Vocabularies {
    /// Per interned word: its word id (1 when unknown).
    pub word_of: Vec<i32>,
    /// Per interned word: its POS-view id if it is kept as a word, else -1 (the tag is used).
    pub pos_word_of: Vec<i32>,
    /// POS-view id of tag 0; tag t is `tag_base + t`.
    pub tag_base: i32,
    pub vocab: i64,
    pub pos_vocab: i64,
}

impl TableAssembler {
    pub fn new(device: Device) -> Self {
        Self {
            device,
            chunks: Vec::new(),
            lengths: Vec::new(),
        }
    }

    pub fn rows(&self) -> usize {
        self.lengths.len()
    }

    pub fn push(&mut self, rows: &[RawCandidate]) {
        if rows.is_empty() {
            return;
        }
        let tokens: usize = rows.iter().map(|r| r.interned.len()).sum();
        let mut interned = Vec::with_capacity(tokens);
        let mut tags = Vec::with_capacity(tokens);
        let mut indicator = Vec::with_capacity(tokens);
        let mut features = Vec::with_capacity(rows.len() * 8);
        for c in rows {
            interned.extend(c.interned.iter().map(|&id| id as i32));
            tags.extend_from_slice(c.tags);
            indicator.extend((0..c.interned.len()).map(|j| {
                if c.marked.contains(&j) {
                    INDICATOR_NOUN_PHRASE as i8
                } else {
                    INDICATOR_ENDING as i8
                }
            }));
            features.extend_from_slice(&c.features);
            // The table builder cuts rows to `[committee] max-tokens`, which validation keeps
            // below 2^15 (lengths are saved as i16).
            self.lengths.push(
                u16::try_from(c.interned.len())
                    .ok()
                    .filter(|&l| l <= i16::MAX as u16)
                    .expect("rows are cut to max-tokens"),
            );
        }
        self.chunks.push((
            Tensor::from_slice(&interned).to(self.device),
            Tensor::from_slice(&tags).to(self.device),
            Tensor::from_slice(&indicator).to(self.device),
            Tensor::from_slice(&features)
                .view([rows.len() as i64, 8])
                .to(self.device),
        ));
    }

    /// The table: ids mapped, features standardised with `mean` and `std`; batches are cut to at
    /// least `min_len` tokens. Chunks are freed as they are copied in.
    pub fn finish(
        self,
        v: &Vocabularies,
        mean: [f32; 8],
        std: [f32; 8],
        min_len: usize,
    ) -> CandidateTable {
        let _guard = tch::no_grad_guard();
        let dev = self.device;
        let rows = self.lengths.len() as i64;
        let tokens: i64 = self.lengths.iter().map(|&l| i64::from(l)).sum();
        let (word_kind, pos_kind) = (id_kind(v.vocab), id_kind(v.pos_vocab));
        let words = Tensor::zeros([tokens], (word_kind, dev));
        let pos = Tensor::zeros([tokens], (pos_kind, dev));
        let indicator = Tensor::zeros([tokens], (Kind::Int8, dev));
        let features = Tensor::zeros([rows, 8], (Kind::Float, dev));
        let word_of = Tensor::from_slice(&v.word_of).to(dev);
        let pos_word_of = Tensor::from_slice(&v.pos_word_of).to(dev);
        let (mean, std) = (
            Tensor::from_slice(&mean).to(dev),
            Tensor::from_slice(&std).to(dev),
        );
        let (mut row, mut token) = (0, 0);
        for (interned, tags, ind, feats) in self.chunks {
            let (n, count) = (feats.size()[0], interned.size()[0]);
            let ids = interned.to_kind(Kind::Int64);
            let kept = pos_word_of.index_select(0, &ids);
            let tag = tags.to_kind(Kind::Int) + i64::from(v.tag_base);
            words
                .narrow(0, token, count)
                .copy_(&word_of.index_select(0, &ids).to_kind(word_kind));
            pos.narrow(0, token, count)
                .copy_(&kept.where_self(&kept.ge(0), &tag).to_kind(pos_kind));
            indicator.narrow(0, token, count).copy_(&ind);
            features.narrow(0, row, n).copy_(&((feats - &mean) / &std));
            row += n;
            token += count;
        }
        CandidateTable::from_flat(
            FlatTokens {
                words,
                pos,
                indicator,
            },
            features,
            self.lengths,
            v.vocab,
            v.pos_vocab,
            min_len as i64,
        )
    }
}
