//! Errors that point at the input: a field path for objects, line:column for scripts and files.

use std::fmt;

/// One problem in a policy or test document, at a field path such as `spec.rules[1].with.minDelta`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FieldError {
    /// Where the problem is: a field path such as `spec.rules[1].with.minDelta`.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl FieldError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError { path: path.into(), message: message.into() }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in one document, reported together so a user fixes them in one pass.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct FieldErrors {
    /// What was checked, for example `policies/plateau.yaml` or `ProgressPolicy fraud/weekend-safe`.
    pub document: String,
    /// The problems, in the order they were found.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors.len();
        write!(f, "{}: {} error{}", self.document, n, if n == 1 { "" } else { "s" })?;
        for e in &self.errors {
            write!(f, "\n  - {e}")?;
        }
        Ok(())
    }
}
