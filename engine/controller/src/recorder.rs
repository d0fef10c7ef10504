//! The recorder (`--record-dir`): every TrainJob's progress, as the controller saw it, written as the
//! compact stream lines `trainwarden replay` reads, so a fleet's real runs become a backtest corpus.
//!
//! - The TrainJob watch hands each event over a bounded channel with `try_send`: a full channel drops the
//!   observation (`trainwarden_record_dropped{reason="queue_full"}`); the watch and the brain never wait for
//!   the disk.
//! - One gzip file per job (`<namespace>_<name>_<uid prefix>.jsonl.gz`). Lines wait in memory at most
//!   `flush_interval`; each flush of a file is one complete gzip member written with one `write` (replay
//!   reads multi-member gzip), so a crash can only cut the last member, every earlier one stays intact; a
//!   failed write (disk full) is cut back to the file's previous length and retried at the next flush.
//! - A file starts with a line carrying phase, labels, GPUs and its namespace's labels once known (so it
//!   replays alone, cluster policies' `namespaceSelector` included); after that a line is written only when
//!   something replay sees changed (the progress report, phase, labels, GPUs, the namespace's labels): a
//!   watch re-delivers an unchanged `trainerStatus` whenever anything else about the object changes. A
//!   deletion is a `"deleted": true` line. A line's time is its report's `lastUpdatedTime` when the report changed, else
//!   when the controller saw it; never earlier than the job's line before (replay wants each input in order).
//! - Every replica records (recording writes nothing to the cluster, and a standby that records has no gap
//!   when it takes over), each into `<dir>/<identity>/`, so replicas sharing a volume never write one file.
//!   The bounds count every replica's files under `<dir>`: the oldest files (by last write) are deleted first,
//!   which also reclaims the directories of pods that are gone. A file that reaches `max_file_bytes` is
//!   closed and the job goes on in `<stem>.1.jsonl.gz`, `.2` …; a restarted recorder never appends to a
//!   file it did not create (it may end in a cut member) and starts the next number instead.
//!
//! The file work is blocking and runs on tokio's blocking pool, one flush at a time.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};
use trainwarden_core::{JobKey, JobPhase, Timestamp};

use crate::messages::{JobObservation, Observation, RecordedProgress};
use crate::metrics::{Metrics, RecordDrop};
use crate::runtime::config::RecordConfig;

/// The extension of every stream file; only such files count towards (and are deleted by) the bounds.
pub const EXTENSION: &str = ".jsonl.gz";

/// Lines held in memory beyond this many bytes are flushed before the interval is up.
const FLUSH_EARLY_BYTES: usize = 4 << 20;
/// Lines held in memory (a disk that refuses writes) beyond this many bytes: new observations are dropped.
const BACKLOG_BYTES: usize = 64 << 20;
/// How often the whole directory is listed again (other replicas' files, files removed by hand).
const RESCAN_INTERVAL: Duration = Duration::from_secs(60);
/// The longest name part of a file name (names may be 253 characters; file names 255 bytes).
const NAME_CHARS: usize = 100;
/// Characters of the uid in a file name: enough to tell a job from one created again under its name.
const UID_CHARS: usize = 8;

/// The file name stem of a job's streams: `<namespace>_<name>_<uid prefix>`, every character outside
/// `[a-z0-9-]` replaced by `-` (namespaces and names never hold `_`, so the parts stay apart).
pub fn file_stem(job: &JobKey, uid: Option<&str>) -> String {
    let safe = |s: &str, most: usize| -> String {
        s.chars()
            .take(most)
            .map(|c| c.to_ascii_lowercase())
            .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' { c } else { '-' })
            .collect()
    };
    let uid = uid.filter(|u| !u.is_empty()).map_or_else(|| "nouid".to_string(), |u| safe(u, UID_CHARS));
    format!("{}_{}_{uid}", safe(&job.namespace, 63), safe(&job.name, NAME_CHARS))
}

/// The file name of part `part` of a stem: `stem.jsonl.gz`, then `stem.1.jsonl.gz`, `stem.2.jsonl.gz` …
pub fn file_name(stem: &str, part: u32) -> String {
    if part == 0 { format!("{stem}{EXTENSION}") } else { format!("{stem}.{part}{EXTENSION}") }
}

/// The stem and part of a stream file name; `None` for a file the recorder does not write (the bounds never
/// delete those).
pub fn parse_file_name(name: &str) -> Option<(&str, u32)> {
    let base = name.strip_suffix(EXTENSION)?;
    let (stem, part) = match base.split_once('.') {
        None => (base, 0),
        Some((stem, part)) => (stem, part.parse().ok().filter(|p| *p > 0)?),
    };
    // `<namespace>_<name>_<uid>`: three parts, none empty.
    let ours = stem.split('_').count() == 3 && stem.split('_').all(|p| !p.is_empty());
    ours.then_some((stem, part))
}

fn phase_name(phase: JobPhase) -> &'static str {
    match phase {
        JobPhase::Running => "Running",
        JobPhase::Suspended => "Suspended",
        JobPhase::Complete => "Complete",
        JobPhase::Failed => "Failed",
    }
}

/// What the recorder knows of one job.
#[derive(Debug)]
struct JobState {
    uid: Option<String>,
    stem: String,
    part: u32,
    /// The current file has this job's first line (a new or rotated file needs one).
    started: bool,
    progress: Option<RecordedProgress>,
    phase: Option<JobPhase>,
    labels: BTreeMap<String, String>,
    gpus: Option<f64>,
    /// Its namespace's labels as the current file last said them (`None`: not said in this file yet).
    namespace_labels: Option<BTreeMap<String, String>>,
    /// The time of the job's last line (any file's): the next one is never earlier.
    last_time: Timestamp,
    /// The file of the job's last line, where its deletion goes (its current part may not be started).
    last_path: Option<PathBuf>,
}

/// What became of a flush's lines.
enum Written {
    /// Appended to the file as one gzip member.
    Appended,
    /// Not written: the file is gone, or exists without this recorder having created it.
    NotOurs,
}

/// A stream file under the directory, as last seen.
#[derive(Clone, Copy, Debug)]
struct FileEntry {
    bytes: u64,
    modified: SystemTime,
}

/// The recorder's state and its file work, without the task around it (tests drive it directly).
pub struct Recorder {
    config: RecordConfig,
    /// `<dir>/<identity>`: where this replica writes.
    own: PathBuf,
    jobs: HashMap<JobKey, JobState>,
    /// Each namespace's labels, as the Namespace watch last saw them.
    namespaces: HashMap<String, BTreeMap<String, String>>,
    /// Lines not written yet, by file.
    pending: HashMap<PathBuf, Vec<u8>>,
    pending_bytes: usize,
    /// Every stream file under the directory (all replicas'), for the bounds.
    files: HashMap<PathBuf, FileEntry>,
    /// The next free part of each stem in `own`.
    next_part: HashMap<String, u32>,
    last_scan: Option<Instant>,
    metrics: Arc<Metrics>,
}

impl Recorder {
    /// A recorder writing into `<config.dir>/<identity>`. Nothing is touched before the first flush.
    pub fn new(config: RecordConfig, identity: &str, metrics: Arc<Metrics>) -> Self {
        let own_name: String = identity
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' })
            .collect();
        let own_name = if own_name.is_empty() || own_name.chars().all(|c| c == '.') {
            "trainwarden".to_string()
        } else {
            own_name
        };
        Recorder {
            own: config.dir.join(own_name),
            config,
            jobs: HashMap::new(),
            namespaces: HashMap::new(),
            pending: HashMap::new(),
            pending_bytes: 0,
            files: HashMap::new(),
            next_part: HashMap::new(),
            last_scan: None,
            metrics,
        }
    }

    /// Where this replica's files go.
    pub fn own_dir(&self) -> &Path {
        &self.own
    }

    /// Whether enough lines wait that they should be written before the interval is up.
    pub fn wants_flush(&self) -> bool {
        self.pending_bytes >= FLUSH_EARLY_BYTES
    }

    /// Takes one observation: appends the line it calls for, if any, to the job's pending lines.
    pub fn observe(&mut self, observation: Observation) {
        if self.pending_bytes >= BACKLOG_BYTES {
            self.metrics.record_drop(RecordDrop::Backlog);
            return;
        }
        match observation {
            Observation::Seen(seen) => self.seen(*seen),
            Observation::Gone { job, at } => {
                if let Some(state) = self.jobs.remove(&job) {
                    self.append_deleted(&job, &state, at);
                }
            }
            Observation::Namespace { name, labels, at } => self.namespace(name, labels, at),
        }
    }

    /// A namespace's labels: every job of it whose file already began is told now (a line with
    /// `namespaceLabels` only); a file not begun yet says them on its first line.
    fn namespace(&mut self, name: String, labels: BTreeMap<String, String>, at: Timestamp) {
        if self.namespaces.get(&name) == Some(&labels) {
            return;
        }
        let mut lines = Vec::new();
        for (job, state) in self.jobs.iter_mut().filter(|(job, _)| job.namespace == name) {
            if !state.started || state.namespace_labels.as_ref() == Some(&labels) {
                continue;
            }
            let time = at.max(state.last_time);
            let mut line = base(time, job);
            line.insert("namespaceLabels".into(), json!(labels));
            state.namespace_labels = Some(labels.clone());
            state.last_time = time;
            let path = self.own.join(file_name(&state.stem, state.part));
            state.last_path = Some(path.clone());
            lines.push((path, Value::Object(line)));
        }
        for (path, line) in lines {
            self.append(path, &line);
        }
        self.namespaces.insert(name, labels);
    }

    fn append_deleted(&mut self, job: &JobKey, state: &JobState, at: Timestamp) {
        let Some(path) = &state.last_path else { return };
        let mut line = base(at.max(state.last_time), job);
        line.insert("deleted".into(), true.into());
        self.append(path.clone(), &Value::Object(line));
    }

    fn seen(&mut self, seen: JobObservation) {
        if let Some(old) = self.jobs.get(&seen.job)
            && old.uid != seen.uid
        {
            // Deleted and created again while the watch was away: the old stream ends, a new file begins.
            if let Some(old) = self.jobs.remove(&seen.job) {
                self.append_deleted(&seen.job, &old, seen.at);
            }
        }
        if !self.jobs.contains_key(&seen.job) {
            let stem = file_stem(&seen.job, seen.uid.as_deref());
            let part = self.take_part(&stem);
            let state = JobState {
                uid: seen.uid.clone(),
                stem,
                part,
                started: false,
                progress: None,
                phase: None,
                labels: BTreeMap::new(),
                gpus: None,
                namespace_labels: None,
                last_time: Timestamp::MIN,
                last_path: None,
            };
            self.jobs.insert(seen.job.clone(), state);
        }
        let namespace_labels = self.namespaces.get(&seen.job.namespace);
        let Some(state) = self.jobs.get_mut(&seen.job) else { return };
        let namespace_changed =
            namespace_labels.is_some() && namespace_labels != state.namespace_labels.as_ref();
        let progress_changed = seen.progress.is_some() && seen.progress != state.progress;
        let phase_changed = seen.phase.is_some() && seen.phase != state.phase;
        let labels_changed = seen.labels != state.labels;
        let gpus_changed = seen.gpus.is_some() && seen.gpus != state.gpus;
        let start = !state.started;
        if !(start
            || progress_changed
            || phase_changed
            || labels_changed
            || gpus_changed
            || namespace_changed)
        {
            return;
        }
        let own_time = if progress_changed { seen.sample_time.unwrap_or(seen.at) } else { seen.at };
        let time = own_time.max(state.last_time);
        let mut line = base(time, &seen.job);
        if start || phase_changed {
            // A file's first line says the phase; before the object could be read, it is running.
            let phase = seen.phase.or(state.phase).unwrap_or(JobPhase::Running);
            line.insert("phase".into(), phase_name(phase).into());
        }
        if start || labels_changed {
            line.insert("labels".into(), json!(seen.labels));
        }
        if let Some(g) = seen.gpus.or(state.gpus)
            && (start || gpus_changed)
        {
            line.insert("gpus".into(), json!(g));
        }
        if let Some(labels) = namespace_labels
            && (start || namespace_changed)
        {
            line.insert("namespaceLabels".into(), json!(labels));
            state.namespace_labels = Some(labels.clone());
        }
        if let Some(p) = seen.progress.as_ref().filter(|_| start || progress_changed) {
            match p {
                RecordedProgress::TrainerStatus(v) => line.insert("trainerStatus".into(), v.clone()),
                RecordedProgress::Annotation(a) => line.insert("annotation".into(), a.clone().into()),
            };
        }
        state.started = true;
        state.last_time = time;
        if seen.progress.is_some() {
            state.progress = seen.progress;
        }
        if seen.phase.is_some() {
            state.phase = seen.phase;
        }
        if seen.gpus.is_some() {
            state.gpus = seen.gpus;
        }
        state.labels = seen.labels;
        let path = self.own.join(file_name(&state.stem, state.part));
        state.last_path = Some(path.clone());
        self.append(path, &Value::Object(line));
    }

    fn append(&mut self, path: PathBuf, line: &Value) {
        let buf = self.pending.entry(path).or_default();
        let before = buf.len();
        // Writing JSON into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *buf, line);
        buf.push(b'\n');
        self.pending_bytes += buf.len() - before;
        self.metrics.record_lines.inc();
    }

    /// The next part of `stem` no file in this replica's directory has.
    fn take_part(&mut self, stem: &str) -> u32 {
        let next = self.next_part.entry(stem.to_string()).or_insert(0);
        let part = *next;
        *next = part.saturating_add(1);
        part
    }

    /// Writes every pending line (one gzip member per file), rotates full files and enforces the bounds.
    /// Errors are logged and counted; lines that could not be written are kept and tried again.
    pub fn flush(&mut self) {
        if self.last_scan.is_none_or(|t| t.elapsed() >= RESCAN_INTERVAL) {
            self.scan();
        }
        if !self.pending.is_empty()
            && let Err(e) = fs::create_dir_all(&self.own)
        {
            self.metrics.record_write_errors.inc();
            warn!(dir = %self.own.display(), error = %e, "recording: cannot create the directory");
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        for (path, lines) in pending {
            match self.write_member(&path, &lines) {
                Ok(Written::Appended) => {}
                Ok(Written::NotOurs) => {
                    // The file was removed since (the bounds of another replica, by hand), or is one this
                    // recorder did not create: these lines would not replay alone. The job starts again.
                    self.metrics.record_drop(RecordDrop::FileGone);
                    self.restart_jobs_in(&path, true);
                }
                Err(e) => {
                    self.metrics.record_write_errors.inc();
                    warn!(file = %path.display(), error = %e, "recording: write failed; trying again later");
                    self.pending_bytes += lines.len();
                    self.pending.insert(path, lines);
                }
            }
        }
        self.rotate_full();
        self.enforce_bounds();
        self.metrics.record_files.set(i64::try_from(self.files.len()).unwrap_or(i64::MAX));
        self.metrics.record_bytes.set(i64::try_from(self.total_bytes()).unwrap_or(i64::MAX));
    }

    fn write_member(&mut self, path: &Path, lines: &[u8]) -> io::Result<Written> {
        let mut gz = GzEncoder::new(Vec::with_capacity(lines.len() / 4 + 64), Compression::default());
        gz.write_all(lines)?;
        let member = gz.finish()?;
        let known = self.files.contains_key(path);
        // A file this recorder did not create is never appended to (it may end in a cut member).
        let opened = if known {
            OpenOptions::new().append(true).open(path)
        } else {
            OpenOptions::new().append(true).create_new(true).open(path)
        };
        let mut file = match opened {
            Ok(f) => f,
            Err(e) if known && e.kind() == io::ErrorKind::NotFound => {
                self.files.remove(path);
                return Ok(Written::NotOurs);
            }
            Err(e) if !known && e.kind() == io::ErrorKind::AlreadyExists => return Ok(Written::NotOurs),
            Err(e) => return Err(e),
        };
        let before = file.metadata()?.len();
        if let Err(e) = file.write_all(&member).and_then(|()| file.flush()) {
            // A member cut short would make the rest of the file unreadable: cut it back.
            let _ = file.set_len(before);
            if !known {
                drop::<File>(file);
                let _ = fs::remove_file(path);
            }
            return Err(e);
        }
        drop::<File>(file);
        self.metrics.record_bytes_written.inc_by(member.len() as u64);
        if !known {
            self.metrics.record_files_created.inc();
        }
        self.files.insert(
            path.to_path_buf(),
            FileEntry { bytes: before + member.len() as u64, modified: SystemTime::now() },
        );
        Ok(Written::Appended)
    }

    /// The jobs recorded in `path` begin their file again with a first line; in their next part when
    /// `next_part` (the path is someone else's).
    fn restart_jobs_in(&mut self, path: &Path, next_part: bool) {
        if path.parent() != Some(self.own.as_path()) {
            return;
        }
        let Some((stem, part)) = path.file_name().and_then(|n| n.to_str()).and_then(parse_file_name) else {
            return;
        };
        let stem = stem.to_string();
        if next_part {
            let next = self.next_part.entry(stem.clone()).or_insert(0);
            *next = (*next).max(part.saturating_add(1));
        }
        let keys: Vec<JobKey> = self
            .jobs
            .iter()
            .filter(|(_, s)| s.stem == stem && s.part == part)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let new_part = if next_part { Some(self.take_part(&stem)) } else { None };
            if let Some(state) = self.jobs.get_mut(&key) {
                state.started = false;
                if let Some(p) = new_part {
                    state.part = p;
                }
            }
        }
    }

    /// Jobs whose file reached `max_file_bytes` go on in their next part, which begins with a first line.
    fn rotate_full(&mut self) {
        let max = self.config.max_file_bytes;
        let full: Vec<JobKey> = self
            .jobs
            .iter()
            .filter(|(_, s)| {
                self.files.get(&self.own.join(file_name(&s.stem, s.part))).is_some_and(|f| f.bytes >= max)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in full {
            let Some(stem) = self.jobs.get(&key).map(|s| s.stem.clone()) else { continue };
            let part = self.take_part(&stem);
            if let Some(state) = self.jobs.get_mut(&key) {
                state.part = part;
                state.started = false;
            }
        }
    }

    fn total_bytes(&self) -> u64 {
        self.files.values().map(|f| f.bytes).sum()
    }

    /// Deletes the oldest files (by last write) until the directory is within `max_bytes` and `max_files`.
    fn enforce_bounds(&mut self) {
        let mut total = self.total_bytes();
        if total <= self.config.max_bytes && self.files.len() <= self.config.max_files {
            return;
        }
        let mut by_age: Vec<(SystemTime, PathBuf)> =
            self.files.iter().map(|(p, f)| (f.modified, p.clone())).collect();
        by_age.sort();
        for (_, path) in by_age {
            if total <= self.config.max_bytes && self.files.len() <= self.config.max_files {
                break;
            }
            match fs::remove_file(&path) {
                Ok(()) => {
                    self.metrics.record_files_deleted.inc();
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    self.metrics.record_write_errors.inc();
                    warn!(file = %path.display(), error = %e, "recording: cannot delete an old file");
                    continue;
                }
            }
            if let Some(entry) = self.files.remove(&path) {
                total -= entry.bytes;
            }
            // The job still being recorded there starts its file again, with a first line.
            self.restart_jobs_in(&path, false);
            if let Some(parent) = path.parent()
                && parent != self.config.dir
                && parent != self.own
            {
                // A gone replica's directory, once empty, goes too (fails harmlessly while it is not).
                let _ = fs::remove_dir(parent);
            }
        }
    }

    /// Lists the stream files in the replicas' directories (`<dir>/*/`), this one's included.
    fn scan(&mut self) {
        self.last_scan = Some(Instant::now());
        let mut found = HashMap::new();
        // Only the replicas' directories: files of other programs next to them are never counted nor deleted.
        let mut dirs = Vec::new();
        if let Ok(entries) = fs::read_dir(&self.config.dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(entry.path());
                }
            }
        }
        for dir in dirs {
            let Ok(entries) = fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some((stem, part)) = name.to_str().and_then(parse_file_name) else { continue };
                let Ok(meta) = entry.metadata() else { continue };
                if !meta.is_file() {
                    continue;
                }
                if dir == self.own {
                    let next = self.next_part.entry(stem.to_string()).or_insert(0);
                    *next = (*next).max(part.saturating_add(1));
                }
                let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                found.insert(entry.path(), FileEntry { bytes: meta.len(), modified });
            }
        }
        // Files of this replica's jobs that are gone (removed by another replica's bounds, or by hand):
        // those jobs start their file again.
        let vanished: Vec<PathBuf> = self
            .files
            .keys()
            .filter(|p| p.parent() == Some(self.own.as_path()) && !found.contains_key(*p))
            .cloned()
            .collect();
        self.files = found;
        for path in vanished {
            self.restart_jobs_in(&path, false);
        }
    }
}

fn base(time: Timestamp, job: &JobKey) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("time".into(), time.to_string().into());
    m.insert("job".into(), job.to_string().into());
    m
}

/// Runs the recorder until `stop` fires or every sender is gone, then writes what it holds.
pub async fn run(
    recorder: Recorder,
    mut observations: mpsc::Receiver<Observation>,
    mut stop: oneshot::Receiver<()>,
) {
    info!(dir = %recorder.own_dir().display(), "recording TrainJob progress");
    let mut tick = tokio::time::interval(recorder.config.flush_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut inbox = Inbox { observations: &mut observations, held: Vec::new(), open: true };
    // The files already there (a restart, other replicas) count from the start, and take their parts.
    let Some(mut recorder) = inbox.flush(recorder, true).await else { return };
    loop {
        for o in inbox.held.drain(..) {
            recorder.observe(o);
        }
        if !inbox.open {
            break;
        }
        let stopping = tokio::select! {
            o = inbox.observations.recv() => match o {
                Some(o) => {
                    recorder.observe(o);
                    if !recorder.wants_flush() {
                        continue;
                    }
                    false
                }
                None => { inbox.open = false; false }
            },
            _ = tick.tick() => false,
            _ = &mut stop => {
                // What the watch already handed over is written too.
                while let Ok(o) = inbox.observations.try_recv() {
                    recorder.observe(o);
                }
                true
            }
        };
        match inbox.flush(recorder, !stopping).await {
            Some(r) if !stopping => recorder = r,
            _ => return,
        }
    }
    let _ = inbox.flush(recorder, false).await;
}

/// The recorder's end of the channel, and what arrived while a flush ran.
struct Inbox<'a> {
    observations: &'a mut mpsc::Receiver<Observation>,
    held: Vec<Observation>,
    open: bool,
}

impl Inbox<'_> {
    /// Flushes on the blocking pool; meanwhile (with `receive`) the watch's observations are held here, up to
    /// the channel's size again, rather than left to fill the channel (a flush of thousands of files takes
    /// a good part of a second). `None` if the flush panicked: recording stops.
    async fn flush(&mut self, mut recorder: Recorder, receive: bool) -> Option<Recorder> {
        let (metrics, hold) = (recorder.metrics.clone(), recorder.config.queue.max(1));
        let mut flush = tokio::task::spawn_blocking(move || {
            recorder.flush();
            recorder
        });
        loop {
            tokio::select! {
                done = &mut flush => return match done {
                    Ok(r) => Some(r),
                    Err(e) => {
                        warn!(error = %e, "recording stopped: a flush panicked");
                        None
                    }
                },
                o = self.observations.recv(), if receive && self.open => match o {
                    Some(o) if self.held.len() < hold => self.held.push(o),
                    Some(_) => metrics.record_drop(RecordDrop::QueueFull),
                    None => self.open = false,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests;
