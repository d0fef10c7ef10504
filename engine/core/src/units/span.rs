//! Spans of time for people: the one duration formatter of timelines, reasons, summaries, tables and
//! notifications.
//!
//! Every unit from the largest to the smallest non-zero one is written, zeros in between included
//! (`2h0m46s`, never `2h46s`, which reads as 2h46m at a glance); tables use [`fmt_span_short`], the two
//! largest units. A span that is not a number is `-`; a negative one keeps its sign.

const UNITS: [(u64, &str); 4] = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];

/// To the second: `45s`, `2h15m41s`, `2h0m46s`, `1d8h48m16s`, `0s`.
pub fn fmt_span(seconds: f64) -> String {
    span(seconds, UNITS.len())
}

/// The two largest units, the rest dropped: `45s`, `12m`, `3h12m`, `3h`, `2d4h`.
pub fn fmt_span_short(seconds: f64) -> String {
    span(seconds, 2)
}

fn span(seconds: f64, at_most: usize) -> String {
    if !seconds.is_finite() {
        return "-".into();
    }
    let sign = if seconds <= -0.5 { "-" } else { "" };
    let mut rest = seconds.abs().round() as u64;
    let mut parts: Vec<(u64, &str)> = Vec::with_capacity(4);
    for (len, name) in UNITS {
        let n = rest / len;
        rest %= len;
        if !parts.is_empty() || n > 0 {
            parts.push((n, name));
        }
    }
    parts.truncate(at_most);
    // Trailing zeros say nothing (`3h`, not `3h0m`); zeros between two non-zero units stay.
    while parts.len() > 1 && parts.last().is_some_and(|&(n, _)| n == 0) {
        parts.pop();
    }
    if parts.is_empty() {
        return "0s".into();
    }
    let mut out = sign.to_string();
    for (n, name) in parts {
        out += &format!("{n}{name}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_fill_the_units_between_so_none_is_misread() {
        assert_eq!(fmt_span(2.0 * 3600.0 + 46.0), "2h0m46s");
        assert_eq!(fmt_span(8100.0), "2h15m");
        assert_eq!(fmt_span(8141.0), "2h15m41s");
        assert_eq!(fmt_span(90061.0), "1d1h1m1s");
        assert_eq!(fmt_span(86_405.0), "1d0h0m5s");
        assert_eq!(fmt_span(7200.0), "2h");
        assert_eq!(fmt_span(0.0), "0s");
        assert_eq!(fmt_span(0.4), "0s");
        assert_eq!(fmt_span(-90.0), "-1m30s");
        assert_eq!(fmt_span(f64::NAN), "-");
        assert_eq!(fmt_span(f64::INFINITY), "-");
    }

    #[test]
    fn short_spans_keep_two_units() {
        assert_eq!(fmt_span_short(45.0), "45s");
        assert_eq!(fmt_span_short(12.0 * 60.0 + 5.0), "12m5s");
        assert_eq!(fmt_span_short(3.0 * 3600.0 + 12.0 * 60.0 + 9.0), "3h12m");
        assert_eq!(fmt_span_short(3.0 * 3600.0 + 59.0), "3h");
        assert_eq!(fmt_span_short(2.0 * 86_400.0 + 4.0 * 3600.0 + 60.0), "2d4h");
        assert_eq!(fmt_span_short(2.0 * 86_400.0 + 60.0), "2d");
    }
}
