//! The house rules of `crates/quantgate/src` (docs/architecture.md), checked on the sources:
//! no import circle between modules, no file over 800 lines outside the ggml mirrors, and
//! verify, release and eval reach the HF folder through `source`, never through `convert`
//! (the one documented exception: Gate 1's metadata expectation and file type).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::repo;

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Module path of a file under `src` (`verify/gate1/mod.rs` → `verify::gate1`), and the
/// file's text without its `#[cfg(test)]` tail (tests may reach anywhere).
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let text = match text.find("#[cfg(test)]") {
                Some(i) => text[..i].to_string(),
                None => text,
            };
            (parts.join("::"), text)
        })
        .collect()
}

/// The modules `text` names through `crate::` paths (including `use crate::{a, b::c}` groups),
/// each resolved to the longest known module prefix.
fn crate_refs(text: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let resolve = |path: &str| -> Option<String> {
        let parts: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        (1..=parts.len())
            .rev()
            .map(|i| parts[..i].join("::"))
            .find(|m| known.contains(m))
    };
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + 7..];
        if let Some(group) = rest.strip_prefix('{') {
            let body = &group[..group.find("};").unwrap_or(group.len())];
            for item in body.split([',', '{', '}', ' ', '\n']) {
                out.extend(resolve(item.trim()));
            }
        } else {
            let end = rest.find(|c| !ident(c)).unwrap_or(rest.len());
            out.extend(resolve(&rest[..end]));
        }
    }
    out
}

/// Strongly connected components of more than one module (Tarjan).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        e: &'a BTreeMap<String, BTreeSet<String>>,
        idx: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.idx.len();
        t.idx.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.e.get(v).into_iter().flatten() {
            if !t.idx.contains_key(w.as_str()) {
                visit(t, w);
                let l = t.low[w.as_str()].min(t.low[v]);
                t.low.insert(v, l);
            } else if t.on.contains(w.as_str()) {
                let l = t.idx[w.as_str()].min(t.low[v]);
                t.low.insert(v, l);
            }
        }
        if t.low[v] == t.idx[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        e: edges,
        idx: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.idx.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_import_circle_between_modules() {
    let mods = modules(&repo().join("crates/quantgate/src"));
    let known: BTreeSet<String> = mods.keys().cloned().collect();
    // A module using its own ancestors (the parent's types) is Rust's module tree, not a
    // circle; every other `crate::` edge counts.
    let edges: BTreeMap<String, BTreeSet<String>> = mods
        .iter()
        .map(|(m, text)| {
            let to = crate_refs(text, &known)
                .into_iter()
                .filter(|t| t != m && !m.starts_with(&format!("{t}::")) && !t.is_empty())
                .collect();
            (m.clone(), to)
        })
        .collect();
    assert!(
        edges.values().map(BTreeSet::len).sum::<usize>() > 100,
        "{edges:?}"
    );
    assert!(edges["verify::gate1"].contains("convert"), "{edges:?}");
    assert_eq!(circles(&edges), Vec::<Vec<String>>::new());
    // The check finds a circle when there is one.
    let mut bent = edges.clone();
    bent.get_mut("convert")
        .unwrap()
        .insert("verify::gate1".into());
    assert_eq!(circles(&bent).len(), 1);
}

#[test]
fn no_source_file_over_800_lines_outside_the_ggml_mirrors() {
    let mut files = Vec::new();
    for c in ["gguf", "llama-runtime", "reference", "quantgate"] {
        rust_files(&repo().join("crates").join(c).join("src"), &mut files);
    }
    assert!(files.len() > 100, "{}", files.len());
    // quant_ref.rs mirrors ggml-quants.c's reference quantizers function by function.
    let long: Vec<(usize, PathBuf)> = files
        .into_iter()
        .filter(|p| !p.ends_with("gguf/src/quant_ref.rs"))
        .map(|p| (std::fs::read_to_string(&p).unwrap().lines().count(), p))
        .filter(|(n, _)| *n > 800)
        .collect();
    assert!(long.is_empty(), "{long:?}");
}

#[test]
fn verify_release_and_eval_read_the_hf_folder_through_source_not_convert() {
    let mods = modules(&repo().join("crates/quantgate/src"));
    let known: BTreeSet<String> = mods.keys().cloned().collect();
    let users: Vec<&String> = mods
        .iter()
        .filter(|(m, _)| {
            ["verify", "release", "eval"]
                .iter()
                .any(|p| m.starts_with(p))
        })
        .filter(|(_, text)| {
            crate_refs(text, &known)
                .iter()
                .any(|t| t.starts_with("convert"))
        })
        .map(|(m, _)| m)
        .collect();
    // Gate 1 starts from the converter's metadata expectation and file type
    // (docs/architecture.md says why); nothing else of convert is used.
    assert_eq!(users, ["verify::gate1"]);
    let text = &mods["verify::gate1"];
    let mut used = BTreeSet::new();
    for (i, _) in text.match_indices("convert::") {
        let rest = &text[i + 9..];
        let items = match rest.strip_prefix('{') {
            Some(g) => &g[..g.find('}').unwrap()],
            None => {
                &rest[..rest
                    .find(|c: char| !c.is_alphanumeric() && c != '_')
                    .unwrap()]
            }
        };
        used.extend(items.split(',').map(str::trim).filter(|s| !s.is_empty()));
    }
    assert_eq!(
        used,
        BTreeSet::from(["OutType", "file_type", "metadata", "self"]),
        "{text}"
    );
}
