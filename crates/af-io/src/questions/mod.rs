//! Multiple-choice datasets for the audit: SWAG's regular and full CSV, HellaSwag JSONL,
//! WinoGrande JSONL, a generic JSONL (`context`, `endings`, `label`) and af's own
//! `dataset.jsonl`, all read into [`af_core::Question`]s.
//!
//! A layout is one file here implementing [`Layout`] (its name, the fields that tell it on a
//! file's first line, the fields a row needs, and how a row becomes a question) and one line in
//! [`LAYOUTS`]; detection, `--format`, the list of names in messages and the readers' dispatch
//! all come from that list.
//!
//! A bad row is an error naming file, line and field; with `skip_bad` it is skipped and listed
//! instead, so the caller can count it in its report.

mod af;
mod generic;
mod hellaswag;
mod rows;
mod swag;
mod swag_full;
mod winogrande;

use std::path::{Path, PathBuf};

use af_core::Question;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::text::{json_message, strip_bom, unique_keys, UniqueIds};
use crate::{read_utf8, ReadError};
use rows::{csv_rows, Bad, CsvRow, JsonRow};

pub use winogrande::twin_group;

/// Every layout af reads, in the order `--format` lists them and the first line is tried
/// (catch-all layouts after the others of their syntax).
const LAYOUTS: &[&dyn Layout] = &[
    &swag::Swag,
    &swag_full::SwagFull,
    &hellaswag::Hellaswag,
    &winogrande::Winogrande,
    &generic::Generic,
    &af::Af,
];

/// A multiple-choice layout: one file each, listed in [`LAYOUTS`].
trait Layout: Sync {
    /// Its name: `--format NAME`, `layout = "NAME"`, and the `format` reports record.
    fn name(&self) -> &'static str;

    /// The fields (JSON keys, or CSV columns) whose presence on a file's first line tells it.
    fn tells(&self) -> &'static [&'static str];

    /// The fields a row needs: when no layout fits a first line, what it lacks of these is said.
    fn needs(&self) -> &'static [&'static str];

    /// Tried after the other layouts of its syntax, because what tells it is in theirs too.
    fn catch_all(&self) -> bool {
        false
    }

    /// Its text is tokenised as SWAG's is (spaces around punctuation).
    fn tokenized(&self) -> bool {
        false
    }

    /// How its file is cut into rows, and a row read into a question.
    fn rows(&self) -> Rows;
}

/// A layout's rows: a CSV file with a header line, or one JSON object per line (given with the
/// line's number).
enum Rows {
    Csv(fn(&CsvRow) -> Result<Question, Bad>),
    JsonLines(fn(&JsonRow, usize) -> Result<Question, Bad>),
}

/// How a layout's file is cut into rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    /// A CSV file: a header line, then one record per row (a record may span lines).
    Csv,
    /// One JSON object per non-empty line.
    JsonLines,
}

/// A layout [`read_questions`] understands (one of [`LAYOUTS`]), known by its name.
#[derive(Clone, Copy)]
pub struct QuestionFormat(&'static dyn Layout);

impl QuestionFormat {
    /// `,video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0..3,label`
    pub const SWAG: Self = Self(&swag::Swag);
    /// `video-id,fold-ind,startphrase,gold-ending,distractor-0..,...,sent1,sent2` (gold first)
    pub const SWAG_FULL: Self = Self(&swag_full::SwagFull);
    /// `ind, ctx_a, ctx_b, endings, label, split, source_id`
    pub const HELLASWAG: Self = Self(&hellaswag::Hellaswag);
    /// `qID, sentence` (one `_`), `option1, option2, answer` ("1" or "2")
    pub const WINOGRANDE: Self = Self(&winogrande::Winogrande);
    /// `context, endings, label`; optional `id, group, prefix, split`
    pub const GENERIC: Self = Self(&generic::Generic);
    /// af's `dataset.jsonl` / `random.jsonl` (gold, then distractors)
    pub const AF: Self = Self(&af::Af);

    /// Every layout's name, as messages list them: `swag, swag-full, ...`.
    pub fn names() -> String {
        LAYOUTS
            .iter()
            .map(|l| l.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn parse(name: &str) -> Option<Self> {
        LAYOUTS.iter().find(|l| l.name() == name).map(|&l| Self(l))
    }

    pub fn name(self) -> &'static str {
        self.0.name()
    }

    pub fn syntax(self) -> Syntax {
        match self.0.rows() {
            Rows::Csv(_) => Syntax::Csv,
            Rows::JsonLines(_) => Syntax::JsonLines,
        }
    }

    /// Whether its text is tokenised as SWAG's and af's files are (spaces around punctuation),
    /// so that a reader for people or for an LM joins it back.
    pub fn tokenized(self) -> bool {
        self.0.tokenized()
    }
}

impl PartialEq for QuestionFormat {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for QuestionFormat {}

impl std::fmt::Debug for QuestionFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Display for QuestionFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for QuestionFormat {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

// Reports that record a layout (`eval.json`'s `format`) are read back by the export's card.
impl<'de> Deserialize<'de> for QuestionFormat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "`{name}` is not a layout af reads; the layouts are {}",
                Self::names()
            ))
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
                    QuestionFormat::names()
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
        None => detect(text).map_err(|(line, column, why)| {
            ReadError::record(
                path,
                line,
                column,
                format!(
                    "cannot tell the layout from line {line}: {why}; name it with --format ({})",
                    QuestionFormat::names()
                ),
            )
        })?,
    };
    let rows: Vec<(usize, Result<Question, Bad>)> = match format.0.rows() {
        Rows::Csv(read) => {
            let file = csv_rows(path, text)?;
            file.rows
                .iter()
                .map(|row| (row.line, read(&CsvRow { file: &file, row })))
                .collect()
        }
        Rows::JsonLines(read) => {
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
                rows.push((i + 1, read(&JsonRow { v: &value, line }, i + 1)));
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

/// The layouts of one syntax in the order the first line is tried: the registry's, catch-alls
/// last.
fn tried(syntax: Syntax) -> Vec<&'static dyn Layout> {
    let of = |catch_all: bool| {
        LAYOUTS
            .iter()
            .copied()
            .filter(move |l| QuestionFormat(*l).syntax() == syntax && l.catch_all() == catch_all)
    };
    of(false).chain(of(true)).collect()
}

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
        let json = tried(Syntax::JsonLines);
        if let Some(layout) = json.iter().find(|l| l.tells().iter().all(|k| has(k))) {
            return Ok(QuestionFormat(*layout));
        }
        let why: Vec<String> = json
            .iter()
            .map(|l| {
                let missing: Vec<&str> = l.needs().iter().copied().filter(|k| !has(k)).collect();
                format!("as {} it lacks {}", l.name(), lacks(missing))
            })
            .collect();
        return Err((line, Some(column), why.join("; ")));
    }
    let header: Vec<&str> = first.split(',').map(str::trim).collect();
    let csv = tried(Syntax::Csv);
    if let Some(layout) = csv
        .iter()
        .find(|l| l.tells().iter().all(|k| header.contains(k)))
    {
        return Ok(QuestionFormat(*layout));
    }
    let mut why: Vec<String> = csv
        .iter()
        .map(|l| {
            let missing: Vec<&str> = l
                .needs()
                .iter()
                .copied()
                .filter(|k| !header.contains(k))
                .collect();
            format!("as {} it lacks column {}", l.name(), lacks(missing))
        })
        .collect();
    why.push("as a JSON layout it is not a JSON object".into());
    Err((line, Some(1), why.join("; ")))
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
        assert_eq!(f.format, QuestionFormat::SWAG);
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
        assert_eq!(f.format, QuestionFormat::SWAG_FULL);
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
