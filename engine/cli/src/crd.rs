//! `trainwarden crd`: print or write the ProgressPolicy / ClusterProgressPolicy CRDs generated from the code.

use std::path::Path;

use trainwarden_kube::crd;

/// Prints both CRDs as one multi-document YAML stream, or, with `write`, writes one file per CRD into that
/// directory (`<plural>.<group>.yaml`) and names the files on stderr.
pub fn crd(write: Option<&Path>) -> Result<bool, String> {
    match write {
        None => {
            print!("{}", crd::crds_yaml().map_err(|e| format!("serializing the CRDs: {e}"))?);
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            for c in crd::crds() {
                let (file, yaml) = crd::crd_file(&c).map_err(|e| format!("serializing the CRDs: {e}"))?;
                let path = dir.join(file);
                std::fs::write(&path, yaml).map_err(|e| format!("{}: {e}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    Ok(true)
}
