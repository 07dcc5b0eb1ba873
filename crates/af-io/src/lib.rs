//! af-io reads what users bring and writes what af makes, with errors that say where: file, line
//! (or byte offset) and field. It owns the input formats of `af pairs` (ActivityNet Captions
//! JSON, CSV, JSONL, plain text), CoNLL-U treebanks for the tagger, the items file, the candidate
//! pool's Parquet parts and the index over them that the filter and export stages stream from.
//! No libtorch, no printing.

pub mod conllu;
pub mod documents;
pub mod error;
pub mod export;
pub mod features;
pub mod items;
pub mod pool;
pub mod pool_index;
pub mod questions;
mod text;

pub use error::ReadError;

use std::path::Path;

/// Reads a whole file as UTF-8, naming the line, column and byte offset of the first bad byte.
/// A lone carriage return ends a line, as `\n` and `\r\n` do: it is made a `\n` here, so every
/// line-based reader splits such a file alike and counts its lines alike (docs/decisions/301).
pub fn read_utf8(path: &Path) -> Result<String, ReadError> {
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    match String::from_utf8(bytes) {
        Ok(text) => Ok(lone_cr_to_lf(text)),
        Err(e) => {
            let offset = e.utf8_error().valid_up_to();
            let (line, column) = line_and_column(e.as_bytes(), offset);
            Err(ReadError::Utf8 {
                path: path.to_path_buf(),
                line,
                column,
                offset,
            })
        }
    }
}

/// `text` with every `\r` not followed by `\n` made a `\n` (classic Mac OS line endings, which
/// some spreadsheet exports still write); `\r\n` is left alone.
pub(crate) fn lone_cr_to_lf(text: String) -> String {
    if !text.contains('\r') {
        return text;
    }
    let mut bytes = text.into_bytes();
    for i in 0..bytes.len() {
        if bytes[i] == b'\r' && bytes.get(i + 1) != Some(&b'\n') {
            bytes[i] = b'\n';
        }
    }
    String::from_utf8(bytes).expect("an ASCII byte swapped for another stays UTF-8")
}

/// The 1-based line and column (in bytes) of byte `offset` in `bytes`; `\n`, `\r\n` and a lone
/// `\r` each end a line.
pub(crate) fn line_and_column(bytes: &[u8], offset: usize) -> (usize, usize) {
    let mut line = 1;
    let mut start = 0;
    for (i, &b) in bytes[..offset].iter().enumerate() {
        if b == b'\n' || (b == b'\r' && bytes.get(i + 1) != Some(&b'\n')) {
            line += 1;
            start = i + 1;
        }
    }
    (line, offset - start + 1)
}
