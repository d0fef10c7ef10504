//! The two ways writing standard output fails that every printing command must survive (issue 43): a reader
//! that closes the pipe (`| head -1`) and a full disk. Each runs a command to its end and returns its output.

use std::process::{Command, Output, Stdio};

/// Runs `cmd` with standard output a pipe that is closed before the first line is read (what `| head -0`
/// does; `| head -1` does the same after one line). Standard error is captured.
pub fn with_stdout_closed(cmd: &mut Command) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the command starts");
    drop(child.stdout.take());
    child.wait_with_output().expect("the command ends")
}

/// Runs `cmd` with standard output on `/dev/full`, where every write fails with "No space left on device".
/// Standard error is captured.
pub fn with_stdout_on_full_disk(cmd: &mut Command) -> Output {
    let full = std::fs::File::options().write(true).open("/dev/full").expect("/dev/full");
    cmd.stdout(Stdio::from(full)).stderr(Stdio::piped()).output().expect("the command runs")
}
