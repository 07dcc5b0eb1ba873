//! The rows of a multiple-choice file and what is wrong with one: a CSV record placed by its
//! columns, a JSONL line placed by its fields, and the label rules every layout shares.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use crate::text::{
    column_of, expect_key, expect_text, kind_and_value, shown_cell, unique_columns, Step,
};
use crate::ReadError;

/// What is wrong with a row: the message, and where in the file when not at the row's start.
#[derive(Debug)]
pub(crate) struct Bad {
    pub(crate) line: Option<usize>,
    pub(crate) column: Option<usize>,
    pub(crate) message: String,
}

impl From<String> for Bad {
    fn from(message: String) -> Self {
        Bad {
            line: None,
            column: None,
            message,
        }
    }
}

impl From<&str> for Bad {
    fn from(message: &str) -> Self {
        Bad::from(message.to_string())
    }
}

impl Bad {
    pub(crate) fn at(column: Option<usize>, message: impl Into<String>) -> Self {
        Bad {
            line: None,
            column,
            message: message.into(),
        }
    }
}

/// A CSV file's rows, with what places a field: the text and each column's index.
pub(crate) struct CsvFile<'a> {
    text: &'a str,
    index: HashMap<String, usize>,
    pub(crate) rows: Vec<CsvRecord>,
}

pub(crate) struct CsvRecord {
    pub(crate) line: usize,
    /// The byte where the record starts.
    start: usize,
    fields: HashMap<String, String>,
    /// "row has N fields, the header has M", when it has.
    problem: Option<String>,
}

pub(crate) fn csv_rows<'a>(path: &Path, text: &'a str) -> Result<CsvFile<'a>, ReadError> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(text.as_bytes());
    let header = reader.headers().map_err(|e| ReadError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    unique_columns(
        path,
        header.position().map_or(1, |p| p.line() as usize),
        header.iter(),
    )?;
    let header: Vec<String> = header.iter().map(str::to_string).collect();
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            ReadError::record(
                path,
                e.position().map_or(0, |p| p.line() as usize),
                None,
                e.to_string(),
            )
        })?;
        let (line, start) = record
            .position()
            .map_or((0, 0), |p| (p.line() as usize, p.byte() as usize));
        let fields = header
            .iter()
            .cloned()
            .zip(record.iter().map(str::to_string))
            .collect();
        let problem = (record.len() != header.len()).then(|| {
            format!(
                "row has {} fields, the header has {}",
                record.len(),
                header.len()
            )
        });
        rows.push(CsvRecord {
            line,
            start,
            fields,
            problem,
        });
    }
    Ok(CsvFile {
        text,
        index: header
            .iter()
            .enumerate()
            .map(|(i, h)| (h.clone(), i))
            .collect(),
        rows,
    })
}

pub(crate) struct CsvRow<'a> {
    pub(crate) file: &'a CsvFile<'a>,
    pub(crate) row: &'a CsvRecord,
}

impl CsvRow<'_> {
    pub(crate) fn field(&self, name: &str) -> Result<&str, Bad> {
        if let Some(problem) = &self.row.problem {
            return Err(problem.as_str().into());
        }
        self.row
            .fields
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| format!("no column `{name}`").into())
    }

    pub(crate) fn get(&self, name: &str) -> Option<&String> {
        self.row.fields.get(name)
    }

    /// An error about field `name`, placed where its cell starts.
    pub(crate) fn bad(&self, name: &str, message: impl Into<String>) -> Bad {
        let place = self.file.index.get(name).and_then(|&i| {
            crate::text::csv_field_place(self.file.text, self.row.start, self.row.line, b',', i)
        });
        Bad {
            line: place.map(|p| p.0),
            column: place.map(|p| p.1),
            message: message.into(),
        }
    }

    /// A group id: not empty (an empty cell would make every such row one group).
    pub(crate) fn group(&self, name: &str) -> Result<String, Bad> {
        let g = self.field(name)?;
        if g.trim().is_empty() {
            return Err(self.bad(name, format!("field `{name}` is empty")));
        }
        Ok(g.to_string())
    }

    pub(crate) fn label(&self, name: &str, options: usize, base: usize) -> Result<usize, Bad> {
        let cell = self.field(name)?;
        parse_label(cell, &shown_cell(cell), name, options, base).map_err(|m| self.bad(name, m))
    }
}

/// One JSONL line: its value, and its text to place errors in.
pub(crate) struct JsonRow<'a> {
    pub(crate) v: &'a Value,
    pub(crate) line: &'a str,
}

impl JsonRow<'_> {
    pub(crate) fn get(&self, steps: &[Step]) -> Option<&Value> {
        let mut v = self.v;
        for step in steps {
            v = match step {
                Step::Key(k) => v.get(k)?,
                Step::Index(i) => v.get(i)?,
            };
        }
        Some(v).filter(|v| !v.is_null())
    }

    pub(crate) fn bad(&self, steps: &[Step], message: impl Into<String>) -> Bad {
        Bad::at(column_of(self.line, steps), message)
    }

    /// `name`: how the field is named in messages (`gold.ending`).
    pub(crate) fn text_at(&self, steps: &[Step], name: &str) -> Result<String, Bad> {
        let v = self
            .get(steps)
            .ok_or_else(|| Bad::from(format!("no field `{name}`")))?;
        expect_text(self.line, steps, v, name)
            .map(str::to_string)
            .map_err(|m| self.bad(steps, m))
    }

    pub(crate) fn text(&self, key: &str) -> Result<String, Bad> {
        self.text_at(&[Step::Key(key)], key)
    }

    pub(crate) fn optional_text(&self, key: &str) -> Result<Option<String>, Bad> {
        match self.get(&[Step::Key(key)]) {
            None => Ok(None),
            Some(_) => self.text(key).map(Some),
        }
    }

    /// An id or a group: text or an integer, not empty.
    pub(crate) fn key(&self, key: &str) -> Result<String, Bad> {
        let steps = [Step::Key(key)];
        let v = self
            .get(&steps)
            .ok_or_else(|| Bad::from(format!("no field `{key}`")))?;
        expect_key(self.line, &steps, v, key).map_err(|m| self.bad(&steps, m))
    }

    pub(crate) fn optional_key(&self, key: &str) -> Result<Option<String>, Bad> {
        match self.get(&[Step::Key(key)]) {
            None => Ok(None),
            Some(_) => self.key(key).map(Some),
        }
    }

    pub(crate) fn endings(&self, key: &str) -> Result<Vec<String>, Bad> {
        let steps = [Step::Key(key)];
        let Some(list) = self.get(&steps) else {
            return Err(format!("no field `{key}`").into());
        };
        let Value::Array(list) = list else {
            return Err(self.bad(
                &steps,
                format!(
                    "field `{key}` is {}, expected a list of text",
                    kind_and_value(self.line, &steps, list)
                ),
            ));
        };
        let endings: Vec<String> = (0..list.len())
            .map(|i| self.text_at(&[Step::Key(key), Step::Index(i)], &format!("{key}[{i}]")))
            .collect::<Result<_, _>>()?;
        if endings.len() < 2 {
            return Err(self.bad(
                &steps,
                format!(
                    "field `{key}` has {} entries, a question needs at least 2",
                    endings.len()
                ),
            ));
        }
        Ok(endings)
    }

    /// A label as a number or numeric text, `base` for 0- or 1-based layouts.
    pub(crate) fn label(&self, key: &str, options: usize, base: usize) -> Result<usize, Bad> {
        let steps = [Step::Key(key)];
        let shown = |v: &Value| crate::text::shown(self.line, &steps, v);
        match self.get(&steps) {
            None => Err(format!(
                "no field `{key}`: a file without answers cannot be audited or re-filtered"
            )),
            Some(v @ Value::Number(n)) => {
                parse_label(&n.to_string(), &shown(v), key, options, base)
            }
            Some(v @ Value::String(s)) => parse_label(s, &shown(v), key, options, base),
            Some(other) => Err(format!(
                "field `{key}` is {}, expected a number",
                kind_and_value(self.line, &steps, other)
            )),
        }
        .map_err(|m| match m {
            m if m.starts_with("no field") => Bad::from(m),
            m => self.bad(&steps, m),
        })
    }
}

/// `shown`: the label as the file wrote it (a number bare, text quoted).
fn parse_label(
    s: &str,
    shown: &str,
    key: &str,
    options: usize,
    base: usize,
) -> Result<usize, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(format!(
            "field `{key}` is empty: a file without answers cannot be audited or re-filtered"
        ));
    }
    match s.parse::<usize>() {
        Ok(n) if n >= base && n - base < options => Ok(n - base),
        _ => Err(format!(
            "field `{key}` is {shown}, expected {base}..={}",
            options - 1 + base
        )),
    }
}
