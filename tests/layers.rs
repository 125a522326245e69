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

/// The top-level module a file belongs to: `src/cli.rs` -> cli, `src/cache/state.rs` -> cache.
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

/// model's own files, lowest first (docs/architecture.md "model/ ladder"): a file uses only the
/// files listed before it, so no two of them import each other, even through a third.
const MODEL_LADDER: &[&str] = &[
    "text",
    "json",
    "digest",
    "sourcekinds",
    "ids",
    "names",
    "keys",
    "meta",
    "selector",
    "fold",
    "trim",
    "template",
    "rollout",
    "kinds",
    "snapshot",
    "secret",
    "source",
    "policy",
    "published",
    "mod",
];

fn model_rank(file: &str) -> Option<usize> {
    MODEL_LADDER.iter().position(|f| *f == file)
}

/// The model files a line names through `crate::model::x` or `super::x` (`super::{x, y::z}`
/// too), comments left out, with their line numbers. A `super::x` names a file only when `x` is
/// one of `files`: inside a file's `mod tests`, `super::` is the file itself.
fn model_uses(text: &str, files: &[String]) -> Vec<(usize, String)> {
    ladder_uses(text, files, "crate::model::")
}

/// As [`model_uses`], for the files of the module whose paths start `module` (`crate::cache::`).
fn ladder_uses(text: &str, files: &[String], module: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for (prefix, any) in [(module, true), ("super::", false)] {
            let mut rest = code;
            while let Some(at) = rest.find(prefix) {
                let after = &rest[at + prefix.len()..];
                let heads: Vec<String> = match after.strip_prefix('{') {
                    // The first segment of each item of a group, at its top level.
                    Some(group) => {
                        let (mut depth, mut items, mut item) = (0, Vec::new(), String::new());
                        for c in group.chars() {
                            match c {
                                '{' => depth += 1,
                                '}' if depth == 0 => break,
                                '}' => depth -= 1,
                                ',' if depth == 0 => items.push(std::mem::take(&mut item)),
                                c => item.push(c),
                            }
                        }
                        items.push(item);
                        items.iter().map(|it| ident(it.trim())).collect()
                    }
                    None => vec![ident(after)],
                };
                for head in heads {
                    if !head.is_empty() && (any || files.contains(&head)) {
                        out.push((i + 1, head));
                    }
                }
                rest = after;
            }
        }
    }
    out
}

fn ident(s: &str) -> String {
    s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

#[test]
fn model_files_form_a_ladder() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model");
    let mut all = Vec::new();
    files(&dir, &mut all);
    all.sort();
    let stems: Vec<String> = all.iter().map(|f| f.file_stem().unwrap().to_string_lossy().into_owned()).collect();
    let mut wrong = Vec::new();
    for (file, stem) in all.iter().zip(&stems) {
        let shown = file.strip_prefix(&dir).unwrap().display();
        let Some(own) = model_rank(stem) else {
            wrong.push(format!("model/{shown}: in no rank: add it to MODEL_LADDER and docs/architecture.md"));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (line, used) in model_uses(&text, &stems) {
            if used == *stem {
                continue;
            }
            match model_rank(&used) {
                None => wrong.push(format!("model/{shown}:{line}: uses `{used}`, a model file in no rank")),
                Some(r) if r >= own => wrong.push(format!("model/{shown}:{line}: `{stem}` uses `{used}`, at or above it on the ladder")),
                Some(_) => {}
            }
        }
    }
    assert!(wrong.is_empty(), "model/ ladder (docs/architecture.md) broken:\n{}", wrong.join("\n"));
}

/// cache's own files, lowest first (docs/architecture.md "cache/"): the records know nothing of
/// the state, the state's queries nothing of the writer, and the lock only the state it guards.
/// Their tests may use any of them.
const CACHE_LADDER: &[&str] = &["watched", "records", "readiness", "state", "writer", "lock", "mod"];

#[test]
fn cache_files_form_a_ladder() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cache");
    let mut all = Vec::new();
    files(&dir, &mut all);
    let stems: Vec<String> = all.iter().map(|f| f.file_stem().unwrap().to_string_lossy().into_owned()).collect();
    let rank = |f: &str| CACHE_LADDER.iter().position(|l| *l == f);
    let mut wrong = Vec::new();
    for (file, stem) in all.iter().zip(&stems) {
        let Some(own) = rank(stem) else {
            wrong.push(format!("cache/{stem}.rs: in no rank: add it to CACHE_LADDER and docs/architecture.md"));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (line, used) in ladder_uses(code, &stems, "crate::cache::") {
            match rank(&used) {
                Some(r) if r >= own && used != *stem => wrong.push(format!("cache/{stem}.rs:{line}: uses `{used}`, at or above it")),
                // `crate::cache::X` names an item through mod.rs: say which file instead.
                None if stem != "mod" => wrong.push(format!("cache/{stem}.rs:{line}: names `crate::cache::{used}`; use `super::file::`")),
                _ => {}
            }
        }
    }
    assert!(wrong.is_empty(), "cache/ ladder (docs/architecture.md) broken:\n{}", wrong.join("\n"));
}

#[test]
fn the_ladder_check_sees_a_step_up() {
    let files = ["json", "names", "policy", "meta"].map(String::from);
    let found = model_uses(
        "use super::{json::At, names};\nlet m = crate::model::policy::Mode::Off; // super::meta\nuse super::*;\nsuper::parse(x)",
        &files,
    );
    let found: Vec<(usize, &str)> = found.iter().map(|(l, u)| (*l, u.as_str())).collect();
    assert_eq!(found, [(1, "json"), (1, "names"), (2, "policy")]);
    assert!(model_rank("policy") > model_rank("names") && model_rank("nothing").is_none());
    let cache = ["state", "writer"].map(String::from);
    let found = ladder_uses("use super::writer::Writer;\nuse crate::cache::{state, Lock};", &cache, "crate::cache::");
    assert_eq!(found, [(1, "writer".to_owned()), (2, "state".to_owned()), (2, "Lock".to_owned())]);
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

/// Lines of `text` (not comments) that hash a template with the watch's hash
/// (`template_hash`, `template_hash_without`) rather than a request's (`request_template_hash`).
fn watch_hash_calls(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for call in ["template_hash(", "template_hash_without("] {
            let mut from = 0;
            while let Some(at) = code[from..].find(call) {
                let start = from + at;
                if !code[..start].ends_with("request_") && !code[..start].ends_with("fn ") {
                    out.push(i + 1);
                }
                from = start + call.len();
            }
        }
    }
    out
}

/// A request's template is parsed with its unread parts folded (`model::fold`), and only
/// `request_template_hash` reads folded parts as the text they hold: hashed with the watch's
/// `template_hash` it would match no revision, and every undo would be taken for a release
/// (docs/behaviour.md §6.2.1). So the layers that hold requests never call the watch's hash.
#[test]
fn request_templates_are_hashed_as_requests() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src.join("admission"), &mut all);
    files(&src.join("webhook"), &mut all);
    let mut wrong = Vec::new();
    for file in &all {
        for line in watch_hash_calls(&std::fs::read_to_string(file).unwrap()) {
            wrong.push(format!("{}:{line}: the watch's template hash on a request's template", file.strip_prefix(&src).unwrap().display()));
        }
    }
    assert!(wrong.is_empty(), "use request_template_hash in admission and webhook:\n{}", wrong.join("\n"));
    let sample = "let h = a.kind.template_hash(a.template);\nlet h = a.kind.request_template_hash(t); // template_hash(x)\n";
    assert_eq!(watch_hash_calls(sample), [1], "the check sees a call");
}
