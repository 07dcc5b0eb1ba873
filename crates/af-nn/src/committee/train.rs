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
