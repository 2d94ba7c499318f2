//! `general.*` provenance keys as llama.cpp's converter derives them (gguf-py
//! `gguf/metadata.py` `Metadata.load` and `get_model_id_components`, `conversion/base.py`
//! `prepare_metadata`): from the model card's YAML front matter (README.md), config.json's
//! `_name_or_path` when it is a hub id, and the folder's name; `size_label` from the parameter
//! count when no name gives one.
//!
//! Covered: name, version, organization, finetune, basename, size_label, license (+ name/link),
//! base models and datasets given as hub ids or URLs (name, organization, version, repo_url),
//! tags (+ pipeline_tag) and languages. Not covered: the author/description/url/doi/uuid card
//! fields and dictionary entries of base_model/datasets (rare; llama.cpp copies them as given).
//! Gate 1 treats these keys as provenance: allowed, not judged.

use std::path::Path;

use anyhow::{Context, Result};
use gguf::{Value, ValueType};
use serde_json::Value as Json;
use yaml_rust2::{Yaml, YamlLoader};

/// The text between a first line `---` and the next `---` line of a model card.
pub fn front_matter(text: &str) -> Option<&str> {
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let end = rest.find("\n---")?;
    Some(&rest[..end + 1])
}

/// The front matter of `dir/README.md` as YAML (`Yaml::Null` without a card or front matter).
///
/// Errors: README.md cannot be read, or its front matter is not YAML (naming the file).
pub fn load(dir: &Path) -> Result<Yaml> {
    let p = dir.join("README.md");
    if !crate::paths::present(&p)? {
        return Ok(Yaml::Null);
    }
    let text = std::fs::read_to_string(&p).with_context(|| format!("{}", p.display()))?;
    let Some(front) = front_matter(&text) else {
        return Ok(Yaml::Null);
    };
    let docs = YamlLoader::load_from_str(front)
        .with_context(|| format!("{}: front matter is not YAML", p.display()))?;
    Ok(docs.into_iter().next().unwrap_or(Yaml::Null))
}

/// The parts gguf-py reads from a model id such as `HuggingFaceTB/SmolLM2-135M-Instruct`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdParts {
    /// The name after the organization (`SmolLM2-135M-Instruct`).
    pub full_name: Option<String>,
    /// The organization before `/` (`HuggingFaceTB`).
    pub org: Option<String>,
    /// Leading name parts (`SmolLM2`); `None` when the id is too ambiguous.
    pub basename: Option<String>,
    /// Finetune parts (`Instruct`, context lengths such as `8k`).
    pub finetune: Option<String>,
    /// Version parts not in the basename (`v5`).
    pub version: Option<String>,
    /// Parameter-count parts (`135M`, `0.5B`, `8x7B`).
    pub size_label: Option<String>,
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `(v|iter)?\d+([.]\d+)*`, case-insensitive.
fn is_version(p: &str) -> bool {
    let l = p.to_ascii_lowercase();
    let rest = l
        .strip_prefix("iter")
        .or_else(|| l.strip_prefix('v'))
        .unwrap_or(&l);
    rest.split('.').all(all_digits)
}

/// `i?q\d(_\w)*|b?fp?(16|32)`, case-insensitive.
fn is_quant_type(p: &str) -> bool {
    let l = p.to_ascii_lowercase();
    let q = l.strip_prefix('i').unwrap_or(&l);
    if let Some(r) = q.strip_prefix('q') {
        let mut parts = r.split('_');
        let first = parts.next().unwrap_or("");
        let word =
            |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if first.len() == 1 && all_digits(first) && parts.all(word) {
            return true;
        }
    }
    let f = l.strip_prefix('b').unwrap_or(&l);
    let Some(f) = f.strip_prefix('f') else {
        return false;
    };
    matches!(f.strip_prefix('p').unwrap_or(f), "16" | "32")
}

/// `\d+([._]\d+)?[KMBT]\d?`, case-insensitive (the part after the optional prefix).
fn is_size_rest(r: &str) -> bool {
    let b = r.as_bytes();
    let mut i = 0;
    let digits = |i: &mut usize| {
        let s = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > s
    };
    if !digits(&mut i) {
        return false;
    }
    if i < b.len() && (b[i] == b'.' || b[i] == b'_') {
        let save = i;
        i += 1;
        if !digits(&mut i) {
            i = save;
        }
    }
    if i >= b.len() || !b"kmbtKMBT".contains(&b[i]) {
        return false;
    }
    i += 1;
    if i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    i == b.len()
}

/// `(([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl)`, case-insensitive.
fn is_size(p: &str) -> bool {
    let l = p.to_ascii_lowercase();
    if matches!(
        l.as_str(),
        "small" | "mini" | "medium" | "large" | "xl" | "xxl"
    ) {
        return true;
    }
    if is_size_rest(&l) || l.strip_prefix('a').is_some_and(is_size_rest) {
        return true;
    }
    // \d+x prefix.
    l.char_indices()
        .filter(|(_, c)| *c == 'x')
        .any(|(i, _)| all_digits(&l[..i]) && is_size_rest(&l[i + 1..]))
}

/// The kinds of name part `i` (`version`, `type`, `size_label`, `finetune`), normalizing the
/// part as gguf-py does (quant types upper-cased, sizes like `7b1` → `7.1B`).
fn annotate(i: usize, part: &mut String, types: &mut Vec<&'static str>, total_params: u64) {
    if is_version(part) {
        types.push("version");
    } else if is_quant_type(part) {
        types.push("type");
        *part = part.to_uppercase();
    } else if i > 0 && is_size(part) {
        *part = size_part(part, total_params, types);
        if types.is_empty() {
            types.push("size_label");
        }
    } else if i > 0
        && matches!(
            part.to_ascii_lowercase().as_str(),
            "chat" | "instruct" | "vision" | "lora"
        )
    {
        types.push("finetune");
    }
}

/// A size part normalized (`_` → `.`, bloom's `7b1` → `7.1b`, suffix upper-cased); a size far
/// from `total_params` is a context length: `finetune`, suffix lower-cased.
fn size_part(part: &str, total_params: u64, types: &mut Vec<&'static str>) -> String {
    let mut part = part.replace('_', ".");
    let c: Vec<char> = part.chars().collect();
    let n = c.len();
    if n >= 2 && c[n - 1].is_ascii_digit() {
        let head: String = c[..n - 2].iter().collect();
        part = format!("{head}.{}{}", c[n - 1], c[n - 2]);
    }
    let c: Vec<char> = part.chars().collect();
    let n = c.len();
    if n > 1 && c[n - 2].is_ascii_digit() && "kmbt".contains(c[n - 1]) {
        part = format!("{}{}", &part[..n - 1], c[n - 1].to_ascii_uppercase());
    }
    if total_params != 0 {
        let (num, suf) = part.split_at(part.len() - 1);
        if let (Ok(x), Some(e)) = (num.parse::<f64>(), " KMBT".find(suf)) {
            let label = x * 1000f64.powi(e as i32);
            if (label - total_params as f64).abs() > (7 * total_params / 8) as f64 {
                types.push("finetune");
                return format!("{num}{}", suf.to_lowercase());
            }
        }
    }
    part
}

/// Word-based size labels (`small`, `xl`) go when a number-based one is present.
fn drop_word_sizes(parts: &[String], types: &mut [Vec<&'static str>]) {
    let numeric = parts
        .iter()
        .zip(types.iter())
        .any(|(p, t)| t.contains(&"size_label") && p.chars().any(|c| c.is_ascii_digit()));
    if numeric {
        for (p, t) in parts.iter().zip(types.iter_mut()) {
            if t.contains(&"size_label") && p.chars().all(char::is_alphabetic) {
                t.retain(|x| *x != "size_label");
            }
        }
    }
}

/// Leading unannotated (or version) parts are the basename; later unannotated parts are
/// finetune; a trailing version keeps only its version kind.
fn mark_basename(parts: &[String], types: &mut [Vec<&'static str>]) {
    let mut at_start = true;
    for (p, t) in parts.iter().zip(types.iter_mut()) {
        let alpha_first = p.chars().next().is_some_and(char::is_alphabetic);
        if at_start && ((t.is_empty() && alpha_first) || t.contains(&"version")) {
            t.push("basename");
        } else {
            at_start = false;
            if t.is_empty() {
                t.push("finetune");
            }
        }
    }
    for t in types.iter_mut().rev() {
        if t.contains(&"basename") && t.len() > 1 {
            t.retain(|x| *x != "basename");
        } else {
            break;
        }
    }
}

/// The parts of kind `want` (not also of kind `not`) joined with `-`; size labels once each.
fn join_parts(
    parts: &[String],
    types: &[Vec<&'static str>],
    want: &str,
    not: Option<&str>,
) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for (p, t) in parts.iter().zip(types) {
        let kind = t.contains(&want) && not.is_none_or(|n| !t.contains(&n));
        if kind && (want != "size_label" || !seen.contains(&p.as_str())) {
            seen.push(p);
        }
    }
    (!seen.is_empty()).then(|| seen.join("-"))
}

/// gguf-py's `get_model_id_components(model_id, total_params)` for a model (total_params ≥ 0).
pub fn id_components(model_id: &str, total_params: u64) -> IdParts {
    if model_id.contains(' ') {
        return IdParts {
            full_name: Some(model_id.into()),
            ..IdParts::default()
        };
    }
    let (mut org, full) = match model_id.split_once('/') {
        Some((o, n)) => (Some(o.to_string()), n.to_string()),
        None => (None, model_id.to_string()),
    };
    if org.as_deref().is_some_and(|o| o.starts_with('.')) {
        org = None;
    }
    let mut parts: Vec<String> = full
        .split('-')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let mut types: Vec<Vec<&str>> = vec![Vec::new(); parts.len()];
    for i in 0..parts.len() {
        annotate(i, &mut parts[i], &mut types[i], total_params);
    }
    drop_word_sizes(&parts, &mut types);
    mark_basename(&parts, &mut types);
    let join = |want: &str, not: Option<&str>| join_parts(&parts, &types, want, not);
    let size_label = join("size_label", None);
    let finetune = join("finetune", None);
    let version = join("version", Some("basename"));
    let basename = if size_label.is_none() && finetune.is_none() && version.is_none() {
        None
    } else {
        join("basename", None)
    };
    IdParts {
        full_name: Some(full),
        org,
        basename,
        finetune,
        version,
        size_label,
    }
}

/// gguf-py's `id_to_title`: `-` to spaces, all-lowercase words title-cased unless they are a
/// version (`v1.2`) or start with a digit.
pub fn id_to_title(s: &str) -> String {
    s.trim()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| {
            let lower = w.chars().any(char::is_alphabetic) && !w.chars().any(char::is_uppercase);
            let versionish = w.starts_with(|c: char| c.is_ascii_digit())
                || (w.starts_with('v') && is_version(w));
            if lower && !versionish {
                title(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Python's `str.title`: a letter after a non-letter is upper-cased, others lower-cased.
fn title(w: &str) -> String {
    let mut out = String::with_capacity(w.len());
    let mut prev_letter = false;
    for c in w.chars() {
        if c.is_alphabetic() {
            if prev_letter {
                out.extend(c.to_lowercase());
            } else {
                out.extend(c.to_uppercase());
            }
        } else {
            out.push(c);
        }
        prev_letter = c.is_alphabetic();
    }
    out
}

/// gguf-py's `model_weight_count_rounded_notation(n, min_digits=2)`: `135M`, `1.5B`, `22M`.
pub fn size_label(n: u64) -> String {
    let x = n as f64;
    let (v, s) = if x > 1e12 {
        (x * 1e-12, "T")
    } else if x > 1e9 {
        (x * 1e-9, "B")
    } else if x > 1e6 {
        (x * 1e-6, "M")
    } else {
        (x * 1e-3, "K")
    };
    let int_digits = format!("{}", v.round() as u64)
        .trim_start_matches('0')
        .len();
    let fix = 2usize.saturating_sub(int_digits);
    format!("{v:.fix$}{s}")
}

/// What a model card and the names give: gguf-py's `Metadata` fields this module covers.
#[derive(Default)]
struct Meta {
    name: Option<String>,
    version: Option<String>,
    organization: Option<String>,
    finetune: Option<String>,
    basename: Option<String>,
    size_label: Option<String>,
    license: Option<String>,
    license_name: Option<String>,
    license_link: Option<String>,
    base_models: Option<Vec<Vec<(&'static str, String)>>>,
    datasets: Option<Vec<Vec<(&'static str, String)>>>,
    tags: Option<Vec<String>>,
    languages: Option<Vec<String>>,
}

/// A scalar of the front matter as text (strings, integers, reals).
pub(crate) fn yaml_str(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Real(r) => Some(r.clone()),
        _ => None,
    }
}

/// A string or a list of scalars of the front matter as a list.
pub(crate) fn yaml_list(y: &Yaml) -> Option<Vec<String>> {
    match y {
        Yaml::String(s) => Some(vec![s.clone()]),
        Yaml::Array(a) => Some(a.iter().filter_map(yaml_str).collect()),
        _ => None,
    }
}

/// One base model or dataset entry from a hub id or URL.
fn entry(id: &str, total_params: u64) -> Vec<(&'static str, String)> {
    let mut e = Vec::new();
    let is_url = ["http://", "https://", "ssh://"]
        .iter()
        .any(|p| id.starts_with(p));
    let hub_id = if is_url {
        e.push(("repo_url", id.to_string()));
        id.strip_prefix("https://huggingface.co/")
            .or_else(|| id.strip_prefix("http://huggingface.co/"))
            .filter(|r| r.matches('/').count() == 1 && !r.ends_with('/'))
    } else {
        Some(id)
    };
    if let Some(h) = hub_id {
        let p = id_components(h, total_params);
        if let Some(n) = &p.full_name {
            e.push(("name", id_to_title(n)));
        }
        if let Some(o) = &p.org {
            e.push(("organization", id_to_title(o)));
        }
        if let Some(v) = &p.version {
            e.push(("version", v.clone()));
        }
        if let (false, Some(o), Some(n)) = (is_url, &p.org, &p.full_name) {
            e.push(("repo_url", format!("https://huggingface.co/{o}/{n}")));
        }
    }
    e
}

fn from_card(m: &mut Meta, card: &Yaml, total_params: u64) {
    let set = |slot: &mut Option<String>, key: &str| {
        if slot.is_none() {
            *slot = yaml_str(&card[key]);
        }
    };
    for (slot, keys) in [
        (&mut m.name, ["name", "model_name"]),
        (&mut m.version, ["version", "model_version"]),
        (&mut m.organization, ["organization", "model_organization"]),
        (&mut m.finetune, ["finetune", "model_finetune"]),
        (&mut m.basename, ["basename", "model_basename"]),
        (&mut m.size_label, ["size_label", "model_size_label"]),
    ] {
        for k in keys {
            set(slot, k);
        }
    }
    set(&mut m.basename, "model_type");
    let list_of = |keys: [&str; 3]| keys.iter().find_map(|k| yaml_list(&card[*k]));
    if let Some(ids) = list_of(["base_model", "base_models", "base_model_sources"]) {
        m.base_models = Some(ids.iter().map(|i| entry(i, total_params)).collect());
    }
    if let Some(ids) = list_of(["datasets", "dataset", "dataset_sources"]) {
        m.datasets = Some(ids.iter().map(|i| entry(i, total_params)).collect());
    }
    set(&mut m.license, "license");
    set(&mut m.license_name, "license_name");
    set(&mut m.license_link, "license_link");
    for (slot, keys) in [
        (&mut m.tags, ["tags", "pipeline_tag"]),
        (&mut m.languages, ["languages", "language"]),
    ] {
        for k in keys {
            if let Some(v) = yaml_list(&card[k]) {
                slot.get_or_insert_with(Vec::new).extend(v);
            }
        }
    }
}

fn from_id(m: &mut Meta, id: &str, total_params: u64) {
    let p = id_components(id, total_params);
    let fill = |slot: &mut Option<String>, v: Option<String>| {
        if slot.is_none() {
            *slot = v;
        }
    };
    fill(&mut m.name, p.full_name.as_deref().map(id_to_title));
    fill(&mut m.organization, p.org.as_deref().map(id_to_title));
    fill(&mut m.basename, p.basename);
    fill(&mut m.finetune, p.finetune);
    fill(&mut m.version, p.version);
    fill(&mut m.size_label, p.size_label);
}

/// The `general.*` provenance keys of the HF folder `dir` (config.json `config`), whose
/// GGUF holds `total_params` weights (0 for a vocab-only file), in gguf-py's order.
///
/// Errors: a model card whose front matter is not YAML.
pub fn general_keys(dir: &Path, config: &Json, total_params: u64) -> Result<Vec<(String, Value)>> {
    let mut m = Meta::default();
    from_card(&mut m, &load(dir)?, total_params);
    if let Some(id) = config["_name_or_path"]
        .as_str()
        .filter(|s| s.matches('/').count() <= 1)
    {
        from_id(&mut m, id, total_params);
    }
    let folder = std::fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    from_id(&mut m, &folder, total_params);
    if m.name.is_none() {
        m.name = Some(folder);
    }
    if m.size_label.is_none() && total_params > 0 {
        m.size_label = Some(size_label(total_params));
    }
    let mut kv: Vec<(String, Value)> = Vec::new();
    let mut s = |k: &str, v: &Option<String>| {
        if let Some(v) = v {
            kv.push((format!("general.{k}"), Value::string(v.clone())));
        }
    };
    s("name", &m.name);
    s("version", &m.version);
    s("organization", &m.organization);
    s("finetune", &m.finetune);
    s("basename", &m.basename);
    s("size_label", &m.size_label);
    s("license", &m.license);
    s("license.name", &m.license_name);
    s("license.link", &m.license_link);
    for (what, list) in [("base_model", &m.base_models), ("dataset", &m.datasets)] {
        if let Some(list) = list {
            kv.push((
                format!("general.{what}.count"),
                Value::U32(list.len() as u32),
            ));
            for (i, e) in list.iter().enumerate() {
                for field in ["name", "version", "organization", "repo_url"] {
                    if let Some((_, v)) = e.iter().find(|(f, _)| *f == field) {
                        kv.push((
                            format!("general.{what}.{i}.{field}"),
                            Value::string(v.clone()),
                        ));
                    }
                }
            }
        }
    }
    for (k, v) in [("tags", &m.tags), ("languages", &m.languages)] {
        if let Some(v) = v {
            let items = v.iter().map(|x| Value::string(x.clone())).collect();
            kv.push((
                format!("general.{k}"),
                Value::Array(ValueType::String, items),
            ));
        }
    }
    Ok(kv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(
        id: &str,
        n: u64,
    ) -> (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ) {
        let p = id_components(id, n);
        (p.basename, p.size_label, p.finetune, p.version)
    }

    fn s(x: &str) -> Option<String> {
        Some(x.into())
    }

    #[test]
    fn model_ids_split_as_gguf_py_splits_them() {
        assert_eq!(
            parts("HuggingFaceTB/SmolLM2-135M-Instruct", 134_515_008),
            (s("SmolLM2"), s("135M"), s("Instruct"), None)
        );
        // A folder suffix "v5" reads as a version (the peer writes general.version "v5").
        assert_eq!(
            parts("SmolLM2-135M-Instruct-v5", 0),
            (s("SmolLM2"), s("135M"), s("Instruct"), s("v5"))
        );
        assert_eq!(
            parts("Qwen2.5-0.5B-Instruct", 0),
            (s("Qwen2.5"), s("0.5B"), s("Instruct"), None)
        );
        // Values from gguf 0.19.0's get_model_id_components on the same ids. L6/H384 are not
        // sizes, so every part is basename and the whole is too ambiguous: nothing.
        assert_eq!(
            parts("nreimers/MiniLM-L6-H384-uncased", 22_713_216),
            (None, None, None, None)
        );
        assert_eq!(
            parts("all-MiniLM-L6-v2", 22_713_216),
            (s("all-MiniLM-L6"), None, None, s("v2"))
        );
        assert_eq!(
            parts("all-MiniLM-L6-v2-v5", 0),
            (s("all-MiniLM-L6"), None, None, s("v2-v5"))
        );
        // A size far from the parameter count is a context length, kept as finetune.
        assert_eq!(
            parts("Model-8k-7B", 7_000_000_000),
            (s("Model"), s("7B"), s("8k"), None)
        );
        assert_eq!(parts("bloom-7b1", 0), (s("bloom"), s("7.1B"), None, None));
    }

    #[test]
    fn titles_and_size_labels_match_gguf_py() {
        assert_eq!(id_to_title("all-MiniLM-L6-v2"), "All MiniLM L6 v2");
        assert_eq!(id_to_title("ms_marco"), "Ms_Marco");
        assert_eq!(id_to_title("s2orc"), "S2Orc");
        assert_eq!(size_label(134_515_008), "135M");
        assert_eq!(size_label(22_713_216), "23M");
        assert_eq!(size_label(494_032_768), "494M");
        assert_eq!(size_label(1_543_714_304), "1.5B");
    }

    #[test]
    fn quant_type_and_version_parts() {
        assert!(is_quant_type("Q4_K_M") && is_quant_type("iq2_xs") && is_quant_type("F16"));
        assert!(is_quant_type("bf16") && is_quant_type("fp32") && !is_quant_type("f8"));
        assert!(is_version("v2") && is_version("1.5") && is_version("iter3") && !is_version("v"));
    }
}
