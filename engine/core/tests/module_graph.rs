//! The core's top-level modules (`input`, `history`, `judge`, `policy`, `evaluate`, `drive`, `units`, `time`,
//! `error`) must not depend on each other in a cycle: the folders are the data path, and a cycle would mean
//! a type lives in the wrong room. Dependencies are read from the `crate::…` and climbing `super::…` paths of
//! non-test code (`#[cfg(test)]` items and `tests.rs` files may reach anywhere).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module → the top-level modules its non-test code names, through `crate::…` paths (also inside
/// `crate::{a, b::c}` groups) and through `super::…` chains that climb out of the module.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.file_name().is_some_and(|n| n == "tests.rs")
            {
                continue;
            }
            // The file's module path: drive/rule_test.rs → [drive, rule_test], judge/mod.rs → [judge].
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut module_path: Vec<String> =
                relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            if module_path.last().is_some_and(|m| m == "mod") {
                module_path.pop();
            }
            let module = module_path[0].clone();
            if module == "lib" || module.ends_with("_tests") {
                continue;
            }
            let code = without_test_items(&std::fs::read_to_string(&path).unwrap());
            let deps = graph.entry(module.clone()).or_default();
            for name in top_level_names(&code, &module_path) {
                if name != module {
                    deps.insert(name);
                }
            }
        }
    }
    graph
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

fn identifier(s: &str) -> String {
    s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// The top-level modules named by the paths in `code`, a file of the module at `module_path`.
fn top_level_names(code: &str, module_path: &[String]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        // `$crate::` in macros and identifiers ending in `crate` are not paths of this crate.
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c}`: the first identifier of every top-level entry of the group.
            let (mut depth, mut entry_start) = (0usize, true);
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => entry_start = true,
                    c if entry_start && !c.is_whitespace() => {
                        entry_start = false;
                        names.insert(identifier(&group[j..]));
                    }
                    _ => {}
                }
            }
        } else {
            names.insert(identifier(rest));
        }
    }
    // `super::super::x` from drive/rule_test climbs to the crate root: x is a top-level module.
    for (i, _) in code.match_indices("super::") {
        if i > 0 && code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // the second and later `super::` of a chain, counted from its first
        }
        let mut rest = &code[i..];
        let mut climbs = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = r;
        }
        if climbs >= module_path.len() {
            names.insert(identifier(rest));
        }
    }
    names.retain(|n| !n.is_empty() && n != "self");
    names
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

#[test]
fn top_level_modules_of_the_core_form_no_cycle() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    for expected in ["input", "history", "judge", "policy", "evaluate", "drive"] {
        assert!(graph.contains_key(expected), "module {expected} not found in {graph:?}");
    }
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, module) {
            panic!("module cycle: {}\nall dependencies: {graph:#?}", cycle.join(" → "));
        }
    }
}

#[test]
fn groups_super_chains_and_test_items_are_read() {
    let path = ["drive".to_string(), "rule_test".to_string()];
    let code = without_test_items(
        "use crate::{input::stream::StreamRecord, history::{JobSeries, MetricSeries}};\n\
         fn f() { super::super::policy::spec::X; super::notation::y(); }\n\
         #[cfg(test)]\nmod tests { use crate::evaluate::E; }\n\
         fn g() { crate::time::seconds(); }\n",
    );
    let names: Vec<String> = top_level_names(&code, &path).into_iter().collect();
    assert_eq!(names, ["history", "input", "policy", "time"]);
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
