//! HellaSwag's JSONL: `ind, ctx_a, ctx_b, endings, label, split, source_id`.

use af_core::Question;

use super::rows::{Bad, JsonRow};
use super::{Layout, Rows};

pub(crate) struct Hellaswag;

impl Layout for Hellaswag {
    fn name(&self) -> &'static str {
        "hellaswag"
    }

    fn tells(&self) -> &'static [&'static str] {
        &["ctx_a"]
    }

    fn needs(&self) -> &'static [&'static str] {
        &["ind", "ctx_a", "ctx_b", "endings", "label"]
    }

    fn rows(&self) -> Rows {
        Rows::JsonLines(read)
    }
}

fn read(r: &JsonRow, line: usize) -> Result<Question, Bad> {
    let endings = r.endings("endings")?;
    let label = r.label("label", endings.len(), 0)?;
    let id = r.key("ind")?;
    Ok(Question {
        group: r.optional_key("source_id")?.unwrap_or_else(|| id.clone()),
        id,
        context: r.text("ctx_a")?,
        prefix: r.text("ctx_b")?,
        endings,
        label,
        split: r.optional_text("split")?,
        blank: None,
        line,
    })
}
