//! `export/README.md`: the dataset card, in the Hugging Face layout (YAML front matter that the
//! Hub and `datasets.load_dataset(FOLDER)` read, then Markdown). Every figure in it is read from a
//! file of the run: the export's own (`evaluation.json`, `eval/*/eval.json`, the split files) and
//! the earlier stages' reports (`generate/report.json`, `filter/report.json`); what the config
//! says (the inputs' source and licence, the seed) from the config, which the runner writes
//! beside the card as `config.toml`.

use std::path::Path;

use af_core::Config;
use anyhow::Context;
use serde_json::Value;

use super::lm;
use crate::stages::filter::FilterReport;
use crate::stages::report::{edge_change_cell, fresh_detector_rows, num};

/// The published splits: (name in the card and in `hf/`, name in the exported questions).
const SPLITS: [&str; 3] = ["train", "validation", "test"];

/// Licence identifiers the Hugging Face Hub knows (its `license` field): an input's `license` that
/// is one of them goes into the header as it is.
const HUB_LICENSES: &[&str] = &[
    "apache-2.0",
    "mit",
    "bsd-2-clause",
    "bsd-3-clause",
    "cc0-1.0",
    "cc-by-2.0",
    "cc-by-3.0",
    "cc-by-4.0",
    "cc-by-sa-3.0",
    "cc-by-sa-4.0",
    "cc-by-nc-2.0",
    "cc-by-nc-3.0",
    "cc-by-nc-4.0",
    "cc-by-nd-4.0",
    "cc-by-nc-sa-3.0",
    "cc-by-nc-sa-4.0",
    "cc-by-nc-nd-4.0",
    "cdla-permissive-2.0",
    "cdla-sharing-1.0",
    "gpl-3.0",
    "lgpl-3.0",
    "agpl-3.0",
    "mpl-2.0",
    "odc-by",
    "odbl",
    "pddl",
    "unlicense",
    "unknown",
];

/// Writes the card into `export_dir`.
pub fn write(config: &Config, export_dir: &Path) -> anyhow::Result<()> {
    let text = card(config, export_dir)?;
    af_core::atomic::write(export_dir.join("README.md"), text.as_bytes())
        .with_context(|| format!("cannot write {}", export_dir.join("README.md").display()))
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))
}

/// The header's `license`: each input's licence as the Hub names it (`unknown` where not
/// given, `other` where it is not a Hub identifier; "a OR b" as both), and for `other` the text
/// as `license_name`.
pub fn header_license(licenses: &[Option<&str>]) -> (Vec<String>, Option<String>) {
    let mut ids: Vec<String> = Vec::new();
    let mut other = None;
    for license in licenses {
        let text = license.map(str::trim).unwrap_or("unknown");
        let lower = text.to_lowercase();
        let parts: Vec<&str> = lower.split(" or ").map(str::trim).collect();
        let found: Vec<String> = if parts.iter().all(|p| HUB_LICENSES.contains(p)) {
            parts.iter().map(|p| p.to_string()).collect()
        } else {
            other.get_or_insert_with(|| slug(text));
            vec!["other".into()]
        };
        for id in found {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    if ids.is_empty() {
        ids.push("unknown".into());
    }
    (ids, other)
}

/// Lower-case letters, digits and single dashes, at most 64 characters: the Hub's
/// `license_name`.
fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.to_lowercase().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out = out.trim_end_matches('-').to_string();
    if out.len() > 64 {
        // At a word's end.
        out.truncate(out[..=64].rfind('-').unwrap_or(64));
    }
    out
}

/// The Hub's `size_categories` bucket of `n` examples.
pub fn size_category(n: usize) -> &'static str {
    match n {
        0..1_000 => "n<1K",
        1_000..10_000 => "1K<n<10K",
        10_000..100_000 => "10K<n<100K",
        100_000..1_000_000 => "100K<n<1M",
        1_000_000..10_000_000 => "1M<n<10M",
        _ => "10M<n<100M",
    }
}

/// A YAML scalar: JSON's double-quoted string is one.
fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// A Markdown table; `|` in a cell is escaped.
fn md_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut out = format!("| {} |\n|", header.join(" | "));
    out.push_str(&"---|".repeat(header.len()));
    out.push('\n');
    for r in rows {
        out.push_str(&format!(
            "| {} |\n",
            r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
        ));
    }
    out
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// The card's text, from the files in `export_dir` and in the run directory around it.
pub fn card(config: &Config, export_dir: &Path) -> anyhow::Result<String> {
    let run_dir = &config.run.dir;
    let run_name = run_dir
        .file_name()
        .map_or("af".to_string(), |n| n.to_string_lossy().into_owned());
    let evaluation = read_json(&export_dir.join("evaluation.json"))?;
    let k = config.filter.k;
    let mut counts = Vec::new();
    for split in SPLITS {
        let path = export_dir.join(format!("hf/{split}.jsonl"));
        if path.is_file() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            counts.push((split, text.lines().count()));
        }
    }
    let total: usize = counts.iter().map(|c| c.1).sum();
    let pretty_name = format!(
        "{run_name}: {}-way multiple choice by Adversarial Filtering",
        k + 1
    );
    let licenses: Vec<Option<&str>> = config
        .pairs
        .inputs
        .iter()
        .map(|i| i.license.as_deref())
        .collect();
    let (license_ids, license_name) = header_license(&licenses);

    // The header.
    let mut y = String::from("---\n");
    if license_ids.len() == 1 {
        y.push_str(&format!("license: {}\n", license_ids[0]));
    } else {
        y.push_str("license:\n");
        for id in &license_ids {
            y.push_str(&format!("- {id}\n"));
        }
    }
    if let Some(name) = &license_name {
        y.push_str(&format!("license_name: {}\n", q(name)));
    }
    y.push_str("language:\n- en\n");
    y.push_str("task_categories:\n- multiple-choice\n");
    y.push_str("task_ids:\n- multiple-choice-qa\n");
    y.push_str("annotations_creators:\n- machine-generated\n");
    y.push_str("language_creators:\n- found\n- machine-generated\n");
    y.push_str("multilinguality:\n- monolingual\n");
    y.push_str(&format!("size_categories:\n- {}\n", size_category(total)));
    y.push_str(&format!("pretty_name: {}\n", q(&pretty_name)));
    y.push_str("tags:\n- adversarial-filtering\n- swag\n- af\n");
    y.push_str("configs:\n- config_name: default\n  data_files:\n");
    for (split, _) in &counts {
        y.push_str(&format!("  - split: {split}\n    path: hf/{split}.jsonl\n"));
    }
    y.push_str("---\n\n");

    let mut md = y;
    md.push_str(&format!("# {pretty_name}\n\n"));
    let split_text: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    md.push_str(&format!(
        "{total} English multiple-choice questions ({}), each a context, the start of the sentence that follows it, and {} endings to choose from: the sentence's real ending and {k} distractors written by language models, chosen by Adversarial Filtering (SWAG, Zellers et al., 2018) so that a committee of classifiers cannot tell them from the real one. Splits are by group (a video or a document), so no group is in two splits. Made by af {} (run `{run_name}`, seed {}).\n\n",
        split_text.join(", "),
        k + 1,
        env!("CARGO_PKG_VERSION"),
        config.run.seed,
    ));

    md.push_str("## Files\n\n");
    md.push_str(&md_table(
        &["path", "what"],
        &[
            vec!["`hf/{train,validation,test}.jsonl`".into(), "this card's `default` config: `id`, `group`, `split`, `context`, `prefix` (the start of the second sentence), `endings`, `label` (the right ending's index)".into()],
            vec!["`swag/`, `hellaswag/`".into(), "the same questions in SWAG's regular and full CSV and in HellaSwag's JSONL layout".into()],
            vec!["`lm-eval/`".into(), "an lm-evaluation-harness task (`lm_eval --include_path lm-eval --tasks NAME`)".into()],
            vec!["`dataset.jsonl`, `dataset-full.csv`".into(), "every question with the gold ending first, its LM features and the committee's last scores".into()],
            vec!["`random.jsonl`, `random-full.csv`".into(), "the baseline: the same pool with distractors assigned at random, which every figure below is compared with".into()],
            vec!["`evaluation.json`, `audit-*.json`, `audit-comparison.csv`".into(), "the detectors' figures below".into()],
            vec!["`eval/random/`, `eval/af/`".into(), "a pretrained LM's scores below (`af eval`), when the export ran one".into()],
            vec!["`config.toml`".into(), "the config that made the dataset, as af resolved it".into()],
        ],
    ));
    md.push('\n');

    md.push_str("## How it was made\n\n");
    md.push_str(&made(config, run_dir)?);

    md.push_str("## Source data\n\n");
    md.push_str(&sources(config));

    md.push_str("## How hard it is for a language model\n\n");
    md.push_str(&lm_section(export_dir, &evaluation)?);

    md.push_str("## Shortcuts: detectors on random distractors and on AF's\n\n");
    md.push_str(&detectors(&evaluation));

    md.push_str("## Fluency and validity\n\n");
    md.push_str(&fluency(run_dir, &evaluation)?);

    md.push_str(LIMITATIONS);
    md.push_str(&citation(&run_name, &pretty_name));
    Ok(md)
}

/// The stages, the endings' sources and the filter's course, from the stages' reports.
fn made(config: &Config, run_dir: &Path) -> anyhow::Result<String> {
    let mut out = String::from("The config is `config.toml` beside this card (paths as on the machine that made the dataset). af's stages, in order:\n\n");
    out.push_str("1. **pairs**: consecutive sentences of the source text (below) become items: a context, the start of the next sentence (its subject) and its real ending.\n");
    let generate = read_json(&run_dir.join("generate/report.json")).ok();
    let origins = generate
        .as_ref()
        .and_then(|g| g["endings_by_origin"].as_object())
        .map(|o| {
            o.iter()
                .map(|(name, n)| format!("{} {}", n, origin_words(name)))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|| "not recorded (no generate/report.json)".into());
    out.push_str(&format!(
        "2. **lm** and **generate**: language models wrote candidate endings for each item; the pool's wrong endings: {origins}{} (`generate/report.json`).\n",
        generate
            .as_ref()
            .map(|g| format!(", for {} items", num(g, "items")))
            .unwrap_or_default()
    ));
    match read_json(&run_dir.join("filter/report.json"))
        .and_then(|v| serde_json::from_value::<FilterReport>(v).map_err(Into::into))
    {
        Ok(f) => out.push_str(&format!(
            "3. **filter**: {} iterations of Adversarial Filtering with the committee {}: each iteration trains it afresh on part of the questions and replaces the distractors it finds easiest on the rest; {} swaps, {} items ever changed. The driving head's held-out {}-way accuracy went from {:.3} to {:.3} (chance {:.3}) (`filter/report.json`).\n",
            f.iterations,
            config.filter.members().iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", "),
            f.swaps,
            f.items_ever_changed,
            f.k + 1,
            f.driving_head_first,
            f.driving_head_last,
            f.chance,
        )),
        Err(_) => out.push_str("3. **filter**: Adversarial Filtering (no `filter/report.json` was found).\n"),
    }
    out.push_str("4. **export**: the filtered dataset and its random-assignment baseline, measured below.\n\n");
    Ok(out)
}

fn origin_words(origin: &str) -> String {
    match origin {
        "sampled" => "sampled from af's own LSTM language models".into(),
        "pretrained" => "written by a pretrained language model".into(),
        "borrowed" => "other items' real endings (borrowed)".into(),
        "own" => "the input questions' own wrong options".into(),
        other => format!("from `{other}`"),
    }
}

/// Each input's file, source and licence (`unknown` where the config does not say).
fn sources(config: &Config) -> String {
    let unknown = || "unknown".to_string();
    let name = |p: &Path| {
        p.file_name().map_or(p.display().to_string(), |n| {
            n.to_string_lossy().into_owned()
        })
    };
    let rows: Vec<Vec<String>> = config
        .pairs
        .inputs
        .iter()
        .map(|i| {
            vec![
                format!("`{}`", name(&i.path)),
                i.format.to_string(),
                i.source.clone().unwrap_or_else(unknown),
                i.license.clone().unwrap_or_else(unknown),
            ]
        })
        .collect();
    let mut out = String::from("Every context and right ending comes from these inputs (`[[pairs.inputs]]`); their licences bind the dataset. \"unknown\" means the config did not say (`source` and `license` keys): find out before you publish or redistribute the data.\n\n");
    out.push_str(&md_table(&["input", "format", "source", "licence"], &rows));
    if !config.lm.pretrain.is_empty() {
        let rows: Vec<Vec<String>> = config
            .lm
            .pretrain
            .iter()
            .map(|i| {
                vec![
                    format!("`{}`", name(&i.path)),
                    i.source.clone().unwrap_or_else(unknown),
                    i.license.clone().unwrap_or_else(unknown),
                ]
            })
            .collect();
        out.push_str("\nText af's language models were pretrained on before they wrote distractors (`[[lm.pretrain]]`):\n\n");
        out.push_str(&md_table(&["input", "source", "licence"], &rows));
    }
    if config.generate.pretrained_endings > 0 {
        let model = config
            .generate
            .pretrained_model
            .as_deref()
            .map_or("the file `AF_CAUSAL_LM` named".to_string(), |m| {
                format!("`{}`", name(m))
            });
        out.push_str(&format!("\nSome distractors were written by a pretrained language model ({model}); its licence may say something about its outputs.\n"));
    }
    out.push('\n');
    out
}

/// `af eval`'s table, random against AF, from `eval/*/eval.json`; or why there is none.
fn lm_section(export_dir: &Path, evaluation: &Value) -> anyhow::Result<String> {
    let Some(summaries) = lm::read(export_dir)? else {
        let why = evaluation["lm_eval"]["skipped"]
            .as_str()
            .unwrap_or("this export did not run it");
        return Ok(format!(
            "Not measured: {why}. `af eval hf/test.jsonl` measures it (a pretrained causal LM, zero-shot, scored as lm-evaluation-harness scores multiple choice).\n\n"
        ));
    };
    let af = &summaries[1];
    let mut out = format!(
        "{}, zero-shot, on {} questions of the test split (the same questions with random and with AF's distractors; `eval/random/eval.json`, `eval/af/eval.json`), scored as lm-evaluation-harness scores multiple choice: `acc` takes the option with the highest summed log-probability after the context, `acc_norm` the highest per character. *full*: the whole context; *zero-prompt*: the first sentence removed; *choices-only*: the option alone. Accuracy far above chance under zero-prompt or choices-only means the questions can be answered without reading them. The last two rows read the same scores the other way: a probe trained on them (a conditional logit over four per-option scores, cross-fitted over five folds) and the option least likely per character; far above chance, a detector trained on the dataset can tell the gold by how likely the LM finds it, even where `acc` is below chance. 95% Wilson intervals.\n\n",
        af.model_name, af.questions
    );
    out.push_str(&md_table(&lm::COLUMNS, &lm::rows(&summaries)));
    out.push('\n');
    Ok(out)
}

/// The fresh committee and length baselines, and the audit's detectors the committee never saw.
fn detectors(evaluation: &Value) -> String {
    let rows = fresh_detector_rows(evaluation, num(evaluation, "chance"));
    let mut out = format!(
        "A new committee of the filter's members, trained on one group split of each dataset and scored on the rest ({} questions), and the length baselines on every question: how often each picks the right ending, 95% intervals (`evaluation.json`).\n\n",
        num(&evaluation["af"], "heldout_items")
    );
    out.push_str(&md_table(
        &["detector", "random assignment", "AF", "chance"],
        &rows,
    ));
    if let Some(compared) = evaluation["audit"]["comparison"].as_array() {
        let rows: Vec<Vec<String>> = compared
            .iter()
            .map(|c| {
                vec![
                    c["detector"].as_str().unwrap_or("?").to_string(),
                    format!("{:.3}", num(c, "random")),
                    format!("{:.3}", num(c, "af")),
                    format!("{:.3}", num(c, "chance")),
                    edge_change_cell(c),
                ]
            })
            .collect();
        out.push_str(&format!(
            "\nThe audit's detectors that were not in the committee (models: {}; split: {}): what AF removed that it was not trained against. The last column is AF's edge over chance minus the random assignment's, question by question, with its 95% interval (`evaluation.json`, in full `audit-af.json` and `audit-random.json`).\n\n",
            evaluation["audit"]["models"]
                .as_array()
                .map(|m| m.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                .unwrap_or_default(),
            evaluation["audit"]["split"]["method"].as_str().unwrap_or("?"),
        ));
        out.push_str(&md_table(
            &[
                "detector",
                "random assignment",
                "AF",
                "chance",
                "AF - random edge, paired",
            ],
            &rows,
        ));
    }
    out.push('\n');
    out
}

/// The generate stage's validity rates and the LMs' perplexity of gold and distractors.
fn fluency(run_dir: &Path, evaluation: &Value) -> anyhow::Result<String> {
    let mut out = String::new();
    let logppl = |which: &str, key: &str| num(&evaluation[which][key], "mean");
    out.push_str(&format!(
        "Mean log-perplexity per token of the ending given its context under af's forward LSTM LM (lower reads more fluently to it; `evaluation.json`): right endings {:.3}, AF's distractors {:.3}, random distractors {:.3}.\n\n",
        logppl("af", "gold_logppl"),
        logppl("af", "distractor_logppl"),
        logppl("random", "distractor_logppl"),
    ));
    match read_json(&run_dir.join("generate/report.json")) {
        Ok(g) => {
            let v = &g["validity"];
            out.push_str(&format!(
                "Validity rules over the whole pool of candidate endings, before filtering (`generate/report.json`): {} of the written endings break none of them, against {} of the right endings (for the rules that read an ending alone); rules that rejected draws while sampling: {}.\n\n",
                pct(num(v, "valid_share")),
                pct(num(v, "gold_valid_share")),
                v["reject"]
                    .as_array()
                    .filter(|r| !r.is_empty())
                    .map(|r| r.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                    .unwrap_or_else(|| "none".into()),
            ));
            if let Some(rules) = v["rules"].as_object() {
                let rows: Vec<Vec<String>> = rules
                    .iter()
                    .map(|(name, r)| {
                        vec![
                            name.clone(),
                            pct(num(r, "kept_share")),
                            r["gold_share"].as_f64().map_or("-".into(), pct),
                        ]
                    })
                    .collect();
                out.push_str(&md_table(
                    &[
                        "rule",
                        "written endings breaking it",
                        "right endings breaking it",
                    ],
                    &rows,
                ));
                out.push('\n');
            }
        }
        Err(_) => {
            out.push_str("The pool's validity rates are not here (no `generate/report.json`).\n\n")
        }
    }
    Ok(out)
}

const LIMITATIONS: &str = "## Known limitations\n\n\
- The distractors are written by language models, and nobody has read them unless the dataset was annotated (`af export --annotation`, `af assemble`): some are ungrammatical, and some may be right answers too. The validity rules above catch some of both, not all.\n\
- Adversarial Filtering removes what its committee can detect. The audit's other detectors measure part of what is left; stronger models (a fine-tuned pretrained transformer) may still find the right ending far above chance, as BERT did on SWAG.\n\
- The language-model figures are from a sample of the test split (see the table's question count); their intervals say how wide.\n\
- The text carries its sources' licences and their biases. A source or licence listed as unknown must be checked before the data is shared: HellaSwag's original repository was taken down in 2026 over its WikiHow text.\n\n";

fn citation(run_name: &str, pretty_name: &str) -> String {
    format!(
        "## Citation\n\nCite the method, and the sources of the text (above) as their authors ask. This dataset:\n\n```bibtex\n@misc{{{key},\n  title = {{{pretty_name}}},\n  note = {{Made with af {version}, Adversarial Filtering after Zellers et al. (2018)}}\n}}\n```\n\nAdversarial Filtering:\n\n```bibtex\n@inproceedings{{zellers2018swag,\n  title = {{{{SWAG}}: A Large-Scale Adversarial Dataset for Grounded Commonsense Inference}},\n  author = {{Zellers, Rowan and Bisk, Yonatan and Schwartz, Roy and Choi, Yejin}},\n  booktitle = {{Proceedings of the 2018 Conference on Empirical Methods in Natural Language Processing}},\n  year = {{2018}}\n}}\n```\n",
        key = slug(run_name).replace('-', "_"),
        version = env!("CARGO_PKG_VERSION"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn licences_become_hub_identifiers_or_other_with_a_name() {
        assert_eq!(header_license(&[]), (vec!["unknown".to_string()], None));
        assert_eq!(
            header_license(&[None, Some("CC-BY-4.0")]),
            (vec!["unknown".to_string(), "cc-by-4.0".to_string()], None)
        );
        assert_eq!(
            header_license(&[Some("MIT OR Apache-2.0"), Some("mit")]),
            (vec!["mit".to_string(), "apache-2.0".to_string()], None)
        );
        let (ids, name) = header_license(&[Some("Research use only (see the authors' page)")]);
        assert_eq!(ids, ["other"]);
        assert_eq!(
            name.as_deref(),
            Some("research-use-only-see-the-authors-page")
        );
        assert_eq!(size_category(999), "n<1K");
        assert_eq!(size_category(1_000), "1K<n<10K");
        assert_eq!(size_category(24_341), "10K<n<100K");
    }

    /// The header parses as YAML and has the keys the Hub's card parser and `datasets` read; the
    /// body has every section, with what a run without its files says instead.
    #[test]
    fn a_card_has_the_hub_header_and_every_section() {
        let d = tempfile::tempdir().unwrap();
        let export = d.path().join("run/export");
        std::fs::create_dir_all(export.join("hf")).unwrap();
        std::fs::write(export.join("hf/train.jsonl"), "{}\n{}\n{}\n").unwrap();
        std::fs::write(export.join("hf/test.jsonl"), "{}\n").unwrap();
        std::fs::write(
            export.join("evaluation.json"),
            r#"{"chance": 0.25, "af": {"heldout_items": 1, "detectors": [{"name": "mlp", "accuracy": 0.3, "ci_low": 0.1, "ci_high": 0.6}], "gold_logppl": {"mean": 2.0}, "distractor_logppl": {"mean": 2.5}},
                "random": {"detectors": [{"name": "mlp", "accuracy": 0.9, "ci_low": 0.7, "ci_high": 0.99}], "distractor_logppl": {"mean": 4.0}},
                "lm_eval": {"skipped": "[export] eval = false"}}"#,
        )
        .unwrap();
        let mut config = Config::default();
        config.run.dir = d.path().join("run");
        config.filter.k = 3;
        let mut input = af_core::config::InputSpec::new(
            "/data/captions.json",
            af_core::config::InputFormat::Activitynet,
        );
        input.source = Some("ActivityNet Captions: \"train\" | dense".into());
        config.pairs.inputs.push(input);
        let text = card(&config, &export).unwrap();
        let (header, body) = text
            .strip_prefix("---\n")
            .and_then(|t| t.split_once("\n---\n"))
            .expect("YAML front matter between --- lines");
        let y: serde_yaml::Value = serde_yaml::from_str(header).unwrap();
        assert_eq!(y["license"], "unknown");
        assert_eq!(y["language"][0], "en");
        assert_eq!(y["task_categories"][0], "multiple-choice");
        assert_eq!(y["size_categories"][0], "n<1K");
        assert_eq!(
            y["pretty_name"],
            "run: 4-way multiple choice by Adversarial Filtering"
        );
        let files = y["configs"][0]["data_files"].as_sequence().unwrap();
        let pairs: Vec<(&str, &str)> = files
            .iter()
            .map(|f| (f["split"].as_str().unwrap(), f["path"].as_str().unwrap()))
            .collect();
        assert_eq!(
            pairs,
            [("train", "hf/train.jsonl"), ("test", "hf/test.jsonl")]
        );
        assert_eq!(y["configs"][0]["config_name"], "default");
        for section in [
            "## How it was made",
            "## Source data",
            "## How hard it is for a language model",
            "## Shortcuts",
            "## Fluency and validity",
            "## Known limitations",
            "## Citation",
        ] {
            assert!(body.contains(section), "{section}");
        }
        assert!(body.contains("4 English multiple-choice questions (3 train, 1 test)"));
        assert!(body.contains("Not measured: [export] eval = false."));
        assert!(body.contains("| mlp | 0.900 [0.700, 0.990] | 0.300 [0.100, 0.600] | 0.250 |"));
        assert!(
            body.contains("ActivityNet Captions: \"train\" \\| dense | unknown |"),
            "{body}"
        );
        assert!(
            body.contains("no `filter/report.json`") && body.contains("no generate/report.json")
        );
    }
}
