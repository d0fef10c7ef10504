//! The READMEs say what the binary does (issue 43: docs that drifted): the README's replay examples are what
//! `replay` prints, its generated passages (`<!-- generated: NAME -->…<!-- /generated -->`) are what the binary
//! lists today, the command table names every flag each command takes, `crd --help` names every CRD `crd`
//! prints, and the policy catalog's commands run. `TRAINWARDEN_BLESS=1 cargo test -p trainwarden --test docs`
//! rewrites the generated passages.

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

fn readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).unwrap()
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

#[test]
fn the_readme_shows_what_replay_prints() {
    let readme = readme();
    let mut checked = 0;
    for block in readme.split("```").skip(1).step_by(2) {
        let Some(command) = block.trim_start().strip_prefix("$ trainwarden replay ") else { continue };
        let (command, shown) = command.split_once('\n').unwrap();
        let mut args = vec!["replay"];
        args.extend(command.split_whitespace());
        let printed = stdout(&args);
        // A block that shows no summary shows the timeline above it.
        let expected = if shown.contains("\nSummary\n") {
            printed.clone()
        } else {
            printed.split("\nSummary\n").next().unwrap().to_string()
        };
        assert_eq!(shown, expected, "the README's block for `replay {command}` is stale");
        checked += 1;
    }
    assert!(checked >= 2, "the README's replay blocks were found ({checked})");
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
    let path = repo().join("README.md");
    let mut readme = readme();
    let bless = std::env::var_os("TRAINWARDEN_BLESS").is_some();
    let mut stale = Vec::new();
    for (name, want) in generated() {
        let open = format!("<!-- generated: {name} -->");
        let start = readme.find(&open).unwrap_or_else(|| panic!("README.md lacks {open}")) + open.len();
        let end = start + readme[start..].find("<!-- /generated -->").expect("closed");
        if readme[start..end] != want {
            stale.push(format!("{name}: README has {:?}, the binary says {want:?}", &readme[start..end]));
            readme.replace_range(start..end, &want);
        }
    }
    if bless {
        std::fs::write(&path, readme).unwrap();
    } else {
        assert!(stale.is_empty(), "stale (TRAINWARDEN_BLESS=1 rewrites them):\n{}", stale.join("\n"));
    }
}

#[test]
fn the_readme_describes_every_detector_and_names_only_real_functions() {
    let readme = readme();
    let start = readme.find("* **Detectors**").unwrap();
    let end = start + readme[start..].find("\n* **Rhai conditions**").unwrap();
    let bullet = &readme[start..end];
    for d in listed_names(&stdout(&["detectors"])) {
        assert!(bullet.contains(&format!("`{d}`")), "the Detectors bullet does not describe `{d}`");
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
            assert!(functions.iter().any(|f| f == name), "the README calls `{name}()` a function; it is not");
        }
    }
}

#[test]
fn the_command_table_names_every_flag() {
    let readme = readme();
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
                "the README's synopsis of `{command}` lacks --{flag}"
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
