//! Chat templates of an HF folder, in the order transformers loads them
//! (`tokenization_utils_base`, transformers 4.43+ and 5.x):
//! 1. tokenizer_config.json `chat_template`: a string (the default template) or a list of
//!    `{name, template}` (legacy);
//! 2. chat_template.json `chat_template` (the processors' legacy file), same shapes;
//! 3. chat_template.jinja: the default template (what `save_pretrained` writes since 4.47);
//! 4. additional_chat_templates/NAME.jinja: named templates.
//!
//! A later source overrides an earlier one with the same name; when their texts differ the
//! disagreement is reported. gguf-py (`SpecialVocab._try_load_from_tokenizer_json`) writes the
//! default as `tokenizer.chat_template`, each other name as `tokenizer.chat_template.NAME`
//! (name characters outside `[A-Za-z0-9]` replaced by `_`) and the names as
//! `tokenizer.chat_templates`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

/// The templates by name (`default` for the unnamed one) and notes on disagreements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChatTemplates {
    /// Template text by name; names already in gguf-py's sanitized form.
    pub by_name: BTreeMap<String, String>,
    /// Where two sources give different texts for one name (the later source is kept).
    pub notes: Vec<String>,
}

impl ChatTemplates {
    /// The default template.
    pub fn default_template(&self) -> Option<&str> {
        self.by_name.get("default").map(String::as_str)
    }

    /// The named (non-default) templates, sorted by name.
    pub fn named(&self) -> impl Iterator<Item = (&str, &str)> {
        self.by_name
            .iter()
            .filter(|(n, _)| n.as_str() != "default")
            .map(|(n, t)| (n.as_str(), t.as_str()))
    }

    fn put(&mut self, name: &str, text: String, source: &str) {
        let name = sanitize(name);
        if let Some(old) = self.by_name.get(&name) {
            if *old != text {
                self.notes.push(format!(
                    "chat template {name:?}: {source} differs from an earlier source; {source} is used (transformers' order)"
                ));
            }
        }
        self.by_name.insert(name, text);
    }

    /// A `chat_template` field value: a string or a list of `{name, template}`.
    fn put_field(&mut self, v: &Value, source: &str) -> Result<()> {
        match v {
            Value::Null => {}
            Value::String(s) => self.put("default", s.clone(), source),
            Value::Array(list) => {
                for e in list {
                    let (Some(n), Some(t)) = (e["name"].as_str(), e["template"].as_str()) else {
                        return Err(anyhow!(
                            "{source}: field chat_template: a list entry is not {{name, template}}"
                        ));
                    };
                    self.put(n, t.to_string(), source);
                }
            }
            _ => {
                return Err(anyhow!(
                    "{source}: field chat_template is neither a string nor a list"
                ))
            }
        }
        Ok(())
    }
}

/// gguf-py's name filter: characters outside `[A-Za-z0-9]` become `_`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Reads a text file that exists, naming it on errors.
fn read_text(p: &Path) -> Result<String> {
    crate::paths::ensure_regular_file(p)?;
    std::fs::read_to_string(p).with_context(|| format!("{}: cannot read", p.display()))
}

/// The chat templates of `dir`, whose tokenizer_config.json is `tc` (an empty object when the
/// file is absent).
///
/// Errors: an unreadable template file, or a `chat_template` field of the wrong shape, naming
/// the file and field.
pub fn load(dir: &Path, tc: &Value) -> Result<ChatTemplates> {
    let mut out = ChatTemplates::default();
    out.put_field(&tc["chat_template"], "tokenizer_config.json")?;
    let json = dir.join("chat_template.json");
    if crate::paths::present(&json)? {
        let v = crate::source::hf::read_json(&json)?;
        out.put_field(&v["chat_template"], &json.display().to_string())?;
    }
    let jinja = dir.join("chat_template.jinja");
    if crate::paths::present(&jinja)? {
        out.put("default", read_text(&jinja)?, "chat_template.jinja");
    }
    let extra = dir.join("additional_chat_templates");
    if extra.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(&extra)
            .with_context(|| format!("{}: cannot list", extra.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
            .collect();
        files.sort();
        for p in files {
            let stem = p
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let source = format!("additional_chat_templates/{stem}.jinja");
            out.put(&stem, read_text(&p)?, &source);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transformers_order_and_gguf_py_names() {
        let d = tempfile::tempdir().unwrap();
        let tc = serde_json::json!({"chat_template": [
            {"name": "default", "template": "A"}, {"name": "tool-use", "template": "T"}]});
        std::fs::write(d.path().join("chat_template.jinja"), "J").unwrap();
        std::fs::create_dir(d.path().join("additional_chat_templates")).unwrap();
        std::fs::write(d.path().join("additional_chat_templates/rag.jinja"), "R").unwrap();
        let t = load(d.path(), &tc).unwrap();
        assert_eq!(t.default_template(), Some("J"));
        assert_eq!(
            t.named().collect::<Vec<_>>(),
            vec![("rag", "R"), ("tool_use", "T")]
        );
        assert_eq!(t.notes.len(), 1, "{:?}", t.notes);
        assert!(t.notes[0].contains("chat_template.jinja"));
        let bad = serde_json::json!({"chat_template": 3});
        let e = load(d.path(), &bad).unwrap_err().to_string();
        assert!(
            e.contains("tokenizer_config.json: field chat_template"),
            "{e}"
        );
    }
}
