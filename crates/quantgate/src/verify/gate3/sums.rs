//! `SHA256SUMS` of a release folder, in the format `sha256sum -c` reads (GNU coreutils: the
//! lowercase hex digest, two spaces, the path relative to the folder, one file per line).
//! Every file is listed except `SHA256SUMS` itself and the receipt ([`UNCOVERED`]).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};

use crate::hash::sha256_file;

/// The manifest's file name.
pub const SHA256SUMS: &str = "SHA256SUMS";
/// The receipt of the run that built a release folder: its timestamps and timings (and the
/// output path) differ between runs, so the manifest does not cover it.
pub const RECEIPT: &str = "receipt.json";
/// The release's signature (`release --sign`, OpenSSF model-signing): it covers what the
/// manifest covers, so the manifest cannot cover it.
pub const SIGNATURE: &str = "model.sig";
/// Files the manifest does not cover: itself, the receipt of the run that built the folder
/// (timestamps and timings, which differ between runs), and the signature over the rest.
pub const UNCOVERED: &[&str] = &[SHA256SUMS, RECEIPT, SIGNATURE];

/// Every file under `dir` as a `/`-separated relative path, sorted, less [`UNCOVERED`].
///
/// Errors: a folder that cannot be listed, or a path that is not valid UTF-8.
pub fn covered_files(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.retain(|p| !UNCOVERED.contains(&p.as_str()));
    out.sort();
    Ok(out)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    let list = std::fs::read_dir(dir).with_context(|| format!("{}: cannot list", dir.display()))?;
    for e in list {
        let e = e?;
        let p = e.path();
        // file_type does not follow symlinks: a symlinked folder (even a loop) is listed as
        // an entry, never descended into.
        if e.file_type()?.is_dir() {
            walk(root, &p, out)?;
        } else {
            let rel = p.strip_prefix(root).unwrap_or(&p);
            let parts: Option<Vec<&str>> = rel.iter().map(|c| c.to_str()).collect();
            let rel = parts.ok_or_else(|| anyhow!("{}: not a UTF-8 path", p.display()))?;
            out.push(rel.join("/"));
        }
    }
    Ok(())
}

/// Writes `dir/SHA256SUMS` for every covered file; returns the lines written.
///
/// Errors: a file that cannot be read, or the manifest cannot be written.
pub fn write(dir: &Path) -> Result<Vec<(String, String)>> {
    let mut lines = Vec::new();
    let mut text = String::new();
    for rel in covered_files(dir)? {
        let h = sha256_file(&dir.join(&rel))?;
        text.push_str(&format!("{h}  {rel}\n"));
        lines.push((h, rel));
    }
    let p = dir.join(SHA256SUMS);
    std::fs::write(&p, text).with_context(|| format!("{}: cannot write", p.display()))?;
    Ok(lines)
}

/// Largest manifest read, bytes (a manifest line is ~100 bytes).
const MAX_BYTES: u64 = 16 << 20;

/// `HEX  PATH` or `HEX *PATH` (GNU's binary marker), with an optional `./` before the path and
/// a CR before the line end, as `sha256sum -c` accepts them; `None` for anything else.
fn parse_line(line: &str) -> Option<(&str, &str)> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let (h, rest) = line.split_at_checked(64)?;
    if !h.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let rel = rest
        .strip_prefix("  ")
        .or_else(|| rest.strip_prefix(" *"))?;
    let rel = rel.strip_prefix("./").unwrap_or(rel);
    (!rel.is_empty()).then_some((h, rel))
}

/// One finding of [`check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The manifest is missing, not a regular file, too large, or a line is not `HEX  PATH`.
    Unreadable(String),
    /// A listed file's sha256 differs from the manifest's.
    Mismatch {
        file: String,
        listed: String,
        found: String,
    },
    /// A listed file is absent.
    Missing(String),
    /// A file in the folder the manifest does not list.
    Unlisted(String),
    /// A listed entry that is not a regular file (symlink, FIFO, folder, device).
    NotRegular(String),
}

impl Problem {
    /// The file concerned (`SHA256SUMS` for an unreadable manifest).
    pub fn file(&self) -> &str {
        match self {
            Problem::Unreadable(_) => SHA256SUMS,
            Problem::Mismatch { file, .. }
            | Problem::Missing(file)
            | Problem::Unlisted(file)
            | Problem::NotRegular(file) => file,
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Unreadable(d) => write!(f, "{SHA256SUMS}: {d}"),
            Problem::Mismatch {
                file,
                listed,
                found,
            } => write!(f, "{file}: sha256 {found}, {SHA256SUMS} lists {listed}"),
            Problem::Missing(file) => write!(f, "{file}: listed in {SHA256SUMS} but absent"),
            Problem::Unlisted(file) => write!(f, "{file}: present but not in {SHA256SUMS}"),
            Problem::NotRegular(file) => {
                write!(f, "{file}: not a regular file (a release ships only files)")
            }
        }
    }
}

/// Re-reads `dir/SHA256SUMS` and re-hashes every file (as `sha256sum -c` does), and also
/// reports files the manifest does not list. Returns the files checked and the problems.
///
/// Errors: a file that exists but cannot be read.
pub fn check(dir: &Path) -> Result<(usize, Vec<Problem>)> {
    let p: PathBuf = dir.join(SHA256SUMS);
    let text = match crate::paths::read_text_capped(&p, MAX_BYTES) {
        Ok(t) => t,
        Err(e) => return Ok((0, vec![Problem::Unreadable(format!("{e:#}"))])),
    };
    let root = dir
        .canonicalize()
        .with_context(|| format!("{}", dir.display()))?;
    let mut problems = Vec::new();
    let mut listed = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some((h, rel)) = parse_line(line) else {
            problems.push(Problem::Unreadable(format!(
                "line {} is not `HEX  PATH`",
                n + 1
            )));
            continue;
        };
        let file = dir.join(rel);
        // A listed path must stay inside the folder, through no symlinked folder either.
        if rel.split('/').any(|c| c == ".." || c.is_empty()) || !file.exists() {
            problems.push(Problem::Missing(rel.to_string()));
            continue;
        }
        let inside = file
            .canonicalize()
            .is_ok_and(|c| c.starts_with(&root) && c != root);
        if !inside {
            problems.push(Problem::NotRegular(rel.to_string()));
            listed.push(rel.to_string());
            continue;
        }
        // Only regular files ship: a symlink could point anywhere, a FIFO would never end.
        if !std::fs::symlink_metadata(&file)?.file_type().is_file() {
            problems.push(Problem::NotRegular(rel.to_string()));
            listed.push(rel.to_string());
            continue;
        }
        let found = sha256_file(&file)?;
        if !found.eq_ignore_ascii_case(h) {
            problems.push(Problem::Mismatch {
                file: rel.to_string(),
                listed: h.to_string(),
                found,
            });
        }
        listed.push(rel.to_string());
    }
    let n_listed = listed.len();
    listed.sort();
    listed.dedup();
    if listed.len() != n_listed {
        problems.push(Problem::Unreadable("a file is listed twice".into()));
    }
    for rel in covered_files(dir)? {
        if !listed.contains(&rel) {
            problems.push(Problem::Unlisted(rel));
        }
    }
    Ok((listed.len(), problems))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_missing_or_extra_file_is_found() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.gguf"), b"abc").unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/b.json"), b"{}").unwrap();
        let lines = write(d.path()).unwrap();
        assert_eq!(lines.len(), 2);
        // sha256("abc"), the FIPS 180-2 example.
        assert_eq!(
            lines[0],
            (
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".into(),
                "a.gguf".into()
            )
        );
        assert_eq!(check(d.path()).unwrap(), (2, vec![]));
        std::fs::write(d.path().join("a.gguf"), b"abd").unwrap();
        std::fs::write(d.path().join("c.txt"), b"").unwrap();
        std::fs::remove_file(d.path().join("sub/b.json")).unwrap();
        let (_, p) = check(d.path()).unwrap();
        let files: Vec<&str> = p.iter().map(Problem::file).collect();
        assert_eq!(files, ["a.gguf", "sub/b.json", "c.txt"]);
        assert!(matches!(p[0], Problem::Mismatch { .. }));
        assert!(matches!(p[1], Problem::Missing(_)));
        assert!(matches!(p[2], Problem::Unlisted(_)));
    }

    #[test]
    fn lines_are_read_as_sha256sum_reads_them() {
        let h = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(parse_line(&format!("{h}  a.gguf")), Some((h, "a.gguf")));
        assert_eq!(parse_line(&format!("{h} *a.gguf")), Some((h, "a.gguf")));
        assert_eq!(parse_line(&format!("{h}  ./a.gguf\r")), Some((h, "a.gguf")));
        let upper = h.to_uppercase();
        assert_eq!(
            parse_line(&format!("{upper}  a")),
            Some((upper.as_str(), "a"))
        );
        assert_eq!(parse_line(&format!("{h} a.gguf")), None);
        assert_eq!(parse_line("xyz  a.gguf"), None);
        assert_eq!(parse_line(&format!("{h}  ")), None);
    }

    #[test]
    fn a_symlink_loop_or_symlinked_file_is_named_not_followed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.gguf"), b"abc").unwrap();
        write(d.path()).unwrap();
        // A folder symlink to its own parent: listing must not recurse forever.
        std::os::unix::fs::symlink(d.path(), d.path().join("loop")).unwrap();
        let (_, p) = check(d.path()).unwrap();
        assert_eq!(p, vec![Problem::Unlisted("loop".into())]);
        // A listed file replaced by a symlink to a file with the same bytes elsewhere.
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("x"), b"abc").unwrap();
        std::fs::remove_file(d.path().join("loop")).unwrap();
        std::fs::remove_file(d.path().join("a.gguf")).unwrap();
        std::os::unix::fs::symlink(other.path().join("x"), d.path().join("a.gguf")).unwrap();
        let (_, p) = check(d.path()).unwrap();
        assert_eq!(p, vec![Problem::NotRegular("a.gguf".into())]);
    }
}
