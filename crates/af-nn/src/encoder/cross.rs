//! A cross-encoder fine-tuned inside the AF loop (the `encoder-ft` member, HellaSwag's adversary):
//! a BERT-family model that reads "context [SEP] noun phrase + ending" as one input, pooled as the
//! model directory says, with a linear score on top. Each [`CrossEncoder::fresh`] starts again
//! from the directory's pretrained weights and draws a new score layer, so no iteration's
//! adversary inherits another's fitting. It trains with the committee's objective (softmax
//! cross-entropy over each question's options, the right one first) under AdamW, and scores
//! texts in length-sorted batches without gradients.
//!
//! Fine-tuning and scoring run in f32 on any device: mixed precision would need loss scaling
//! for fp16, and the scores of a shortlist are cheap next to the training.

use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tokenizers::{EncodeInput, Encoding, Tokenizer};

use super::config::{self, BertConfig, Pooling};
use super::model::Bert;
use super::{batch_tensors, load_tokenizer, require, EncoderError, CONFIG, TOKENIZER, WEIGHTS};

/// How a [`CrossEncoder`] reads and trains.
#[derive(Clone, Debug, PartialEq)]
pub struct FineTuneOptions {
    /// Tokens per (context, second sentence) pair, special tokens included; the longer of the
    /// two is cut first.
    pub max_length: usize,
    /// Pairs per forward pass when scoring.
    pub batch_size: usize,
    pub epochs: usize,
    pub learning_rate: f64,
    /// Questions per optimisation step.
    pub batch_items: usize,
    /// On the pooled vector, while training.
    pub dropout: f64,
    /// Gradient norm clip.
    pub clip_norm: f64,
}

impl Default for FineTuneOptions {
    fn default() -> Self {
        Self {
            max_length: 128,
            batch_size: 64,
            epochs: 1,
            learning_rate: 3e-5,
            batch_items: 4,
            dropout: 0.1,
            clip_norm: 1.0,
        }
    }
}

/// What one fine-tuning did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct FineTuneReport {
    pub steps: usize,
    /// Mean training loss per epoch.
    pub train_loss: Vec<f64>,
}

/// A pretrained encoder with a score layer, its weights trainable.
pub struct CrossEncoder {
    vs: nn::VarStore,
    bert: Bert,
    pooling: Pooling,
    score: nn::Linear,
    tokenizer: Tokenizer,
    tokenizer_path: PathBuf,
    options: FineTuneOptions,
}

impl std::fmt::Debug for CrossEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossEncoder")
            .field("tokenizer", &self.tokenizer_path)
            .field("pooling", &self.pooling)
            .field("options", &self.options)
            .finish()
    }
}

impl CrossEncoder {
    /// The model in `dir` (`config.json`, `model.safetensors`, `tokenizer.json`) on `device`,
    /// its weights read afresh and its score layer drawn from libtorch's generator (seed it
    /// first for a reproducible run).
    pub fn fresh(
        dir: &Path,
        device: Device,
        options: &FineTuneOptions,
    ) -> Result<Self, EncoderError> {
        let cfg = BertConfig::read(&require(dir, CONFIG)?)?;
        let weights = require(dir, WEIGHTS)?;
        let tokenizer_path = require(dir, TOKENIZER)?;
        let pooling = config::read_pooling(dir)?;
        let max_length = options.max_length.min(cfg.max_position_embeddings);
        if max_length < 3 {
            return Err(EncoderError::Dir {
                dir: dir.to_path_buf(),
                message: format!("max length {max_length} leaves no room for a pair of texts"),
            });
        }
        let tokenizer = load_tokenizer(&tokenizer_path, max_length)?;
        let vs = nn::VarStore::new(device);
        let bert = Bert::load_trainable(&weights, &cfg, &(vs.root() / "bert"))?;
        let score = nn::linear(
            vs.root() / "score",
            cfg.hidden_size as i64,
            1,
            Default::default(),
        );
        Ok(Self {
            vs,
            bert,
            pooling,
            score,
            tokenizer,
            tokenizer_path,
            options: FineTuneOptions {
                max_length,
                ..options.clone()
            },
        })
    }

    /// Each (context, second sentence) pair as the model reads it: `[CLS] context [SEP] second [SEP]`
    /// with segment ids, cut to `max_length`.
    pub fn tokenize_pairs(&self, pairs: &[(&str, &str)]) -> Result<Vec<Encoding>, EncoderError> {
        let inputs: Vec<EncodeInput> = pairs
            .iter()
            .map(|&(a, b)| EncodeInput::Dual(a.into(), b.into()))
            .collect();
        self.tokenizer
            .encode_batch(inputs, true)
            .map_err(|e| EncoderError::Tokenize {
                path: self.tokenizer_path.clone(),
                message: e.to_string(),
            })
    }

    /// One score per row of `rows` (indices into `encodings`).
    /// # Shapes
    /// -> [rows.len()]
    fn logits(&self, encodings: &[Encoding], rows: &[usize], train: bool) -> Tensor {
        let (ids, types, mask) = batch_tensors(encodings, rows, self.vs.device());
        let hidden = self.bert.forward(&ids, &types, &mask);
        let pooled = match self.pooling {
            Pooling::Mean => {
                let m = mask.to_kind(Kind::Float).unsqueeze(-1);
                (&hidden * &m).sum_dim_intlist(1, false, Kind::Float)
                    / m.sum_dim_intlist(1, false, Kind::Float).clamp_min(1e-9)
            }
            Pooling::Cls => hidden.select(1, 0),
        };
        self.score
            .forward(&pooled.dropout(self.options.dropout, train))
            .squeeze_dim(1)
    }

    /// Fine-tunes on `questions`: each a list of rows of `encodings`, the right option first, all
    /// of one width. Seeded: the order of the questions comes from `seed`, dropout from libtorch's
    /// generator.
    pub fn fine_tune(
        &mut self,
        encodings: &[Encoding],
        questions: &[Vec<usize>],
        seed: u64,
    ) -> Result<FineTuneReport, EncoderError> {
        let mut report = FineTuneReport::default();
        if questions.is_empty() {
            return Ok(report);
        }
        let mut opt = nn::AdamW::default().build(&self.vs, self.options.learning_rate)?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut order: Vec<usize> = (0..questions.len()).collect();
        for _ in 0..self.options.epochs.max(1) {
            order.shuffle(&mut rng);
            let (mut sum, mut steps) = (0.0, 0usize);
            for chunk in order.chunks(self.options.batch_items.max(1)) {
                let width = questions[chunk[0]].len();
                let rows: Vec<usize> = chunk
                    .iter()
                    .flat_map(|&q| questions[q].iter().copied())
                    .collect();
                debug_assert_eq!(rows.len(), chunk.len() * width, "questions of one width");
                let logits = self
                    .logits(encodings, &rows, true)
                    .view([chunk.len() as i64, width as i64]);
                let target = Tensor::zeros([chunk.len() as i64], (Kind::Int64, self.vs.device()));
                let loss = logits.cross_entropy_for_logits(&target);
                let value = loss.double_value(&[]);
                if !value.is_finite() {
                    return Err(EncoderError::File {
                        path: self.tokenizer_path.clone(),
                        message: format!(
                            "fine-tuning's loss is not finite ({value}): lower the learning rate"
                        ),
                    });
                }
                opt.zero_grad();
                loss.backward();
                opt.clip_grad_norm(self.options.clip_norm);
                opt.step();
                sum += value;
                steps += 1;
            }
            report.steps += steps;
            report.train_loss.push(sum / steps.max(1) as f64);
        }
        Ok(report)
    }

    /// Every encoding's score, without gradients or dropout, in length-sorted passes of
    /// `batch_size`.
    pub fn score(&self, encodings: &[Encoding]) -> Vec<f32> {
        let _guard = tch::no_grad_guard();
        let mut out = vec![0.0f32; encodings.len()];
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encodings[i].len()));
        for chunk in order.chunks(self.options.batch_size.max(1)) {
            let scores = Vec::<f32>::try_from(
                self.logits(encodings, chunk, false)
                    .to_kind(Kind::Float)
                    .to_device(Device::Cpu),
            )
            .expect("f32 scores");
            for (&i, s) in chunk.iter().zip(scores) {
                out[i] = s;
            }
        }
        out
    }
}
