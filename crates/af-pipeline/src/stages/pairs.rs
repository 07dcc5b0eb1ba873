//! The `pairs` stage: inputs -> items.jsonl, vocab.tsv, report.json.

use af_core::config::InputFormat;
use af_text::pairs::{
    make_pairs, question_item, GivenItem, PairOptions, PairsReport, SkippedQuestion,
};
use anyhow::Context;

use super::StageOutcome;
use crate::runner::{StageContext, StageName};

pub fn run(ctx: &StageContext) -> anyhow::Result<PairsReport> {
    let (config, dir) = (ctx.config, ctx.dir.as_path());
    if config.pairs.inputs.is_empty() {
        anyhow::bail!(
            "[pairs] has no inputs: add at least one [[pairs.inputs]] with `path` and `format`"
        );
    }
    let mut docs = Vec::new();
    let (mut given, mut skipped) = (Vec::new(), Vec::new());
    for input in &config.pairs.inputs {
        if input.format == InputFormat::Questions {
            let (items, left_out) = question_items(input, config)?;
            tracing::info!(
                "read {} questions from {}",
                items.len(),
                input.path.display()
            );
            given.extend(items);
            skipped.extend(left_out);
            continue;
        }
        let read = af_io::documents::read_input(input)?;
        tracing::info!(
            "read {} documents from {}",
            read.len(),
            input.path.display()
        );
        docs.extend(read);
    }
    let tagger = crate::setup::load_tagger(config.tagger.model.as_deref())?;
    let bar = ctx.progress.bar("documents", docs.len() as u64);
    let options = PairOptions::from((&config.pairs, config.run.seed));
    let mut out = make_pairs(&docs, given, &tagger, &options, &|| bar.inc(1))?;
    bar.finish();
    if let Some(run) = &config.lm.from {
        let source = source_items(run, config.pairs.folds)?;
        let matched = af_text::pairs::follow_folds(&mut out.items, &source, &mut out.report);
        if (matched as usize) < out.items.len() {
            tracing::warn!("{} of {} items are not among the items of {}: each follows its video's matched items, else keeps its own fold", out.items.len() - matched as usize, out.items.len(), run.display());
        }
        tracing::info!(
            "{matched} of {} items take their fold from {}",
            out.items.len(),
            run.display()
        );
    }
    for s in &skipped {
        *out.report.dropped.entry(s.reason.clone()).or_default() += 1;
    }
    out.report.skipped_questions = skipped;
    if out.items.is_empty() {
        anyhow::bail!(
            "no items survived: {} candidate pairs, dropped {:?}; check the length filters in [pairs]",
            out.report.candidate_pairs,
            out.report.dropped
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    af_io::items::write_items(&dir.join("items.jsonl"), &out.items)
        .context("cannot write items.jsonl")?;
    let vocab = af_text::Vocab::from_counts(&out.token_counts, 1);
    af_core::atomic::write(dir.join("vocab.tsv"), vocab.to_tsv().as_bytes())?;
    af_core::atomic::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&out.report)?.as_bytes(),
    )?;
    Ok(out.report)
}

/// The items of the run whose LMs `[lm] from` adopts, checked to be the items its LMs were
/// trained on (its `lm` stage finished on its present `pairs`) and to have as many folds as this
/// run.
fn source_items(run: &std::path::Path, folds: u32) -> anyhow::Result<Vec<af_core::Item>> {
    let record = |stage: &str| -> anyhow::Result<serde_json::Value> {
        let path = run.join(stage).join("stage.json");
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "[lm] from = {}: no finished `{stage}` stage ({})",
                run.display(),
                path.display()
            )
        })?;
        let record: crate::runner::StageRecord = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a stage record", path.display()))?;
        Ok(record.fingerprint)
    };
    anyhow::ensure!(
        record("lm")?["upstream"] == record("pairs")?,
        "[lm] from = {}: its LMs were trained on other items than its pairs/items.jsonl holds now (its `pairs` stage ran again after its `lm`), so which LM trained on what is unknown; rerun its `lm` stage first",
        run.display()
    );
    let path = run.join("pairs/items.jsonl");
    let items = af_io::items::read_items(&path).with_context(|| {
        format!(
            "[lm] from = {}: its items tell which LM trained on what",
            run.display()
        )
    })?;
    let theirs = items.iter().map(|i| i.fold + 1).max().unwrap_or(0);
    anyhow::ensure!(theirs == folds, "[lm] from = {}: that run has {theirs} folds, this one [pairs] folds = {folds}; they must be equal", run.display());
    Ok(items)
}

/// The items of a `questions` input as they stand, and the questions left out under `skip-bad`.
/// A question needs k wrong answers in its pool: its own wrong options and the endings
/// `[generate]` adds.
fn question_items(
    input: &af_core::config::InputSpec,
    config: &af_core::Config,
) -> anyhow::Result<(Vec<GivenItem>, Vec<SkippedQuestion>)> {
    let file = af_io::questions::read_question_input(input)?;
    let at = |line: usize| format!("{}:{line}", input.path.display());
    let mut skipped: Vec<SkippedQuestion> = file
        .skipped
        .iter()
        .map(|s| SkippedQuestion {
            origin: at(s.line),
            reason: "unreadable".into(),
            detail: s.reason.clone(),
        })
        .collect();
    let (k, added) = (config.filter.k, config.generate.endings);
    let mut items = Vec::new();
    for q in &file.questions {
        let own = q.endings.len().saturating_sub(1);
        if own + added < k {
            let detail = format!(
                "{} options, so {own} wrong ones{}, and k = {k} needs {k}",
                q.endings.len(),
                if added > 0 {
                    format!(" and {added} generated")
                } else {
                    String::new()
                }
            );
            anyhow::ensure!(
                input.skip_bad,
                "{}: question `{}` has {detail}; [generate] endings = N adds N per question, or `skip-bad = true` on the input leaves such questions out",
                at(q.line),
                q.id
            );
            skipped.push(SkippedQuestion {
                origin: at(q.line),
                reason: "too-few-options".into(),
                detail,
            });
            continue;
        }
        items.push(GivenItem {
            item: question_item(q),
            origin: at(q.line),
        });
    }
    Ok((items, skipped))
}

/// The `pairs` stage.
pub struct Pairs;

/// The stage's name (its directory, its `--force` spelling).
pub const NAME: StageName = StageName::new("pairs");

/// What the stage reports: af-text's counts of the items made.
pub struct PairsOutcome(pub af_text::pairs::PairsReport);

impl std::fmt::Display for PairsOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.0;
        if r.documents == 0 {
            write!(f, "pairs: {} items, every one a question read as it stands with its wrong options in its pool ({} groups); folds {:?}", r.items, r.groups, r.items_per_fold)?;
        } else {
            write!(
                f,
                "pairs: {} items from {} candidate pairs ({} groups, {} sentences); folds {:?}",
                r.items, r.candidate_pairs, r.groups, r.sentences, r.items_per_fold
            )?;
            if r.questions > 0 {
                write!(f, "\n  {} of the items are questions read as they stand, their wrong options in their pools", r.questions)?;
            }
        }
        if let Some(n) = r.folds_followed {
            write!(
                f,
                "\n  {n} of the items keep the fold they have in the run whose LMs this one adopts"
            )?;
        }
        for (reason, n) in &r.dropped {
            write!(f, "\n  dropped {n:>6} {reason}")?;
        }
        Ok(())
    }
}

impl crate::runner::Stage for Pairs {
    fn name(&self) -> StageName {
        NAME
    }

    fn upstream(&self) -> Option<StageName> {
        None
    }

    fn inputs(&self, config: &af_core::Config) -> anyhow::Result<serde_json::Value> {
        use crate::runner::file_stamp;
        use serde_json::json;
        let mut inputs = Vec::new();
        for input in &config.pairs.inputs {
            inputs.push(file_stamp(&input.path)?);
        }
        let mut stamp = json!({
            "seed": config.run.seed,
            "pairs": config.pairs.fingerprint(),
            "tagger": config.tagger.fingerprint(),
            "tagger_file": config.tagger.model.as_deref().map(file_stamp).transpose()?,
            "inputs": inputs,
        });
        if let Some(run) = &config.lm.from {
            stamp["folds_from"] = file_stamp(&run.join("pairs/items.jsonl"))?;
        }
        // Which questions have enough options depends on k and on the endings generate adds.
        if config
            .pairs
            .inputs
            .iter()
            .any(|i| i.format == InputFormat::Questions)
        {
            stamp["questions_need"] =
                json!({"k": config.filter.k, "endings": config.generate.endings});
        }
        Ok(stamp)
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<(Box<dyn StageOutcome>, bool)> {
        Ok((Box::new(PairsOutcome(run(ctx)?)), true))
    }
}
