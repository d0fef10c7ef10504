//! The progress-only compact line, `{"time": …, "job": …, "trainerStatus": {…}}`, read by hand: the hot path
//! of `trainwarden replay`, where serde's derived reader spent most of its time matching keys and checking
//! bytes one at a time.
//!
//! It reads the line exactly as the serde fast path of [`super::stream`] does (same keys, same JSON grammar,
//! same numbers, same normalization through [`MetricsReader`]) but only the common spelling of it: no escape
//! in any string, no `null`, each key once. Anything else, valid or not, is `None`, and the caller reads the
//! line the slow way, which also words the errors. So this reader can decline a line but never decide one
//! differently; the property test at the bottom checks that on generated and mutated lines.

use crate::input::json::{check_eta, check_percent, parse_metric_value, parse_time};
use crate::input::sample::{JobKey, ProgressSample, SampleSource};
use crate::input::trainer_status::MetricsReader;
use crate::time::Timestamp;

/// The line's time, job and sample, or `None` when the line is not in the common spelling (see the module).
pub(super) fn read(line: &str) -> Option<(Timestamp, JobKey, ProgressSample)> {
    let mut c = Cursor { b: line.as_bytes(), s: line, i: 0 };
    // Filled in place: moving a sample through the readers' return values was a tenth of their time.
    let mut sample = ProgressSample::empty(Timestamp::UNIX_EPOCH, SampleSource::TrainerStatus);
    let (mut time, mut job, mut updated) = (None, None, None);
    c.object(|c, key| match key {
        "time" => set_once(&mut time, c.string()?),
        "job" => set_once(&mut job, c.string()?),
        "trainerStatus" => set_once(&mut updated, c.trainer_status(&mut sample)?),
        _ => None,
    })?;
    c.skip_ws();
    if c.i != c.b.len() {
        return None;
    }
    let (time_text, updated_text) = (time?, updated?);
    let time = parse_time(time_text).ok()?;
    // Both times are usually the same text: parsing it once is measurable at this pace.
    sample.updated_at = if updated_text == time_text { time } else { parse_time(updated_text).ok()? };
    Some((time, JobKey::parse(job?)?, sample))
}

/// The high bit of each byte of `x` (little-endian) that is `"`, a backslash or below 0x20. Only the lowest set
/// bit is exact (a match can set the bit of the byte above it too), which is the one a scan needs.
fn special_bytes(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v;
    let quote = x ^ (ONES * u64::from(b'"'));
    let backslash = x ^ (ONES * u64::from(b'\\'));
    (zero_byte(quote) | zero_byte(backslash) | (x.wrapping_sub(ONES * 0x20) & !x)) & HIGH
}

fn set_once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

/// A position in the line.
struct Cursor<'a> {
    b: &'a [u8],
    s: &'a str,
    i: usize,
}

impl<'a> Cursor<'a> {
    /// JSON's whitespace, as serde_json skips it.
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        self.skip_ws();
        (self.b.get(self.i) == Some(&byte)).then(|| self.i += 1)
    }

    /// A string without escapes or control characters (which JSON forbids raw), borrowed from the line.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        self.string_rest()
    }

    /// The rest of a string whose opening quote is behind the cursor; the cursor ends past the closing one.
    #[inline(always)]
    fn string_rest(&mut self) -> Option<&'a str> {
        let start = self.i;
        // Eight bytes at a time while they last: the byte loop was half of this reader's time.
        while let Some(chunk) = self.b.get(self.i..self.i + 8) {
            let found = special_bytes(u64::from_le_bytes(chunk.try_into().ok()?));
            if found != 0 {
                self.i += (found.trailing_zeros() / 8) as usize;
                break;
            }
            self.i += 8;
        }
        loop {
            match *self.b.get(self.i)? {
                b'"' => break,
                b'\\' | 0..=0x1f => return None,
                _ => self.i += 1,
            }
        }
        // Both ends are at an ASCII quote, so this is a char boundary of the line.
        let text = self.s.get(start..self.i)?;
        self.i += 1;
        Some(text)
    }

    /// An object, handing each key to `member`, which reads the value (the cursor is past the colon).
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.skip_ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            self.skip_ws();
            member(self, key)?;
            self.skip_ws();
            match *self.b.get(self.i)? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A JSON number as serde_json reads it into an `f64`.
    fn number(&mut self) -> Option<f64> {
        let start = self.i;
        let digit = |c: &Self| matches!(c.b.get(c.i), Some(b'0'..=b'9'));
        let negative = self.b.get(self.i) == Some(&b'-');
        if negative {
            self.i += 1;
        }
        match self.b.get(self.i)? {
            // JSON forbids a leading zero before more digits.
            b'0' => {
                self.i += 1;
                if digit(self) {
                    return None;
                }
            }
            b'1'..=b'9' => {
                while digit(self) {
                    self.i += 1;
                }
            }
            _ => return None,
        }
        let integer_end = self.i;
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if !digit(self) {
                return None;
            }
            while digit(self) {
                self.i += 1;
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if !digit(self) {
                return None;
            }
            while digit(self) {
                self.i += 1;
            }
        }
        let text = &self.b[start..self.i];
        if self.i == integer_end && integer_end - start <= 18 {
            // An integer that cannot overflow: serde_json reads it as a u64 (negated as an i64, or `-0.0`)
            // and converts it, which rounds the same as converting the magnitude and negating.
            let digits = &text[usize::from(negative)..];
            let magnitude = digits.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')) as f64;
            return Some(if negative { -magnitude } else { magnitude });
        }
        // Fractions and exponents: serde_json's own parser, so the rounding is its own (without its
        // `float_roundtrip` feature it is not always the correctly rounded value).
        serde_json::from_slice(text).ok()
    }

    /// The `trainerStatus` object, into `sample` (still without its time); its `lastUpdatedTime` text.
    fn trainer_status(&mut self, sample: &mut ProgressSample) -> Option<&'a str> {
        let (mut percent, mut eta, mut metrics, mut updated) = (None, None, None, None);
        self.object(|c, key| match key {
            "progressPercentage" => set_once(&mut percent, c.number()?),
            "estimatedRemainingSeconds" => set_once(&mut eta, c.number()?),
            "metrics" => set_once(&mut metrics, c.metrics(sample)?),
            "lastUpdatedTime" => set_once(&mut updated, c.string()?),
            _ => None,
        })?;
        sample.progress_percent = percent.map(check_percent).transpose().ok()?;
        sample.eta_seconds = eta.map(check_eta).transpose().ok()?;
        updated
    }

    /// A metric entry as writers print it, `{"name":"…","value":"…"}` (no spaces, name first), without
    /// reading its keys as strings; `None`, with the cursor where it was, for any other spelling.
    fn metric_as_written(&mut self) -> Option<(&'a str, Option<f64>)> {
        let entry = self.i;
        let entry_read = (|| {
            self.literal(b"{\"name\":\"")?;
            let name = self.string_rest()?;
            self.literal(b",\"value\":\"")?;
            let value = parse_metric_value(self.string_rest()?);
            self.literal(b"}")?;
            Some((name, value))
        })();
        if entry_read.is_none() {
            self.i = entry;
        }
        entry_read
    }

    /// Exactly `text`, here.
    fn literal(&mut self, text: &[u8]) -> Option<()> {
        self.b.get(self.i..)?.starts_with(text).then(|| self.i += text.len())
    }

    /// The `metrics` list of `{"name": …, "value": …}` entries, into `sample`.
    fn metrics(&mut self, sample: &mut ProgressSample) -> Option<()> {
        self.eat(b'[')?;
        let mut reader = MetricsReader::new(sample);
        self.skip_ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            reader.finish();
            return Some(());
        }
        loop {
            let (name, value) = match self.metric_as_written() {
                Some(entry) => entry,
                None => {
                    let (mut name, mut value) = (None, None);
                    self.object(|c, key| match key {
                        "name" => set_once(&mut name, c.string()?),
                        "value" => set_once(&mut value, c.string()?),
                        _ => None,
                    })?;
                    (name?, parse_metric_value(value?))
                }
            };
            reader.add(name, value?).ok()?;
            self.skip_ws();
            match *self.b.get(self.i)? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    reader.finish();
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::read;
    use crate::input::json::plain_decimal;
    use crate::input::stream::compact_serde;
    use crate::testing::rng::Rng;

    /// Pieces of a generated line: each is valid JSON text for its place unless its name says otherwise.
    const TIMES: [&str; 4] = [
        "2026-11-27T17:00:00Z",
        "2026-11-27T17:00:30Z",
        "2026-11-27T17:00:00.250Z",
        "2026-11-27T18:00:00+01:00",
    ];
    const BAD_TIMES: [&str; 2] = ["2026-02-30T17:00:00Z", "yesterday"];
    const JOBS: [&str; 3] = ["fraud/ft", "ns/naïve-job", "team-a/llama-70b"];
    const BAD_JOBS: [&str; 3] = ["bad", "a/b/c", "/x"];
    const NAMES: [&str; 13] = [
        "loss",
        "grad_norm",
        "lr",
        "train_samples_per_second",
        "step",
        "current_step",
        "epoch",
        "total_steps",
        "eval_loss",
        "trainMetrics.loss",
        "evalMetrics.accuracy",
        "my_metric",
        "é",
    ];
    const ODD_VALUES: [&str; 16] = [
        "nan", "NaN", "inf", "-inf", "+1.5", ".5", "5.", " 1.5", "1e400", "-0", "-0.0", "abc", "", "1_0",
        "0x10", "1e-400",
    ];
    const ODD_NUMBERS: [&str; 21] = [
        "-0",
        "0",
        "100",
        "101",
        "-1",
        "1e2",
        "1E+2",
        "12.5e-1",
        "01",
        "1.",
        ".5",
        "-",
        "123456789012345678901234",
        "99.99999999999999999",
        // Where `u64 as f64` rounds, and either side of the integer path's 18-character limit.
        "9007199254740993",
        "123456789012345678",
        "1234567890123456789",
        "-12345678901234567",
        "0e0",
        "1E400",
        "1e-400",
    ];

    /// Mostly one of `good`, one time in ten one of `bad`.
    fn mostly<'s>(rng: &mut Rng, good: &[&'s str], bad: &[&'s str]) -> &'s str {
        if rng.below(10) == 0 { rng.pick(bad) } else { rng.pick(good) }
    }

    /// `at_least` to `at_least + more - 1` random digits.
    fn digits(rng: &mut Rng, at_least: usize, more: usize) -> String {
        let n = at_least + rng.below(more);
        (0..n).map(|_| char::from(b'0' + rng.below(10) as u8)).collect()
    }

    /// A decimal of random length and form: `12`, `0.0034`, `-1.5e-05`, up to 20 digits.
    fn decimal(rng: &mut Rng) -> String {
        let mut s = String::new();
        if rng.below(4) == 0 {
            s.push('-');
        }
        s += &(rng.below(9) + 1).to_string();
        s += &digits(rng, 0, 8);
        if rng.below(3) != 0 {
            s.push('.');
            s += &digits(rng, 1, 12);
        }
        if rng.below(4) == 0 {
            s += rng.pick(&["e", "E", "e-", "e+", "E-"]);
            s += &(rng.below(30)).to_string();
        }
        s
    }

    fn number(rng: &mut Rng) -> String {
        match rng.below(4) {
            0 if rng.below(3) == 0 => rng.pick(&ODD_NUMBERS).to_string(),
            1 => rng.below(101).to_string(),
            2 => {
                let whole = rng.below(100);
                format!("{whole}.{}", digits(rng, 1, 17))
            }
            _ => decimal(rng).trim_start_matches('-').to_string(),
        }
    }

    fn metric_value(rng: &mut Rng) -> String {
        match rng.below(5) {
            0 if rng.below(3) == 0 => rng.pick(&ODD_VALUES).to_string(),
            1 => rng.below(100_000).to_string(),
            _ => decimal(rng),
        }
    }

    /// How a generated line departs from the common spelling.
    #[derive(Clone, Copy, PartialEq)]
    enum Twist {
        None,
        /// Whitespace between tokens, and entries with `value` before `name`.
        Spaced,
        /// A `null`, an escape, a control character, a duplicate or unknown key, a trailing comma, a cut.
        Odd,
    }

    fn line(rng: &mut Rng, twist: Twist) -> String {
        let ws = |rng: &mut Rng| {
            if twist == Twist::None || rng.below(3) != 0 {
                ""
            } else {
                rng.pick(&[" ", "\n", "\t ", "\r\n  "])
            }
        };
        let time = mostly(rng, &TIMES, &BAD_TIMES);
        let updated = if rng.below(3) == 0 { mostly(rng, &TIMES, &BAD_TIMES) } else { time };
        let mut status = Vec::new();
        if rng.below(4) != 0 {
            status.push(format!("\"progressPercentage\":{}{}", ws(rng), number(rng)));
        }
        if rng.below(3) != 0 {
            status.push(format!("\"estimatedRemainingSeconds\":{}", number(rng)));
        }
        if rng.below(6) != 0 {
            let entries: Vec<String> = (0..rng.below(7))
                .map(|_| {
                    let (name, value) = (mostly(rng, &NAMES, &["", "x"]), metric_value(rng));
                    if twist != Twist::None && rng.below(4) == 0 {
                        format!("{{ \"value\" : \"{value}\" ,{}\"name\":\"{name}\"}}", ws(rng))
                    } else {
                        format!("{{\"name\":\"{name}\",{}\"value\":\"{value}\"}}", ws(rng))
                    }
                })
                .collect();
            let sep = format!(",{}", ws(rng));
            status.push(format!("\"metrics\":[{}{}]", ws(rng), entries.join(&sep)));
        }
        if rng.below(20) != 0 {
            status.push(format!("\"lastUpdatedTime\":\"{updated}\""));
        }
        rotate(rng, &mut status);
        let mut top = vec![
            format!("\"time\":{}\"{time}\"", ws(rng)),
            format!("\"job\":\"{}\"", mostly(rng, &JOBS, &BAD_JOBS)),
            format!("\"trainerStatus\":{{{}}}", status.join(",")),
        ];
        rotate(rng, &mut top);
        let sep = format!("{},", ws(rng));
        let mut line = format!("{}{{{}}}{}", ws(rng), top.join(&sep), ws(rng));
        if twist == Twist::Odd {
            line = odd(rng, line);
        }
        line
    }

    fn rotate(rng: &mut Rng, items: &mut [String]) {
        if !items.is_empty() {
            let n = rng.below(items.len());
            items.rotate_left(n);
        }
    }

    /// One departure from the common spelling, valid JSON or not.
    fn odd(rng: &mut Rng, line: String) -> String {
        let replace_one = |line: &str, from: &str, to: &str| line.replacen(from, to, 1);
        match rng.below(12) {
            // A byte a string may not hold raw, or an escape, anywhere (so at every offset of the 8-byte scan).
            10 => {
                let mut at = rng.below(line.len() + 1);
                while !line.is_char_boundary(at) {
                    at -= 1;
                }
                let special = rng.pick(&["\u{1}", "\\\\", "\\\"", "\u{1f}", "\\u00e9"]);
                format!("{}{special}{}", &line[..at], &line[at..])
            }
            9 => replace_one(&line, "{\"name\":", "{\"name\":\"a\",\"name\":"),
            0 => replace_one(&line, "\"progressPercentage\":", "\"progressPercentage\":null,\"x\":"),
            1 => replace_one(&line, "\"loss\"", "\"lo\\u0073s\""),
            2 => replace_one(&line, "\"job\":\"", "\"job\":\"\\\""),
            3 => replace_one(&line, "\"job\":\"", "\"job\":\"\u{1}"),
            4 => replace_one(&line, "\"time\":", "\"time\":\"2026-11-27T17:00:00Z\",\"time\":"),
            5 => replace_one(
                &line,
                "\"metrics\":[",
                "\"metrics\":[{\"name\":\"loss\",\"value\":\"1\",\"unit\":\"x\"},",
            ),
            6 => replace_one(&line, "]", ",]"),
            7 => replace_one(&line, "\"lastUpdatedTime\":", "\"lastUpdatedTime\":null,\"lastUpdatedTime\":"),
            8 => {
                let mut cut = rng.below(line.len() + 1);
                while !line.is_char_boundary(cut) {
                    cut -= 1;
                }
                line[..cut].to_string()
            }
            _ => format!("{line}{}", rng.pick(&["x", ",", "}", " {}", "\u{0}"])),
        }
    }

    fn decide(line: &str) -> (Option<String>, Option<String>) {
        (read(line).map(|r| format!("{r:?}")), compact_serde(line).map(|r| format!("{r:?}")))
    }

    /// The hand-written reader decides every line as serde's reader does (field by field, NaN and -0.0
    /// included, through `Debug`), and declines only the spellings it is documented to decline.
    #[test]
    fn the_hand_written_reader_agrees_with_serde() {
        let mut rng = Rng(0x005E_ED0F_C0DE);
        let (mut accepted, mut rejected, mut declined) = (0, 0, 0);
        for i in 0..60_000 {
            let twist = [Twist::None, Twist::Spaced, Twist::Odd][i % 3];
            let line = line(&mut rng, twist);
            let (fast, reference) = decide(&line);
            match (&fast, &reference) {
                (Some(a), Some(b)) => {
                    assert_eq!(a, b, "decided differently: {line}");
                    accepted += 1;
                }
                (Some(a), None) => panic!("accepted what serde rejects: {line}\n{a}"),
                (None, Some(b)) => {
                    assert!(twist == Twist::Odd, "declined a line in the common spelling: {line}\n{b}");
                    declined += 1;
                }
                (None, None) => rejected += 1,
            }
        }
        // The generator reaches every outcome, so the comparison above is not vacuous.
        eprintln!(
            "{accepted} lines read alike, {rejected} refused by both, {declined} declined and read by serde"
        );
        assert!(accepted > 15_000 && rejected > 10_000 && declined > 500, "{accepted} {rejected} {declined}");
    }

    #[test]
    fn it_declines_what_it_does_not_read_and_the_caller_reads_it() {
        let base = r#"{"time":"2026-11-27T17:00:00Z","job":"a/b","trainerStatus":{"metrics":[{"name":"loss","value":"2.5"}],"lastUpdatedTime":"2026-11-27T17:00:00Z"}}"#;
        assert!(read(base).is_some());
        for line in [
            base.replace("\"loss\"", "\"lo\\u0073s\""),
            base.replace("\"metrics\"", "\"progressPercentage\":null,\"metrics\""),
        ] {
            assert!(read(&line).is_none(), "{line}");
            let reference = compact_serde(&line).expect("serde reads it");
            assert_eq!(reference.2.metric("loss"), Some(2.5));
        }
    }

    /// Bit for bit what `str::parse` gives, whenever the fast path answers; and it answers for the
    /// common forms.
    #[test]
    fn plain_decimals_parse_exactly_as_the_standard_library() {
        let mut rng = Rng(0xDEC1_3A15);
        let mut answered = 0;
        for i in 0..200_000 {
            let text = if i % 5 == 0 { rng.pick(&ODD_VALUES).to_string() } else { decimal(&mut rng) };
            if let Some(v) = plain_decimal(text.as_bytes()) {
                let expected: f64 = text.parse().expect("plain decimals are valid floats");
                assert_eq!(v.to_bits(), expected.to_bits(), "{text}");
                answered += 1;
            }
        }
        assert!(answered > 100_000, "{answered}");
        for text in ["0.2347", "-1.5", "3.1e-05", "1200", "-0.0", "0.0001"] {
            assert!(plain_decimal(text.as_bytes()).is_some(), "{text}");
        }
        for text in ["1.", ".5", "+1", "1e", "1e-", "1234567890123456", "1e23", "nan", " 1", "1 "] {
            assert!(plain_decimal(text.as_bytes()).is_none(), "{text}");
        }
    }
}
