//! Money and GPU time for people: the one formatter `replay`, `backtest`, `test`, `kubectl trainwarden`,
//! the controller's messages and notifications print dollars and GPU-hours with.
//!
//! Dollars always carry the sign before the `$` and thousands separators (`$1,804.24`, `-$1,000.00`); a
//! price nobody set is `unknown`, never `$0.00` (a policy without `gpuHourCost` does not make GPU time free).
//! GPU-hours keep enough digits that a saving that has a price is never printed as 0 GPU-hours.

/// Whether cents are shown: `$1,804.24` (timelines, messages) or `$1,804` (tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cents {
    /// `$1,804.24`.
    Shown,
    /// `$1,804`: rounded to the dollar.
    Rounded,
}

/// `$1,804.24` (or `$1,804` with [`Cents::Rounded`]); `None` is `unknown`.
pub fn fmt_money(dollars: Option<f64>, cents: Cents) -> String {
    let Some(d) = dollars else { return "unknown".into() };
    if !d.is_finite() {
        return format!("${d}");
    }
    let (whole, fraction) = match cents {
        Cents::Shown => {
            let c = (d.abs() * 100.0).round() as u64;
            (c / 100, Some(c % 100))
        }
        Cents::Rounded => (d.abs().round() as u64, None),
    };
    let negative = d < 0.0 && (whole > 0 || fraction.is_some_and(|f| f > 0));
    let mut out = format!("{}${}", if negative { "-" } else { "" }, thousands(whole));
    if let Some(f) = fraction {
        out += &format!(".{f:02}");
    }
    out
}

/// `1804` → `1,804`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// GPU-hours for people: one decimal from 1 up (`262.4`), two significant digits below (`0.012`), so a
/// small saving never reads as `0` beside the dollars it is worth; `0` only for nothing.
pub fn fmt_gpu_hours(h: f64) -> String {
    if !h.is_finite() {
        return format!("{h}");
    }
    let a = h.abs();
    if a == 0.0 {
        return "0".into();
    }
    let text = if a >= 1.0 {
        format!("{h:.1}")
    } else {
        // Two significant digits: 0.5, 0.083, 0.0012.
        let decimals = (1 - a.log10().floor() as i32).clamp(1, 12) as usize;
        format!("{h:.decimals$}")
    };
    let trimmed = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    thousands_in(trimmed)
}

/// Thousands separators in the whole part of a decimal text (`12345.6` → `12,345.6`).
fn thousands_in(text: &str) -> String {
    let (sign, rest) = text.strip_prefix('-').map_or(("", text), |r| ("-", r));
    let (whole, fraction) = rest.split_once('.').map_or((rest, None), |(w, f)| (w, Some(f)));
    let grouped = whole.parse::<u64>().map_or_else(|_| whole.to_string(), thousands);
    match fraction {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_have_a_sign_separators_and_unknown_for_no_price() {
        assert_eq!(fmt_money(Some(1804.2356), Cents::Shown), "$1,804.24");
        assert_eq!(fmt_money(Some(1804.2356), Cents::Rounded), "$1,804");
        assert_eq!(fmt_money(Some(1038.0), Cents::Rounded), "$1,038");
        assert_eq!(fmt_money(Some(1_234_567.891), Cents::Shown), "$1,234,567.89");
        assert_eq!(fmt_money(Some(0.0), Cents::Shown), "$0.00");
        assert_eq!(fmt_money(Some(0.5), Cents::Shown), "$0.50");
        assert_eq!(fmt_money(Some(-1000.0), Cents::Shown), "-$1,000.00");
        assert_eq!(fmt_money(Some(-0.001), Cents::Shown), "$0.00");
        assert_eq!(fmt_money(None, Cents::Shown), "unknown");
    }

    #[test]
    fn gpu_hours_never_read_as_zero_beside_their_price() {
        assert_eq!(fmt_gpu_hours(262.4356), "262.4");
        assert_eq!(fmt_gpu_hours(138.04), "138");
        assert_eq!(fmt_gpu_hours(12_345.67), "12,345.7");
        assert_eq!(fmt_gpu_hours(0.0116), "0.012");
        assert_eq!(fmt_gpu_hours(0.5), "0.5");
        assert_eq!(fmt_gpu_hours(0.0), "0");
        assert_eq!(fmt_gpu_hours(1.0), "1");
    }
}
