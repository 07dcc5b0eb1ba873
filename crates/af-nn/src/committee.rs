//! The stylistic committee of Adversarial Filtering (DESIGN §1.3): four members that each score
//! one candidate (the second sentence, noun phrase + ending) and a joint head over their
//! concatenated representations, trained together on the sum of every head's softmax
//! cross-entropy over an item's options.
//!
//! Candidates live in a [`CandidateTable`] on the device, built once per run; training and scoring
//! address rows of it by index, so an AF iteration moves no text and almost no data.

use std::collections::HashMap;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tch::nn::{self, Module, OptimizerConfig, RNN};
use tch::{Device, Kind, Tensor};

pub use af_core::{CommitteeConfig, Member, JOINT_HEAD as JOINT};

use crate::NnError;

/// Indicator values of [`CandidateTable::indicator`].
pub const INDICATOR_PAD: i32 = 0;
pub const INDICATOR_NOUN_PHRASE: i32 = 1;
pub const INDICATOR_ENDING: i32 = 2;

/// One candidate as the committee sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct CandidateInput {
    /// Word ids of the noun phrase then the ending (0 is padding, never used here).
    pub words: Vec<i32>,
    /// The same tokens in the POS view: frequent words kept, the rest as their tag.
    pub pos: Vec<i32>,
    /// Tokens of `words` marked by the indicator: the noun phrase of a SWAG candidate (its first
    /// tokens), the filled-in option of a WinoGrande sentence.
    pub marked: std::ops::Range<usize>,
    /// The LM features, standardised.
    pub features: [f32; 8],
}

/// Every candidate of a run, as tensors on the device. Token ids are stored as i32 (half the
/// memory of i64 for pools of millions) and widened per batch.
pub struct CandidateTable {
    /// [C, T] word ids, 0-padded.
    pub words: Tensor,
    /// [C, T] POS-view ids, 0-padded.
    pub pos: Tensor,
    /// [C, T] 0 pad, 1 noun phrase, 2 ending.
    pub indicator: Tensor,
    /// [C, 8] standardised LM features.
    pub features: Tensor,
    pub rows: i64,
    pub vocab: i64,
    pub pos_vocab: i64,
    pub device: Device,
}

impl CandidateTable {
    /// `min_len` pads every row to at least the widest convolution.
    pub fn new(inputs: &[CandidateInput], vocab: i64, pos_vocab: i64, min_len: usize, device: Device) -> Self {
        let t = inputs.iter().map(|c| c.words.len()).max().unwrap_or(0).max(min_len).max(1);
        let c = inputs.len();
        let mut words = vec![0i32; c * t];
        let mut pos = vec![0i32; c * t];
        let mut indicator = vec![INDICATOR_PAD; c * t];
        let mut features = Vec::with_capacity(c * 8);
        for (r, input) in inputs.iter().enumerate() {
            let row = r * t;
            words[row..row + input.words.len()].copy_from_slice(&input.words);
            pos[row..row + input.pos.len()].copy_from_slice(&input.pos);
            for (j, ind) in indicator[row..row + input.words.len()].iter_mut().enumerate() {
                *ind = if input.marked.contains(&j) { INDICATOR_NOUN_PHRASE } else { INDICATOR_ENDING };
            }
            features.extend_from_slice(&input.features);
        }
        let shape = [c as i64, t as i64];
        Self {
            words: Tensor::from_slice(&words).view(shape).to(device),
            pos: Tensor::from_slice(&pos).view(shape).to(device),
            indicator: Tensor::from_slice(&indicator).view(shape).to(device),
            features: Tensor::from_slice(&features).view([c as i64, 8]).to(device),
            rows: c as i64,
            vocab,
            pos_vocab,
            device,
        }
    }
}

/// The rows of one batch, gathered from the table.
struct Batch {
    words: Tensor,
    pos: Tensor,
    indicator: Tensor,
    features: Tensor,
    /// [N, T] true where there is a token.
    mask: Tensor,
}

impl Batch {
    fn gather(table: &CandidateTable, rows: &Tensor) -> Self {
        let pick = |t: &Tensor| t.index_select(0, rows).to_kind(Kind::Int64);
        let indicator = pick(&table.indicator);
        Self {
            words: pick(&table.words),
            pos: pick(&table.pos),
            mask: indicator.ne(i64::from(INDICATOR_PAD)),
            indicator,
            features: table.features.index_select(0, rows),
        }
    }
}

#[derive(Debug)]
enum Net {
    Mlp { first: nn::Linear, second: nn::Linear, dropout: f64 },
    Bow { embedding: nn::Embedding },
    Cnn { words: nn::Embedding, indicator: nn::Embedding, convs: Vec<nn::Conv1D> },
    PosLstm { pos: nn::Embedding, indicator: nn::Embedding, lstm: nn::LSTM },
    /// Word ids 0..vocab, bigram buckets after them.
    Ngram { embedding: nn::Embedding, vocab: i64, buckets: i64 },
    Lstm { words: nn::Embedding, indicator: nn::Embedding, lstm: nn::LSTM },
}

/// Spreads word bigrams over the n-gram member's buckets (a large prime keeps pairs apart).
const BIGRAM_PRIME: i64 = 1_000_003;

impl Net {
    fn new(p: &nn::Path, member: Member, config: &CommitteeConfig, vocab: i64, pos_vocab: i64) -> (Self, i64) {
        let emb = |p: nn::Path, n: i64, d: i64| nn::embedding(p, n, d, nn::EmbeddingConfig { padding_idx: 0, ..Default::default() });
        let bilstm = |p: nn::Path| {
            let rnn = nn::RNNConfig { bidirectional: true, batch_first: true, ..Default::default() };
            nn::lstm(p, config.embedding + config.indicator_embedding, config.lstm_hidden, rnn)
        };
        match member {
            Member::Mlp => (
                Net::Mlp {
                    first: nn::linear(p / "first", 8, config.mlp_hidden, Default::default()),
                    second: nn::linear(p / "second", config.mlp_hidden, config.mlp_hidden, Default::default()),
                    dropout: config.mlp_dropout,
                },
                config.mlp_hidden,
            ),
            Member::Bow => (Net::Bow { embedding: emb(p / "embedding", vocab, config.embedding) }, config.embedding),
            Member::Cnn => {
                let input = config.embedding + config.indicator_embedding;
                let convs = config
                    .cnn_widths
                    .iter()
                    .map(|&w| nn::conv1d(p / format!("conv{w}"), input, config.cnn_filters, w, Default::default()))
                    .collect();
                (
                    Net::Cnn {
                        words: emb(p / "words", vocab, config.embedding),
                        indicator: emb(p / "indicator", 3, config.indicator_embedding),
                        convs,
                    },
                    config.cnn_filters * config.cnn_widths.len() as i64,
                )
            }
            Member::PosLstm => (
                Net::PosLstm {
                    pos: emb(p / "pos", pos_vocab, config.embedding),
                    indicator: emb(p / "indicator", 3, config.indicator_embedding),
                    lstm: bilstm(p / "lstm"),
                },
                2 * config.lstm_hidden,
            ),
            Member::Ngram => (
                Net::Ngram {
                    // fastText's initialisation: small uniform, so the many rare bigrams start as
                    // near-zero rather than as noise that drowns the mean.
                    embedding: nn::embedding(
                        p / "embedding",
                        vocab + config.ngram_buckets,
                        config.embedding,
                        nn::EmbeddingConfig {
                            padding_idx: 0,
                            ws_init: nn::Init::Uniform { lo: -1.0 / config.embedding as f64, up: 1.0 / config.embedding as f64 },
                            ..Default::default()
                        },
                    ),
                    vocab,
                    buckets: config.ngram_buckets,
                },
                config.embedding,
            ),
            Member::Lstm => (
                Net::Lstm {
                    words: emb(p / "words", vocab, config.embedding),
                    indicator: emb(p / "indicator", 3, config.indicator_embedding),
                    lstm: bilstm(p / "lstm"),
                },
                2 * config.lstm_hidden,
            ),
        }
    }

    /// The member's representation of each candidate.
    /// # Shapes
    /// -> [N, R]
    fn represent(&self, b: &Batch, dropout: f64, train: bool) -> Tensor {
        match self {
            Net::Mlp { first, second, dropout } => {
                let h = first.forward(&b.features).selu().alpha_dropout(*dropout, train);
                second.forward(&h).selu().alpha_dropout(*dropout, train)
            }
            Net::Bow { embedding } => {
                let mask = b.mask.to_kind(Kind::Float).unsqueeze(-1);
                let sum = (embedding.forward(&b.words) * &mask).sum_dim_intlist(1, false, Kind::Float);
                (sum / mask.sum_dim_intlist(1, false, Kind::Float).clamp_min(1.0)).dropout(dropout, train)
            }
            Net::Cnn { words, indicator, convs } => {
                // [N, T, E] -> [N, E, T] for conv1d.
                let x = Tensor::cat(&[words.forward(&b.words), indicator.forward(&b.indicator)], 2).transpose(1, 2);
                let pooled: Vec<Tensor> = convs.iter().map(|c| c.forward(&x).relu().amax([2].as_slice(), false)).collect();
                Tensor::cat(&pooled, 1).dropout(dropout, train)
            }
            Net::PosLstm { pos, indicator, lstm } => max_pooled_bilstm(lstm, &pos.forward(&b.pos), indicator, b).dropout(dropout, train),
            Net::Lstm { words, indicator, lstm } => max_pooled_bilstm(lstm, &words.forward(&b.words), indicator, b).dropout(dropout, train),
            Net::Ngram { embedding, vocab, buckets } => {
                let t = b.words.size()[1];
                let (left, right) = (b.words.narrow(1, 0, t - 1), b.words.narrow(1, 1, t - 1));
                let bigrams = (left * BIGRAM_PRIME + right).remainder(*buckets) + *vocab;
                let ids = Tensor::cat(&[&b.words, &bigrams], 1);
                let bigram_mask = b.mask.narrow(1, 0, t - 1).logical_and(&b.mask.narrow(1, 1, t - 1));
                let mask = Tensor::cat(&[&b.mask, &bigram_mask], 1).to_kind(Kind::Float).unsqueeze(-1);
                let sum = (embedding.forward(&ids) * &mask).sum_dim_intlist(1, false, Kind::Float);
                (sum / mask.sum_dim_intlist(1, false, Kind::Float).clamp_min(1.0)).dropout(dropout, train)
            }
        }
    }
}

/// A BiLSTM over token + indicator embeddings, max-pooled over the real tokens.
/// # Shapes
/// tokens: [N, T, E] -> [N, 2H]
fn max_pooled_bilstm(lstm: &nn::LSTM, tokens: &Tensor, indicator: &nn::Embedding, b: &Batch) -> Tensor {
    let x = Tensor::cat(&[tokens, &indicator.forward(&b.indicator)], 2);
    let (out, _) = lstm.seq(&x);
    // Padding must never win the max: push it far below any output (LSTM outputs lie in (-1, 1)).
    let out = out.masked_fill(&b.mask.logical_not().unsqueeze(-1), -1e4);
    out.amax([1].as_slice(), false)
}

/// One head's scores for a batch of candidates.
pub struct HeadOutput {
    pub head: String,
    pub is_member: bool,
    /// [N]
    pub scores: Tensor,
}

/// The committee of one AF iteration: the stage's members, their score layers, and the joint head.
#[derive(Debug)]
pub struct CommitteeModel {
    members: Vec<(Member, Net, nn::Linear)>,
    joint: Option<(nn::Linear, nn::Linear)>,
    dropout: f64,
}

impl CommitteeModel {
    pub fn new(root: &nn::Path, config: &CommitteeConfig, members: &[Member], joint: bool, table: &CandidateTable) -> Self {
        let mut total = 0;
        let members: Vec<(Member, Net, nn::Linear)> = members
            .iter()
            .map(|&m| {
                let p = root / m.name();
                let (net, width) = Net::new(&p, m, config, table.vocab, table.pos_vocab);
                total += width;
                (m, net, nn::linear(&p / "score", width, 1, Default::default()))
            })
            .collect();
        let joint = joint.then(|| {
            let p = root / JOINT;
            (nn::linear(&p / "hidden", total, config.joint_hidden, Default::default()), nn::linear(&p / "score", config.joint_hidden, 1, Default::default()))
        });
        Self { members, joint, dropout: config.dropout }
    }

    /// Head names in output order: the joint head (if any), then the members.
    pub fn heads(&self) -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> = self.joint.iter().map(|_| (JOINT.to_string(), false)).collect();
        v.extend(self.members.iter().map(|(m, _, _)| (m.name().to_string(), true)));
        v
    }

    /// The members' representations of the candidates at `rows`, concatenated (eval mode).
    /// # Shapes
    /// -> [N, sum of member widths]
    pub fn represent(&self, table: &CandidateTable, rows: &Tensor) -> Tensor {
        let batch = Batch::gather(table, rows);
        let reps: Vec<Tensor> = self.members.iter().map(|(_, net, _)| net.represent(&batch, self.dropout, false)).collect();
        Tensor::cat(&reps, 1)
    }

    /// Every head's score for the candidates at `rows` (i64 [N] on the table's device).
    pub fn forward(&self, table: &CandidateTable, rows: &Tensor, train: bool) -> Vec<HeadOutput> {
        let batch = Batch::gather(table, rows);
        let mut reps = Vec::with_capacity(self.members.len());
        let mut out = Vec::with_capacity(self.members.len() + 1);
        for (m, net, score) in &self.members {
            let r = net.represent(&batch, self.dropout, train);
            out.push(HeadOutput { head: m.name().to_string(), is_member: true, scores: score.forward(&r).squeeze_dim(1) });
            reps.push(r);
        }
        if let Some((hidden, score)) = &self.joint {
            let h = hidden.forward(&Tensor::cat(&reps, 1)).relu().dropout(self.dropout, train);
            out.insert(0, HeadOutput { head: JOINT.to_string(), is_member: false, scores: score.forward(&h).squeeze_dim(1) });
        }
        out
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    pub epochs: usize,
    pub best_epoch: usize,
    pub train_loss: Vec<f64>,
    pub validation_accuracy: Vec<f64>,
}

/// Trains `model` (whose variables are in `vs`) on questions: each a list of table rows, the
/// right option first. Seeded: on CPU the same inputs give the same weights.
pub fn train(
    vs: &nn::VarStore,
    model: &CommitteeModel,
    table: &CandidateTable,
    questions: &[Vec<i64>],
    config: &CommitteeConfig,
    seed: u64,
) -> Result<TrainReport, NnError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..questions.len()).collect();
    order.shuffle(&mut rng);
    let n_valid = if config.validation_share > 0.0 && questions.len() >= 10 {
        ((questions.len() as f64 * config.validation_share).round() as usize).max(1)
    } else {
        0
    };
    let (valid, fit) = order.split_at(n_valid);
    let mut fit = fit.to_vec();
    let mut opt = nn::Adam::default().build(vs, config.learning_rate).map_err(NnError::Torch)?;
    let mut report = TrainReport::default();
    let mut best: Option<(f64, HashMap<String, Tensor>)> = None;
    for epoch in 0..config.epochs.max(1) {
        fit.shuffle(&mut rng);
        let (mut loss_sum, mut steps) = (0.0, 0usize);
        for chunk in batches_by_width(&fit, questions, config.batch_items.max(1), &mut rng) {
            let chunk = chunk.as_slice();
            let (rows, width) = question_rows(questions, chunk, table.device);
            let heads = model.forward(table, &rows, true);
            let target = Tensor::zeros([chunk.len() as i64], (Kind::Int64, table.device));
            let loss = heads
                .iter()
                .map(|h| h.scores.view([chunk.len() as i64, width]).cross_entropy_for_logits(&target))
                .reduce(|a, b| a + b)
                .expect("a committee has at least one head");
            opt.zero_grad();
            loss.backward();
            opt.clip_grad_norm(config.clip_norm);
            opt.step();
            loss_sum += loss.double_value(&[]);
            steps += 1;
        }
        report.train_loss.push(loss_sum / steps.max(1) as f64);
        report.epochs = epoch + 1;
        if valid.is_empty() {
            report.best_epoch = epoch;
            continue;
        }
        let accuracy = validation_accuracy(model, table, questions, valid, config.score_batch);
        report.validation_accuracy.push(accuracy);
        if best.as_ref().is_none_or(|(b, _)| accuracy > *b) {
            let weights = vs.variables().into_iter().map(|(k, v)| (k, v.detach().copy())).collect();
            best = Some((accuracy, weights));
            report.best_epoch = epoch;
        } else {
            break;
        }
    }
    if let Some((_, weights)) = best {
        tch::no_grad(|| {
            for (name, mut var) in vs.variables() {
                var.copy_(&weights[&name]);
            }
        });
    }
    Ok(report)
}

/// Batches of at most `size` questions, each of one width (number of options). AF's questions all
/// have k+1 options and are batched in their shuffled order; datasets with mixed widths (SWAG's
/// full layout) get per-width batches in a shuffled order.
fn batches_by_width(order: &[usize], questions: &[Vec<i64>], size: usize, rng: &mut ChaCha8Rng) -> Vec<Vec<usize>> {
    let mut by_width: Vec<(usize, Vec<usize>)> = Vec::new();
    for &q in order {
        let w = questions[q].len();
        match by_width.iter_mut().find(|(width, _)| *width == w) {
            Some((_, v)) => v.push(q),
            None => by_width.push((w, vec![q])),
        }
    }
    let mut batches: Vec<Vec<usize>> = by_width.iter().flat_map(|(_, v)| v.chunks(size).map(<[usize]>::to_vec)).collect();
    if by_width.len() > 1 {
        batches.shuffle(rng);
    }
    batches
}

/// Rows of the questions at `which`, as one [B*(k+1)] tensor; all questions have the same width.
fn question_rows(questions: &[Vec<i64>], which: &[usize], device: Device) -> (Tensor, i64) {
    let width = questions[which[0]].len();
    let flat: Vec<i64> = which.iter().flat_map(|&q| {
        debug_assert_eq!(questions[q].len(), width);
        questions[q].iter().copied()
    }).collect();
    (Tensor::from_slice(&flat).to(device), width as i64)
}

fn validation_accuracy(model: &CommitteeModel, table: &CandidateTable, questions: &[Vec<i64>], valid: &[usize], batch: usize) -> f64 {
    let rows: Vec<i64> = valid.iter().flat_map(|&q| questions[q].iter().copied()).collect();
    let scores = score(model, table, &rows, batch);
    let mut total = 0.0;
    for head in &scores {
        let mut at = 0;
        let mut right = 0;
        for &q in valid {
            let s = &head.1[at..at + questions[q].len()];
            right += usize::from(s[1..].iter().all(|&d| s[0] > d));
            at += s.len();
        }
        total += right as f64 / valid.len() as f64;
    }
    total / scores.len() as f64
}

/// Every head's scores for `rows`, in order, on the host: (head, is_member, scores).
pub fn score(model: &CommitteeModel, table: &CandidateTable, rows: &[i64], batch: usize) -> Vec<(String, Vec<f32>)> {
    let heads = model.heads();
    let mut out: Vec<Vec<f32>> = vec![Vec::with_capacity(rows.len()); heads.len()];
    tch::no_grad(|| {
        for chunk in rows.chunks(batch.max(1)) {
            let r = Tensor::from_slice(chunk).to(table.device);
            for (h, o) in model.forward(table, &r, false).into_iter().zip(out.iter_mut()) {
                let s = h.scores.to_kind(Kind::Float).to(Device::Cpu);
                o.extend(Vec::<f32>::try_from(&s).expect("f32 scores"));
            }
        }
    });
    heads.into_iter().map(|(name, _)| name).zip(out).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table where right answers contain word 5 and wrong ones never do: every text member must
    /// learn it; the MLP sees only noise and must stay near chance.
    fn planted(questions: usize, width: usize, seed: u64) -> (CandidateTable, Vec<Vec<i64>>) {
        use rand::Rng;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut inputs = Vec::new();
        let mut qs = Vec::new();
        for _ in 0..questions {
            let mut q = Vec::new();
            for option in 0..width {
                let mut words: Vec<i32> = (0..6).map(|_| rng.random_range(6..40)).collect();
                if option == 0 {
                    let at = rng.random_range(2..6);
                    words[at] = 5;
                }
                let pos = words.iter().map(|w| if *w < 20 { *w } else { 20 + w % 3 }).collect();
                let features = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
                q.push(inputs.len() as i64);
                inputs.push(CandidateInput { words, pos, marked: 0..2, features });
            }
            qs.push(q);
        }
        (CandidateTable::new(&inputs, 40, 24, 5, Device::Cpu), qs)
    }

    fn small(epochs: usize, validation_share: f64, batch_items: usize, learning_rate: f64) -> CommitteeConfig {
        CommitteeConfig {
            embedding: 16,
            mlp_hidden: 32,
            cnn_filters: 8,
            lstm_hidden: 16,
            joint_hidden: 16,
            ngram_buckets: 1000,
            epochs,
            validation_share,
            batch_items,
            learning_rate,
            ..Default::default()
        }
    }

    #[test]
    fn text_members_find_a_planted_word_and_the_feature_mlp_does_not() {
        let _torch_rng = crate::torch_rng_lock();
        tch::manual_seed(1);
        let (table, qs) = planted(200, 4, 1);
        let vs = nn::VarStore::new(Device::Cpu);
        let settings = small(6, 0.0, 16, 1e-2);
        let model = CommitteeModel::new(&vs.root(), &settings, &Member::ALL, true, &table);
        let (fit, held) = qs.split_at(140);
        train(&vs, &model, &table, fit, &settings, 1).unwrap();
        let rows: Vec<i64> = held.iter().flatten().copied().collect();
        for (head, scores) in score(&model, &table, &rows, 64) {
            let acc = scores.chunks(4).filter(|s| s[1..].iter().all(|&d| s[0] > d)).count() as f64 / held.len() as f64;
            if head == "mlp" {
                assert!(acc < 0.45, "mlp has no signal to use: {acc}");
            } else {
                assert!(acc > 0.8, "{head} should find the planted word: {acc}");
            }
        }
    }

    #[test]
    fn training_is_deterministic_on_cpu() {
        let _torch_rng = crate::torch_rng_lock();
        let run = || {
            tch::manual_seed(7);
            let (table, qs) = planted(60, 4, 2);
            let vs = nn::VarStore::new(Device::Cpu);
            let settings = small(2, 0.2, 8, 1e-3);
            let model = CommitteeModel::new(&vs.root(), &settings, &[Member::Cnn, Member::PosLstm], true, &table);
            let report = train(&vs, &model, &table, &qs, &settings, 3).unwrap();
            (report, score(&model, &table, &[0, 1, 2, 3, 17], 2))
        };
        let (a, b) = (run(), run());
        assert_eq!(a.0, b.0);
        assert_eq!(a.1, b.1);
        assert_eq!(a.1.iter().map(|h| h.0.as_str()).collect::<Vec<_>>(), ["joint", "cnn", "pos-lstm"]);
    }
}
