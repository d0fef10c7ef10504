//! Standard output, for every command of the plugin: a closed pipe (`kubectl trainwarden get | head -1`)
//! ends the command quietly with status 0; any other failure to write (a full disk, `/dev/full`) is an error
//! on stderr with status 1, never a panic and never ignored (`get --watch` would otherwise redraw for nobody).

use std::io::{self, Write};

/// Writes `text` to standard output and flushes it; stops the command as the module says when that fails.
pub(crate) fn write(text: &[u8]) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_all(text).and_then(|()| out.flush()) {
        failed(&e);
    }
}

/// Ends the command after standard output failed: quietly with 0 for a closed pipe, else with the error.
pub(crate) fn failed(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    let _ = writeln!(io::stderr(), "error: writing standard output: {e}");
    std::process::exit(1);
}
