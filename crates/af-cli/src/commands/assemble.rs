//! `af assemble SHEETS...`: filled annotation sheets in, the final dataset out (af-annotate's
//! rules). Writes into `--out` (docs/formats.md): `dataset.jsonl`, `extra-train.jsonl`,
//! `reannotate.jsonl`, `dropped.jsonl`, `decisions.jsonl`, `stats.json`, `stats.md`, the kept
//! items in the export's published layouts (`swag/`, `hellaswag/`, `hf/`, `lm-eval/`), and the
//! second-answer check's next sheets (`check/`: the candidates with a question still unanswered).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use af_annotate::assemble::MIN_DISTRACTORS;
use af_annotate::{assemble, DistractorRule, KeyItem, Outcome};
use anyhow::Context;
use clap::Args;
use serde_json::json;

#[derive(Args)]
pub struct AssembleArgs {
    /// Filled sheets (CSV, as exported or as saved by the HTML form); one per annotator and
    /// sheet, any number of annotators.
    #[arg(required = true)]
    sheets: Vec<PathBuf>,
    /// The key written beside the sheets (default: key.jsonl in the first sheet's directory).
    #[arg(long)]
    key: Option<PathBuf>,
    /// Output directory (default: assembled, beside the key).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Skip bad rows (listed in stats.json) instead of stopping at the first; nothing in the
    /// dataset comes from a skipped row.
    #[arg(long)]
    skip_bad: bool,
    /// Replace what is in the output directory.
    #[arg(long)]
    force: bool,
    /// Which shown endings the labels let stay as distractors (the check, `--checks`, can still
    /// set them aside): `swag` (SWAG's rule: any the majority did not call gibberish, endings
    /// people found likely included), `unlikely` (only those more than half of the annotators
    /// called unlikely: fewer second right answers, fewer items kept), `none-likely` (as
    /// `unlikely`, and no annotator called it likely: one annotator's `likely` sets an ending
    /// aside) or `all-unlikely` (every annotator called it unlikely: one `likely` or one
    /// `gibberish` sets it aside; more fluent distractors, fewer items).
    #[arg(long, value_enum, default_value = "swag")]
    distractors: DistractorsArg,
    /// Options per question in the published layouts (swag/, hellaswag/, hf/, lm-eval/): the
    /// found ending and the first usable distractors: the shown ones in sheet order (itself drawn
    /// per item), then replacements the check passed. dataset.jsonl keeps every usable one.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..=(MIN_DISTRACTORS as u64 + 1)))]
    options: u64,
    /// Filled second-answer check sheets (the `check/check-NNN.csv` earlier assemblies wrote):
    /// per row, the questions its `ask` column names answered `yes` or `no` in `could_be_right`
    /// and `fluent` (at least one), and the checker's name in `checker` (empty: the file's path).
    /// A candidate any checker answered `could_be_right = yes` for, or more than half of those
    /// who answered `fluent` called not fluent (a tie keeps it), is set aside under every
    /// `--distractors` rule; an item's replacements that pass both questions become usable after
    /// its shown endings. Answers add up across files: give every round's filled sheets, each
    /// once (one checker answering one row twice is an error). Takes every path up to the next
    /// option, so give it after the label sheets.
    #[arg(long, num_args = 1..)]
    checks: Vec<PathBuf>,
    /// At most this many rows per check sheet written into OUT/check/ (an item's candidates stay
    /// on one sheet): the usable distractors with a question unanswered, and the replacements of
    /// items short of distractors; `ask` on each row says which questions it still needs.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    check_rows: u64,
    /// The lm-evaluation-harness task's name (its files are lm-eval/TASK.yaml and
    /// lm-eval/TASK_SPLIT.jsonl).
    #[arg(long, default_value = "af_assembled")]
    task: String,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum DistractorsArg {
    Swag,
    Unlikely,
    NoneLikely,
    AllUnlikely,
}

impl From<DistractorsArg> for DistractorRule {
    fn from(a: DistractorsArg) -> Self {
        match a {
            DistractorsArg::Swag => DistractorRule::Swag,
            DistractorsArg::Unlikely => DistractorRule::Unlikely,
            DistractorsArg::NoneLikely => DistractorRule::NoneLikely,
            DistractorsArg::AllUnlikely => DistractorRule::AllUnlikely,
        }
    }
}

pub fn run(a: AssembleArgs) -> anyhow::Result<ExitCode> {
    let key_path = a.key.clone().unwrap_or_else(|| {
        a.sheets[0]
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("key.jsonl")
    });
    let text = std::fs::read_to_string(&key_path).with_context(|| {
        format!(
            "cannot read the annotation key {} (pass --key)",
            key_path.display()
        )
    })?;
    let key: Vec<KeyItem> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: not a key line", key_path.display(), i + 1))
        })
        .collect::<anyhow::Result<_>>()?;
    let by_id: HashMap<String, KeyItem> = key.iter().map(|k| (k.item.clone(), k.clone())).collect();
    let (mut annotations, mut skipped) = (Vec::new(), Vec::new());
    for sheet in &a.sheets {
        let (good, bad) = af_annotate::read_sheet(sheet, &by_id, a.skip_bad)?;
        annotations.extend(good);
        skipped.extend(bad.into_iter().map(|e| e.to_string()));
    }
    let (annotations, bad) = af_annotate::reject_repeats(
        annotations,
        a.skip_bad,
        |n| (n.annotator.clone(), format!("item `{}`", n.item)),
        |n| (n.file.clone(), n.line),
    )?;
    skipped.extend(bad.into_iter().map(|e| e.to_string()));
    let mut checks = Vec::new();
    for sheet in &a.checks {
        let (good, bad) = af_annotate::read_check_sheet(sheet, &by_id, a.skip_bad)?;
        checks.extend(good);
        skipped.extend(bad.into_iter().map(|e| e.to_string()));
    }
    let (checks, bad) = af_annotate::reject_repeats(
        checks,
        a.skip_bad,
        |c| {
            let what = format!("slot {} of item `{}`", c.slot + 1, c.item);
            (c.checker.clone(), what)
        },
        |c| (c.file.clone(), c.line),
    )?;
    skipped.extend(bad.into_iter().map(|e| e.to_string()));
    let out = a.out.clone().unwrap_or_else(|| {
        key_path
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("assembled")
    });
    super::empty_out_dir(&out, a.force)?;
    let rule = DistractorRule::from(a.distractors);
    let verdicts = af_annotate::check::verdicts(&checks);
    let result = assemble(&key, &annotations, rule, &verdicts);

    let item_line = |k: &KeyItem, gold: usize, distractors: &[usize], split: &str| {
        json!({
            "id": if gold == k.found() { k.item.clone() } else { format!("{}:gen{}", k.item, k.slots[gold].candidate) },
            "group": k.group, "split": split, "context": k.context, "noun_phrase": k.prefix,
            "gold": {"ending": k.slots[gold].ending, "candidate": k.slots[gold].candidate, "source": k.slots[gold].source},
            "distractors": distractors.iter().map(|&d| json!({"ending": k.candidate(d).ending, "candidate": k.candidate(d).candidate})).collect::<Vec<_>>(),
        })
        .to_string()
    };
    let (mut dataset, mut extra, mut reannotate, mut dropped, mut decisions) = (
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
    );
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (k, d) in key.iter().zip(&result.decided) {
        decisions.push_str(&serde_json::to_string(d)?);
        decisions.push('\n');
        match &d.outcome {
            Outcome::Kept {
                distractors,
                extra_gold,
            } => {
                *counts.entry("kept").or_default() += 1;
                dataset.push_str(&item_line(k, k.found(), distractors, &k.split));
                dataset.push('\n');
                if let Some(g) = extra_gold {
                    *counts.entry("extra_train").or_default() += 1;
                    extra.push_str(&item_line(k, *g, distractors, "train"));
                    extra.push('\n');
                }
            }
            Outcome::Reannotate { reason } => {
                *counts.entry("reannotate").or_default() += 1;
                reannotate.push_str(&json!({"item": k.item, "reason": reason, "sheet": k.sheet, "row": k.row, "usable_slots": d.usable, "slots": k.slots, "replacements": k.replacements}).to_string());
                reannotate.push('\n');
            }
            Outcome::Dropped { reason } => {
                *counts.entry("dropped").or_default() += 1;
                dropped.push_str(
                    &json!({"item": k.item, "reason": reason, "best": d.best, "second": d.second})
                        .to_string(),
                );
                dropped.push('\n');
            }
            Outcome::Unannotated => *counts.entry("unannotated").or_default() += 1,
        }
    }
    // The published layouts take questions of one width: the found ending first (each layout
    // shuffles the options per question id), then the first usable distractors.
    let published: Vec<af_core::Question> = key
        .iter()
        .zip(&result.decided)
        .filter_map(|(k, d)| match &d.outcome {
            Outcome::Kept { distractors, .. } => Some((k, distractors)),
            _ => None,
        })
        .enumerate()
        .map(|(i, (k, distractors))| af_core::Question {
            id: k.item.clone(),
            group: k.group.clone(),
            context: k.context.clone(),
            prefix: k.prefix.clone(),
            endings: std::iter::once(k.found())
                .chain(distractors.iter().copied().take(a.options as usize - 1))
                .map(|s| k.candidate(s).ending.clone())
                .collect(),
            label: 0,
            split: Some(k.split.clone()),
            blank: None,
            line: i + 1,
        })
        .collect();
    if !published.is_empty() {
        af_pipeline::stages::export::write_layouts(&out, &published, &a.task)?;
    }
    let write = |name: &str, bytes: &[u8]| af_core::atomic::write(out.join(name), bytes);
    let to_check = af_annotate::check::next_checks(&key, &result.decided, &verdicts);
    let check_sheets = af_annotate::check_sheets(&by_id, &to_check, a.check_rows as usize)?;
    for sheet in &check_sheets {
        write(&format!("check/{}.csv", sheet.name), &sheet.csv)?;
        write(&format!("check/{}.html", sheet.name), sheet.html.as_bytes())?;
    }
    let mut checkers: Vec<&str> = checks.iter().map(|c| c.checker.as_str()).collect();
    checkers.sort_unstable();
    checkers.dedup();
    let total = |f: &dyn Fn(&af_annotate::assemble::Decided) -> usize| -> usize {
        result.decided.iter().map(f).sum()
    };
    let set_aside_could_be_right = total(&|d| d.set_aside_could_be_right.len());
    let set_aside_not_fluent = total(&|d| d.set_aside_not_fluent.len());
    let replacements_used = total(&|d| match &d.outcome {
        Outcome::Kept { distractors, .. } => distractors
            .iter()
            .filter(|&&s| s >= by_id[&d.item].slots.len())
            .count(),
        _ => 0,
    });
    let answered = |yes: &dyn Fn(&af_annotate::check::Verdict) -> bool| {
        verdicts.values().filter(|v| yes(v)).count()
    };
    let (could_be_right, not_fluent, complete) = (
        answered(&|v| v.could_be_right()),
        answered(&|v| v.not_fluent()),
        answered(&|v| v.complete()),
    );
    write("dataset.jsonl", dataset.as_bytes())?;
    write("extra-train.jsonl", extra.as_bytes())?;
    write("reannotate.jsonl", reannotate.as_bytes())?;
    write("dropped.jsonl", dropped.as_bytes())?;
    write("decisions.jsonl", decisions.as_bytes())?;
    let count = |k: &str| counts.get(k).copied().unwrap_or(0);
    let stats = json!({
        "key": key_path, "sheets": a.sheets, "items": key.len(), "distractor_rule": rule.name(),
        "published": {"options": a.options, "task": a.task, "questions": published.len()},
        "kept": count("kept"), "extra_train": count("extra_train"), "reannotate": count("reannotate"),
        "dropped": count("dropped"), "unannotated": count("unannotated"),
        "annotations": result.annotations, "annotators": result.annotators,
        "found": result.found, "generated": result.generated,
        "label_alpha": result.label_alpha, "label_pairwise_agreement": result.label_pairwise_agreement,
        "best_alpha": result.best_alpha, "best_pairwise_agreement": result.best_pairwise_agreement,
        "skipped_rows": skipped,
        "check": {
            "sheets": a.checks, "answers": checks.len(), "checkers": checkers.len(),
            "candidates_checked": verdicts.len(), "candidates_complete": complete,
            "candidates_could_be_right": could_be_right, "candidates_not_fluent": not_fluent,
            "set_aside_could_be_right": set_aside_could_be_right,
            "set_aside_not_fluent": set_aside_not_fluent, "replacements_used": replacements_used,
            "rows_written": to_check.len(), "sheets_written": check_sheets.len(),
            "rows_per_sheet": a.check_rows,
        },
    });
    write(
        "stats.json",
        serde_json::to_string_pretty(&stats)?.as_bytes(),
    )?;
    let opt = |x: Option<f64>| {
        x.map_or("n/a (fewer than two annotators per unit)".into(), |v| {
            format!("{v:.3}")
        })
    };
    let row = |name: &str, t: &af_annotate::assemble::TypeStats| {
        format!(
            "| {name} | {} | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% |\n",
            t.judgements,
            100.0 * t.likely,
            100.0 * t.unlikely,
            100.0 * t.gibberish,
            100.0 * t.best,
            100.0 * t.second
        )
    };
    let md = format!(
        "# Assembly of {} items ({} rule for distractors)\n\nKept {}, extra training items {}, re-annotation queue {}, dropped {}, not annotated {}; {} annotations by {} annotators; {} rows skipped.\n\n\
         | ending type | judgements | likely | unlikely | gibberish | ranked best | ranked second |\n|---|---:|---:|---:|---:|---:|---:|\n{}{}\n\
         Agreement on labels: Krippendorff's alpha {}, pairwise {}. On the best ending: alpha {}, pairwise {}.\n\n\
         Second-answer check: {} answers by {} checkers on {} candidates ({} with both questions answered); {} answered could-be-right by at least one, {} not fluent by most; set aside: {} as could-be-right, {} as not fluent; {} replacements in kept items; {} rows to check next ({} sheets in check/).\n",
        key.len(),
        rule.name(),
        count("kept"),
        count("extra_train"),
        count("reannotate"),
        count("dropped"),
        count("unannotated"),
        result.annotations,
        result.annotators,
        skipped.len(),
        row("found", &result.found),
        row("generated", &result.generated),
        opt(result.label_alpha),
        opt(result.label_pairwise_agreement),
        opt(result.best_alpha),
        opt(result.best_pairwise_agreement),
        checks.len(),
        checkers.len(),
        verdicts.len(),
        complete,
        could_be_right,
        not_fluent,
        set_aside_could_be_right,
        set_aside_not_fluent,
        replacements_used,
        to_check.len(),
        check_sheets.len(),
    );
    write("stats.md", md.as_bytes())?;
    for s in &skipped {
        eprintln!("skipped: {s}");
    }
    print!("{md}");
    println!("assemble: outputs in {}", out.display());
    Ok(ExitCode::SUCCESS)
}
