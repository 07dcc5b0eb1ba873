//! Multiple-choice datasets for the audit: SWAG's regular and full CSV, HellaSwag JSONL,
//! WinoGrande JSONL, a generic JSONL (`context`, `endings`, `label`) and af's own
//! `dataset.jsonl`, all read into [`af_core::Question`]s.
//!
//! A bad row is an error naming file, line and field; with `skip_bad` it is skipped and listed
//! instead, so the caller can count it in its report.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use af_core::{Blank, Question};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::text::{
    column_of, expect_key, expect_text, json_message, kind_and_value, shown_cell, strip_bom,
    unique_columns, unique_keys, Step, UniqueIds,
};
use crate::{read_utf8, ReadError};

/// The layouts [`read_questions`] understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QuestionFormat {
    /// `,video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0..3,label`
    Swag,
    /// `video-id,fold-ind,startphrase,gold-ending,distractor-0..,...,sent1,sent2` (gold first)
    SwagFull,
    /// `ind, ctx_a, ctx_b, endings, label, split, source_id`
    Hellaswag,
    /// `qID, sentence` (one `_`), `option1, option2, answer` ("1" or "2")
    Winogrande,
    /// `context, endings, label`; optional `id, group, prefix, split`
    Generic,
    /// af's `dataset.jsonl` / `random.jsonl` (gold, then distractors)
    Af,
}

impl QuestionFormat {
    pub const NAMES: &'static str = "swag, swag-full, hellaswag, winogrande, generic, af";

    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "swag" => Self::Swag,
            "swag-full" => Self::SwagFull,
            "hellaswag" => Self::Hellaswag,
            "winogrande" => Self::Winogrande,
            "generic" => Self::Generic,
            "af" => Self::Af,
            _ => return None,
        })
    }
}

/// A row left out under `skip_bad`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SkippedRow {
    pub line: usize,
    /// Where in the line the problem starts, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    pub reason: String,
}

impl SkippedRow {
    /// `file:line[:column]: reason`, as the error would have said it.
    pub fn describe(&self, path: &Path) -> String {
        format!(
            "{}: {}",
            crate::error::place(path, self.line, self.column),
            self.reason
        )
    }
}

#[derive(Debug)]
pub struct QuestionFile {
    pub path: PathBuf,
    pub format: QuestionFormat,
    pub questions: Vec<Question>,
    pub skipped: Vec<SkippedRow>,
}

/// Reads a `questions` input of a run (`[[pairs.inputs]]` with `format = "questions"`): its
/// `layout` names the layout, or the first line tells it.
pub fn read_question_input(spec: &af_core::config::InputSpec) -> Result<QuestionFile, ReadError> {
    let format = match spec.layout.as_deref() {
        None => None,
        Some(name) => Some(
            QuestionFormat::parse(name).ok_or_else(|| ReadError::Invalid {
                path: spec.path.clone(),
                message: format!(
                    "layout `{name}` is not one af reads; the layouts are {}",
                    QuestionFormat::NAMES
                ),
            })?,
        ),
    };
    read_questions(&spec.path, format, spec.skip_bad)
}

/// What is wrong with a row: the message, and where in the file when not at the row's start.
#[derive(Debug)]
struct Bad {
    line: Option<usize>,
    column: Option<usize>,
    message: String,
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
    fn at(column: Option<usize>, message: impl Into<String>) -> Self {
        Bad {
            line: None,
            column,
            message: message.into(),
        }
    }
}

/// Reads a dataset, detecting its layout from the header (CSV) or the first line's keys (JSONL)
/// unless `format` names it.
pub fn read_questions(
    path: &Path,
    format: Option<QuestionFormat>,
    skip_bad: bool,
) -> Result<QuestionFile, ReadError> {
    let text = read_utf8(path)?;
    let text = strip_bom(&text);
    let invalid = |message: String| ReadError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let format = match format {
        Some(f) => f,
        None => detect(text).map_err(|(line, column, why)| {
            ReadError::record(
                path,
                line,
                column,
                format!(
                    "cannot tell the layout from line {line}: {why}; name it with --format ({})",
                    QuestionFormat::NAMES
                ),
            )
        })?,
    };
    let rows: Vec<(usize, Result<Question, Bad>)> = match format {
        QuestionFormat::Swag | QuestionFormat::SwagFull => {
            let file = csv_rows(path, text)?;
            file.rows
                .iter()
                .map(|row| {
                    let r = CsvRow { file: &file, row };
                    (
                        row.line,
                        if format == QuestionFormat::Swag {
                            swag(&r)
                        } else {
                            swag_full(&r)
                        },
                    )
                })
                .collect()
        }
        _ => {
            let mut rows = Vec::new();
            for (i, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                let value = match unique_keys(line, "key")
                    .and_then(|()| serde_json::from_str::<Value>(line))
                {
                    Ok(v) => v,
                    Err(e) if e.is_data() => {
                        rows.push((i + 1, Err(Bad::at(Some(e.column()), json_message(&e)))));
                        continue;
                    }
                    Err(e) => {
                        rows.push((
                            i + 1,
                            Err(Bad::at(
                                Some(e.column()),
                                format!("malformed JSON: {}", json_message(&e)),
                            )),
                        ));
                        continue;
                    }
                };
                let row = JsonRow { v: &value, line };
                let q = match format {
                    QuestionFormat::Hellaswag => hellaswag(&row, i + 1),
                    QuestionFormat::Winogrande => winogrande(&row, i + 1),
                    QuestionFormat::Generic => generic(&row, i + 1),
                    _ => af(&row, i + 1),
                };
                rows.push((i + 1, q));
            }
            rows
        }
    };
    let (mut questions, mut skipped) = (Vec::new(), Vec::new());
    // Every layout's ids are unique (WinoGrande's twins are `X-1` and `X-2`; SWAG's are the index
    // column or video and line), so a repeated one is a second copy or a mistake.
    let mut ids = UniqueIds::default();
    for (line, row) in rows {
        let row = row.and_then(|q| ids.check(&q.id, line).map(|()| q).map_err(Bad::from));
        match row {
            Ok(q) => questions.push(q),
            Err(bad) if skip_bad => skipped.push(SkippedRow {
                line: bad.line.unwrap_or(line),
                column: bad.column,
                reason: bad.message,
            }),
            Err(bad) => {
                return Err(ReadError::record(
                    path,
                    bad.line.unwrap_or(line),
                    bad.column,
                    bad.message,
                ))
            }
        }
    }
    if questions.is_empty() {
        return Err(invalid(format!(
            "no questions ({} rows skipped)",
            skipped.len()
        )));
    }
    Ok(QuestionFile {
        path: path.to_path_buf(),
        format,
        questions,
        skipped,
    })
}

/// Each JSON layout: its name, the fields its first line is told by, and the fields it needs.
const JSON_LAYOUTS: &[(QuestionFormat, &str, &[&str], &[&str])] = &[
    (
        QuestionFormat::Hellaswag,
        "hellaswag",
        &["ctx_a"],
        &["ind", "ctx_a", "ctx_b", "endings", "label"],
    ),
    (
        QuestionFormat::Winogrande,
        "winogrande",
        &["option1", "sentence"],
        &["qID", "sentence", "option1", "option2", "answer"],
    ),
    (
        QuestionFormat::Af,
        "af",
        &["noun_phrase", "gold"],
        &[
            "id",
            "group",
            "context",
            "noun_phrase",
            "gold",
            "distractors",
        ],
    ),
    (
        QuestionFormat::Generic,
        "generic",
        &["endings"],
        &["context", "endings", "label"],
    ),
];

/// The CSV layouts: name, the column that tells it, the columns it needs.
const CSV_LAYOUTS: &[(QuestionFormat, &str, &str, &[&str])] = &[
    (
        QuestionFormat::SwagFull,
        "swag-full",
        "gold-ending",
        &[
            "video-id",
            "fold-ind",
            "gold-ending",
            "distractor-0",
            "sent1",
            "sent2",
        ],
    ),
    (
        QuestionFormat::Swag,
        "swag",
        "ending0",
        &["video-id", "sent1", "sent2", "ending0", "ending1", "label"],
    ),
];

/// The layout the first non-empty line tells, or that line's number, a column where one is
/// known, and, for each layout it could have been, what it lacks.
fn detect(text: &str) -> Result<QuestionFormat, (usize, Option<usize>, String)> {
    let Some((i, first)) = text.lines().enumerate().find(|(_, l)| !l.trim().is_empty()) else {
        return Err((1, None, "the file is empty".into()));
    };
    let line = i + 1;
    let lacks = |missing: Vec<&str>| {
        missing
            .iter()
            .map(|m| format!("`{m}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let column = first.len() - first.trim_start().len() + 1;
    if first.trim_start().starts_with(['{', '[']) {
        let v: Value = serde_json::from_str(first).map_err(|e| {
            (
                line,
                Some(e.column()),
                format!("malformed JSON: {}", json_message(&e)),
            )
        })?;
        if !v.is_object() {
            return Err((
                line,
                Some(column),
                "it is a JSON list, where every JSON layout has one object per line".into(),
            ));
        }
        let has = |k: &str| v.get(k).is_some();
        if let Some((format, ..)) = JSON_LAYOUTS
            .iter()
            .find(|(_, _, tells, _)| tells.iter().all(|k| has(k)))
        {
            return Ok(*format);
        }
        let why: Vec<String> = JSON_LAYOUTS
            .iter()
            .map(|(_, name, _, needs)| {
                let missing: Vec<&str> = needs.iter().copied().filter(|k| !has(k)).collect();
                format!("as {name} it lacks {}", lacks(missing))
            })
            .collect();
        return Err((line, Some(column), why.join("; ")));
    }
    let header: Vec<&str> = first.split(',').map(str::trim).collect();
    if let Some((format, ..)) = CSV_LAYOUTS
        .iter()
        .find(|(_, _, tells, _)| header.contains(tells))
    {
        return Ok(*format);
    }
    let mut why: Vec<String> = CSV_LAYOUTS
        .iter()
        .map(|(_, name, _, needs)| {
            let missing: Vec<&str> = needs
                .iter()
                .copied()
                .filter(|k| !header.contains(k))
                .collect();
            format!("as {name} it lacks column {}", lacks(missing))
        })
        .collect();
    why.push("as a JSON layout it is not a JSON object".into());
    Err((line, Some(1), why.join("; ")))
}

/// A CSV file's rows, with what places a field: the text and each column's index.
struct CsvFile<'a> {
    text: &'a str,
    index: HashMap<String, usize>,
    rows: Vec<CsvRecord>,
}

struct CsvRecord {
    line: usize,
    /// The byte where the record starts.
    start: usize,
    fields: HashMap<String, String>,
    /// "row has N fields, the header has M", when it has.
    problem: Option<String>,
}

fn csv_rows<'a>(path: &Path, text: &'a str) -> Result<CsvFile<'a>, ReadError> {
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

struct CsvRow<'a> {
    file: &'a CsvFile<'a>,
    row: &'a CsvRecord,
}

impl CsvRow<'_> {
    fn field(&self, name: &str) -> Result<&str, Bad> {
        if let Some(problem) = &self.row.problem {
            return Err(problem.as_str().into());
        }
        self.row
            .fields
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| format!("no column `{name}`").into())
    }

    fn get(&self, name: &str) -> Option<&String> {
        self.row.fields.get(name)
    }

    /// An error about field `name`, placed where its cell starts.
    fn bad(&self, name: &str, message: impl Into<String>) -> Bad {
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
    fn group(&self, name: &str) -> Result<String, Bad> {
        let g = self.field(name)?;
        if g.trim().is_empty() {
            return Err(self.bad(name, format!("field `{name}` is empty")));
        }
        Ok(g.to_string())
    }

    fn label(&self, name: &str, options: usize, base: usize) -> Result<usize, Bad> {
        let cell = self.field(name)?;
        parse_label(cell, &shown_cell(cell), name, options, base).map_err(|m| self.bad(name, m))
    }
}

fn swag(r: &CsvRow) -> Result<Question, Bad> {
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

fn swag_full(r: &CsvRow) -> Result<Question, Bad> {
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

/// One JSONL line: its value, and its text to place errors in.
struct JsonRow<'a> {
    v: &'a Value,
    line: &'a str,
}

impl JsonRow<'_> {
    fn get(&self, steps: &[Step]) -> Option<&Value> {
        let mut v = self.v;
        for step in steps {
            v = match step {
                Step::Key(k) => v.get(k)?,
                Step::Index(i) => v.get(i)?,
            };
        }
        Some(v).filter(|v| !v.is_null())
    }

    fn bad(&self, steps: &[Step], message: impl Into<String>) -> Bad {
        Bad::at(column_of(self.line, steps), message)
    }

    /// `name`: how the field is named in messages (`gold.ending`).
    fn text_at(&self, steps: &[Step], name: &str) -> Result<String, Bad> {
        let v = self
            .get(steps)
            .ok_or_else(|| Bad::from(format!("no field `{name}`")))?;
        expect_text(self.line, steps, v, name)
            .map(str::to_string)
            .map_err(|m| self.bad(steps, m))
    }

    fn text(&self, key: &str) -> Result<String, Bad> {
        self.text_at(&[Step::Key(key)], key)
    }

    fn optional_text(&self, key: &str) -> Result<Option<String>, Bad> {
        match self.get(&[Step::Key(key)]) {
            None => Ok(None),
            Some(_) => self.text(key).map(Some),
        }
    }

    /// An id or a group: text or an integer, not empty.
    fn key(&self, key: &str) -> Result<String, Bad> {
        let steps = [Step::Key(key)];
        let v = self
            .get(&steps)
            .ok_or_else(|| Bad::from(format!("no field `{key}`")))?;
        expect_key(self.line, &steps, v, key).map_err(|m| self.bad(&steps, m))
    }

    fn optional_key(&self, key: &str) -> Result<Option<String>, Bad> {
        match self.get(&[Step::Key(key)]) {
            None => Ok(None),
            Some(_) => self.key(key).map(Some),
        }
    }

    fn endings(&self, key: &str) -> Result<Vec<String>, Bad> {
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
    fn label(&self, key: &str, options: usize, base: usize) -> Result<usize, Bad> {
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

fn hellaswag(r: &JsonRow, line: usize) -> Result<Question, Bad> {
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

fn winogrande(r: &JsonRow, line: usize) -> Result<Question, Bad> {
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

fn generic(r: &JsonRow, line: usize) -> Result<Question, Bad> {
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

fn af(r: &JsonRow, line: usize) -> Result<Question, Bad> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn reads_every_layout_into_the_same_question() {
        let d = tempfile::tempdir().unwrap();
        let swag = write(
            d.path(),
            "s.csv",
            ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n\
             0,v1,7,\"A man sits. He\",A man sits.,He,gold,\"stands, then.\",b,c,d,0\n",
        );
        let f = read_questions(&swag, None, false).unwrap();
        assert_eq!(f.format, QuestionFormat::Swag);
        let q = &f.questions[0];
        assert_eq!(
            (
                q.id.as_str(),
                q.group.as_str(),
                q.context.as_str(),
                q.prefix.as_str(),
                q.label
            ),
            ("0", "v1", "A man sits.", "He", 0)
        );
        assert_eq!(q.endings, ["stands, then.", "b", "c", "d"]);

        let full = write(
            d.path(),
            "f.csv",
            "video-id,fold-ind,startphrase,gold-ending,distractor-0,distractor-1,distractor-2,distractor-3,gold-source,gold-type,distractor-0-type,distractor-1-type,distractor-2-type,distractor-3-type,sent1,sent2\n\
             v1,7,A man sits. He,stands.,x,y,z,,gold0-orig,pos,unl,unl,unl,n/a,A man sits.,He\n",
        );
        let f = read_questions(&full, None, false).unwrap();
        assert_eq!(f.format, QuestionFormat::SwagFull);
        assert_eq!(
            f.questions[0].endings,
            ["stands.", "x", "y", "z"],
            "the empty distractor is dropped"
        );

        let hs = write(
            d.path(),
            "h.jsonl",
            r#"{"ind": 4, "ctx_a": "A man sits.", "ctx_b": "he", "split": "train", "label": 1, "endings": ["a", "b", "c", "d"], "source_id": "v~1"}"#,
        );
        let q = &read_questions(&hs, None, false).unwrap().questions[0];
        assert_eq!(
            (q.id.as_str(), q.group.as_str(), q.label, q.split.as_deref()),
            ("4", "v~1", 1, Some("train"))
        );

        let wg = write(
            d.path(),
            "w.jsonl",
            r#"{"qID": "ABC-2", "sentence": "Ian ate Dennis's menudo because _ liked it.", "option1": "Ian", "option2": "Dennis", "answer": "2"}"#,
        );
        let q = &read_questions(&wg, None, false).unwrap().questions[0];
        assert_eq!(
            (q.group.as_str(), q.label, q.context.as_str()),
            ("ABC", 1, "Ian ate Dennis's menudo because")
        );
        assert_eq!(q.endings, ["Ian liked it.", "Dennis liked it."]);

        let generic = write(
            d.path(),
            "g.jsonl",
            r#"{"context": "c", "endings": ["a", "b", "c"], "label": 2}"#,
        );
        let q = &read_questions(&generic, None, false).unwrap().questions[0];
        assert_eq!((q.id.as_str(), q.label, q.endings.len()), ("line-1", 2, 3));

        let afd = write(
            d.path(),
            "a.jsonl",
            r#"{"id": "v-0", "group": "v", "fold": 0, "context": "c.", "noun_phrase": "He", "gold": {"ending": "g"}, "distractors": [{"ending": "x"}, {"ending": "y"}]}"#,
        );
        let q = &read_questions(&afd, None, false).unwrap().questions[0];
        assert_eq!((q.prefix.as_str(), q.label), ("He", 0));
        assert_eq!(q.endings, ["g", "x", "y"]);
    }

    #[test]
    fn a_bad_row_names_its_line_and_field_or_is_skipped_and_listed() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "w.jsonl",
            "{\"qID\": \"A-1\", \"sentence\": \"x _ y\", \"option1\": \"a\", \"option2\": \"b\", \"answer\": \"1\"}\n\
             {\"qID\": \"A-2\", \"sentence\": \"x y\", \"option1\": \"a\", \"option2\": \"b\", \"answer\": \"1\"}\n\
             {\"qID\": \"B-1\", \"sentence\": \"x _ y\", \"option1\": \"a\", \"option2\": \"b\", \"answer\": \"3\"}\n\
             not json\n",
        );
        let e = read_questions(&p, None, false).unwrap_err().to_string();
        assert!(
            e.ends_with("w.jsonl:2:28: field `sentence` has 0 blanks (`_`), expected exactly 1"),
            "{e}"
        );
        let f = read_questions(&p, None, true).unwrap();
        assert_eq!(f.questions.len(), 1);
        let lines: Vec<usize> = f.skipped.iter().map(|s| s.line).collect();
        assert_eq!(lines, [2, 3, 4]);
        assert!(
            f.skipped[1]
                .reason
                .contains("`answer` is \"3\", expected 1..=2"),
            "{:?}",
            f.skipped[1]
        );
        assert!(
            f.skipped[2].reason.starts_with("malformed JSON: ") && f.skipped[2].column == Some(2),
            "{:?}",
            f.skipped[2]
        );

        let test_split = write(d.path(), "t.csv", ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3\n0,v,1,s,a,b,gold,e,f,g,h\n");
        let e = read_questions(&test_split, None, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.csv:2: no column `label`"), "{e}");
        let unknown = write(d.path(), "u.jsonl", "{\"a\": 1}\n");
        assert!(read_questions(&unknown, None, false)
            .unwrap_err()
            .to_string()
            .contains("--format"));
    }
}
