//! The inputs of `replay` and `backtest`, opened for reading line by line: files, `-` for stdin, and gzip or
//! zstd data (recognised by its first bytes, whatever the name) decompressed as it is read; and the next
//! record of their merge, with the message both commands give for a stream it refuses.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};

use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};
use trainwarden_core::{Merge, MergeError, StreamLines, StreamRecord};

/// One input's bytes, decompressed.
pub(crate) type Input = Box<dyn BufRead>;

/// Bad lines listed per input when a stream is invalid.
const ERRORS_PER_INPUT: usize = 20;

/// The merge's next record (`None` at the end). A refused stream is an error: every bad line, up to
/// [`ERRORS_PER_INPUT`] per input (the rest of each input is read to find them), under `heading`; or the
/// line that came too late, and what to do about it.
pub(crate) fn next_record(merge: &mut Merge<Input>, heading: &str) -> Result<Option<StreamRecord>, String> {
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

/// Opens every stream; `-` (at most once) is stdin, named `stdin` in errors.
pub(crate) fn open_all(paths: &[PathBuf]) -> Result<Vec<StreamLines<Input>>, String> {
    if paths.iter().filter(|p| is_stdin(p)).count() > 1 {
        return Err("- (stdin) is given more than once".into());
    }
    paths.iter().map(|p| open(p)).collect()
}

fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

fn open(path: &Path) -> Result<StreamLines<Input>, String> {
    let (name, raw): (String, Input) = if is_stdin(path) {
        ("stdin".into(), Box::new(BufReader::with_capacity(BUFFER, io::stdin())))
    } else {
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        (path.display().to_string(), Box::new(BufReader::with_capacity(BUFFER, file)))
    };
    let reader = decompressed(raw, &name)?;
    Ok(StreamLines::new(reader, name))
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
