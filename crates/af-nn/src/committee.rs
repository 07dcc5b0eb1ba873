//! The stylistic committee of Adversarial Filtering (DESIGN §1.3): four members that each score
//! one candidate (the second sentence, noun phrase + ending) and a joint head over their
//! concatenated representations, trained together on the sum of every head's softmax
//! cross-entropy over an item's options.
//!
//! Candidates live in a [`CandidateTable`] on the device, built once per run; training and scoring
//! address rows of it by index, so an AF iteration moves no text and almost no data.
//!
//! A candidate's score does not depend on how much padding it is read with: the CNN pools only
//! windows that start inside the sentence, and the BiLSTM's backward direction reads each sentence
//! reversed within its own length (pads after it, never before). So every batch is cut to its
//! longest row, and scoring sorts rows by length first, which is most of a BiLSTM's time saved
//! on pools of short endings.

use std::collections::HashMap;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tch::nn::{self, Module, OptimizerConfig, RNN};
use tch::{Device, Kind, Tensor};

pub use af_core::{CommitteeConfig, Member, JOINT_HEAD as JOINT};

use crate::table::CandidateTable;
use crate::NnError;

/// The rows of one batch, gathered from the table.
struct Batch {
    words: Tensor,
    pos: Tensor,
    indicator: Tensor,
    features: Tensor,
    /// [N, T] true where there is a token.
    mask: Tensor,
    /// [N] tokens per row.
    lengths: Tensor,
}

impl Batch {
    /// The rows at `rows`, padded (or cut) to `width` columns.
    fn gather(table: &CandidateTable, rows: &Tensor, width: i64) -> Self {
        let starts = table.starts.index_select(0, rows).unsqueeze(1);
        let lengths = table.lengths_on_device.index_select(0, rows);
        let positions = Tensor::arange(width, (Kind::Int64, table.device)).unsqueeze(0);
        let mask = positions.lt_tensor(&lengths.unsqueeze(1));
        // Padding reads token 0 of the table and is zeroed after.
        let index = (starts + &positions).where_self(&mask, &Tensor::zeros([], (Kind::Int64, table.device)));
        let n = index.size()[0];
        let flat = index.flatten(0, -1);
        let pick = |t: &Tensor| t.index_select(0, &flat).view([n, width]).to_kind(Kind::Int64).masked_fill(&mask.logical_not(), 0);
        Self {
            words: pick(&table.words),
            pos: pick(&table.pos),
            indicator: pick(&table.indicator),
            lengths,
            mask,
            features: table.features.index_select(0, rows),
        }
    }
}

#[derive(Debug)]
enum Net {
    Mlp { first: nn::Linear, second: nn::Linear, dropout: f64 },
    Bow { embedding: nn::Embedding },
    Cnn { words: nn::Embedding, indicator: nn::Embedding, convs: Vec<nn::Conv1D> },
    PosLstm { pos: nn::Embedding, indicator: nn::Embedding, lstm: BiLstm },
    /// Word ids 0..vocab, bigram buckets after them.
    Ngram { embedding: nn::Embedding, vocab: i64, buckets: i64 },
    Lstm { words: nn::Embedding, indicator: nn::Embedding, lstm: BiLstm },
}

/// A bidirectional LSTM as two one-way LSTMs, so that the backward one can read each row reversed
/// within its own length (libtorch's bidirectional LSTM would read the padding first).
#[derive(Debug)]
struct BiLstm {
    forward: nn::LSTM,
    backward: nn::LSTM,
}

/// Spreads word bigrams over the n-gram member's buckets (a large prime keeps pairs apart).
const BIGRAM_PRIME: i64 = 1_000_003;

impl Net {
    fn new(p: &nn::Path, member: Member, config: &CommitteeConfig, vocab: i64, pos_vocab: i64) -> (Self, i64) {
        let emb = |p: nn::Path, n: i64, d: i64| nn::embedding(p, n, d, nn::EmbeddingConfig { padding_idx: 0, ..Default::default() });
        let bilstm = |p: nn::Path| {
            let rnn = nn::RNNConfig { batch_first: true, ..Default::default() };
            let input = config.embedding + config.indicator_embedding;
            BiLstm {
                forward: nn::lstm(&p / "forward", input, config.lstm_hidden, rnn),
                backward: nn::lstm(&p / "backward", input, config.lstm_hidden, rnn),
            }
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
                let pooled: Vec<Tensor> = convs
                    .iter()
                    .map(|c| {
                        let out = c.forward(&x).relu();
                        // Only windows that start inside the sentence, and always the first: the
                        // score must not depend on how much padding follows. After ReLU, zeroing
                        // the others cannot change the max.
                        let width = c.ws.size()[2];
                        let starts = Tensor::arange(out.size()[2], (Kind::Int64, out.device())).unsqueeze(0);
                        let last_start = (&b.lengths - width).clamp_min(0).unsqueeze(1);
                        out.masked_fill(&starts.gt_tensor(&last_start).unsqueeze(1), 0.0).amax([2].as_slice(), false)
                    })
                    .collect();
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
fn max_pooled_bilstm(lstm: &BiLstm, tokens: &Tensor, indicator: &nn::Embedding, b: &Batch) -> Tensor {
    let x = Tensor::cat(&[tokens, &indicator.forward(&b.indicator)], 2);
    let (forward, _) = lstm.forward.seq(&x);
    // Max-pooling does not care about order, so the backward outputs stay reversed.
    let (backward, _) = lstm.backward.seq(&reverse_within_length(&x, &b.lengths));
    // Padding (after the tokens in both directions) must never win the max: push it far below
    // any output (LSTM outputs lie in (-1, 1)).
    let pad = b.mask.logical_not().unsqueeze(-1);
    Tensor::cat(&[forward.masked_fill(&pad, -1e4), backward.masked_fill(&pad, -1e4)], 2).amax([1].as_slice(), false)
}

/// Each row's first `lengths[n]` positions in reverse order, its padding left where it is.
/// # Shapes
/// x: [N, T, E], lengths: [N] -> [N, T, E]
fn reverse_within_length(x: &Tensor, lengths: &Tensor) -> Tensor {
    let (n, t, e) = x.size3().expect("[N, T, E]");
    let positions = Tensor::arange(t, (Kind::Int64, x.device())).unsqueeze(0).expand([n, t], false);
    let lengths = lengths.unsqueeze(1);
    let reversed = (&lengths - 1 - &positions).where_self(&positions.lt_tensor(&lengths), &positions);
    x.gather(1, &reversed.unsqueeze(2).expand([n, t, e], false), false)
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
    /// Score under CUDA autocast ([`af_core::config::Precision`]).
    mixed: bool,
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
        Self { members, joint, dropout: config.dropout, mixed: config.precision.mixed_on(table.device.is_cuda()) }
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
    pub fn represent(&self, table: &CandidateTable, rows: &[i64]) -> Tensor {
        let batch = Batch::gather(table, &Tensor::from_slice(rows).to(table.device), table.width_of(rows));
        // fp32 whatever autocast made of each member (the bag of words has no matrix product).
        let reps: Vec<Tensor> = self.members.iter().map(|(_, net, _)| net.represent(&batch, self.dropout, false).to_kind(Kind::Float)).collect();
        Tensor::cat(&reps, 1)
    }

    /// Every head's score for the candidates at `rows` (table rows).
    pub fn forward(&self, table: &CandidateTable, rows: &[i64], train: bool) -> Vec<HeadOutput> {
        let batch = Batch::gather(table, &Tensor::from_slice(rows).to(table.device), table.width_of(rows));
        let mut reps = Vec::with_capacity(self.members.len());
        let mut out = Vec::with_capacity(self.members.len() + 1);
        for (m, net, score) in &self.members {
            let r = net.represent(&batch, self.dropout, train);
            out.push(HeadOutput { head: m.name().to_string(), is_member: true, scores: score.forward(&r).squeeze_dim(1) });
            // Under autocast members come out in fp16 or fp32: the joint head reads them as fp32.
            reps.push(r.to_kind(Kind::Float));
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
            let (rows, width) = question_rows(questions, chunk);
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

/// Rows of the questions at `which`, flat (B*(k+1)); all questions have the same width.
fn question_rows(questions: &[Vec<i64>], which: &[usize]) -> (Vec<i64>, i64) {
    let width = questions[which[0]].len();
    let flat: Vec<i64> = which.iter().flat_map(|&q| {
        debug_assert_eq!(questions[q].len(), width);
        questions[q].iter().copied()
    }).collect();
    (flat, width as i64)
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

/// Every head's scores for `rows`, in order, on the host: (head, scores).
///
/// Rows are scored shortest first, in batches of `batch` cut to their longest row, and the
/// scores put back in the order asked for; the scores are the same as in any other order.
pub fn score(model: &CommitteeModel, table: &CandidateTable, rows: &[i64], batch: usize) -> Vec<(String, Vec<f32>)> {
    let heads = model.heads();
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| table.lengths[rows[i] as usize]);
    let mut out: Vec<Vec<f32>> = vec![vec![0.0; rows.len()]; heads.len()];
    tch::no_grad(|| {
        // Every batch's scores stay on the device until the end: one host copy per head.
        let mut on_device: Vec<Vec<Tensor>> = heads.iter().map(|_| Vec::new()).collect();
        for chunk in order.chunks(batch.max(1)) {
            let r: Vec<i64> = chunk.iter().map(|&i| rows[i]).collect();
            let heads = crate::runtime::in_precision(model.mixed, table.device, || model.forward(table, &r, false));
            for (h, o) in heads.into_iter().zip(on_device.iter_mut()) {
                o.push(h.scores.to_kind(Kind::Float));
            }
        }
        for (scores, o) in on_device.iter().zip(out.iter_mut()) {
            if scores.is_empty() {
                continue;
            }
            let sorted = Vec::<f32>::try_from(Tensor::cat(scores, 0).to(Device::Cpu)).expect("f32 scores");
            for (&i, s) in order.iter().zip(sorted) {
                o[i] = s;
            }
        }
    });
    heads.into_iter().map(|(name, _)| name).zip(out).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{RawCandidate, TableAssembler, Vocabularies};

    /// One candidate given by its ids: word ids, POS-view ids (below 256), marked range, features.
    struct CandidateInput {
        words: Vec<i32>,
        pos: Vec<i32>,
        marked: std::ops::Range<usize>,
        features: [f32; 8],
    }

    /// A table of candidates given by their ids, through the assembler (ids map to themselves).
    fn table_of(inputs: &[CandidateInput], vocab: i64, pos_vocab: i64, min_len: usize) -> CandidateTable {
        let interned: Vec<Vec<u32>> = inputs.iter().map(|c| c.words.iter().map(|&w| w as u32).collect()).collect();
        let tags: Vec<Vec<u8>> = inputs.iter().map(|c| c.pos.iter().map(|&p| u8::try_from(p).unwrap()).collect()).collect();
        let mut assembler = TableAssembler::new(Device::Cpu);
        let raw: Vec<RawCandidate> = inputs
            .iter()
            .zip(&interned)
            .zip(&tags)
            .map(|((c, interned), tags)| RawCandidate { interned, tags, marked: c.marked.clone(), features: c.features })
            .collect();
        assembler.push(&raw);
        let vocabularies = Vocabularies {
            word_of: (0..vocab as i32).collect(),
            pos_word_of: vec![-1; vocab as usize],
            tag_base: 0,
            vocab,
            pos_vocab,
        };
        assembler.finish(&vocabularies, [0.0; 8], [1.0; 8], min_len)
    }

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
        (table_of(&inputs, 40, 24, 5), qs)
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
    fn scores_do_not_depend_on_padding_or_batch_mates() {
        let _torch_rng = crate::torch_rng_lock();
        tch::manual_seed(5);
        // Rows of lengths 1..=12, read in batches at least 5 wide and at least 30 wide.
        let inputs: Vec<CandidateInput> = (1..=12usize)
            .map(|len| CandidateInput {
                words: (0..len).map(|j| 2 + ((len * 7 + j * 3) % 37) as i32).collect(),
                pos: (0..len).map(|j| 2 + ((len + j) % 20) as i32).collect(),
                marked: 0..len.min(2),
                features: std::array::from_fn(|f| (f as f32 - 3.5) / 4.0),
            })
            .collect();
        let narrow = table_of(&inputs, 40, 24, 5);
        let wide = table_of(&inputs, 40, 24, 30);
        assert_eq!((narrow.width_of(&[0]), narrow.width_of(&[0, 11])), (5, 12));
        assert_eq!((wide.width_of(&[0]), wide.width_of(&[0, 11])), (30, 30));
        assert_eq!(narrow.tokens(), (1..=12).sum::<i64>(), "stored unpadded");
        let vs = nn::VarStore::new(Device::Cpu);
        let model = CommitteeModel::new(&vs.root(), &small(1, 0.0, 4, 1e-3), &Member::ALL, true, &narrow);
        let rows: Vec<i64> = (0..12).rev().collect();
        let all = score(&model, &narrow, &rows, 64);
        let one_by_one = score(&model, &narrow, &rows, 1);
        let padded = score(&model, &wide, &rows, 5);
        for ((a, b), c) in all.iter().zip(&one_by_one).zip(&padded) {
            for ((x, y), z) in a.1.iter().zip(&b.1).zip(&c.1) {
                assert!((x - y).abs() < 1e-5 && (x - z).abs() < 1e-5, "{}: {x} {y} {z}", a.0);
            }
        }
        // And the rows are really read: different rows score differently on every text head.
        for (head, s) in &all {
            assert!(head == "mlp" || s.windows(2).any(|w| (w[0] - w[1]).abs() > 1e-4), "{head}: {s:?}");
        }
    }

    #[test]
    fn a_saved_table_loads_back_equal() {
        let (table, _) = planted(7, 4, 3);
        let dir = tempfile::tempdir().unwrap();
        table.save(dir.path(), 5).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1 + 6, "28 rows in files of 5, and table.json");
        let back = CandidateTable::load(dir.path(), Device::Cpu).unwrap();
        for (a, b) in [(&table.words, &back.words), (&table.pos, &back.pos), (&table.indicator, &back.indicator), (&table.features, &back.features)] {
            assert_eq!(a.kind(), b.kind());
            assert!(a.equal(b));
        }
        assert_eq!((back.rows, back.vocab, back.pos_vocab, back.min_len, &back.lengths), (table.rows, table.vocab, table.pos_vocab, table.min_len, &table.lengths));
        std::fs::remove_file(dir.path().join("part-003.safetensors")).unwrap();
        let e = CandidateTable::load(dir.path(), Device::Cpu).err().unwrap().to_string();
        assert!(e.contains("part-003.safetensors"), "{e}");
    }

    #[test]
    fn reversal_within_length_leaves_padding_in_place() {
        let x = Tensor::from_slice(&[1i64, 2, 3, 0, 0, 4, 5, 6, 7, 8]).view([2, 5, 1]);
        let r = reverse_within_length(&x, &Tensor::from_slice(&[3i64, 5]));
        assert_eq!(Vec::<i64>::try_from(r.flatten(0, -1)).unwrap(), [3, 2, 1, 0, 0, 8, 7, 6, 5, 4]);
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
