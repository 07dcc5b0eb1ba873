//! WinoGrande's JSONL: `qID, sentence` (one `_`), `option1, option2, answer` ("1" or "2").

use af_core::{Blank, Question};

use super::rows::{Bad, JsonRow};
use super::{Layout, Rows};
use crate::text::Step;

pub(crate) struct Winogrande;

impl Layout for Winogrande {
    fn name(&self) -> &'static str {
        "winogrande"
    }

    fn tells(&self) -> &'static [&'static str] {
        &["option1", "sentence"]
    }

    fn needs(&self) -> &'static [&'static str] {
        &["qID", "sentence", "option1", "option2", "answer"]
    }

    fn rows(&self) -> Rows {
        Rows::JsonLines(read)
    }
}

fn read(r: &JsonRow, line: usize) -> Result<Question, Bad> {
    let id = r.key("qID")?;
    let sentence = r.text("sentence")?;
    let blanks = sentence.matches('_').count();
    if blanks != 1 {
        return Err(r.bad(
            &[Step::Key("sentence")],
            format!("field `sentence` has {blanks} blanks (`_`), expected exactly 1"),
        ));
    }
    let (before, after) = sentence.split_once('_').expect("one blank");
    let options = vec![r.text("option1")?, r.text("option2")?];
    let label = r.label("answer", 2, 1)?;
    let blank = Blank {
        before: before.trim().to_string(),
        after: after.trim().to_string(),
        options,
    };
    Ok(Question {
        // Twins (`...-1`, `...-2`) share a group, so no split separates them.
        group: twin_group(&id).to_string(),
        id,
        context: blank.before.clone(),
        prefix: String::new(),
        endings: (0..2).map(|i| blank.filled_ending(i)).collect(),
        label,
        split: None,
        blank: Some(blank),
        line,
    })
}

/// WinoGrande's twin group: the qID without its final `-1` / `-2`.
pub fn twin_group(id: &str) -> &str {
    id.strip_suffix("-1")
        .or_else(|| id.strip_suffix("-2"))
        .filter(|g| !g.is_empty())
        .unwrap_or(id)
}
