//! What a release takes from the HF source folder: the files it ships as the source carries
//! them (license, config, tokenizer, chat template, sentence-transformers pooling), and the
//! source model card's YAML front matter (the HF hub's model card metadata: `license`,
//! `language`, `tags`, `datasets`, `pipeline_tag`, …; huggingface.co/docs/hub/model-cards).

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// Files copied from the source when present, relative to the folder. License files are
/// matched separately ([`is_license_file`]).
pub const COPIED: &[&str] = super::hf::SIDE_FILES;

/// `LICENSE`, `LICENSE.txt`, `LICENCE.md`, `NOTICE`, `USE_POLICY.md`, … at the folder's top.
pub fn is_license_file(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["LICENSE", "LICENCE", "NOTICE", "USE_POLICY"]
        .iter()
        .any(|p| upper.starts_with(p))
}

/// The source files a release ships, relative to `dir`, sorted.
///
/// Errors: the folder cannot be listed.
pub fn files_to_copy(dir: &Path) -> Result<Vec<String>> {
    let mut out: Vec<String> = COPIED
        .iter()
        .filter(|f| dir.join(f).is_file())
        .map(|f| f.to_string())
        .collect();
    let list = std::fs::read_dir(dir).with_context(|| format!("{}: cannot list", dir.display()))?;
    for e in list {
        let e = e?;
        if let Some(name) = e.file_name().to_str() {
            if e.path().is_file() && is_license_file(name) {
                out.push(name.to_string());
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The source card's front matter fields a release carries.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CardMeta {
    /// `license` (an SPDX-like id such as `apache-2.0`, or `other`).
    pub license: Option<String>,
    /// `license_name` / `license_link` (with `license: other`).
    pub license_name: Option<String>,
    pub license_link: Option<String>,
    /// `language`: one or more codes.
    pub language: Vec<String>,
    /// `tags`.
    pub tags: Vec<String>,
    /// `datasets`.
    pub datasets: Vec<String>,
    /// `pipeline_tag` (e.g. `text-generation`, `sentence-similarity`).
    pub pipeline_tag: Option<String>,
}

/// Reads the front matter of `dir/README.md` ([`crate::source::card::load`]). No card or no
/// front matter gives the default (every field absent).
///
/// Errors: README.md exists but cannot be read, or its front matter is not YAML (naming the
/// file).
pub fn card_meta(dir: &Path) -> Result<CardMeta> {
    use crate::source::card::{yaml_list, yaml_str};
    let y = crate::source::card::load(dir)?;
    let s = |k: &str| yaml_str(&y[k]);
    let list = |k: &str| yaml_list(&y[k]).unwrap_or_default();
    Ok(CardMeta {
        license: s("license"),
        license_name: s("license_name"),
        license_link: s("license_link"),
        language: list("language"),
        tags: list("tags"),
        datasets: list("datasets"),
        pipeline_tag: s("pipeline_tag"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_fields_are_read() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("README.md"),
            "---\nlanguage: en\nlicense: apache-2.0\ntags:\n- a\n- b\n---\n# Card\n",
        )
        .unwrap();
        let m = card_meta(d.path()).unwrap();
        assert_eq!(m.license.as_deref(), Some("apache-2.0"));
        assert_eq!(m.language, ["en"]);
        assert_eq!(m.tags, ["a", "b"]);
        std::fs::write(d.path().join("README.md"), "---\nlicense: [\n---\n").unwrap();
        let e = card_meta(d.path()).unwrap_err();
        assert!(format!("{e:#}").contains("README.md: front matter is not YAML"));
    }

    #[test]
    fn license_files_are_recognized() {
        assert!(is_license_file("LICENSE"));
        assert!(is_license_file("license.txt"));
        assert!(is_license_file("USE_POLICY.md"));
        assert!(!is_license_file("README.md"));
    }
}
