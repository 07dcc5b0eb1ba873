//! The inputs of `af pairs`, each turned into [`Document`]s: runs of consecutive sentences that
//! share a group. Whitespace around every sentence is trimmed here.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use af_core::config::{InputFormat, InputSpec, RecordLayout, TextEncoding};
use af_core::Document;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::text::{parse_json, parse_json_naming, strip_bom, unique_columns};
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

/// One CSV row or JSONL line: its line number and its named string fields.
struct Record {
    line: usize,
    fields: HashMap<String, String>,
}

struct Records {
    path: PathBuf,
    columns: Vec<String>,
    rows: Vec<Record>,
}

fn csv_records(path: &Path, delimiter: u8) -> Result<Records, ReadError> {
    let text = read_utf8(path)?;
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .from_reader(strip_bom(&text).as_bytes());
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
        ReadError::Record {
            path: path.to_path_buf(),
            line,
            message,
        }
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
        let line = row.position().map_or(0, |p| p.line() as usize);
        let fields = columns
            .iter()
            .cloned()
            .zip(row.iter().map(str::to_string))
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
            return Err(ReadError::Record {
                path: path.to_path_buf(),
                line: i + 1,
                message: "expected a JSON object".into(),
            });
        };
        let mut fields = HashMap::new();
        for (k, v) in obj {
            if !columns.contains(&k) {
                columns.push(k.clone());
            }
            let s = match v {
                serde_json::Value::String(s) => s,
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Null => continue,
                other => {
                    // Kept so that a layout that names this field reports its type.
                    format!("\u{0}{}", json_type(&other))
                }
            };
            fields.insert(k, s);
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

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
        serde_json::Value::Bool(_) => "a boolean",
        _ => "a value",
    }
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
    let field = |r: &Record, name: &str| -> Result<String, ReadError> {
        match r.fields.get(name) {
            Some(v) if v.starts_with('\u{0}') => Err(ReadError::Record {
                path: path.clone(),
                line: r.line,
                message: format!("field `{name}` is {}, expected a string", &v[1..]),
            }),
            Some(v) => Ok(v.trim().to_string()),
            None => Err(ReadError::Record {
                path: path.clone(),
                line: r.line,
                message: format!("field `{name}` is missing"),
            }),
        }
    };
    let mut docs: Vec<Document> = Vec::new();
    match layout {
        RecordLayout::Sentences { group, text } => {
            // Rows of a group need not be adjacent; their order within the group is kept.
            let mut by_group: HashMap<String, usize> = HashMap::new();
            for r in &records.rows {
                let g = field(r, &group)?;
                let t = field(r, &text)?;
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
            let mut seen: HashMap<String, usize> = HashMap::new();
            for r in &records.rows {
                let id = match &id {
                    Some(f) => field(r, f)?,
                    None => format!("row{}", r.line),
                };
                if let Some(first) = seen.insert(id.clone(), r.line) {
                    return Err(ReadError::Record {
                        path: path.clone(),
                        line: r.line,
                        message: format!("duplicate id `{id}` (first on line {first})"),
                    });
                }
                let g = match &group {
                    Some(f) => field(r, f)?,
                    None => id.clone(),
                };
                docs.push(Document {
                    group: g,
                    id: Some(id),
                    sentences: vec![field(r, &context)?, field(r, &sentence2)?],
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
        return Err(ReadError::Record { path: path.to_path_buf(), line: crate::line_at(&bytes, offset), message: "the file is UTF-8 (its non-ASCII bytes all decode as UTF-8): drop `encoding = \"latin-1\"`".into() });
    }
    if let Some(offset) = bytes.iter().position(|b| (0x80..=0x9f).contains(b)) {
        return Err(ReadError::Record {
            path: path.to_path_buf(),
            line: crate::line_at(&bytes, offset),
            message: format!("byte 0x{:02X} at offset {offset} is a control character in Latin-1: the file looks like Windows-1252; convert it with `iconv -f cp1252 -t utf-8`", bytes[offset]),
        });
    }
    Ok(bytes.iter().map(|&b| char::from(b)).collect())
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
            e.ends_with("a.json:2: invalid UTF-8 at byte offset 26"),
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
        assert!(e.contains("d.csv:2: invalid UTF-8"), "{e}");
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
            e.ends_with("b.jsonl:2: field `s` is an array, expected a string"),
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
            e.ends_with("c.txt:1: invalid UTF-8 at byte offset 18"),
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
            e.contains("w.txt:2: byte 0x93 at offset 13") && e.contains("Windows-1252"),
            "{e}"
        );
        write(
            d.path(),
            "u.txt",
            "One.\nHe went to the caf\u{e9}.".as_bytes(),
        );
        input.path = d.path().join("u.txt");
        let e = read_input(&input).unwrap_err().to_string();
        assert!(e.contains("u.txt:2: the file is UTF-8"), "{e}");
    }
}
