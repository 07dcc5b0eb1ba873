//! SWAG's full CSV: `video-id,fold-ind,startphrase,gold-ending,distractor-0..,...,sent1,sent2`, the gold first.

use af_core::Question;

use super::rows::{Bad, CsvRow};
use super::{Layout, Rows};

pub(crate) struct SwagFull;

impl Layout for SwagFull {
    fn name(&self) -> &'static str {
        "swag-full"
    }

    fn tells(&self) -> &'static [&'static str] {
        &["gold-ending"]
    }

    fn needs(&self) -> &'static [&'static str] {
        &[
            "video-id",
            "fold-ind",
            "gold-ending",
            "distractor-0",
            "sent1",
            "sent2",
        ]
    }

    fn tokenized(&self) -> bool {
        true
    }

    fn rows(&self) -> Rows {
        Rows::Csv(read)
    }
}

fn read(r: &CsvRow) -> Result<Question, Bad> {
    let mut endings = vec![r.field("gold-ending")?.to_string()];
    // As many distractor columns as the header has; SWAG leaves some of them empty.
    for d in 0.. {
        match r.get(&format!("distractor-{d}")) {
            Some(e) if !e.trim().is_empty() => endings.push(e.clone()),
            Some(_) => {}
            None => break,
        }
    }
    if endings.len() < 2 {
        return Err("no distractors (every `distractor-N` column is empty)".into());
    }
    let group = r.group("video-id")?;
    Ok(Question {
        id: format!("{group}:{}:{}", r.field("fold-ind")?, r.row.line),
        group,
        context: r.field("sent1")?.to_string(),
        prefix: r.field("sent2")?.to_string(),
        endings,
        label: 0,
        split: None,
        blank: None,
        line: r.row.line,
    })
}
