//! Toy encoders written from Rust, for tests (no Python, nothing downloaded, a few kilobytes),
//! over a WordLevel `tokenizer.json` of a given word list:
//! - a TorchScript sentence encoder: a module traced with `CModule::create_by_tracing` that looks
//!   each token up in a fixed random embedding table and averages over the attention mask. Its
//!   vectors are not unit length, so a test also sees af normalise them;
//! - a tiny BERT model directory ([`write_toy_bert`]): `config.json`, `model.safetensors` with
//!   BERT's random initialisation, and the tokenizer, which af's BERT (and `encoder-ft`) load as
//!   they load a real one.

use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tch::{CModule, Kind, Tensor};

use super::EncoderError;

/// The special tokens, ids 0 to 3; the words follow from id 4 in the order given.
pub const SPECIAL_TOKENS: [&str; 4] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"];

/// What [`write_toy_encoder`] wrote.
#[derive(Debug)]
pub struct ToyEncoder {
    /// `model.pt`.
    pub module: PathBuf,
    /// `tokenizer.json`, beside it.
    pub tokenizer: PathBuf,
    /// The embedding table the module looks tokens up in, `[4 + words, dim]` f32.
    pub weight: Tensor,
}

/// Writes `model.pt` and `tokenizer.json` into `dir`: lower-cased words split at whitespace and
/// punctuation, unknown ones `[UNK]`, each text framed by `[CLS]` and `[SEP]`; embeddings drawn
/// uniformly in [-1, 1) from `seed`.
pub fn write_toy_encoder(
    dir: &Path,
    words: &[&str],
    dim: i64,
    seed: u64,
) -> Result<ToyEncoder, EncoderError> {
    let tokenizer = dir.join("tokenizer.json");
    let write_error = |path: &Path, e: std::io::Error| EncoderError::File {
        path: path.to_path_buf(),
        message: format!("cannot write: {e}"),
    };
    std::fs::write(&tokenizer, tokenizer_json(words).to_string())
        .map_err(|e| write_error(&tokenizer, e))?;

    let rows = (SPECIAL_TOKENS.len() + words.len()) as i64;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let values: Vec<f32> = (0..rows * dim)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let weight = Tensor::from_slice(&values).view([rows, dim]);
    // Two texts of different lengths, so the traced graph pads as real batches do.
    let example = [
        Tensor::from_slice(&[2i64, 1, 3, 0, 2, 1, 1, 3]).view([2, 4]),
        Tensor::from_slice(&[1i64, 1, 1, 0, 1, 1, 1, 1]).view([2, 4]),
    ];
    let traced = CModule::create_by_tracing("ToyEncoder", "forward", &example, &mut |inputs| {
        vec![toy_forward(&weight, &inputs[0], &inputs[1])]
    })?;
    let module = dir.join("model.pt");
    traced.save(&module)?;
    Ok(ToyEncoder {
        module,
        tokenizer,
        weight,
    })
}

/// What the toy module computes: each text's mean token embedding over its attention mask.
/// # Shapes
/// weight: [V, D], ids and mask: [N, T] i64 -> [N, D]
pub fn toy_forward(weight: &Tensor, ids: &Tensor, mask: &Tensor) -> Tensor {
    let tokens = Tensor::embedding(weight, ids, -1, false, false);
    let m = mask.to_kind(Kind::Float).unsqueeze(-1);
    (tokens * &m).sum_dim_intlist(1, false, Kind::Float)
        / m.sum_dim_intlist(1, false, Kind::Float).clamp_min(1.0)
}

/// Writes a BERT model directory into `dir`: `hidden`-wide, `layers` layers of `heads` heads,
/// BERT's random initialisation drawn from `seed`, mean pooling (no `1_Pooling`), and the toy
/// tokenizer over `words`.
pub fn write_toy_bert(
    dir: &Path,
    words: &[&str],
    hidden: usize,
    layers: usize,
    heads: usize,
    seed: i64,
) -> Result<(), EncoderError> {
    let write_error = |path: &Path, e: std::io::Error| EncoderError::File {
        path: path.to_path_buf(),
        message: format!("cannot write: {e}"),
    };
    let config = serde_json::json!({
        "model_type": "bert",
        "vocab_size": SPECIAL_TOKENS.len() + words.len(),
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": 2 * hidden,
        "max_position_embeddings": 64,
    });
    let path = dir.join("config.json");
    std::fs::write(&path, config.to_string()).map_err(|e| write_error(&path, e))?;
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, tokenizer_json(words).to_string()).map_err(|e| write_error(&path, e))?;
    super::write_random_safetensors(
        &dir.join("config.json"),
        &dir.join("model.safetensors"),
        seed,
    )
}

fn tokenizer_json(words: &[&str]) -> serde_json::Value {
    let vocab: serde_json::Map<String, serde_json::Value> = SPECIAL_TOKENS
        .iter()
        .chain(words)
        .enumerate()
        .map(|(id, w)| (w.to_string(), serde_json::json!(id)))
        .collect();
    let added: Vec<serde_json::Value> = SPECIAL_TOKENS
        .iter()
        .enumerate()
        .map(|(id, t)| serde_json::json!({ "id": id, "content": t, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true }))
        .collect();
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": { "type": "Lowercase" },
        "pre_tokenizer": { "type": "Whitespace" },
        "post_processor": { "type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2] },
        "decoder": null,
        "model": { "type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]" }
    })
}
