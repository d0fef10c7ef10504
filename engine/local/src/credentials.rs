//! Per-run credentials: a CA and a serving certificate for the loopback endpoint, a random bearer token, and
//! the private directory that hands them to the training command as files — the same shape Kubeflow gives a
//! pod (`KUBEFLOW_TRAINER_SERVER_CA_CERT` and `KUBEFLOW_TRAINER_SERVER_TOKEN` are file paths).
//!
//! The CA is separate from the serving certificate (not one self-signed leaf) because Python 3.13+ verifies
//! with `VERIFY_X509_STRICT`, which rejects a leaf used as its own trust anchor.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// What one `watch` run serves with and hands to its command.
pub struct Credentials {
    /// PEM of the run's CA: the only certificate the command trusts for the endpoint.
    pub ca_pem: String,
    /// The bearer token the endpoint accepts.
    pub token: String,
    /// The endpoint's TLS configuration: the serving certificate and chain, HTTP/1.1 only.
    pub tls: Arc<rustls::ServerConfig>,
}

impl Credentials {
    /// A fresh CA, a serving certificate for `127.0.0.1`, `::1` and `localhost`, and a 256-bit token.
    pub fn generate() -> Result<Credentials, String> {
        let fail = |what: &str, e: rcgen::Error| format!("generating the {what}: {e}");
        let ca_key = KeyPair::generate().map_err(|e| fail("CA key", e))?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(|e| fail("CA", e))?;
        ca_params.distinguished_name.push(DnType::CommonName, "trainwarden watch (this run only)");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).map_err(|e| fail("CA certificate", e))?;
        let issuer = Issuer::new(ca_params, ca_key);

        let key = KeyPair::generate().map_err(|e| fail("serving key", e))?;
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "::1".to_string(), "localhost".to_string()])
                .map_err(|e| fail("serving certificate", e))?;
        params.distinguished_name.push(DnType::CommonName, "trainwarden watch");
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &issuer).map_err(|e| fail("serving certificate", e))?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS configuration: {e}"))?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone(), CertificateDer::from(ca_cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .map_err(|e| format!("TLS configuration: {e}"))?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];

        let mut random = [0u8; 32];
        getrandom::fill(&mut random).map_err(|e| format!("reading random bytes for the token: {e}"))?;
        let token = random.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Credentials { ca_pem: ca_cert.pem(), token, tls: Arc::new(tls) })
    }
}

/// A directory only this user can read, removed on drop, holding `ca.crt` and `token`.
pub struct RunDir {
    /// The directory itself (`$TMPDIR/trainwarden-watch-<random>`, mode 0700).
    pub path: PathBuf,
    /// `ca.crt` in it: the CA as PEM; the command gets its path in `KUBEFLOW_TRAINER_SERVER_CA_CERT`.
    pub ca_file: PathBuf,
    /// `token` in it: the bearer token; the command gets its path in `KUBEFLOW_TRAINER_SERVER_TOKEN`.
    pub token_file: PathBuf,
    /// `annotations` in it: what a pod's downward-API volume of its annotations would hold, empty until a
    /// checkpoint is requested; the command gets its path in `TRAINWARDEN_ANNOTATIONS_FILE`
    /// (sdk/python/PROTOCOL.md §2).
    pub annotations_file: PathBuf,
}

impl RunDir {
    /// Creates the directory and writes the CA and the token into it (files mode 0600, never overwritten).
    pub fn create(credentials: &Credentials) -> Result<RunDir, String> {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| format!("reading random bytes: {e}"))?;
        let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let path = std::env::temp_dir().join(format!("trainwarden-watch-{suffix}"));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| format!("creating {}: {e}", path.display()))?;
        let dir = RunDir {
            ca_file: path.join("ca.crt"),
            token_file: path.join("token"),
            annotations_file: path.join("annotations"),
            path,
        };
        write_private(&dir.ca_file, credentials.ca_pem.as_bytes())?;
        write_private(&dir.token_file, credentials.token.as_bytes())?;
        write_private(&dir.annotations_file, b"")?;
        Ok(dir)
    }

    /// Replaces the annotations file at once (a write to `annotations.tmp`, renamed over it: a reader sees
    /// the old file or the new one, as with the kubelet's atomic writer): `request`, the value of the
    /// checkpoint-request annotation, or nothing.
    pub fn write_annotations(&self, request: Option<&str>) -> Result<(), String> {
        let tmp = self.path.join("annotations.tmp");
        let _ = fs::remove_file(&tmp);
        let text = request.map(annotation_line).unwrap_or_default();
        write_private(&tmp, text.as_bytes())?;
        fs::rename(&tmp, &self.annotations_file)
            .map_err(|e| format!("replacing {}: {e}", self.annotations_file.display()))
    }
}

/// The annotations file's line for the checkpoint request `value` (the kubelet's format, Go's `%q` of the
/// value; for JSON without raw control characters escaping `\` and `"` is enough for `strconv.Unquote`).
fn annotation_line(value: &str) -> String {
    let quoted = value.replace('\\', "\\\\").replace('"', "\\\"");
    format!("{}=\"{quoted}\"", trainwarden_core::CHECKPOINT_REQUEST_ANNOTATION)
}

fn write_private(path: &Path, contents: &[u8]) -> Result<(), String> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("creating {}: {e}", path.display()))?;
    file.write_all(contents).map_err(|e| format!("writing {}: {e}", path.display()))
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_annotation_line_quotes_as_go_does_for_json() {
        let line = super::annotation_line(r#"{"id":7,"reason":"say \"hi\" \\ bye"}"#);
        assert_eq!(
            line,
            r#"trainwarden.dev/checkpoint-request="{\"id\":7,\"reason\":\"say \\\"hi\\\" \\\\ bye\"}""#
        );
    }
}
