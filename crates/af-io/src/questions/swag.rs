//! SWAG's regular CSV: `,video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0..3,label`.

use af_core::Question;

use super::rows::{Bad, CsvRow};
use super::{Layout, Rows};

pub(crate) struct Swag;

impl Layout for Swag {
    fn name(&self) -> &'static str {
        "swag"
    }

    fn tells(&self) -> &'static [&'static str] {
        &["ending0"]
    }

    fn needs(&self) -> &'static [&'static str] {
        &["video-id", "sent1", "sent2", "ending0", "ending1", "label"]
    }

    fn tokenized(&self) -> bool {
        true
    }

    fn rows(&self) -> Rows {
        Rows::Csv(read)
    }
}

fn read(r: &CsvRow) -> Result<Question, Bad> {
    // SWAG has ending0..ending3; af's exports of k + 1 options have as many columns.
    r.field("ending0")?;
    let endings: Vec<String> = (0..)
        .map_while(|e| r.get(&format!("ending{e}")).cloned())
        .collect();
    r.field("label").map_err(|_| "no column `label`: a file without answers (SWAG's test split) cannot be audited or re-filtered")?;
    let label = r.label("label", endings.len(), 0)?;
    let group = r.group("video-id")?;
    let id = r
        .get("")
        .filter(|s| !s.is_empty())
        .cloned()
        .unwrap_or_else(|| format!("{group}:{}", r.row.line));
    Ok(Question {
        id,
        group,
        context: r.field("sent1")?.to_string(),
        prefix: r.field("sent2")?.to_string(),
        endings,
        label,
        split: None,
        blank: None,
        line: r.row.line,
    })
}
