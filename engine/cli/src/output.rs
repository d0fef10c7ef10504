//! Standard output and written files, for every command: one write path.
//!
//! * A closed pipe (`trainwarden validate policies/ | head -1`) is the normal end of a pipeline: the command
//!   stops at once, quietly, with status 0 (what the book's command reference promises), as if it had finished.
//! * Any other failure to write (a full disk, `/dev/full`, a revoked terminal) is an error, never a panic:
//!   `error: writing standard output: …` on stderr and status 2, so output cut short never passes for a
//!   verdict.
//! * A file a command writes (`backtest --html FILE`) is written next to it under a temporary name and renamed
//!   over it only once whole ([`AtomicFile`]): a failed or interrupted run leaves the old file as it was.
//!
//! Print with [`outln!`] / [`out!`] (which stop the command on a failure as above) or through [`stdout`] and
//! [`failed`] where a writer is needed; [`finish`] flushes at the end of `main`.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Writes to standard output; stops the command as the module says when that fails.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_fmt(format_args!($($arg)*))
    };
}

/// [`out!`] with a newline.
macro_rules! outln {
    () => {
        $crate::output::write_fmt(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};

/// Writes formatted text to standard output; see [`out!`].
pub(crate) fn write_fmt(args: std::fmt::Arguments<'_>) {
    if let Err(e) = io::stdout().lock().write_fmt(args) {
        failed(&e);
    }
}

/// Standard output, buffered, for commands that write a lot (map its errors with [`failed`]).
pub(crate) fn stdout() -> io::BufWriter<io::StdoutLock<'static>> {
    io::BufWriter::with_capacity(1 << 16, io::stdout().lock())
}

/// Flushes standard output at the end of a command: a write error still pending is reported as any other.
pub(crate) fn finish() {
    if let Err(e) = io::stdout().lock().flush() {
        failed(&e);
    }
}

/// Ends the command after standard output failed: quietly with 0 for a closed pipe, else with the error and
/// status 2.
pub(crate) fn failed(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    // stderr may be gone too; there is nothing else to tell then.
    let _ = writeln!(io::stderr(), "error: writing standard output: {e}");
    std::process::exit(2);
}

/// A file replaced only once its new content is whole: the content goes to a temporary file beside it
/// (created at once, so an unwritable place fails before any work), which [`AtomicFile::commit`] renames
/// over the target; dropped without a commit, the temporary file is removed and the target never touched.
pub(crate) struct AtomicFile {
    target: PathBuf,
    temporary: PathBuf,
    file: Option<File>,
}

impl AtomicFile {
    /// Creates the temporary file beside `target` (same directory, so the rename stays on one file system).
    pub(crate) fn create(target: &Path) -> io::Result<AtomicFile> {
        if target.is_dir() {
            return Err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory"));
        }
        let name = target
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "names no file"))?
            .to_string_lossy();
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let file = File::options().write(true).create_new(true).open(&temporary)?;
        Ok(AtomicFile { target: target.to_path_buf(), temporary, file: Some(file) })
    }

    /// Writes `content`, syncs it and renames it over the target.
    pub(crate) fn commit(mut self, content: &[u8]) -> io::Result<()> {
        let mut file = self.file.take().expect("committed once");
        file.write_all(content)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&self.temporary, &self.target)
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // Not committed, or the commit failed: the target keeps its old content, and no temporary is left.
        let _ = std::fs::remove_file(&self.temporary);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("tw-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("report.html");
        std::fs::write(&target, "old").unwrap();
        // A run that fails after the file was opened leaves the old content and no temporary file.
        drop(AtomicFile::create(&target).unwrap());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left");
        AtomicFile::create(&target).unwrap().commit(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        assert!(AtomicFile::create(&dir).is_err(), "a directory is not a file to write");
        assert!(AtomicFile::create(&dir.join("missing/report.html")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
