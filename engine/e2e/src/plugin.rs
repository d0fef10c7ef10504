//! What the plugin's real-API tests share: running the plugin binary as a user does, and golden files
//! (`tests/golden/`).

use std::path::PathBuf;
use std::process::Command;

use trainwarden_testkit::apiserver as support;

/// Runs the plugin binary against the test plane in the test's namespace: (succeeded, stdout, stderr).
pub fn plugin(ctx: &support::Ctx, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(crate::binaries::binary("kubectl-trainwarden", "kubectl-trainwarden"))
        .arg("--kubeconfig")
        .arg(&ctx.plane.kubeconfig)
        .args(["-n", &ctx.ns])
        .args(args)
        .output()
        .expect("run kubectl-trainwarden");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Compares with `tests/golden/<name>` (or rewrites it under `TRAINWARDEN_BLESS=1`).
pub fn assert_golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var("TRAINWARDEN_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(actual, expected, "`get` differs from {} (TRAINWARDEN_BLESS=1 rewrites it)", path.display());
}
