//! Parameter sweeps: `--set rules[loss-plateau].with.window=1h,2h,4h` gives a policy field several values,
//! and the backtest evaluates every combination of every `--set` (their cartesian product) in one pass over
//! the corpus. Each combination is a *candidate*: the policy files as written, with those fields replaced,
//! validated and compiled like any policy (a value the policy would refuse is an error naming the `--set`).

use std::sync::Arc;

use serde_json::Value;

use crate::error::FieldErrors;
use crate::judge::script::ScriptEngine;
use crate::policy::compile::{self, PolicyDocument, parse_documents};
use crate::policy::positions;

/// The most candidates one backtest evaluates (the product of the `--set` value counts).
pub const MAX_CANDIDATES: usize = 1024;

/// One `--set PATH=V1,V2,…`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    /// As given, for messages.
    pub text: String,
    /// The field path under the document, e.g. `spec.rules[loss-plateau].with.window`.
    pub path: String,
    segments: Vec<Segment>,
    /// The values to try, in order; the first is the base candidate's.
    pub values: Vec<Value>,
}

#[derive(Clone, Debug, PartialEq)]
enum Segment {
    Key(String),
    /// `[3]`: an element by position.
    Index(usize),
    /// `[loss-plateau]`: the element whose `name` is this.
    Named(String),
}

impl Sweep {
    /// Parses `PATH=V1,V2,…`. The path is relative to `spec` unless it starts with `spec.`; `[name]`
    /// picks a list element by its `name`, `[2]` by position. Each value is read as a YAML scalar (`2h`
    /// is a string, `0.001` a number, `true` a boolean).
    pub fn parse(text: &str) -> Result<Sweep, String> {
        let fail = |why: &str| {
            format!(
                "--set {text}: {why}; expected PATH=VALUE[,VALUE…], e.g. rules[loss-plateau].with.window=1h,2h"
            )
        };
        let (path, values) = text.split_once('=').ok_or_else(|| fail("no `=`"))?;
        let path = path.trim();
        let path = if path.starts_with("spec.") { path.to_string() } else { format!("spec.{path}") };
        let segments = segments(&path).map_err(|why| fail(&why))?;
        let values = values
            .split(',')
            .map(|v| {
                let v = v.trim();
                if v.is_empty() {
                    return Err(fail("an empty value"));
                }
                serde_saphyr::from_str::<Value>(v).map_err(|e| fail(&format!("value {v:?}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Sweep { text: text.to_string(), path, segments, values })
    }
}

fn segments(path: &str) -> Result<Vec<Segment>, String> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, rest) = match part.find('[') {
            Some(i) => part.split_at(i),
            None => (part, ""),
        };
        if key.is_empty() {
            return Err(format!("empty field name in {path:?}"));
        }
        out.push(Segment::Key(key.to_string()));
        let mut rest = rest;
        while !rest.is_empty() {
            let inner = rest.strip_prefix('[').and_then(|r| r.split_once(']'));
            let Some((selector, after)) = inner else { return Err(format!("unclosed `[` in {path:?}")) };
            if selector.is_empty() {
                return Err(format!("empty `[]` in {path:?}"));
            }
            out.push(match selector.parse::<usize>() {
                Ok(i) => Segment::Index(i),
                Err(_) => Segment::Named(selector.to_string()),
            });
            rest = after;
        }
    }
    Ok(out)
}

/// Sets the field at `segments` of `doc` to `value`. Missing object keys on the way are created (a rule
/// without `with` gets one); list elements must exist. `false` when the document has no such list element
/// (the `--set` is about another policy).
fn assign(doc: &mut Value, segments: &[Segment], value: Value) -> bool {
    let mut at = doc;
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        at = match segment {
            Segment::Key(k) => {
                let Value::Object(map) = at else { return false };
                if last {
                    map.insert(k.clone(), value);
                    return true;
                }
                map.entry(k.clone()).or_insert_with(|| match segments[i + 1] {
                    Segment::Key(_) => Value::Object(Default::default()),
                    _ => Value::Array(Vec::new()),
                })
            }
            Segment::Index(n) => {
                let Some(element) = at.as_array_mut().and_then(|a| a.get_mut(*n)) else { return false };
                element
            }
            Segment::Named(name) => {
                let Some(element) = at.as_array_mut().and_then(|a| {
                    a.iter_mut().find(|e| e.get("name").and_then(Value::as_str) == Some(name.as_str()))
                }) else {
                    return false;
                };
                element
            }
        };
        if last {
            *at = value;
            return true;
        }
    }
    false
}

/// One combination of `--set` values and the policies it gives.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// `(path as given, value)` per `--set`, in order; empty without sweeps.
    pub settings: Vec<(String, String)>,
    /// Every policy document of every file, with the settings applied.
    pub documents: Vec<PolicyDocument>,
}

/// A policy file: its name (for messages) and text.
#[derive(Clone, Debug)]
pub struct PolicyFile {
    /// Shown in errors: the path as given.
    pub source: String,
    /// The YAML.
    pub text: String,
}

/// Every candidate of `files` under `sweeps`, each validated and compiled once (so the workers' compiles
/// cannot fail). Errors say which file, field and `--set` value.
pub fn candidates(
    files: &[PolicyFile],
    sweeps: &[Sweep],
    engine: &ScriptEngine,
) -> Result<Vec<Candidate>, String> {
    let mut originals = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        match parse_documents(&file.text, &file.source) {
            Ok(docs) => {
                for doc in &docs {
                    if let Err(e) = compile::compile(doc, engine) {
                        problems.push(format!("{}: {e}", file.source));
                    }
                }
                let values: Vec<Value> =
                    serde_saphyr::from_multiple(&file.text).map_err(|e| format!("{}: {e}", file.source))?;
                let values: Vec<Value> = values.into_iter().filter(|v| !v.is_null()).collect();
                let at = positions::scan(&file.text, &file.source);
                originals.extend(
                    values
                        .into_iter()
                        .zip(docs)
                        .enumerate()
                        .map(|(i, (v, d))| (v, at.get(i).cloned().map(Arc::new), d)),
                );
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    if !problems.is_empty() {
        return Err(format!("invalid policy\n{}", problems.join("\n")));
    }
    if originals.is_empty() {
        return Err("no policy documents found".into());
    }
    for sweep in sweeps {
        let mut probe: Vec<Value> = originals.iter().map(|(v, _, _)| v.clone()).collect();
        if !probe.iter_mut().any(|v| assign(v, &sweep.segments, sweep.values[0].clone())) {
            return Err(format!("--set {}: no policy has {}", sweep.text, sweep.path));
        }
    }
    let count = sweeps.iter().try_fold(1usize, |n, s| n.checked_mul(s.values.len()));
    if count.is_none_or(|n| n > MAX_CANDIDATES) {
        return Err(format!("the --set values make more than {MAX_CANDIDATES} combinations"));
    }
    let mut out = Vec::new();
    for choice in combinations(sweeps) {
        let settings: Vec<(String, String)> = sweeps
            .iter()
            .zip(&choice)
            .map(|(s, &i)| {
                (s.path.strip_prefix("spec.").unwrap_or(&s.path).to_string(), scalar(&s.values[i]))
            })
            .collect();
        if sweeps.is_empty() {
            out.push(Candidate {
                settings,
                documents: originals.iter().map(|(_, _, d)| d.clone()).collect(),
            });
            continue;
        }
        let described = settings.iter().map(|(p, v)| format!("{p}={v}")).collect::<Vec<_>>().join(" ");
        let mut documents = Vec::new();
        for (value, at, _) in &originals {
            let mut value = value.clone();
            for (sweep, &i) in sweeps.iter().zip(&choice) {
                assign(&mut value, &sweep.segments, sweep.values[i].clone());
            }
            let refused = |e: FieldErrors| format!("with --set {described}: {e}");
            let mut doc = compile::parse_document(value)
                .map_err(|errors| refused(FieldErrors { document: "(policy)".into(), file: None, errors }))?;
            doc.positions = at.clone();
            compile::compile(&doc, engine).map_err(refused)?;
            documents.push(doc);
        }
        out.push(Candidate { settings, documents });
    }
    Ok(out)
}

/// Every choice of one value index per sweep, the first sweep varying slowest.
fn combinations(sweeps: &[Sweep]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new()];
    for s in sweeps {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                (0..s.values.len()).map(move |i| {
                    let mut c = prefix.clone();
                    c.push(i);
                    c
                })
            })
            .collect();
    }
    out
}

/// A value as written on the command line.
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = "apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: p, namespace: default}
spec:
  rules:
    - name: loss-plateau
      uses: plateau
      with: {metric: loss, window: 2h, minDelta: 0.001}
      actions: [{suspend: {}}]
    - name: stalled
      when: 'stalled(\"30m\")'
      actions: [{suspend: {}}]
";

    fn file() -> Vec<PolicyFile> {
        vec![PolicyFile { source: "p.yaml".into(), text: POLICY.into() }]
    }

    fn window(c: &Candidate) -> Value {
        c.documents[0].spec.rules[0].with.as_ref().unwrap()["window"].clone()
    }

    #[test]
    fn every_combination_is_a_candidate_with_its_settings() {
        let sweeps = [
            Sweep::parse("rules[loss-plateau].with.window=1h,2h,4h").unwrap(),
            Sweep::parse("spec.rules[0].with.minDelta=0.001, 0.01").unwrap(),
        ];
        let c = candidates(&file(), &sweeps, &ScriptEngine::new(Default::default())).unwrap();
        assert_eq!(c.len(), 6);
        assert_eq!(
            c[0].settings,
            [
                ("rules[loss-plateau].with.window".into(), "1h".into()),
                ("rules[0].with.minDelta".into(), "0.001".into())
            ]
        );
        assert_eq!(c[1].settings[1].1, "0.01");
        assert_eq!(window(&c[5]), Value::from("4h"));
        assert_eq!(c[5].documents[0].spec.rules[0].with.as_ref().unwrap()["minDelta"], Value::from(0.01));
    }

    #[test]
    fn no_sweep_is_one_candidate_as_written() {
        let c = candidates(&file(), &[], &ScriptEngine::new(Default::default())).unwrap();
        assert_eq!(c.len(), 1);
        assert!(c[0].settings.is_empty());
        assert_eq!(window(&c[0]), Value::from("2h"));
    }

    #[test]
    fn a_value_the_policy_refuses_names_the_setting() {
        let sweeps = [Sweep::parse("rules[loss-plateau].with.window=2h,soon").unwrap()];
        let e = candidates(&file(), &sweeps, &ScriptEngine::new(Default::default())).unwrap_err();
        assert!(e.contains("with --set rules[loss-plateau].with.window=soon"), "{e}");
        assert!(e.contains("spec.rules[0].with.window"), "{e}");
    }

    #[test]
    fn a_path_no_policy_has_is_refused() {
        let sweeps = [Sweep::parse("rules[no-such-rule].with.window=1h").unwrap()];
        let e = candidates(&file(), &sweeps, &ScriptEngine::new(Default::default())).unwrap_err();
        assert_eq!(
            e,
            "--set rules[no-such-rule].with.window=1h: no policy has spec.rules[no-such-rule].with.window"
        );
    }

    #[test]
    fn bad_set_syntax_is_explained() {
        for (text, why) in [
            ("rules[x.with.window=1h", "unclosed `[`"),
            ("window", "no `=`"),
            ("rules[x].with.window=1h,,2h", "an empty value"),
            ("rules[].with=1", "empty `[]`"),
        ] {
            let e = Sweep::parse(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn a_missing_with_is_created() {
        let mut doc: Value = serde_json::json!({"spec": {"rules": [{"name": "r"}]}});
        let s = Sweep::parse("rules[r].with.window=1h").unwrap();
        assert!(assign(&mut doc, &s.segments, Value::from("1h")));
        assert_eq!(doc["spec"]["rules"][0]["with"]["window"], "1h");
        assert!(!assign(&mut doc, &Sweep::parse("rules[q].with.window=1h").unwrap().segments, Value::Null));
    }
}
