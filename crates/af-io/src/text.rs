//! What every reader of text files shares: a byte-order mark skipped, JSON parsed with repeated
//! keys refused (serde_json would keep the last silently), CSV headers with a column named twice
//! refused. One rule for every format (issue 17).

use std::path::Path;

use crate::ReadError;

/// serde_json's message without its " at line L column C": the error's fields carry those.
pub(crate) fn json_message(e: &serde_json::Error) -> String {
    let message = e.to_string();
    message
        .split(" at line ")
        .next()
        .unwrap_or(&message)
        .to_string()
}

/// Skips a UTF-8 byte-order mark, which some editors put at the start of a file (the csv crate
/// skips it itself).
pub(crate) fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Parses a JSON text (a whole file, or the line after `line_offset` lines of a JSONL file),
/// refusing an object that repeats a key, which serde_json would resolve silently by keeping the last.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    json: &str,
    line_offset: usize,
) -> Result<T, ReadError> {
    parse_json_naming(path, json, line_offset, "key")
}

/// [`parse_json`], naming the outermost object's keys `top` in the message (ActivityNet: "video id").
pub(crate) fn parse_json_naming<T: serde::de::DeserializeOwned>(
    path: &Path,
    json: &str,
    line_offset: usize,
    top: &str,
) -> Result<T, ReadError> {
    unique_keys(json, top).map_err(|e| {
        if e.is_data() {
            ReadError::record(
                path,
                e.line() + line_offset,
                Some(e.column()),
                json_message(&e),
            )
        } else {
            ReadError::json(path, &e, line_offset)
        }
    })?;
    serde_json::from_str(json).map_err(|e| ReadError::json(path, &e, line_offset))
}

/// Walks a JSON text and fails on the first repeated key of any object (a data error: only this
/// check makes one), or on malformed JSON (a syntax error).
pub(crate) fn unique_keys(json: &str, top: &str) -> Result<(), serde_json::Error> {
    use serde::de::DeserializeSeed;
    let mut d = serde_json::Deserializer::from_str(json);
    UniqueKeys { name: top }.deserialize(&mut d)?;
    d.end()
}

struct UniqueKeys<'a> {
    name: &'a str,
}

impl<'de> serde::de::DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(UniqueKeys { name: "key" })?.is_some() {}
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                return Err(serde::de::Error::custom(format!(
                    "duplicate {} `{key}`",
                    self.name
                )));
            }
            map.next_value_seed(UniqueKeys { name: "key" })?;
            seen.insert(key);
        }
        Ok(())
    }
}

/// A CSV header that names a column twice is ambiguous: a reader by name would take one silently.
pub(crate) fn unique_columns<'a>(
    path: &Path,
    line: usize,
    columns: impl IntoIterator<Item = &'a str>,
) -> Result<(), ReadError> {
    let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, c) in columns.into_iter().enumerate() {
        if let Some(f) = first.insert(c, i + 1) {
            let what = if c.is_empty() {
                "unnamed column".to_string()
            } else {
                format!("column `{c}`")
            };
            return Err(ReadError::record(
                path,
                line,
                None,
                format!("duplicate {what} (columns {f} and {})", i + 1),
            ));
        }
    }
    Ok(())
}

/// Ids seen so far in one file, with the line of each: the rule every reader of ids shares
/// (multiple-choice files, pair rows, `af aflite`'s instances): a repeated id is a second copy or
/// a mistake, never two instances.
#[derive(Default)]
pub(crate) struct UniqueIds(std::collections::HashMap<String, usize>);

impl UniqueIds {
    /// Records `id` at `line`, or says where it was first.
    pub(crate) fn check(&mut self, id: &str, line: usize) -> Result<(), String> {
        match self.0.get(id) {
            Some(first) => Err(format!("duplicate id `{id}` (first on line {first})")),
            None => {
                self.0.insert(id.to_string(), line);
                Ok(())
            }
        }
    }
}

/// One step of the way to a value inside a JSON text.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The byte range of the value at `steps` in a valid JSON text (one JSONL line), or None where
/// there is none.
pub(crate) fn value_span(json: &str, steps: &[Step]) -> Option<(usize, usize)> {
    let b = json.as_bytes();
    let mut i = skip_space(b, 0);
    for step in steps {
        match (*step, *b.get(i)?) {
            (Step::Key(want), b'{') => {
                i += 1;
                loop {
                    i = skip_space(b, i);
                    if *b.get(i)? != b'"' {
                        return None;
                    }
                    let key_end = value_end(b, i)?;
                    let key: String = serde_json::from_str(&json[i..key_end]).ok()?;
                    i = skip_space(b, key_end);
                    if *b.get(i)? != b':' {
                        return None;
                    }
                    i = skip_space(b, i + 1);
                    if key == want {
                        break;
                    }
                    i = skip_space(b, value_end(b, i)?);
                    if *b.get(i)? != b',' {
                        return None;
                    }
                    i += 1;
                }
            }
            (Step::Index(n), b'[') => {
                i = skip_space(b, i + 1);
                for _ in 0..n {
                    i = skip_space(b, value_end(b, i)?);
                    if *b.get(i)? != b',' {
                        return None;
                    }
                    i = skip_space(b, i + 1);
                }
            }
            _ => return None,
        }
    }
    Some((i, value_end(b, i)?))
}

/// The 1-based column of the value at `steps` in one JSONL line.
pub(crate) fn column_of(line: &str, steps: &[Step]) -> Option<usize> {
    value_span(line, steps).map(|(s, _)| s + 1)
}

fn skip_space(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// Where the JSON value starting at `i` ends (exclusive).
fn value_end(b: &[u8], mut i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => {
            i += 1;
            while *b.get(i)? != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            Some(i + 1)
        }
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut in_string = false;
            while i < b.len() {
                match b[i] {
                    b'\\' if in_string => i += 1,
                    b'"' => in_string = !in_string,
                    b'{' | b'[' if !in_string => depth += 1,
                    b'}' | b']' if !in_string => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                i += 1;
            }
            Some(i)
        }
    }
}

/// A JSON value as the file wrote it, for messages: a number as a number (`1e-400`, not the
/// `0.0` it parses to), text in quotes, and a list or object by its kind.
pub(crate) fn shown(line: &str, steps: &[Step], v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Array(_) => "a list".into(),
        serde_json::Value::Object(_) => "an object".into(),
        _ => match value_span(line, steps) {
            Some((s, e)) if e - s <= 80 => line[s..e].to_string(),
            _ => v.to_string(),
        },
    }
}

/// What a text field (a sentence, an option, a caption) must be: a JSON string. A number there is
/// an error (`1e-400` would become the text "0.0"), as is anything else.
pub(crate) fn expect_text<'v>(
    line: &str,
    steps: &[Step],
    v: &'v serde_json::Value,
    name: &str,
) -> Result<&'v str, String> {
    match v {
        serde_json::Value::String(s) => Ok(s),
        serde_json::Value::Number(_) => Err(format!(
            "field `{name}` is the number {}, expected text (a JSON string)",
            shown(line, steps, v)
        )),
        other => Err(format!(
            "field `{name}` is {}, expected text (a JSON string)",
            kind_and_value(line, steps, other)
        )),
    }
}

/// What an id or a group must be: a string or an integer, not empty. `1.5` or `1e-400` (which
/// parses to `0.0`) would name another thing than the file does.
pub(crate) fn expect_key(
    line: &str,
    steps: &[Step],
    v: &serde_json::Value,
    name: &str,
) -> Result<String, String> {
    let key = match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        serde_json::Value::Number(_) => {
            return Err(format!(
                "field `{name}` is the number {}, expected text or an integer",
                shown(line, steps, v)
            ))
        }
        other => {
            return Err(format!(
                "field `{name}` is {}, expected text or an integer",
                kind_and_value(line, steps, other)
            ))
        }
    };
    if key.trim().is_empty() {
        return Err(format!("field `{name}` is empty"));
    }
    Ok(key)
}

/// `null`, `a boolean (true)`, `a list`, `an object`, as words.
pub(crate) fn kind_and_value(line: &str, steps: &[Step], v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "null".into(),
        serde_json::Value::Bool(b) => format!("a boolean ({b})"),
        serde_json::Value::Number(_) => format!("the number {}", shown(line, steps, v)),
        serde_json::Value::String(_) => format!("the text {}", shown(line, steps, v)),
        serde_json::Value::Array(_) => "a list".into(),
        serde_json::Value::Object(_) => "an object".into(),
    }
}

/// A CSV cell as the file wrote it, for messages: a number as a number, other text quoted.
pub(crate) fn shown_cell(cell: &str) -> String {
    if !cell.is_empty() && cell.trim().parse::<f64>().is_ok() {
        cell.trim().to_string()
    } else {
        format!("{cell:?}")
    }
}

/// The line and 1-based column of field `index` of the CSV record that starts at byte
/// `record_start` of `text` on line `record_line` (a quoted field may hold line breaks).
pub(crate) fn csv_field_place(
    text: &str,
    record_start: usize,
    record_line: usize,
    delimiter: u8,
    index: usize,
) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let (mut i, mut field, mut in_quotes) = (record_start, 0, false);
    let (mut line, mut line_start) = (record_line, record_start);
    while field < index {
        let c = *b.get(i)?;
        match c {
            b'"' => in_quotes = !in_quotes,
            b'\n' if in_quotes => {
                line += 1;
                line_start = i + 1;
            }
            b'\n' | b'\r' => return None,
            c if c == delimiter && !in_quotes => field += 1,
            _ => {}
        }
        i += 1;
    }
    Some((line, i - line_start + 1))
}
