//! Frozen sentence encoders: af's own BERT-family implementation (BERT, MiniLM) on tch, and a
//! TorchScript module for models af does not implement ([`torchscript`]). One [`Encoder`] type
//! owns what both share: the `tokenizer.json` tokenizer, length-sorted batches and L2
//! normalisation, so either backend gives the unit vectors the committee's head and the run's
//! cache use.
//!
//! The BERT backend: token, position and segment embeddings with LayerNorm, post-norm
//! self-attention layers, mean pooling over the attention mask (or the `[CLS]` vector, as the
//! directory's `1_Pooling/config.json` says), as sentence-transformers computes them. Everything
//! comes from a Hugging Face model directory: `config.json`, `model.safetensors` and
//! `tokenizer.json` (plus sentence-transformers' `sentence_bert_config.json` and
//! `1_Pooling/config.json` when present). Nothing is downloaded. `scripts/setup` installs the
//! default model, all-MiniLM-L6-v2, and exports its directory as [`ENCODER_DIR_ENV`].

mod config;
pub mod cross;
mod model;
mod torchscript;
pub mod toy;

use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};
use thiserror::Error;
use tokenizers::{Tokenizer, TruncationParams};

pub use config::{Activation, BertConfig, Pooling};
pub use cross::{CrossEncoder, FineTuneOptions, FineTuneReport};
use model::Bert;
use torchscript::ScriptModule;
pub use torchscript::DEFAULT_MAX_LENGTH as TORCHSCRIPT_DEFAULT_MAX_LENGTH;

/// The environment variable `scripts/setup --env` sets to the default model's directory.
pub const ENCODER_DIR_ENV: &str = "AF_ENCODER_DIR";

#[derive(Debug, Error)]
pub enum EncoderError {
    #[error("encoder model directory {dir}: {message}")]
    Dir { dir: PathBuf, message: String },
    /// A model file that is missing a piece or does not parse: the message says what.
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("tokenizing with {path}: {message}")]
    Tokenize { path: PathBuf, message: String },
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

/// How an [`Encoder`] runs.
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderOptions {
    /// Texts per forward pass. Texts are sorted by token count first, so a batch pads little.
    pub batch_size: usize,
    /// Truncate longer inputs to this many tokens (special tokens included); `None`: the model's
    /// own limit (sentence-transformers' `max_seq_length`, else the position table), or
    /// [`TORCHSCRIPT_DEFAULT_MAX_LENGTH`] for a TorchScript module, which does not say its own.
    pub max_length: Option<usize>,
    /// Half precision on CUDA (ignored on the CPU, where f16 matmuls are slow). Pooling and
    /// normalisation stay in f32. The BERT backend only: a TorchScript module runs in the
    /// precision it was exported in.
    pub half: bool,
}

impl Default for EncoderOptions {
    fn default() -> Self {
        Self {
            batch_size: 64,
            max_length: None,
            half: false,
        }
    }
}

/// What a model directory holds, read without loading its weights (for `af doctor`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ModelInfo {
    pub dir: PathBuf,
    pub model_type: Option<String>,
    pub hidden_size: usize,
    pub layers: usize,
    pub heads: usize,
    pub vocab_size: usize,
    pub max_length: usize,
    pub pooling: String,
    pub weights_bytes: u64,
}

const CONFIG: &str = "config.json";
const WEIGHTS: &str = "model.safetensors";
const TOKENIZER: &str = "tokenizer.json";

fn require(dir: &Path, file: &str) -> Result<PathBuf, EncoderError> {
    if !dir.is_dir() {
        return Err(EncoderError::Dir {
            dir: dir.to_path_buf(),
            message: "is not a directory".into(),
        });
    }
    let path = dir.join(file);
    if path.is_file() {
        return Ok(path);
    }
    let hint = if file == WEIGHTS && dir.join("pytorch_model.bin").exists() {
        " (it has pytorch_model.bin: convert it to safetensors, af does not read pickles)"
    } else {
        ""
    };
    Err(EncoderError::Dir {
        dir: dir.to_path_buf(),
        message: format!("has no {file}{hint}"),
    })
}

/// Reads a model directory's description; fails as [`Encoder::load`] would on a missing file.
pub fn inspect(dir: &Path) -> Result<ModelInfo, EncoderError> {
    let cfg = BertConfig::read(&require(dir, CONFIG)?)?;
    let weights = require(dir, WEIGHTS)?;
    require(dir, TOKENIZER)?;
    let pooling = config::read_pooling(dir)?;
    Ok(ModelInfo {
        dir: dir.to_path_buf(),
        model_type: cfg.model_type.clone(),
        hidden_size: cfg.hidden_size,
        layers: cfg.num_hidden_layers,
        heads: cfg.num_attention_heads,
        vocab_size: cfg.vocab_size,
        max_length: config::read_max_length(dir, &cfg)?,
        pooling: format!("{pooling:?}").to_lowercase(),
        weights_bytes: std::fs::metadata(&weights).map(|m| m.len()).unwrap_or(0),
    })
}

/// Copies `dir`'s architecture and tokenizer into `out` (another directory) with BERT's random
/// initialisation drawn from `seed` as `model.safetensors` (`dir` need not have one): a model of
/// the same speed, for benchmarks on machines the real weights cannot be carried to.
pub fn write_random_weights(dir: &Path, out: &Path, seed: i64) -> Result<(), EncoderError> {
    let config = require(dir, CONFIG)?;
    let tokenizer = require(dir, TOKENIZER)?;
    let io = |path: &Path, e: std::io::Error| EncoderError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let pooling = dir.join("1_Pooling").join("config.json");
    let made = if pooling.exists() {
        out.join("1_Pooling")
    } else {
        out.to_path_buf()
    };
    std::fs::create_dir_all(&made).map_err(|e| io(&made, e))?;
    for (from, to) in [
        (&config, out.join(CONFIG)),
        (&tokenizer, out.join(TOKENIZER)),
        (&pooling, out.join("1_Pooling").join("config.json")),
    ] {
        if from.exists() {
            std::fs::copy(from, &to).map_err(|e| io(from, e))?;
        }
    }
    write_random_safetensors(&config, &out.join(WEIGHTS), seed)
}

/// BERT's random initialisation for the architecture `config` (a `config.json`) drawn from
/// `seed`, written as a safetensors file at `weights`.
fn write_random_safetensors(config: &Path, weights: &Path, seed: i64) -> Result<(), EncoderError> {
    let tensors = model::random_tensors(&BertConfig::read(config)?, seed);
    let named: Vec<(&str, &Tensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    Ok(Tensor::write_safetensors(&named, weights)?)
}

/// The model directories af knows of: [`ENCODER_DIR_ENV`] when set, then every directory under
/// `$HOME/.cache/af/encoders/` (where `scripts/setup` extracts them), without duplicates.
pub fn known_model_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os(ENCODER_DIR_ENV).filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    if let Some(home) = std::env::var_os("HOME") {
        let root = Path::new(&home).join(".cache/af/encoders");
        if let Ok(entries) = std::fs::read_dir(&root) {
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect();
            found.sort();
            dirs.extend(found);
        }
    }
    let mut seen = Vec::new();
    dirs.retain(|d| {
        let key = d.canonicalize().unwrap_or_else(|_| d.clone());
        if seen.contains(&key) {
            false
        } else {
            seen.push(key);
            true
        }
    });
    dirs
}

/// A member's model directory: `configured` when given, else the first of [`known_model_dirs`];
/// an error saying how to get one.
pub fn model_dir_or_default(
    configured: Option<&Path>,
    member: &str,
) -> Result<PathBuf, crate::NnError> {
    match configured {
        Some(dir) => Ok(dir.to_path_buf()),
        None => known_model_dirs().into_iter().next().ok_or_else(|| {
            crate::NnError::InvalidSettings(format!(
                "the `{member}` member needs a pretrained model and none was found: `scripts/setup` installs all-MiniLM-L6-v2 and sets {ENCODER_DIR_ENV}, \
                 or name a BERT-family directory in [committee.member.{member}] model"
            ))
        }),
    }
}

/// Where an encoder's weights come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncoderSource {
    /// A BERT-family Hugging Face directory, run by af's own implementation.
    Bert { dir: PathBuf },
    /// A TorchScript module (`forward(input_ids, attention_mask) -> [N, D]`) and its tokenizer.
    TorchScript { module: PathBuf, tokenizer: PathBuf },
}

impl EncoderSource {
    /// The model's own path: the BERT directory or the module file.
    pub fn path(&self) -> &Path {
        match self {
            Self::Bert { dir } => dir,
            Self::TorchScript { module, .. } => module,
        }
    }
}

/// The network that turns a batch of token ids into one vector per text.
enum Backend {
    Bert { bert: Bert, pooling: Pooling },
    TorchScript(ScriptModule),
}

impl Backend {
    /// Sentence vectors, `[N, D]` f32, not yet normalised.
    fn vectors(&self, ids: &Tensor, types: &Tensor, mask: &Tensor) -> Result<Tensor, EncoderError> {
        match self {
            Self::Bert { bert, pooling } => {
                let hidden = bert.forward(ids, types, mask).to_kind(Kind::Float);
                Ok(match pooling {
                    Pooling::Mean => {
                        let m = mask.to_kind(Kind::Float).unsqueeze(-1);
                        (&hidden * &m).sum_dim_intlist(1, false, Kind::Float)
                            / m.sum_dim_intlist(1, false, Kind::Float).clamp_min(1e-9)
                    }
                    Pooling::Cls => hidden.select(1, 0),
                })
            }
            Self::TorchScript(module) => module.forward(ids, mask),
        }
    }
}

/// A loaded encoder: frozen weights on one device and the model's tokenizer.
pub struct Encoder {
    backend: Backend,
    tokenizer: Tokenizer,
    tokenizer_path: PathBuf,
    max_length: usize,
    dim: usize,
    device: Device,
    batch_size: usize,
    source: EncoderSource,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let backend = match &self.backend {
            Backend::Bert { bert, pooling } => {
                format!("bert ({pooling:?} pooling, {:?})", bert.kind)
            }
            Backend::TorchScript(_) => "torchscript".to_string(),
        };
        f.debug_struct("Encoder")
            .field("source", &self.source)
            .field("backend", &backend)
            .field("dim", &self.dim)
            .field("max_length", &self.max_length)
            .field("device", &self.device)
            .finish()
    }
}

/// `path`'s tokenizer, truncating at `max_length` and padding nothing (batches pad themselves).
fn load_tokenizer(path: &Path, max_length: usize) -> Result<Tokenizer, EncoderError> {
    let mut tokenizer = Tokenizer::from_file(path).map_err(|e| EncoderError::File {
        path: path.to_path_buf(),
        message: format!("not a readable tokenizer: {e}"),
    })?;
    // tokenizer.json carries its own truncation and fixed padding; both are replaced.
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length,
            ..Default::default()
        }))
        .map_err(|e| EncoderError::File {
            path: path.to_path_buf(),
            message: format!("truncation: {e}"),
        })?;
    tokenizer.with_padding(None);
    Ok(tokenizer)
}

impl Encoder {
    /// The encoder `source` names.
    pub fn open(
        source: &EncoderSource,
        device: Device,
        options: &EncoderOptions,
    ) -> Result<Self, EncoderError> {
        match source {
            EncoderSource::Bert { dir } => Self::load(dir, device, options),
            EncoderSource::TorchScript { module, tokenizer } => {
                Self::load_torchscript(module, tokenizer, device, options)
            }
        }
    }

    /// A BERT-family model directory.
    pub fn load(
        dir: &Path,
        device: Device,
        options: &EncoderOptions,
    ) -> Result<Self, EncoderError> {
        Self::load_inner(dir, device, options, None)
    }

    /// The directory's architecture and tokenizer with random weights drawn from `seed` (the same
    /// on every device), for throughput benchmarks where `model.safetensors` cannot travel: it
    /// need not be there.
    pub fn load_with_random_weights(
        dir: &Path,
        device: Device,
        options: &EncoderOptions,
        seed: i64,
    ) -> Result<Self, EncoderError> {
        Self::load_inner(dir, device, options, Some(seed))
    }

    fn load_inner(
        dir: &Path,
        device: Device,
        options: &EncoderOptions,
        random: Option<i64>,
    ) -> Result<Self, EncoderError> {
        let cfg = BertConfig::read(&require(dir, CONFIG)?)?;
        let weights = match random {
            None => require(dir, WEIGHTS)?,
            Some(_) => dir.join(WEIGHTS),
        };
        let tokenizer_path = require(dir, TOKENIZER)?;
        let pooling = config::read_pooling(dir)?;
        let model_max = config::read_max_length(dir, &cfg)?;
        let max_length = options
            .max_length
            .map_or(model_max, |m| m.min(cfg.max_position_embeddings));
        if max_length < 2 {
            return Err(EncoderError::Dir {
                dir: dir.to_path_buf(),
                message: format!("max length {max_length} leaves no room for a token"),
            });
        }
        let tokenizer = load_tokenizer(&tokenizer_path, max_length)?;
        let kind = if options.half && device.is_cuda() {
            Kind::Half
        } else {
            Kind::Float
        };
        let bert = {
            let _guard = tch::no_grad_guard();
            match random {
                None => Bert::load(&weights, &cfg, device, kind)?,
                Some(seed) => Bert::random(&weights, &cfg, seed, device, kind)?,
            }
        };
        Ok(Self {
            backend: Backend::Bert { bert, pooling },
            tokenizer,
            tokenizer_path,
            max_length,
            dim: cfg.hidden_size,
            device,
            batch_size: options.batch_size.max(1),
            source: EncoderSource::Bert {
                dir: dir.to_path_buf(),
            },
        })
    }

    /// A TorchScript module taking `(input_ids, attention_mask)`, with the `tokenizer.json` its
    /// ids come from. The module is run once at load on a short text, which checks its interface
    /// and gives the vectors' length.
    pub fn load_torchscript(
        module: &Path,
        tokenizer: &Path,
        device: Device,
        options: &EncoderOptions,
    ) -> Result<Self, EncoderError> {
        let max_length = options
            .max_length
            .unwrap_or(torchscript::DEFAULT_MAX_LENGTH);
        if max_length < 2 {
            return Err(EncoderError::File {
                path: module.to_path_buf(),
                message: format!("max length {max_length} leaves no room for a token"),
            });
        }
        let script = ScriptModule::load(module, device)?;
        if !tokenizer.is_file() {
            return Err(EncoderError::File {
                path: tokenizer.to_path_buf(),
                message: "no such file (the module's tokenizer.json)".into(),
            });
        }
        let tok = load_tokenizer(tokenizer, max_length)?;
        let probe = tokenize_with(&tok, tokenizer, &["a probe"])?;
        let (ids, _, mask) = batch_tensors(&probe, &[0], device);
        let dim = {
            let _guard = tch::no_grad_guard();
            script.probe_dim(&ids, &mask)?
        };
        Ok(Self {
            backend: Backend::TorchScript(script),
            tokenizer: tok,
            tokenizer_path: tokenizer.to_path_buf(),
            max_length,
            dim,
            device,
            batch_size: options.batch_size.max(1),
            source: EncoderSource::TorchScript {
                module: module.to_path_buf(),
                tokenizer: tokenizer.to_path_buf(),
            },
        })
    }

    /// The length of a sentence vector.
    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn max_length(&self) -> usize {
        self.max_length
    }

    pub fn device(&self) -> Device {
        self.device
    }

    /// Where its weights came from.
    pub fn source(&self) -> &EncoderSource {
        &self.source
    }

    /// Token ids (special tokens included, truncated) of each text.
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<tokenizers::Encoding>, EncoderError> {
        tokenize_with(&self.tokenizer, &self.tokenizer_path, texts)
    }

    /// Normalised sentence vectors, `[texts.len(), dim]` f32 on the CPU, in the order of `texts`.
    pub fn encode(&self, texts: &[&str]) -> Result<Tensor, EncoderError> {
        let _guard = tch::no_grad_guard();
        let mut out = Tensor::zeros(
            [texts.len() as i64, self.dim as i64],
            (Kind::Float, Device::Cpu),
        );
        if texts.is_empty() {
            return Ok(out);
        }
        let encodings = self.tokenize(texts)?;
        // Longest first, so each batch pads to lengths close to its own.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encodings[i].len()));
        for chunk in order.chunks(self.batch_size) {
            let (ids, types, mask) = batch_tensors(&encodings, chunk, self.device);
            let pooled = self.backend.vectors(&ids, &types, &mask)?;
            let norm = pooled.norm_scalaropt_dim(2, [1], true).clamp_min(1e-12);
            let vecs = (pooled / norm).to_device(Device::Cpu);
            let index = Tensor::from_slice(&chunk.iter().map(|&i| i as i64).collect::<Vec<_>>());
            let _ = out.index_copy_(0, &index, &vecs);
        }
        Ok(out)
    }
}

fn tokenize_with(
    tokenizer: &Tokenizer,
    path: &Path,
    texts: &[&str],
) -> Result<Vec<tokenizers::Encoding>, EncoderError> {
    tokenizer
        .encode_batch(texts.to_vec(), true)
        .map_err(|e| EncoderError::Tokenize {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

/// Token ids, token types and attention mask of the texts `rows` of `encodings`, each `[rows,
/// longest]` i64 on `device`, padded with zeros.
fn batch_tensors(
    encodings: &[tokenizers::Encoding],
    rows: &[usize],
    device: Device,
) -> (Tensor, Tensor, Tensor) {
    let len = rows
        .iter()
        .map(|&i| encodings[i].len())
        .max()
        .unwrap_or(1)
        .max(1);
    let b = rows.len();
    let mut ids = vec![0i64; b * len];
    let mut types = vec![0i64; b * len];
    let mut mask = vec![0i64; b * len];
    for (row, &i) in rows.iter().enumerate() {
        let e = &encodings[i];
        for (j, ((&id, &ty), &m)) in e
            .get_ids()
            .iter()
            .zip(e.get_type_ids())
            .zip(e.get_attention_mask())
            .enumerate()
        {
            ids[row * len + j] = id as i64;
            types[row * len + j] = ty as i64;
            mask[row * len + j] = m as i64;
        }
    }
    let shape = [b as i64, len as i64];
    let tensor = |v: &[i64]| Tensor::from_slice(v).view(shape).to_device(device);
    (tensor(&ids), tensor(&types), tensor(&mask))
}
