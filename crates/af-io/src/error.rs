use std::path::{Path, PathBuf};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ReadError {
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: invalid UTF-8 at byte offset {offset}")]
    Utf8 {
        path: PathBuf,
        line: usize,
        offset: usize,
    },
    #[error("{path}:{line}:{column}: malformed JSON: {message}")]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// A record (CSV row, JSONL line, CoNLL-U token line) that is well-formed text but wrong.
    #[error("{path}:{line}: {message}")]
    Record {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// A problem with the file as a whole: empty, missing columns.
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl ReadError {
    pub(crate) fn json(path: &Path, e: &serde_json::Error, line_offset: usize) -> Self {
        ReadError::Json {
            path: path.to_path_buf(),
            line: e.line() + line_offset,
            column: e.column(),
            message: crate::text::json_message(e),
        }
    }
}
