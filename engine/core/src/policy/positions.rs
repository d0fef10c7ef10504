//! Where each field of a YAML policy file is, so that every error can say line:column as well as the field
//! path. The YAML is read once more, as parser events, and each mapping key and value is recorded under
//! its field path (`spec.rules[0].for`), per document.

use std::collections::HashMap;

use serde_saphyr::granit_parser::{Event, Parser};

use crate::error::Position;

/// The positions of one document's fields.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DocumentPositions {
    /// The file (as given on the command line), for `file:line:column`.
    pub file: String,
    fields: HashMap<String, Field>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Field {
    /// Where the key is (for an entry of a mapping).
    key: Option<Position>,
    /// Where the value starts.
    value: Position,
}

impl DocumentPositions {
    /// Where an error at `path` should point: the key for an unknown field, otherwise the value. A path
    /// that is not in the file (a missing field) points at its nearest ancestor that is, a missing top-level
    /// field (`spec`) at the document itself.
    pub fn of(&self, path: &str, at_key: bool) -> Option<Position> {
        let mut path = path;
        loop {
            if let Some(f) = self.fields.get(path) {
                return Some(if at_key { f.key.unwrap_or(f.value) } else { f.value });
            }
            path = match path.rfind(['.', '[']) {
                Some(cut) => &path[..cut],
                None if !path.is_empty() => "",
                None => return None,
            };
        }
    }
}

enum Frame {
    Mapping { path: String, pending_key: Option<(String, Position)> },
    Sequence { path: String, next: usize },
}

/// The positions of the fields of every document in `text`, in document order. A YAML error ends the scan;
/// the documents read so far are returned (the parse error itself is reported by the deserializer).
pub(crate) fn scan(text: &str, file: &str) -> Vec<DocumentPositions> {
    let mut documents = Vec::new();
    let mut current: Option<DocumentPositions> = None;
    let mut stack: Vec<Frame> = Vec::new();
    // The reader skips a document that is empty or a bare null (`---` twice, an empty Helm template), so
    // the document indices must skip it too.
    let mut root_is_null = false;
    for event in Parser::new_from_str(text) {
        let Ok((event, span)) = event else { break };
        let at = Position { line: span.start.line(), column: span.start.col() + 1 };
        match event {
            Event::DocumentStart(..) => {
                current = Some(DocumentPositions { file: file.to_string(), fields: HashMap::new() });
                stack.clear();
                root_is_null = false;
            }
            Event::DocumentEnd => {
                if !root_is_null {
                    documents.extend(current.take());
                }
                current = None;
            }
            Event::Scalar(ref value, ..)
                if stack.is_empty() && matches!(value.as_ref(), "" | "~" | "null" | "Null" | "NULL") =>
            {
                root_is_null = true;
            }
            Event::Scalar(value, ..) => {
                // A scalar is either a mapping key or a value (of a mapping entry, a sequence item or the root).
                if let Some(Frame::Mapping { path, pending_key }) = stack.last_mut()
                    && pending_key.is_none()
                {
                    let key = if path.is_empty() { value.to_string() } else { format!("{path}.{value}") };
                    *pending_key = Some((key, at));
                    continue;
                }
                if let (Some(doc), Some((path, key))) = (current.as_mut(), value_path(&mut stack)) {
                    doc.fields.insert(path, Field { key, value: at });
                }
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let (path, key) = value_path(&mut stack).unwrap_or_default();
                if let Some(doc) = current.as_mut() {
                    doc.fields.insert(path.clone(), Field { key, value: at });
                }
                stack.push(if matches!(event, Event::MappingStart(..)) {
                    Frame::Mapping { path, pending_key: None }
                } else {
                    Frame::Sequence { path, next: 0 }
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
            }
            Event::Alias(..) => {
                // An alias is a value; its fields are where the anchor is. Consume the key it completes.
                value_path(&mut stack);
            }
            _ => {}
        }
    }
    documents.extend(current.take());
    documents
}

/// The path of the value that starts now, consuming the pending key or the sequence index.
fn value_path(stack: &mut [Frame]) -> Option<(String, Option<Position>)> {
    match stack.last_mut() {
        None => Some((String::new(), None)),
        Some(Frame::Mapping { pending_key, .. }) => pending_key.take().map(|(k, at)| (k, Some(at))),
        Some(Frame::Sequence { path, next }) => {
            let p = format!("{path}[{next}]");
            *next += 1;
            Some((p, None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_are_found_by_field_path() {
        let text = "apiVersion: v1\nspec:\n  rules:\n    - name: a\n      for: 5\n    - {name: b, actions: [{suspend: {}}]}\n---\nkind: X\n";
        let docs = scan(text, "p.yaml");
        assert_eq!(docs.len(), 2);
        let at =
            |doc: &DocumentPositions, path: &str, key: bool| doc.of(path, key).map(|p| (p.line, p.column));
        assert_eq!(at(&docs[0], "spec.rules[0].for", false), Some((5, 12)));
        assert_eq!(at(&docs[0], "spec.rules[0].for", true), Some((5, 7)));
        assert_eq!(at(&docs[0], "spec.rules[1].name", false), Some((6, 14)));
        assert_eq!(at(&docs[0], "spec.rules[1].actions[0].suspend", true), Some((6, 28)));
        // A missing field points at its parent.
        assert_eq!(at(&docs[0], "spec.rules[0].uses", false), Some((4, 7)));
        assert_eq!(at(&docs[1], "kind", false), Some((8, 7)));
        // A missing top-level field points at its document (issue 43: `spec: Required value` had no place).
        assert_eq!(at(&docs[1], "spec", false), Some((8, 1)));
    }

    #[test]
    fn empty_documents_are_skipped_as_the_reader_skips_them() {
        let docs = scan("a: 1\n---\n---\nnull\n---\nb: 2\n", "p.yaml");
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].of("b", false).map(|p| p.line), Some(6));
        let values: Vec<serde_json::Value> =
            serde_saphyr::from_multiple("a: 1\n---\n---\nnull\n---\nb: 2\n").unwrap();
        assert_eq!(values.iter().filter(|v| !v.is_null()).count(), 2, "{values:?}");
    }

    #[test]
    fn a_broken_file_gives_what_was_read() {
        let docs = scan("spec:\n  a: [1, 2\n", "p.yaml");
        assert_eq!(docs.len(), 1, "the document read up to the error");
        assert_eq!(docs[0].of("spec.a", false).map(|p| (p.line, p.column)), Some((2, 6)));
    }
}
