//! One write path for every command (issue 43): a closed pipe ends a command quietly with status 0 (as the
//! book promises, `validate … | head -1` included); any other failure to write standard output is an
//! error with status 2, never a panic.

use std::path::Path;
use std::process::Command;

use trainwarden_testkit::output::{with_stdout_closed, with_stdout_on_full_disk};

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The commands that print, each with arguments that print more than one line.
const PRINTING: [&[&str]; 6] = [
    &["crd"],
    &["detectors"],
    &["functions"],
    &["validate", "policies"],
    &["test", "policies/tests/plateau.test.yaml"],
    &[
        "replay",
        "--policy",
        "examples/friday-night-stall/policy.yaml",
        "examples/friday-night-stall/stream.jsonl",
    ],
];

fn trainwarden(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_trainwarden"));
    cmd.args(args).current_dir(repo());
    cmd
}

#[test]
fn a_full_disk_is_an_error_with_status_2_and_no_panic() {
    for args in PRINTING {
        let out = with_stdout_on_full_disk(&mut trainwarden(args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            stderr.contains("error: writing standard output: No space left on device"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_closed_pipe_ends_every_command_quietly_with_status_0() {
    for args in PRINTING {
        // `| head -0`: the pipe closes before the first line (what `| head -1` does after the first).
        let out = with_stdout_closed(&mut trainwarden(args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked") && !stderr.contains("error"), "{args:?}: {stderr}");
    }
}
