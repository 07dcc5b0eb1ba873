//! The stylistic committee of Adversarial Filtering (docs/design.md §1.3): members that each score one
//! candidate (the second sentence, noun phrase + ending) and a joint head over their
//! concatenated representations, trained together on the sum of every head's softmax
//! cross-entropy over an item's options.
//!
//! The members are open: [`Member`] is a kind of member (one file each under `members/`), the
//! [`Registry`] names them, and [`CommitteeModel`] builds the ones a stage asks for by name.
//!
//! Candidates live in a [`CandidateTable`] on the device, built once per run; training and scoring
//! address rows of it by index, so an AF iteration moves no text and almost no data.
//!
//! A candidate's score does not depend on how much padding it is read with: the CNN pools only
//! windows that start inside the sentence, and the BiLSTM's backward direction reads each sentence
//! reversed within its own length (pads after it, never before). So every batch is cut to its
//! longest row, scoring sorts rows by length first, and on the CPU those members compute a
//! training batch in groups of similar length ([`Batch::by_length`]): most of a BiLSTM's and a
//! CNN's time saved, on pools of short endings and on long full-view rows alike.

pub mod member;
pub mod members;

use std::collections::HashMap;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};

pub use af_core::{CommitteeConfig, MemberName, JOINT_HEAD as JOINT};
pub use member::{
    reads_full_view_rows, BuildContext, Column, FineTunedMember, Member, MemberKind, MemberNet,
};
pub use members::Registry;

use crate::table::CandidateTable;
use crate::NnError;
use af_core::ScoreBatch;

/// The rows of one batch, gathered from the table: what a [`MemberNet`] reads. Token columns
/// are i64, zero at padding.
pub struct Batch {
    /// [N, T] word ids.
    pub words: Tensor,
    /// [N, T] POS-view ids.
    pub pos: Tensor,
    /// [N, T] 1 noun phrase, 2 ending.
    pub indicator: Tensor,
    /// [N, 8] standardised LM features.
    pub features: Tensor,
    /// [N, T] true where there is a token.
    pub mask: Tensor,
    /// [N] tokens per row.
    pub lengths: Tensor,
    /// [N, D] f32 frozen embeddings of the rows' text, when the table has them.
    pub encoded: Option<Tensor>,
    /// [N, D] f32 frozen embeddings of the rows' contexts, when the table has them.
    pub encoded_context: Option<Tensor>,
    /// [N, F] the rows' LM-likelihood features, when the table has them.
    pub lm_likelihood: Option<Tensor>,
}

impl Batch {
    /// The rows at `rows`, padded (or cut) to `width` columns.
    pub(crate) fn gather(table: &CandidateTable, rows: &Tensor, width: i64) -> Self {
        let starts = table.starts.index_select(0, rows).unsqueeze(1);
        let lengths = table.lengths_on_device.index_select(0, rows);
        let positions = Tensor::arange(width, (Kind::Int64, table.device)).unsqueeze(0);
        let mask = positions.lt_tensor(&lengths.unsqueeze(1));
        // Padding reads token 0 of the table and is zeroed after.
        let index = (starts + &positions)
            .where_self(&mask, &Tensor::zeros([], (Kind::Int64, table.device)));
        let n = index.size()[0];
        let flat = index.flatten(0, -1);
        let pick = |t: &Tensor| {
            t.index_select(0, &flat)
                .view([n, width])
                .to_kind(Kind::Int64)
                .masked_fill(&mask.logical_not(), 0)
        };
        Self {
            words: pick(&table.words),
            pos: pick(&table.pos),
            indicator: pick(&table.indicator),
            lengths,
            mask,
            features: table.features.index_select(0, rows),
            encoded: table
                .encoded
                .as_ref()
                .map(|e| e.text.index_select(0, rows).to_kind(Kind::Float)),
            encoded_context: table
                .encoded
                .as_ref()
                .and_then(|e| e.contexts.as_ref())
                .map(|(contexts, of)| {
                    contexts
                        .index_select(0, &of.index_select(0, rows))
                        .to_kind(Kind::Float)
                }),
            lm_likelihood: table
                .lm_likelihood
                .as_ref()
                .map(|f| f.index_select(0, rows)),
        }
    }

    /// The batch's rows at `rows` (positions in this batch), cut to their first `width` columns.
    fn select(&self, rows: &Tensor, width: i64) -> Self {
        let cut = |t: &Tensor| t.index_select(0, rows).narrow(1, 0, width);
        Self {
            words: cut(&self.words),
            pos: cut(&self.pos),
            indicator: cut(&self.indicator),
            mask: cut(&self.mask),
            lengths: self.lengths.index_select(0, rows),
            features: self.features.index_select(0, rows),
            encoded: self.encoded.as_ref().map(|e| e.index_select(0, rows)),
            encoded_context: self
                .encoded_context
                .as_ref()
                .map(|e| e.index_select(0, rows)),
            lm_likelihood: self.lm_likelihood.as_ref().map(|f| f.index_select(0, rows)),
        }
    }

    /// `per_row` over the batch's rows, computed on the CPU in groups of similar length, each cut
    /// to its own longest row; the outputs in the batch's order. For members whose output does
    /// not depend on padding (module doc): the same function of the batch, with less padding
    /// computed. A training batch is drawn at random, so its longest row is often three times
    /// its mean (HellaSwag's full view) and most of a padded BiLSTM's or CNN's work would be on
    /// padding; grouping by length inside the batch keeps the batch what it was (the same
    /// questions, the same loss, the same dropout draws) where sorting the data into batches of
    /// one length would not (docs/decisions.md). On a GPU, where padding is cheap next to many
    /// small kernels and a host sync per batch, the batch is computed as it is.
    /// # Shapes
    /// per_row: Batch of n rows -> [n, D]; -> [N, D]
    pub(crate) fn by_length(&self, per_row: impl Fn(&Batch) -> Tensor) -> Tensor {
        if self.words.device() != Device::Cpu {
            return per_row(self);
        }
        let lengths = Vec::<i64>::try_from(&self.lengths).expect("i64 lengths");
        let mut order: Vec<i64> = (0..lengths.len() as i64).collect();
        order.sort_by_key(|&i| lengths[i as usize]);
        let sorted: Vec<i64> = order.iter().map(|&i| lengths[i as usize]).collect();
        let groups = length_groups(&sorted, LENGTH_GROUP_OVERHEAD_ROWS);
        if groups.len() <= 1 {
            return per_row(self);
        }
        let order = Tensor::from_slice(&order);
        let parts: Vec<Tensor> = groups
            .iter()
            .map(|g| {
                per_row(&self.select(
                    &order.narrow(0, g.start as i64, g.len() as i64),
                    sorted[g.end - 1].max(1),
                ))
            })
            .collect();
        // Row order[j] of the batch is row j of the parts: put each back in its place.
        let out = Tensor::cat(&parts, 0);
        out.index_select(0, &order.argsort(0, false))
    }
}

/// What one more group costs in [`Batch::by_length`], in rows of padding: a group is a call of
/// its own, which a group of one or two rows does not repay. 4 to 100 were within noise of each
/// other for the CNN on HellaSwag-sized batches on CPU-2, and the BiLSTM was fastest at the
/// low end (docs/benchmarks.md).
const LENGTH_GROUP_OVERHEAD_ROWS: usize = 8;

/// Lengths sorted ascending, cut into consecutive groups that minimise the padded cells
/// (rows x longest) plus `overhead` rows per column of each group: exact, by dynamic programming
/// over the cut points (quadratic in the rows; a batch has hundreds).
fn length_groups(sorted: &[i64], overhead: usize) -> Vec<std::ops::Range<usize>> {
    let n = sorted.len();
    // best[j]: the cost of the first j rows; cut[j]: where the last group of that best starts.
    let mut best = vec![0u64; n + 1];
    let mut cut = vec![0usize; n + 1];
    for j in 1..=n {
        let longest = sorted[j - 1].max(1) as u64;
        let (mut b, mut c) = (u64::MAX, 0);
        for i in 0..j {
            let cost = best[i] + (j - i + overhead) as u64 * longest;
            if cost < b {
                (b, c) = (cost, i);
            }
        }
        (best[j], cut[j]) = (b, c);
    }
    let mut groups = Vec::new();
    let mut j = n;
    while j > 0 {
        groups.push(cut[j]..j);
        j = cut[j];
    }
    groups.reverse();
    groups
}

/// A batch's rows in each view a committee's members read.
struct Batches {
    given: Batch,
    full: Option<Batch>,
}

impl Batches {
    fn of(&self, full: bool) -> &Batch {
        if full {
            self.full
                .as_ref()
                .expect("gathered for a member that reads the full view")
        } else {
            &self.given
        }
    }
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
    /// Name, network, score layer.
    members: Vec<(String, Box<dyn MemberNet>, nn::Linear)>,
    /// Per member: whether it reads the table's full-view rows.
    full_view: Vec<bool>,
    joint: Option<(nn::Linear, nn::Linear)>,
    /// The joint head's dropout (members keep their own).
    dropout: f64,
    /// Score under CUDA autocast ([`af_core::config::Precision`]).
    mixed: bool,
}

impl CommitteeModel {
    /// `members` (looked up in `registry`) under `root / name`, each followed by its score layer
    /// at `root / name / score`, then the joint head at `root / joint`: variables are created, and
    /// so drawn from libtorch's generator, in that order.
    pub fn new(
        root: &nn::Path,
        config: &CommitteeConfig,
        registry: &Registry,
        members: &[MemberName],
        joint: bool,
        table: &CandidateTable,
    ) -> Result<Self, NnError> {
        // Every name and every member's settings checked before any variable is made.
        let kinds = members
            .iter()
            .map(|name| registry.lookup(name))
            .collect::<Result<Vec<_>, _>>()?;
        for member in &kinds {
            member.settings(config).map_err(NnError::InvalidSettings)?;
        }
        // A fine-tuned member (`encoder-ft`) is the caller's to run, beside this committee.
        let kinds: Vec<&dyn Member> = kinds.into_iter().filter_map(MemberKind::joint).collect();
        if kinds.is_empty() {
            return Err(NnError::InvalidSettings(format!(
                "the committee {} has no member that reads the candidate table (a fine-tuned member needs others to shortlist with)",
                members.iter().map(MemberName::as_str).collect::<Vec<_>>().join("+")
            )));
        }
        let ctx = BuildContext::of(config, table);
        let mut total = 0;
        let mut built = Vec::with_capacity(members.len());
        let mut full_view = Vec::with_capacity(members.len());
        for member in kinds {
            let full = member::reads_full_view_rows(member, config);
            if full && table.full_view.is_none() {
                return Err(NnError::InvalidSettings(format!(
                    "member `{}` reads the full view ([committee.member.{}] view = \"full\") and this table has no full-view rows",
                    member.name(),
                    member.name()
                )));
            }
            full_view.push(full);
            let p = root / member.name();
            let net = member.build(&p, &ctx)?;
            let width = net.width();
            total += width;
            let score = nn::linear(&p / "score", width, 1, Default::default());
            built.push((member.name().to_string(), net, score));
        }
        let joint = joint.then(|| {
            let p = root / JOINT;
            (
                nn::linear(
                    &p / "hidden",
                    total,
                    config.joint_hidden,
                    Default::default(),
                ),
                nn::linear(&p / "score", config.joint_hidden, 1, Default::default()),
            )
        });
        Ok(Self {
            members: built,
            full_view,
            joint,
            dropout: config.dropout,
            mixed: config.precision.mixed_on(table.device.is_cuda()),
        })
    }

    /// Head names in output order: the joint head (if any), then the members.
    pub fn heads(&self) -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> = self
            .joint
            .iter()
            .map(|_| (JOINT.to_string(), false))
            .collect();
        v.extend(self.members.iter().map(|(name, _, _)| (name.clone(), true)));
        v
    }

    /// The members' representations of the candidates at `rows`, concatenated (eval mode).
    /// # Shapes
    /// -> [N, sum of member widths]
    pub fn represent(&self, table: &CandidateTable, rows: &[i64]) -> Tensor {
        let batches = self.gather(table, rows);
        // fp32 whatever autocast made of each member (the bag of words has no matrix product).
        let reps: Vec<Tensor> = self
            .members
            .iter()
            .zip(&self.full_view)
            .map(|((_, net, _), &full)| net.represent(batches.of(full), false).to_kind(Kind::Float))
            .collect();
        Tensor::cat(&reps, 1)
    }

    /// The rows as each view's members read them: the table's rows, and its full-view rows when
    /// a member reads those.
    fn gather(&self, table: &CandidateTable, rows: &[i64]) -> Batches {
        let index = Tensor::from_slice(rows).to(table.device);
        let full = self.full_view.iter().any(|&f| f).then(|| {
            let view = table
                .full_view
                .as_deref()
                .expect("checked when the committee was built");
            Batch::gather(view, &index, view.width_of(rows))
        });
        Batches {
            given: Batch::gather(table, &index, table.width_of(rows)),
            full,
        }
    }

    /// Every head's score for the candidates at `rows` (table rows).
    pub fn forward(&self, table: &CandidateTable, rows: &[i64], train: bool) -> Vec<HeadOutput> {
        let batches = self.gather(table, rows);
        let mut reps = Vec::with_capacity(self.members.len());
        let mut out = Vec::with_capacity(self.members.len() + 1);
        for ((name, net, score), &full) in self.members.iter().zip(&self.full_view) {
            let r = net.represent(batches.of(full), train);
            out.push(HeadOutput {
                head: name.clone(),
                is_member: true,
                scores: score.forward(&r).squeeze_dim(1),
            });
            // Under autocast members come out in fp16 or fp32: the joint head reads them as fp32.
            reps.push(r.to_kind(Kind::Float));
        }
        if let Some((hidden, score)) = &self.joint {
            let h = hidden
                .forward(&Tensor::cat(&reps, 1))
                .relu()
                .dropout(self.dropout, train);
            out.insert(
                0,
                HeadOutput {
                    head: JOINT.to_string(),
                    is_member: false,
                    scores: score.forward(&h).squeeze_dim(1),
                },
            );
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
    /// The questions (indices) set aside for early stopping: scored, never fitted.
    #[serde(default)]
    pub validation_questions: Vec<usize>,
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
    train_observed(
        vs,
        model,
        table,
        questions,
        config,
        seed,
        &mut |_, _| Ok(()),
    )
}

/// Called after each epoch's updates (before validation): the epoch (0-based) and the model as
/// trained so far. Training dynamics (data maps) score the training questions here.
pub type EpochHook<'a> = dyn FnMut(usize, &CommitteeModel) -> Result<(), NnError> + 'a;

/// [`train`], calling `on_epoch` after every epoch. A hook that only scores (with [`score`]:
/// no gradient, no dropout, no random draws) leaves the training exactly as without it.
pub fn train_observed(
    vs: &nn::VarStore,
    model: &CommitteeModel,
    table: &CandidateTable,
    questions: &[Vec<i64>],
    config: &CommitteeConfig,
    seed: u64,
    on_epoch: &mut EpochHook<'_>,
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
    let mut opt = nn::Adam::default()
        .build(vs, config.learning_rate)
        .map_err(NnError::Torch)?;
    let mut report = TrainReport {
        validation_questions: valid.to_vec(),
        ..TrainReport::default()
    };
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
                .map(|h| {
                    h.scores
                        .view([chunk.len() as i64, width])
                        .cross_entropy_for_logits(&target)
                })
                .reduce(|a, b| a + b)
                .expect("a committee has at least one head");
            let value = loss.double_value(&[]);
            if !value.is_finite() {
                return Err(NnError::NonFinite {
                    what: format!("the committee's training loss (epoch {})", epoch + 1),
                    value,
                    kept: "nothing of this iteration is kept (a NaN LM feature or too high a learning rate are the usual causes)".into(),
                });
            }
            opt.zero_grad();
            loss.backward();
            opt.clip_grad_norm(config.clip_norm);
            opt.step();
            loss_sum += value;
            steps += 1;
        }
        report.train_loss.push(loss_sum / steps.max(1) as f64);
        report.epochs = epoch + 1;
        on_epoch(epoch, model)?;
        if valid.is_empty() {
            report.best_epoch = epoch;
            continue;
        }
        let accuracy = validation_accuracy(model, table, questions, valid, config.score_batch);
        report.validation_accuracy.push(accuracy);
        if best.as_ref().is_none_or(|(b, _)| accuracy > *b) {
            let weights = vs
                .variables()
                .into_iter()
                .map(|(k, v)| (k, v.detach().copy()))
                .collect();
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
fn batches_by_width(
    order: &[usize],
    questions: &[Vec<i64>],
    size: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<Vec<usize>> {
    let mut by_width: Vec<(usize, Vec<usize>)> = Vec::new();
    for &q in order {
        let w = questions[q].len();
        match by_width.iter_mut().find(|(width, _)| *width == w) {
            Some((_, v)) => v.push(q),
            None => by_width.push((w, vec![q])),
        }
    }
    let mut batches: Vec<Vec<usize>> = by_width
        .iter()
        .flat_map(|(_, v)| v.chunks(size).map(<[usize]>::to_vec))
        .collect();
    if by_width.len() > 1 {
        batches.shuffle(rng);
    }
    batches
}

/// Rows of the questions at `which`, flat (B*(k+1)); all questions have the same width.
fn question_rows(questions: &[Vec<i64>], which: &[usize]) -> (Vec<i64>, i64) {
    let width = questions[which[0]].len();
    let flat: Vec<i64> = which
        .iter()
        .flat_map(|&q| {
            debug_assert_eq!(questions[q].len(), width);
            questions[q].iter().copied()
        })
        .collect();
    (flat, width as i64)
}

fn validation_accuracy(
    model: &CommitteeModel,
    table: &CandidateTable,
    questions: &[Vec<i64>],
    valid: &[usize],
    batch: ScoreBatch,
) -> f64 {
    let rows: Vec<i64> = valid
        .iter()
        .flat_map(|&q| questions[q].iter().copied())
        .collect();
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

/// The committee's answer to each question from every head's scores (as [`score`] returns them,
/// the questions' rows one after another): the joint head's softmax over the question's options
/// when there is a joint head, else the members' mean softmax. Per question, `(width, gold)` (its
/// number of options and which is right); returns per question the gold option's probability
/// and whether it is strictly the most probable.
pub fn gold_probabilities(
    heads: &[(String, Vec<f32>)],
    questions: &[(usize, usize)],
) -> Vec<(f64, bool)> {
    let used: Vec<&Vec<f32>> = match heads.iter().find(|h| h.0 == JOINT) {
        Some(joint) => vec![&joint.1],
        None => heads.iter().map(|h| &h.1).collect(),
    };
    let mut at = 0;
    questions
        .iter()
        .map(|&(n, gold)| {
            let mut p = vec![0.0f64; n];
            for scores in &used {
                for (o, v) in softmax(&scores[at..at + n]).into_iter().enumerate() {
                    p[o] += v / used.len() as f64;
                }
            }
            at += n;
            (p[gold], (0..n).all(|o| o == gold || p[gold] > p[o]))
        })
        .collect()
}

/// A numerically stable softmax, in f64.
pub fn softmax(scores: &[f32]) -> Vec<f64> {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = scores.iter().map(|&s| f64::from(s - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|x| x / sum).collect()
}

/// Every head's scores for `rows`, in order, on the host: (head, scores).
///
/// Rows are scored shortest first, in passes of `batch` candidates (see [`ScoreBatch`]: its
/// `auto` depends on the table's device) cut to their longest row, and the scores put back in
/// the order asked for; the scores are the same as in any other order. Memory is bounded by one
/// pass: `batch` x `max-tokens`, whatever the pool's size.
pub fn score(
    model: &CommitteeModel,
    table: &CandidateTable,
    rows: &[i64],
    batch: ScoreBatch,
) -> Vec<(String, Vec<f32>)> {
    let batch = batch.candidates_on(table.device.is_cuda());
    let heads = model.heads();
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| table.lengths[rows[i] as usize]);
    let mut out: Vec<Vec<f32>> = vec![vec![0.0; rows.len()]; heads.len()];
    tch::no_grad(|| {
        // Every batch's scores stay on the device until the end: one host copy per head.
        let mut on_device: Vec<Vec<Tensor>> = heads.iter().map(|_| Vec::new()).collect();
        for chunk in order.chunks(batch.max(1)) {
            let r: Vec<i64> = chunk.iter().map(|&i| rows[i]).collect();
            let heads = crate::runtime::in_precision(model.mixed, table.device, || {
                model.forward(table, &r, false)
            });
            for (h, o) in heads.into_iter().zip(on_device.iter_mut()) {
                o.push(h.scores.to_kind(Kind::Float));
            }
        }
        for (scores, o) in on_device.iter().zip(out.iter_mut()) {
            if scores.is_empty() {
                continue;
            }
            let sorted =
                Vec::<f32>::try_from(Tensor::cat(scores, 0).to(Device::Cpu)).expect("f32 scores");
            for (&i, s) in order.iter().zip(sorted) {
                o[i] = s;
            }
        }
    });
    heads.into_iter().map(|(name, _)| name).zip(out).collect()
}

#[cfg(test)]
mod tests {
    use super::members::lstm::reverse_within_length;
    use super::*;
    use crate::table::{EncodedRows, RawCandidate, TableAssembler, Vocabularies};

    /// Every built-in member, in the registry's order.
    fn all_members() -> Vec<MemberName> {
        Registry::builtin()
            .names()
            .into_iter()
            .map(MemberName::new)
            .collect()
    }

    fn names(names: &[&str]) -> Vec<MemberName> {
        names.iter().map(|n| MemberName::new(*n)).collect()
    }

    /// One candidate given by its ids: word ids, POS-view ids (below 256), marked range, features.
    struct CandidateInput {
        words: Vec<i32>,
        pos: Vec<i32>,
        marked: std::ops::Range<usize>,
        features: [f32; 8],
    }

    /// A table of candidates given by their ids, through the assembler (ids map to themselves).
    fn table_of(
        inputs: &[CandidateInput],
        vocab: i64,
        pos_vocab: i64,
        min_len: usize,
    ) -> CandidateTable {
        let interned: Vec<Vec<u32>> = inputs
            .iter()
            .map(|c| c.words.iter().map(|&w| w as u32).collect())
            .collect();
        let tags: Vec<Vec<u8>> = inputs
            .iter()
            .map(|c| c.pos.iter().map(|&p| u8::try_from(p).unwrap()).collect())
            .collect();
        let mut assembler = TableAssembler::new(Device::Cpu);
        let raw: Vec<RawCandidate> = inputs
            .iter()
            .zip(&interned)
            .zip(&tags)
            .map(|((c, interned), tags)| RawCandidate {
                interned,
                tags,
                marked: c.marked.clone(),
                features: c.features,
            })
            .collect();
        assembler.push(&raw);
        let vocabularies = Vocabularies {
            word_of: (0..vocab as i32).collect(),
            pos_word_of: vec![-1; vocab as usize],
            tag_base: 0,
            vocab,
            pos_vocab,
        };
        let mut table = assembler.finish(&vocabularies, [0.0; 8], [1.0; 8], min_len);
        // Frozen embeddings for the encoder member: a function of each row's words, no context.
        let text: Vec<f32> = inputs
            .iter()
            .flat_map(|c| {
                let mut rng = ChaCha8Rng::seed_from_u64(
                    c.words
                        .iter()
                        .fold(7u64, |h, &w| h.wrapping_mul(31).wrapping_add(w as u64)),
                );
                (0..ENCODED_DIM).map(move |_| rand::Rng::random_range(&mut rng, -1.0f32..1.0))
            })
            .collect();
        let text = Tensor::from_slice(&text).view([inputs.len() as i64, ENCODED_DIM]);
        table
            .attach_encoded(EncodedRows {
                text,
                contexts: None,
            })
            .unwrap();
        table
    }

    const ENCODED_DIM: i64 = 12;

    /// Unit vectors, one per row of `x`.
    fn normalized(x: Tensor) -> Tensor {
        let norm = x.norm_scalaropt_dim(2, [1], true);
        x / norm
    }

    /// A table where right answers contain word 5 and wrong ones never do, and where the right
    /// answer's embedding lies near its question's context and the wrong ones' anywhere: every
    /// text member must learn it; the MLP sees only noise and must stay near chance.
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
                let pos = words
                    .iter()
                    .map(|w| if *w < 20 { *w } else { 20 + w % 3 })
                    .collect();
                let features = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
                q.push(inputs.len() as i64);
                inputs.push(CandidateInput {
                    words,
                    pos,
                    marked: 0..2,
                    features,
                });
            }
            qs.push(q);
        }
        let mut table = table_of(&inputs, 40, 24, 5);
        let gaussian = |n: usize, rng: &mut ChaCha8Rng| -> Tensor {
            let v: Vec<f32> = (0..n * ENCODED_DIM as usize)
                .map(|_| rng.random_range(-1.0f32..1.0))
                .collect();
            normalized(Tensor::from_slice(&v).view([n as i64, ENCODED_DIM]))
        };
        let contexts = gaussian(questions, &mut rng);
        let of: Vec<i64> = (0..questions as i64)
            .flat_map(|q| std::iter::repeat_n(q, width))
            .collect();
        let of = Tensor::from_slice(&of);
        let noise = gaussian(questions * width, &mut rng);
        let gold = Tensor::from_slice(
            &(0..questions * width)
                .map(|r| f32::from(u8::from(r % width == 0)))
                .collect::<Vec<_>>(),
        )
        .unsqueeze(1);
        let text = normalized(
            &gold * (contexts.index_select(0, &of) + &noise * 0.5) + (1.0 - &gold) * &noise,
        );
        table
            .attach_encoded(EncodedRows {
                text,
                contexts: Some((contexts, of)),
            })
            .unwrap();
        (table, qs)
    }

    fn small(
        epochs: usize,
        validation_share: f64,
        batch_items: usize,
        learning_rate: f64,
    ) -> CommitteeConfig {
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
        let model = CommitteeModel::new(
            &vs.root(),
            &settings,
            &Registry::builtin(),
            &all_members(),
            true,
            &table,
        )
        .unwrap();
        let (fit, held) = qs.split_at(140);
        train(&vs, &model, &table, fit, &settings, 1).unwrap();
        let rows: Vec<i64> = held.iter().flatten().copied().collect();
        for (head, scores) in score(&model, &table, &rows, ScoreBatch::Candidates(64)) {
            let acc = scores
                .chunks(4)
                .filter(|s| s[1..].iter().all(|&d| s[0] > d))
                .count() as f64
                / held.len() as f64;
            if head == "mlp" {
                assert!(acc < 0.45, "mlp has no signal to use: {acc}");
            } else {
                assert!(acc > 0.8, "{head} should find the planted word: {acc}");
            }
        }
    }

    /// The encoder member finds right answers by how their embedding relates to the context's,
    /// and without the contexts (the same texts) it cannot.
    #[test]
    fn the_encoder_member_reads_the_context() {
        let _torch_rng = crate::torch_rng_lock();
        let (mut table, qs) = planted(200, 4, 4);
        let (fit, held) = qs.split_at(140);
        let rows: Vec<i64> = held.iter().flatten().copied().collect();
        let settings = small(6, 0.0, 16, 1e-2);
        let accuracy = |table: &CandidateTable| {
            tch::manual_seed(4);
            let vs = nn::VarStore::new(Device::Cpu);
            let model = CommitteeModel::new(
                &vs.root(),
                &settings,
                &Registry::builtin(),
                &names(&["encoder"]),
                false,
                table,
            )
            .unwrap();
            train(&vs, &model, table, fit, &settings, 4).unwrap();
            let scores = score(&model, table, &rows, ScoreBatch::Candidates(64))
                .swap_remove(0)
                .1;
            scores
                .chunks(4)
                .filter(|s| s[1..].iter().all(|&d| s[0] > d))
                .count() as f64
                / held.len() as f64
        };
        let with_context = accuracy(&table);
        assert!(with_context > 0.8, "{with_context}");
        let text = table.encoded.take().unwrap().text;
        table
            .attach_encoded(EncodedRows {
                text,
                contexts: None,
            })
            .unwrap();
        let without = accuracy(&table);
        assert!(without < 0.45, "the texts alone carry no signal: {without}");

        let bad = table
            .attach_encoded(EncodedRows {
                text: Tensor::zeros([3, ENCODED_DIM], (Kind::Float, Device::Cpu)),
                contexts: None,
            })
            .unwrap_err();
        assert!(bad.to_string().contains("the table has 800 rows"), "{bad}");
        table.encoded = None;
        let vs = nn::VarStore::new(Device::Cpu);
        let e = CommitteeModel::new(
            &vs.root(),
            &settings,
            &Registry::builtin(),
            &names(&["encoder"]),
            false,
            &table,
        )
        .unwrap_err();
        assert!(e.to_string().contains("has none"), "{e}");
    }

    /// Right answers start with the word the context ends with (5 or 6), wrong ones with the
    /// other: only a member that reads the context can tell. The CNN sees the pair in one window
    /// of its full-view rows; on the second sentence alone it is at chance.
    #[test]
    fn a_member_on_the_full_view_reads_the_context() {
        use rand::Rng;
        let _torch_rng = crate::torch_rng_lock();
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let (mut second, mut full, mut qs) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..200 {
            let cue = rng.random_range(5..7);
            let context: Vec<i32> = (0..3)
                .map(|_| rng.random_range(8..40))
                .chain([cue])
                .collect();
            let mut q = Vec::new();
            for option in 0..4 {
                let first = if option == 0 { cue } else { 11 - cue };
                let words: Vec<i32> = std::iter::once(first)
                    .chain((0..5).map(|_| rng.random_range(8..40)))
                    .collect();
                let input = |words: Vec<i32>, marked| CandidateInput {
                    pos: words.iter().map(|w| w % 20).collect(),
                    words,
                    marked,
                    features: [0.0; 8],
                };
                q.push(second.len() as i64);
                full.push(input(context.iter().chain(&words).copied().collect(), 0..4));
                second.push(input(words, 0..0));
            }
            qs.push(q);
        }
        let mut table = table_of(&second, 40, 24, 5);
        table.full_view = Some(Box::new(table_of(&full, 40, 24, 5)));
        let (fit, held) = qs.split_at(140);
        let rows: Vec<i64> = held.iter().flatten().copied().collect();
        let accuracy = |view: &str| {
            tch::manual_seed(8);
            let mut settings = small(6, 0.0, 16, 1e-2);
            settings.member =
                serde_json::from_value(serde_json::json!({ "cnn": { "view": view } })).unwrap();
            let vs = nn::VarStore::new(Device::Cpu);
            let model = CommitteeModel::new(
                &vs.root(),
                &settings,
                &Registry::builtin(),
                &names(&["cnn"]),
                false,
                &table,
            )
            .unwrap();
            train(&vs, &model, &table, fit, &settings, 8).unwrap();
            let scores = score(&model, &table, &rows, ScoreBatch::Candidates(64))
                .swap_remove(0)
                .1;
            scores
                .chunks(4)
                .filter(|s| s[1..].iter().all(|&d| s[0] > d))
                .count() as f64
                / held.len() as f64
        };
        let (full_view, second_sentence) = (accuracy("full"), accuracy("second-sentence"));
        assert!(full_view > 0.8, "the full view holds the cue: {full_view}");
        assert!(
            second_sentence < 0.45,
            "the second sentence alone does not: {second_sentence}"
        );

        table.full_view = None;
        let mut settings = small(1, 0.0, 16, 1e-2);
        settings.member =
            serde_json::from_value(serde_json::json!({ "cnn": { "view": "full" } })).unwrap();
        let vs = nn::VarStore::new(Device::Cpu);
        let e = CommitteeModel::new(
            &vs.root(),
            &settings,
            &Registry::builtin(),
            &names(&["cnn"]),
            false,
            &table,
        )
        .unwrap_err();
        assert!(e.to_string().contains("no full-view rows"), "{e}");
    }

    #[test]
    fn scores_do_not_depend_on_padding_or_batch_mates() {
        let _torch_rng = crate::torch_rng_lock();
        tch::manual_seed(5);
        // Rows of lengths 1..=12, read in batches at least 5 wide and at least 30 wide.
        let inputs: Vec<CandidateInput> = (1..=12usize)
            .map(|len| CandidateInput {
                words: (0..len)
                    .map(|j| 2 + ((len * 7 + j * 3) % 37) as i32)
                    .collect(),
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
        let model = CommitteeModel::new(
            &vs.root(),
            &small(1, 0.0, 4, 1e-3),
            &Registry::builtin(),
            &all_members(),
            true,
            &narrow,
        )
        .unwrap();
        let rows: Vec<i64> = (0..12).rev().collect();
        let all = score(&model, &narrow, &rows, ScoreBatch::Candidates(64));
        let one_by_one = score(&model, &narrow, &rows, ScoreBatch::Candidates(1));
        let padded = score(&model, &wide, &rows, ScoreBatch::Candidates(5));
        for ((a, b), c) in all.iter().zip(&one_by_one).zip(&padded) {
            for ((x, y), z) in a.1.iter().zip(&b.1).zip(&c.1) {
                assert!(
                    (x - y).abs() < 1e-5 && (x - z).abs() < 1e-5,
                    "{}: {x} {y} {z}",
                    a.0
                );
            }
        }
        // And the rows are really read: different rows score differently on every text head.
        for (head, s) in &all {
            assert!(
                head == "mlp" || s.windows(2).any(|w| (w[0] - w[1]).abs() > 1e-4),
                "{head}: {s:?}"
            );
        }
    }

    #[test]
    fn length_groups_cut_where_padding_costs_more_than_a_group() {
        // One group: 44 rows x 40 columns. Two: the short rows at their own width.
        let lengths: Vec<i64> = std::iter::repeat_n(2, 40)
            .chain(std::iter::repeat_n(40, 4))
            .collect();
        assert_eq!(length_groups(&lengths, 8), vec![0..40, 40..44]);
        // Rows of nearly one length stay together; an empty batch has no group.
        assert_eq!(length_groups(&[5, 5, 6, 6, 7], 8), vec![0..5]);
        assert!(length_groups(&[], 8).is_empty());
        // Every cut covers every row once, in order.
        let mut ragged: Vec<i64> = (1..=200).map(|i| 1 + (i * i) % 97).collect();
        ragged.sort_unstable();
        let groups = length_groups(&ragged, 8);
        assert!(groups.len() > 2, "{groups:?}");
        assert_eq!(groups.first().unwrap().start, 0);
        assert_eq!(groups.last().unwrap().end, ragged.len());
        assert!(groups
            .windows(2)
            .all(|w| w[0].end == w[1].start && w[0].start < w[0].end));
    }

    /// A batch computed in length groups ([`Batch::by_length`]) scores every row as the row alone
    /// would be scored, in the batch's order.
    #[test]
    fn a_batch_in_length_groups_scores_as_its_rows_alone() {
        let _torch_rng = crate::torch_rng_lock();
        tch::manual_seed(11);
        // 30 short rows and 3 long ones, interleaved: the long rows make a group of their own.
        let inputs: Vec<CandidateInput> = (0..33usize)
            .map(|i| {
                let len = if i % 11 == 5 { 40 + i % 3 } else { 2 + i % 3 };
                CandidateInput {
                    words: (0..len)
                        .map(|j| 2 + ((i * 7 + j * 3) % 37) as i32)
                        .collect(),
                    pos: (0..len).map(|j| 2 + ((i + j) % 20) as i32).collect(),
                    marked: 0..1,
                    features: [0.0; 8],
                }
            })
            .collect();
        let table = table_of(&inputs, 40, 24, 5);
        let rows: Vec<i64> = (0..33).collect();
        let sorted: Vec<i64> = {
            let mut l: Vec<i64> = rows
                .iter()
                .map(|&r| table.lengths[r as usize] as i64)
                .collect();
            l.sort_unstable();
            l
        };
        assert!(
            length_groups(&sorted, LENGTH_GROUP_OVERHEAD_ROWS).len() > 1,
            "the batch is computed in groups"
        );
        let vs = nn::VarStore::new(Device::Cpu);
        let model = CommitteeModel::new(
            &vs.root(),
            &small(1, 0.0, 4, 1e-3),
            &Registry::builtin(),
            &names(&["cnn", "lstm", "pos-lstm"]),
            false,
            &table,
        )
        .unwrap();
        let together = tch::no_grad(|| model.forward(&table, &rows, false));
        let alone = score(&model, &table, &rows, ScoreBatch::Candidates(1));
        for (t, a) in together.iter().zip(&alone) {
            let t = Vec::<f32>::try_from(&t.scores).unwrap();
            for (r, (x, y)) in t.iter().zip(&a.1).enumerate() {
                assert!(
                    (x - y).abs() < 1e-5,
                    "{} row {r}: {x} in the batch, {y} alone",
                    a.0
                );
            }
        }
    }

    #[test]
    fn a_saved_table_loads_back_equal() {
        let (table, _) = planted(7, 4, 3);
        let dir = tempfile::tempdir().unwrap();
        table.save(dir.path(), 5).unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1 + 6,
            "28 rows in files of 5, and table.json"
        );
        let back = CandidateTable::load(dir.path(), Device::Cpu).unwrap();
        for (a, b) in [
            (&table.words, &back.words),
            (&table.pos, &back.pos),
            (&table.indicator, &back.indicator),
            (&table.features, &back.features),
        ] {
            assert_eq!(a.kind(), b.kind());
            assert!(a.equal(b));
        }
        assert_eq!(
            (
                back.rows,
                back.vocab,
                back.pos_vocab,
                back.min_len,
                &back.lengths
            ),
            (
                table.rows,
                table.vocab,
                table.pos_vocab,
                table.min_len,
                &table.lengths
            )
        );
        std::fs::remove_file(dir.path().join("part-003.safetensors")).unwrap();
        let e = CandidateTable::load(dir.path(), Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("part-003.safetensors"), "{e}");
    }

    /// Issue 17: a NaN reaching the loss stops training with an error instead of training on.
    #[test]
    fn a_nan_loss_is_an_error() {
        let _torch_rng = crate::torch_rng_lock();
        tch::manual_seed(3);
        let inputs: Vec<CandidateInput> = (0..40)
            .map(|i| CandidateInput {
                words: vec![2 + (i % 5), 3],
                pos: vec![2, 3],
                marked: 0..1,
                features: std::array::from_fn(|f| {
                    if i == 6 && f == 2 {
                        f32::NAN
                    } else {
                        f as f32 / 8.0
                    }
                }),
            })
            .collect();
        let table = table_of(&inputs, 40, 24, 5);
        let questions: Vec<Vec<i64>> = (0..10).map(|q| (4 * q..4 * q + 4).collect()).collect();
        let vs = nn::VarStore::new(Device::Cpu);
        let settings = small(1, 0.0, 16, 1e-3);
        let model = CommitteeModel::new(
            &vs.root(),
            &settings,
            &Registry::builtin(),
            &af_core::member_names(&["mlp"]),
            true,
            &table,
        )
        .unwrap();
        let e = train(&vs, &model, &table, &questions, &settings, 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("training loss (epoch 1) is not finite (NaN)"),
            "{e}"
        );
    }

    #[test]
    fn reversal_within_length_leaves_padding_in_place() {
        let x = Tensor::from_slice(&[1i64, 2, 3, 0, 0, 4, 5, 6, 7, 8]).view([2, 5, 1]);
        let r = reverse_within_length(&x, &Tensor::from_slice(&[3i64, 5]));
        assert_eq!(
            Vec::<i64>::try_from(r.flatten(0, -1)).unwrap(),
            [3, 2, 1, 0, 0, 8, 7, 6, 5, 4]
        );
    }

    #[test]
    fn the_cnn_pads_batches_narrower_than_its_widest_window() {
        let _torch_rng = crate::torch_rng_lock();
        tch::manual_seed(2);
        let inputs: Vec<CandidateInput> = (1..=4usize)
            .map(|len| CandidateInput {
                words: (0..len).map(|j| 2 + (len * 5 + j) as i32).collect(),
                pos: vec![3; len],
                marked: 0..1,
                features: [0.0; 8],
            })
            .collect();
        // min_len 1: a batch of short rows is narrower than the 5-wide window.
        let (narrow, cut) = (table_of(&inputs, 40, 24, 1), table_of(&inputs, 40, 24, 5));
        let vs = nn::VarStore::new(Device::Cpu);
        let model = CommitteeModel::new(
            &vs.root(),
            &small(1, 0.0, 4, 1e-3),
            &Registry::builtin(),
            &names(&["cnn"]),
            false,
            &narrow,
        )
        .unwrap();
        let rows = [0, 1, 2, 3];
        assert_eq!(
            score(&model, &narrow, &rows, ScoreBatch::Candidates(1)),
            score(&model, &cut, &rows, ScoreBatch::Candidates(1))
        );
    }

    #[test]
    fn training_is_deterministic_on_cpu() {
        let _torch_rng = crate::torch_rng_lock();
        let run = || {
            tch::manual_seed(7);
            let (table, qs) = planted(60, 4, 2);
            let vs = nn::VarStore::new(Device::Cpu);
            let settings = small(2, 0.2, 8, 1e-3);
            let model = CommitteeModel::new(
                &vs.root(),
                &settings,
                &Registry::builtin(),
                &names(&["cnn", "pos-lstm"]),
                true,
                &table,
            )
            .unwrap();
            let report = train(&vs, &model, &table, &qs, &settings, 3).unwrap();
            (
                report,
                score(&model, &table, &[0, 1, 2, 3, 17], ScoreBatch::Candidates(2)),
            )
        };
        let (a, b) = (run(), run());
        assert_eq!(a.0, b.0);
        assert_eq!(a.1, b.1);
        // A hook that scores every epoch (a data map) changes nothing in the training.
        tch::manual_seed(7);
        let (table, qs) = planted(60, 4, 2);
        let vs = nn::VarStore::new(Device::Cpu);
        let settings = small(2, 0.2, 8, 1e-3);
        let model = CommitteeModel::new(
            &vs.root(),
            &settings,
            &Registry::builtin(),
            &names(&["cnn", "pos-lstm"]),
            true,
            &table,
        )
        .unwrap();
        let mut seen = Vec::new();
        let report = train_observed(&vs, &model, &table, &qs, &settings, 3, &mut |epoch, m| {
            seen.push((
                epoch,
                score(m, &table, &[0, 1, 2, 3], ScoreBatch::Candidates(2)),
            ));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            (
                report,
                score(&model, &table, &[0, 1, 2, 3, 17], ScoreBatch::Candidates(2))
            ),
            a
        );
        assert_eq!(
            seen.iter().map(|s| s.0).collect::<Vec<_>>(),
            (0..a.0.epochs).collect::<Vec<_>>()
        );
        assert_eq!(
            a.1.iter().map(|h| h.0.as_str()).collect::<Vec<_>>(),
            ["joint", "cnn", "pos-lstm"]
        );
    }
}
