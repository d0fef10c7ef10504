//! `trainwarden backtest` end to end on the shipped corpus (examples/corpus, real training curves): the
//! figures add up and agree with the runs they come from, a sweep marks its Pareto front, and the HTML
//! report renders in a real headless Chromium — its script runs without errors and a screenshot shows the
//! curves. Without Chromium the browser test is skipped, except under `CI=true`, where it fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod browser;
use browser::{chromium, headless, png_rgb};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn trainwarden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trainwarden")).args(args).current_dir(repo()).output().expect("runs")
}

use trainwarden_testkit::ci;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trainwarden-backtest-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const CORPUS: &str = "examples/corpus";
const PLATEAU: &str = "policies/plateau.yaml";

fn corpus_files() -> usize {
    std::fs::read_dir(repo().join(CORPUS))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".jsonl"))
        .count()
}

fn json_report(args: &[&str]) -> Value {
    let mut all = vec!["backtest", "--output", "json"];
    all.extend_from_slice(args);
    let out = trainwarden(&all);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    v["backtest"].clone()
}

fn ts(v: &Value) -> i64 {
    v.as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_second()
}

#[test]
fn the_plateau_policy_on_the_shipped_corpus_adds_up() {
    let report = json_report(&[PLATEAU, CORPUS]);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(report["files"].as_u64().unwrap() as usize, corpus_files());
    assert!(runs.len() >= 30, "the corpus has at least 30 runs, got {}", runs.len());
    let policy = &report["candidates"][0]["policies"][0];
    assert_eq!(policy["policy"], "default/plateau");
    assert_eq!(
        policy["runsSeen"].as_u64().unwrap() as usize,
        runs.len(),
        "the plateau policy selects every run"
    );
    let stops = policy["stops"].as_array().unwrap();
    assert_eq!(policy["stopped"].as_u64().unwrap() as usize, stops.len());
    let (mut saved, mut lost, mut false_stops) = (0.0, 0.0, 0);
    for s in stops {
        let run = &runs[s["run"].as_u64().unwrap() as usize];
        assert_eq!(s["runName"], run["name"]);
        // Saved = GPUs × (the run's real end − the stop), from the run's own record.
        let hours = ((ts(&run["end"]) - ts(&s["at"])) as f64 / 3600.0).max(0.0);
        let gpus = run["gpus"].as_f64().unwrap_or(0.0);
        let g = s["gpuHoursSaved"].as_f64().unwrap();
        assert!((g - hours * gpus).abs() < 0.01, "{s}");
        saved += g;
        // A false stop is one after which the target's level improved by more than 1 % and 0.001.
        let is_false = s["falseStop"].as_bool().unwrap();
        if let (Some(relative), Some(absolute)) =
            (s["relativeImprovement"].as_f64(), s["improvement"].as_f64())
        {
            assert_eq!(is_false, relative > 0.01 && absolute > 0.001, "{s}");
        }
        if is_false {
            false_stops += 1;
            lost += g;
        } else if s["measured"] == true {
            assert!(s["trouble"].is_string(), "a rightful stop says how the run had gone bad: {s}");
        }
    }
    assert!((policy["gpuHoursSaved"].as_f64().unwrap() - saved).abs() < 1e-6);
    assert!((policy["lostGpuHours"].as_f64().unwrap() - lost).abs() < 1e-6);
    assert_eq!(policy["falseStops"].as_u64().unwrap(), false_stops);
    assert!(false_stops >= 1, "the corpus has runs that still improved after a plateau stop");
    assert!(stops.len() > false_stops as usize, "and runs it rightly stops");
    // The outcome labels: every healthy run stopped is counted, every rightful stop of a bad run caught.
    let healthy = stops.iter().filter(|s| s["runOutcome"] == "healthy").count() as u64;
    assert_eq!(policy["healthyStopped"].as_u64().unwrap(), healthy);
    let bad = stops
        .iter()
        .filter(|s| s["runOutcome"] != "healthy" && s["measured"] == true && s["falseStop"] == false)
        .count() as u64;
    assert_eq!(policy["caught"].as_u64().unwrap(), bad);
    let bad_runs =
        runs.iter().filter(|r| r["outcome"].as_str().is_some_and(|o| o != "healthy")).count() as u64;
    assert_eq!(policy["badRunsSeen"].as_u64().unwrap(), bad_runs);
    assert!((policy["recall"].as_f64().unwrap() - bad as f64 / bad_runs as f64).abs() < 1e-9);

    let text = trainwarden(&["backtest", PLATEAU, CORPUS]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("runs seen {}, stopped {}", runs.len(), stops.len())), "{text}");
    assert!(text.contains("FALSE STOP"), "{text}");
}

#[test]
fn a_sweep_evaluates_every_setting_and_marks_the_pareto_front() {
    let report = json_report(&[
        PLATEAU,
        CORPUS,
        "--set",
        "rules[no-improvement].with.window=20%,30%,40%",
        "--set",
        "rules[no-improvement].with.minDelta=0.001,0.01",
    ]);
    let candidates = report["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 6);
    let points: Vec<(f64, u64, bool)> = candidates
        .iter()
        .map(|c| {
            let p = &c["policies"][0];
            (
                p["gpuHoursSaved"].as_f64().unwrap(),
                p["falseStops"].as_u64().unwrap(),
                p["pareto"].as_bool().unwrap(),
            )
        })
        .collect();
    for &(s, f, front) in &points {
        let dominated = points.iter().any(|&(s2, f2, _)| s2 >= s && f2 <= f && (s2 > s || f2 < f));
        assert_eq!(front, !dominated, "{points:?}");
    }
    // A longer patience stops later: it cannot save more on the same runs.
    let saved = |window: &str, delta: &str| {
        candidates
            .iter()
            .find(|c| c["settings"][0]["value"] == window && c["settings"][1]["value"] == delta)
            .map(|c| c["policies"][0]["gpuHoursSaved"].as_f64().unwrap())
            .unwrap()
    };
    assert!(saved("20%", "0.01") >= saved("40%", "0.01"), "{points:?}");
    assert_eq!(candidates[0]["settings"][0]["path"], "rules[no-improvement].with.window");
}

#[test]
fn a_set_value_the_policy_refuses_is_an_error_naming_it() {
    let out = trainwarden(&[
        "backtest",
        PLATEAU,
        CORPUS,
        "--set",
        "rules[no-improvement].with.window=30%,sometime",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("with --set rules[no-improvement].with.window=sometime"), "{err}");
}

#[test]
fn the_html_report_renders_in_chromium_with_its_charts() {
    let Some(browser) = chromium() else {
        assert!(
            !ci(),
            "chromium is not installed (tests/install-prereqs.sh installs it; CI=true, so this fails)"
        );
        eprintln!("SKIPPED: chromium is not installed (tests/install-prereqs.sh installs it)");
        return;
    };
    let dir = temp_dir("html");
    let page = dir.join("report.html");
    let out = trainwarden(&[
        "backtest",
        PLATEAU,
        CORPUS,
        "--set",
        "rules[no-improvement].with.window=20%,30%,40%",
        "--html",
        page.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("http://") && !html.contains("https://"), "self-contained: no network references");
    let charts = html.matches("<svg class=\"chart\"").count();
    assert!(charts >= 2, "a trade-off chart and at least one run: {charts}");

    let url = format!("file://{}", page.display());
    let dom = headless(&browser, &["--dump-dom", &url], &dir.join("profile-dom"));
    assert!(dom.status.success(), "{}", String::from_utf8_lossy(&dom.stderr));
    let dom_text = String::from_utf8_lossy(&dom.stdout);
    // The page's script sets this last: it ran to the end, over every chart.
    assert!(
        dom_text.contains(&format!("data-charts=\"{charts}\"")),
        "the script did not finish: {}",
        &dom_text[..dom_text.len().min(400)]
    );
    // Chromium logs every console message (errors and uncaught exceptions included) as a CONSOLE line,
    // without its level; the page writes none.
    let log = String::from_utf8_lossy(&dom.stderr);
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");

    let shot = dir.join("report.png");
    let out = headless(
        &browser,
        &["--window-size=1400,2400", &format!("--screenshot={}", shot.display()), &url],
        &dir.join("profile-shot"),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (width, height, pixels) = png_rgb(&std::fs::read(&shot).unwrap());
    assert_eq!((width, height), (1400, 2400));
    let near = |rgb: [u8; 3], (r, g, b): (u8, u8, u8)| {
        rgb[0].abs_diff(r) < 24 && rgb[1].abs_diff(g) < 24 && rgb[2].abs_diff(b) < 24
    };
    let curve = pixels.iter().filter(|p| near(**p, (0x1f, 0x5f, 0xbf))).count();
    let stop = pixels.iter().filter(|p| near(**p, (0xd6, 0x27, 0x28))).count();
    assert!(curve > 500, "the curves are drawn: {curve} curve-blue pixels");
    assert!(stop > 200, "the stop markers are drawn: {stop} stop-red pixels");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_corpus_streams_are_what_its_converter_writes() {
    let out = Command::new("python3")
        .args(["examples/corpus/convert.py", "--check"])
        .current_dir(repo())
        .output()
        .expect("python3 runs (tests/install-prereqs.sh installs it)");
    assert!(
        out.status.success(),
        "examples/corpus/*.jsonl differ from what convert.py writes from raw/: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_run_that_cannot_be_read_is_listed_and_left_out() {
    let dir = temp_dir("unreadable");
    std::fs::copy(repo().join(CORPUS).join("quality-mc-stuck.jsonl"), dir.join("good.jsonl")).unwrap();
    std::fs::write(
        dir.join("bad.jsonl"),
        "{\"time\":\"2026-10-02T16:30:00Z\",\"job\":\"default/x\",\"phase\":\"Runing\"}\n",
    )
    .unwrap();
    let out = trainwarden(&["backtest", PLATEAU, dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 run could not be read"), "{err}");
    assert!(err.contains("bad.jsonl:1"), "the bad line is named: {err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("backtest: 1 run from 1 file"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
