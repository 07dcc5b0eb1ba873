//! Scoring candidates with a trained committee, and the committee's answer to a question.

use tch::{Device, Kind, Tensor};

use super::{CommitteeModel, JOINT};
use crate::table::CandidateTable;
use af_core::ScoreBatch;

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
        let passes: Vec<Vec<i64>> = order
            .chunks(batch.max(1))
            .map(|chunk| chunk.iter().map(|&i| rows[i]).collect())
            .collect();
        let uploaded = table.upload_all(passes.iter().map(Vec::as_slice));
        for (r, index) in passes.iter().zip(&uploaded) {
            let heads = crate::runtime::in_precision(model.mixed, table.device, || {
                model.forward_uploaded(table, r, index, false)
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
