//! The CRDs committed under `crds/` are exactly what the code generates.

use std::path::{Path, PathBuf};

use trainwarden_kube::crd;

const REGENERATE: &str = "regenerate them with\n\n    cargo run -p trainwarden -- crd --write crds/ --write charts/trainwarden/crds/\n\nand commit the result";

fn crds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds")
}

#[test]
fn committed_crds_match_the_code() {
    let dir = crds_dir();
    let mut stale = Vec::new();
    for c in crd::crds() {
        let (file, generated) = crd::crd_file(&c).expect("serialize CRD");
        let path = dir.join(&file);
        match std::fs::read_to_string(&path) {
            Ok(committed) if committed == generated => {}
            Ok(committed) => {
                let line = committed
                    .lines()
                    .zip(generated.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()))
                    + 1;
                stale.push(format!(
                    "crds/{file} differs from the generated CRD (first difference at line {line})"
                ));
            }
            Err(e) => stale.push(format!("crds/{file} cannot be read ({e})")),
        }
    }
    assert!(
        stale.is_empty(),
        "{}\nThe CRDs are generated from engine/kube and engine/core; {REGENERATE}.",
        stale.join("\n")
    );
}

#[test]
fn no_leftover_trainwarden_crds() {
    let expected: Vec<String> = crd::crds().iter().map(|c| crd::crd_file(c).unwrap().0).collect();
    let leftovers: Vec<String> = std::fs::read_dir(crds_dir())
        .expect("crds/ exists")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.ends_with(".trainwarden.dev.yaml") && !expected.contains(f))
        .collect();
    assert!(
        leftovers.is_empty(),
        "crds/ holds {leftovers:?}, which the code no longer generates (a renamed CRD?); delete them, then {REGENERATE}."
    );
}
