//! The `lm` stage: the vocabulary, then one forward/backward LM pair per fold, each trained
//! without its fold (cross-fitting), with optional pretraining on prose.

use af_core::Item;
use af_nn::lm::{BiLm, BOS, EOS};
use af_nn::lm_files::{item_sequence, load_vocab, shape, token_ids};
use af_nn::lm_train::{self, perplexity, TrainEvent, TrainSettings};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tch::nn;

use crate::runner::{StageContext, StageName};

#[derive(Serialize, Deserialize)]
pub struct FoldReport {
    pub fold: u32,
    pub train_items: usize,
    pub validation_items: usize,
    pub heldout_items: usize,
    pub epochs: usize,
    pub best_epoch: usize,
    pub validation_ppl: f64,
    pub heldout_ppl_forward: f64,
    pub heldout_ppl_backward: f64,
}

/// `lm/report.json`.
#[derive(Serialize, Deserialize)]
pub struct LmReport {
    pub vocab: usize,
    pub shape: String,
    pub device: String,
    pub pretrain_sequences: usize,
    pub folds: Vec<FoldReport>,
    /// The run whose LMs these are (`[lm] from`); the figures above are that run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<PathBuf>,
}

pub fn run(ctx: &StageContext) -> anyhow::Result<LmReport> {
    let config = ctx.config;
    if let Some(run) = &config.lm.from {
        return adopt(ctx, run);
    }
    let items = af_io::items::read_items(&ctx.stage_dir(super::pairs::NAME).join("items.jsonl"))?;
    let device = crate::setup::device(config)?;

    // `af pairs` counted every token of the items; the LM keeps those seen often enough.
    let vocab = load_vocab(&ctx.stage_dir(super::pairs::NAME))?.with_min_count(config.lm.min_count);
    af_core::atomic::write(ctx.dir.join("vocab.tsv"), vocab.to_tsv().as_bytes())?;
    let seqs: Vec<Vec<i64>> = items.iter().map(|i| item_sequence(&vocab, i)).collect();
    let shape = shape(&config.lm, &vocab);
    tracing::info!(
        "lm: {} items, vocabulary {} (min count {}), {shape:?} on {device:?}",
        items.len(),
        vocab.len(),
        config.lm.min_count
    );

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
                    seq.extend(token_ids(&vocab, &pair[0]));
                    seq.extend(token_ids(&vocab, &pair[1]));
                    seq.push(EOS);
                    if seq.len() <= 2 + 2 * 100 {
                        prose.push(seq);
                    }
                }
            }
        }
        pretrain_sequences = prose.len();
        tracing::info!(
            "lm: pretraining on {} prose sentence pairs for {} epochs",
            prose.len(),
            config.lm.pretrain_epochs
        );
        tch::manual_seed(config.run.seed as i64);
        let mut vs = nn::VarStore::new(device);
        let lm = BiLm::new(&vs.root(), shape);
        let bar = ctx.progress.bar(
            "pretrain",
            (prose.len().div_ceil(config.lm.batch_size) * config.lm.pretrain_epochs) as u64,
        );
        let s = TrainSettings {
            patience: usize::MAX,
            ..settings(config.run.seed, config.lm.pretrain_epochs)
        };
        lm_train::train(
            &lm,
            &mut vs,
            &prose,
            &[],
            &s,
            &pretrain_dir,
            |event| match event {
                TrainEvent::Batch => bar.inc(1),
                TrainEvent::Epoch(r) => {
                    tracing::info!("pretrain epoch {}: loss {:.3}", r.epoch, r.train_loss);
                    crate::resources::after_a_model("LM pretraining epoch");
                }
            },
        )?;
        bar.finish();
        Some(vs)
    };

    let folds = config.pairs.folds;
    let mut reports = Vec::new();
    for fold in 0..folds {
        let fold_seed = config.run.seed.wrapping_add(1 + u64::from(fold));
        let (train_idx, valid_idx) =
            split_validation(&items, fold, config.lm.validation_share, fold_seed);
        let heldout: Vec<Vec<i64>> = items
            .iter()
            .zip(&seqs)
            .filter(|(i, _)| i.fold == fold)
            .map(|(_, s)| s.clone())
            .collect();
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
        let bar = ctx.progress.bar(
            &format!("LM fold {fold}"),
            (train.len().div_ceil(config.lm.batch_size) * config.lm.max_epochs) as u64,
        );
        let progress = lm_train::train(
            &lm,
            &mut vs,
            &train,
            &valid,
            &settings(fold_seed, config.lm.max_epochs),
            &dir,
            |event| match event {
                TrainEvent::Batch => bar.inc(1),
                TrainEvent::Epoch(r) => {
                    tracing::info!(
                        "LM fold {fold} epoch {}: train loss {:.3}, validation perplexity {:.1} forward / {:.1} backward ({:.0} s)",
                        r.epoch, r.train_loss, r.valid_ppl_forward, r.valid_ppl_backward, r.seconds
                    );
                    // Each epoch's batches come in other shapes; the heap kept their freed blocks
                    // and grew epoch after epoch (4.2 GB after 6 epochs of the CPU config, 2.6-2.9
                    // after 1).
                    crate::resources::after_a_model(&format!("LM fold {fold} epoch {}", r.epoch));
                }
            },
        )?;
        bar.finish();
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
        reports.push(report);
        crate::resources::after_a_model(&format!("LM fold {fold}"));
    }
    let report = LmReport {
        vocab: vocab.len(),
        shape: format!("{shape:?}"),
        device: format!("{device:?}"),
        pretrain_sequences,
        folds: reports,
        from: None,
    };
    af_core::atomic::write(
        ctx.dir.join("report.json"),
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    Ok(report)
}

/// `[lm] from`: the other run's vocabulary and fold LMs copied in (so this run directory holds
/// what its figures came from) and its report, marked with where they came from.
fn adopt(ctx: &StageContext, run: &Path) -> anyhow::Result<LmReport> {
    let (config, lm_dir) = (ctx.config, run.join("lm"));
    let theirs = af_core::Config::load(&lm_dir.join("config.toml"))
        .with_context(|| {
            format!(
                "[lm] from = {}: its lm/ is not a finished LM stage",
                run.display()
            )
        })?
        .lm;
    let shape = |c: &af_core::config::LmConfig| (c.embedding, c.hidden, c.layers);
    anyhow::ensure!(
        shape(&theirs) == shape(&config.lm),
        "[lm] from = {}: its LMs are embedding {} / hidden {} / layers {}, this config's {} / {} / {}; set the same in [lm]",
        run.display(), theirs.embedding, theirs.hidden, theirs.layers, config.lm.embedding, config.lm.hidden, config.lm.layers
    );
    std::fs::create_dir_all(&ctx.dir)
        .with_context(|| format!("cannot create {}", ctx.dir.display()))?;
    let copy = |from: PathBuf, to: PathBuf| -> anyhow::Result<()> {
        let bytes = std::fs::read(&from).with_context(|| {
            format!(
                "[lm] from = {}: cannot read {}",
                run.display(),
                from.display()
            )
        })?;
        af_core::atomic::write(&to, &bytes)?;
        Ok(())
    };
    copy(lm_dir.join("vocab.tsv"), ctx.dir.join("vocab.tsv"))?;
    for fold in 0..config.pairs.folds {
        let dir = ctx.dir.join(format!("fold-{fold}"));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        copy(
            lm_dir.join(format!("fold-{fold}/best.safetensors")),
            dir.join("best.safetensors"),
        )?;
    }
    let report_path = lm_dir.join("report.json");
    let text = std::fs::read_to_string(&report_path)
        .with_context(|| format!("cannot read {}", report_path.display()))?;
    let mut report: LmReport = serde_json::from_str(&text)
        .with_context(|| format!("{}: not an LM report", report_path.display()))?;
    report.from = Some(run.to_path_buf());
    af_core::atomic::write(
        ctx.dir.join("report.json"),
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    tracing::info!(
        "lm: adopted the {} fold LMs of {}",
        config.pairs.folds,
        run.display()
    );
    Ok(report)
}

/// The items an LM trains on (every fold but `fold`) and, among them, the validation share, chosen
/// by group so that no video is on both sides.
fn split_validation(items: &[Item], fold: u32, share: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let groups = items
        .iter()
        .filter(|i| i.fold != fold)
        .map(|i| i.group.as_str());
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

/// The `lm` stage.
pub struct Lm;

/// The stage's name (its directory, its `--force` spelling).
pub const NAME: StageName = StageName::new("lm");

impl std::fmt::Display for LmReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let folds: Vec<String> = self
            .folds
            .iter()
            .map(|x| {
                format!(
                    "lm fold {}: held-out perplexity {:.1} forward, {:.1} backward ({} items never seen by this LM)",
                    x.fold, x.heldout_ppl_forward, x.heldout_ppl_backward, x.heldout_items
                )
            })
            .collect();
        if let Some(run) = &self.from {
            writeln!(f, "lm: adopted from {} (its figures)", run.display())?;
        }
        f.write_str(&folds.join("\n"))
    }
}

impl crate::runner::Stage for Lm {
    fn name(&self) -> StageName {
        NAME
    }

    fn upstream(&self) -> Option<StageName> {
        Some(super::pairs::NAME)
    }

    /// The vocabulary comes before any training: not worth resuming from.
    fn holds_progress(&self, file: &std::path::Path) -> bool {
        !["started.json", "vocab.tsv"]
            .iter()
            .any(|f| file == std::path::Path::new(f))
    }

    fn uses_device(&self) -> bool {
        true
    }

    fn resumable(&self) -> bool {
        true
    }

    fn inputs(&self, config: &af_core::Config) -> anyhow::Result<serde_json::Value> {
        use crate::runner::file_stamp;
        use serde_json::json;
        let mut pretrain = Vec::new();
        for input in &config.lm.pretrain {
            pretrain.push(file_stamp(&input.path)?);
        }
        let mut stamp = json!({"seed": config.run.seed, "lm": config.lm.fingerprint(), "pretrain_inputs": pretrain});
        if let Some(run) = &config.lm.from {
            let files: Vec<_> = std::iter::once(run.join("lm/vocab.tsv"))
                .chain(
                    (0..config.pairs.folds)
                        .map(|f| run.join(format!("lm/fold-{f}/best.safetensors"))),
                )
                .map(|p| file_stamp(&p))
                .collect::<anyhow::Result<_>>()?;
            stamp["adopted"] = json!(files);
        }
        Ok(stamp)
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<(Box<dyn super::StageOutcome>, bool)> {
        Ok((Box::new(run(ctx)?), true))
    }
}
