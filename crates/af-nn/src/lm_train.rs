//! Training one LM pair: Adam, gradient clipping, early stopping on validation perplexity,
//! checkpoints after every epoch, resume after a kill.
//!
//! A checkpoint directory holds `last.safetensors` (weights after the last finished epoch),
//! `best.safetensors` (weights with the best validation perplexity) and `progress.json` (epochs
//! done, history, whether training finished). A resumed run starts from `last` at the next epoch;
//! Adam's moment estimates are not saved, so they restart from zero
//! (docs/decisions/017-resume-after-a-kill-restarts-adam-s.md).

use std::path::Path;
use std::time::Instant;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tch::{nn, Device, Kind};

use crate::lm::{pad_batch, BiLm, Direction, BOS, EOS};
use crate::NnError;

#[derive(Clone, Debug)]
pub struct TrainSettings {
    pub learning_rate: f64,
    pub clip_norm: f64,
    pub batch_size: usize,
    pub max_epochs: usize,
    pub patience: usize,
    pub seed: u64,
    pub device: Device,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EpochRecord {
    pub epoch: usize,
    pub train_loss: f64,
    pub valid_ppl_forward: f64,
    pub valid_ppl_backward: f64,
    pub seconds: f64,
}

/// What [`train`] reports as it goes.
#[derive(Clone, Copy, Debug)]
pub enum TrainEvent<'a> {
    /// One optimisation step done.
    Batch,
    /// One epoch done, with its losses (before its checkpoint's progress is written).
    Epoch(&'a EpochRecord),
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Progress {
    pub history: Vec<EpochRecord>,
    pub best_epoch: usize,
    pub best_valid: f64,
    pub finished: bool,
}

/// The backward model's view of a forward sequence: the same tokens reversed between `<bos>`
/// and `<eos>`.
pub fn reversed(seq: &[i64]) -> Vec<i64> {
    let inner = &seq[1..seq.len() - 1];
    let mut out = Vec::with_capacity(seq.len());
    out.push(BOS);
    out.extend(inner.iter().rev());
    out.push(EOS);
    out
}

/// Perplexity of one direction over sequences (forward order given; reversed here for backward),
/// shortest first in batches of at most `batch` within the logit budget.
pub fn perplexity(
    lm: &BiLm,
    dir: &Direction,
    backward: bool,
    seqs: &[Vec<i64>],
    batch: usize,
    device: Device,
) -> f64 {
    let _guard = tch::no_grad_guard();
    let (mut nll, mut tokens) = (0.0, 0usize);
    let mut sorted: Vec<&Vec<i64>> = seqs.iter().collect();
    sorted.sort_by_key(|s| s.len());
    for chunk in crate::lm::budgeted_batches(
        &sorted,
        |s| s.len(),
        batch,
        lm.shape.vocab,
        crate::lm::logit_budget(device),
    ) {
        let owned: Vec<Vec<i64>> = if backward {
            chunk.iter().map(|s| reversed(s)).collect()
        } else {
            chunk.iter().map(|s| s.to_vec()).collect()
        };
        let refs: Vec<&[i64]> = owned.iter().map(Vec::as_slice).collect();
        let t = pad_batch(&refs, device);
        nll -= lm
            .token_logprobs(dir, &t, false)
            .sum(Kind::Double)
            .double_value(&[]);
        tokens += owned.iter().map(|s| s.len() - 1).sum::<usize>();
    }
    (nll / tokens.max(1) as f64).exp()
}

fn read_progress(dir: &Path) -> Result<Option<Progress>, NnError> {
    let path = dir.join("progress.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| NnError::Checkpoint {
                path,
                message: format!("unreadable progress record: {e}"),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(NnError::Checkpoint {
            path,
            message: e.to_string(),
        }),
    }
}

fn load(vs: &mut nn::VarStore, path: &Path) -> Result<(), NnError> {
    vs.load(path).map_err(|e| NnError::Checkpoint {
        path: path.to_path_buf(),
        message: format!("cannot load: {e}"),
    })
}

fn save(vs: &nn::VarStore, path: &Path) -> Result<(), NnError> {
    // Write beside, then rename: a kill mid-write never corrupts the previous checkpoint.
    let tmp = path.with_extension("tmp.safetensors");
    vs.save(&tmp).map_err(|e| NnError::Checkpoint {
        path: tmp.clone(),
        message: e.to_string(),
    })?;
    std::fs::rename(&tmp, path).map_err(|e| NnError::Checkpoint {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Trains `lm` (whose variables live in `vs`) on `train`, stopping early on `valid`, with
/// checkpoints in `dir`. Returns with the best weights loaded. `on_progress` hears of each batch
/// and each epoch (the caller prints; this crate does not).
pub fn train(
    lm: &BiLm,
    vs: &mut nn::VarStore,
    train: &[Vec<i64>],
    valid: &[Vec<i64>],
    settings: &TrainSettings,
    dir: &Path,
    mut on_progress: impl FnMut(TrainEvent),
) -> Result<Progress, NnError> {
    std::fs::create_dir_all(dir).map_err(|e| NnError::Checkpoint {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut progress = match read_progress(dir)? {
        Some(p) => {
            load(vs, &dir.join("last.safetensors"))?;
            p
        }
        None => Progress {
            best_valid: f64::INFINITY,
            ..Default::default()
        },
    };
    if progress.finished {
        load(vs, &dir.join("best.safetensors"))?;
        return Ok(progress);
    }
    let mut opt = nn::OptimizerConfig::build(nn::Adam::default(), vs, settings.learning_rate)?;
    let reversed_train: Vec<Vec<i64>> = train.iter().map(|s| reversed(s)).collect();
    let mut order: Vec<usize> = (0..train.len()).collect();
    while progress.history.len() < settings.max_epochs {
        let epoch = progress.history.len() + 1;
        let start = Instant::now();
        let mut rng =
            ChaCha8Rng::seed_from_u64(settings.seed ^ (epoch as u64).wrapping_mul(0x9E37_79B9));
        order.shuffle(&mut rng);
        let (mut loss_sum, mut batches) = (0.0, 0usize);
        for chunk in order.chunks(settings.batch_size) {
            let fwd: Vec<&[i64]> = chunk.iter().map(|&i| train[i].as_slice()).collect();
            let bwd: Vec<&[i64]> = chunk
                .iter()
                .map(|&i| reversed_train[i].as_slice())
                .collect();
            // One direction's graph at a time: its logits ([rows, length, vocabulary], and their
            // gradients) are the stage's largest tensors, and summing the two losses before one
            // backward held both. Gradients accumulate; the dropout draws come in the same order.
            opt.zero_grad();
            let forward = lm.loss(&lm.forward, &pad_batch(&fwd, settings.device), true);
            forward.backward();
            let value = forward.double_value(&[]);
            drop(forward);
            let backward = lm.loss(&lm.backward, &pad_batch(&bwd, settings.device), true);
            backward.backward();
            let value = value + backward.double_value(&[]);
            drop(backward);
            if !value.is_finite() {
                return Err(NnError::NonFinite {
                    what: format!("the LM's training loss (epoch {epoch})"),
                    value,
                    kept: format!(
                        "the checkpoints of the epochs before are kept in {}",
                        dir.display()
                    ),
                });
            }
            opt.clip_grad_norm(settings.clip_norm);
            opt.step();
            loss_sum += value;
            batches += 1;
            on_progress(TrainEvent::Batch);
        }
        let record = EpochRecord {
            epoch,
            train_loss: loss_sum / batches.max(1) as f64 / 2.0,
            valid_ppl_forward: perplexity(
                lm,
                &lm.forward,
                false,
                valid,
                settings.batch_size * 4,
                settings.device,
            ),
            valid_ppl_backward: perplexity(
                lm,
                &lm.backward,
                true,
                valid,
                settings.batch_size * 4,
                settings.device,
            ),
            seconds: start.elapsed().as_secs_f64(),
        };
        let score = (record.valid_ppl_forward * record.valid_ppl_backward).sqrt();
        save(vs, &dir.join("last.safetensors"))?;
        if score < progress.best_valid || valid.is_empty() {
            progress.best_valid = score;
            progress.best_epoch = epoch;
            save(vs, &dir.join("best.safetensors"))?;
        }
        on_progress(TrainEvent::Epoch(&record));
        progress.history.push(record);
        if epoch - progress.best_epoch >= settings.patience.max(1) {
            break;
        }
        write_progress(dir, &progress)?;
    }
    progress.finished = true;
    write_progress(dir, &progress)?;
    load(vs, &dir.join("best.safetensors"))?;
    Ok(progress)
}

fn write_progress(dir: &Path, p: &Progress) -> Result<(), NnError> {
    let path = dir.join("progress.json");
    let text = serde_json::to_string_pretty(p).expect("progress serialises");
    af_core::atomic::write(&path, text.as_bytes()).map_err(|e| NnError::Checkpoint {
        path,
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lm::LmShape;

    fn data() -> Vec<Vec<i64>> {
        (0..40)
            .map(|i| vec![BOS, 4 + (i % 4), 8, 9, 4 + (i % 4), EOS])
            .collect()
    }

    fn settings(max_epochs: usize) -> TrainSettings {
        TrainSettings {
            learning_rate: 1e-2,
            clip_norm: 1.0,
            batch_size: 8,
            max_epochs,
            patience: 5,
            seed: 3,
            device: Device::Cpu,
        }
    }

    fn model() -> (nn::VarStore, BiLm) {
        tch::manual_seed(7);
        let vs = nn::VarStore::new(Device::Cpu);
        let lm = BiLm::new(
            &vs.root(),
            LmShape {
                vocab: 10,
                embedding: 8,
                hidden: 8,
                layers: 1,
                dropout: 0.0,
            },
        );
        (vs, lm)
    }

    #[test]
    fn learns_and_resumes_after_a_kill() {
        let _torch_rng = crate::torch_rng_lock();
        let d = tempfile::tempdir().unwrap();
        let seqs = data();
        // "Killed" after 2 epochs: a run limited to 2, then a run allowed 4 resumes at epoch 3.
        let (mut vs, lm) = model();
        let p = train(&lm, &mut vs, &seqs, &seqs, &settings(2), d.path(), |_| {}).unwrap();
        assert_eq!(p.history.len(), 2);
        std::fs::write(
            d.path().join("progress.json"),
            serde_json::to_string(&Progress {
                finished: false,
                ..p.clone()
            })
            .unwrap(),
        )
        .unwrap();
        let (mut vs2, lm2) = model();
        let resumed = train(&lm2, &mut vs2, &seqs, &seqs, &settings(4), d.path(), |_| {}).unwrap();
        assert_eq!(resumed.history.len(), 4);
        assert_eq!(
            resumed.history[..2],
            p.history[..],
            "the first two epochs are kept, not redone"
        );
        let first = resumed.history[0].valid_ppl_forward;
        let last = resumed.history[3].valid_ppl_forward;
        assert!(last < first, "{first} -> {last}");
        // A finished directory loads the best weights without training.
        let (mut vs3, lm3) = model();
        let again = train(&lm3, &mut vs3, &seqs, &seqs, &settings(4), d.path(), |_| {
            panic!("no training")
        })
        .unwrap();
        assert_eq!(again, resumed);
        let ppl = perplexity(&lm3, &lm3.forward, false, &seqs, 8, Device::Cpu);
        assert!((ppl.ln() - resumed.best_valid.ln()).abs() < 0.5);
    }

    #[test]
    fn corrupt_checkpoint_is_a_clear_error() {
        let _torch_rng = crate::torch_rng_lock();
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("progress.json"),
            "{\"history\": [], \"best_epoch\": 0, \"best_valid\": 1.0, \"finished\": false}",
        )
        .unwrap();
        std::fs::write(d.path().join("last.safetensors"), b"not a checkpoint").unwrap();
        let (mut vs, lm) = model();
        let e = train(
            &lm,
            &mut vs,
            &data(),
            &data(),
            &settings(1),
            d.path(),
            |_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("last.safetensors") && e.contains("cannot load"),
            "{e}"
        );
    }
}
