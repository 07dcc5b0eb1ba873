//! Artifacts are written to a temporary file beside their destination and renamed into place, so a
//! killed process leaves either the old file or the new one, never half of one.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// A file being written; it appears at `dest` only when [`AtomicFile::commit`] succeeds.
/// Dropping it uncommitted removes the temporary file.
pub struct AtomicFile {
    dest: PathBuf,
    tmp: PathBuf,
    writer: Option<BufWriter<fs::File>>,
}

/// An I/O error that names the file it happened to (a full disk says only "No space left on
/// device"), of the same kind.
fn naming(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display()))
}

impl AtomicFile {
    pub fn create(dest: impl AsRef<Path>) -> io::Result<Self> {
        let dest = dest.as_ref().to_path_buf();
        if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| naming(dir, e))?;
        }
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dest.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
        let file = fs::File::create(&tmp).map_err(|e| naming(&dest, e))?;
        Ok(Self {
            dest,
            tmp,
            writer: Some(BufWriter::new(file)),
        })
    }

    /// Flushes, syncs and renames into place; on failure the temporary file is removed and the
    /// destination keeps what it had.
    pub fn commit(mut self) -> io::Result<()> {
        let writer = self.writer.take().expect("writer present until commit");
        let result = (|| {
            let file = writer.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            drop(file);
            fs::rename(&self.tmp, &self.dest)
        })();
        result.map_err(|e| {
            let _ = fs::remove_file(&self.tmp);
            naming(&self.dest, e)
        })
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let dest = &self.dest;
        self.writer
            .as_mut()
            .expect("writer present until commit")
            .write(buf)
            .map_err(|e| naming(dest, e))
    }
    fn flush(&mut self) -> io::Result<()> {
        let dest = &self.dest;
        self.writer
            .as_mut()
            .expect("writer present until commit")
            .flush()
            .map_err(|e| naming(dest, e))
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.writer.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `dest` atomically.
pub fn write(dest: impl AsRef<Path>, bytes: &[u8]) -> io::Result<()> {
    let mut f = AtomicFile::create(dest)?;
    f.write_all(bytes)?;
    f.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncommitted_file_leaves_nothing_and_old_content_survives() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out.txt");
        write(&dest, b"old").unwrap();
        {
            let mut f = AtomicFile::create(&dest).unwrap();
            f.write_all(b"new, but never committed").unwrap();
        }
        assert_eq!(fs::read(&dest).unwrap(), b"old");
        let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temporary file was not cleaned up");
        write(&dest, b"new").unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"new");
    }

    /// Issue 17: a failed write named no file and left its temporary file behind. A rename onto
    /// a directory fails at the last step, as a full disk fails at the flush.
    #[test]
    fn a_failed_commit_names_the_file_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("taken");
        fs::create_dir(&dest).unwrap();
        fs::write(dest.join("inside"), b"x").unwrap();
        let e = write(&dest, b"new").unwrap_err().to_string();
        assert!(e.contains("cannot write") && e.contains("taken"), "{e}");
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["taken"], "no temporary file is left");
    }
}
