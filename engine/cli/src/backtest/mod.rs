//! `trainwarden backtest`: policies over a corpus of complete recorded runs — what enforcing them would have
//! saved, and which good runs they would have killed. The arithmetic is `trainwarden_core::backtest`; here
//! are the files, the threads (runs are independent, so files are spread over every core and the totals
//! added up in corpus order), and the output: text, JSON, and a self-contained HTML report ([`html`]).

mod html;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::Args;
use trainwarden_core::backtest::external::{ExternalRule, read_stops};
use trainwarden_core::backtest::outcome::{Judge, Tolerance};
use trainwarden_core::backtest::report::{Report, ReportBuilder};
use trainwarden_core::backtest::select::RunSelector;
use trainwarden_core::backtest::sweep::{self, PolicyFile, Sweep};
use trainwarden_core::backtest::{FileResult, Options, Plan};
use trainwarden_core::{Evaluator, Merge, PolicyDuration, StreamRecord};

use crate::commands::{collect_files, config};
use crate::{Output, read, streams};

#[derive(Args)]
pub(crate) struct BacktestArgs {
    /// Policy file (YAML). Repeatable; positional *.yaml / *.yml files are policies too.
    #[arg(long = "policy", value_name = "FILE")]
    policies: Vec<PathBuf>,
    /// Policy files (*.yaml, *.yml) and the corpus: stream files (JSONL, gzip or zstd) or directories of
    /// them (*.jsonl, *.jsonl.gz, *.jsonl.zst, searched recursively). Each job of each stream is one run;
    /// the parts the controller's recorder rotated a job into are one run, and a job that several replicas
    /// recorded counts once.
    #[arg(required = true, value_name = "POLICY|CORPUS")]
    paths: Vec<PathBuf>,
    /// Stops decided elsewhere (a peer stopper run on the same corpus), judged as a policy's are: a JSONL
    /// file of {"job", "time", "rule", "metric"} objects, one per stop; each rule is scored as a policy.
    /// Repeatable.
    #[arg(long = "stops", value_name = "FILE.jsonl")]
    stops: Vec<PathBuf>,
    /// Judge only the runs whose labels match this label selector, e.g.
    /// trainwarden.dev/corpus-split=heldout or 'team in (a,b),!skip'.
    #[arg(long = "runs", value_name = "SELECTOR")]
    runs: Option<String>,
    /// The metric regret is measured on (default: the metric the stopping rule watched, else loss).
    #[arg(long)]
    target: Option<String>,
    /// A stop is false when the target improved by more than this afterwards: a fraction (0.01) or a
    /// percentage (1%), relative to the best level before the stop.
    #[arg(long, default_value = "1%")]
    tolerance: String,
    /// And by more than this much in the metric's own units, so that a loss creeping from 0.0002 to
    /// 0.0001 need not count (0: any amount).
    #[arg(long, value_name = "AMOUNT", default_value_t = 0.001)]
    min_improvement: f64,
    /// Logged values per rolling median: the judgement compares levels, not single values, so that one
    /// lucky batch after a stop is not an improvement (1: raw values).
    #[arg(long, value_name = "K", default_value_t = trainwarden_core::backtest::outcome::DEFAULT_SMOOTHING,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    smoothing: usize,
    /// Try several values of a policy field: PATH=V1,V2,… (PATH relative to spec, rules by name:
    /// rules[no-improvement].with.window=20%,30%,40%). It applies to every policy that has the field (a rule by
    /// position, `rules[0]`, to every policy). Values are comma-separated (a value cannot hold a comma).
    /// Repeatable; every combination is evaluated.
    #[arg(long = "set", value_name = "PATH=VALUES")]
    sets: Vec<String>,
    /// text or json (the whole report as one object).
    #[arg(long, value_enum, default_value = "text")]
    output: Output,
    /// Also write a self-contained HTML report (charts, no network) to this file.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Worker threads, at least 1 (default: every core).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    jobs: Option<usize>,
    /// Timer resolution of the replays.
    #[arg(long, default_value = "30s")]
    eval_interval: String,
    /// How far out of order a stream's lines may be (see `replay --max-lateness`).
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    max_lateness: String,
    /// Namespaces' labels, for ClusterProgressPolicies' namespaceSelector (see `replay --namespace-labels`).
    #[arg(long, value_name = "FILE")]
    namespace_labels: Option<PathBuf>,
}

/// Names of corpus files in a directory.
fn is_stream_name(name: &str) -> bool {
    [".jsonl", ".jsonl.gz", ".jsonl.zst", ".ndjson"].iter().any(|s| name.ends_with(s))
}

fn is_policy_path(path: &Path) -> bool {
    path.is_file() && path.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

pub(crate) fn backtest(args: &BacktestArgs) -> Result<bool, String> {
    let config = config(&args.eval_interval)?;
    let max_lateness: PolicyDuration =
        args.max_lateness.parse().map_err(|e| format!("--max-lateness: {e}"))?;
    if !(args.min_improvement.is_finite() && args.min_improvement >= 0.0) {
        return Err(format!("--min-improvement {}: must be 0 or more", args.min_improvement));
    }
    let tolerance = Tolerance { relative: tolerance(&args.tolerance)?, absolute: args.min_improvement };
    let namespace_labels = match &args.namespace_labels {
        Some(path) => trainwarden_core::parse_namespace_labels(&read(path)?, &path.display().to_string())?,
        None => trainwarden_core::NamespaceLabels::new(),
    };
    let options = Options {
        judge: Judge { tolerance, smoothing: args.smoothing },
        target: args.target.clone(),
        namespace_labels,
    };
    let runs = args.runs.as_deref().map(RunSelector::parse).transpose()?;
    let mut external: Vec<ExternalRule> = Vec::new();
    let mut stop_errors = Vec::new();
    for path in &args.stops {
        if let Err(e) = read_stops(&read(path)?, &path.display().to_string(), &mut external) {
            stop_errors.extend(e);
        }
    }
    if !stop_errors.is_empty() {
        return Err(format!("bad stops:\n  {}", stop_errors.join("\n  ")));
    }
    let mut policy_paths = args.policies.clone();
    let mut corpus = Vec::new();
    for p in &args.paths {
        if is_policy_path(p) {
            policy_paths.push(p.clone());
        } else if p.is_dir() {
            let before = corpus.len();
            collect_files(p, is_stream_name, &mut corpus)?;
            if corpus.len() == before {
                return Err(format!(
                    "{}: no stream files (*.jsonl, *.jsonl.gz, *.jsonl.zst) in it",
                    p.display()
                ));
            }
        } else if p.is_file() {
            corpus.push(p.clone());
        } else {
            return Err(format!("{}: no such file or directory", p.display()));
        }
    }
    if policy_paths.is_empty() && external.is_empty() {
        return Err("no policy given (a *.yaml file, --policy FILE, or --stops FILE.jsonl)".into());
    }
    if corpus.is_empty() {
        return Err("no corpus given (stream files or directories of them)".into());
    }
    let (corpus, merged) = runs_of_files(corpus);
    if merged > 0 {
        eprintln!(
            "note: {} recorded in several replicas' directories, merged (exact repeats dropped)",
            trainwarden_core::plural(merged as u64, "run was", "runs were")
        );
    }
    let files = policy_paths
        .iter()
        .map(|p| Ok(PolicyFile { source: p.display().to_string(), text: read(p)? }))
        .collect::<Result<Vec<_>, String>>()?;
    let sweeps = args.sets.iter().map(|s| Sweep::parse(s)).collect::<Result<Vec<_>, _>>()?;
    let engine = Evaluator::new(config.clone());
    let candidates = sweep::candidates(&files, &sweeps, engine.scripts())?;
    let plan = Plan { candidates, config, options, external, runs };
    // A sweep's trials are judged together: their runs are one entry, replayed as one.
    let (corpus, sweeps) = group_sweeps(corpus, &cohort_labels(&plan), max_lateness);
    if sweeps > 0 {
        eprintln!(
            "note: {} put together from their trials' recordings (spec.cohort)",
            trainwarden_core::plural(sweeps as u64, "sweep was", "sweeps were")
        );
    }
    let workers =
        args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    // An unwritable --html path fails now, not after the whole corpus has run.
    let html_file = args
        .html
        .as_ref()
        .map(|p| {
            crate::output::AtomicFile::create(p)
                .map(|f| (p, f))
                .map_err(|e| format!("--html {}: {e}", p.display()))
        })
        .transpose()?;
    let (report, unreadable) = run(&plan, &corpus, max_lateness, workers.max(1));
    if !unreadable.is_empty() {
        eprintln!(
            "error: {} could not be read and {} not in the figures:",
            trainwarden_core::plural(unreadable.len() as u64, "run", "runs"),
            if unreadable.len() == 1 { "is" } else { "are" }
        );
        for e in &unreadable {
            eprintln!("  {}", e.replace('\n', "\n    "));
        }
    }
    if report.runs.is_empty() && !unreadable.is_empty() {
        return Err("no run of the corpus could be read".into());
    }
    let unmatched = unmatched_stops(&plan, &report);
    if !report.stop_errors.is_empty() || !unmatched.is_empty() {
        let all: Vec<&String> = report.stop_errors.iter().chain(&unmatched).collect();
        return Err(format!(
            "{} do not fit the corpus (nothing printed: the figures would leave them out):\n  {}",
            trainwarden_core::plural(all.len() as u64, "stop", "stops"),
            all.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  ")
        ));
    }
    if report.runs.is_empty() && !report.excluded.is_empty() {
        return Err(format!(
            "--runs {}: no run of the corpus matches ({} left out)",
            args.runs.as_deref().unwrap_or(""),
            report.excluded.len()
        ));
    }
    if report.runs.len() == report.incomplete.len() {
        return Err(format!(
            "no run to judge: the corpus holds {}, and none ran to its end (completed, failed or deleted while not suspended)",
            trainwarden_core::plural(report.runs.len() as u64, "run", "runs")
        ));
    }

    let mut out = crate::output::stdout();
    let written = |e: io::Error| crate::output::failed(&e);
    let printed = match args.output {
        Output::Json => writeln!(out, "{}", serde_json::json!({ "backtest": report })),
        Output::Text => out.write_all(report.render_text().as_bytes()),
    };
    printed.unwrap_or_else(written);
    out.flush().unwrap_or_else(written);
    if let Some((path, file)) = html_file {
        file.commit(html::render(&report).as_bytes())
            .map_err(|e| format!("--html {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if !unreadable.is_empty() {
        return Ok(false);
    }
    let errors = report.rule_errors();
    if errors > 0 {
        eprintln!(
            "error: {} failed; those rules never fired there, so the figures understate what the policies do",
            trainwarden_core::plural(errors, "rule evaluation", "rule evaluations")
        );
        return Ok(false);
    }
    Ok(true)
}

/// Stops of jobs that are not a run of the corpus (and not left out by `--runs`), or of a job that is two
/// runs at once: `file:line: why`.
fn unmatched_stops(plan: &Plan, report: &Report) -> Vec<String> {
    let mut runs: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &report.runs {
        *runs.entry(r.job.as_str()).or_default() += 1;
    }
    let mut errors = Vec::new();
    for rule in &plan.external {
        for (job, stop) in &rule.stops {
            let job = job.to_string();
            match runs.get(job.as_str()) {
                Some(1) => {}
                Some(n) => errors.push(format!(
                    "{}: job {job} is {n} runs of the corpus (the same job in several files): which one the stop is about is unknown",
                    stop.origin
                )),
                None if report.excluded.contains(&job) => {}
                None => errors.push(format!("{}: job {job} is not a run of the corpus", stop.origin)),
            }
        }
    }
    errors
}

/// One corpus entry: the files of one recorded run, in order.
#[derive(Debug, PartialEq)]
struct Entry {
    /// How the report names it.
    name: String,
    /// Its files: one, or the parts the controller's recorder rotated (`stem.jsonl.gz`, `stem.1.jsonl.gz`, …).
    parts: Vec<PathBuf>,
}

/// Groups the files into runs. Files the controller's recorder wrote (`<namespace>_<name>_<uid>[.N].jsonl.gz`)
/// are one run per stem, wherever they are: its rotated parts, and the directories of every replica that
/// recorded it (each pod writes its own; a rollout moves a long job's recording to the new pod's). Their
/// records are merged on their clocks and exact repeats dropped ([`records`]). Returns the runs and how many
/// of them were put together from several directories. Every other file is a run of its own.
fn runs_of_files(files: Vec<PathBuf>) -> (Vec<Entry>, usize) {
    use trainwarden_controller::recorder::parse_file_name;
    let mut recorded: BTreeMap<String, Vec<(PathBuf, u32, PathBuf)>> = BTreeMap::new();
    let mut entries = Vec::new();
    for path in files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match parse_file_name(&name) {
            Some((stem, part)) => {
                let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
                recorded.entry(stem.to_string()).or_default().push((dir, part, path));
            }
            None => {
                let name = if name.is_empty() { path.display().to_string() } else { name };
                entries.push(Entry { name, parts: vec![path] });
            }
        }
    }
    let mut merged = 0;
    for (stem, mut parts) in recorded {
        parts.sort();
        let dirs: std::collections::BTreeSet<&PathBuf> = parts.iter().map(|(d, _, _)| d).collect();
        merged += usize::from(dirs.len() > 1);
        entries.push(Entry {
            name: format!("{stem}.jsonl.gz"),
            parts: parts.into_iter().map(|(_, _, p)| p).collect(),
        });
    }
    (entries, merged)
}

/// The labels that group runs into sweeps: `spec.cohort.by` of the plan's policies with cohort rules.
fn cohort_labels(plan: &Plan) -> Vec<String> {
    let mut labels: Vec<String> = (plan.candidates.iter().flat_map(|c| &c.documents))
        .filter(|d| {
            d.spec.rules.iter().any(|r| r.uses.as_deref().is_some_and(trainwarden_core::is_cohort_detector))
        })
        .map(|d| d.spec.cohort.clone().unwrap_or_default().label().to_string())
        .collect();
    labels.sort();
    labels.dedup();
    labels
}

/// Puts the runs of one sweep (the same value of a cohort label on their first labelled record) into one
/// entry, named `sweep <label>=<value>` when it took several, in the place of its first run; returns the entries and how many
/// sweeps were put together. A run whose files cannot be read stays alone (its error is reported later).
fn group_sweeps(corpus: Vec<Entry>, labels: &[String], max_lateness: PolicyDuration) -> (Vec<Entry>, usize) {
    if labels.is_empty() {
        return (corpus, 0);
    }
    let cohort = |entry: &Entry| -> Option<(String, String)> {
        let mut merge = Merge::new(streams::open_all(&entry.parts).ok()?, max_lateness);
        while let Ok(Some(record)) = streams::next_record(&mut merge, "invalid stream") {
            let found = match &record {
                StreamRecord::Object { snapshot, .. } => Some(&snapshot.labels),
                StreamRecord::Update(u) => u.labels.as_ref(),
            };
            if let Some(found) = found {
                return labels.iter().find_map(|l| found.get(l).map(|v| (l.clone(), v.clone())));
            }
        }
        None
    };
    let mut out: Vec<Entry> = Vec::new();
    let mut at: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut grouped = std::collections::BTreeSet::new();
    for entry in corpus {
        match cohort(&entry) {
            Some(key) => match at.get(&key) {
                Some(&i) => {
                    out[i].parts.extend(entry.parts);
                    out[i].name = format!("sweep {}={}", key.0, key.1);
                    grouped.insert(i);
                }
                None => {
                    at.insert(key, out.len());
                    out.push(entry);
                }
            },
            None => out.push(entry),
        }
    }
    (out, grouped.len())
}

/// `1%` or `0.01`.
fn tolerance(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let value = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("--tolerance {text:?}: expected a fraction (0.01) or a percentage (1%)"))?;
    if !(value.is_finite() && value >= 0.0) {
        return Err(format!("--tolerance {text:?}: must be 0 or more"));
    }
    Ok(value)
}

/// Every run through the plan on `workers` threads; results are added up in corpus order as soon as the
/// ones before them are in, so only the out-of-order ones wait in memory. A run that cannot be read (a bad
/// line, a file cut by a crash) is left out and returned with its error, in corpus order: one damaged file
/// does not stop a fleet's backtest, and is not hidden either.
fn run(plan: &Plan, corpus: &[Entry], max_lateness: PolicyDuration, workers: usize) -> (Report, Vec<String>) {
    struct Progress {
        next: usize,
        /// Results that finished before the ones ahead of them; `None`: the run could not be read.
        waiting: BTreeMap<usize, Option<FileResult>>,
        builder: ReportBuilder,
        unreadable: BTreeMap<usize, String>,
    }
    let progress = Mutex::new(Progress {
        next: 0,
        waiting: BTreeMap::new(),
        builder: ReportBuilder::new(plan),
        unreadable: BTreeMap::new(),
    });
    let taken = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..workers.min(corpus.len()) {
            scope.spawn(|| {
                loop {
                    let i = taken.fetch_add(1, Ordering::Relaxed);
                    let Some(entry) = corpus.get(i) else { break };
                    let result =
                        records(&entry.parts, max_lateness).and_then(|r| plan.backtest(&r, &entry.name));
                    let mut p = progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    match result {
                        Ok(r) => {
                            p.waiting.insert(i, Some(r));
                        }
                        Err(e) => {
                            p.unreadable.insert(i, format!("{}: {e}", entry.name));
                            p.waiting.insert(i, None);
                        }
                    }
                    while let Some(r) = {
                        let next = p.next;
                        p.waiting.remove(&next)
                    } {
                        if let Some(r) = r {
                            p.builder.add(r);
                        }
                        p.next += 1;
                    }
                }
            });
        }
    });
    let p = progress.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    (p.builder.finish(), p.unreadable.into_values().collect())
}

/// One run's records in time order: its files merged on their clocks through the same reorder window as
/// `replay`. A record equal to its job's record before is dropped: two replicas' copies of one job say
/// everything twice.
fn records(parts: &[PathBuf], max_lateness: PolicyDuration) -> Result<Vec<StreamRecord>, String> {
    let mut merge = Merge::new(streams::open_all(parts)?, max_lateness);
    let mut out = Vec::new();
    let mut last: BTreeMap<trainwarden_core::JobKey, StreamRecord> = BTreeMap::new();
    while let Some(r) = streams::next_record(&mut merge, "invalid stream")? {
        if last.get(r.job()) != Some(&r) {
            last.insert(r.job().clone(), r.clone());
            out.push(r);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sweep recorded one file per trial is one entry (its trials replayed together); a trial of another
    /// sweep and an unlabelled run stay apart; without cohort labels nothing is grouped.
    #[test]
    fn a_sweeps_recordings_are_one_entry() {
        let dir = std::env::temp_dir().join(format!("trainwarden-group-sweeps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, labels: &str| {
            let path = dir.join(format!("{name}.jsonl"));
            let line = format!(
                r#"{{"time":"2026-12-01T00:00:00Z","job":"ns/{name}","phase":"Running","labels":{{{labels}}}}}"#
            );
            std::fs::write(&path, line + "\n").unwrap();
            Entry { name: format!("{name}.jsonl"), parts: vec![path] }
        };
        let label = "katib.kubeflow.org/experiment";
        let corpus = || {
            vec![
                file("a1", &format!(r#""{label}":"a""#)),
                file("b1", &format!(r#""{label}":"b""#)),
                file("alone", ""),
                file("a2", &format!(r#""{label}":"a""#)),
            ]
        };
        let lateness = PolicyDuration::from_secs(300);
        let (grouped, sweeps) = group_sweeps(corpus(), &[label.to_string()], lateness);
        let names: Vec<&str> = grouped.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, [&format!("sweep {label}=a"), "b1.jsonl", "alone.jsonl"]);
        assert_eq!((sweeps, grouped[0].parts.len()), (1, 2));
        let (same, none) = group_sweeps(corpus(), &[], lateness);
        assert_eq!((same.len(), none), (4, 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_jobs_recordings_in_every_directory_are_one_run() {
        let dir = std::env::temp_dir().join(format!("trainwarden-runs-of-files-{}", std::process::id()));
        for (replica, name) in [
            ("pod-a", "team_ft_0123abcd.jsonl.gz"),
            ("pod-a", "team_ft_0123abcd.1.jsonl.gz"),
            ("pod-a", "team_ft_0123abcd.2.jsonl.gz"),
            ("pod-b", "team_ft_0123abcd.jsonl.gz"),
            ("pod-a", "hand-made.jsonl"),
        ] {
            std::fs::create_dir_all(dir.join(replica)).unwrap();
            std::fs::write(dir.join(replica).join(name), b"x").unwrap();
        }
        let mut files = Vec::new();
        collect_files(&dir, is_stream_name, &mut files).unwrap();
        let (entries, merged) = runs_of_files(files);
        assert_eq!(merged, 1);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].name, "hand-made.jsonl");
        assert_eq!(entries[1].name, "team_ft_0123abcd.jsonl.gz");
        let parts: Vec<String> =
            entries[1].parts.iter().map(|p| p.strip_prefix(&dir).unwrap().display().to_string()).collect();
        assert_eq!(
            parts,
            [
                "pod-a/team_ft_0123abcd.jsonl.gz",
                "pod-a/team_ft_0123abcd.1.jsonl.gz",
                "pod-a/team_ft_0123abcd.2.jsonl.gz",
                "pod-b/team_ft_0123abcd.jsonl.gz"
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn two_copies_of_a_recording_are_read_once() {
        let dir = std::env::temp_dir().join(format!("trainwarden-two-copies-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = "{\"time\":\"2026-01-05T00:00:00Z\",\"job\":\"a/b\",\"phase\":\"Running\",\"gpus\":2}\n\
                    {\"time\":\"2026-01-05T00:01:00Z\",\"job\":\"a/b\",\"trainerStatus\":{\"progressPercentage\":5,\"lastUpdatedTime\":\"2026-01-05T00:01:00Z\"}}\n";
        let (one, two) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
        std::fs::write(&one, text).unwrap();
        std::fs::write(&two, text).unwrap();
        let max = "5m".parse().unwrap();
        assert_eq!(records(std::slice::from_ref(&one), max).unwrap().len(), 2);
        assert_eq!(records(&[one, two], max).unwrap().len(), 2, "the second copy adds nothing");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tolerances_read_as_fractions_or_percentages() {
        assert_eq!(tolerance("1%").unwrap(), 0.01);
        assert_eq!(tolerance("0.05").unwrap(), 0.05);
        assert!(tolerance("-1%").is_err());
        assert!(tolerance("a lot").unwrap_err().contains("expected a fraction"));
    }
}
