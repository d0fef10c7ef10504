//! The inputs of `replay` and `backtest`, opened for reading line by line: files, `-` for stdin, and gzip or
//! zstd data (recognised by its first bytes, whatever the name) decompressed as it is read; and the next
//! record of their merge, with the message both commands give for a stream it refuses; and each input decoded
//! on a thread of its own ([`DecodedAhead`]), for `replay`, whose evaluation then has a core to itself.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};
use trainwarden_core::{Merge, MergeError, RecordError, RecordSource, StreamLines, StreamRecord};

/// One input's bytes, decompressed; `Send`, so it can be decoded on a thread of its own.
pub(crate) type Input = Box<dyn BufRead + Send>;

/// Bad lines listed per input when a stream is invalid.
const ERRORS_PER_INPUT: usize = 20;

/// The merge's next record (`None` at the end). A refused stream is an error: every bad line, up to
/// [`ERRORS_PER_INPUT`] per input (the rest of each input is read to find them), under `heading`; or the
/// line that came too late, and what to do about it.
pub(crate) fn next_record<S: RecordSource>(
    merge: &mut Merge<S>,
    heading: &str,
) -> Result<Option<StreamRecord>, String> {
    match merge.next_record() {
        Ok(r) => Ok(r),
        Err(MergeError::Invalid(first)) => {
            let lines: Vec<String> =
                merge.invalid_lines(first, ERRORS_PER_INPUT).iter().map(ToString::to_string).collect();
            Err(format!("{heading}\n{}", lines.join("\n")))
        }
        Err(MergeError::Late(late)) => Err(format!("{late}; sort the stream or raise --max-lateness")),
    }
}

/// Records decoded per batch handed from a decoding thread to the merge: enough that the hand-over (a lock
/// and, when the other side waits, a wake-up) costs little per record.
const BATCH_RECORDS: usize = 1024;
/// ... and at most this many bytes of lines per batch, so a stream of whole TrainJob objects (up to 1.5 MiB
/// each) holds a few MiB ahead, not a thousand objects.
const BATCH_BYTES: u64 = 4 << 20;
/// Batches a decoding thread may have ready before it waits for the merge to take one.
const BATCHES_AHEAD: usize = 2;

type Decoded = Result<(usize, StreamRecord), RecordError>;

/// One input decoded on a thread of its own, in order, a bounded number of records ahead of the merge: the
/// records, errors and end are exactly those of the input's [`StreamLines`], so output is unchanged; what
/// changes is that reading, decompressing and decoding run beside evaluation instead of before it. Memory
/// is bounded by [`BATCHES_AHEAD`] + 2 batches. Dropping it ends the thread at its next hand-over.
pub(crate) struct DecodedAhead {
    source: String,
    batches: Receiver<Vec<Decoded>>,
    current: std::vec::IntoIter<Decoded>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The last line handed on, record or error: where a decoding thread that stopped had got to.
    last_line: usize,
    /// A live input ([`Opened::live`]): after its first bad line it is not read on (that could wait for
    /// ever), and it ends there.
    live: bool,
    ended: bool,
}

impl DecodedAhead {
    /// Starts decoding `opened` on a new thread.
    pub(crate) fn start(opened: Opened) -> Result<DecodedAhead, String> {
        let Opened { mut lines, live } = opened;
        let source = lines.source().to_string();
        let (sender, batches) = sync_channel(BATCHES_AHEAD);
        let thread = std::thread::Builder::new()
            .name(format!("decode {source}"))
            .spawn(move || decode_into(&mut lines, &sender, live))
            .map_err(|e| format!("{source}: cannot start a decoding thread: {e}"))?;
        Ok(DecodedAhead {
            source,
            batches,
            current: Vec::new().into_iter(),
            thread: Some(thread),
            last_line: 0,
            live,
            ended: false,
        })
    }
}

/// Whether stdin has bytes to read now (poll with no wait).
fn stdin_ready() -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdin = io::stdin();
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    // An error (EINTR) counts as "not ready": the batch is handed on, which is never wrong.
    poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
}

fn decode_into(lines: &mut StreamLines<Input>, sender: &SyncSender<Vec<Decoded>>, live: bool) {
    loop {
        let mut batch = Vec::with_capacity(BATCH_RECORDS);
        let start = lines.bytes_read();
        let mut ended = false;
        while batch.len() < BATCH_RECORDS && lines.bytes_read() - start < BATCH_BYTES {
            // A live input hands on what it has before a read that would wait for the next line: each
            // event is printed as it happens, not when a thousand lines have come.
            if live && !batch.is_empty() && !stdin_ready() {
                break;
            }
            match lines.next_record() {
                Some(r) => batch.push(r),
                None => {
                    ended = true;
                    break;
                }
            }
        }
        if !batch.is_empty() && sender.send(batch).is_err() {
            return; // the merge is gone: nobody wants the rest
        }
        if ended {
            return;
        }
    }
}

impl RecordSource for DecodedAhead {
    fn next_record(&mut self) -> Option<Decoded> {
        loop {
            if self.ended {
                return None;
            }
            if let Some(r) = self.current.next() {
                self.last_line = match &r {
                    Ok((line, _)) => *line,
                    Err(e) => {
                        self.ended = self.live;
                        e.line
                    }
                };
                return Some(r);
            }
            match self.batches.recv() {
                Ok(batch) => self.current = batch.into_iter(),
                // The channel closes when the thread returns: at the end, or after a panic, which must not
                // pass for the end of the stream (the replay would be silently cut short).
                Err(_) => {
                    let panicked = self.thread.take().is_some_and(|t| t.join().is_err());
                    return panicked.then(|| {
                        Err(RecordError {
                            file: self.source.clone(),
                            line: self.last_line + 1,
                            column: None,
                            message: "the decoding thread stopped on a bug (a panic, reported above); this \
                                      line and those after it were not replayed"
                                .into(),
                        })
                    });
                }
            }
        }
    }

    fn source(&self) -> &str {
        &self.source
    }
}

/// Large reads: streams are hundreds of megabytes read front to back.
const BUFFER: usize = 1 << 18;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Plain,
    Gzip,
    Zstd,
}

impl Format {
    fn of(head: &[u8]) -> Format {
        if head.starts_with(&GZIP_MAGIC) {
            Format::Gzip
        } else if head.starts_with(&ZSTD_MAGIC) {
            Format::Zstd
        } else {
            Format::Plain
        }
    }

    fn named(name: &str) -> Option<Format> {
        if name.ends_with(".gz") {
            Some(Format::Gzip)
        } else if name.ends_with(".zst") {
            Some(Format::Zstd)
        } else {
            None
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Format::Plain => "not compressed",
            Format::Gzip => "gzip",
            Format::Zstd => "zstd",
        }
    }
}

/// An input opened for reading, and whether it is live.
pub(crate) struct Opened {
    pub(crate) lines: StreamLines<Input>,
    /// Stdin that is not a file (a terminal, a pipe, a device): its lines come as they are written, so each
    /// event is printed as it happens, lines are taken in strict order (a reorder window would hold events
    /// back by its length), and reading stops at the first bad line.
    pub(crate) live: bool,
}

/// Opens every stream; `-` (at most once) is stdin, named `stdin` in errors.
pub(crate) fn open_inputs(paths: &[PathBuf]) -> Result<Vec<Opened>, String> {
    if paths.iter().filter(|p| is_stdin(p)).count() > 1 {
        return Err("- (stdin) is given more than once".into());
    }
    paths.iter().map(|p| open(p)).collect()
}

/// [`open_inputs`], their lines only.
pub(crate) fn open_all(paths: &[PathBuf]) -> Result<Vec<StreamLines<Input>>, String> {
    Ok(open_inputs(paths)?.into_iter().map(|o| o.lines).collect())
}

fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Whether stdin is live: anything but a regular file.
pub(crate) fn stdin_is_live() -> bool {
    use std::os::fd::AsFd;
    let stdin = io::stdin();
    let is_file = stdin
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .map(File::from)
        .and_then(|f| f.metadata().ok())
        .is_some_and(|m| m.is_file());
    !is_file
}

fn open(path: &Path) -> Result<Opened, String> {
    let (name, raw, live): (String, Input, bool) = if is_stdin(path) {
        // A live stdin is read as it comes (a large buffer would wait to fill only on a file).
        ("stdin".into(), Box::new(BufReader::with_capacity(BUFFER, io::stdin())), stdin_is_live())
    } else {
        let file = File::open(path).map_err(|e| format!("{}: {}", path.display(), crate::io_error(&e)))?;
        (path.display().to_string(), Box::new(BufReader::with_capacity(BUFFER, file)), false)
    };
    let reader = decompressed(raw, &name)?;
    Ok(Opened { lines: StreamLines::new(reader, name), live })
}

/// `raw` as text: decompressed if its first bytes are gzip's or zstd's magic number. A name ending in `.gz`
/// or `.zst` whose content is something else is an error (a damaged archive would otherwise be read as text).
fn decompressed(mut raw: Input, name: &str) -> Result<Input, String> {
    let mut head = Vec::with_capacity(ZSTD_MAGIC.len());
    (&mut raw).take(ZSTD_MAGIC.len() as u64).read_to_end(&mut head).map_err(|e| format!("{name}: {e}"))?;
    let format = Format::of(&head);
    if let Some(named) = Format::named(name)
        && named != format
        && !head.is_empty()
    {
        return Err(format!(
            "{name}: the name says {} but the content is {} (it starts with {})",
            named.as_str(),
            format.as_str(),
            head.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
        ));
    }
    let raw = Cursor::new(head).chain(raw);
    Ok(match format {
        Format::Plain => Box::new(raw),
        Format::Gzip => Box::new(BufReader::with_capacity(BUFFER, flate2::bufread::MultiGzDecoder::new(raw))),
        Format::Zstd => Box::new(BufReader::with_capacity(BUFFER, ZstdFrames::new(raw))),
    })
}

/// Zstandard data of one or more frames (`cat a.zst b.zst` and multi-threaded compressors make several),
/// decoded as it is read; skippable frames are skipped.
struct ZstdFrames<R> {
    source: R,
    decoder: FrameDecoder,
    in_frame: bool,
}

impl<R: BufRead> ZstdFrames<R> {
    fn new(source: R) -> Self {
        ZstdFrames { source, decoder: FrameDecoder::new(), in_frame: false }
    }
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.in_frame {
                while self.decoder.can_collect() < buf.len() && !self.decoder.is_finished() {
                    let wanted = buf.len() - self.decoder.can_collect();
                    self.decoder
                        .decode_blocks(&mut self.source, BlockDecodingStrategy::UptoBytes(wanted))
                        .map_err(io::Error::other)?;
                }
                let n = self.decoder.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                self.in_frame = false;
            }
            if self.source.fill_buf()?.is_empty() {
                return Ok(0);
            }
            match self.decoder.init(&mut self.source) {
                Ok(()) => self.in_frame = true,
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    let skipped = io::copy(&mut (&mut self.source).take(length.into()), &mut io::sink())?;
                    if skipped < u64::from(length) {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "truncated zstd skippable frame",
                        ));
                    }
                }
                Err(e) => return Err(io::Error::other(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(source: &mut impl RecordSource) -> Vec<Result<(usize, String, String), String>> {
        std::iter::from_fn(|| source.next_record())
            .map(|r| {
                r.map(|(n, rec)| (n, rec.job().to_string(), rec.time().to_string()))
                    .map_err(|e| e.to_string())
            })
            .collect()
    }

    #[test]
    fn decoded_ahead_gives_exactly_what_the_lines_give() {
        // Several batches' worth, bad lines among them, gzip-compressed: what the thread hands over is the
        // input's own sequence of records and errors, in order, to the end.
        let mut text = String::new();
        for i in 0..5_000 {
            if i % 997 == 0 {
                text.push_str("{not json\n");
            }
            text.push_str(&format!(
                "{{\"time\":\"2026-01-01T{:02}:{:02}:{:02}Z\",\"job\":\"ns/job-{}\"}}\n",
                i / 3600,
                i / 60 % 60,
                i % 60,
                i % 17
            ));
        }
        let dir = std::env::temp_dir().join(format!("tw-decoded-ahead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stream.jsonl.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, text.as_bytes()).unwrap();
        std::fs::write(&path, gz.finish().unwrap()).unwrap();

        let mut direct = open(&path).unwrap().lines;
        let mut ahead = DecodedAhead::start(open(&path).unwrap()).unwrap();
        let expected = records(&mut direct);
        assert_eq!(expected.len(), 5_000 + 6);
        assert_eq!(records(&mut ahead), expected);
        assert_eq!(ahead.source(), path.display().to_string());
        assert!(ahead.next_record().is_none(), "the end stays the end");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// 1,500 lines, then a panic on the next read: a bug in a reader, as the decoding thread meets it.
    struct PanicsAfter(std::io::Cursor<Vec<u8>>);

    impl std::io::Read for PanicsAfter {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.read(buf)?;
            assert!(n > 0, "a bug in the reader");
            Ok(n)
        }
    }

    #[test]
    fn a_panic_in_the_decoding_thread_is_an_error_where_it_stopped_not_the_end() {
        let text: String = (0..1_500)
            .map(|i| {
                format!("{{\"time\":\"2026-01-01T00:{:02}:{:02}Z\",\"job\":\"ns/a\"}}\n", i / 60 % 60, i % 60)
            })
            .collect();
        let reader: Input =
            Box::new(std::io::BufReader::new(PanicsAfter(std::io::Cursor::new(text.into_bytes()))));
        let mut ahead =
            DecodedAhead::start(Opened { lines: StreamLines::new(reader, "s.jsonl"), live: false }).unwrap();
        let got = records(&mut ahead);
        // The first batch went out; the thread panicked while filling the second, which is lost with it.
        assert_eq!(got.len(), BATCH_RECORDS + 1, "{:?}", got.last());
        assert!(got[..BATCH_RECORDS].iter().all(Result::is_ok));
        let error = got[BATCH_RECORDS].as_ref().unwrap_err();
        let place = format!("s.jsonl:{}: the decoding thread stopped on a bug", BATCH_RECORDS + 1);
        assert!(error.starts_with(&place), "{error}");
        assert!(ahead.next_record().is_none());
    }
}
