//! The `lm` stage: the vocabulary, then one forward/backward LM pair per fold, each trained
//! without its fold (cross-fitting), with optional pretraining on prose.

use std::path::Path;

use af_core::{Config, Item};
use af_nn::lm::{BiLm, LmShape, BOS, EOS};
use af_nn::lm_train::{self, perplexity, TrainSettings};
use af_text::{tokenize, Vocab};
use anyhow::Context;
use serde::Serialize;
use tch::{nn, Device};

use crate::stage::{StageContext, StageName};

/// Token ids of a text under `vocab`.
pub fn encode(vocab: &Vocab, text: &str) -> Vec<i64> {
    tokenize(text).iter().map(|w| i64::from(vocab.id(w))).collect()
}

/// The forward training sequence of an item: `<bos>` context, second sentence `<eos>`.
pub fn item_sequence(vocab: &Vocab, item: &Item) -> Vec<i64> {
    let mut seq = vec![BOS];
    seq.extend(encode(vocab, &item.context));
    seq.extend(encode(vocab, &item.noun_phrase));
    seq.extend(encode(vocab, &item.ending));
    seq.push(EOS);
    seq
}

pub fn shape(config: &Config, vocab: &Vocab) -> LmShape {
    let c = &config.lm;
    LmShape { vocab: vocab.len() as i64, embedding: c.embedding, hidden: c.hidden, layers: c.layers, dropout: c.dropout }
}

/// The `vocab.tsv` of a stage directory (`pairs`: every token; `lm`: the LM's).
pub fn load_vocab(stage_dir: &Path) -> anyhow::Result<Vocab> {
    let path = stage_dir.join("vocab.tsv");
    let text = af_io::read_utf8(&path)?;
    Vocab::from_tsv(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Loads the trained LM pair of `fold`.
pub fn load_fold(config: &Config, vocab: &Vocab, lm_dir: &Path, fold: u32, device: Device) -> anyhow::Result<(nn::VarStore, BiLm)> {
    let mut vs = nn::VarStore::new(device);
    let lm = BiLm::new(&vs.root(), shape(config, vocab));
    let path = lm_dir.join(format!("fold-{fold}/best.safetensors"));
    vs.load(&path).with_context(|| format!("cannot load the LM of fold {fold} from {} (rerun `af run --force lm`)", path.display()))?;
    Ok((vs, lm))
}

#[derive(Serialize)]
struct FoldReport {
    fold: u32,
    train_items: usize,
    validation_items: usize,
    heldout_items: usize,
    epochs: usize,
    best_epoch: usize,
    validation_ppl: f64,
    heldout_ppl_forward: f64,
    heldout_ppl_backward: f64,
}

#[derive(Serialize)]
struct LmReport {
    vocab: usize,
    shape: String,
    device: String,
    pretrain_sequences: usize,
    folds: Vec<FoldReport>,
}

pub fn run(ctx: &StageContext) -> anyhow::Result<()> {
    let config = ctx.config;
    let items = af_io::items::read_items(&ctx.stage_dir(StageName::Pairs).join("items.jsonl"))?;
    let device = super::device(config)?;

    // `af pairs` counted every token of the items; the LM keeps those seen often enough.
    let vocab = load_vocab(&ctx.stage_dir(StageName::Pairs))?.with_min_count(config.lm.min_count);
    af_core::atomic::write(ctx.dir.join("vocab.tsv"), vocab.to_tsv().as_bytes())?;
    let seqs: Vec<Vec<i64>> = items.iter().map(|i| item_sequence(&vocab, i)).collect();
    let shape = shape(config, &vocab);
    tracing::info!("lm: {} items, vocabulary {} (min count {}), {shape:?} on {device:?}", items.len(), vocab.len(), config.lm.min_count);

    let settings = |seed: u64, max_epochs: usize| TrainSettings {
        learning_rate: config.lm.learning_rate,
        clip_norm: config.lm.clip_norm,
        batch_size: config.lm.batch_size,
        max_epochs,
        patience: config.lm.patience,
        seed,
        device,
    };

    // Pretraining on prose: consecutive sentence pairs, like items.
    let pretrain_dir = ctx.dir.join("pretrain");
    let mut pretrain_sequences = 0;
    let pretrained = if config.lm.pretrain.is_empty() {
        None
    } else {
        let mut prose = Vec::new();
        for input in &config.lm.pretrain {
            for doc in af_io::documents::read_input(input)? {
                for pair in doc.sentences.windows(2) {
                    let mut seq = vec![BOS];
                    seq.extend(encode(&vocab, &pair[0]));
                    seq.extend(encode(&vocab, &pair[1]));
                    seq.push(EOS);
                    if seq.len() <= 2 + 2 * 100 {
                        prose.push(seq);
                    }
                }
            }
        }
        pretrain_sequences = prose.len();
        tracing::info!("lm: pretraining on {} prose sentence pairs for {} epochs", prose.len(), config.lm.pretrain_epochs);
        tch::manual_seed(config.run.seed as i64);
        let mut vs = nn::VarStore::new(device);
        let lm = BiLm::new(&vs.root(), shape);
        let bar = crate::progress::bar((prose.len().div_ceil(config.lm.batch_size) * config.lm.pretrain_epochs) as u64, "pretrain");
        let s = TrainSettings { patience: usize::MAX, ..settings(config.run.seed, config.lm.pretrain_epochs) };
        lm_train::train(&lm, &mut vs, &prose, &[], &s, &pretrain_dir, |r| tracing::info!("pretrain epoch {}: loss {:.3}", r.epoch, r.train_loss), || bar.inc(1))?;
        bar.finish_and_clear();
        Some(vs)
    };

    let folds = config.pairs.folds;
    let mut reports = Vec::new();
    for fold in 0..folds {
        let fold_seed = config.run.seed.wrapping_add(1 + u64::from(fold));
        let (train_idx, valid_idx) = split_validation(&items, fold, config.lm.validation_share, fold_seed);
        let heldout: Vec<Vec<i64>> = items.iter().zip(&seqs).filter(|(i, _)| i.fold == fold).map(|(_, s)| s.clone()).collect();
        let train: Vec<Vec<i64>> = train_idx.iter().map(|&i| seqs[i].clone()).collect();
        let valid: Vec<Vec<i64>> = valid_idx.iter().map(|&i| seqs[i].clone()).collect();
        tch::manual_seed(fold_seed as i64);
        let mut vs = nn::VarStore::new(device);
        let lm = BiLm::new(&vs.root(), shape);
        let dir = ctx.dir.join(format!("fold-{fold}"));
        if let Some(p) = &pretrained {
            if !dir.join("progress.json").exists() {
                vs.copy(p).context("copying the pretrained weights")?;
            }
        }
        let bar = crate::progress::bar((train.len().div_ceil(config.lm.batch_size) * config.lm.max_epochs) as u64, &format!("LM fold {fold}"));
        let progress = lm_train::train(
            &lm,
            &mut vs,
            &train,
            &valid,
            &settings(fold_seed, config.lm.max_epochs),
            &dir,
            |r| {
                tracing::info!(
                    "LM fold {fold} epoch {}: train loss {:.3}, validation perplexity {:.1} forward / {:.1} backward ({:.0} s)",
                    r.epoch, r.train_loss, r.valid_ppl_forward, r.valid_ppl_backward, r.seconds
                )
            },
            || bar.inc(1),
        )?;
        bar.finish_and_clear();
        let batch = config.lm.batch_size * 4;
        let report = FoldReport {
            fold,
            train_items: train.len(),
            validation_items: valid.len(),
            heldout_items: heldout.len(),
            epochs: progress.history.len(),
            best_epoch: progress.best_epoch,
            validation_ppl: progress.best_valid,
            heldout_ppl_forward: perplexity(&lm, &lm.forward, false, &heldout, batch, device),
            heldout_ppl_backward: perplexity(&lm, &lm.backward, true, &heldout, batch, device),
        };
        println!(
            "lm fold {fold}: held-out perplexity {:.1} forward, {:.1} backward ({} items never seen by this LM)",
            report.heldout_ppl_forward, report.heldout_ppl_backward, report.heldout_items
        );
        reports.push(report);
    }
    let report = LmReport {
        vocab: vocab.len(),
        shape: format!("{shape:?}"),
        device: format!("{device:?}"),
        pretrain_sequences,
        folds: reports,
    };
    af_core::atomic::write(ctx.dir.join("report.json"), serde_json::to_string_pretty(&report)?.as_bytes())?;
    Ok(())
}

/// The items an LM trains on (every fold but `fold`) and, among them, the validation share, chosen
/// by group so that no video is on both sides.
fn split_validation(items: &[Item], fold: u32, share: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let groups = items.iter().filter(|i| i.fold != fold).map(|i| i.group.as_str());
    // Reuse the fold dealer: with 1/share "folds", fold 0 is the validation part.
    let parts = (1.0 / share.max(1e-9)).round().max(2.0) as u32;
    let assigned = af_text::pairs::assign_folds(groups, parts, seed);
    let (mut train, mut valid) = (Vec::new(), Vec::new());
    for (i, item) in items.iter().enumerate().filter(|(_, i)| i.fold != fold) {
        if share > 0.0 && assigned[&item.group] == 0 {
            valid.push(i);
        } else {
            train.push(i);
        }
    }
    (train, valid)
}
