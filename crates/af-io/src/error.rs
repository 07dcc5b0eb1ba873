//! One error format for every reader (issue 44): `file:line:column: what`, with the column left
//! out where a reader cannot know it (a CSV row's length) and the line too for the file as a
//! whole. Lines and columns count from 1; a column is the byte in its line, as serde_json counts.

use std::fmt;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Where a problem is: `file`, `file:line` or `file:line:column`.
pub struct Place<'a> {
    pub path: &'a Path,
    pub line: Option<usize>,
    pub column: Option<usize>,
}

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        Ok(())
    }
}

/// `file:line[:column]`, the same text every reader's errors start with.
pub fn place(path: &Path, line: usize, column: Option<usize>) -> String {
    Place {
        path,
        line: Some(line),
        column,
    }
    .to_string()
}

#[derive(Debug, Error)]
pub enum ReadError {
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: invalid UTF-8 at byte offset {offset}", place(path, *line, Some(*column)))]
    Utf8 {
        path: PathBuf,
        line: usize,
        column: usize,
        offset: usize,
    },
    #[error("{}: malformed JSON: {message}", place(path, *line, Some(*column)))]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// A record (CSV row, JSONL line, CoNLL-U token line) that is well-formed text but wrong;
    /// `column` where the wrong field starts.
    #[error("{}: {message}", place(path, *line, *column))]
    Record {
        path: PathBuf,
        line: usize,
        column: Option<usize>,
        message: String,
    },
    /// A problem with the file as a whole: empty, missing columns.
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

impl ReadError {
    /// A serde_json error: malformed JSON, or (a data error) well-formed JSON of the wrong shape.
    pub(crate) fn json(path: &Path, e: &serde_json::Error, line_offset: usize) -> Self {
        if e.is_data() {
            return ReadError::record(
                path,
                e.line() + line_offset,
                Some(e.column()),
                crate::text::json_message(e),
            );
        }
        ReadError::Json {
            path: path.to_path_buf(),
            line: e.line() + line_offset,
            column: e.column(),
            message: crate::text::json_message(e),
        }
    }

    /// A record error at `line` (and `column`, where known).
    pub(crate) fn record(
        path: &Path,
        line: usize,
        column: Option<usize>,
        message: impl Into<String>,
    ) -> Self {
        ReadError::Record {
            path: path.to_path_buf(),
            line,
            column,
            message: message.into(),
        }
    }
}
