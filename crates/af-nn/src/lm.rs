//! The generator's language models: a forward and a backward LSTM sharing one embedding, which
//! is tied to both output layers (docs/design.md §1.2).
//!
//! Sequences are token ids with `<bos>` first and `<eos>` last; the backward model reads the
//! same tokens reversed (still `<bos>` first). Padding is id 0 and never a target.

use tch::nn::{self, Module, RNN};
use tch::{Device, Kind, Tensor};

pub const PAD: i64 = 0;
pub const UNK: i64 = 1;
pub const BOS: i64 = 2;
pub const EOS: i64 = 3;

/// Sizes of one LM pair.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LmShape {
    pub vocab: i64,
    pub embedding: i64,
    pub hidden: i64,
    pub layers: i64,
    pub dropout: f64,
}

/// One direction: LSTM, optional projection back to the embedding size, output bias.
#[derive(Debug)]
pub struct Direction {
    pub(crate) lstm: nn::LSTM,
    projection: Option<nn::Linear>,
    bias: Tensor,
}

#[derive(Debug)]
pub struct BiLm {
    pub shape: LmShape,
    embedding: nn::Embedding,
    pub forward: Direction,
    pub backward: Direction,
}

impl BiLm {
    /// Variable names are stable paths (`embedding.weight`, `forward.lstm.weight_ih_l0`, ...),
    /// so checkpoints survive refactors.
    pub fn new(root: &nn::Path, shape: LmShape) -> Self {
        let embedding = nn::embedding(
            root / "embedding",
            shape.vocab,
            shape.embedding,
            nn::EmbeddingConfig {
                padding_idx: PAD,
                ..Default::default()
            },
        );
        let direction = |name: &str| {
            let p = root / name;
            let lstm = nn::lstm(
                &p / "lstm",
                shape.embedding,
                shape.hidden,
                nn::RNNConfig {
                    num_layers: shape.layers,
                    batch_first: true,
                    ..Default::default()
                },
            );
            let projection = (shape.hidden != shape.embedding).then(|| {
                nn::linear(
                    &p / "projection",
                    shape.hidden,
                    shape.embedding,
                    Default::default(),
                )
            });
            let bias = p.zeros("output_bias", &[shape.vocab]);
            Direction {
                lstm,
                projection,
                bias,
            }
        };
        Self {
            shape,
            forward: direction("forward"),
            backward: direction("backward"),
            embedding,
        }
    }

    pub fn embed(&self, tokens: &Tensor, train: bool) -> Tensor {
        self.embedding
            .forward(tokens)
            .dropout(self.shape.dropout, train)
    }

    /// Logits over the vocabulary from top-layer LSTM outputs.
    /// # Shapes
    /// `hidden`: [.., H] -> [.., V]
    pub fn logits(&self, dir: &Direction, hidden: &Tensor) -> Tensor {
        let h = match &dir.projection {
            Some(p) => p.forward(hidden),
            None => hidden.shallow_clone(),
        };
        h.matmul(&self.embedding.ws.tr()) + &dir.bias
    }

    /// Per-position log-probability of each next token under one direction.
    /// # Shapes
    /// `tokens`: [B, T] (i64, `<bos>` first, padded with 0) -> [B, T-1] (f32; 0 where the target
    /// is padding)
    pub fn token_logprobs(&self, dir: &Direction, tokens: &Tensor, train: bool) -> Tensor {
        let t = tokens.size()[1];
        let inputs = tokens.narrow(1, 0, t - 1);
        let targets = tokens.narrow(1, 1, t - 1);
        let (out, _) = dir.lstm.seq(&self.embed(&inputs, train));
        let out = out.dropout(self.shape.dropout, train);
        let logp = self.logits(dir, &out).log_softmax(-1, Kind::Float);
        let picked = logp.gather(2, &targets.unsqueeze(2), false).squeeze_dim(2);
        picked * targets.ne(PAD).to_kind(Kind::Float)
    }

    /// Mean negative log-likelihood per target token (the training loss of one direction).
    pub fn loss(&self, dir: &Direction, tokens: &Tensor, train: bool) -> Tensor {
        let t = tokens.size()[1];
        let n = tokens.narrow(1, 1, t - 1).ne(PAD).sum(Kind::Float);
        -self.token_logprobs(dir, tokens, train).sum(Kind::Float) / n
    }

    /// Runs one direction over right-padded prefixes and returns, per row, the LSTM state and the
    /// top-layer output after its last real token.
    /// # Shapes
    /// `prefixes`: [B, T], `lengths`: [B] -> state ([L, B, H], [L, B, H]), top [B, H]
    pub fn encode_prefixes(
        &self,
        dir: &Direction,
        prefixes: &Tensor,
        lengths: &Tensor,
    ) -> (nn::LSTMState, Tensor) {
        let (b, t) = (prefixes.size()[0], prefixes.size()[1]);
        let emb = self.embed(prefixes, false);
        let mut state = dir.lstm.zero_state(b);
        let lengths = lengths.to_device(prefixes.device());
        for step in 0..t {
            let next = dir.lstm.step(&emb.select(1, step), &state);
            // Rows whose prefix has ended keep their state: one mask, no host sync.
            let live = lengths.gt(step).view([1, b, 1]);
            let nn::LSTMState((h, c)) = &state;
            let nn::LSTMState((nh, nc)) = &next;
            // Under autocast the step's state may come back in fp16.
            state = nn::LSTMState((
                nh.where_self(&live, &h.to_kind(nh.kind())),
                nc.where_self(&live, &c.to_kind(nc.kind())),
            ));
        }
        let top = state.h().select(0, self.shape.layers - 1);
        (state, top)
    }

    pub fn step(&self, dir: &Direction, tokens: &Tensor, state: &nn::LSTMState) -> nn::LSTMState {
        dir.lstm.step(&self.embed(tokens, false), state)
    }
}

/// Logit elements one batch may hold ([rows, length, vocabulary], the largest tensor of an LM
/// pass): enough to keep a GPU busy, small enough for a CPU's caches and memory (a batch of 4,096
/// full sequences would need 5 GB of logits).
pub fn logit_budget(device: Device) -> usize {
    if device.is_cuda() {
        1 << 30
    } else {
        1 << 25
    }
}

/// Cuts `items`, sorted by `len` ascending, into batches of at most `max_rows` whose
/// rows x longest length x `vocab` stays within `budget` logit elements ([`logit_budget`], or
/// what a stage's memory plan allows; a single row always fits).
pub fn budgeted_batches<T>(
    items: &[T],
    len: impl Fn(&T) -> usize,
    max_rows: usize,
    vocab: i64,
    budget: usize,
) -> Vec<&[T]> {
    let mut batches = Vec::new();
    let mut start = 0;
    while start < items.len() {
        let mut end = start + 1;
        while end < items.len()
            && end - start < max_rows.max(1)
            && (end + 1 - start) * len(&items[end]) * vocab as usize <= budget
        {
            end += 1;
        }
        batches.push(&items[start..end]);
        start = end;
    }
    batches
}

/// Pads sequences of ids into a [B, T] tensor on `device` (T = the longest).
pub fn pad_batch(seqs: &[&[i64]], device: Device) -> Tensor {
    let t = seqs.iter().map(|s| s.len()).max().unwrap_or(1).max(1);
    let mut flat = vec![PAD; seqs.len() * t];
    for (i, s) in seqs.iter().enumerate() {
        flat[i * t..i * t + s.len()].copy_from_slice(s);
    }
    Tensor::from_slice(&flat)
        .view([seqs.len() as i64, t as i64])
        .to_device(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgeted_batches_respect_rows_and_the_logit_budget() {
        let budget = logit_budget(Device::Cpu);
        let lens: Vec<usize> = (1..=2000).map(|i| 1 + i / 40).collect();
        let vocab = 20_000;
        let batches = budgeted_batches(&lens, |&l| l, 64, vocab, budget);
        assert_eq!(
            batches.iter().map(|b| b.len()).sum::<usize>(),
            lens.len(),
            "every item once, in order"
        );
        for b in &batches {
            let longest = *b.iter().max().unwrap();
            assert!(
                b.len() <= 64 && (b.len() == 1 || b.len() * longest * vocab as usize <= budget),
                "{} rows of up to {longest}",
                b.len()
            );
        }
        // Short rows fill whole batches; long rows get fewer per batch.
        assert_eq!(batches[0].len(), 64);
        assert!(batches.last().unwrap().len() < 64);
        // One row longer than the budget still gets a batch of its own.
        assert_eq!(budgeted_batches(&[budget], |&l| l, 8, 2, budget).len(), 1);
    }

    fn tiny() -> (nn::VarStore, BiLm) {
        tch::manual_seed(1);
        let vs = nn::VarStore::new(Device::Cpu);
        let lm = BiLm::new(
            &vs.root(),
            LmShape {
                vocab: 12,
                embedding: 8,
                hidden: 6,
                layers: 2,
                dropout: 0.0,
            },
        );
        (vs, lm)
    }

    #[test]
    fn padding_does_not_change_scores() {
        let _torch_rng = crate::torch_rng_lock();
        let (_vs, lm) = tiny();
        let a: &[i64] = &[BOS, 5, 6, 7, EOS];
        let alone = lm.token_logprobs(&lm.forward, &pad_batch(&[a], Device::Cpu), false);
        let padded = lm.token_logprobs(
            &lm.forward,
            &pad_batch(&[a, &[BOS, 4, 5, 6, 7, 8, 9, EOS]], Device::Cpu),
            false,
        );
        let diff = (alone - padded.get(0).narrow(0, 0, 4))
            .abs()
            .max()
            .double_value(&[]);
        assert!(diff < 1e-5, "{diff}");
    }

    #[test]
    fn prefix_encoding_matches_a_full_run() {
        let _torch_rng = crate::torch_rng_lock();
        let (_vs, lm) = tiny();
        let long: &[i64] = &[BOS, 4, 5, 6, 7, 8];
        let short: &[i64] = &[BOS, 9, 10];
        let batch = pad_batch(&[long, short], Device::Cpu);
        let (_, top) = lm.encode_prefixes(&lm.forward, &batch, &Tensor::from_slice(&[6i64, 3]));
        // The short row's state must be the one after its own last token, not after padding.
        let (out, _) = lm
            .forward
            .lstm
            .seq(&lm.embed(&pad_batch(&[short], Device::Cpu), false));
        let diff = (top.get(1) - out.get(0).get(2))
            .abs()
            .max()
            .double_value(&[]);
        assert!(diff < 1e-5, "{diff}");
    }

    #[test]
    fn training_lowers_the_loss_and_names_are_stable() {
        let _torch_rng = crate::torch_rng_lock();
        let (vs, lm) = tiny();
        let seqs: Vec<Vec<i64>> = (0..8).map(|i| vec![BOS, 4 + i % 3, 5, 6, 7, EOS]).collect();
        let refs: Vec<&[i64]> = seqs.iter().map(Vec::as_slice).collect();
        let batch = pad_batch(&refs, Device::Cpu);
        let mut opt = nn::OptimizerConfig::build(nn::Adam::default(), &vs, 1e-2).unwrap();
        let first = lm.loss(&lm.forward, &batch, true).double_value(&[]);
        for _ in 0..50 {
            let loss = lm.loss(&lm.forward, &batch, true) + lm.loss(&lm.backward, &batch, true);
            opt.backward_step(&loss);
        }
        let last = lm.loss(&lm.forward, &batch, false).double_value(&[]);
        assert!(last < first * 0.5, "{first} -> {last}");
        let names: Vec<String> = vs.variables().into_keys().collect();
        for n in [
            "embedding.weight",
            "forward.lstm.weight_ih_l0",
            "backward.output_bias",
            "forward.projection.weight",
        ] {
            assert!(names.contains(&n.to_string()), "{n} not in {names:?}");
        }
    }
}
