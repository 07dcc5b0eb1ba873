//! Frozen sentence embeddings for the frozen-embedding members (`encoder`, `torchscript`): the
//! encoder a member's settings name ([`FrozenEncoder`]), loaded once; a pool's candidates (second
//! sentences) and contexts encoded once per run and cached in the run directory (`encoded/`,
//! keyed by the texts and by the member and model that encoded them), so a resumed or repeated
//! filter and the export read them back instead of encoding again; and the rows of an audit's or
//! a data map's table, encoded from their own text.

use std::path::{Path, PathBuf};

use af_io::pool_index::Pool;
use af_nn::committee::members::FrozenEncoder;
use af_nn::encoder::{Encoder, EncoderSource};
use af_nn::table::{CandidateTable, EncodedRows};
use af_nn::NnError;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::progress::Progress;

/// Texts per encoder call: the progress bar moves, and the host holds one chunk's tokens.
const CHUNK: usize = 4096;

/// The kind embeddings are kept in on `device`: half on a GPU (a full pool's are tens of GB in
/// f32), f32 on the CPU (where f16 arithmetic is slow).
fn storage_kind(device: Device) -> Kind {
    if device.is_cuda() {
        Kind::Half
    } else {
        Kind::Float
    }
}

/// Encodes `texts` in chunks of `chunk` into one `[texts, dim]` tensor on `device` (f16-rounded
/// values), advancing `bar`. With `kept`, chunk `c` is read from it when an interrupted run
/// encoded it already, and written to it once encoded.
fn encode_all(
    encoder: &Encoder,
    texts: &[String],
    device: Device,
    bar: &dyn crate::Bar,
    chunk: usize,
    kept: Option<(&KeptChunks, &str)>,
) -> Result<Tensor, NnError> {
    let out = Tensor::zeros(
        [texts.len() as i64, encoder.dim() as i64],
        (storage_kind(device), device),
    );
    for (c, texts) in texts.chunks(chunk).enumerate() {
        let mut rows = out.narrow(0, (c * chunk) as i64, texts.len() as i64);
        if let Some(vectors) =
            kept.and_then(|(k, name)| k.get(name, c, texts.len(), encoder.dim() as i64))
        {
            rows.copy_(&vectors);
        } else {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            // Rounded through f16 everywhere, as the cache keeps them: a run that reads the cache
            // computes exactly what the run that wrote it did.
            let vectors = encoder.encode(&refs)?.to_kind(Kind::Half);
            if let Some((k, name)) = kept {
                k.put(name, c, &vectors);
            }
            rows.copy_(&vectors);
        }
        bar.inc(texts.len() as u64);
    }
    Ok(out)
}

/// The chunks of a pool's embeddings encoded so far (`encoded/partial/`), kept until the whole
/// pool is: encoding a full pool takes tens of minutes on a CPU, and a kill then loses at most
/// one chunk. `key.json` says which texts, encoder and chunk size they belong to; chunks of
/// another key are removed.
struct KeptChunks {
    dir: PathBuf,
    /// Cleared when a chunk cannot be written (a full disk): encoding goes on, unkept.
    keeping: std::cell::Cell<bool>,
    /// Texts read back from chunks an interrupted run kept.
    reused: std::cell::Cell<usize>,
}

#[derive(PartialEq, Serialize, Deserialize)]
struct KeptKey {
    cache: CacheKey,
    chunk: usize,
}

impl KeptChunks {
    fn open(dir: PathBuf, key: KeptKey) -> anyhow::Result<Self> {
        let key_path = dir.join("key.json");
        let same = std::fs::read_to_string(&key_path)
            .ok()
            .and_then(|t| serde_json::from_str::<KeptKey>(&t).ok())
            .is_some_and(|k| k == key);
        if !same {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("cannot remove {}", dir.display()))?;
            }
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            af_core::atomic::write(&key_path, serde_json::to_string_pretty(&key)?.as_bytes())?;
        }
        Ok(Self {
            dir,
            keeping: std::cell::Cell::new(true),
            reused: std::cell::Cell::new(0),
        })
    }

    fn path(&self, name: &str, c: usize) -> PathBuf {
        self.dir.join(format!("{name}-{c:06}.safetensors"))
    }

    /// Chunk `c` of `name`, when it was kept whole (`rows` x `dim`); f16 on the CPU.
    fn get(&self, name: &str, c: usize, rows: usize, dim: i64) -> Option<Tensor> {
        let path = self.path(name, c);
        let t = Tensor::read_safetensors(&path)
            .ok()?
            .into_iter()
            .find(|(n, _)| n == name)?
            .1;
        let whole = t.size() == [rows as i64, dim] && t.kind() == Kind::Half;
        if whole {
            self.reused.set(self.reused.get() + rows);
        }
        whole.then_some(t)
    }

    /// Keeps chunk `c` of `name`, renamed into place once written whole. A chunk that cannot be
    /// written is warned of, and no later one is kept: only a resume would have needed them.
    fn put(&self, name: &str, c: usize, vectors: &Tensor) {
        if !self.keeping.get() {
            return;
        }
        let path = self.path(name, c);
        let tmp = path.with_extension("safetensors.tmp");
        let written = Tensor::write_safetensors(&[(name, vectors.to(Device::Cpu))], &tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))
            .and_then(|()| {
                std::fs::rename(&tmp, &path)
                    .with_context(|| format!("cannot write {}", path.display()))
            });
        if let Err(e) = written {
            tracing::warn!("{e:#}: the pool's embeddings are encoded on without keeping chunks, so a kill now loses them");
            self.keeping.set(false);
        }
    }
}

/// Embeddings of texts one encoder has encoded, by text: an audit's cross-fitted folds build a
/// table per fold from the same options, and each would otherwise encode them all again.
#[derive(Default)]
pub struct TextMemo {
    rows: std::collections::HashMap<String, Tensor>,
}

/// Attaches embeddings of each row's own text (an audit's options in one view, a data map's
/// options) to `table`; `texts` are the rows' texts in row order.
pub fn attach_texts(
    table: &mut CandidateTable,
    encoder: &Encoder,
    texts: &[String],
    memo: &mut TextMemo,
    progress: &dyn Progress,
) -> Result<(), NnError> {
    let text = encode_texts(encoder, texts, memo, table.device, progress)?;
    table.attach_encoded(EncodedRows {
        text,
        contexts: None,
    })?;
    Ok(())
}

/// `[texts, dim]` embeddings on `device` (f16-rounded, as everywhere): texts `memo` holds are not
/// encoded again; the others are, once each, and join it. A memo serves one encoder and one device.
pub fn encode_texts(
    encoder: &Encoder,
    texts: &[String],
    memo: &mut TextMemo,
    device: Device,
    progress: &dyn Progress,
) -> Result<Tensor, NnError> {
    let mut seen = std::collections::HashSet::new();
    let missing: Vec<String> = texts
        .iter()
        .filter(|t| !memo.rows.contains_key(*t) && seen.insert(t.as_str()))
        .cloned()
        .collect();
    if !missing.is_empty() {
        let bar = progress.bar("encoding options", missing.len() as u64);
        let encoded = encode_all(encoder, &missing, device, bar.as_ref(), CHUNK, None)?;
        bar.finish();
        for (i, text) in missing.into_iter().enumerate() {
            memo.rows.insert(text, encoded.get(i as i64));
        }
    }
    if texts.is_empty() {
        return Ok(Tensor::zeros(
            [0, encoder.dim() as i64],
            (storage_kind(device), device),
        ));
    }
    let rows: Vec<&Tensor> = texts.iter().map(|t| &memo.rows[t]).collect();
    Ok(Tensor::stack(&rows, 0))
}

impl TextMemo {
    /// Texts held.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// What `encoded/encoded.json` says of the cached embeddings.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct CacheKey {
    /// The member whose encoder wrote them (caches written before `torchscript` existed are the
    /// `encoder` member's).
    #[serde(default = "encoder_member")]
    member: String,
    /// The BERT directory or the TorchScript module.
    model: PathBuf,
    /// A TorchScript module's tokenizer and token limit (a BERT directory holds its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tokenizer: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_length: Option<usize>,
    rows: usize,
    contexts: usize,
    dim: i64,
    /// FNV-1a over every encoded text, in order (hex).
    texts: String,
}

fn encoder_member() -> String {
    "encoder".into()
}

/// What attaching a pool's embeddings did, for the stage's records.
#[derive(Debug, Serialize)]
pub struct PoolEncoding {
    /// The member whose encoder computed them.
    pub member: &'static str,
    pub model: PathBuf,
    pub rows: usize,
    pub contexts: usize,
    pub dim: i64,
    /// Read from the cache rather than encoded.
    pub cached: bool,
    /// Texts (second sentences and contexts) an interrupted run had encoded, read back.
    pub resumed: usize,
    pub seconds: f64,
}

/// Each candidate's second sentence (noun phrase, a space, the ending), as the pool's table row.
fn second_sentences(pool: &Pool) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::with_capacity(pool.rows);
    let mut item_at = 0;
    pool.for_each_part(|first, part| -> anyhow::Result<()> {
        for (r, cand) in (first..).zip(part) {
            while item_at + 1 < pool.offsets.len() && pool.offsets[item_at + 1] <= r {
                item_at += 1;
            }
            out.push(format!(
                "{} {}",
                pool.items[item_at].noun_phrase, cand.ending
            ));
        }
        Ok(())
    })?;
    Ok(out)
}

fn texts_hash<'a>(texts: impl IntoIterator<Item = &'a String>) -> String {
    let mut h = af_core::hash::Fnv1a::default();
    for t in texts {
        h.update(t.as_bytes());
        h.update(&[0]);
    }
    format!("{:016x}", h.finish())
}

/// Attaches the pool's embeddings to its table: each candidate's second sentence and each item's
/// context, read from `cache` when it holds them for the same texts and encoder, else encoded
/// with `encoder` and written there (the cache's key last, so an interrupted write is encoded
/// again). Encoding keeps its chunks in `cache/partial/` as it goes, so a killed run resumes
/// where it stopped.
pub fn attach_pool(
    table: &mut CandidateTable,
    pool: &Pool,
    encoder: &FrozenEncoder,
    cache: &Path,
    progress: &dyn Progress,
) -> anyhow::Result<PoolEncoding> {
    attach_pool_in_chunks(table, pool, encoder, cache, progress, CHUNK)
}

/// [`attach_pool`] with `chunk` texts per encoder call and kept chunk (tests resume small pools).
#[doc(hidden)]
pub fn attach_pool_in_chunks(
    table: &mut CandidateTable,
    pool: &Pool,
    encoder: &FrozenEncoder,
    cache: &Path,
    progress: &dyn Progress,
    chunk: usize,
) -> anyhow::Result<PoolEncoding> {
    let started = std::time::Instant::now();
    let device = table.device;
    let model = encoder.model().to_path_buf();
    let (tokenizer, max_length) = match &encoder.source {
        EncoderSource::Bert { .. } => (None, None),
        EncoderSource::TorchScript { tokenizer, .. } => {
            (Some(tokenizer.clone()), encoder.options.max_length)
        }
    };
    let sentences = second_sentences(pool)?;
    let contexts: Vec<String> = pool.items.iter().map(|i| i.context.clone()).collect();
    let context_of: Vec<i64> = (0..pool.items.len())
        .flat_map(|i| std::iter::repeat_n(i as i64, pool.sizes[i] + 1))
        .collect();
    anyhow::ensure!(
        context_of.len() == sentences.len(),
        "the pool's items cover {} rows, its parts {}",
        context_of.len(),
        sentences.len()
    );
    let texts = texts_hash(sentences.iter().chain(&contexts));
    let (key_path, tensors_path) = (
        cache.join("encoded.json"),
        cache.join("encoded.safetensors"),
    );
    let cached: Option<CacheKey> = std::fs::read_to_string(&key_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let wanted = |dim| CacheKey {
        member: encoder.member.to_string(),
        model: model.clone(),
        tokenizer: tokenizer.clone(),
        max_length,
        rows: sentences.len(),
        contexts: contexts.len(),
        dim,
        texts: texts.clone(),
    };
    if let Some(key) = cached.filter(|k| *k == wanted(k.dim)) {
        match read_cache(&tensors_path, &key, device) {
            Ok((text, ctx)) => {
                let of = Tensor::from_slice(&context_of).to(device);
                table.attach_encoded(EncodedRows {
                    text,
                    contexts: Some((ctx, of)),
                })?;
                return Ok(PoolEncoding {
                    member: encoder.member,
                    model,
                    rows: key.rows,
                    contexts: key.contexts,
                    dim: key.dim,
                    cached: true,
                    resumed: 0,
                    seconds: started.elapsed().as_secs_f64(),
                });
            }
            Err(e) => tracing::warn!("{e:#}: encoding again"),
        }
    }
    let loaded = encoder.load(device)?;
    let kept_dir = cache.join("partial");
    let kept = KeptChunks::open(
        kept_dir.clone(),
        KeptKey {
            cache: wanted(loaded.dim() as i64),
            chunk,
        },
    )?;
    let bar = progress.bar(
        "encoding the pool",
        (sentences.len() + contexts.len()) as u64,
    );
    let text = encode_all(
        &loaded,
        &sentences,
        device,
        bar.as_ref(),
        chunk,
        Some((&kept, "text")),
    )?;
    let ctx = encode_all(
        &loaded,
        &contexts,
        device,
        bar.as_ref(),
        chunk,
        Some((&kept, "contexts")),
    )?;
    bar.finish();
    let key = wanted(loaded.dim() as i64);
    let _ = std::fs::remove_file(&key_path);
    let named = [
        ("text", text.to(Device::Cpu).to_kind(Kind::Half)),
        ("contexts", ctx.to(Device::Cpu).to_kind(Kind::Half)),
    ];
    Tensor::write_safetensors(&named, &tensors_path)
        .with_context(|| format!("cannot write {}", tensors_path.display()))?;
    af_core::atomic::write(&key_path, serde_json::to_string_pretty(&key)?.as_bytes())?;
    // The whole pool is in the cache now: its chunks are not needed.
    let _ = std::fs::remove_dir_all(&kept_dir);
    let of = Tensor::from_slice(&context_of).to(device);
    table.attach_encoded(EncodedRows {
        text,
        contexts: Some((ctx, of)),
    })?;
    Ok(PoolEncoding {
        member: encoder.member,
        model,
        rows: key.rows,
        contexts: key.contexts,
        dim: key.dim,
        cached: false,
        resumed: kept.reused.get(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The cached text and context embeddings, checked against their key. They are stored in f16
/// (half the disk; the vectors are normalised, so f16 keeps 3 decimals of each cosine).
fn read_cache(path: &Path, key: &CacheKey, device: Device) -> anyhow::Result<(Tensor, Tensor)> {
    let named: std::collections::HashMap<String, Tensor> = Tensor::read_safetensors(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .into_iter()
        .collect();
    let get = |name: &str, rows: usize| -> anyhow::Result<Tensor> {
        let t = named
            .get(name)
            .with_context(|| format!("{} has no `{name}`", path.display()))?;
        anyhow::ensure!(
            t.size() == [rows as i64, key.dim],
            "{}: `{name}` is {:?}, expected [{rows}, {}]",
            path.display(),
            t.size(),
            key.dim
        );
        Ok(t.to(device).to_kind(storage_kind(device)))
    };
    Ok((get("text", key.rows)?, get("contexts", key.contexts)?))
}
