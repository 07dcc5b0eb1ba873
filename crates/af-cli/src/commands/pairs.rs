//! The `pairs` stage: inputs -> items.jsonl, vocab.tsv, report.json.

use af_text::pairs::{make_pairs, PairOptions};
use anyhow::Context;

pub fn run(ctx: &crate::stage::StageContext) -> anyhow::Result<()> {
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
    let tagger = super::load_tagger(config.tagger.model.as_deref())?;
    let bar = crate::progress::bar(docs.len() as u64, "documents");
    let options = PairOptions::from((&config.pairs, config.run.seed));
    let out = make_pairs(&docs, &tagger, &options, &|| bar.inc(1))?;
    bar.finish_and_clear();
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
    let r = &out.report;
    println!(
        "pairs: {} items from {} candidate pairs ({} groups, {} sentences); folds {:?}",
        r.items, r.candidate_pairs, r.groups, r.sentences, r.items_per_fold
    );
    for (reason, n) in &r.dropped {
        println!("  dropped {n:>6} {reason}");
    }
    Ok(())
}
