//! A generic JSONL: `context, endings, label`; optional `id, group, prefix, split`.

use af_core::Question;

use super::rows::{Bad, JsonRow};
use super::{Layout, Rows};

pub(crate) struct Generic;

impl Layout for Generic {
    fn name(&self) -> &'static str {
        "generic"
    }

    fn tells(&self) -> &'static [&'static str] {
        &["endings"]
    }

    fn needs(&self) -> &'static [&'static str] {
        &["context", "endings", "label"]
    }

    /// `endings` alone tells it, and HellaSwag's lines have `endings` too.
    fn catch_all(&self) -> bool {
        true
    }

    fn rows(&self) -> Rows {
        Rows::JsonLines(read)
    }
}

fn read(r: &JsonRow, line: usize) -> Result<Question, Bad> {
    let endings = r.endings("endings")?;
    let label = r.label("label", endings.len(), 0)?;
    let id = r
        .optional_key("id")?
        .unwrap_or_else(|| format!("line-{line}"));
    Ok(Question {
        group: r.optional_key("group")?.unwrap_or_else(|| id.clone()),
        id,
        context: r.text("context")?,
        prefix: r.optional_text("prefix")?.unwrap_or_default(),
        endings,
        label,
        split: r.optional_text("split")?,
        blank: None,
        line,
    })
}
