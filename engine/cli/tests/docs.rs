//! The README and the book (`docs/src/`) say what the binary does (issue 43: docs that drifted; issue 46: the
//! book): every terminal transcript they show (a fenced block opening with `$ trainwarden …` or `$ kubectl
//! trainwarden get`) is what the binary prints (or the golden table the end-to-end tests check the plugin
//! against), their generated passages (`<!-- generated: NAME -->…<!-- /generated -->`) are what the binary lists
//! today, the command table names every flag each command takes, `crd --help` names every CRD `crd` prints,
//! and the policy catalog's commands run. `TRAINWARDEN_BLESS=1 cargo test -p trainwarden --test docs` rewrites
//! the transcripts and the generated passages; the reference pages are `tests/reference.rs`'s.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn trainwarden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trainwarden")).args(args).current_dir(repo()).output().expect("runs")
}

fn stdout(args: &[&str]) -> String {
    let out = trainwarden(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn page(path: &str) -> String {
    std::fs::read_to_string(repo().join("docs/src").join(path))
        .unwrap_or_else(|e| panic!("docs/src/{path}: {e}"))
}

/// README.md and every page of the book, by path from the repository's root.
fn documents() -> Vec<(PathBuf, String)> {
    let mut found = vec![PathBuf::from("README.md")];
    let mut dirs = vec![PathBuf::from("docs/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(repo().join(&dir)).unwrap() {
            let name = dir.join(entry.unwrap().file_name());
            if repo().join(&name).is_dir() {
                dirs.push(name);
            } else if name.extension().is_some_and(|e| e == "md") {
                found.push(name);
            }
        }
    }
    found.sort();
    found.into_iter().map(|p| (p.clone(), std::fs::read_to_string(repo().join(&p)).unwrap())).collect()
}

/// The names a listing prints at the start of its lines (`plateau`, `metric(name) -> float` → `metric`, and
/// each of `window_mean(…) / window_min / …`).
fn listed_names(listing: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in listing.lines().filter(|l| !l.is_empty() && !l.starts_with(' ')) {
        for part in line.split([',', '/']) {
            let name: String =
                part.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() && !names.contains(&name) && part.trim().starts_with(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// What a transcript's command prints now, as the page would show it; `None` when the command is not one
/// this test can run.
fn printed_now(command: &str, shown: &str) -> Option<String> {
    if let Some(args) = command.strip_prefix("kubectl trainwarden get ") {
        // The plugin's tables need a real API server and controller: the end-to-end tests check the plugin
        // against these golden files (engine/e2e/tests/friday.rs, plugin.rs), and the page against them here.
        let golden = match args.trim() {
            "-n fraud" => "friday.txt",
            "-n ml" => "get.txt",
            other => panic!("no golden table for `kubectl trainwarden get {other}`"),
        };
        let golden = std::fs::read_to_string(repo().join("engine/e2e/tests/golden").join(golden)).unwrap();
        // The golden table masks what varies with the run (plugin.rs): the SAVED figures of a suspension and
        // a snooze's end. The page shows one run's values in their place.
        let masked: String = shown
            .lines()
            .map(|line| match (line.find("snoozed until "), line.rfind(" GPU-h ($")) {
                (Some(at), _) => {
                    format!("{}snoozed until <now + 24h>      {}", &line[..at], &line[at + 31..])
                }
                (None, Some(at)) => {
                    let figure = line[..at].rfind(' ').unwrap() + 1;
                    format!("{}N GPU-h ($M)", &line[..figure])
                }
                (None, None) => line.to_string(),
            })
            .map(|line| line + "\n")
            .collect();
        return Some(if masked == golden { shown.to_string() } else { golden });
    }
    let args = command.strip_prefix("trainwarden ")?;
    let mut args: Vec<String> = args.split_whitespace().map(|a| a.trim_matches('\'').to_string()).collect();
    if let Some(i) = args.iter().position(|a| a == "--html") {
        args.drain(i..i + 2); // the picture is not part of the text
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = trainwarden(&args);
    assert!(out.status.success(), "`{command}`: {}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    // A replay block that shows no summary shows the timeline above it.
    if args[0] == "replay" && !shown.contains("\nSummary\n") {
        return Some(printed.split("\nSummary\n").next().unwrap().to_string());
    }
    Some(printed)
}

/// Every transcript of the README and the book: `$ COMMAND` (a trailing `\` continues it on the next line),
/// then its output; an output that opens with a `…` line shows the output's tail from there.
#[test]
fn every_transcript_is_what_the_binary_prints() {
    let bless = std::env::var_os("TRAINWARDEN_BLESS").is_some();
    let mut checked = 0;
    let mut stale = Vec::new();
    for (path, text) in documents() {
        let mut rewritten = text.clone();
        for block in text.split("```").skip(1).step_by(2) {
            let Some(rest) = block.strip_prefix("\n$ ") else { continue };
            let (mut command, mut shown) = rest.split_once('\n').unwrap();
            let joined;
            if let Some(first) = command.strip_suffix('\\') {
                let (next, output) = shown.split_once('\n').unwrap();
                joined = format!("{} {}", first.trim_end(), next.trim());
                (command, shown) = (joined.as_str(), output);
            }
            let printed = printed_now(command, shown).unwrap_or_else(|| {
                panic!("{}: no way to check the transcript `$ {command}`", path.display())
            });
            let fresh = match shown.strip_prefix("…\n") {
                Some(tail) if printed.ends_with(tail) => None,
                Some(tail) => {
                    let all: Vec<&str> = printed.lines().collect();
                    let from = all.len().saturating_sub(tail.lines().count());
                    Some(format!("…\n{}\n", all[from..].join("\n")))
                }
                None if printed == shown => None,
                None => Some(printed.clone()),
            };
            if let Some(fresh) = fresh {
                stale.push(format!("{}: `$ {command}` prints:\n{printed}", path.display()));
                // The whole fenced block is replaced, not the output alone: an empty output, or one shown
                // in another block too, would otherwise be matched in the wrong place.
                let renewed = format!("```{}{fresh}```", &block[..block.len() - shown.len()]);
                rewritten = rewritten.replacen(&format!("```{block}```"), &renewed, 1);
            }
            checked += 1;
        }
        if bless && rewritten != text {
            std::fs::write(repo().join(&path), rewritten).unwrap();
        }
    }
    assert!(checked >= 8, "the transcripts were found ({checked})");
    assert!(
        bless || stale.is_empty(),
        "stale transcripts (TRAINWARDEN_BLESS=1 rewrites them):\n{}",
        stale.join("\n")
    );
}

/// The passages the binary can generate, by name: what they must hold now.
fn generated() -> Vec<(&'static str, String)> {
    let detectors = listed_names(&stdout(&["detectors"]));
    let functions = listed_names(&stdout(&["functions"]));
    let mut both: Vec<&String> = detectors.iter().filter(|d| functions.contains(d)).collect();
    both.sort();
    let tested = stdout(&["test", "policies/", "examples/"]);
    let cases = tested.lines().last().and_then(|l| l.split_whitespace().next()).unwrap().to_string();
    vec![
        ("detector functions", both.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")),
        ("policy cases", cases),
    ]
}

#[test]
fn the_generated_passages_are_what_the_binary_lists() {
    let bless = std::env::var_os("TRAINWARDEN_BLESS").is_some();
    let wanted = generated();
    let mut found = vec![0; wanted.len()];
    let mut stale = Vec::new();
    for (path, text) in documents() {
        let mut rewritten = text.clone();
        for (i, (name, want)) in wanted.iter().enumerate() {
            let open = format!("<!-- generated: {name} -->");
            let mut from = 0;
            while let Some(at) = rewritten[from..].find(&open) {
                let start = from + at + open.len();
                let end = start + rewritten[start..].find("<!-- /generated -->").expect("closed");
                if rewritten[start..end] != *want {
                    let has = &rewritten[start..end];
                    stale.push(format!("{}: {name}: has {has:?}, the binary says {want:?}", path.display()));
                    rewritten.replace_range(start..end, want);
                }
                found[i] += 1;
                from = start;
            }
        }
        if bless && rewritten != text {
            std::fs::write(repo().join(&path), rewritten).unwrap();
        }
    }
    for ((name, _), n) in wanted.iter().zip(found) {
        assert!(n > 0, "no page holds <!-- generated: {name} -->");
    }
    assert!(bless || stale.is_empty(), "stale (TRAINWARDEN_BLESS=1 rewrites them):\n{}", stale.join("\n"));
}

#[test]
fn the_policies_page_describes_every_detector_and_names_only_real_functions() {
    let readme = page("ml-engineers/policies.md");
    let start = readme.find("* **Detectors**").unwrap();
    let end = start + readme[start..].find("\n* **Rhai conditions**").unwrap();
    let bullet = &readme[start..end];
    for d in listed_names(&stdout(&["detectors"])) {
        assert!(
            bullet.contains(&format!("`{d}`")),
            "the policies page's Detectors bullet does not describe `{d}`"
        );
    }
    // Every `name()` the Rhai bullet calls a function is one.
    let functions = listed_names(&stdout(&["functions"]));
    let end_rhai = end + readme[end..].find("\n* **Lifecycle**").unwrap();
    let rhai = &readme[end..end_rhai];
    for call in rhai.split('`').skip(1).step_by(2) {
        let Some(name) = call.split('(').next().filter(|n| call.contains('(') && !n.is_empty()) else {
            continue;
        };
        if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(char::is_uppercase)
        {
            assert!(
                functions.iter().any(|f| f == name),
                "the policies page calls `{name}()` a function; it is not"
            );
        }
    }
}

#[test]
fn the_command_table_names_every_flag() {
    let readme = page("reference/commands.md");
    for command in ["replay", "test", "validate", "crd", "backtest", "watch", "controller"] {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `trainwarden {command}")))
            .unwrap_or_else(|| panic!("no row for {command}"));
        let synopsis = row.split(" | ").next().unwrap();
        let help = stdout(&[command, "--help"]);
        let mut flags: Vec<&str> = help
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("--"))
            .map(|w| w.trim_end_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '-')))
            .filter(|f| !f.is_empty() && *f != "help" && *f != "version")
            .collect();
        flags.sort_unstable();
        flags.dedup();
        if command == "controller" {
            // Thirty-odd flags: the row shows the common ones and points to --help.
            assert!(row.contains("trainwarden controller --help"), "{row}");
            continue;
        }
        for flag in flags {
            assert!(
                synopsis.contains(&format!("--{flag}")),
                "the command table's synopsis of `{command}` lacks --{flag}"
            );
        }
    }
}

#[test]
fn crd_help_names_every_crd_it_prints() {
    let printed = stdout(&["crd"]);
    let help = stdout(&["crd", "--help"]);
    let mut kinds = 0;
    for line in printed.lines() {
        if let Some(kind) = line.trim().strip_prefix("kind: ")
            && kind != "CustomResourceDefinition"
        {
            kinds += 1;
            assert!(help.contains(kind), "crd --help does not name {kind}:\n{help}");
        }
    }
    assert_eq!(kinds, 3, "{printed}");
}

#[test]
fn the_catalogs_commands_run() {
    let text = std::fs::read_to_string(repo().join("policies/README.md")).unwrap();
    assert!(!text.contains("target/debug"), "no build path in the catalog's README");
    let block = text.split("```sh\n").nth(1).unwrap().split("```").next().unwrap();
    let mut ran = 0;
    for line in block.lines() {
        let command = line.split('#').next().unwrap().trim();
        let Some(args) = command.strip_prefix("trainwarden ") else { continue };
        let args: Vec<&str> = args.split_whitespace().collect();
        let out = trainwarden(&args);
        assert!(out.status.success(), "`{command}`: {}", String::from_utf8_lossy(&out.stderr));
        ran += 1;
    }
    assert_eq!(ran, 4);
}

/// Whether `text` holds a calendar date (`2026-12-06`) at `at`.
fn date_at(text: &str, at: usize) -> bool {
    let b = text.as_bytes();
    at + 10 <= b.len()
        && b[at..at + 10]
            .iter()
            .enumerate()
            .all(|(i, c)| if i == 4 || i == 7 { *c == b'-' } else { c.is_ascii_digit() })
}

/// The README and the book say what the software does, not when a test last ran: no page dates a run
/// ("on 2026-12-06", "2026-12-07 17:10 UTC"); figures with their dates live in BENCHMARKS.md and tests/README.md.
/// Dates in examples (a stream's times, a deadline, an expiry) are data and are written otherwise.
#[test]
fn no_page_dates_a_test_run() {
    let mut dated = Vec::new();
    for (path, text) in documents() {
        for (n, line) in text.lines().enumerate() {
            for at in 0..line.len().saturating_sub(9) {
                if !line.is_char_boundary(at) || !date_at(line, at) {
                    continue;
                }
                let before = &line[..at];
                let after = &line[at + 10..];
                let time_utc = after.len() >= 10
                    && after.as_bytes()[0] == b' '
                    && after[1..6].contains(':')
                    && after[6..].starts_with(" UTC");
                let word = before.strip_suffix(' ').and_then(|b| b.rsplit([' ', '(']).next()).unwrap_or("");
                if word == "on" || word == "of" || time_utc {
                    dated.push(format!("{}:{}: {line}", path.display(), n + 1));
                }
            }
        }
    }
    assert!(dated.is_empty(), "pages that date a test run:\n{}", dated.join("\n"));
}

/// The README's links lead somewhere: every relative link names a file or directory of the repository (the
/// book's own links are checked on the rendered book, `tests/book.rs`).
#[test]
fn the_readme_links_resolve() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let mut checked = 0;
    for link in readme.split("](").skip(1) {
        let target = link.split(')').next().unwrap();
        if target.starts_with("http://") || target.starts_with("https://") || target.starts_with('#') {
            continue;
        }
        let path = target.split('#').next().unwrap();
        assert!(repo().join(path).exists(), "README.md links to {target}, which does not exist");
        checked += 1;
    }
    assert!(checked > 20, "the README's links were found ({checked})");
}

/// Examples come from the files the tests run: a YAML block is either included by path (`{{#include …}}`,
/// which mdBook resolves and the book test builds) or an excerpt that names its file in a comment on its
/// first line (`# policies/reclaim-gpus.yaml`), every line of which (its own comments and `…` aside) is in
/// that file.
#[test]
fn every_yaml_excerpt_is_in_the_file_it_names() {
    let mut excerpts = 0;
    for (path, text) in documents() {
        for block in text.split("```yaml\n").skip(1) {
            let block = block.split("```").next().unwrap();
            if block.starts_with("{{#include ") {
                continue;
            }
            let first = block.lines().next().unwrap_or("");
            let Some(source) = first.split("# ").nth(1).map(str::trim).filter(|s| repo().join(s).is_file())
            else {
                continue;
            };
            let file = std::fs::read_to_string(repo().join(source)).unwrap();
            let lines: Vec<&str> = file.lines().map(str::trim).collect();
            for line in block.lines() {
                let code = line.split(" # ").next().unwrap().trim();
                if code.is_empty() || code.contains('…') {
                    continue;
                }
                assert!(
                    lines.iter().any(|l| l.starts_with(code)),
                    "{}: the excerpt of {source} has `{code}`, which that file does not",
                    path.display()
                );
            }
            excerpts += 1;
        }
    }
    assert!(excerpts >= 1, "the excerpts were found ({excerpts})");
}
