//! The files of `src/sale/` call each other's `SaleService` methods in one direction only: the
//! graph of "file A calls a method file B defines" has no circle, so each file can be read
//! knowing only the files below it (the buy knows the keyed buy's helpers, never the reverse).
//!
//! Read from the source, approximately: a method is a `fn` written inside an `impl SaleService`
//! block (a line `impl SaleService {` up to the next line `}`); a call is `self.NAME`,
//! `service.NAME` (a clone of the service's `Arc`) or `Self::NAME` written inside such a block,
//! naming a method another file defines. Comment lines and test modules (from `#[cfg(test)]`
//! on) are skipped. It does not see a call through another name for the service (a `sale`
//! variable, `SaleService::NAME`) or a call from outside an `impl SaleService` block: those
//! would go unseen, never invent an edge.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The source of every file of `src/sale/`, by file name, without comments and tests.
fn sale_files() -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sale");
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let lines: Vec<&str> = code
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        files.insert(name, lines.join("\n"));
    }
    files
}

/// The text of a file's `impl SaleService` blocks.
fn service_impls(code: &str) -> String {
    let mut inside = false;
    let mut body = String::new();
    for line in code.lines() {
        if line == "impl SaleService {" {
            inside = true;
        } else if inside && line == "}" {
            inside = false;
        } else if inside {
            body.push_str(line);
            body.push('\n');
        }
    }
    body
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifier at the start of `text`.
fn ident(text: &str) -> &str {
    let end = text.find(|c| !is_ident(c)).unwrap_or(text.len());
    &text[..end]
}

/// The methods a block of `impl SaleService` defines: its items' `fn` names.
fn methods(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|line| {
            let item = line.strip_prefix("    ")?;
            let item = ["pub(super) ", "pub(crate) ", "pub "]
                .iter()
                .find_map(|vis| item.strip_prefix(vis))
                .unwrap_or(item);
            let item = item.strip_prefix("async ").unwrap_or(item);
            Some(ident(item.strip_prefix("fn ")?).to_owned())
        })
        .collect()
}

/// The names called on the service in a block of `impl SaleService`.
fn calls(body: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for receiver in ["self.", "service.", "Self::"] {
        for (at, _) in body.match_indices(receiver) {
            let before = body[..at].chars().next_back();
            if before.is_some_and(is_ident) {
                continue;
            }
            names.insert(ident(&body[at + receiver.len()..]).to_owned());
        }
    }
    names
}

/// File → the files whose methods it calls, each edge with the methods it calls.
fn call_graph() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let bodies: BTreeMap<String, String> = sale_files()
        .into_iter()
        .map(|(file, code)| (file, service_impls(&code)))
        .collect();
    let mut defined_in: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, body) in &bodies {
        for method in methods(body) {
            defined_in.entry(method).or_default().insert(file.clone());
        }
    }
    assert!(
        defined_in.len() > 50,
        "found only {} SaleService methods: has the layout of src/sale/ changed?",
        defined_in.len()
    );
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (file, body) in &bodies {
        for name in calls(body) {
            for callee in defined_in.get(&name).into_iter().flatten() {
                if callee != file {
                    graph
                        .entry(file.clone())
                        .or_default()
                        .entry(callee.clone())
                        .or_default()
                        .insert(name.clone());
                }
            }
        }
    }
    graph
}

/// A circle through `file`, if there is one reachable from it: the files in call order.
fn circle_from(
    graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    file: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(start) = path.iter().position(|f| f == file) {
        let mut circle = path[start..].to_vec();
        circle.push(file.to_owned());
        return Some(circle);
    }
    if done.contains(file) {
        return None;
    }
    path.push(file.to_owned());
    for callee in graph.get(file).into_iter().flat_map(|edges| edges.keys()) {
        if let Some(circle) = circle_from(graph, callee, path, done) {
            return Some(circle);
        }
    }
    path.pop();
    done.insert(file.to_owned());
    None
}

#[test]
fn no_two_files_of_sale_call_each_other_in_a_circle() {
    let graph = call_graph();
    let mut done = BTreeSet::new();
    for file in graph.keys() {
        if let Some(circle) = circle_from(&graph, file, &mut Vec::new(), &mut done) {
            let hops: Vec<String> = circle
                .windows(2)
                .map(|pair| format!("{} -> {} {:?}", pair[0], pair[1], graph[&pair[0]][&pair[1]]))
                .collect();
            panic!(
                "the files of src/sale/ call in a circle:\n{}",
                hops.join("\n")
            );
        }
    }
}

#[test]
fn the_buy_calls_the_keyed_buy_and_not_the_reverse() {
    let graph = call_graph();
    let calls = |from: &str, to: &str| graph.get(from).is_some_and(|edges| edges.contains_key(to));
    // The check sees calls at all: the buy's known call into the keyed buy is found.
    assert!(calls("buy.rs", "idempotency.rs"), "{graph:#?}");
    assert!(!calls("idempotency.rs", "buy.rs"), "{graph:#?}");
}
