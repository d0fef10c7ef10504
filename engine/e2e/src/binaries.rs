//! The workspace's binaries, run by the tests as a user runs them. A test binary can only name the
//! binaries of its own package (`CARGO_BIN_EXE_…`), and these tests are a package of their own, so the
//! binaries are found in the target directory the tests run from, after a `cargo build` of their package:
//! a no-op when `cargo build --workspace` (as `tests/run-all.sh` does first) left them up to date.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The path of binary `name` of package `package`, built (with the profile the tests were built with) if
/// it is missing or out of date. Fails the test when it cannot be built.
pub fn binary(package: &str, name: &str) -> PathBuf {
    // One build at a time: tests of one binary run in parallel and would queue on cargo's lock anyway.
    static BUILDS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    let exe = std::env::current_exe().expect("the test binary's path");
    // <target>/<profile>/deps/<test binary>
    let profile_dir =
        exe.parent().and_then(|deps| deps.parent()).expect("the test binary is in <profile>/deps");
    let path = profile_dir.join(name);
    let mut built =
        BUILDS.get_or_init(Mutex::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !built.iter().any(|b| b == name) {
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev".to_string(),
            Some(other) => other.to_string(),
        };
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(&cargo)
            .args(["build", "--quiet", "--profile", &profile, "-p", package, "--bin", name])
            .output()
            .unwrap_or_else(|e| panic!("running {cargo} to build {name}: {e}"));
        assert!(
            out.status.success(),
            "building {name} (package {package}) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        built.push(name.to_string());
    }
    assert!(path.exists(), "{} was built but is not at {}", name, path.display());
    path
}
