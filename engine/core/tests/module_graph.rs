//! The core's top-level modules (`input`, `history`, `judge`, `policy`, `evaluate`, `drive`, `units`, `time`,
//! `error`) must not depend on each other in a cycle: the folders are the data path, and a cycle would mean
//! a type lives in the wrong room. Dependencies are read from the `crate::…` paths of non-test code (a
//! file's `#[cfg(test)]` tail and `tests.rs` files may reach anywhere).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module → the top-level modules its non-test code names through `crate::…`.
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
            let relative = path.strip_prefix(src).unwrap();
            let first = relative.components().next().unwrap().as_os_str().to_string_lossy();
            let module = first.trim_end_matches(".rs").to_string();
            if module == "lib" || module.ends_with("_tests") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("\n#[cfg(test)]").next().unwrap_or_default();
            let deps = graph.entry(module.clone()).or_default();
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() && name != module {
                    deps.insert(name);
                }
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
fn the_cycle_check_finds_a_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("history".to_string(), BTreeSet::from(["judge".to_string()])),
        ("judge".to_string(), BTreeSet::from(["history".to_string()])),
    ]
    .into();
    assert_eq!(cycle_from(&graph, "history"), Some(vec!["history".into(), "judge".into(), "history".into()]));
}
