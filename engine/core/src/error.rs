//! Errors that point at the input: a field path for objects, line:column for scripts and files.

use std::fmt;

/// One problem in a policy or test document, at a field path such as `spec.rules[1].with.minDelta`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FieldError {
    /// Where the problem is: a field path such as `spec.rules[1].with.minDelta`.
    pub path: String,
    /// What is wrong there.
    pub message: String,
    /// Where the field is in the file, when the document came from one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
}

/// A place in a file: 1-based line and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl FieldError {
    /// An error at `path`.
    /// An error at `path`. Long tokens in either are clipped ([`clip_tokens`]): an input can be huge, and
    /// the message only needs to show which one it was.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError { path: clip_tokens(&path.into()), message: clip_tokens(&message.into()), position: None }
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
    /// The file the document was read from, for `file:line:column` before each positioned error.
    pub file: Option<String>,
    /// The problems, in the order they were found.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors.len();
        write!(f, "{}: {} error{}", self.document, n, if n == 1 { "" } else { "s" })?;
        for e in &self.errors {
            match (&self.file, e.position) {
                (Some(file), Some(p)) => write!(f, "\n  - {file}:{}:{}: {e}", p.line, p.column)?,
                (None, Some(p)) => write!(f, "\n  - {}:{}: {e}", p.line, p.column)?,
                (_, None) => write!(f, "\n  - {e}")?,
            }
        }
        Ok(())
    }
}

/// The longest run of non-space characters a message echoes; a longer one is cut, with its size.
pub const MAX_ECHOED_TOKEN: usize = 80;

/// Cuts every whitespace-separated token longer than [`MAX_ECHOED_TOKEN`] characters to that length, with
/// `…(N bytes)` after it, so a 50 MB identifier is named without being printed.
pub fn clip_tokens(text: &str) -> String {
    if text.len() <= MAX_ECHOED_TOKEN {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len().min(4 * MAX_ECHOED_TOKEN));
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (token, after) = rest.split_at(end);
        match token.char_indices().nth(MAX_ECHOED_TOKEN) {
            Some((cut, _)) => {
                out.push_str(&token[..cut]);
                out.push_str(&format!("…({} bytes)", token.len()));
            }
            None => out.push_str(token),
        }
        let spaces = after.find(|c: char| !c.is_whitespace()).unwrap_or(after.len());
        out.push_str(&after[..spaces]);
        rest = &after[spaces..];
    }
    out
}

/// An error and its causes, `a: b: c`, each cause once: HTTP clients' own messages leave out why a
/// connection failed, and some repeat their source's text in their own.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);
    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn an_error_chain_names_every_cause_once() {
        let refused = Layer("Connection refused (os error 111)", None);
        let connect = Layer("tcp connect error: Connection refused (os error 111)", Some(Box::new(refused)));
        let top = Layer(
            "error sending request",
            Some(Box::new(Layer("client error (Connect)", Some(Box::new(connect))))),
        );
        assert_eq!(
            error_chain(&top),
            "error sending request: client error (Connect): tcp connect error: Connection refused (os error 111)"
        );
        assert_eq!(error_chain(&Layer("alone", None)), "alone");
    }

    #[test]
    fn long_tokens_are_clipped_with_their_size() {
        let long = "x".repeat(5_000);
        let clipped = clip_tokens(&format!("unknown field {long} here"));
        assert_eq!(clipped, format!("unknown field {}…(5000 bytes) here", "x".repeat(MAX_ECHOED_TOKEN)));
        assert_eq!(clip_tokens("short text"), "short text");
        let e = FieldError::new(format!("spec.{long}"), "unknown field");
        assert!(e.path.len() < 120, "{}", e.path);
    }

    #[test]
    fn clipping_respects_character_boundaries() {
        let long = "é".repeat(200);
        let clipped = clip_tokens(&long);
        assert!(clipped.starts_with(&"é".repeat(MAX_ECHOED_TOKEN)));
        assert!(clipped.ends_with("…(400 bytes)"));
    }
}
