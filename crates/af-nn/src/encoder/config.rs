//! A model directory's JSON files: `config.json` (the architecture), and the sentence-transformers
//! files beside it that say how long a text may be and how tokens are pooled.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::EncoderError;

/// The fields of a Hugging Face BERT `config.json` the encoder uses; others are ignored.
#[derive(Clone, Debug, Deserialize)]
pub struct BertConfig {
    #[serde(default)]
    pub model_type: Option<String>,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default = "default_positions")]
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub position_embedding_type: Option<String>,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_positions() -> usize {
    512
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}

/// The model families whose weights follow BERT's layout (post-LayerNorm, absolute positions).
const BERT_FAMILY: &[&str] = &["bert"];

impl BertConfig {
    pub fn read(path: &Path) -> Result<Self, EncoderError> {
        let cfg: BertConfig = read_json(path)?;
        let bad = |message: String| EncoderError::File {
            path: path.to_path_buf(),
            message,
        };
        if let Some(t) = &cfg.model_type {
            if !BERT_FAMILY.contains(&t.as_str()) {
                return Err(bad(format!(
                    "model_type `{t}` is not a BERT-family model (expected one of {BERT_FAMILY:?})"
                )));
            }
        }
        if let Some(p) = &cfg.position_embedding_type {
            if p != "absolute" {
                return Err(bad(format!(
                    "position_embedding_type `{p}`: only `absolute` is implemented"
                )));
            }
        }
        if cfg.num_attention_heads == 0 || cfg.hidden_size % cfg.num_attention_heads != 0 {
            return Err(bad(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                cfg.hidden_size, cfg.num_attention_heads
            )));
        }
        Activation::parse(&cfg.hidden_act).ok_or_else(|| {
            bad(format!(
                "hidden_act `{}`: expected one of gelu, gelu_new, gelu_pytorch_tanh, relu",
                cfg.hidden_act
            ))
        })?;
        Ok(cfg)
    }

    pub fn activation(&self) -> Activation {
        Activation::parse(&self.hidden_act).expect("checked at read")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// The exact (erf) GELU, Hugging Face's `gelu`.
    Gelu,
    /// The tanh approximation (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
    Relu,
}

impl Activation {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "gelu" => Some(Self::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Some(Self::GeluTanh),
            "relu" => Some(Self::Relu),
            _ => None,
        }
    }
}

/// How token vectors become one sentence vector (`1_Pooling/config.json`; mean when absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    Mean,
    Cls,
}

#[derive(Deserialize)]
struct PoolingFile {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

pub fn read_pooling(dir: &Path) -> Result<Pooling, EncoderError> {
    let path = dir.join("1_Pooling").join("config.json");
    if !path.exists() {
        return Ok(Pooling::Mean);
    }
    let p: PoolingFile = read_json(&path)?;
    match (p.pooling_mode_mean_tokens, p.pooling_mode_cls_token, p.pooling_mode_max_tokens, p.pooling_mode_mean_sqrt_len_tokens) {
        (true, false, false, false) => Ok(Pooling::Mean),
        (false, true, false, false) => Ok(Pooling::Cls),
        _ => Err(EncoderError::File {
            path,
            message: "exactly one of pooling_mode_mean_tokens or pooling_mode_cls_token must be true (max and sqrt-length pooling are not implemented)".into(),
        }),
    }
}

#[derive(Deserialize)]
struct SentenceBertFile {
    max_seq_length: Option<usize>,
}

/// The longest input in tokens, special tokens included: sentence-transformers' `max_seq_length`
/// when the directory has `sentence_bert_config.json`, else the model's position table. Never more
/// than the position table. (`tokenizer.json`'s own truncation, 128 for MiniLM, is not what
/// sentence-transformers uses, so it is replaced.)
pub fn read_max_length(dir: &Path, cfg: &BertConfig) -> Result<usize, EncoderError> {
    let path = dir.join("sentence_bert_config.json");
    let st = if path.exists() {
        read_json::<SentenceBertFile>(&path)?.max_seq_length
    } else {
        None
    };
    Ok(st
        .unwrap_or(cfg.max_position_embeddings)
        .min(cfg.max_position_embeddings))
}

pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, EncoderError> {
    let text = std::fs::read_to_string(path).map_err(|e| io_error(path, e))?;
    serde_json::from_str(&text).map_err(|e| EncoderError::File {
        path: path.to_path_buf(),
        message: format!("line {}, column {}: {e}", e.line(), e.column()),
    })
}

pub(crate) fn io_error(path: &Path, e: std::io::Error) -> EncoderError {
    EncoderError::File {
        path: PathBuf::from(path),
        message: format!("cannot read: {e}"),
    }
}
