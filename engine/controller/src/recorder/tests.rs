//! The recorder against a real directory: names, dedup, times, rotation, bounds, failed writes, restarts,
//! and files read back by the replay parser (also after a crash cut one).

use std::io::Read;

use serde_json::json;
use trainwarden_core::{StreamRecord, parse_stream};

use super::*;
use trainwarden_testkit::fixtures::ts;

/// A fresh directory under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("trainwarden-recorder-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn config(dir: &Path) -> RecordConfig {
    RecordConfig::new(dir)
}

fn recorder(config: RecordConfig) -> (Recorder, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let mut r = Recorder::new(config, "pod-a", metrics.clone());
    r.flush();
    (r, metrics)
}

fn status(step: u32, at: &str) -> RecordedProgress {
    RecordedProgress::TrainerStatus(json!({
        "progressPercentage": step,
        "metrics": [{"name": "loss", "value": format!("{}", 2.0 / f64::from(step + 1))}],
        "lastUpdatedTime": at,
    }))
}

fn seen(job: &JobKey, progress: Option<RecordedProgress>, at: &str) -> Observation {
    let sample_time = match &progress {
        Some(RecordedProgress::TrainerStatus(v)) => v["lastUpdatedTime"].as_str().map(ts),
        _ => None,
    };
    Observation::Seen(Box::new(JobObservation {
        job: job.clone(),
        uid: Some("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into()),
        labels: BTreeMap::from([("team".to_string(), "fraud".to_string())]),
        gpus: Some(8.0),
        phase: Some(JobPhase::Running),
        progress,
        sample_time,
        at: ts(at),
    }))
}

fn with_phase(o: Observation, phase: JobPhase) -> Observation {
    let Observation::Seen(mut s) = o else { unreachable!() };
    s.phase = Some(phase);
    Observation::Seen(s)
}

fn gunzip(path: &Path) -> Result<String, std::io::Error> {
    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(File::open(path)?).read_to_string(&mut text)?;
    Ok(text)
}

fn records(path: &Path) -> Vec<StreamRecord> {
    parse_stream(&gunzip(path).unwrap(), &path.display().to_string()).unwrap()
}

/// A compact line, as the replay parser read it.
#[derive(Debug)]
struct Line {
    time: Timestamp,
    sample: Option<trainwarden_core::ProgressSample>,
    phase: Option<JobPhase>,
    labels: Option<BTreeMap<String, String>>,
    gpus: Option<f64>,
    namespace_labels: Option<BTreeMap<String, String>>,
    deleted: bool,
}

fn updates(path: &Path) -> Vec<Line> {
    records(path)
        .into_iter()
        .map(|r| match r {
            StreamRecord::Update(u) => Line {
                time: u.time,
                sample: u.sample,
                phase: u.phase,
                labels: u.labels,
                gpus: u.gpus,
                namespace_labels: u.namespace_labels,
                deleted: u.deleted,
            },
            StreamRecord::Object { .. } => panic!("the recorder writes compact lines"),
        })
        .collect()
}

fn stream_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn file_names_are_safe_and_read_back() {
    let job = JobKey::new("team-a", "llama.ft");
    let stem = file_stem(&job, Some("0F1E2D3C-4b5a"));
    assert_eq!(stem, "team-a_llama-ft_0f1e2d3c");
    assert_eq!(file_stem(&job, None), "team-a_llama-ft_nouid");
    let long = JobKey::new("ns", "x".repeat(253));
    assert!(file_name(&file_stem(&long, Some("abc")), 99_999).len() < 200);
    for part in [0, 1, 17] {
        let name = file_name(&stem, part);
        assert_eq!(parse_file_name(&name), Some((stem.as_str(), part)));
    }
    assert_eq!(file_name("a_b_c", 0), "a_b_c.jsonl.gz");
    assert_eq!(file_name("a_b_c", 2), "a_b_c.2.jsonl.gz");
    for other in [
        "a_b_c.jsonl",
        "a_b_c.0.jsonl.gz",
        "a_b_c.x.jsonl.gz",
        "notes.txt",
        "run.jsonl.gz",
        "a_b.jsonl.gz",
        "a__c.jsonl.gz",
        "a_b_c_d.jsonl.gz",
    ] {
        assert_eq!(parse_file_name(other), None, "{other}");
    }
    // A path-like identity stays one directory under the record directory.
    let metrics = Arc::new(Metrics::new());
    let r = Recorder::new(config(Path::new("/rec")), "../../etc", metrics.clone());
    assert_eq!(r.own_dir(), Path::new("/rec/..-..-etc"));
    let r = Recorder::new(config(Path::new("/rec")), "..", metrics);
    assert_eq!(r.own_dir(), Path::new("/rec/trainwarden"));
}

/// A watch re-delivers the object, unchanged `trainerStatus` and all, whenever anything about it changes:
/// only changes make lines, and times never go back.
#[test]
fn only_changes_are_written_in_order() {
    let dir = TempDir::new("dedup");
    let (mut r, metrics) = recorder(config(&dir.0));
    let job = JobKey::new("fraud", "ft");
    r.observe(seen(&job, Some(status(1, "2026-12-01T10:00:00Z")), "2026-12-01T10:00:01Z"));
    r.observe(seen(&job, Some(status(1, "2026-12-01T10:00:00Z")), "2026-12-01T10:00:05Z"));
    r.observe(seen(&job, Some(status(2, "2026-12-01T10:00:30Z")), "2026-12-01T10:00:31Z"));
    // The trainer's clock is behind the line above: the line is not placed before it.
    r.observe(seen(&job, Some(status(3, "2026-12-01T10:00:20Z")), "2026-12-01T10:00:40Z"));
    r.observe(with_phase(
        seen(&job, Some(status(3, "2026-12-01T10:00:20Z")), "2026-12-01T10:01:00Z"),
        JobPhase::Suspended,
    ));
    r.observe(with_phase(
        seen(&job, Some(status(3, "2026-12-01T10:00:20Z")), "2026-12-01T10:01:10Z"),
        JobPhase::Suspended,
    ));
    r.observe(Observation::Gone { job: job.clone(), at: ts("2026-12-01T10:02:00Z") });
    // A deleted job's later Delete (a re-list) writes nothing.
    r.observe(Observation::Gone { job: job.clone(), at: ts("2026-12-01T10:03:00Z") });
    r.flush();

    let files = stream_files(r.own_dir());
    assert_eq!(files, vec!["fraud_ft_0f1e2d3c.jsonl.gz"]);
    let u = updates(&r.own_dir().join(&files[0]));
    let times: Vec<String> = u.iter().map(|u| u.time.to_string()).collect();
    assert_eq!(
        times,
        [
            "2026-12-01T10:00:00Z",
            "2026-12-01T10:00:30Z",
            "2026-12-01T10:00:30Z",
            "2026-12-01T10:01:00Z",
            "2026-12-01T10:02:00Z"
        ]
    );
    // The first line says everything; the others only what changed.
    assert_eq!((u[0].phase, u[0].gpus), (Some(JobPhase::Running), Some(8.0)));
    assert_eq!(u[0].labels.as_ref().map(|l| l["team"].as_str()), Some("fraud"));
    assert_eq!(u[0].sample.as_ref().and_then(|s| s.metric("loss")), Some(1.0));
    assert_eq!((u[1].phase, &u[1].labels, u[1].gpus), (None, &None, None));
    assert!((u[2].sample.as_ref().unwrap().metric("loss").unwrap() - 0.5).abs() < 1e-9);
    assert_eq!((u[3].phase, u[3].sample.is_none()), (Some(JobPhase::Suspended), true));
    assert!(u[4].deleted);
    assert_eq!(metrics.record_lines.get(), 5);
    assert_eq!(metrics.record_files_created.get(), 1);
    assert_eq!(metrics.record_bytes_written.get(), fs::metadata(r.own_dir().join(&files[0])).unwrap().len());
}

fn namespace(name: &str, labels: &[(&str, &str)], at: &str) -> Observation {
    Observation::Namespace {
        name: name.into(),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        at: ts(at),
    }
}

/// Issue 43: a recorded stream had no namespace labels, so a ClusterProgressPolicy with a
/// `namespaceSelector` selected nothing in `replay` and `backtest`. The labels are on a file's first line
/// once known, and a change (or labels learnt after the job's first line) is a line of its own.
#[test]
fn namespace_labels_are_recorded_with_the_jobs_of_the_namespace() {
    let dir = TempDir::new("namespaces");
    let (mut r, _) = recorder(RecordConfig { max_file_bytes: 1, ..config(&dir.0) });
    let (early, late) = (JobKey::new("fraud", "early"), JobKey::new("fraud", "late"));
    let other = JobKey::new("vision", "ft");
    // The job is seen before its namespace (the two watches race).
    r.observe(seen(&early, Some(status(1, "2026-12-01T10:00:00Z")), "2026-12-01T10:00:01Z"));
    r.observe(seen(&other, Some(status(1, "2026-12-01T10:00:00Z")), "2026-12-01T10:00:01Z"));
    r.observe(namespace("fraud", &[("trainwarden.dev/reclaim", "true")], "2026-12-01T10:00:02Z"));
    // Listed again unchanged: nothing written.
    r.observe(namespace("fraud", &[("trainwarden.dev/reclaim", "true")], "2026-12-01T10:00:03Z"));
    r.observe(seen(&late, Some(status(1, "2026-12-01T10:00:00Z")), "2026-12-01T10:00:04Z"));
    r.flush();
    let early_lines = updates(&r.own_dir().join("fraud_early_0f1e2d3c.jsonl.gz"));
    let reclaim = BTreeMap::from([("trainwarden.dev/reclaim".to_string(), "true".to_string())]);
    assert_eq!(early_lines.len(), 2);
    assert_eq!(early_lines[0].namespace_labels, None);
    assert_eq!(early_lines[1].namespace_labels.as_ref(), Some(&reclaim));
    assert_eq!(early_lines[1].time, ts("2026-12-01T10:00:02Z"));
    assert!(early_lines[1].sample.is_none() && early_lines[1].phase.is_none());
    let late_lines = updates(&r.own_dir().join("fraud_late_0f1e2d3c.jsonl.gz"));
    assert_eq!(late_lines.len(), 1);
    assert_eq!(late_lines[0].namespace_labels.as_ref(), Some(&reclaim));
    assert!(
        updates(&r.own_dir().join("vision_ft_0f1e2d3c.jsonl.gz"))
            .iter()
            .all(|l| l.namespace_labels.is_none())
    );
    // A change is written; a rotated part (max_file_bytes 1) starts again with the labels, so it stands alone.
    r.observe(namespace("fraud", &[], "2026-12-01T10:05:00Z"));
    r.observe(seen(&late, Some(status(2, "2026-12-01T10:06:00Z")), "2026-12-01T10:06:01Z"));
    r.flush();
    let part = updates(&r.own_dir().join("fraud_late_0f1e2d3c.1.jsonl.gz"));
    assert_eq!(part.len(), 1);
    assert_eq!(part[0].namespace_labels, Some(BTreeMap::new()));
    // The early job's file is full and nothing of it was seen since: its next part begins with its next line.
    assert!(!stream_files(r.own_dir()).contains(&"fraud_early_0f1e2d3c.1.jsonl.gz".to_string()));
    r.observe(seen(&early, Some(status(2, "2026-12-01T10:07:00Z")), "2026-12-01T10:07:01Z"));
    r.flush();
    let early_part = updates(&r.own_dir().join("fraud_early_0f1e2d3c.1.jsonl.gz"));
    assert_eq!(early_part[0].namespace_labels, Some(BTreeMap::new()));
}

#[test]
fn the_annotation_is_recorded_as_text_and_a_new_uid_starts_a_new_file() {
    let dir = TempDir::new("uid");
    let (mut r, _) = recorder(config(&dir.0));
    let job = JobKey::new("rhoai", "ft");
    let text =
        r#"{"progressPercentage":10,"trainMetrics":{"loss":1.5},"lastUpdatedTime":"2026-12-01T10:00:00Z"}"#;
    r.observe(seen(&job, Some(RecordedProgress::Annotation(text.into())), "2026-12-01T10:00:01Z"));
    let Observation::Seen(mut again) = seen(&job, None, "2026-12-01T11:00:00Z") else { unreachable!() };
    again.uid = Some("99999999-aaaa".into());
    r.observe(Observation::Seen(again));
    r.flush();
    let files = stream_files(r.own_dir());
    assert_eq!(files, ["rhoai_ft_0f1e2d3c.jsonl.gz", "rhoai_ft_99999999.jsonl.gz"]);
    let old = updates(&r.own_dir().join(&files[0]));
    assert_eq!(old.len(), 2);
    assert_eq!(old[0].sample.as_ref().and_then(|s| s.metric("loss")), Some(1.5));
    assert!(old[1].deleted);
    let new = updates(&r.own_dir().join(&files[1]));
    assert_eq!((new.len(), new[0].phase), (1, Some(JobPhase::Running)));
}

/// A full file is closed; the job's next part begins with a first line, so every part replays alone.
#[test]
fn full_files_rotate_and_each_part_stands_alone() {
    let dir = TempDir::new("rotate");
    let (mut r, _) = recorder(RecordConfig { max_file_bytes: 1, ..config(&dir.0) });
    let job = JobKey::new("fraud", "ft");
    for step in 0..3 {
        let at = format!("2026-12-01T10:0{step}:00Z");
        r.observe(seen(&job, Some(status(step, &at)), &at));
        r.flush();
    }
    let files = stream_files(r.own_dir());
    assert_eq!(
        files,
        ["fraud_ft_0f1e2d3c.1.jsonl.gz", "fraud_ft_0f1e2d3c.2.jsonl.gz", "fraud_ft_0f1e2d3c.jsonl.gz"]
    );
    for name in &files {
        let u = updates(&r.own_dir().join(name));
        assert_eq!(u.len(), 1, "{name}");
        assert_eq!(
            (u[0].phase, u[0].gpus, u[0].sample.is_some()),
            (Some(JobPhase::Running), Some(8.0), true)
        );
    }
    // The deletion ends the last file written, rather than opening a part of its own; and it is not placed
    // before the line above it.
    r.observe(Observation::Gone { job: job.clone(), at: ts("2026-12-01T10:01:00Z") });
    r.flush();
    assert_eq!(stream_files(r.own_dir()).len(), 3);
    let last = updates(&r.own_dir().join("fraud_ft_0f1e2d3c.2.jsonl.gz"));
    assert_eq!(last.len(), 2);
    assert!(last[1].deleted);
    assert_eq!(last[1].time, ts("2026-12-01T10:02:00Z"));
}

#[test]
fn the_oldest_files_go_first_to_stay_within_the_bounds() {
    let dir = TempDir::new("bounds");
    let (mut r, metrics) = recorder(RecordConfig { max_files: 2, ..config(&dir.0) });
    // Another replica's (gone) directory holds the oldest file.
    let other = dir.0.join("pod-gone");
    fs::create_dir_all(&other).unwrap();
    fs::write(other.join("x_y_z.jsonl.gz"), b"old").unwrap();
    let emptied = dir.0.join("pod-gone-too");
    fs::create_dir_all(&emptied).unwrap();
    fs::write(emptied.join("x_y_w.jsonl.gz"), b"old").unwrap();
    // Files the recorder does not write are neither counted nor deleted.
    fs::write(dir.0.join("x_y_z.jsonl.gz"), b"mine").unwrap();
    fs::write(other.join("run.jsonl.gz"), b"mine").unwrap();
    r.last_scan = None;
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let job = JobKey::new("ns", *name);
        let at = format!("2026-12-01T10:0{i}:00Z");
        r.observe(seen(&job, Some(status(1, &at)), &at));
        r.flush();
        // Distinct modification times, whatever the file system's resolution.
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(stream_files(r.own_dir()), ["ns_b_0f1e2d3c.jsonl.gz", "ns_c_0f1e2d3c.jsonl.gz"]);
    assert_eq!(stream_files(&other), ["run.jsonl.gz"], "only the gone replica's stream file is deleted");
    assert!(dir.0.join("x_y_z.jsonl.gz").exists());
    assert!(!emptied.exists(), "a gone replica's emptied directory is removed");
    assert_eq!(metrics.record_files_deleted.get(), 3);
    assert_eq!(metrics.record_files.get(), 2);

    // The byte bound: room for about one file.
    let one = fs::metadata(r.own_dir().join("ns_c_0f1e2d3c.jsonl.gz")).unwrap().len();
    r.config.max_bytes = 2 * one + one / 2;
    r.config.max_files = 100;
    // Job b, whose file is deleted, starts its file again with a first line.
    r.observe(seen(&JobKey::new("ns", "c"), Some(status(2, "2026-12-01T10:05:00Z")), "2026-12-01T10:05:00Z"));
    r.flush();
    assert_eq!(stream_files(r.own_dir()), ["ns_c_0f1e2d3c.jsonl.gz"]);
    r.observe(seen(&JobKey::new("ns", "b"), Some(status(3, "2026-12-01T10:06:00Z")), "2026-12-01T10:06:00Z"));
    r.flush();
    let u = updates(&r.own_dir().join("ns_b_0f1e2d3c.jsonl.gz"));
    assert_eq!((u.len(), u[0].phase), (1, Some(JobPhase::Running)));
    assert!(r.total_bytes() <= r.config.max_bytes || r.files.len() == 1);
}

/// A disk that refuses writes is counted and logged; the lines wait and go out once it accepts them again.
#[test]
fn a_failed_write_is_retried_later() {
    let dir = TempDir::new("failing");
    // The record directory is a plain file: nothing can be created under it.
    let blocked = dir.0.join("blocked");
    fs::write(&blocked, b"").unwrap();
    let (mut r, metrics) = recorder(config(&blocked));
    let job = JobKey::new("ns", "a");
    r.observe(seen(&job, Some(status(1, "2026-12-01T10:00:00Z")), "2026-12-01T10:00:00Z"));
    r.flush();
    r.flush();
    assert_eq!(metrics.record_write_errors.get(), 2);
    fs::remove_file(&blocked).unwrap();
    r.observe(seen(&job, Some(status(2, "2026-12-01T10:00:10Z")), "2026-12-01T10:00:10Z"));
    r.flush();
    let u = updates(&r.own_dir().join("ns_a_0f1e2d3c.jsonl.gz"));
    assert_eq!(u.len(), 2);
    assert_eq!(u[0].phase, Some(JobPhase::Running));
}

/// A restarted recorder (a container restart keeps the pod name) never appends to a file it did not write.
#[test]
fn a_restart_starts_the_next_part() {
    let dir = TempDir::new("restart");
    let job = JobKey::new("ns", "a");
    let (mut first, _) = recorder(config(&dir.0));
    first.observe(seen(&job, Some(status(1, "2026-12-01T10:00:00Z")), "2026-12-01T10:00:00Z"));
    first.flush();
    let (mut second, _) = recorder(config(&dir.0));
    second.observe(seen(&job, Some(status(2, "2026-12-01T10:00:10Z")), "2026-12-01T10:00:10Z"));
    second.flush();
    assert_eq!(stream_files(second.own_dir()), ["ns_a_0f1e2d3c.1.jsonl.gz", "ns_a_0f1e2d3c.jsonl.gz"]);
    assert_eq!(updates(&second.own_dir().join("ns_a_0f1e2d3c.1.jsonl.gz"))[0].phase, Some(JobPhase::Running));
}

/// Each flush is one gzip member: a file cut inside its last member by a crash still holds every earlier
/// member intact, and the replay parser reads them back to the very records that were observed.
#[test]
fn a_file_cut_by_a_crash_reads_back_to_its_last_complete_member() {
    let dir = TempDir::new("crash");
    let (mut r, _) = recorder(config(&dir.0));
    let job = JobKey::new("fraud", "ft");
    let path = r.own_dir().join("fraud_ft_0f1e2d3c.jsonl.gz");
    let mut boundaries = Vec::new();
    for flush in 0..4u32 {
        for i in 0..5u32 {
            let step = flush * 5 + i;
            let at = format!("2026-12-01T10:{:02}:{:02}Z", step / 6, (step % 6) * 10);
            r.observe(seen(&job, Some(status(step, &at)), &at));
        }
        r.flush();
        boundaries.push(fs::metadata(&path).unwrap().len());
    }
    let whole = updates(&path);
    assert_eq!(whole.len(), 20);
    // The crash: the last member only partly written.
    let cut = boundaries[2] + (boundaries[3] - boundaries[2]) / 2;
    File::options().write(true).open(&path).unwrap().set_len(cut).unwrap();
    let read = gunzip(&path);
    assert!(read.is_err(), "a cut member is not taken for a whole one");
    // Dropping the partial member leaves a file that reads back to the records of the first three flushes.
    File::options().write(true).open(&path).unwrap().set_len(boundaries[2]).unwrap();
    let kept = updates(&path);
    assert_eq!(format!("{kept:?}"), format!("{:?}", &whole[..15]));
}

/// Bytes on disk per progress line: one member per line (a job reporting less often than the flush
/// interval) and ten lines per member.
#[test]
fn compressed_bytes_per_update_line() {
    let dir = TempDir::new("size");
    let mut sizes = Vec::new();
    for per_member in [1u32, 10] {
        let (mut r, metrics) = recorder(config(&dir.0.join(format!("per{per_member}"))));
        let job = JobKey::new("fraud", "llama-3-8b-finetune");
        for step in 0..200u32 {
            let at =
                format!("2026-12-01T{:02}:{:02}:{:02}Z", 10 + step / 360, (step / 6) % 60, (step % 6) * 10);
            let v = json!({
                "progressPercentage": step / 2,
                "estimatedRemainingSeconds": 7200 - step * 30,
                "metrics": [
                    {"name": "loss", "value": format!("{:.4}", 2.0 / f64::from(step + 1))},
                    {"name": "learning_rate", "value": "2e-05"},
                    {"name": "current_step", "value": format!("{}", step * 50)},
                ],
                "lastUpdatedTime": at,
            });
            r.observe(seen(&job, Some(RecordedProgress::TrainerStatus(v)), &at));
            if (step + 1) % per_member == 0 {
                r.flush();
            }
        }
        r.flush();
        let raw = gunzip(&r.own_dir().join("fraud_llama-3-8b-finetune_0f1e2d3c.jsonl.gz")).unwrap();
        let bytes = metrics.record_bytes_written.get();
        sizes.push((per_member, raw.len() as f64 / 200.0, bytes as f64 / 200.0));
    }
    for (per_member, raw, compressed) in &sizes {
        println!(
            "{per_member} line(s) per gzip member: {raw:.0} bytes per line raw, {compressed:.0} compressed"
        );
    }
    assert!(sizes[1].2 < sizes[0].2);
}

#[test]
#[ignore = "a timing, not a check: cargo test --release -p trainwarden-controller --lib flush_cost -- --ignored --nocapture"]
fn flush_cost() {
    let dir = TempDir::new("cost");
    let (mut r, metrics) = recorder(config(&dir.0));
    for round in 0..3u32 {
        let at = format!("2026-12-01T10:00:{:02}Z", round * 10);
        let started = Instant::now();
        for i in 0..5000 {
            r.observe(seen(&JobKey::new("ns", format!("job-{i}")), Some(status(round, &at)), &at));
        }
        let observed = started.elapsed();
        r.flush();
        println!(
            "5000 jobs, round {round}: observe {observed:?}, flush {:?} (5000 files), {} bytes written so far",
            started.elapsed() - observed,
            metrics.record_bytes_written.get()
        );
    }
}

/// The task: what the watch hands over while it runs is written at the interval, and what it holds when told
/// to stop is written before it ends.
#[tokio::test]
async fn the_task_writes_at_the_interval_and_when_it_stops() {
    let dir = TempDir::new("task");
    let metrics = Arc::new(Metrics::new());
    let config = RecordConfig { flush_interval: Duration::from_millis(50), queue: 2, ..config(&dir.0) };
    let r = Recorder::new(config, "pod-a", metrics.clone());
    let path = r.own_dir().join("ns_a_0f1e2d3c.jsonl.gz");
    let (tx, rx) = mpsc::channel(2);
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(run(r, rx, stopped));
    let job = JobKey::new("ns", "a");
    tx.send(seen(&job, Some(status(1, "2026-12-01T10:00:00Z")), "2026-12-01T10:00:00Z")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < deadline, "written at the interval");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tx.send(seen(&job, Some(status(2, "2026-12-01T10:00:10Z")), "2026-12-01T10:00:10Z")).await.unwrap();
    tx.send(Observation::Gone { job: job.clone(), at: ts("2026-12-01T10:00:20Z") }).await.unwrap();
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task).await.unwrap().unwrap();
    let u = updates(&path);
    assert_eq!(u.len(), 3, "{u:?}");
    assert!(u[2].deleted);
}
