//! The `pairs` stage: inputs -> items.jsonl, vocab.tsv, report.json.

use af_text::pairs::{make_pairs, PairOptions, PairsReport};
use anyhow::Context;

use crate::runner::StageContext;

pub fn run(ctx: &StageContext) -> anyhow::Result<PairsReport> {
    let (config, dir) = (ctx.config, ctx.dir.as_path());
    if config.pairs.inputs.is_empty() {
        anyhow::bail!("[pairs] has no inputs: add at least one [[pairs.inputs]] with `path` and `format`");
    }
    let mut docs = Vec::new();
    for input in &config.pairs.inputs {
        let read = af_io::documents::read_input(input)?;
        tracing::info!("read {} documents from {}", read.len(), input.path.display());
        docs.extend(read);
    }
    let tagger = crate::setup::load_tagger(config.tagger.model.as_deref())?;
    let bar = ctx.progress.bar("documents", docs.len() as u64);
    let options = PairOptions::from((&config.pairs, config.run.seed));
    let out = make_pairs(&docs, &tagger, &options, &|| bar.inc(1))?;
    bar.finish();
    if out.items.is_empty() {
        anyhow::bail!(
            "no items survived: {} candidate pairs, dropped {:?}; check the length filters in [pairs]",
            out.report.candidate_pairs,
            out.report.dropped
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    af_io::items::write_items(&dir.join("items.jsonl"), &out.items).context("cannot write items.jsonl")?;
    let vocab = af_text::Vocab::from_counts(&out.token_counts, 1);
    af_core::atomic::write(dir.join("vocab.tsv"), vocab.to_tsv().as_bytes())?;
    af_core::atomic::write(dir.join("report.json"), serde_json::to_string_pretty(&out.report)?.as_bytes())?;
    Ok(out.report)
}

/// The `pairs` stage.
pub struct Pairs;

impl crate::runner::Stage for Pairs {
    fn inputs(&self, config: &af_core::Config) -> anyhow::Result<serde_json::Value> {
        use crate::runner::file_stamp;
        use serde_json::json;
        let mut inputs = Vec::new();
        for input in &config.pairs.inputs {
            inputs.push(file_stamp(&input.path)?);
        }
        Ok(json!({
            "seed": config.run.seed,
            "pairs": config.pairs,
            "tagger": config.tagger,
            "tagger_file": config.tagger.model.as_deref().map(file_stamp).transpose()?,
            "inputs": inputs,
        }))
    }

    fn run(&self, ctx: &crate::runner::StageContext) -> anyhow::Result<(super::StageReport, bool)> {
        use super::StageReport;
        Ok((StageReport::Pairs(run(ctx)?), true))
    }
}
