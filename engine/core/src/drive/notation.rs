//! The expanding series notation of Prometheus' `promtool test rules`, used
//! to write input series in policy tests.
//!
//! A series is a list of tokens separated by whitespace; each token expands
//! to one or more [`Step`]s:
//!
//! | token    | expands to                                             |
//! |----------|--------------------------------------------------------|
//! | `a`      | the single value `a`                                   |
//! | `a+bxn`  | `a, a+b, a+2b, …, a+nb` (n+1 values)                   |
//! | `a-bxn`  | `a, a-b, a-2b, …, a-nb` (n+1 values)                   |
//! | `axn`    | `a` repeated n+1 times (the same as `a+0xn`)           |
//! | `_`      | one gap (no sample at that step)                       |
//! | `_xn`    | n gaps                                                 |
//!
//! Values are decimal numbers (`2`, `2.0`, `-1e-3`, `.5`) or the special
//! values `nan`, `inf`, `+inf` and `-inf` (in any letter case). The increment
//! `b` is an unsigned finite number and `n` a whole number. For example
//! `"2.0-0.01x100 2.0x50 nan"` is 101 values falling from 2.0 to 1.0, then
//! 51 times 2.0, then NaN.
//!
//! Each value `a ± i·b` is computed by one multiplication (never by repeated
//! addition, which drifts) and then rounded to the number of decimal places
//! written in `a` and `b` (`2.0-0.01x100` has two, `1e-9+1e-9x2` nine). As
//! the exact result of adding decimals has no more places than its operands,
//! this gives the same `f64` as writing the value out by hand: `0+0.1x3` ends
//! with exactly `0.3`, not `0.30000000000000004`. (Where that many places are
//! beyond `f64` precision, about 15 significant digits in all, the value is
//! left as computed.) A series may expand to at most [`MAX_STEPS`] steps.

/// The most steps a series may expand to.
pub(crate) const MAX_STEPS: usize = 1_000_000;

/// One step of an input series: a value (may be NaN or ±infinity) or a gap
/// (no sample at that step).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Step {
    /// A sample with this value.
    Value(f64),
    /// No sample at this step.
    Gap,
}

/// Why a series could not be expanded. Tokens are numbered from 1.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NotationError {
    /// A token is not valid notation.
    #[error("invalid token {index} {token:?} in series: {reason}")]
    InvalidToken {
        /// The token's position, counting from 1.
        index: usize,
        /// The token's text.
        token: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The series expands to more than [`MAX_STEPS`] steps.
    #[error("token {index} {token:?} makes the series longer than the limit of {limit} steps")]
    TooLong {
        /// The position, counting from 1, of the token that crossed the limit.
        index: usize,
        /// The token's text.
        token: String,
        /// The limit, [`MAX_STEPS`].
        limit: usize,
    },
}

/// How a single token expands, before it is written out.
enum Token {
    /// `count` gaps.
    Gaps(u64),
    /// `start + sign·i·increment` for `i` in `0..=repeat`.
    /// Values are rounded to `decimals` places.
    Values { start: f64, increment: f64, repeat: u64, decimals: u32 },
}

impl Token {
    /// The number of steps the token expands to, if it fits in a `u64`.
    fn len(&self) -> Option<u64> {
        match *self {
            Token::Gaps(n) => Some(n),
            Token::Values { repeat, .. } => repeat.checked_add(1),
        }
    }
}

/// Expands a series written in promtool notation (see the module docs) into
/// its steps.
///
/// An empty or all-whitespace series expands to no steps.
pub(crate) fn expand(series: &str) -> Result<Vec<Step>, NotationError> {
    let mut steps = Vec::new();
    for (i, text) in series.split_whitespace().enumerate() {
        let index = i + 1;
        let token = parse_token(text).map_err(|reason| NotationError::InvalidToken {
            index,
            token: text.to_owned(),
            reason,
        })?;
        let fits = token
            .len()
            .and_then(|n| usize::try_from(n).ok())
            .and_then(|n| n.checked_add(steps.len()))
            .is_some_and(|total| total <= MAX_STEPS);
        if !fits {
            return Err(NotationError::TooLong { index, token: text.to_owned(), limit: MAX_STEPS });
        }
        match token {
            Token::Gaps(n) => steps.extend((0..n).map(|_| Step::Gap)),
            Token::Values { start, increment, repeat, decimals } => {
                steps.push(Step::Value(start));
                steps.extend((1..=repeat).map(|i| {
                    if increment == 0.0 {
                        return Step::Value(start);
                    }
                    let offset = i as f64 * increment;
                    let magnitude = start.abs().max(offset.abs());
                    Step::Value(tidy(start + offset, magnitude, decimals))
                }));
            }
        }
    }
    Ok(steps)
}

/// The hint given when a token is not understood at all.
const EXPECTED: &str = "expected a number, nan, inf, -inf, \"_\", or an expansion such as \
                        \"1+2x3\", \"5-0.5x10\", \"7x4\" or \"_x3\"";

/// Parses one token; the error is the reason, without the token itself.
fn parse_token(text: &str) -> Result<Token, String> {
    if text == "_" {
        return Ok(Token::Gaps(1));
    }
    if let Some(rest) = text.strip_prefix('_') {
        return match rest.strip_prefix('x') {
            Some(count) => parse_count(count).map(Token::Gaps),
            None => {
                Err("a gap \"_\" cannot have a value or an increment; write \"_xN\" for N gaps".to_owned())
            }
        };
    }
    if text.eq_ignore_ascii_case("stale") {
        return Err("stale markers are not supported; use \"_\" for a missing sample".to_owned());
    }
    let Some((head, count)) = text.rsplit_once('x') else {
        return parse_value(text)
            .map(|start| Token::Values { start, increment: 0.0, repeat: 0, decimals: 0 })
            .ok_or_else(|| EXPECTED.to_owned());
    };
    let repeat = parse_count(count)?;
    let (start_text, increment, increment_decimals) = match split_increment(head) {
        Some((start, sign, increment_text)) => {
            let increment = parse_increment(increment_text)?;
            (start, sign * increment, decimal_places(increment_text))
        }
        None => (head, 0.0, 0),
    };
    let start = parse_value(start_text)
        .ok_or_else(|| format!("the start value {start_text:?} is not a number, nan, inf or -inf"))?;
    Ok(Token::Values {
        start,
        increment,
        repeat,
        decimals: decimal_places(start_text).max(increment_decimals),
    })
}

/// The number of decimal places a numeric literal has: the digits after the
/// point, less the exponent (`2.50` has 2, `1e-9` has 9, `1.5e3` has 0).
/// Zero for `nan` and `inf`.
fn decimal_places(literal: &str) -> u32 {
    let (mantissa, exponent) =
        literal.split_once(['e', 'E']).map_or((literal, 0), |(m, e)| (m, e.parse::<i64>().unwrap_or(0)));
    let fraction = mantissa.split_once('.').map_or(0, |(_, f)| f.len() as i64);
    u32::try_from(fraction.saturating_sub(exponent).max(0)).unwrap_or(u32::MAX)
}

/// Parses the repetition count after `x`.
fn parse_count(count: &str) -> Result<u64, String> {
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "the repetition count after \"x\" must be a whole number, not {count:?} (e.g. \"1+2x3\")"
        ));
    }
    // All digits, so only a count too large for a u64 fails; treat it as too
    // long rather than invalid.
    Ok(count.parse().unwrap_or(u64::MAX))
}

/// Splits `a+b` / `a-b` into `(a, ±1, b)`, skipping a leading sign and the
/// sign of an exponent (`1e-3`).
fn split_increment(head: &str) -> Option<(&str, f64, &str)> {
    let bytes = head.as_bytes();
    (1..bytes.len()).find(|&i| matches!(bytes[i], b'+' | b'-') && !matches!(bytes[i - 1], b'e' | b'E')).map(
        |i| {
            let sign = if bytes[i] == b'+' { 1.0 } else { -1.0 };
            (&head[..i], sign, &head[i + 1..])
        },
    )
}

/// Parses the increment `b` of `a+bxn`: an unsigned finite number.
fn parse_increment(text: &str) -> Result<f64, String> {
    let unsigned = !text.starts_with(['+', '-']);
    match parse_value(text) {
        Some(b) if unsigned && b.is_finite() => Ok(b),
        _ => Err(format!("the increment {text:?} must be an unsigned finite number (e.g. \"1+0.5x3\")")),
    }
}

/// Parses a value: a decimal number, `nan`, or `[+-]inf`, in any letter
/// case.
fn parse_value(text: &str) -> Option<f64> {
    // `f64::from_str` accepts exactly these plus `infinity`; it rejects
    // hexadecimal, underscores and empty strings.
    text.parse::<f64>().ok()
}

/// Powers of ten that an `f64` represents exactly.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18,
    1e19, 1e20, 1e21, 1e22,
];

/// Rounds `v`, computed as `a ± i·b` from operands of at most `magnitude`,
/// to `decimals` decimal places, removing the binary floating point error of
/// the computation. `v` is returned as it is where that rounding could not
/// be exact: non-finite values, or more places than an `f64` holds.
fn tidy(v: f64, magnitude: f64, decimals: u32) -> f64 {
    // 2^49: the computation's error, a few units in the last place of
    // `magnitude`, stays well below half a step of the decimal grid.
    const SAFE: f64 = 562_949_953_421_312.0;
    let Some(&scale) = POW10.get(decimals as usize) else {
        return v;
    };
    if !v.is_finite() || magnitude * scale >= SAFE {
        return v;
    }
    // An integer and a power of ten, both exact, so the quotient is the
    // correctly rounded decimal: the same `f64` as parsing it.
    (v * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(series: &str) -> Vec<f64> {
        expand(series)
            .unwrap()
            .into_iter()
            .map(|s| match s {
                Step::Value(v) => v,
                Step::Gap => panic!("unexpected gap in {series:?}"),
            })
            .collect()
    }

    fn err(series: &str) -> String {
        expand(series).unwrap_err().to_string()
    }

    #[test]
    fn single_values() {
        assert_eq!(values("1 2.0 -3 .5 5. -1e-3 1E3 +4"), [1.0, 2.0, -3.0, 0.5, 5.0, -0.001, 1000.0, 4.0]);
    }

    #[test]
    fn special_values() {
        let steps = expand("nan NaN NAN inf +inf -inf Inf -Inf +Inf").unwrap();
        assert_eq!(steps.len(), 9);
        for s in &steps[..3] {
            assert!(matches!(s, Step::Value(v) if v.is_nan()), "{s:?}");
        }
        assert_eq!(
            steps[3..],
            [
                Step::Value(f64::INFINITY),
                Step::Value(f64::INFINITY),
                Step::Value(f64::NEG_INFINITY),
                Step::Value(f64::INFINITY),
                Step::Value(f64::NEG_INFINITY),
                Step::Value(f64::INFINITY),
            ]
        );
    }

    #[test]
    fn promtool_examples() {
        assert_eq!(values("-2+4x3"), [-2.0, 2.0, 6.0, 10.0]);
        assert_eq!(values("1-2x4"), [1.0, -1.0, -3.0, -5.0, -7.0]);
        assert_eq!(values("1x4"), [1.0; 5]);
        assert_eq!(values("1+0x4"), [1.0; 5]);
        assert_eq!(
            expand("1 _x3 2").unwrap(),
            [Step::Value(1.0), Step::Gap, Step::Gap, Step::Gap, Step::Value(2.0)]
        );
    }

    #[test]
    fn brief_example() {
        let steps = expand("2.0-0.01x100 2.0x50 nan").unwrap();
        assert_eq!(steps.len(), 101 + 51 + 1);
        for (i, step) in steps[..101].iter().enumerate() {
            // The exact decimal 2.0 - i/100, correctly rounded.
            let expected = (200 - i) as f64 / 100.0;
            assert_eq!(*step, Step::Value(expected), "step {i}");
        }
        assert_eq!(steps[100], Step::Value(1.0));
        assert!(steps[101..152].iter().all(|s| *s == Step::Value(2.0)));
        assert!(matches!(steps[152], Step::Value(v) if v.is_nan()));
    }

    #[test]
    fn no_floating_point_artefacts() {
        assert_eq!(values("0+0.1x3"), [0.0, 0.1, 0.2, 0.3]);
        assert_eq!(values("1-0.1x10"), [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]);
        assert_eq!(values("0.1+0.2x1"), [0.1, 0.3]);
        assert_eq!(values("-0.3+0.1x3"), [-0.3, -0.2, -0.1, 0.0]);
        assert_eq!(values("1e-9+1e-9x2"), [1e-9, 2e-9, 3e-9]);
        assert_eq!(values("1e20+1e19x2"), [1e20, 1.1e20, 1.2e20]);
        // No drift over a long series: every value is the exact decimal.
        let long = values("0+0.001x100000");
        for (i, v) in long.iter().enumerate() {
            assert_eq!(*v, i as f64 / 1000.0, "step {i}");
        }
        // Exact inputs stay exact.
        assert_eq!(values("1.23456789012345x0"), [1.23456789012345]);
        assert_eq!(values("123456789.123"), [123456789.123]);
    }

    #[test]
    fn exponent_signs_are_not_increments() {
        assert_eq!(values("1e-3x2"), [0.001; 3]);
        assert_eq!(values("1e+3x1"), [1000.0; 2]);
        assert_eq!(values("2e-1-1e-1x2"), [0.2, 0.1, 0.0]);
        assert_eq!(values("-1e2+5e1x2"), [-100.0, -50.0, 0.0]);
    }

    #[test]
    fn special_values_expand() {
        let steps = expand("inf+1x2 -infx1 nanx2").unwrap();
        assert_eq!(steps[..3], [Step::Value(f64::INFINITY); 3]);
        assert_eq!(steps[3..5], [Step::Value(f64::NEG_INFINITY); 2]);
        assert!(steps[5..].iter().all(|s| matches!(s, Step::Value(v) if v.is_nan())));
        assert_eq!(steps.len(), 8);
    }

    #[test]
    fn gaps_and_edge_counts() {
        assert_eq!(expand("_").unwrap(), [Step::Gap]);
        assert_eq!(expand("_x0").unwrap(), []);
        assert_eq!(values("5x0"), [5.0]);
        assert_eq!(expand("").unwrap(), []);
        assert_eq!(expand("  \n\t ").unwrap(), []);
        assert_eq!(values(" 1\t2\n3 "), [1.0, 2.0, 3.0]);
        assert_eq!(expand("_ 1 _x2").unwrap(), [Step::Gap, Step::Value(1.0), Step::Gap, Step::Gap]);
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            err("1 2 abc"),
            "invalid token 3 \"abc\" in series: expected a number, nan, inf, -inf, \"_\", or an \
             expansion such as \"1+2x3\", \"5-0.5x10\", \"7x4\" or \"_x3\""
        );
        assert_eq!(
            err("1+2"),
            "invalid token 1 \"1+2\" in series: expected a number, nan, inf, -inf, \"_\", or an \
             expansion such as \"1+2x3\", \"5-0.5x10\", \"7x4\" or \"_x3\""
        );
        assert_eq!(
            err("1 1+2x"),
            "invalid token 2 \"1+2x\" in series: the repetition count after \"x\" must be a whole \
             number, not \"\" (e.g. \"1+2x3\")"
        );
        assert_eq!(
            err("1+2x-3"),
            "invalid token 1 \"1+2x-3\" in series: the repetition count after \"x\" must be a \
             whole number, not \"-3\" (e.g. \"1+2x3\")"
        );
        assert_eq!(
            err("1+2x1.5"),
            "invalid token 1 \"1+2x1.5\" in series: the repetition count after \"x\" must be a \
             whole number, not \"1.5\" (e.g. \"1+2x3\")"
        );
        assert_eq!(
            err("1+-2x3"),
            "invalid token 1 \"1+-2x3\" in series: the increment \"-2\" must be an unsigned \
             finite number (e.g. \"1+0.5x3\")"
        );
        assert_eq!(
            err("1+infx3"),
            "invalid token 1 \"1+infx3\" in series: the increment \"inf\" must be an unsigned \
             finite number (e.g. \"1+0.5x3\")"
        );
        assert_eq!(
            err("1+x3"),
            "invalid token 1 \"1+x3\" in series: the increment \"\" must be an unsigned finite \
             number (e.g. \"1+0.5x3\")"
        );
        assert_eq!(
            err("abc+1x3"),
            "invalid token 1 \"abc+1x3\" in series: the start value \"abc\" is not a number, nan, \
             inf or -inf"
        );
        assert_eq!(
            err("x3"),
            "invalid token 1 \"x3\" in series: the start value \"\" is not a number, nan, inf or \
             -inf"
        );
        assert_eq!(
            err("_+1x3"),
            "invalid token 1 \"_+1x3\" in series: a gap \"_\" cannot have a value or an \
             increment; write \"_xN\" for N gaps"
        );
        assert_eq!(
            err("_xa"),
            "invalid token 1 \"_xa\" in series: the repetition count after \"x\" must be a whole \
             number, not \"a\" (e.g. \"1+2x3\")"
        );
        assert_eq!(
            err("1 stale"),
            "invalid token 2 \"stale\" in series: stale markers are not supported; use \"_\" for a \
             missing sample"
        );
        assert_eq!(
            expand("1 2,"),
            Err(NotationError::InvalidToken { index: 2, token: "2,".into(), reason: EXPECTED.into() })
        );
    }

    #[test]
    fn length_limit() {
        assert_eq!(expand("1x999999").unwrap().len(), MAX_STEPS);
        assert_eq!(expand("_x1000000").unwrap().len(), MAX_STEPS);
        assert_eq!(
            err("1x1000000"),
            "token 1 \"1x1000000\" makes the series longer than the limit of 1000000 steps"
        );
        assert_eq!(
            err("1 2 1x999998"),
            "token 3 \"1x999998\" makes the series longer than the limit of 1000000 steps"
        );
        assert_eq!(
            err("1x18446744073709551615"),
            "token 1 \"1x18446744073709551615\" makes the series longer than the limit of 1000000 \
             steps"
        );
        assert_eq!(
            err("_x99999999999999999999999"),
            "token 1 \"_x99999999999999999999999\" makes the series longer than the limit of \
             1000000 steps"
        );
    }

    #[test]
    fn decimal_places_of_literals() {
        for (literal, places) in [
            ("2", 0),
            ("2.0", 1),
            ("-0.01", 2),
            (".5", 1),
            ("5.", 0),
            ("1e-9", 9),
            ("1.5e-3", 4),
            ("1.5E3", 0),
            ("1e20", 0),
            ("nan", 0),
            ("-inf", 0),
        ] {
            assert_eq!(decimal_places(literal), places, "{literal}");
        }
    }

    #[test]
    fn tidy_rounds_only_when_exact() {
        assert_eq!(tidy(0.1 + 0.2, 0.2, 1), 0.3);
        assert!(tidy(f64::NAN, 1.0, 1).is_nan());
        assert_eq!(tidy(f64::INFINITY, 1.0, 1), f64::INFINITY);
        assert_eq!(tidy(1e-300, 1e-300, 300), 1e-300);
        assert_eq!(tidy(1e300 + 1e299, 1e300, 0), 1e300 + 1e299);
        // More places than f64 holds at this magnitude: left alone.
        assert_eq!(tidy(1000.1 + 1e-13, 1000.1, 14), 1000.1 + 1e-13);
    }

    #[test]
    fn precise_inputs_are_not_truncated() {
        assert_eq!(values("1.23456789012345x2"), [1.23456789012345; 3]);
        assert_eq!(
            values("0.123456789012+0.000000000001x2"),
            [0.123456789012, 0.123456789013, 0.123456789014]
        );
        assert_eq!(values("1000000+0.0000001x1"), [1000000.0, 1000000.0000001]);
    }
}
