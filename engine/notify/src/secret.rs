//! Secret values and where they come from.
//!
//! Policies only *reference* Secrets ([`SecretRef`]: namespace, name, key); a [`SecretResolver`] turns a
//! reference into a [`SecretValue`] at delivery time, so a rotated Secret is picked up by the next message.
//! Resolvers: [`EnvSecrets`] and [`FileSecrets`] (replay and local use) and [`LocalSecrets`] (environment
//! first, then files). The controller's resolver reads Kubernetes Secrets and lives with the controller
//! (`trainwarden_controller::secrets::KubeSecrets`), so this crate, and local mode with it, does not link kube.
//!
//! A [`SecretValue`] prints as `[redacted]` through `Debug` and `Display`, and no error here ever contains a
//! value: errors name the reference, never what it resolved to. This module reads the environment or files;
//! it sends nothing.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use trainwarden_core::SecretRef;

/// A secret string. Only [`SecretValue::expose`] reveals it; formatting never does.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    /// A value as given (no checks: for tests and for values that did not come from a Secret store).
    pub fn new(value: impl Into<String>) -> Self {
        SecretValue(value.into())
    }

    /// A value read from a Secret store as bytes: UTF-8 text without the trailing newline an editor or `echo`
    /// adds, and not empty. Errors name `reference`.
    pub fn from_secret_bytes(reference: &SecretRef, bytes: Vec<u8>) -> Result<SecretValue, SecretError> {
        checked(reference, bytes)
    }

    /// The value, for the one place that must use it (a request URL, an SMTP login, an HMAC key).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue([redacted])")
    }
}

impl fmt::Display for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Why a reference could not be resolved. Messages name the reference, never a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// No such Secret, key, variable or file. Not retried.
    #[error("secret {reference} not found: {detail}")]
    NotFound {
        /// The reference, as `namespace/name[key]`.
        reference: String,
        /// Where it was looked for, e.g. `environment variable … is not set`.
        detail: String,
    },
    /// The value is not UTF-8. Not retried.
    #[error("secret {reference} is not valid UTF-8 text")]
    NotText {
        /// The reference, as `namespace/name[key]`.
        reference: String,
    },
    /// The value is empty (or only a newline). Not retried.
    #[error("secret {reference} is empty")]
    Empty {
        /// The reference, as `namespace/name[key]`.
        reference: String,
    },
    /// The store could not be read now (an I/O or API error); retried.
    #[error("secret {reference} could not be read: {detail}")]
    Unavailable {
        /// The reference, as `namespace/name[key]`.
        reference: String,
        /// What failed (never a value).
        detail: String,
    },
    /// The API server refused to show the Secret (401/403: missing RBAC). Not retried: waiting does not
    /// grant permissions.
    #[error("secret {reference} may not be read: {detail}")]
    Forbidden {
        /// The reference, as `namespace/name[key]`.
        reference: String,
        /// The API server's reason.
        detail: String,
    },
}

/// What [`SecretResolver::resolve`] returns: a boxed future of the value, so the trait stays object-safe.
pub type SecretFuture<'a> = Pin<Box<dyn Future<Output = Result<SecretValue, SecretError>> + Send + 'a>>;

/// Turns a Secret reference into its value.
pub trait SecretResolver: Send + Sync + 'static {
    /// Looks `reference` up; errors name the reference, never a value.
    fn resolve<'a>(&'a self, reference: &'a SecretRef) -> SecretFuture<'a>;
}

fn checked(reference: &SecretRef, bytes: Vec<u8>) -> Result<SecretValue, SecretError> {
    let text =
        String::from_utf8(bytes).map_err(|_| SecretError::NotText { reference: reference.to_string() })?;
    // A value written with `echo` or a text editor ends in a newline nobody meant (URLs and passwords never do).
    let text = text.trim_end_matches(['\n', '\r']).to_string();
    if text.is_empty() {
        return Err(SecretError::Empty { reference: reference.to_string() });
    }
    Ok(SecretValue(text))
}

/// Secrets from environment variables: `TRAINWARDEN_SECRET_<NAMESPACE>_<NAME>_<KEY>`, upper-cased, every
/// character other than A-Z and 0-9 replaced by `_` (so `fraud/slack-hook[url]` is
/// `TRAINWARDEN_SECRET_FRAUD_SLACK_HOOK_URL`).
#[derive(Clone, Debug, Default)]
pub struct EnvSecrets;

impl EnvSecrets {
    /// The variable that holds `reference`'s value, e.g. `TRAINWARDEN_SECRET_FRAUD_SLACK_HOOK_URL`.
    pub fn variable(reference: &SecretRef) -> String {
        let part = |s: &str| {
            s.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' })
                .collect::<String>()
        };
        format!(
            "TRAINWARDEN_SECRET_{}_{}_{}",
            part(&reference.namespace),
            part(&reference.name),
            part(&reference.key)
        )
    }

    fn lookup(reference: &SecretRef) -> Result<SecretValue, SecretError> {
        let var = Self::variable(reference);
        match std::env::var_os(&var) {
            None => Err(SecretError::NotFound {
                reference: reference.to_string(),
                detail: format!("environment variable {var} is not set"),
            }),
            Some(v) => checked(reference, v.into_encoded_bytes()),
        }
    }
}

impl SecretResolver for EnvSecrets {
    fn resolve<'a>(&'a self, reference: &'a SecretRef) -> SecretFuture<'a> {
        Box::pin(async move { Self::lookup(reference) })
    }
}

/// Secrets from files laid out like mounted Secret volumes: `<root>/<namespace>/<name>/<key>`.
#[derive(Clone, Debug)]
pub struct FileSecrets {
    /// The directory holding `<namespace>/<name>/<key>` files (`--secrets-dir`).
    pub root: PathBuf,
}

impl FileSecrets {
    /// Files under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FileSecrets { root: root.into() }
    }

    /// The file for `reference`; `None` when a part is empty, `.`, `..` or holds a path separator.
    pub fn path(&self, reference: &SecretRef) -> Option<PathBuf> {
        // Names come from policies: refuse anything that could step out of the root.
        let safe = |s: &str| !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0']);
        (safe(&reference.namespace) && safe(&reference.name) && safe(&reference.key))
            .then(|| self.root.join(&reference.namespace).join(&reference.name).join(&reference.key))
    }

    async fn lookup(&self, reference: &SecretRef) -> Result<SecretValue, SecretError> {
        let path = self.path(reference).ok_or_else(|| SecretError::NotFound {
            reference: reference.to_string(),
            detail: "not a usable file name".into(),
        })?;
        match tokio::fs::read(&path).await {
            Ok(bytes) => checked(reference, bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SecretError::NotFound {
                reference: reference.to_string(),
                detail: format!("no file {}", path.display()),
            }),
            Err(e) => Err(SecretError::Unavailable {
                reference: reference.to_string(),
                detail: format!("{}: {}", path.display(), e.kind()),
            }),
        }
    }
}

impl SecretResolver for FileSecrets {
    fn resolve<'a>(&'a self, reference: &'a SecretRef) -> SecretFuture<'a> {
        Box::pin(self.lookup(reference))
    }
}

/// Replay and local use: the environment ([`EnvSecrets`]) first, then files ([`FileSecrets`]) if a directory
/// is given.
#[derive(Clone, Debug, Default)]
pub struct LocalSecrets {
    /// Where to look when the environment has no value (`--secrets-dir`); `None`: the environment only.
    pub files: Option<FileSecrets>,
}

impl SecretResolver for LocalSecrets {
    fn resolve<'a>(&'a self, reference: &'a SecretRef) -> SecretFuture<'a> {
        Box::pin(async move {
            match (EnvSecrets::lookup(reference), &self.files) {
                (Err(SecretError::NotFound { detail, .. }), Some(files)) => match files
                    .lookup(reference)
                    .await
                {
                    Err(SecretError::NotFound { detail: file_detail, .. }) => Err(SecretError::NotFound {
                        reference: reference.to_string(),
                        detail: format!("{detail}, and {file_detail}"),
                    }),
                    other => other,
                },
                (result, _) => result,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(ns: &str, name: &str, key: &str) -> SecretRef {
        SecretRef { namespace: ns.into(), name: name.into(), key: key.into() }
    }

    #[test]
    fn values_never_format() {
        let v = SecretValue::new("hunter2");
        assert_eq!(format!("{v}"), "[redacted]");
        assert_eq!(format!("{v:?}"), "SecretValue([redacted])");
        assert_eq!(format!("{:?}", Some(v.clone())), "Some(SecretValue([redacted]))");
        assert_eq!(v.expose(), "hunter2");
    }

    #[test]
    fn environment_variable_names() {
        assert_eq!(
            EnvSecrets::variable(&reference("fraud", "slack-hook", "url")),
            "TRAINWARDEN_SECRET_FRAUD_SLACK_HOOK_URL"
        );
        assert_eq!(EnvSecrets::variable(&reference("a.b", "c", "d_e")), "TRAINWARDEN_SECRET_A_B_C_D_E");
    }

    #[tokio::test]
    async fn files_are_read_trimmed_and_confined_to_the_root() {
        let root = std::env::temp_dir().join(format!("tw-secrets-{}", std::process::id()));
        std::fs::create_dir_all(root.join("fraud/smtp")).unwrap();
        std::fs::write(root.join("fraud/smtp/password"), "s3cret\n").unwrap();
        std::fs::write(root.join("fraud/smtp/empty"), "\n").unwrap();
        let files = FileSecrets::new(&root);
        let v = files.resolve(&reference("fraud", "smtp", "password")).await.unwrap();
        assert_eq!(v.expose(), "s3cret");
        let e = files.resolve(&reference("fraud", "smtp", "empty")).await.unwrap_err();
        assert_eq!(e.to_string(), "secret fraud/smtp[empty] is empty");
        let e = files.resolve(&reference("fraud", "..", "x")).await.unwrap_err();
        assert!(e.to_string().contains("not a usable file name"), "{e}");
        let e = LocalSecrets { files: Some(files) }
            .resolve(&reference("fraud", "smtp", "nope"))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("TRAINWARDEN_SECRET_FRAUD_SMTP_NOPE is not set, and no file"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
