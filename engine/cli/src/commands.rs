//! Subcommand bodies. `Ok(false)` means "ran, but found problems" (exit 1); `Err` is a usage or I/O error (exit 2).

use std::path::{Path, PathBuf};

use trainwarden_core::CompiledPolicy;
use trainwarden_core::PolicyDuration;
use trainwarden_core::replay::Replay;
use trainwarden_core::rule_test::{self, FileSource};
use trainwarden_core::{BUILTINS, ScriptEngine};
use trainwarden_core::{EngineConfig, Evaluator};

use crate::output::outln;
use crate::read;

pub(crate) fn config(eval_interval: &str) -> Result<EngineConfig, String> {
    let eval_interval: PolicyDuration = eval_interval.parse().map_err(|e| format!("--eval-interval: {e}"))?;
    // Each round re-evaluates every job; reports come seconds apart, so a shorter round only burns time.
    if eval_interval < PolicyDuration::from_secs(1) {
        return Err(format!("--eval-interval {eval_interval} is shorter than 1s, the shortest useful round"));
    }
    Ok(EngineConfig { eval_interval, ..EngineConfig::default() })
}

/// Reads and compiles every policy document in the files; all errors of all files are reported.
pub(crate) fn load_policies(files: &[PathBuf], engine: &ScriptEngine) -> Result<Vec<CompiledPolicy>, String> {
    let mut compiled = Vec::new();
    let mut report = Vec::new();
    for file in files {
        let text = read(file)?;
        let source = file.display().to_string();
        match trainwarden_core::parse_documents(&text, &source) {
            Ok(docs) => {
                for doc in docs {
                    match trainwarden_core::compile(&doc, engine) {
                        Ok(p) => compiled.push(p),
                        Err(e) => report.push(format!("{source}: {e}")),
                    }
                }
            }
            Err(e) => report.push(e.to_string()),
        }
    }
    if !report.is_empty() {
        return Err(format!("invalid policy\n{}", report.join("\n")));
    }
    if compiled.is_empty() {
        return Err("no policy documents found".into());
    }
    Ok(compiled)
}

/// Reads every ProgressPolicyException in the files (which may also hold policies), each checked against
/// the policies it will run with; all errors of all files are reported.
pub(crate) fn load_exceptions(
    files: &[PathBuf],
    policies: &[CompiledPolicy],
) -> Result<Vec<trainwarden_core::CompiledException>, String> {
    let mut out = Vec::new();
    let mut report = Vec::new();
    for file in files {
        let text = read(file)?;
        let source = file.display().to_string();
        match trainwarden_core::parse_exceptions(&text, &source) {
            Ok(es) => {
                for e in es {
                    match e.checked_against(policies, &source) {
                        Ok(()) => out.push(e),
                        Err(errors) => report.push(errors.to_string()),
                    }
                }
            }
            Err(e) => report.push(e.to_string()),
        }
    }
    if report.is_empty() { Ok(out) } else { Err(format!("invalid exception\n{}", report.join("\n"))) }
}

struct Dir(PathBuf);

impl FileSource for Dir {
    fn read(&self, relative: &str) -> Result<String, String> {
        let path = self.0.join(relative);
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// Files under `path` that `wanted` takes by name: the path itself if it is a file, else every such file
/// below the directory, in name order. Links into directories are not followed ([`is_real_dir`]).
pub(crate) fn collect_files(
    path: &Path,
    wanted: fn(&str) -> bool,
    out: &mut Vec<PathBuf>,
) -> Result<(), String> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for e in entries {
            let name = e.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if is_real_dir(&e) {
                collect_files(&e, wanted, out)?;
            } else if wanted(&name) {
                out.push(e);
            }
        }
        Ok(())
    } else if path.exists() {
        out.push(path.to_path_buf());
        Ok(())
    } else {
        Err(format!("{}: no such file or directory", path.display()))
    }
}

fn is_test_file(name: &str) -> bool {
    name.ends_with(".test.yaml")
}

/// Policy files: `*.yaml`/`*.yml` except test files (`*.test.yaml`, checked by `trainwarden test`).
fn is_policy_file(name: &str) -> bool {
    (name.ends_with(".yaml") || name.ends_with(".yml"))
        && !name.ends_with(".test.yaml")
        && !name.ends_with(".test.yml")
}

pub(crate) fn test(paths: &[PathBuf]) -> Result<bool, String> {
    let mut files = Vec::new();
    for p in paths {
        collect_files(p, is_test_file, &mut files)?;
    }
    if files.is_empty() {
        return Err("no *.test.yaml files found".into());
    }
    let (mut passed, mut failed) = (0u64, 0u64);
    for file in files {
        let text = read(&file)?;
        let name = file.display().to_string();
        let parsed = match rule_test::parse_test_file(&text) {
            Ok(t) => t,
            Err(e) => {
                outln!("FAIL {name}: {e}");
                failed += 1;
                continue;
            }
        };
        let dir = Dir(file.parent().map(Path::to_path_buf).unwrap_or_default());
        let config = match parsed.eval_interval.as_deref().map(config).transpose() {
            Ok(c) => c.unwrap_or_default(),
            Err(e) => {
                outln!("FAIL {name}: {e}");
                failed += 1;
                continue;
            }
        };
        let docs = match rule_test::load_policies(&parsed, &dir) {
            Ok(d) => d,
            Err(errors) => {
                outln!("FAIL {name}: invalid policy");
                for e in errors {
                    outln!("    {e}");
                }
                failed += 1;
                continue;
            }
        };
        for case in &parsed.tests {
            // Every case gets freshly compiled policies: no state leaks between cases.
            let engine = Evaluator::new(config.clone());
            let compiled: Result<Vec<_>, _> =
                docs.iter().map(|d| trainwarden_core::compile(d, engine.scripts())).collect();
            let result = match compiled
                .map_err(|e| e.to_string())
                .and_then(|p| Replay::check_unique(&p).map(|()| p))
                .and_then(|p| {
                    let exceptions = rule_test::load_exceptions(&parsed, &dir, &p).map_err(|es| {
                        let lines: Vec<String> = es.iter().map(|e| format!("  - {e}")).collect();
                        format!("invalid exception\n{}", lines.join("\n"))
                    })?;
                    Ok((p, exceptions))
                }) {
                Ok((policies, exceptions)) => {
                    rule_test::run_case(case, policies, &exceptions, config.clone(), &dir)
                }
                Err(e) => rule_test::CaseResult { name: case.name.clone(), failures: vec![e] },
            };
            if result.failures.is_empty() {
                passed += 1;
                outln!("ok   {name} :: {}", result.name);
            } else {
                failed += 1;
                outln!("FAIL {name} :: {}", result.name);
                for f in &result.failures {
                    for line in f.lines() {
                        outln!("    {line}");
                    }
                }
            }
        }
    }
    outln!("{passed} passed, {failed} failed");
    Ok(failed == 0)
}

/// A directory that is not a symbolic link: a search does not follow links into directories, so a link loop
/// cannot send it round forever (a link named on the command line is followed).
fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

pub(crate) fn validate(paths: &[PathBuf]) -> Result<bool, String> {
    let mut files = Vec::new();
    for p in paths {
        collect_files(p, is_policy_file, &mut files)?;
    }
    if files.is_empty() {
        return Err(format!(
            "no policy files (*.yaml, *.yml) in {}",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    let engine = ScriptEngine::default();
    let mut ok = true;
    let mut compiled = Vec::new();
    for file in &files {
        let text = read(file)?;
        let source = file.display().to_string();
        match trainwarden_core::parse_documents(&text, &source) {
            Ok(docs) => {
                for doc in docs {
                    match trainwarden_core::compile(&doc, &engine) {
                        Ok(p) => {
                            outln!(
                                "{source}: {} {} is valid ({})",
                                p.reference.kind,
                                p.reference,
                                trainwarden_core::plural(p.rules.len() as u64, "rule", "rules")
                            );
                            compiled.push(p);
                        }
                        Err(e) => {
                            ok = false;
                            outln!("{source}: {e}");
                        }
                    }
                }
            }
            Err(e) => {
                ok = false;
                outln!("{e}");
            }
        }
    }
    // Exceptions last: each is checked against every policy validated with it.
    for file in &files {
        let text = read(file)?;
        let source = file.display().to_string();
        match trainwarden_core::parse_exceptions(&text, &source) {
            Ok(exceptions) => {
                for e in exceptions {
                    match e.checked_against(&compiled, &source) {
                        Ok(()) => outln!(
                            "{source}: ProgressPolicyException {} is valid (expires {})",
                            e.reference,
                            e.expires
                        ),
                        Err(errors) => {
                            ok = false;
                            outln!("{errors}");
                        }
                    }
                }
            }
            Err(e) => {
                ok = false;
                outln!("{e}");
            }
        }
    }
    Ok(ok)
}

pub(crate) fn detectors() {
    for d in trainwarden_core::DETECTORS {
        outln!("{}\n  {}", d.name, d.summary);
        for trainwarden_core::ParamDoc { name, ty, default, doc } in d.params {
            outln!("    {name:<28} {ty:<20} default {default:<10} {doc}");
        }
        outln!("  example with: {}\n", d.example);
    }
}

pub(crate) fn functions() {
    for b in BUILTINS {
        outln!("{}\n  {}\n  e.g. {}  →  {}\n", b.signature, b.doc, b.example, b.expected);
    }
}
