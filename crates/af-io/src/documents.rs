//! The inputs of `af pairs`, each turned into [`Document`]s: runs of consecutive sentences that
//! share a group. Whitespace around every sentence is trimmed here.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use af_core::config::{InputFormat, InputSpec, RecordLayout, TextEncoding};
use af_core::Document;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::text::{
    column_of, csv_field_place, kind_and_value, parse_json, parse_json_naming, shown, strip_bom,
    unique_columns, Step, UniqueIds,
};
use crate::{read_utf8, ReadError};

/// Reads one configured input.
pub fn read_input(spec: &InputSpec) -> Result<Vec<Document>, ReadError> {
    let docs = match spec.format {
        InputFormat::Activitynet => read_activitynet(&spec.path)?,
        InputFormat::Csv => read_records(
            spec,
            csv_records(&spec.path, spec.delimiter.unwrap_or(',') as u8)?,
        )?,
        InputFormat::Jsonl => read_records(spec, jsonl_records(&spec.path)?)?,
        InputFormat::Text => read_text(&spec.path, spec.encoding)?,
        // As text to learn from (an LM's pretraining): each question's context and its second
        // sentence with the right ending, one two-sentence document.
        InputFormat::Questions => crate::questions::read_question_input(spec)?
            .questions
            .into_iter()
            .map(|q| Document {
                group: q.group,
                id: Some(q.id),
                sentences: vec![
                    q.context,
                    af_core::question::join_text(&q.prefix, &q.endings[q.label]),
                ]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect(),
                origin: format!("{}:{}", spec.path.display(), q.line),
            })
            .collect(),
    };
    if docs.iter().all(|d| d.sentences.is_empty()) {
        return Err(ReadError::Invalid {
            path: spec.path.clone(),
            message: "no sentences in this input".into(),
        });
    }
    Ok(docs)
}

#[derive(Deserialize)]
struct Video {
    sentences: Vec<String>,
}

/// `{video_id: {"sentences": [...], ...}, ...}` in file order (serde_json's map would sort the
/// ids); a repeated id is refused before, by `parse_json_naming`.
struct Videos(Vec<(String, Video)>);

impl<'de> Deserialize<'de> for Videos {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Videos;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object mapping video ids to {\"sentences\": [...]}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Videos, A::Error> {
                let mut out = Vec::new();
                while let Some(id) = map.next_key::<String>()? {
                    let video: Video = map.next_value()?;
                    out.push((id, video));
                }
                Ok(Videos(out))
            }
        }
        d.deserialize_map(V)
    }
}

pub fn read_activitynet(path: &Path) -> Result<Vec<Document>, ReadError> {
    let text = read_utf8(path)?;
    let text = strip_bom(&text);
    if text.trim().is_empty() {
        return Err(ReadError::Invalid {
            path: path.to_path_buf(),
            message: "empty file".into(),
        });
    }
    let videos: Videos = parse_json_naming(path, text, 0, "video id")?;
    Ok(videos
        .0
        .into_iter()
        .map(|(id, v)| Document {
            origin: format!("{}: video {id}", path.display()),
            group: id,
            id: None,
            sentences: v.sentences.iter().map(|s| s.trim().to_string()).collect(),
        })
        .collect())
}

/// One field of a CSV row or JSONL line, with its kind (a CSV cell is always text) and where it
/// starts.
struct Field {
    cell: Cell,
    line: usize,
    column: Option<usize>,
}

enum Cell {
    Text(String),
    Integer(String),
    /// Any other number, as the file wrote it.
    Number(String),
    /// A list, an object or a boolean, in words.
    Other(String),
}

/// One CSV row or JSONL line: its line number and its named fields.
struct Record {
    line: usize,
    fields: HashMap<String, Field>,
}

struct Records {
    path: PathBuf,
    columns: Vec<String>,
    rows: Vec<Record>,
}

fn csv_records(path: &Path, delimiter: u8) -> Result<Records, ReadError> {
    let text = read_utf8(path)?;
    let text = strip_bom(&text);
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .from_reader(text.as_bytes());
    let csv_err = |e: csv::Error| {
        let line = e.position().map_or(0, |p| p.line() as usize);
        let message = match e.kind() {
            csv::ErrorKind::UnequalLengths {
                expected_len, len, ..
            } => {
                format!("row has {len} fields, the header has {expected_len}")
            }
            _ => e.to_string(),
        };
        ReadError::record(path, line, None, message)
    };
    let header = reader.headers().map_err(csv_err)?;
    let columns: Vec<String> = header.iter().map(str::to_string).collect();
    if columns.is_empty() || columns.iter().all(String::is_empty) {
        return Err(ReadError::Invalid {
            path: path.to_path_buf(),
            message: "empty file (no header row)".into(),
        });
    }
    unique_columns(
        path,
        header.position().map_or(1, |p| p.line() as usize),
        columns.iter().map(String::as_str),
    )?;
    let mut rows = Vec::new();
    for row in reader.records() {
        let row = row.map_err(csv_err)?;
        let (line, start) = row
            .position()
            .map_or((0, 0), |p| (p.line() as usize, p.byte() as usize));
        let fields = columns
            .iter()
            .cloned()
            .zip(row.iter())
            .enumerate()
            .map(|(i, (name, cell))| {
                let place = csv_field_place(text, start, line, delimiter, i);
                let field = Field {
                    cell: Cell::Text(cell.to_string()),
                    line: place.map_or(line, |p| p.0),
                    column: place.map(|p| p.1),
                };
                (name, field)
            })
            .collect();
        rows.push(Record { line, fields });
    }
    Ok(Records {
        path: path.to_path_buf(),
        columns,
        rows,
    })
}

fn jsonl_records(path: &Path) -> Result<Records, ReadError> {
    let text = read_utf8(path)?;
    let text = strip_bom(&text);
    let mut rows = Vec::new();
    let mut columns: Vec<String> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = parse_json(path, line, i)?;
        let serde_json::Value::Object(obj) = value else {
            return Err(ReadError::record(
                path,
                i + 1,
                Some(line.len() - line.trim_start().len() + 1),
                "expected a JSON object",
            ));
        };
        let mut fields = HashMap::new();
        for (k, v) in obj {
            if !columns.contains(&k) {
                columns.push(k.clone());
            }
            let steps = [Step::Key(&k)];
            let cell = match &v {
                serde_json::Value::String(s) => Cell::Text(s.clone()),
                serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => {
                    Cell::Integer(n.to_string())
                }
                serde_json::Value::Number(_) => Cell::Number(shown(line, &steps, &v)),
                serde_json::Value::Null => continue,
                other => Cell::Other(kind_and_value(line, &steps, other)),
            };
            let column = column_of(line, &steps);
            fields.insert(
                k,
                Field {
                    cell,
                    line: i + 1,
                    column,
                },
            );
        }
        rows.push(Record {
            line: i + 1,
            fields,
        });
    }
    if rows.is_empty() {
        return Err(ReadError::Invalid {
            path: path.to_path_buf(),
            message: "empty file (no JSON lines)".into(),
        });
    }
    Ok(Records {
        path: path.to_path_buf(),
        columns,
        rows,
    })
}

fn read_records(spec: &InputSpec, records: Records) -> Result<Vec<Document>, ReadError> {
    let layout = spec.record_layout().map_err(|message| ReadError::Invalid {
        path: spec.path.clone(),
        message,
    })?;
    let path = &records.path;
    let wanted: Vec<&String> = match &layout {
        RecordLayout::Sentences { group, text } => vec![group, text],
        RecordLayout::Pairs {
            group,
            context,
            sentence2,
            id,
        } => [Some(context), Some(sentence2), group.as_ref(), id.as_ref()]
            .into_iter()
            .flatten()
            .collect(),
    };
    // JSONL has no header: a field is missing when no line has it.
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|w| !records.columns.contains(w))
        .map(|w| w.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(ReadError::Invalid {
            path: path.clone(),
            message: format!(
                "missing column{} {} (the file has: {})",
                if missing.len() > 1 { "s" } else { "" },
                missing
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                records.columns.join(", ")
            ),
        });
    }
    fn get<'r>(path: &Path, r: &'r Record, name: &str) -> Result<&'r Field, ReadError> {
        r.fields.get(name).ok_or_else(|| {
            ReadError::record(path, r.line, None, format!("field `{name}` is missing"))
        })
    }
    let wrong = |f: &Field, message: String| ReadError::record(path, f.line, f.column, message);
    // Text (a caption, a sentence) must be text: a number would become its digits.
    let text = |r: &Record, name: &str| -> Result<String, ReadError> {
        let f = get(path, r, name)?;
        match &f.cell {
            Cell::Text(t) => Ok(t.trim().to_string()),
            Cell::Integer(n) | Cell::Number(n) => Err(wrong(
                f,
                format!("field `{name}` is the number {n}, expected text (a JSON string)"),
            )),
            Cell::Other(what) => Err(wrong(
                f,
                format!("field `{name}` is {what}, expected text (a JSON string)"),
            )),
        }
    };
    // A group or an id: text or an integer, never empty (an empty cell would make one group of
    // every row that has one).
    let key = |r: &Record, name: &str| -> Result<String, ReadError> {
        let f = get(path, r, name)?;
        let k = match &f.cell {
            Cell::Text(t) => t.trim().to_string(),
            Cell::Integer(n) => n.clone(),
            Cell::Number(n) => {
                return Err(wrong(
                    f,
                    format!("field `{name}` is the number {n}, expected text or an integer"),
                ))
            }
            Cell::Other(what) => {
                return Err(wrong(
                    f,
                    format!("field `{name}` is {what}, expected text or an integer"),
                ))
            }
        };
        if k.is_empty() {
            return Err(wrong(f, format!("field `{name}` is empty")));
        }
        Ok(k)
    };
    let mut docs: Vec<Document> = Vec::new();
    match layout {
        RecordLayout::Sentences {
            group,
            text: text_field,
        } => {
            // Rows of a group need not be adjacent; their order within the group is kept.
            let mut by_group: HashMap<String, usize> = HashMap::new();
            for r in &records.rows {
                let g = key(r, &group)?;
                let t = text(r, &text_field)?;
                let slot = *by_group.entry(g.clone()).or_insert_with(|| {
                    docs.push(Document {
                        group: g.clone(),
                        id: None,
                        sentences: Vec::new(),
                        origin: format!("{}:{} (group {g})", path.display(), r.line),
                    });
                    docs.len() - 1
                });
                docs[slot].sentences.push(t);
            }
        }
        RecordLayout::Pairs {
            group,
            context,
            sentence2,
            id,
        } => {
            let mut ids = UniqueIds::default();
            for r in &records.rows {
                let id = match &id {
                    Some(f) => key(r, f)?,
                    None => format!("row{}", r.line),
                };
                ids.check(&id, r.line)
                    .map_err(|message| ReadError::record(path, r.line, None, message))?;
                let g = match &group {
                    Some(f) => key(r, f)?,
                    None => id.clone(),
                };
                docs.push(Document {
                    group: g,
                    id: Some(id),
                    sentences: vec![text(r, &context)?, text(r, &sentence2)?],
                    origin: format!("{}:{}", path.display(), r.line),
                });
            }
        }
    }
    Ok(docs)
}

/// Plain text: one document per file (every `*.txt` of a directory, in name order), group = the
/// file stem, split into sentences.
pub fn read_text(path: &Path, encoding: TextEncoding) -> Result<Vec<Document>, ReadError> {
    let files = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|source| ReadError::Io {
                path: path.to_path_buf(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "txt"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(ReadError::Invalid {
                path: path.to_path_buf(),
                message: "no *.txt files in this directory".into(),
            });
        }
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut docs = Vec::new();
    for file in files {
        let text = match encoding {
            TextEncoding::Utf8 => read_utf8(&file)?,
            TextEncoding::Latin1 => read_latin1(&file)?,
        };
        let text = strip_bom(&text);
        let group = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        docs.push(Document {
            origin: file.display().to_string(),
            group,
            id: None,
            sentences: af_text::sentences::split_sentences(text),
        });
    }
    Ok(docs)
}

/// Reads a whole file as Latin-1 (ISO-8859-1: byte n is U+00nn). Bytes 0x80-0x9F are C1 control
/// characters there, never text: a file holding them is almost surely Windows-1252 (curly quotes,
/// dashes), which would read as garbage, so it is refused with the place of the first one.
fn read_latin1(path: &Path) -> Result<String, ReadError> {
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    // Any bytes are Latin-1, so a UTF-8 file would be read without error as mojibake ("cafÃ©").
    if !bytes.is_ascii() && std::str::from_utf8(&bytes).is_ok() {
        let offset = bytes.iter().position(|b| !b.is_ascii()).unwrap_or(0);
        let (line, column) = crate::line_and_column(&bytes, offset);
        return Err(ReadError::record(path, line, Some(column), "the file is UTF-8 (its non-ASCII bytes all decode as UTF-8): drop `encoding = \"latin-1\"`"));
    }
    if let Some(offset) = bytes.iter().position(|b| (0x80..=0x9f).contains(b)) {
        let (line, column) = crate::line_and_column(&bytes, offset);
        return Err(ReadError::Record {
            path: path.to_path_buf(),
            line,
            column: Some(column),
            message: format!("byte 0x{:02X} at offset {offset} is a control character in Latin-1: the file looks like Windows-1252; convert it with `iconv -f cp1252 -t utf-8`", bytes[offset]),
        });
    }
    Ok(crate::lone_cr_to_lf(
        bytes.iter().map(|&b| char::from(b)).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(path: &Path, format: InputFormat) -> InputSpec {
        InputSpec::new(path, format)
    }

    fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    #[test]
    fn activitynet_keeps_order_and_trims() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "a.json", br#"{"v_b": {"duration": 1, "timestamps": [[0,1]], "sentences": ["  One.", " Two. "]}, "v_a": {"sentences": ["Three."]}}"#);
        let docs = read_input(&spec(&p, InputFormat::Activitynet)).unwrap();
        assert_eq!(docs[0].group, "v_b");
        assert_eq!(docs[0].sentences, ["One.", "Two."]);
        assert_eq!(docs[1].group, "v_a");
    }

    #[test]
    fn activitynet_errors_name_line_and_column() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "a.json",
            b"{\n \"v\": {\"sentences\": [\"x\",]}\n}",
        );
        let e = read_input(&spec(&p, InputFormat::Activitynet))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a.json:2:"), "{e}");
        let p = write(
            d.path(),
            "b.json",
            b"{\"v\": {\"sentences\": [\"x\"]},\n \"v\": {\"sentences\": [\"y\"]}}",
        );
        let e = read_input(&spec(&p, InputFormat::Activitynet))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("b.json:2:") && e.contains("duplicate video id `v`"),
            "{e}"
        );
        let p = write(d.path(), "c.json", b"{\"v\": {\"captions\": []}}");
        let e = read_input(&spec(&p, InputFormat::Activitynet))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `sentences`"), "{e}");
        let p = write(d.path(), "e.json", b"  \n");
        let e = read_input(&spec(&p, InputFormat::Activitynet))
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("e.json: empty file"), "{e}");
    }

    #[test]
    fn invalid_utf8_names_line_and_offset() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "a.json",
            b"{\n\"v\": {\"sentences\": [\"caf\xe9\"]}}",
        );
        let e = read_input(&spec(&p, InputFormat::Activitynet))
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("a.json:2:25: invalid UTF-8 at byte offset 26"),
            "{e}"
        );
    }

    #[test]
    fn csv_sentence_rows_group_in_order() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "a.csv",
            b"vid,caption\nx, First. \ny,Other.\nx,Second.\n",
        );
        let mut s = spec(&p, InputFormat::Csv);
        s.group_field = Some("vid".into());
        s.text_field = Some("caption".into());
        let docs = read_input(&s).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].sentences, ["First.", "Second."]);
    }

    #[test]
    fn csv_problems_are_named() {
        let d = tempfile::tempdir().unwrap();
        let mut s = spec(
            &write(d.path(), "a.csv", b"vid,caption\nx,One.\ny\n"),
            InputFormat::Csv,
        );
        s.group_field = Some("vid".into());
        s.text_field = Some("caption".into());
        let e = read_input(&s).unwrap_err().to_string();
        assert!(
            e.ends_with("a.csv:3: row has 1 fields, the header has 2"),
            "{e}"
        );
        s.path = write(d.path(), "b.csv", b"vid,text\nx,One.\n");
        let e = read_input(&s).unwrap_err().to_string();
        assert!(
            e.ends_with("b.csv: missing column `caption` (the file has: vid, text)"),
            "{e}"
        );
        s.path = write(d.path(), "c.csv", b"");
        let e = read_input(&s).unwrap_err().to_string();
        assert!(e.contains("empty file"), "{e}");
        s.path = write(d.path(), "d.csv", b"vid,caption\nx,caf\xe9\n");
        let e = read_input(&s).unwrap_err().to_string();
        assert!(e.contains("d.csv:2:") && e.contains("invalid UTF-8"), "{e}");
    }

    #[test]
    fn pair_rows_with_ids_and_duplicates() {
        let d = tempfile::tempdir().unwrap();
        let mut s = spec(&write(d.path(), "a.jsonl", b"{\"id\": \"a\", \"s\": \"One.\", \"t\": \"Two.\"}\n\n{\"id\": \"a\", \"s\": \"x\", \"t\": \"y\"}\n"), InputFormat::Jsonl);
        s.context_field = Some("s".into());
        s.sentence2_field = Some("t".into());
        s.id_field = Some("id".into());
        let e = read_input(&s).unwrap_err().to_string();
        assert!(
            e.ends_with("a.jsonl:3: duplicate id `a` (first on line 1)"),
            "{e}"
        );
        s.path = write(d.path(), "b.jsonl", b"{\"id\": \"a\", \"s\": \"One.\", \"t\": \"Two.\"}\n{\"id\": \"b\", \"s\": [1], \"t\": \"y\"}\n");
        let e = read_input(&s).unwrap_err().to_string();
        assert!(
            e.ends_with("b.jsonl:2:18: field `s` is a list, expected text (a JSON string)"),
            "{e}"
        );
        s.path = write(
            d.path(),
            "c.jsonl",
            b"{\"id\": \"a\", \"s\": \"One.\", \"t\": \"Two.\"}\n{\"id\": \"b\", \"s\": \"x\"\n",
        );
        let e = read_input(&s).unwrap_err().to_string();
        assert!(
            e.contains("c.jsonl:2:") && e.contains("malformed JSON"),
            "{e}"
        );
        s.path = write(
            d.path(),
            "ok.jsonl",
            b"{\"id\": \"a\", \"s\": \" One. \", \"t\": \"Two.\"}\n",
        );
        let docs = read_input(&s).unwrap();
        assert_eq!(docs[0].id.as_deref(), Some("a"));
        assert_eq!(docs[0].sentences, ["One.", "Two."]);
    }

    #[test]
    fn text_directory_is_one_document_per_file() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "b.txt", b"He ran. She sat.\n\nThey left.");
        write(d.path(), "a.txt", b"Mr. Brown came in. He sat down.");
        write(d.path(), "skip.md", b"ignored");
        let docs = read_input(&spec(d.path(), InputFormat::Text)).unwrap();
        assert_eq!(
            docs.iter().map(|d| d.group.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(docs[0].sentences, ["Mr. Brown came in.", "He sat down."]);
        assert_eq!(docs[1].sentences, ["He ran.", "She sat.", "They left."]);
    }

    /// A Latin-1 file is refused as UTF-8 (with its place), read with `encoding = "latin-1"`, and
    /// a Windows-1252 byte is refused even then, named with its line.
    #[test]
    fn latin_1_text_is_read_when_the_input_says_so() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "c.txt",
            b"He went to the caf\xe9.\nIt was na\xefve.",
        );
        let mut input = spec(&d.path().join("c.txt"), InputFormat::Text);
        let e = read_input(&input).unwrap_err().to_string();
        assert!(
            e.ends_with("c.txt:1:19: invalid UTF-8 at byte offset 18"),
            "{e}"
        );
        input.encoding = TextEncoding::Latin1;
        let docs = read_input(&input).unwrap();
        assert_eq!(
            docs[0].sentences,
            ["He went to the caf\u{e9}.", "It was na\u{ef}ve."]
        );
        write(d.path(), "w.txt", b"One.\nHe said \x93yes\x94.");
        input.path = d.path().join("w.txt");
        let e = read_input(&input).unwrap_err().to_string();
        assert!(
            e.contains("w.txt:2:9: byte 0x93 at offset 13") && e.contains("Windows-1252"),
            "{e}"
        );
        write(
            d.path(),
            "u.txt",
            "One.\nHe went to the caf\u{e9}.".as_bytes(),
        );
        input.path = d.path().join("u.txt");
        let e = read_input(&input).unwrap_err().to_string();
        assert!(e.contains("u.txt:2:19: the file is UTF-8"), "{e}");
    }
}
