//! The plugin's one write path (issue 43): `completion` into a closed pipe exits 0 quietly, into a full disk
//! with an error and status 1; neither panics.

use std::process::{Command, Stdio};

#[test]
fn completion_survives_a_closed_pipe_and_a_full_disk() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-trainwarden"))
        .args(["completion", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "", "no panic message");

    let full = std::fs::File::options().write(true).open("/dev/full").expect("/dev/full");
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-trainwarden"))
        .args(["completion", "bash"])
        .stdout(Stdio::from(full))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("error: writing standard output: No space left on device"), "{stderr}");
}
