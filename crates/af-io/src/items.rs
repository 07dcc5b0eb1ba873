//! The items file: one JSON object per line, as [`af_core::Item`].

use std::io::Write;
use std::path::Path;

use af_core::atomic::AtomicFile;
use af_core::Item;

use crate::{read_utf8, ReadError};

/// Writes items atomically: the file appears whole or not at all.
pub fn write_items(path: &Path, items: &[Item]) -> std::io::Result<()> {
    let mut f = AtomicFile::create(path)?;
    for item in items {
        serde_json::to_writer(&mut f, item)?;
        f.write_all(b"\n")?;
    }
    f.commit()
}

pub fn read_items(path: &Path) -> Result<Vec<Item>, ReadError> {
    let text = read_utf8(path)?;
    // `Item` refuses repeated and unknown fields itself, so no `parse_json` pass is needed here.
    let text = crate::text::strip_bom(&text);
    let mut items = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        items.push(serde_json::from_str(line).map_err(|e| ReadError::json(path, &e, i))?);
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("items.jsonl");
        let item = Item {
            id: "v-0".into(),
            group: "v".into(),
            fold: 3,
            context: "A man is seen talking to the camera.".into(),
            noun_phrase: "He".into(),
            ending: "then picks up a \"ball\".".into(),
            context_tokens: 9,
            noun_phrase_tokens: 1,
            ending_tokens: 8,
            distractors: Vec::new(),
        };
        write_items(&p, std::slice::from_ref(&item)).unwrap();
        assert_eq!(read_items(&p).unwrap(), vec![item]);
    }
}
