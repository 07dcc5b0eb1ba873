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
            ReadError::Record {
                path: path.to_path_buf(),
                line: e.line() + line_offset,
                message: json_message(&e),
            }
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
            return Err(ReadError::Record {
                path: path.to_path_buf(),
                line,
                message: format!("duplicate {what} (columns {f} and {})", i + 1),
            });
        }
    }
    Ok(())
}
