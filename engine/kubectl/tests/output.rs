//! The plugin's one write path (issue 43): `completion` into a closed pipe exits 0 quietly, into a full disk
//! with an error and status 1; neither panics.

use std::process::Command;

use trainwarden_testkit::output::{with_stdout_closed, with_stdout_on_full_disk};

fn completion() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-trainwarden"));
    cmd.args(["completion", "bash"]);
    cmd
}

#[test]
fn completion_survives_a_closed_pipe_and_a_full_disk() {
    let out = with_stdout_closed(&mut completion());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "", "no panic message");

    let out = with_stdout_on_full_disk(&mut completion());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("error: writing standard output: No space left on device"), "{stderr}");
}

/// Issue 43: against an API server that does not answer, the plugin said `client error (Connect)`, naming
/// neither the server nor why.
#[test]
fn an_api_server_that_does_not_answer_is_named_with_the_cause() {
    let dir = std::env::temp_dir().join(format!("kubectl-trainwarden-unreachable-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    // Port 9 (discard) on loopback: nothing listens, the connection is refused.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:9\"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u, namespace: ml}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-trainwarden"))
        .args(["--kubeconfig", kubeconfig.to_str().unwrap(), "get"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("listing TrainJobs: no answer from the API server at https://127.0.0.1:9/"),
        "{stderr}"
    );
    assert!(stderr.contains("Connection refused"), "the cause: {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
