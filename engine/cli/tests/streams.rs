//! `replay` reads its streams as they come: stdin, gzip and zstd, several files merged on their clocks,
//! a mostly ordered file through the reorder window, and a line later than the window refused with its place.
//! Every variant must print exactly what the plain, sorted file prints.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/streams")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trainwarden-streams-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `trainwarden replay --policy policy.yaml ARGS…` in the data directory, with `stdin` piped in.
fn replay(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let policy = data().join("policy.yaml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_trainwarden"))
        .arg("replay")
        .arg("--policy")
        .arg(&policy)
        .args(args)
        .current_dir(data())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.unwrap_or_default().to_vec();
    let writer = std::thread::spawn(move || input.write_all(&bytes));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The output of a replay that must succeed.
fn ok(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// The plain, sorted stream's output, in both formats; checked to be a real timeline, not an empty one.
fn expected() -> (String, String) {
    let plain = ok(&replay(&["two-jobs.jsonl"], None));
    assert!(plain.contains("ml/b  stall            FIRING"), "{plain}");
    assert!(plain.contains("ml/b  high-loss        FIRING"), "{plain}");
    assert!(plain.contains("  input        80 records, 2 jobs"), "{plain}");
    assert!(plain.contains("\nNotifications ("), "{plain}");
    let json = ok(&replay(&["--output", "json", "two-jobs.jsonl"], None));
    assert!(json.lines().count() > 3, "{json}");
    (plain, json)
}

fn lines() -> Vec<String> {
    std::fs::read_to_string(data().join("two-jobs.jsonl")).unwrap().lines().map(str::to_string).collect()
}

#[test]
fn stdin_is_read_for_a_dash() {
    let (plain, json) = expected();
    let bytes = std::fs::read(data().join("two-jobs.jsonl")).unwrap();
    assert_eq!(ok(&replay(&["-"], Some(&bytes))), plain);
    assert_eq!(ok(&replay(&["--output", "json", "-"], Some(&bytes))), json);
    // Compressed data on stdin is recognised by its first bytes.
    let zst = std::fs::read(data().join("two-jobs.jsonl.zst")).unwrap();
    assert_eq!(ok(&replay(&["-"], Some(&zst))), plain);
    let out = replay(&["-", "-"], Some(&bytes));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr), "error: - (stdin) is given more than once\n");
}

#[test]
fn gzip_and_zstd_streams_print_what_the_plain_stream_prints() {
    let (plain, json) = expected();
    for file in ["two-jobs.jsonl.gz", "two-jobs.jsonl.zst"] {
        assert_eq!(ok(&replay(&[file], None)), plain, "{file}");
        assert_eq!(ok(&replay(&["--output", "json", file], None)), json, "{file}");
    }
    // By content, not by name: the same bytes under a plain name.
    let dir = temp_dir("magic");
    for (from, to) in [("two-jobs.jsonl.gz", "gzipped.jsonl"), ("two-jobs.jsonl.zst", "zstd")] {
        std::fs::copy(data().join(from), dir.join(to)).unwrap();
        assert_eq!(ok(&replay(&[dir.join(to).to_str().unwrap()], None)), plain, "{to}");
    }
    // A name that promises compression the content does not have is refused, not read as text.
    std::fs::copy(data().join("two-jobs.jsonl"), dir.join("s.jsonl.gz")).unwrap();
    let path = dir.join("s.jsonl.gz");
    let out = replay(&[path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: {}: the name says gzip but the content is not compressed (it starts with 7b 22 74 69)\n",
            path.display()
        )
    );
    // A damaged archive is an error with the place it was reached.
    let mut gz = std::fs::read(data().join("two-jobs.jsonl.gz")).unwrap();
    gz.truncate(gz.len() - 12); // inside the second member: its end and checksum are missing
    std::fs::write(dir.join("cut.jsonl.gz"), &gz).unwrap();
    let out = replay(&[dir.join("cut.jsonl.gz").to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("error: invalid stream"), "{stderr}");
    assert!(stderr.contains("cut.jsonl.gz:") && stderr.contains(": cannot read: "), "{stderr}");
    // A wrong checksum and an unknown compression method: gzip's reader says so once, then reads as empty,
    // and the replay must still fail rather than end early as a success.
    let whole = std::fs::read(data().join("two-jobs.jsonl.gz")).unwrap();
    let mut crc = whole.clone();
    let at = crc.len() - 8; // the last member's CRC-32
    crc[at] ^= 0xff;
    let mut method = whole;
    method[2] = 9; // 8 is deflate, the only method gzip defines
    for (name, bytes) in [("crc.jsonl.gz", crc), ("method.jsonl.gz", method)] {
        std::fs::write(dir.join(name), &bytes).unwrap();
        let out = replay(&[dir.join(name).to_str().unwrap()], None);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out.stderr));
        let stderr = text(&out.stderr);
        assert!(stderr.contains(&format!("{name}:")) && stderr.contains(": cannot read: "), "{stderr}");
    }
}

#[test]
fn two_files_merge_on_their_clocks() {
    let (plain, json) = expected();
    let dir = temp_dir("merge");
    let (a, b): (Vec<String>, Vec<String>) = lines().into_iter().partition(|l| l.contains("\"ml/a\""));
    std::fs::write(dir.join("a.jsonl"), a.join("\n") + "\n").unwrap();
    std::fs::write(dir.join("b.jsonl"), b.join("\n") + "\n").unwrap();
    let (a, b) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    let files = [a.to_str().unwrap(), b.to_str().unwrap()];
    // At equal times the first file's lines come first: the combined file's order.
    assert_eq!(ok(&replay(&files, None)), plain);
    assert_eq!(ok(&replay(&["--output", "json", files[0], files[1]], None)), json);
}

#[test]
fn a_mostly_ordered_file_within_the_window_replays_as_the_sorted_one() {
    let (plain, json) = expected();
    let dir = temp_dir("window");
    // Each pair of neighbouring reports of ml/a is swapped: every other line is 30 s early.
    let mut shuffled = lines();
    let a: Vec<usize> = (0..shuffled.len()).filter(|&i| shuffled[i].contains("\"ml/a\"")).collect();
    for pair in a.chunks_exact(2) {
        shuffled.swap(pair[0], pair[1]);
    }
    assert_ne!(shuffled, lines());
    std::fs::write(dir.join("shuffled.jsonl"), shuffled.join("\n") + "\n").unwrap();
    let path = dir.join("shuffled.jsonl");
    let path = path.to_str().unwrap();
    assert_eq!(ok(&replay(&[path], None)), plain, "the default window (5m)");
    assert_eq!(ok(&replay(&["--max-lateness", "30s", "--output", "json", path], None)), json);
    // The window is a promise: a line earlier than it allows stops the replay at that line.
    let out = replay(&["--max-lateness", "29s", path], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    // The first line at 00:00:00 now follows ml/a's report of 00:00:30.
    assert!(shuffled[0].starts_with(r#"{"time":"2026-01-05T00:00:30Z","job":"ml/a""#), "{}", shuffled[0]);
    let late = shuffled.iter().position(|l| l.contains(r#""time":"2026-01-05T00:00:00Z""#)).unwrap() + 1;
    assert_eq!(
        stderr,
        format!(
            "error: {path}:{late}: its time 2026-01-05T00:00:00Z is 30s before 2026-01-05T00:00:30Z (line 1), \
             more than the 29s a line may be late; sort the stream or raise --max-lateness\n"
        )
    );
}

#[test]
fn a_line_later_than_the_window_is_an_error_naming_its_place() {
    let dir = temp_dir("late");
    let mut late = lines();
    // ml/b's first report again, at the end: 29m30s behind the last line.
    late.push(late[1].clone());
    std::fs::write(dir.join("late.jsonl"), late.join("\n") + "\n").unwrap();
    let out = replay(&[dir.join("late.jsonl").to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: {}:81: its time 2026-01-05T00:00:00Z is 29m30s before 2026-01-05T00:29:30Z (line 80), more \
             than the 5m a line may be late; sort the stream or raise --max-lateness\n",
            dir.join("late.jsonl").display()
        )
    );
    // A wider window takes it and puts it in its place: after the two lines of 00:00:00, as a stable sort would.
    let mut sorted = lines();
    sorted.insert(2, sorted[1].clone());
    std::fs::write(dir.join("sorted.jsonl"), sorted.join("\n") + "\n").unwrap();
    let want = ok(&replay(&[dir.join("sorted.jsonl").to_str().unwrap()], None));
    assert_eq!(ok(&replay(&["--max-lateness", "30m", dir.join("late.jsonl").to_str().unwrap()], None)), want);
}

#[test]
fn bad_lines_are_listed_with_their_places_after_what_ran() {
    let (plain, _) = expected();
    let dir = temp_dir("bad");
    let mut bad = lines();
    bad[40] = "{\"time\":\"2026-01-05T00:10:00Z\",\"job\":\"ab\"}".into();
    bad[60] = "[1]".into();
    std::fs::write(dir.join("bad.jsonl"), bad.join("\n") + "\n").unwrap();
    std::fs::write(dir.join("worse.jsonl"), "# nothing valid\n{\"time\": 5,\n").unwrap();
    let (bad, worse) = (dir.join("bad.jsonl"), dir.join("worse.jsonl"));
    let out = replay(&[bad.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    // What ran before the first bad line was printed as it happened: the start of the sorted replay's output.
    let stdout = text(&out.stdout);
    assert!(stdout.contains("high-loss") && plain.starts_with(&stdout), "{stdout}");
    assert!(!stdout.contains("Summary"), "{stdout}");
    // Every bad line of every file is listed, by file and line.
    let out = replay(&[bad.to_str().unwrap(), worse.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines[0], "error: invalid stream (replayed up to the first bad line)", "{stderr}");
    assert_eq!(lines[1], format!("{}:41: job: expected \"namespace/name\", got \"ab\"", bad.display()));
    assert_eq!(lines[2], format!("{}:61: expected a JSON object", bad.display()));
    assert!(lines[3].starts_with(&format!("{}:2:11: invalid JSON", worse.display())), "{stderr}");
    assert_eq!(lines.len(), 4, "{stderr}");
}

/// What the controller's recorder (`--record-dir`) writes replays like the stream it saw: the two jobs'
/// reports fed to it as the TrainJob watch would deliver them (each one twice, as watches re-deliver), flushed
/// every few reports (so each file holds several gzip members), one file per job, replayed together.
#[test]
fn files_the_controller_records_replay_like_the_stream_they_saw() {
    use std::sync::Arc;
    use trainwarden_controller::config::RecordConfig;
    use trainwarden_controller::messages::{JobObservation, Observation, RecordedProgress};
    use trainwarden_controller::recorder::Recorder;

    let (plain, _) = expected();
    let dir = temp_dir("recorded");
    let metrics = Arc::new(trainwarden_controller::metrics::Metrics::new());
    let mut recorder = Recorder::new(RecordConfig::new(&dir), "pod-0", metrics.clone());
    recorder.flush();
    for (i, line) in lines().iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let status = v["trainerStatus"].clone();
        let at: jiff::Timestamp = v["time"].as_str().unwrap().parse().unwrap();
        let job = trainwarden_core::JobKey::parse(v["job"].as_str().unwrap()).unwrap();
        for _ in 0..2 {
            recorder.observe(Observation::Seen(Box::new(JobObservation {
                job: job.clone(),
                uid: Some(format!("uid-{}", job.name)),
                labels: Default::default(),
                gpus: None,
                phase: Some(trainwarden_core::JobPhase::Running),
                progress: Some(RecordedProgress::TrainerStatus(status.clone())),
                sample_time: status["lastUpdatedTime"].as_str().map(|t| t.parse().unwrap()),
                at,
            })));
        }
        if i % 7 == 6 {
            recorder.flush();
        }
    }
    recorder.flush();
    assert_eq!(metrics.record_lines.get(), 80, "each report once");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(recorder.own_dir()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    let args: Vec<&str> = files.iter().map(|p| p.to_str().unwrap()).collect();
    assert_eq!(ok(&replay(&args, None)), plain);
    let _ = std::fs::remove_dir_all(&dir);
}
