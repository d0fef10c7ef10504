//! `--runs`: which runs of a corpus a backtest judges, by their jobs' labels, in Kubernetes' label selector
//! syntax (what `kubectl get -l` takes): `key=value` (or `==`), `key!=value`, `key in (a,b)`,
//! `key notin (a,b)`, `key` (exists), `!key` (does not exist), comma-separated, all of which must hold.
//! `--runs trainwarden.dev/corpus-split=heldout` judges the held-out part of a corpus.

use std::collections::BTreeMap;
use std::fmt;

use crate::policy::spec::{LabelSelector, LabelSelectorRequirement, SelectorOperator};

/// A parsed `--runs` selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSelector {
    /// As given, for messages and the report.
    pub text: String,
    selector: LabelSelector,
}

impl fmt::Display for RunSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl RunSelector {
    /// Parses a label selector. The error says what is wrong and where (a 1-based character column).
    pub fn parse(text: &str) -> Result<RunSelector, String> {
        let fail = |col: usize, why: &str| {
            format!(
                "--runs {text:?}, column {col}: {why}; expected a label selector such as \
                 trainwarden.dev/corpus-split=heldout or 'team in (a,b),!skip'"
            )
        };
        let chars: Vec<char> = text.chars().collect();
        let mut i = 0;
        let mut selector = LabelSelector::default();
        let skip_spaces = |i: &mut usize| {
            while *i < chars.len() && chars[*i].is_whitespace() {
                *i += 1;
            }
        };
        let word = |i: &mut usize| -> String {
            let start = *i;
            while *i < chars.len() && is_label_char(chars[*i]) {
                *i += 1;
            }
            chars[start..*i].iter().collect()
        };
        skip_spaces(&mut i);
        if i == chars.len() {
            return Err(fail(1, "empty selector"));
        }
        loop {
            skip_spaces(&mut i);
            let negated = chars.get(i) == Some(&'!') && chars.get(i + 1) != Some(&'=');
            if negated {
                i += 1;
                skip_spaces(&mut i);
            }
            let key_col = i + 1;
            let key = word(&mut i);
            if key.is_empty() {
                return Err(fail(key_col, "a label key is missing"));
            }
            check_key(&key).map_err(|why| fail(key_col, &why))?;
            skip_spaces(&mut i);
            let rest: String = chars[i..].iter().collect();
            let requirement = if negated {
                LabelSelectorRequirement { key, operator: SelectorOperator::DoesNotExist, values: Vec::new() }
            } else if rest.starts_with("!=") || rest.starts_with("==") || rest.starts_with('=') {
                let not = rest.starts_with("!=");
                i += if rest.starts_with('=') && !rest.starts_with("==") { 1 } else { 2 };
                skip_spaces(&mut i);
                let col = i + 1;
                let value = word(&mut i);
                check_value(&value).map_err(|why| fail(col, &why))?;
                let operator = if not { SelectorOperator::NotIn } else { SelectorOperator::In };
                LabelSelectorRequirement { key, operator, values: vec![value] }
            } else if let Some(op) = ["notin", "in"]
                .into_iter()
                .find(|op| rest.starts_with(op) && rest[op.len()..].trim_start().starts_with('('))
            {
                i += op.len();
                skip_spaces(&mut i);
                i += 1; // '('
                let mut values = Vec::new();
                loop {
                    skip_spaces(&mut i);
                    let col = i + 1;
                    let value = word(&mut i);
                    check_value(&value).map_err(|why| fail(col, &why))?;
                    values.push(value);
                    skip_spaces(&mut i);
                    match chars.get(i) {
                        Some(',') => i += 1,
                        Some(')') => {
                            i += 1;
                            break;
                        }
                        _ => return Err(fail(i + 1, "expected `,` or `)` in a value list")),
                    }
                }
                let operator = if op == "in" { SelectorOperator::In } else { SelectorOperator::NotIn };
                LabelSelectorRequirement { key, operator, values }
            } else {
                LabelSelectorRequirement { key, operator: SelectorOperator::Exists, values: Vec::new() }
            };
            selector.match_expressions.push(requirement);
            skip_spaces(&mut i);
            match chars.get(i) {
                None => break,
                Some(',') => i += 1,
                Some(c) => return Err(fail(i + 1, &format!("unexpected {c:?}"))),
            }
        }
        Ok(RunSelector { text: text.trim().to_string(), selector })
    }

    /// Whether a run with these labels is judged.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.matches(labels)
    }
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

/// A label key: an optional DNS prefix and `/`, then a name of at most 63 characters.
fn check_key(key: &str) -> Result<(), String> {
    let name = key.rsplit_once('/').map_or(key, |(prefix, name)| if prefix.is_empty() { "" } else { name });
    if key.matches('/').count() > 1 || name.is_empty() || name.len() > 63 {
        return Err(format!("{key:?} is not a label key"));
    }
    Ok(())
}

/// A label value: at most 63 characters, no `/`.
fn check_value(value: &str) -> Result<(), String> {
    if value.contains('/') || value.len() > 63 {
        return Err(format!("{value:?} is not a label value"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn equality_inequality_sets_and_existence() {
        let held = labels(&[("trainwarden.dev/corpus-split", "heldout"), ("team", "a")]);
        let tune = labels(&[("trainwarden.dev/corpus-split", "tune")]);
        let s = RunSelector::parse("trainwarden.dev/corpus-split=heldout").unwrap();
        assert!(s.matches(&held) && !s.matches(&tune));
        let s = RunSelector::parse("trainwarden.dev/corpus-split == tune").unwrap();
        assert!(!s.matches(&held) && s.matches(&tune));
        let s = RunSelector::parse("trainwarden.dev/corpus-split!=tune").unwrap();
        assert!(s.matches(&held) && !s.matches(&tune) && s.matches(&labels(&[])));
        let s = RunSelector::parse("team in (a, b),trainwarden.dev/corpus-split").unwrap();
        assert!(s.matches(&held) && !s.matches(&tune));
        let s = RunSelector::parse("team notin (a),!skip").unwrap();
        assert!(!s.matches(&held) && s.matches(&tune) && !s.matches(&labels(&[("skip", "")])));
    }

    #[test]
    fn errors_say_where() {
        let e = RunSelector::parse("team=a,=b").unwrap_err();
        assert!(e.contains("column 8: a label key is missing"), "{e}");
        let e = RunSelector::parse("team in (a b)").unwrap_err();
        assert!(e.contains("column 12: expected `,` or `)`"), "{e}");
        let e = RunSelector::parse("team=a;b").unwrap_err();
        assert!(e.contains("column 7: unexpected ';'"), "{e}");
        assert!(RunSelector::parse("  ").unwrap_err().contains("empty selector"));
        assert!(RunSelector::parse("a/b/c=x").unwrap_err().contains("not a label key"));
    }
}
