//! Multiple-choice datasets for the audit: SWAG's regular and full CSV, HellaSwag JSONL,
//! WinoGrande JSONL, a generic JSONL (`context`, `endings`, `label`) and af's own
//! `dataset.jsonl`, all read into [`af_core::Question`]s.
//!
//! A bad row is an error naming file, line and field; with `skip_bad` it is skipped and listed
//! instead, so the caller can count it in its report.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use af_core::{Blank, Question};
use serde::Serialize;
use serde_json::Value;

use crate::text::{json_message, strip_bom, unique_columns, unique_keys};
use crate::{read_utf8, ReadError};

/// The layouts [`read_questions`] understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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
    pub reason: String,
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
        None => detect(text).ok_or_else(|| {
            invalid(format!(
                "cannot tell the layout from the first line; name it with --format ({})",
                QuestionFormat::NAMES
            ))
        })?,
    };
    let rows: Vec<(usize, Result<Question, String>)> = match format {
        QuestionFormat::Swag | QuestionFormat::SwagFull => csv_rows(path, text)?
            .into_iter()
            .map(|(line, row)| {
                (
                    line,
                    if format == QuestionFormat::Swag {
                        swag(&row, line)
                    } else {
                        swag_full(&row, line)
                    },
                )
            })
            .collect(),
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
                        rows.push((i + 1, Err(json_message(&e))));
                        continue;
                    }
                    Err(e) => {
                        rows.push((
                            i + 1,
                            Err(format!(
                                "malformed JSON at column {}: {}",
                                e.column(),
                                json_message(&e)
                            )),
                        ));
                        continue;
                    }
                };
                let q = match format {
                    QuestionFormat::Hellaswag => hellaswag(&value, i + 1),
                    QuestionFormat::Winogrande => winogrande(&value, i + 1),
                    QuestionFormat::Generic => generic(&value, i + 1),
                    _ => af(&value, i + 1),
                };
                rows.push((i + 1, q));
            }
            rows
        }
    };
    let (mut questions, mut skipped) = (Vec::new(), Vec::new());
    // Every layout's ids are unique (WinoGrande's twins are `X-1` and `X-2`; SWAG's are the index
    // column or video and line), so a repeated one is a second copy or a mistake.
    let mut first_line: HashMap<String, usize> = HashMap::new();
    for (line, row) in rows {
        let row = row.and_then(|q| match first_line.get(&q.id) {
            Some(first) => Err(format!("duplicate id `{}` (first on line {first})", q.id)),
            None => {
                first_line.insert(q.id.clone(), line);
                Ok(q)
            }
        });
        match row {
            Ok(q) => questions.push(q),
            Err(reason) if skip_bad => skipped.push(SkippedRow { line, reason }),
            Err(message) => {
                return Err(ReadError::Record {
                    path: path.to_path_buf(),
                    line,
                    message,
                })
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

fn detect(text: &str) -> Option<QuestionFormat> {
    let first = text.lines().find(|l| !l.trim().is_empty())?;
    if first.trim_start().starts_with('{') {
        let v: Value = serde_json::from_str(first).ok()?;
        let has = |k: &str| v.get(k).is_some();
        return Some(if has("ctx_a") {
            QuestionFormat::Hellaswag
        } else if has("option1") && has("sentence") {
            QuestionFormat::Winogrande
        } else if has("noun_phrase") && has("gold") {
            QuestionFormat::Af
        } else if has("endings") {
            QuestionFormat::Generic
        } else {
            return None;
        });
    }
    let header: Vec<&str> = first.split(',').map(str::trim).collect();
    if header.contains(&"gold-ending") {
        Some(QuestionFormat::SwagFull)
    } else if header.contains(&"ending0") {
        Some(QuestionFormat::Swag)
    } else {
        None
    }
}

type Row = HashMap<String, String>;

fn csv_rows(path: &Path, text: &str) -> Result<Vec<(usize, Row)>, ReadError> {
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
        let record = record.map_err(|e| ReadError::Record {
            path: path.to_path_buf(),
            line: e.position().map_or(0, |p| p.line() as usize),
            message: e.to_string(),
        })?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        let mut row: Row = header
            .iter()
            .cloned()
            .zip(record.iter().map(str::to_string))
            .collect();
        if record.len() != header.len() {
            row.insert(
                "\u{0}fields".into(),
                format!(
                    "row has {} fields, the header has {}",
                    record.len(),
                    header.len()
                ),
            );
        }
        rows.push((line, row));
    }
    Ok(rows)
}

fn field<'a>(row: &'a Row, name: &str) -> Result<&'a str, String> {
    if let Some(problem) = row.get("\u{0}fields") {
        return Err(problem.clone());
    }
    row.get(name)
        .map(String::as_str)
        .ok_or_else(|| format!("no column `{name}`"))
}

fn swag(row: &Row, line: usize) -> Result<Question, String> {
    // SWAG has ending0..ending3; af's exports of k + 1 options have as many columns.
    field(row, "ending0")?;
    let endings: Vec<String> = (0..)
        .map_while(|e| row.get(&format!("ending{e}")).cloned())
        .collect();
    let label_text = field(row, "label").map_err(|_| "no column `label`: a file without answers (SWAG's test split) cannot be audited or re-filtered".to_string())?;
    let label = parse_label(label_text, "label", endings.len(), 0)?;
    let group = field(row, "video-id")?.to_string();
    let id = row
        .get("")
        .filter(|s| !s.is_empty())
        .cloned()
        .unwrap_or_else(|| format!("{group}:{line}"));
    Ok(Question {
        id,
        group,
        context: field(row, "sent1")?.to_string(),
        prefix: field(row, "sent2")?.to_string(),
        endings,
        label,
        split: None,
        blank: None,
        line,
    })
}

fn swag_full(row: &Row, line: usize) -> Result<Question, String> {
    let mut endings = vec![field(row, "gold-ending")?.to_string()];
    // As many distractor columns as the header has; SWAG leaves some of them empty.
    for d in 0.. {
        match row.get(&format!("distractor-{d}")) {
            Some(e) if !e.trim().is_empty() => endings.push(e.clone()),
            Some(_) => {}
            None => break,
        }
    }
    if endings.len() < 2 {
        return Err("no distractors (every `distractor-N` column is empty)".into());
    }
    let group = field(row, "video-id")?.to_string();
    Ok(Question {
        id: format!("{group}:{}:{line}", field(row, "fold-ind")?),
        group,
        context: field(row, "sent1")?.to_string(),
        prefix: field(row, "sent2")?.to_string(),
        endings,
        label: 0,
        split: None,
        blank: None,
        line,
    })
}

fn text(v: &Value, key: &str) -> Result<String, String> {
    match v.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        None | Some(Value::Null) => Err(format!("no field `{key}`")),
        Some(other) => Err(format!("field `{key}` is {}, expected text", kind(other))),
    }
}

fn optional_text(v: &Value, key: &str) -> Result<Option<String>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => text(v, key).map(Some),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn endings(v: &Value, key: &str) -> Result<Vec<String>, String> {
    let Some(list) = v.get(key) else {
        return Err(format!("no field `{key}`"));
    };
    let Value::Array(list) = list else {
        return Err(format!(
            "field `{key}` is {}, expected a list of text",
            kind(list)
        ));
    };
    let endings: Vec<String> = list
        .iter()
        .enumerate()
        .map(|(i, e)| {
            e.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("`{key}[{i}]` is {}, expected text", kind(e)))
        })
        .collect::<Result<_, _>>()?;
    if endings.len() < 2 {
        return Err(format!(
            "field `{key}` has {} entries, a question needs at least 2",
            endings.len()
        ));
    }
    Ok(endings)
}

/// A label as a number or numeric text, `base` for 0- or 1-based layouts.
fn parse_label_value(v: &Value, key: &str, options: usize, base: usize) -> Result<usize, String> {
    match v.get(key) {
        None | Some(Value::Null) => Err(format!(
            "no field `{key}`: a file without answers cannot be audited or re-filtered"
        )),
        Some(Value::Number(n)) => parse_label(&n.to_string(), key, options, base),
        Some(Value::String(s)) => parse_label(s, key, options, base),
        Some(other) => Err(format!(
            "field `{key}` is {}, expected a number",
            kind(other)
        )),
    }
}

fn parse_label(s: &str, key: &str, options: usize, base: usize) -> Result<usize, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(format!(
            "field `{key}` is empty: a file without answers cannot be audited or re-filtered"
        ));
    }
    match s.parse::<usize>() {
        Ok(n) if n >= base && n - base < options => Ok(n - base),
        _ => Err(format!(
            "field `{key}` is {s:?}, expected {base}..={}",
            options - 1 + base
        )),
    }
}

fn hellaswag(v: &Value, line: usize) -> Result<Question, String> {
    let endings = endings(v, "endings")?;
    let label = parse_label_value(v, "label", endings.len(), 0)?;
    let id = text(v, "ind")?;
    Ok(Question {
        group: optional_text(v, "source_id")?.unwrap_or_else(|| id.clone()),
        id,
        context: text(v, "ctx_a")?,
        prefix: text(v, "ctx_b")?,
        endings,
        label,
        split: optional_text(v, "split")?,
        blank: None,
        line,
    })
}

fn winogrande(v: &Value, line: usize) -> Result<Question, String> {
    let id = text(v, "qID")?;
    let sentence = text(v, "sentence")?;
    let blanks = sentence.matches('_').count();
    if blanks != 1 {
        return Err(format!(
            "field `sentence` has {blanks} blanks (`_`), expected exactly 1"
        ));
    }
    let (before, after) = sentence.split_once('_').expect("one blank");
    let options = vec![text(v, "option1")?, text(v, "option2")?];
    let label = parse_label_value(v, "answer", 2, 1)?;
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
        .unwrap_or(id)
}

fn generic(v: &Value, line: usize) -> Result<Question, String> {
    let endings = endings(v, "endings")?;
    let label = parse_label_value(v, "label", endings.len(), 0)?;
    let id = optional_text(v, "id")?.unwrap_or_else(|| format!("line-{line}"));
    Ok(Question {
        group: optional_text(v, "group")?.unwrap_or_else(|| id.clone()),
        id,
        context: text(v, "context")?,
        prefix: optional_text(v, "prefix")?.unwrap_or_default(),
        endings,
        label,
        split: optional_text(v, "split")?,
        blank: None,
        line,
    })
}

fn af(v: &Value, line: usize) -> Result<Question, String> {
    let gold = v.get("gold").ok_or("no field `gold`")?;
    let mut endings = vec![text(gold, "ending").map_err(|e| format!("gold: {e}"))?];
    let Some(Value::Array(distractors)) = v.get("distractors") else {
        return Err("no list `distractors`".into());
    };
    for (i, d) in distractors.iter().enumerate() {
        endings.push(text(d, "ending").map_err(|e| format!("distractors[{i}]: {e}"))?);
    }
    if endings.len() < 2 {
        return Err("`distractors` is empty".into());
    }
    Ok(Question {
        id: text(v, "id")?,
        group: text(v, "group")?,
        context: text(v, "context")?,
        prefix: text(v, "noun_phrase")?,
        endings,
        label: 0,
        split: optional_text(v, "split")?,
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
            e.ends_with("w.jsonl:2: field `sentence` has 0 blanks (`_`), expected exactly 1"),
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
            f.skipped[2]
                .reason
                .starts_with("malformed JSON at column 2"),
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
