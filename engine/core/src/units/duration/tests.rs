//! Durations, windows and warmups: parsing, printing, errors, and the arithmetic that never overflows.

use super::*;
use serde_json::json;

fn d(s: &str) -> PolicyDuration {
    s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

fn err(s: &str) -> String {
    s.parse::<PolicyDuration>().unwrap_err().to_string()
}

#[test]
fn parses_single_units() {
    assert_eq!(d("500ms").as_millis(), 500);
    assert_eq!(d("30s").as_millis(), 30_000);
    assert_eq!(d("15m").as_millis(), 900_000);
    assert_eq!(d("2h").as_millis(), 7_200_000);
    assert_eq!(d("1d").as_millis(), 86_400_000);
    assert_eq!(d("1w").as_millis(), 604_800_000);
    assert_eq!(d("0s"), PolicyDuration::ZERO);
    assert_eq!(d("0ms"), PolicyDuration::ZERO);
    assert_eq!(d("007s").as_millis(), 7_000);
}

#[test]
fn parses_compound_durations() {
    assert_eq!(d("1h30m"), PolicyDuration::from_secs(5400));
    assert_eq!(d("1w2d3h4m5s6ms").as_millis(), ((((9 * 24 + 3) * 60 + 4) * 60 + 5) * 1000) + 6);
    assert_eq!(d("1m500ms").as_millis(), 60_500);
    assert_eq!(d("62h"), PolicyDuration::from_secs(62 * 3600));
    // Non-normalised groups are fine as long as the units are ordered.
    assert_eq!(d("90m"), d("1h30m"));
    assert_eq!(d("1h90m"), d("2h30m"));
}

#[test]
fn display_is_canonical_and_round_trips() {
    for (input, canonical) in [
        ("0s", "0s"),
        ("0ms", "0s"),
        ("0h0m", "0s"),
        ("90m", "1h30m"),
        ("1h30m", "1h30m"),
        ("36h", "1d12h"),
        ("8d", "1w1d"),
        ("1500ms", "1s500ms"),
        ("62h", "2d14h"),
        ("120s", "2m"),
    ] {
        let parsed = d(input);
        assert_eq!(parsed.to_string(), canonical, "{input}");
        assert_eq!(d(canonical), parsed, "{input}");
    }
    assert_eq!(PolicyDuration::MAX.to_string().parse::<PolicyDuration>(), Ok(PolicyDuration::MAX));
}

#[test]
fn conversions() {
    let x = d("1m30s500ms");
    assert_eq!(x.as_secs_f64(), 90.5);
    assert_eq!(x.to_signed_duration(), jiff::SignedDuration::from_millis(90_500));
    assert_eq!(jiff::SignedDuration::from(x), jiff::SignedDuration::from_millis(90_500));
    assert_eq!(x.to_std(), std::time::Duration::from_millis(90_500));
    assert_eq!(PolicyDuration::from_secs(90), d("90s"));
    assert_eq!(PolicyDuration::from_millis(u64::MAX), PolicyDuration::MAX);
    assert_eq!(PolicyDuration::from_secs(u64::MAX), PolicyDuration::MAX);
    assert_eq!(PolicyDuration::MAX.to_signed_duration(), jiff::SignedDuration::from_millis(i64::MAX));
    assert!(PolicyDuration::ZERO.is_zero());
    assert!(!x.is_zero());
    assert!(d("59m") < d("1h"));
    let ts: jiff::Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
    assert_eq!(ts.checked_add(d("1d").to_signed_duration()).unwrap().to_string(), "2025-01-02T00:00:00Z");
}

#[test]
fn error_messages() {
    assert_eq!(err(""), "duration is empty: expected a duration such as \"30s\", \"15m\" or \"1h30m\"");
    assert_eq!(err("-5m"), "invalid duration \"-5m\": durations cannot be negative");
    assert_eq!(err("5y"), "invalid duration \"5y\": unknown unit \"y\" (valid units: w, d, h, m, s, ms)");
    assert_eq!(
        err("5mins"),
        "invalid duration \"5mins\": unknown unit \"mins\" (valid units: w, d, h, m, s, ms)"
    );
    assert_eq!(err("5M"), "invalid duration \"5M\": unknown unit \"M\" (valid units: w, d, h, m, s, ms)");
    assert_eq!(
        err("30"),
        "invalid duration \"30\": the number \"30\" has no unit (valid units: w, d, h, m, s, ms)"
    );
    assert_eq!(
        err("1h30"),
        "invalid duration \"1h30\": the number \"30\" has no unit (valid units: w, d, h, m, s, ms)"
    );
    assert_eq!(err("h"), "invalid duration \"h\": expected a number before \"h\"");
    assert_eq!(
        err("30m1h"),
        "invalid duration \"30m1h\": unit \"h\" cannot follow \"m\"; write units from the \
             largest to the smallest, each at most once (w, d, h, m, s, ms)"
    );
    assert_eq!(
        err("1h1h"),
        "invalid duration \"1h1h\": unit \"h\" cannot follow \"h\"; write units from the \
             largest to the smallest, each at most once (w, d, h, m, s, ms)"
    );
    assert_eq!(
        err("1.5h"),
        "invalid duration \"1.5h\": unexpected character '.'; fractions are not supported, \
             use a smaller unit (e.g. \"1h30m\" instead of \"1.5h\")"
    );
    assert_eq!(err(" 5m"), "invalid duration \" 5m\": unexpected character ' '");
    assert_eq!(err("5m "), "invalid duration \"5m \": unexpected character ' '");
    assert_eq!(err("5 m"), "invalid duration \"5 m\": unexpected character ' '");
    assert_eq!(err("+5m"), "invalid duration \"+5m\": unexpected character '+'");
    assert_eq!(err("5µs"), "invalid duration \"5µs\": unexpected character 'µ'");
    assert_eq!(err("99999999999999999999s"), "invalid duration \"99999999999999999999s\": too large");
    assert_eq!(err("9223372036854776w"), "invalid duration \"9223372036854776w\": too large");
    assert_eq!("-5m".parse::<PolicyDuration>(), Err(DurationError::Negative { input: "-5m".into() }));
}

#[test]
fn pattern_agrees_with_parser() {
    // A tiny matcher for exactly DURATION_PATTERN's shape, to check the
    // constant against the parser without a regex dependency.
    fn matches_pattern(s: &str) -> bool {
        let mut rest = s;
        for unit in ["w", "d", "h", "m", "s", "ms"] {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 && rest[digits..].starts_with(unit) {
                let after = &rest[digits + unit.len()..];
                // "m" must not swallow the "m" of "ms".
                if unit == "m" && after.starts_with('s') {
                    continue;
                }
                rest = after;
            }
        }
        rest.is_empty() && !s.is_empty()
    }
    assert_eq!(DURATION_PATTERN, "^([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?$");
    for s in [
        "30s",
        "15m",
        "2h",
        "1h30m",
        "1d",
        "1w",
        "500ms",
        "1m500ms",
        "1w2d3h4m5s6ms",
        "",
        "5",
        "-5m",
        "30m1h",
        "1h1h",
        "1.5h",
        "5y",
        "ms",
        " 5m",
        "1s1m",
    ] {
        assert_eq!(
            matches_pattern(s),
            s.parse::<PolicyDuration>().is_ok(),
            "pattern and parser disagree on {s:?}"
        );
    }
}

#[test]
fn duration_serde() {
    assert_eq!(serde_json::to_value(d("90m")).unwrap(), json!("1h30m"));
    assert_eq!(serde_json::from_value::<PolicyDuration>(json!("2h")).unwrap(), d("2h"));
    let e = serde_json::from_value::<PolicyDuration>(json!("-5m")).unwrap_err();
    assert_eq!(e.to_string(), "invalid duration \"-5m\": durations cannot be negative");
    let e = serde_json::from_value::<PolicyDuration>(json!(30)).unwrap_err();
    assert!(e.to_string().contains("expected a duration string such as \"30s\""), "{e}");
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Spec {
        timeout: PolicyDuration,
    }
    let e = serde_json::from_str::<Spec>(r#"{"timeout": "30m1h"}"#).unwrap_err();
    assert!(e.to_string().starts_with("invalid duration \"30m1h\": unit \"h\" cannot follow"), "{e}");
}

#[test]
fn duration_schema() {
    let schema = serde_json::to_value(schemars::schema_for!(PolicyDuration)).unwrap();
    assert_eq!(schema["type"], "string");
    assert_eq!(schema["pattern"], DURATION_PATTERN);
    assert_eq!(schema["minLength"], 1);
    assert!(schema["description"].as_str().unwrap().contains("\"1h30m\""));
}

#[test]
fn warmup_parse() {
    assert_eq!("10".parse(), Ok(Warmup::Samples(10)));
    assert_eq!("0".parse(), Ok(Warmup::Samples(0)));
    assert_eq!("10%".parse(), Ok(Warmup::ProgressPercent(10.0)));
    assert_eq!("12.5%".parse(), Ok(Warmup::ProgressPercent(12.5)));
    assert_eq!(".5%".parse(), Ok(Warmup::ProgressPercent(0.5)));
    assert_eq!("0%".parse(), Ok(Warmup::ProgressPercent(0.0)));
    assert_eq!("100%".parse(), Ok(Warmup::ProgressPercent(100.0)));
    assert_eq!("100.0%".parse(), Ok(Warmup::ProgressPercent(100.0)));
}

#[test]
fn warmup_errors() {
    let e = |s: &str| s.parse::<Warmup>().unwrap_err().to_string();
    assert_eq!(
        e(""),
        "warmup is empty: expected a number of samples (e.g. 10) or a percent of progress (e.g. \"10%\")"
    );
    assert_eq!(e("-5"), "invalid warmup \"-5\": cannot be negative");
    assert_eq!(e("-5%"), "invalid warmup \"-5%\": cannot be negative");
    assert_eq!(e("100.5%"), "invalid warmup \"100.5%\": a percent of progress cannot exceed 100%");
    assert_eq!(e("150%"), "invalid warmup \"150%\": a percent of progress cannot exceed 100%");
    assert_eq!(
        e("10.5"),
        "invalid warmup \"10.5\": a number of samples must be a whole number; for a percent \
             of progress add \"%\" (e.g. \"10%\")"
    );
    let garbage = "invalid warmup \"abc\": expected a number of samples (e.g. 10) or a percent of progress (e.g. \"10%\")";
    assert_eq!(e("abc"), garbage);
    for bad in [
        "1e3",
        "inf",
        "%",
        "abc%",
        "nan%",
        "inf%",
        "1e1%",
        "+5%",
        "5.%",
        "1.2.3%",
        "10 %",
        " 10",
        "10%%",
        "99999999999999999999999",
    ] {
        assert!(
            matches!(bad.parse::<Warmup>(), Err(WarmupError::Invalid { .. })),
            "{bad:?}: {:?}",
            bad.parse::<Warmup>()
        );
    }
}

#[test]
fn warmup_serde() {
    let from = |v: serde_json::Value| serde_json::from_value::<Warmup>(v);
    assert_eq!(from(json!(10)).unwrap(), Warmup::Samples(10));
    assert_eq!(from(json!("10")).unwrap(), Warmup::Samples(10));
    assert_eq!(from(json!(10.0)).unwrap(), Warmup::Samples(10));
    assert_eq!(from(json!("10%")).unwrap(), Warmup::ProgressPercent(10.0));
    assert_eq!(from(json!(-3)).unwrap_err().to_string(), "invalid warmup \"-3\": cannot be negative");
    assert_eq!(
        from(json!(2.5)).unwrap_err().to_string(),
        "invalid warmup \"2.5\": a number of samples must be a whole number; for a percent \
             of progress add \"%\" (e.g. \"10%\")"
    );
    assert_eq!(
        from(json!("200%")).unwrap_err().to_string(),
        "invalid warmup \"200%\": a percent of progress cannot exceed 100%"
    );
    assert!(
        from(json!(true))
            .unwrap_err()
            .to_string()
            .contains("expected a number of samples (e.g. 10) or a percent of progress")
    );
    assert_eq!(serde_json::to_value(Warmup::Samples(10)).unwrap(), json!(10));
    assert_eq!(serde_json::to_value(Warmup::ProgressPercent(10.0)).unwrap(), json!("10%"));
    assert_eq!(serde_json::to_value(Warmup::ProgressPercent(12.5)).unwrap(), json!("12.5%"));
    for w in [Warmup::Samples(7), Warmup::ProgressPercent(33.25)] {
        let v = serde_json::to_value(w).unwrap();
        assert_eq!(from(v).unwrap(), w);
        assert_eq!(w.to_string().parse::<Warmup>().unwrap(), w);
    }
}

#[test]
fn window_parse_and_errors() {
    assert_eq!("10".parse(), Ok(Window::Samples(10)));
    assert_eq!("2h".parse(), Ok(Window::Time(d("2h"))));
    assert_eq!("1h30m".parse(), Ok(Window::Time(d("90m"))));
    let e = |s: &str| s.parse::<Window>().unwrap_err().to_string();
    assert_eq!(e("-5"), "invalid window \"-5\": cannot be negative");
    assert_eq!(e("-2h"), "invalid window \"-2h\": cannot be negative");
    assert_eq!(
        e("2x"),
        "expected a number of samples (e.g. 10) or a duration (e.g. \"2h\"), but invalid \
             duration \"2x\": unknown unit \"x\" (valid units: w, d, h, m, s, ms)"
    );
    assert_eq!(
        e(""),
        "expected a number of samples (e.g. 10) or a duration (e.g. \"2h\"), but duration \
             is empty: expected a duration such as \"30s\", \"15m\" or \"1h30m\""
    );
    assert_eq!(
        e("99999999999999999999999"),
        "invalid window \"99999999999999999999999\": number of samples is too large"
    );
}

#[test]
fn window_serde() {
    let from = |v: serde_json::Value| serde_json::from_value::<Window>(v);
    assert_eq!(from(json!(10)).unwrap(), Window::Samples(10));
    assert_eq!(from(json!("10")).unwrap(), Window::Samples(10));
    assert_eq!(from(json!("2h")).unwrap(), Window::Time(d("2h")));
    assert_eq!(from(json!(-1)).unwrap_err().to_string(), "invalid window \"-1\": cannot be negative");
    assert!(
        from(json!(1.5))
            .unwrap_err()
            .to_string()
            .starts_with("invalid window 1.5: a number of samples must be a whole number")
    );
    assert!(from(json!("30m1h")).unwrap_err().to_string().contains("cannot follow"));
    assert_eq!(serde_json::to_value(Window::Samples(10)).unwrap(), json!(10));
    assert_eq!(serde_json::to_value(Window::Time(d("120m"))).unwrap(), json!("2h"));
    assert_eq!(Window::Time(d("90m")).to_string(), "1h30m");
    assert_eq!(Window::Samples(3).to_string(), "3");
}

#[test]
fn yaml_policy_fields() {
    #[derive(Debug, Deserialize, PartialEq)]
    struct Spec {
        timeout: PolicyDuration,
        warmup: Warmup,
        patience: Window,
    }
    let spec: Spec = serde_saphyr::from_str("timeout: 1h30m\nwarmup: 10%\npatience: 10\n").unwrap();
    assert_eq!(
        spec,
        Spec { timeout: d("90m"), warmup: Warmup::ProgressPercent(10.0), patience: Window::Samples(10) }
    );
    let spec: Spec = serde_saphyr::from_str("timeout: \"30s\"\nwarmup: 25\npatience: 2h\n").unwrap();
    assert_eq!(spec.warmup, Warmup::Samples(25));
    assert_eq!(spec.patience, Window::Time(d("2h")));
    let e = serde_saphyr::from_str::<Spec>("timeout: -5m\nwarmup: 1\npatience: 1\n").unwrap_err().to_string();
    assert!(e.contains("durations cannot be negative"), "{e}");
    let e = serde_saphyr::from_str::<Spec>("timeout: 30\nwarmup: 1\npatience: 1\n").unwrap_err().to_string();
    // serde-saphyr hands the plain scalar 30 to `visit_str`.
    assert!(e.contains("invalid duration \"30\": the number \"30\" has no unit"), "{e}");
    let e =
        serde_saphyr::from_str::<Spec>("timeout: 5m\nwarmup: 150%\npatience: 1\n").unwrap_err().to_string();
    assert!(e.contains("cannot exceed 100%"), "{e}");
}

#[test]
fn int_or_string_schemas() {
    for schema in [
        serde_json::to_value(schemars::schema_for!(Warmup)).unwrap(),
        serde_json::to_value(schemars::schema_for!(Window)).unwrap(),
    ] {
        assert_eq!(schema["x-kubernetes-int-or-string"], true);
        assert!(schema.get("type").is_none(), "{schema}");
        assert!(schema.get("pattern").is_none(), "{schema}");
        assert!(schema["description"].as_str().unwrap().starts_with("Either a number of samples"));
    }
    // Inlined where used, so Kubernetes sees no $ref.
    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Spec {
        warmup: Warmup,
        patience: Window,
        timeout: PolicyDuration,
    }
    let schema = serde_json::to_value(schemars::schema_for!(Spec)).unwrap();
    assert_eq!(schema["properties"]["warmup"]["x-kubernetes-int-or-string"], true);
    assert_eq!(schema["properties"]["patience"]["x-kubernetes-int-or-string"], true);
    assert_eq!(schema["properties"]["timeout"]["pattern"], DURATION_PATTERN);
    assert!(schema.get("$defs").is_none(), "{schema}");
}
