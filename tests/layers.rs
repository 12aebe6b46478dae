//! The module graph ARCHITECTURE.md promises, checked on the source: each top-level module
//! imports only the modules below it (so there is no circle and no upward import), only the
//! wiring (`app`) names a concrete backend (but for the files `MOUNTS` lists, each with why),
//! and no two sibling files of a folder import each other.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Each top-level module with the modules of ours it may import. Every module not listed here
/// fails the test, so a new one must take its place in the order.
const LAYERS: &[(&str, &[&str])] = &[
    ("domain", &[]),
    ("redact", &[]),
    ("server", &[]),
    ("clock", &["domain"]),
    ("ids", &["clock", "domain"]),
    ("payment", &["clock", "domain"]),
    ("redis_link", &["redact"]),
    ("store", &["clock", "domain", "ids", "redact"]),
    ("config", &["domain", "ids", "redact", "store"]),
    ("gate", &["clock", "domain", "redis_link"]),
    ("lease", &["ids", "redis_link"]),
    ("limits", &["clock", "domain", "redis_link"]),
    (
        "sale",
        &["clock", "domain", "gate", "ids", "payment", "store"],
    ),
    (
        "pipeline",
        &[
            "clock",
            "domain",
            "gate",
            "ids",
            "payment",
            "redis_link",
            "sale",
            "store",
        ],
    ),
    ("auth", &["clock", "domain"]),
    (
        "error",
        &["auth", "clock", "domain", "gate", "sale", "store"],
    ),
    ("demo", &["auth", "clock", "domain", "store"]),
    (
        "http",
        &[
            "auth", "clock", "config", "domain", "error", "limits", "payment", "sale", "server",
            "store",
        ],
    ),
    ("app", &["*"]),
    ("cli", &["*"]),
];

/// Paths that name a concrete backend.
const BACKENDS: &[&str] = &[
    "gate::memory",
    "gate::redis",
    "store::sqlite",
    "store::server",
    "pipeline",
    "lease",
    "limits::local",
    "limits::redis",
    "redis_link",
    "payment::alipay",
    "payment::sandbox",
];

/// Modules that work through traits only: the wiring (`app`) hands them their backends.
const BACKEND_BLIND: &[&str] = &["auth", "cli", "config", "demo", "error", "http", "sale"];

/// The files of those modules that may name one backend, each with why. The router lists every
/// route, so it mounts the sandbox payment gateway's handlers, with the sandbox as their state,
/// when the wiring hands it one; it chooses no provider, and no handler of ours sees the
/// sandbox.
const MOUNTS: &[(&str, &str)] = &[("http/router.rs", "payment::sandbox")];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `crate::a::b…` path in `source`, as "a::b…", including those inside `use crate::{…}`
/// groups (one level deep, which is how this code base writes them).
fn crate_paths(source: &str) -> Vec<String> {
    let code: String = source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut paths = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let item = item.split_whitespace().collect::<String>();
                if !item.is_empty() {
                    paths.push(item);
                }
            }
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            paths.push(rest[..end].trim_end_matches(':').to_owned());
        }
    }
    paths
}

/// Whether `path` is the module `module` or lies inside it.
fn within(path: &str, module: &str) -> bool {
    path == module || path.starts_with(&format!("{module}::"))
}

/// The top-level module a file of `src/` belongs to (`None` for lib.rs and main.rs).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (name != "lib" && name != "main").then(|| name.to_owned())
}

#[test]
fn each_module_imports_only_the_modules_below_it_and_only_app_names_a_backend() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layers: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let Some(module) = top_module(&src, file) else {
            continue;
        };
        let Some(allowed) = layers.get(module.as_str()) else {
            wrong.push(format!(
                "{}: module `{module}` has no layer",
                file.display()
            ));
            continue;
        };
        for path in crate_paths(&fs::read_to_string(file).unwrap()) {
            let target = path.split("::").next().unwrap_or_default();
            if target == module || target.is_empty() {
                continue;
            }
            if !allowed.contains(&"*") && !allowed.contains(&target) {
                wrong.push(format!(
                    "{}: `{module}` imports `crate::{path}`",
                    file.display()
                ));
            }
            let names_backend = BACKENDS.iter().any(|backend| within(&path, backend));
            let mounts = MOUNTS.iter().any(|(mounter, backend)| {
                file.strip_prefix(&src).unwrap() == Path::new(mounter) && within(&path, backend)
            });
            if names_backend && BACKEND_BLIND.contains(&module.as_str()) && !mounts {
                let file = file.display();
                wrong.push(format!(
                    "{file}: `{module}` names a backend: `crate::{path}`"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn no_two_files_of_a_folder_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    // Edges between sibling modules: `folder/a.rs` (or `folder/a/…`) naming `folder::b`,
    // through `super::b` from a direct child or through its full `crate::` path.
    let mut edges: BTreeSet<(String, String, String)> = BTreeSet::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let parts: Vec<String> = relative
            .iter()
            .map(|p| p.to_str().unwrap().trim_end_matches(".rs").to_owned())
            .collect();
        // A folder's mod.rs is the module named after the folder.
        let depth = parts.len() - usize::from(parts.last().is_some_and(|p| p == "mod"));
        if depth < 2 {
            continue;
        }
        let folder = parts[..depth - 1].join("::");
        let me = parts[depth - 1].clone();
        let source = fs::read_to_string(file).unwrap();
        let mut siblings: Vec<String> = crate_paths(&source)
            .into_iter()
            .filter_map(|path| {
                let rest = path.strip_prefix(&format!("{folder}::"))?;
                Some(rest.split("::").next()?.to_owned())
            })
            .collect();
        for line in source.lines() {
            let mut rest = line;
            while let Some(at) = rest.find("super::") {
                rest = &rest[at + "super::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                siblings.push(name);
            }
        }
        for sibling in siblings {
            let is_module = src
                .join(folder.replace("::", "/"))
                .join(format!("{sibling}.rs"));
            let is_folder = src.join(folder.replace("::", "/")).join(&sibling);
            if sibling != me && (is_module.exists() || is_folder.is_dir()) {
                edges.insert((folder.clone(), me.clone(), sibling));
            }
        }
    }
    let circles: Vec<String> = edges
        .iter()
        .filter(|(folder, a, b)| edges.contains(&(folder.clone(), b.clone(), a.clone())))
        .map(|(folder, a, b)| format!("{folder}: {a} <-> {b}"))
        .collect();
    assert!(circles.is_empty(), "\n{}", circles.join("\n"));
}
