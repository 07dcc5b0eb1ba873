//! The layouts a finished dataset is written in, so people can use it where they already work:
//! SWAG's regular and full CSV, HellaSwag's JSONL, a flat JSONL for Hugging Face `datasets`, and
//! an lm-evaluation-harness task (YAML + JSONL).
//!
//! Every writer takes [`Question`]s with the gold ending first (`label` 0) and their `split` set;
//! the layouts that shuffle endings do it in one order per question, seeded by its id, so the same
//! question reads the same in every file.

use af_core::question::join_text;
use af_core::Question;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::json;

/// Running text with tokenizer spacing removed ("man 's" -> "man's", "ball ." -> "ball.").
pub fn tidy(text: &str) -> String {
    let tokens = af_text::tokenize(text);
    af_text::detokenize(&tokens.to_vec())
}

/// The question's endings in their published order, and the index of the right one there.
pub fn shuffled(q: &Question) -> (Vec<String>, usize) {
    let mut order: Vec<usize> = (0..q.endings.len()).collect();
    order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(
        af_core::hash::fnv1a64(q.id.as_bytes()),
    ));
    let label = order
        .iter()
        .position(|&o| o == q.label)
        .expect("the label is an option");
    (
        order.into_iter().map(|o| tidy(&q.endings[o])).collect(),
        label,
    )
}

fn split_of(q: &Question) -> &str {
    q.split.as_deref().unwrap_or("train")
}

fn csv_bytes(header: Vec<String>, rows: Vec<Vec<String>>) -> Result<Vec<u8>, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(&header)?;
    for r in rows {
        w.write_record(&r)?;
    }
    w.into_inner().map_err(|e| e.into_error().into())
}

/// SWAG's regular layout: `,video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0..,label`.
/// `fold-ind` is the question's position in the pool (its `line` - 1).
pub fn swag_regular(questions: &[Question]) -> Result<Vec<u8>, csv::Error> {
    let width = questions.iter().map(|q| q.endings.len()).max().unwrap_or(0);
    let mut header: Vec<String> = [
        "",
        "video-id",
        "fold-ind",
        "startphrase",
        "sent1",
        "sent2",
        "gold-source",
    ]
    .map(String::from)
    .to_vec();
    header.extend((0..width).map(|e| format!("ending{e}")));
    header.push("label".into());
    let rows = questions
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let (endings, label) = shuffled(q);
            let (sent1, sent2) = (tidy(&q.context), tidy(&q.prefix));
            let mut row = vec![
                i.to_string(),
                q.group.clone(),
                q.line.saturating_sub(1).to_string(),
                join_text(&sent1, &sent2),
                sent1,
                sent2,
                "gold".into(),
            ];
            row.extend(endings);
            row.resize(7 + width, String::new());
            row.push(label.to_string());
            row
        })
        .collect();
    csv_bytes(header, rows)
}

/// SWAG's full layout: `video-id,fold-ind,startphrase,gold-ending,distractor-0..,gold-source,
/// gold-type,distractor-N-type..,sent1,sent2`; types are annotation labels, `n/a` before one.
pub fn swag_full(questions: &[Question]) -> Result<Vec<u8>, csv::Error> {
    let k = questions
        .iter()
        .map(|q| q.endings.len() - 1)
        .max()
        .unwrap_or(0);
    let mut header: Vec<String> = ["video-id", "fold-ind", "startphrase", "gold-ending"]
        .map(String::from)
        .to_vec();
    header.extend((0..k).map(|d| format!("distractor-{d}")));
    header.extend(["gold-source".into(), "gold-type".into()]);
    header.extend((0..k).map(|d| format!("distractor-{d}-type")));
    header.extend(["sent1".into(), "sent2".into()]);
    let rows = questions
        .iter()
        .map(|q| {
            let (sent1, sent2) = (tidy(&q.context), tidy(&q.prefix));
            let mut row = vec![
                q.group.clone(),
                q.line.saturating_sub(1).to_string(),
                join_text(&sent1, &sent2),
                tidy(&q.endings[q.label]),
            ];
            let distractors: Vec<String> = q
                .endings
                .iter()
                .enumerate()
                .filter(|(e, _)| *e != q.label)
                .map(|(_, d)| tidy(d))
                .collect();
            let n = distractors.len();
            row.extend(distractors);
            row.extend(std::iter::repeat_n(String::new(), k - n));
            row.extend(["gold0-orig".to_string(), "n/a".into()]);
            row.extend((0..k).map(|d| if d < n { "n/a" } else { "" }.to_string()));
            row.extend([sent1, sent2]);
            row
        })
        .collect();
    csv_bytes(header, rows)
}

/// One JSON object per question and line; `line` gets the question's position, the question, and
/// its endings in the published order with the right one's index there.
fn jsonl(
    questions: &[Question],
    line: impl Fn(usize, &Question, Vec<String>, usize) -> serde_json::Value,
) -> String {
    let mut out = String::new();
    for (i, q) in questions.iter().enumerate() {
        let (endings, label) = shuffled(q);
        out.push_str(&line(i, q, endings, label).to_string());
        out.push('\n');
    }
    out
}

/// HellaSwag's JSONL: `ind, activity_label, ctx_a, ctx_b, ctx, split, split_type, label, endings,
/// source_id` (the group stands in for the activity label and the source).
pub fn hellaswag(questions: &[Question]) -> String {
    jsonl(questions, |i, q, endings, label| {
        let (a, b) = (tidy(&q.context), tidy(&q.prefix));
        json!({
            "ind": i, "activity_label": q.group, "ctx_a": a, "ctx_b": b, "ctx": join_text(&a, &b),
            "split": split_of(q), "split_type": "indomain", "label": label, "endings": endings, "source_id": q.group,
        })
    })
}

/// One flat object per line with the same keys and types on every line, so
/// `datasets.load_dataset("json", data_files=...)` loads it without options.
pub fn hf_jsonl(questions: &[Question]) -> String {
    jsonl(questions, |_, q, endings, label| {
        json!({
            "id": q.id, "group": q.group, "split": split_of(q), "context": tidy(&q.context), "prefix": tidy(&q.prefix),
            "endings": endings, "label": label,
        })
    })
}

/// The lm-eval documents: `query` (context and second-sentence start), `choices`, `label`.
pub fn lm_eval_jsonl(questions: &[Question]) -> String {
    jsonl(
        questions,
        |_, q, choices, label| json!({"id": q.id, "split": split_of(q), "query": join_text(&tidy(&q.context), &tidy(&q.prefix)), "choices": choices, "label": label}),
    )
}

/// The lm-eval task: each split's JSONL by absolute path (lm-eval resolves `data_files` from
/// its working directory, not from the YAML's), scored as multiple choice with acc and acc_norm.
/// Choices are scored as continuations of the query after lm-eval's default target delimiter
/// (one space).
pub fn lm_eval_yaml(task: &str, files: &[(&str, String)]) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    // lm-eval resolves `data_files` from its working directory, but a `!function` from the YAML's
    // own folder: the loader beside it makes the names below relative to that folder, so the task
    // works wherever the folder is copied (docs/decisions/082-the-lm-eval-task-moves-with-its.md).
    let mut y = format!("task: {task}\ndataset_path: json\ncustom_dataset: !function {}.load\ndataset_kwargs:\n  data_files:\n", lm_eval_loader_module(task));
    for (split, file) in files {
        y.push_str(&format!("    {split}: {}\n", quote(file)));
    }
    y.push_str("output_type: multiple_choice\n");
    for (split, _) in files {
        let key = match *split {
            "train" => "training_split",
            "validation" => "validation_split",
            _ => "test_split",
        };
        y.push_str(&format!("{key}: {split}\n"));
    }
    // As lm-eval's own HellaSwag task: choices by field name (a list), text and target by template.
    y.push_str(
        "doc_to_text: \"{{query}}\"\n\
         doc_to_choice: choices\n\
         doc_to_target: \"{{label}}\"\n\
         metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n  - metric: acc_norm\n    aggregation: mean\n    higher_is_better: true\n\
         metadata:\n  version: 1.0\n",
    );
    y
}

/// The Python module (file stem) of the lm-eval task's loader: `{task}_data`.
pub fn lm_eval_loader_module(task: &str) -> String {
    format!("{}_data", task.replace('-', "_"))
}

/// The lm-eval task's loader, `{task}_data.py` beside the YAML: reads the split files named in
/// `dataset_kwargs` from the folder the loader is in, with the `datasets` library lm-eval uses.
pub const LM_EVAL_LOADER: &str = r#""""Loads this lm-evaluation-harness task's data files from the folder this file is in, so the
task works wherever the folder is copied (written by af export; lm-eval calls load() through the
YAML's `custom_dataset`, with its `dataset_kwargs`)."""
import os

import datasets


def load(data_files, **_):
    here = os.path.dirname(os.path.abspath(__file__))
    return datasets.load_dataset("json", data_files={split: os.path.join(here, name) for split, name in data_files.items()})
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: &str) -> Question {
        Question {
            id: id.into(),
            group: "v1".into(),
            context: "A man stands in the kitchen .".into(),
            prefix: "The man 's wife".into(),
            endings: vec![
                "laughs , then waves .".into(),
                "sits down.".into(),
                "eats, \"quickly\".".into(),
            ],
            label: 0,
            split: Some("validation".into()),
            blank: None,
            line: 8,
        }
    }

    #[test]
    fn tidy_removes_tokenizer_spacing() {
        assert_eq!(
            tidy("The man 's wife laughs , then waves ."),
            "The man's wife laughs, then waves."
        );
        assert_eq!(tidy("He said \" hi \" ."), "He said \"hi\".");
        assert_eq!(tidy("Already tidy, isn't it?"), "Already tidy, isn't it?");
    }

    #[test]
    fn every_layout_keeps_the_gold_at_the_shuffled_label() {
        let qs: Vec<Question> = (0..20).map(|i| q(&format!("q{i}"))).collect();
        let labels: Vec<usize> = qs.iter().map(|q| shuffled(q).1).collect();
        assert!(
            labels.iter().any(|&l| l != 0),
            "the gold is not always first"
        );
        let regular = String::from_utf8(swag_regular(&qs).unwrap()).unwrap();
        let mut r = csv::Reader::from_reader(regular.as_bytes());
        assert_eq!(
            r.headers().unwrap().iter().collect::<Vec<_>>(),
            [
                "",
                "video-id",
                "fold-ind",
                "startphrase",
                "sent1",
                "sent2",
                "gold-source",
                "ending0",
                "ending1",
                "ending2",
                "label"
            ]
        );
        for (row, l) in r.records().zip(&labels) {
            let row = row.unwrap();
            let label: usize = row[10].parse().unwrap();
            assert_eq!(label, *l);
            assert_eq!(&row[7 + label], "laughs, then waves.");
            assert_eq!(&row[3], "A man stands in the kitchen. The man's wife");
            assert_eq!(&row[2], "7");
        }
        for line in hellaswag(&qs).lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(
                v["endings"][v["label"].as_u64().unwrap() as usize],
                "laughs, then waves."
            );
            assert_eq!(v["split"], "validation");
        }
        let full = String::from_utf8(swag_full(&qs).unwrap()).unwrap();
        assert!(full.lines().nth(1).unwrap().starts_with(
            "v1,7,A man stands in the kitchen. The man's wife,\"laughs, then waves.\",sits down.,"
        ));
    }

    #[test]
    fn lm_eval_yaml_names_every_split() {
        let y = lm_eval_yaml(
            "af-test",
            &[
                ("train", "af-test_train.jsonl".into()),
                ("test", "te\"st.jsonl".into()),
            ],
        );
        assert!(
            y.contains("    train: \"af-test_train.jsonl\"\n")
                && y.contains("    test: \"te\\\"st.jsonl\"\n"),
            "{y}"
        );
        assert!(
            y.contains("custom_dataset: !function af_test_data.load\n"),
            "{y}"
        );
        assert!(y.contains("training_split: train\n") && y.contains("test_split: test\n"));
    }
}
