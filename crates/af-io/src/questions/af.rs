//! af's own `dataset.jsonl` / `random.jsonl`: the gold, then the distractors.

use af_core::Question;
use serde_json::Value;

use super::rows::{Bad, JsonRow};
use super::{Layout, Rows};
use crate::text::Step;

pub(crate) struct Af;

impl Layout for Af {
    fn name(&self) -> &'static str {
        "af"
    }

    fn tells(&self) -> &'static [&'static str] {
        &["noun_phrase", "gold"]
    }

    fn needs(&self) -> &'static [&'static str] {
        &[
            "id",
            "group",
            "context",
            "noun_phrase",
            "gold",
            "distractors",
        ]
    }

    fn tokenized(&self) -> bool {
        true
    }

    fn rows(&self) -> Rows {
        Rows::JsonLines(read)
    }
}

fn read(r: &JsonRow, line: usize) -> Result<Question, Bad> {
    if r.get(&[Step::Key("gold")]).is_none() {
        return Err("no field `gold`".into());
    }
    let mut endings = vec![r.text_at(&[Step::Key("gold"), Step::Key("ending")], "gold.ending")?];
    let Some(Value::Array(distractors)) = r.get(&[Step::Key("distractors")]) else {
        return Err("no list `distractors`".into());
    };
    for i in 0..distractors.len() {
        endings.push(r.text_at(
            &[
                Step::Key("distractors"),
                Step::Index(i),
                Step::Key("ending"),
            ],
            &format!("distractors[{i}].ending"),
        )?);
    }
    if endings.len() < 2 {
        return Err(r.bad(&[Step::Key("distractors")], "`distractors` is empty"));
    }
    Ok(Question {
        id: r.key("id")?,
        group: r.key("group")?,
        context: r.text("context")?,
        prefix: r.text("noun_phrase")?,
        endings,
        label: 0,
        split: r.optional_text("split")?,
        blank: None,
        line,
    })
}
