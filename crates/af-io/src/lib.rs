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

/// Reads a whole file as UTF-8, naming the line and byte offset of the first bad byte.
pub fn read_utf8(path: &Path) -> Result<String, ReadError> {
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        ReadError::Utf8 {
            path: path.to_path_buf(),
            line: line_at(e.as_bytes(), offset),
            offset,
        }
    })
}

/// The 1-based line of byte `offset` in `bytes`.
pub(crate) fn line_at(bytes: &[u8], offset: usize) -> usize {
    bytes[..offset].iter().filter(|b| **b == b'\n').count() + 1
}
