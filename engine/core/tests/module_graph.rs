//! The modules of the core and of the controller must not depend on each other in a cycle, at any level:
//! the top-level folders are the data path (`input → history → judge → … → drive` in the core,
//! `sources → brain → executor → status` in the controller), and siblings inside a folder are steps or
//! parts that use each other one way. A cycle would mean a type lives in the wrong room.
//!
//! Dependencies are read from the paths of non-test code: `crate::…` (also inside `crate::{a, b::c}`
//! groups), `super::…` and `self::…` chains resolved against the file's module, and a sibling's name used
//! bare in a file that imports its parent's items (`use super::*`). A name a parent module re-exports
//! (`pub use limits::Limit;`, or a private `use lifecycle::advance;`) counts as its child's. Comment lines
//! are not code; `#[cfg(test)]` items, `tests.rs` and `*_tests.rs` files, `tests/` folders and the core's
//! `testing` harness may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module, as the path of names from the crate root (`[]` is the root).
type Module = Vec<String>;

/// One source file of a crate: its module, and its code with tests and comment lines left out.
struct SourceFile {
    module: Module,
    code: String,
}

/// The crate's non-test source files, and every module they make (files and folders).
fn read_crate(src: &Path) -> (Vec<SourceFile>, BTreeSet<Module>) {
    let mut files = Vec::new();
    let mut modules = BTreeSet::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" {
                    stack.push(path);
                }
                continue;
            }
            if !name.ends_with(".rs") || name == "tests.rs" || name.ends_with("_tests.rs") {
                continue;
            }
            // drive/rule_test.rs → [drive, rule_test], judge/mod.rs → [judge], lib.rs → [].
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Module =
                relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            if module.last().is_some_and(|m| m == "mod" || m == "lib") {
                module.pop();
            }
            if module.first().is_some_and(|m| m == "testing") {
                continue;
            }
            for depth in 1..=module.len() {
                modules.insert(module[..depth].to_vec());
            }
            let code = without_comment_lines(&without_test_items(&std::fs::read_to_string(&path).unwrap()));
            files.push(SourceFile { module, code });
        }
    }
    (files, modules)
}

/// The source without the items marked `#[cfg(test)]` (a `mod … { … }` block, a `mod …;` line or any other
/// item up to its closing brace or semicolon), wherever in the file they are.
fn without_test_items(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let (mut depth, mut end) = (0usize, item.len());
        for (i, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Comment lines (doc comments included: an intra-doc link is no dependency) are left out.
fn without_comment_lines(text: &str) -> String {
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

fn identifier(s: &str) -> String {
    s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// `a::b::c` at the start of `s` (up to a `{`, a space or anything that is not a path).
fn path_at(s: &str) -> Vec<String> {
    let mut path = Vec::new();
    let mut rest = s;
    loop {
        let name = identifier(rest);
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        path.push(name);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    path
}

/// The entries of a `{a, b::c, d::{e, f}}` group at the start of `s` (after its `{`), each as a path; a
/// nested group contributes its prefix.
fn group_entries(group: &str) -> Vec<Vec<String>> {
    let (mut depth, mut entry_start) = (0usize, true);
    let mut entries = Vec::new();
    for (j, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => entry_start = true,
            c if entry_start && depth == 0 && !c.is_whitespace() => {
                entry_start = false;
                entries.push(path_at(&group[j..]));
            }
            _ => {}
        }
    }
    entries
}

/// The absolute paths `code` (a file of `module`) names through `crate::`, `super::` and `self::`.
fn named_paths(code: &str, module: &Module) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        // `$crate::` in macros and identifiers ending in `crate` are not paths of this crate.
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => paths.extend(group_entries(group)),
            None => paths.push(path_at(rest)),
        }
    }
    for prefix in ["super::", "self::"] {
        for (i, _) in code.match_indices(prefix) {
            if i > 0 && code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                continue; // the second and later `super::` of a chain, counted from its first
            }
            let mut rest = &code[i..];
            let mut base = module.clone();
            if prefix == "self::" {
                rest = &rest["self::".len()..];
            } else {
                while let Some(r) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = r;
                }
            }
            let tails = match rest.strip_prefix('{') {
                Some(group) => group_entries(group),
                None => vec![path_at(rest)],
            };
            for tail in tails {
                paths.push(base.iter().cloned().chain(tail).collect());
            }
        }
    }
    paths
}

/// For each module, the names it imports from its children (`use lifecycle::{advance, Pause}`,
/// `pub use limits::Limit`, with `as` renames): a path through the parent to such a name is a path to the
/// child.
fn reexports(files: &[SourceFile], modules: &BTreeSet<Module>) -> BTreeMap<Module, BTreeMap<String, String>> {
    let mut map: BTreeMap<Module, BTreeMap<String, String>> = BTreeMap::new();
    for file in files {
        for (i, _) in file.code.match_indices("use ") {
            if i > 0 && !file.code[..i].ends_with(|c: char| c.is_whitespace() || c == ';' || c == '}') {
                continue;
            }
            let statement = &file.code[i + 4..];
            let statement = &statement[..statement.find(';').unwrap_or(statement.len())];
            let statement = statement.strip_prefix("self::").unwrap_or(statement);
            let child = identifier(statement);
            let mut child_module = file.module.clone();
            child_module.push(child.clone());
            if !modules.contains(&child_module) {
                continue;
            }
            // Every imported leaf name (or its `as` rename) in the statement.
            let names = statement
                .split(['{', '}', ','])
                .filter_map(|part| {
                    let part = part.trim();
                    let leaf = match part.split_once(" as ") {
                        Some((_, alias)) => alias.trim().to_string(),
                        None => part.rsplit("::").next().unwrap_or("").trim().to_string(),
                    };
                    (!leaf.is_empty() && leaf != "*" && leaf != "self").then_some(leaf)
                })
                .collect::<Vec<_>>();
            let entry = map.entry(file.module.clone()).or_default();
            for name in names {
                entry.insert(name, child.clone());
            }
        }
    }
    map
}

/// The module a path leads to: its longest prefix that is a module, then a child the last module
/// re-exports the next name from.
fn resolve(
    path: &[String],
    modules: &BTreeSet<Module>,
    reexports: &BTreeMap<Module, BTreeMap<String, String>>,
) -> Module {
    let mut module: Module = Vec::new();
    for name in path {
        let mut next = module.clone();
        next.push(name.clone());
        if modules.contains(&next) {
            module = next;
            continue;
        }
        if let Some(child) = reexports.get(&module).and_then(|r| r.get(name)) {
            module.push(child.clone());
        }
        break;
    }
    module
}

/// Folder (module) → its children → the siblings they depend on.
type Graph = BTreeMap<Module, BTreeMap<String, BTreeSet<String>>>;

fn sibling_graph(src: &Path) -> Graph {
    let (files, modules) = read_crate(src);
    let reexports = reexports(&files, &modules);
    let mut graph = Graph::new();
    for file in &files {
        let mut targets: Vec<Module> =
            named_paths(&file.code, &file.module).iter().map(|p| resolve(p, &modules, &reexports)).collect();
        // A sibling named bare, where the file imports its parent's items.
        if file.code.contains("use super::*;") && !file.module.is_empty() {
            let parent = &file.module[..file.module.len() - 1];
            for sibling in modules.iter().filter(|m| m.len() == file.module.len() && m.starts_with(parent)) {
                let name = sibling.last().unwrap();
                let bare = format!("{name}::");
                let used = file.code.match_indices(&bare).any(|(i, _)| {
                    !file.code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
                });
                if used {
                    targets.push(sibling.clone());
                }
            }
        }
        for target in targets {
            let common = file.module.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common < file.module.len() && common < target.len() {
                graph
                    .entry(file.module[..common].to_vec())
                    .or_default()
                    .entry(file.module[common].clone())
                    .or_default()
                    .insert(target[common].clone());
            }
        }
    }
    graph
}

/// A cycle through `start`, if there is one (depth-first search).
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        node: &str,
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in graph.get(node).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if visit(graph, next, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    visit(graph, start, start, &mut path, &mut BTreeSet::new()).then_some(path)
}

/// Every cycle among the siblings of any folder, as `folder: a → b → a`.
fn cycles(graph: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    for (folder, children) in graph {
        for child in children.keys() {
            if let Some(cycle) = cycle_from(children, child) {
                let at = if folder.is_empty() { "crate".to_string() } else { folder.join("::") };
                found.push(format!("{at}: {}", cycle.join(" → ")));
            }
        }
    }
    found
}

fn crate_src(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name).join("src")
}

#[test]
fn top_level_modules_of_the_core_form_no_cycle() {
    let graph = sibling_graph(&crate_src("core"));
    let top = graph.get(&Vec::new()).cloned().unwrap_or_default();
    for expected in ["input", "history", "judge", "policy", "evaluate", "drive"] {
        assert!(top.contains_key(expected), "module {expected} not found in {top:?}");
    }
    for module in top.keys() {
        if let Some(cycle) = cycle_from(&top, module) {
            panic!("module cycle: {}\nall dependencies: {top:#?}", cycle.join(" → "));
        }
    }
}

#[test]
fn no_modules_of_the_core_form_a_cycle_at_any_level() {
    let graph = sibling_graph(&crate_src("core"));
    let found = cycles(&graph);
    assert!(found.is_empty(), "module cycles:\n{}\nall dependencies: {graph:#?}", found.join("\n"));
}

#[test]
fn no_modules_of_the_controller_form_a_cycle_at_any_level() {
    let graph = sibling_graph(&crate_src("controller"));
    let top = graph.get(&Vec::new()).cloned().unwrap_or_default();
    for expected in ["sources", "brain", "executor", "status", "runtime", "metrics"] {
        assert!(top.contains_key(expected), "module {expected} not found in {top:?}");
    }
    let found = cycles(&graph);
    assert!(found.is_empty(), "module cycles:\n{}\nall dependencies: {graph:#?}", found.join("\n"));
}

#[test]
fn groups_super_chains_and_test_items_are_read() {
    let module: Module = vec!["drive".into(), "rule_test".into()];
    let code = without_comment_lines(&without_test_items(
        "use crate::{input::stream::StreamRecord, history::{JobSeries, MetricSeries}};\n\
         fn f() { super::super::policy::spec::X; super::notation::y(); }\n\
         #[cfg(test)]\nmod tests { use crate::evaluate::E; }\n\
         /// [`crate::judge::Detector`] is only a link.\n\
         fn g() { crate::time::seconds(); }\n",
    ));
    let paths: BTreeSet<String> = named_paths(&code, &module).iter().map(|p| p.join("::")).collect();
    let expected =
        ["drive::notation::y", "history", "input::stream::StreamRecord", "policy::spec::X", "time::seconds"];
    assert_eq!(paths, expected.iter().map(ToString::to_string).collect());
}

#[test]
fn a_name_a_parent_re_exports_leads_to_its_child() {
    let files = vec![
        SourceFile {
            module: vec!["evaluate".into()],
            code: "pub use limits::{Limit, LimitKind as Kind};".into(),
        },
        SourceFile {
            module: vec!["evaluate".into(), "lifecycle".into()],
            code: "use super::Kind; fn f() {}".into(),
        },
    ];
    let modules: BTreeSet<Module> = [
        vec!["evaluate".to_string()],
        vec!["evaluate".into(), "limits".into()],
        vec!["evaluate".into(), "lifecycle".into()],
    ]
    .into();
    let reexports = reexports(&files, &modules);
    let target = resolve(&["evaluate".into(), "Kind".into()], &modules, &reexports);
    assert_eq!(target, vec!["evaluate".to_string(), "limits".to_string()]);
    assert_eq!(
        resolve(&["evaluate".into(), "Other".into()], &modules, &reexports),
        vec!["evaluate".to_string()]
    );
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("history".to_string(), BTreeSet::from(["judge".to_string()])),
        ("judge".to_string(), BTreeSet::from(["history".to_string()])),
    ]
    .into();
    assert_eq!(cycle_from(&graph, "history"), Some(vec!["history".into(), "judge".into(), "history".into()]));
}
