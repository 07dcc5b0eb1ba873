//! Training a committee on questions: seeded batches of one width, early stopping on a validation
//! slice.

use std::collections::HashMap;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tch::nn::{self, OptimizerConfig};
use tch::{Kind, Tensor};

use super::{score, CommitteeConfig, CommitteeModel};
use crate::table::CandidateTable;
use crate::NnError;
use af_core::ScoreBatch;

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
    // Nothing in a step reads the device back (the rows go up once an epoch, the loss is summed
    // on the device and read once an epoch, the gradients clipped there): on a GPU the host queues
    // step after step without waiting for one to finish.
    let dev = table.device;
    for epoch in 0..config.epochs.max(1) {
        fit.shuffle(&mut rng);
        let batches: Vec<(Vec<i64>, i64, usize)> =
            batches_by_width(&fit, questions, config.batch_items.max(1), &mut rng)
                .iter()
                .map(|chunk| {
                    let (rows, width) = question_rows(questions, chunk);
                    (rows, width, chunk.len())
                })
                .collect();
        let uploaded = table.upload_all(batches.iter().map(|(rows, _, _)| rows.as_slice()));
        // The loss in f64, added step by step as the host once did: the same sum, bit for bit.
        let mut loss_sum = Tensor::zeros([], (Kind::Double, dev));
        let steps = batches.len();
        for ((rows, width, questions_in_batch), index) in batches.iter().zip(&uploaded) {
            let (width, n) = (*width, *questions_in_batch as i64);
            let heads = model.forward_uploaded(table, rows, index, true);
            let target = Tensor::zeros([n], (Kind::Int64, dev));
            let loss = heads
                .iter()
                .map(|h| h.scores.view([n, width]).cross_entropy_for_logits(&target))
                .reduce(|a, b| a + b)
                .expect("a committee has at least one head");
            opt.zero_grad();
            loss.backward();
            clip_grad_norm(vs, config.clip_norm);
            opt.step();
            loss_sum += loss.detach().to_kind(Kind::Double);
        }
        // A non-finite loss in any step makes the sum non-finite: read once an epoch (the error
        // gives the sum, not the first bad step's loss).
        let sum = loss_sum.double_value(&[]);
        if !sum.is_finite() {
            return Err(NnError::NonFinite {
                what: format!("the committee's training loss (epoch {})", epoch + 1),
                value: sum,
                kept: "nothing of this iteration is kept (a NaN LM feature or too high a learning rate are the usual causes)".into(),
            });
        }
        report.train_loss.push(sum / steps.max(1) as f64);
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

/// Scales the gradients of `vs`'s trainable variables so that their joint norm is at most `max`,
/// as tch's `Optimizer::clip_grad_norm` does (the same arithmetic: the norm of the per-variable
/// norms, the factor `max / (norm + 1e-6)` in f64, applied when below 1), but with the factor
/// kept on the device: tch reads the norm back to the host, a wait for the device every step.
pub(super) fn clip_grad_norm(vs: &nn::VarStore, max: f64) {
    tch::no_grad(|| {
        let grads: Vec<Tensor> = vs
            .trainable_variables()
            .iter()
            .map(Tensor::grad)
            .filter(Tensor::defined)
            .collect();
        if grads.is_empty() {
            return;
        }
        let norm = Tensor::stack(&grads.iter().map(Tensor::norm).collect::<Vec<_>>(), 0).norm();
        let device = norm.device();
        let factor =
            Tensor::full([], max, (Kind::Double, device)) / (norm.to_kind(Kind::Double) + 1e-6);
        // tch scales only when the factor is below 1 (a NaN factor, from a NaN gradient, scales
        // nothing): elsewhere a factor of exactly 1 leaves every gradient as it was.
        let factor = factor.where_self(&factor.lt(1.0), &Tensor::ones([], (Kind::Double, device)));
        for mut g in grads {
            let _ = g.g_mul_(&factor);
        }
    })
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
