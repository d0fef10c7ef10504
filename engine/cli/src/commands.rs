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
                        Ok(()) => {
                            // Not an error (the policy may be applied on its own), but never silent.
                            for w in e.absent_targets(policies) {
                                eprintln!("note: {source}: ProgressPolicyException {}: {w}", e.reference);
                            }
                            out.push(e);
                        }
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

/// `validate`: every file is checked, whatever the others hold (a file that cannot be read is said and the
/// rest go on); then what only the files together show: a policy or exception defined twice (replay refuses
/// that, and on a cluster the second apply replaces the first), and exceptions against the policies they
/// name. Exit 0 when all is valid, 1 when something is invalid (or, `--strict`, only warned about), 2 when
/// a file could not be read.
pub(crate) fn validate(paths: &[PathBuf], strict: bool) -> Result<bool, String> {
    let mut files = Vec::new();
    let mut missing = Vec::new();
    // Files named on the command line are checked whatever they hold; in a directory, manifests of other
    // APIs (a TrainingRuntime beside the policies) are said to be skipped.
    let named: std::collections::HashSet<&Path> =
        paths.iter().filter(|p| !p.is_dir()).map(PathBuf::as_path).collect();
    for p in paths {
        if let Err(e) = collect_files(p, is_policy_file, &mut files) {
            missing.push(e);
        }
    }
    if files.is_empty() {
        if !missing.is_empty() {
            return Err(missing.join("\n"));
        }
        return Err(format!(
            "no policy files (*.yaml, *.yml) in {}",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    // Said first, and the files that are there are validated all the same.
    for e in &missing {
        outln!("{e}");
    }
    let mut unreadable = !missing.is_empty();
    let engine = ScriptEngine::default();
    let mut ok = true;
    let mut warned = false;
    // Every document's outcome, in file order, printed once duplicates across files are known.
    let mut outcomes: Vec<(String, Result<CompiledPolicy, String>)> = Vec::new();
    // Files of a directory that hold only other APIs' objects, each said where it comes in order.
    let mut skipped: Vec<(usize, String)> = Vec::new();
    let mut texts: Vec<(String, String)> = Vec::new();
    for file in &files {
        let source = file.display().to_string();
        let text = match read(file) {
            Ok(t) => t,
            Err(e) => {
                outcomes.push((source, Err(e)));
                unreadable = true;
                continue;
            }
        };
        if !named.contains(file.as_path())
            && let Some(objects) = trainwarden_core::objects_of_other_apis(&text)
        {
            skipped.push((
                outcomes.len(),
                format!(
                    "{source}: skipped: it holds {}, no trainwarden object (name the file to have it checked)",
                    objects.join(", ")
                ),
            ));
            continue;
        }
        match trainwarden_core::parse_documents(&text, &source) {
            Ok(docs) => {
                for doc in docs {
                    let outcome =
                        trainwarden_core::compile(&doc, &engine).map_err(|e| format!("{source}: {e}"));
                    outcomes.push((source.clone(), outcome));
                }
            }
            Err(e) => outcomes.push((source.clone(), Err(e.to_string()))),
        }
        texts.push((source, text));
    }
    if outcomes.is_empty() && texts.is_empty() && !skipped.is_empty() && !unreadable {
        for (_, note) in &skipped {
            outln!("{note}");
        }
        return Err(format!(
            "no trainwarden object in {}",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    // Defined twice: both places named, neither reported valid.
    let twice = defined_twice(outcomes.iter().filter_map(|(_, o)| o.as_ref().ok()));
    let mut compiled = Vec::new();
    let mut skipped = skipped.into_iter().peekable();
    for (i, (source, outcome)) in outcomes.into_iter().enumerate() {
        while let Some((_, note)) = skipped.next_if(|(at, _)| *at == i) {
            outln!("{note}");
        }
        let p = match outcome {
            Ok(p) => p,
            Err(e) => {
                ok = false;
                outln!("{e}");
                continue;
            }
        };
        let r = &p.reference;
        if let Some(message) = twice.get(&(r.kind, r.namespace.clone(), r.name.clone())) {
            ok = false;
            outln!("{source}: {} {r} {message}", r.kind);
            continue;
        }
        let rules = trainwarden_core::plural(p.rules.len() as u64, "rule", "rules");
        if p.warnings.is_empty() {
            outln!("{source}: {} {r} is valid ({rules})", r.kind);
        } else {
            warned = true;
            let verdict = if strict { "is refused (--strict)" } else { "is valid" };
            let n = trainwarden_core::plural(p.warnings.len() as u64, "warning", "warnings");
            outln!("{source}: {} {r} {verdict} ({rules}), {n}:", r.kind);
            print_located(&source, &p.warnings);
        }
        compiled.push((source, p));
    }
    for (_, note) in skipped {
        outln!("{note}");
    }
    let policies: Vec<CompiledPolicy> = {
        let mut seen = std::collections::HashSet::new();
        compiled
            .into_iter()
            .map(|(_, p)| p)
            .filter(|p| {
                seen.insert((p.reference.kind, p.reference.namespace.clone(), p.reference.name.clone()))
            })
            .collect()
    };
    // Exceptions last: each is checked against every policy validated with it.
    let mut exceptions: Vec<(String, trainwarden_core::CompiledException)> = Vec::new();
    for (source, text) in &texts {
        match trainwarden_core::parse_exceptions(text, source) {
            Ok(es) => exceptions.extend(es.into_iter().map(|e| (source.clone(), e))),
            Err(e) => {
                ok = false;
                outln!("{e}");
            }
        }
    }
    for (i, (source, e)) in exceptions.iter().enumerate() {
        if let Some((first, _)) = exceptions[..i].iter().find(|(_, x)| x.reference == e.reference) {
            ok = false;
            outln!(
                "{source}: ProgressPolicyException {} is defined twice: also in {first}; replay refuses both, and on a cluster the second apply replaces the first",
                e.reference
            );
            continue;
        }
        match e.checked_against(&policies, source) {
            Ok(()) => {
                let absent = e.absent_targets(&policies);
                if absent.is_empty() {
                    outln!(
                        "{source}: ProgressPolicyException {} is valid (expires {})",
                        e.reference,
                        e.expires
                    );
                } else {
                    warned = true;
                    let verdict = if strict { "is refused (--strict)" } else { "is valid" };
                    let n = trainwarden_core::plural(absent.len() as u64, "warning", "warnings");
                    outln!(
                        "{source}: ProgressPolicyException {} {verdict} (expires {}), {n}:",
                        e.reference,
                        e.expires
                    );
                    print_located(source, &absent);
                }
            }
            Err(errors) => {
                ok = false;
                outln!("{errors}");
            }
        }
    }
    if unreadable {
        return Err("some files could not be read (above); the others were validated".into());
    }
    Ok(ok && !(strict && warned))
}

/// Warnings under their document, each at `file:line:column` when known.
fn print_located(source: &str, warnings: &[trainwarden_core::FieldError]) {
    for w in warnings {
        match w.position {
            Some(p) => outln!("  - {source}:{}:{}: {w}", p.line, p.column),
            None => outln!("  - {w}"),
        }
    }
}

/// Policies defined more than once (same kind, namespace and name), each with the message that names every
/// place it is defined.
fn defined_twice<'a>(
    policies: impl Iterator<Item = &'a CompiledPolicy> + Clone,
) -> std::collections::HashMap<(trainwarden_core::PolicyKind, Option<String>, String), String> {
    let mut places: std::collections::HashMap<_, Vec<String>> = std::collections::HashMap::new();
    for p in policies {
        let r = &p.reference;
        places
            .entry((r.kind, r.namespace.clone(), r.name.clone()))
            .or_default()
            .push(p.origin.clone().unwrap_or_else(|| "a document".into()));
    }
    places
        .into_iter()
        .filter(|(_, at)| at.len() > 1)
        .map(|(key, at)| {
            let times = if at.len() == 2 { "twice".to_string() } else { format!("{} times", at.len()) };
            let message = format!(
                "is defined {times}: in {}; replay refuses that, and on a cluster the last apply replaces the others",
                at.join(" and in ")
            );
            (key, message)
        })
        .collect()
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
