//! The crate's layers (docs/architecture.md): a module imports only from its own layer or the
//! layers below it, and the decisions stay pure. Read from the source text, so a new `use` that
//! reaches up fails here with the file and line, before it becomes a knot to untie.

use std::path::{Path, PathBuf};

/// Lowest first; modules of one layer may use each other.
const LAYERS: &[&[&str]] = &[
    &["model"],
    // What the process was told (flags, env): plain data over `model`.
    &["cli"],
    &["metrics"],
    &["cache"],
    &["cluster"],
    &["context", "store"],
    &["admission"],
    &["controller"],
    &["webhook"],
    &["runtime"],
    &["plugin"],
    &["main", "bin", "lib"],
];

fn rank(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is in no layer: add it to LAYERS and docs/architecture.md"))
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to: `src/cache.rs` -> cache, `src/model/json.rs` -> model.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_owned()
}

/// `crate::x` paths used on non-comment lines, with their line numbers.
fn uses(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.push((i + 1, name));
            }
            rest = after;
        }
    }
    out
}

#[test]
fn no_module_imports_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut wrong = Vec::new();
    for file in &all {
        let module = module_of(&src, file);
        let text = std::fs::read_to_string(file).unwrap();
        for (line, used) in uses(&text) {
            if used != module && rank(&used) > rank(&module) {
                wrong.push(format!(
                    "{}:{line}: `{module}` uses `crate::{used}`, a layer above it",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "layering (docs/architecture.md) broken:\n{}", wrong.join("\n"));
}

#[test]
fn the_decisions_do_no_io() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src.join("admission"), &mut all);
    files(&src.join("model"), &mut all);
    let mut wrong = Vec::new();
    for file in &all {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for io in ["tokio::", "kube::", "std::fs", "std::net", "reqwest", "hyper::", "axum::"] {
                if code.contains(io) {
                    wrong.push(format!("{}:{}: `{io}` in a pure layer", file.strip_prefix(&src).unwrap().display(), i + 1));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "admission and model are pure (no I/O):\n{}", wrong.join("\n"));
}

#[test]
fn the_layer_check_sees_a_violation() {
    // The reader itself, on a line that reaches up and one that only mentions it in a comment.
    let found = uses("use crate::webhook::App; // crate::runtime\nlet x = crate::model::names::HEAD;");
    assert_eq!(found, vec![(1, "webhook".to_owned()), (2, "model".to_owned())]);
    assert!(rank("webhook") > rank("cache"));
}

#[test]
fn every_hash_goes_through_the_digest_trait() {
    // model::digest is the one module that names a hash crate: content, templates and labels are
    // hashed through its `Digest`, so a keyed digest can replace SHA-256 where it must.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut wrong = Vec::new();
    for file in &all {
        if file.ends_with("model/digest.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for crate_name in ["sha2::", "sha1::", "md5::", "hmac::", "blake3::", "ring::digest"] {
                if code.contains(crate_name) {
                    wrong.push(format!("{}:{}: `{crate_name}` outside model::digest", file.strip_prefix(&src).unwrap().display(), i + 1));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "hash through model::digest::Digest:\n{}", wrong.join("\n"));
}
