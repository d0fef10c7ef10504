//! `trainwarden crd`: print or write the ProgressPolicy, ClusterProgressPolicy and ProgressPolicyException CRDs generated from the code.

use std::path::PathBuf;

use trainwarden_kube::crd;

/// Prints the CRDs as one multi-document YAML stream, or writes one file per CRD into each `write`
/// directory (`<plural>.<group>.yaml`; the repository keeps `crds/` and the chart's copy) and names the files
/// on stderr.
pub(crate) fn crd(write: &[PathBuf]) -> Result<bool, String> {
    if write.is_empty() {
        crate::output::out!("{}", crd::crds_yaml().map_err(|e| format!("serializing the CRDs: {e}"))?);
    }
    for dir in write {
        {
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
