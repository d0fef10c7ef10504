//! Recorded streams read as they come, for `trainwarden replay`: each one line by line from a [`BufRead`]
//! ([`StreamLines`]), several merged on their clocks through a bounded reorder window ([`Merge`]). What is
//! held is the window's records, never the whole stream, so memory depends on how many jobs report within
//! the window and not on how long the stream is.
//!
//! The order is the one a stable sort of every record by time would give: by time, ties by input (in the
//! order given), then by line. A line may come earlier in time than a line above it in the same input by at
//! most the window (`max_lateness`); a later one is a [`LateRecord`] error, never silently reordered or
//! dropped. Where the bytes come from (files, stdin, decompression) is the caller's business.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::io::BufRead;

use crate::input::reorder::{Buckets, Timed};
use crate::input::stream::{RecordError, StreamRecord, parse_line};
use crate::time::Timestamp;
use crate::units::duration::PolicyDuration;

/// The longest line a stream may hold. A TrainJob object is at most 1.5 MiB (etcd's limit on an object); a
/// longer line is not a record, and holding it could exhaust memory (a file without newlines).
pub const MAX_LINE_BYTES: usize = 8 << 20;

/// How much of a line longer than [`MAX_LINE_BYTES`] is read (and dropped) to find its end, so the lines after
/// it can be checked too; past this the input is not read on (`/dev/zero` has no line end at all).
const MAX_SKIPPED_LINE_BYTES: usize = 64 << 20;

/// Where a [`Merge`] takes an input's records from: the input's own lines, decoded here ([`StreamLines`]), or
/// decoded ahead elsewhere (the CLI's decoding thread per input), in the same order.
pub trait RecordSource {
    /// The next record and its line number; `None` at the end.
    fn next_record(&mut self) -> Option<Result<(usize, StreamRecord), RecordError>>;
    /// The name errors give this input.
    fn source(&self) -> &str;
}

impl<R: BufRead> RecordSource for StreamLines<R> {
    fn next_record(&mut self) -> Option<Result<(usize, StreamRecord), RecordError>> {
        StreamLines::next_record(self)
    }

    fn source(&self) -> &str {
        StreamLines::source(self)
    }
}

/// The records of one stream, decoded line by line: blank lines and `#` comments are skipped, as in
/// [`parse_stream`](crate::input::stream::parse_stream), and errors carry the same `file:line[:column]`.
pub struct StreamLines<R> {
    reader: R,
    source: String,
    line: usize,
    previous: Option<Timestamp>,
    buf: Vec<u8>,
    /// Set after a read failed: the reader is not asked again (a corrupt archive would fail forever).
    broken: bool,
    bytes_read: u64,
}

impl<R: BufRead> StreamLines<R> {
    /// Lines of `reader`, named `source` in errors.
    pub fn new(reader: R, source: impl Into<String>) -> Self {
        StreamLines {
            reader,
            source: source.into(),
            line: 0,
            previous: None,
            buf: Vec::new(),
            broken: false,
            bytes_read: 0,
        }
    }

    /// The bytes read so far (lines, their ends and what was skipped), for callers that batch by size.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// The name errors give this stream.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The next record and its line number; `None` at the end. After a bad line, reading can go on (to list
    /// every bad line); after a failed read it cannot, and the stream ends.
    pub fn next_record(&mut self) -> Option<Result<(usize, StreamRecord), RecordError>> {
        loop {
            if self.broken {
                return None;
            }
            // A whole line already in the reader's buffer (nearly every line) is decoded where it lies;
            // anything else (a line across a refill, the last line without its newline) takes the copying
            // path below. A read error is reported here: some readers (gzip's) report one only once.
            let available = match self.reader.fill_buf() {
                Ok(available) => available,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.broken = true;
                    return Some(Err(self.error(self.line + 1, None, format!("cannot read: {e}"))));
                }
            };
            if let Some(end) = memchr::memchr(b'\n', available)
                && end < MAX_LINE_BYTES
            {
                self.line += 1;
                self.bytes_read += end as u64 + 1;
                let decoded = decode_line(&available[..end], &self.source, self.line, &mut self.previous);
                self.reader.consume(end + 1);
                match decoded {
                    Some(record) => return Some(record),
                    None => continue,
                }
            }
            self.buf.clear();
            let length = match read_line_capped(
                &mut self.reader,
                &mut self.buf,
                MAX_LINE_BYTES,
                MAX_SKIPPED_LINE_BYTES,
            ) {
                Ok(0) => return None,
                Ok(n) => {
                    self.bytes_read += n as u64;
                    n
                }
                Err(e) => {
                    self.broken = true;
                    return Some(Err(self.error(self.line + 1, None, format!("cannot read: {e}"))));
                }
            };
            self.line += 1;
            if length >= MAX_SKIPPED_LINE_BYTES {
                // No line end in sight (`/dev/zero`, a binary file): reading on might never end.
                self.broken = true;
                let message = format!(
                    "no line end in the first {MAX_SKIPPED_LINE_BYTES} bytes of the line (not a stream of JSON \
                     lines?); the rest of the input is not read"
                );
                return Some(Err(self.error(self.line, None, message)));
            }
            if length > MAX_LINE_BYTES {
                let message = format!(
                    "the line is {length} bytes long, more than the {MAX_LINE_BYTES} a record may be"
                );
                return Some(Err(self.error(self.line, None, message)));
            }
            if let Some(record) = decode_line(&self.buf, &self.source, self.line, &mut self.previous) {
                return Some(record);
            }
        }
    }

    fn error(&self, line: usize, column: Option<usize>, message: String) -> RecordError {
        RecordError { file: self.source.clone(), line, column, message }
    }
}

/// Decodes one line's bytes (with or without its `\n`); `None` for a blank line or a `#` comment. A line
/// whose record has a time moves `previous` on (the lower bound of a TrainJob object's time).
fn decode_line(
    bytes: &[u8],
    source: &str,
    line: usize,
    previous: &mut Option<Timestamp>,
) -> Option<Result<(usize, StreamRecord), RecordError>> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let column = Some(e.valid_up_to() + 1);
            return Some(Err(RecordError {
                file: source.into(),
                line,
                column,
                message: "invalid UTF-8".into(),
            }));
        }
    };
    // A byte-order mark (Windows editors write one) opens the text, as in a policy file; it is not part of
    // the first line.
    let text = if line == 1 { text.strip_prefix('\u{feff}').unwrap_or(text) } else { text };
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return None;
    }
    let record = parse_line(trimmed, source, line, *previous);
    if let Ok(r) = &record {
        *previous = Some(r.time());
    }
    Some(record.map(|r| (line, r)))
}

/// Reads one line (with its `\n`) into `buf`, keeping at most `cap` bytes of it; the rest of a longer line
/// is read and dropped, up to `limit` bytes in all. Returns the line's whole length (0 at the end), or
/// `limit` or more when it stopped there without finding the line's end.
fn read_line_capped(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
    limit: usize,
) -> std::io::Result<usize> {
    let mut length = 0;
    loop {
        if length >= limit {
            return Ok(length);
        }
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(length);
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let room = cap.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len();
        length += used;
        reader.consume(used);
        if done {
            return Ok(length);
        }
    }
}

/// A line earlier than the window allows: more than `max_lateness` before the latest line above it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{file}:{line}: its time {time} is {late} before {latest} (line {latest_line}), more than the {max_lateness} \
     a line may be late"
)]
pub struct LateRecord {
    /// The input's name.
    pub file: String,
    /// The late line.
    pub line: usize,
    /// Its time.
    pub time: Timestamp,
    /// How far it is behind the latest time of its input (rounded up to the millisecond).
    pub late: PolicyDuration,
    /// The latest time of the input so far, and its line.
    pub latest: Timestamp,
    /// The line of `latest`.
    pub latest_line: usize,
    /// The window it is outside of.
    pub max_lateness: PolicyDuration,
}

/// Why a merged stream stopped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// A line that cannot be read or decoded.
    #[error(transparent)]
    Invalid(RecordError),
    /// A line later than the window allows.
    #[error(transparent)]
    Late(LateRecord),
}

/// A record waiting in its input's window, ordered by time, then line.
struct Pending {
    time: Timestamp,
    line: usize,
    record: StreamRecord,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.time, self.line).cmp(&(other.time, other.line))
    }
}

/// The records of one input waiting for their turn. Lines in order (nearly all of a sorted stream) queue
/// at the back of `in_order` at no cost; a line earlier than the one before it goes to a ring of time
/// buckets over the window ([`Buckets`]), which costs O(1) amortised too (a stream written in job order
/// within each round sends most lines there).
struct Window {
    in_order: VecDeque<Pending>,
    stragglers: Buckets<Pending>,
}

impl Timed for Pending {
    fn time(&self) -> Timestamp {
        self.time
    }
}

impl Window {
    fn new(max_lateness: PolicyDuration) -> Self {
        let window_secs = max_lateness.to_signed_duration().as_secs();
        Window { in_order: VecDeque::new(), stragglers: Buckets::new(window_secs) }
    }

    fn push(&mut self, p: Pending) {
        if self.in_order.back().is_none_or(|last| *last <= p) {
            self.in_order.push_back(p);
        } else {
            self.stragglers.push(p);
        }
    }

    fn first_time(&mut self) -> Option<Timestamp> {
        match (self.in_order.front(), self.stragglers.peek()) {
            (Some(a), Some(b)) => Some(a.time.min(b.time)),
            (a, b) => a.map(|p| p.time).or(b.map(|p| p.time)),
        }
    }

    fn pop(&mut self) -> Option<Pending> {
        let straggler_first = match (self.in_order.front(), self.stragglers.peek()) {
            (Some(a), Some(b)) => b < a,
            (None, _) => true,
            (Some(_), None) => false,
        };
        if straggler_first { self.stragglers.pop() } else { self.in_order.pop_front() }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.in_order.len() + self.stragglers.len()
    }
}

/// One input of a [`Merge`] and its window.
struct Input<S> {
    lines: S,
    window: Window,
    /// The latest time read so far, and its line.
    latest: Option<(Timestamp, usize)>,
    ended: bool,
}

/// What an input needs before the merge can go on.
enum Step {
    /// Its earliest waiting record is final: no line still to come can go before it.
    Ready(Timestamp),
    /// A line must be read; every line still to come is at or after this time (`None`: no bound yet).
    Read(Option<Timestamp>),
}

impl<S> Input<S> {
    fn step(&mut self, max_lateness: jiff::SignedDuration) -> Option<Step> {
        let head = self.window.first_time();
        if self.ended {
            return head.map(Step::Ready);
        }
        let Some((latest, _)) = self.latest else { return Some(Step::Read(None)) };
        // A line still to come is at least `latest - max_lateness` (else it is an error).
        let floor = latest.checked_sub(max_lateness).ok();
        Some(match head {
            Some(h) if floor.is_some_and(|f| h <= f) => Step::Ready(h),
            _ => Step::Read(floor),
        })
    }
}

/// Several streams merged in time order through a window of `max_lateness` per input (see the module).
pub struct Merge<S> {
    inputs: Vec<Input<S>>,
    max_lateness: PolicyDuration,
    /// The input whose line failed, for [`Merge::invalid_lines`].
    failed: Option<usize>,
    /// Where the last record handed out was: its input and line.
    last: Option<(usize, usize)>,
}

impl<S: RecordSource> Merge<S> {
    /// Merges `inputs`; a line may be up to `max_lateness` earlier than the latest line above it.
    pub fn new(inputs: Vec<S>, max_lateness: PolicyDuration) -> Self {
        let inputs = inputs
            .into_iter()
            .map(|lines| Input { lines, window: Window::new(max_lateness), latest: None, ended: false })
            .collect();
        Merge { inputs, max_lateness, failed: None, last: None }
    }

    /// The next record in time order, `None` after the last.
    pub fn next_record(&mut self) -> Result<Option<StreamRecord>, MergeError> {
        let window = self.max_lateness.to_signed_duration();
        loop {
            // The input with the earliest bound (ties: the first input) either has a final record or must
            // read: nothing in any other input can come before that bound.
            let mut best: Option<(usize, Step)> = None;
            for (i, input) in self.inputs.iter_mut().enumerate() {
                let Some(step) = input.step(window) else { continue };
                let bound = |s: &Step| match s {
                    Step::Ready(t) => Some(*t),
                    Step::Read(t) => *t,
                };
                if best.as_ref().is_none_or(|(_, b)| bound(&step) < bound(b)) {
                    best = Some((i, step));
                }
            }
            match best {
                None => return Ok(None),
                Some((i, Step::Ready(_))) => {
                    let pending = self.inputs[i].window.pop();
                    self.last = pending.as_ref().map(|p| (i, p.line));
                    return Ok(pending.map(|p| p.record));
                }
                Some((i, Step::Read(_))) => self.read(i)?,
            }
        }
    }

    fn read(&mut self, i: usize) -> Result<(), MergeError> {
        let max_lateness = self.max_lateness;
        let input = &mut self.inputs[i];
        let (line, record) = match input.lines.next_record() {
            None => {
                input.ended = true;
                return Ok(());
            }
            Some(Err(e)) => {
                self.failed = Some(i);
                return Err(MergeError::Invalid(e));
            }
            Some(Ok(r)) => r,
        };
        let time = record.time();
        match input.latest {
            Some((latest, latest_line)) if time < latest => {
                let behind = latest.duration_since(time);
                if behind > max_lateness.to_signed_duration() {
                    let millis = u64::try_from((behind.as_nanos() + 999_999) / 1_000_000).unwrap_or(u64::MAX);
                    return Err(MergeError::Late(LateRecord {
                        file: input.lines.source().to_string(),
                        line,
                        time,
                        late: PolicyDuration::from_millis(millis),
                        latest,
                        latest_line,
                        max_lateness,
                    }));
                }
            }
            _ => input.latest = Some((time, line)),
        }
        input.window.push(Pending { time, line, record });
        Ok(())
    }

    /// Where the record [`Merge::next_record`] handed out last comes from: `file:line`.
    pub fn last_position(&self) -> Option<String> {
        let (i, line) = self.last?;
        Some(format!("{}:{line}", self.inputs[i].lines.source()))
    }

    /// After [`MergeError::Invalid`]: `first` and the bad lines of everything not read yet (decoded, not
    /// replayed), up to `per_input` of each input, by input and line — so one run lists what to fix.
    pub fn invalid_lines(&mut self, first: RecordError, per_input: usize) -> Vec<RecordError> {
        let mut all = Vec::new();
        for (i, input) in self.inputs.iter_mut().enumerate() {
            let mut errors = Vec::new();
            if self.failed == Some(i) {
                errors.push(first.clone());
            }
            while errors.len() < per_input {
                match input.lines.next_record() {
                    None => break,
                    Some(Err(e)) => errors.push(e),
                    Some(Ok(_)) => {}
                }
            }
            all.extend(errors);
        }
        if self.failed.is_none() {
            all.insert(0, first);
        }
        all
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_line_longer_than_the_limit_is_an_error_and_the_next_line_is_read() {
        let good = r#"{"time":"2026-01-05T00:00:00Z","job":"a/b","phase":"Running"}"#;
        let text = format!("{}\n{good}\n", "x".repeat(MAX_LINE_BYTES + 10));
        let mut lines = StreamLines::new(std::io::Cursor::new(text.into_bytes()), "long.jsonl");
        let e = lines.next_record().unwrap().unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains(&format!("{} bytes long", MAX_LINE_BYTES + 11)), "{}", e.message);
        let (line, _) = lines.next_record().unwrap().unwrap();
        assert_eq!(line, 2);
        assert!(lines.next_record().is_none());
    }

    /// Issue 43: `replay - < /dev/zero` never ended. A line without an end is read up to a bound, then the
    /// input ends with an error that says so.
    #[test]
    fn an_endless_line_ends_the_input_after_a_bound() {
        let zeros = std::io::BufReader::new(std::io::repeat(0));
        let mut lines = StreamLines::new(zeros, "stdin");
        let e = lines.next_record().unwrap().unwrap_err();
        assert!(e.message.starts_with("no line end in the first 67108864 bytes"), "{}", e.message);
        assert!(lines.next_record().is_none(), "nothing more is read");
        let mut reader = std::io::BufReader::with_capacity(2, std::io::Cursor::new(b"abcdefgh\n".to_vec()));
        let mut buf = Vec::new();
        assert_eq!(read_line_capped(&mut reader, &mut buf, 2, 5).unwrap(), 6, "stopped at the limit");
    }

    #[test]
    fn capped_reads_return_whole_lines_across_buffer_refills() {
        let data = b"abc\ndefgh\nij".to_vec();
        let mut reader = std::io::BufReader::with_capacity(2, std::io::Cursor::new(data));
        let mut buf = Vec::new();
        assert_eq!(read_line_capped(&mut reader, &mut buf, 100, 1000).unwrap(), 4);
        assert_eq!(buf, b"abc\n");
        buf.clear();
        assert_eq!(read_line_capped(&mut reader, &mut buf, 3, 1000).unwrap(), 6);
        assert_eq!(buf, b"def", "kept up to the cap");
        buf.clear();
        assert_eq!(read_line_capped(&mut reader, &mut buf, 100, 1000).unwrap(), 2);
        assert_eq!(buf, b"ij");
        buf.clear();
        assert_eq!(read_line_capped(&mut reader, &mut buf, 100, 1000).unwrap(), 0);
    }

    use super::*;

    fn line(time: &str, job: &str) -> String {
        format!(r#"{{"time":"{time}","job":"{job}"}}"#)
    }

    type Bytes = std::io::Cursor<Vec<u8>>;

    fn merge(inputs: &[(&str, &str)], max_lateness: u64) -> Merge<StreamLines<Bytes>> {
        let inputs = inputs
            .iter()
            .map(|(name, text)| StreamLines::new(Bytes::new(text.as_bytes().to_vec()), *name))
            .collect();
        Merge::new(inputs, PolicyDuration::from_secs(max_lateness))
    }

    fn collect(mut m: Merge<StreamLines<Bytes>>) -> Result<Vec<(String, String)>, MergeError> {
        let mut out = Vec::new();
        while let Some(r) = m.next_record()? {
            out.push((r.time().to_string(), r.job().to_string()));
        }
        Ok(out)
    }

    /// What `replay` did before streaming: every record of every input, stable-sorted by time.
    fn sorted(inputs: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut records: Vec<StreamRecord> = inputs
            .iter()
            .flat_map(|(name, text)| crate::input::stream::parse_stream(text, name).expect("valid"))
            .collect();
        records.sort_by_key(StreamRecord::time);
        records.iter().map(|r| (r.time().to_string(), r.job().to_string())).collect()
    }

    #[test]
    fn several_inputs_merge_like_a_stable_sort_ties_in_input_order() {
        let a = [
            line("2026-01-01T00:00:00Z", "a/1"),
            line("2026-01-01T00:01:00Z", "a/2"),
            line("2026-01-01T00:01:00Z", "a/3"),
            line("2026-01-01T00:03:00Z", "a/4"),
        ]
        .join("\n");
        let b = [
            "# a comment, then a blank line".to_string(),
            String::new(),
            line("2026-01-01T00:01:00Z", "b/1"),
            line("2026-01-01T00:02:00Z", "b/2"),
            line("2026-01-01T00:03:00Z", "b/3"),
        ]
        .join("\n");
        let c = line("2025-12-31T23:59:00Z", "c/1");
        let inputs = [("a", a.as_str()), ("b", b.as_str()), ("c", c.as_str())];
        for window in [0, 60, 3600] {
            assert_eq!(collect(merge(&inputs, window)).unwrap(), sorted(&inputs), "window {window}s");
        }
        assert_eq!(collect(merge(&[], 0)).unwrap(), vec![]);
    }

    #[test]
    fn a_mostly_ordered_input_within_the_window_comes_out_sorted() {
        let text = [
            line("2026-01-01T00:00:30Z", "a/1"),
            line("2026-01-01T00:00:00Z", "a/2"),
            line("2026-01-01T00:02:00Z", "a/3"),
            line("2026-01-01T00:01:00Z", "a/4"),
            line("2026-01-01T00:01:00Z", "a/5"),
            line("2026-01-01T00:00:00Z", "a/6"),
        ]
        .join("\n");
        let inputs = [("s.jsonl", text.as_str())];
        assert_eq!(collect(merge(&inputs, 120)).unwrap(), sorted(&inputs));
        // Exactly at the limit is still in the window.
        let e = collect(merge(&inputs, 119)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "s.jsonl:6: its time 2026-01-01T00:00:00Z is 2m before 2026-01-01T00:02:00Z (line 3), more than the \
             1m59s a line may be late"
        );
    }

    #[test]
    fn the_window_holds_only_what_may_still_be_overtaken() {
        let text: Vec<String> = (0..1000)
            .map(|i| line(&format!("2026-01-01T{:02}:{:02}:00Z", i / 60 % 24, i % 60), "a/1"))
            .collect();
        let text = text.join("\n");
        let mut m = merge(&[("s", text.as_str())], 300);
        let mut most = 0;
        while m.next_record().unwrap().is_some() {
            most = most.max(m.inputs[0].window.len());
        }
        assert!(most <= 6, "one line a minute, a 5-minute window: at most 6 waiting, got {most}");
    }

    #[test]
    fn bad_lines_stop_the_merge_and_are_all_listed() {
        let a =
            [line("2026-01-01T00:00:00Z", "a/1"), "{".into(), line("2026-01-01T00:02:00Z", "ab")].join("\n");
        let b = [line("2026-01-01T00:01:00Z", "b/1"), "[1]".into()].join("\n");
        let mut m = merge(&[("a", a.as_str()), ("b", b.as_str())], 0);
        assert_eq!(m.next_record().unwrap().map(|r| r.job().to_string()), Some("a/1".into()));
        let Err(MergeError::Invalid(first)) = m.next_record() else { panic!("line 2 of a is bad") };
        assert_eq!((first.file.as_str(), first.line), ("a", 2));
        let all = m.invalid_lines(first, 20);
        let places: Vec<(&str, usize)> = all.iter().map(|e| (e.file.as_str(), e.line)).collect();
        assert_eq!(places, vec![("a", 2), ("a", 3), ("b", 2)]);
    }

    /// Fails its first read, then reads as empty: as flate2's gzip reader does after a bad header or CRC.
    struct FailsOnce(bool);

    impl std::io::Read for FailsOnce {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            if std::mem::replace(&mut self.0, true) {
                Ok(0)
            } else {
                Err(std::io::Error::other("corrupt deflate stream"))
            }
        }
    }

    #[test]
    fn an_error_reported_only_once_is_not_lost() {
        let mut lines = StreamLines::new(std::io::BufReader::new(FailsOnce(false)), "s.jsonl.gz");
        let e = lines.next_record().unwrap().unwrap_err();
        assert_eq!(e.to_string(), "s.jsonl.gz:1: cannot read: corrupt deflate stream");
        assert!(lines.next_record().is_none());
    }

    #[test]
    fn unreadable_bytes_are_errors_with_their_place() {
        let mut lines = StreamLines::new(&b"\n\xff{}\n"[..], "s");
        let e = lines.next_record().unwrap().unwrap_err();
        assert_eq!(e.to_string(), "s:2:1: invalid UTF-8");
        assert!(lines.next_record().is_none());
    }

    /// One line read: `(line number, job)`, or the error's text.
    type LineRead = Result<(usize, String), String>;

    /// The lines of `text`, read through a buffer of `capacity` bytes, and the bytes read.
    fn read_all(text: &str, capacity: usize) -> (Vec<LineRead>, u64) {
        let reader = std::io::BufReader::with_capacity(capacity, text.as_bytes());
        let mut lines = StreamLines::new(reader, "s");
        let mut out = Vec::new();
        while let Some(r) = lines.next_record() {
            out.push(r.map(|(n, rec)| (n, rec.job().to_string())).map_err(|e| e.to_string()));
        }
        (out, lines.bytes_read())
    }

    #[test]
    fn lines_decoded_in_the_buffer_and_lines_copied_out_of_it_are_the_same() {
        // Lines across refills, blank and comment lines, CRLF, bad JSON and a last line without
        // its newline: a buffer of 1 MiB takes nearly all in place, one of 7 bytes copies every line.
        let mut text = String::new();
        for i in 0..300 {
            text.push_str(&line(&format!("2026-01-01T00:{:02}:{:02}Z", i / 60, i % 60), &format!("a/{i}")));
            text.push_str(match i % 7 {
                0 => "\r\n",
                1 => "\n\n# a comment\n",
                2 => "\n{\n",
                _ => "\n",
            });
        }
        text.push_str(&line("2026-01-01T01:00:00Z", "a/last"));
        let (in_place, read_in_place) = read_all(&text, 1 << 20);
        let (copied, read_copied) = read_all(&text, 7);
        assert_eq!(in_place, copied);
        assert_eq!((read_in_place, read_copied), (text.len() as u64, text.len() as u64));
        assert_eq!(in_place.iter().filter(|r| r.is_err()).count(), 43, "the `{{` lines");
        assert_eq!(in_place.last().unwrap().as_ref().unwrap().1, "a/last");
    }
}
