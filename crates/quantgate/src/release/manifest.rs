//! Per-tensor manifests in `llama-gguf-hash`'s format, one beside each released GGUF
//! (`NAME.gguf.manifest`), so a recipient can check a file with llama.cpp's own tool:
//! `llama-gguf-hash --check NAME.gguf.manifest NAME.gguf`, run in the release folder.
//!
//! Format facts (llama.cpp `examples/gguf-hash/gguf-hash.cpp`, llama-cpp-python 0.3.36 sdist):
//! - one line per hash, `printf("%-8s  %s  %s\n", type, hex, name)`;
//! - per tensor, in the file's tensor-info order, `name` is `FILE:TENSOR` and the hash covers
//!   that tensor's `ggml_nbytes` (its data without the alignment padding);
//! - then one model line, `name` = `FILE`, hashing every tensor's data concatenated in that
//!   order. Metadata is not covered by either (SHA256SUMS and `model.sig` cover it);
//! - `--check` picks the strongest hash type the manifest holds (sha256 here), matches lines by
//!   type and name, and exits 0 (all match), 1 (a mismatch) or 3 (no entry for the file).
//!
//! The `FILE` part is the name as given on the tool's command line, so the manifest names the
//! bare file name and is checked from inside the release folder.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

/// Suffix of a GGUF's manifest file name (`NAME.gguf` → `NAME.gguf.manifest`).
pub const SUFFIX: &str = ".manifest";

/// The manifest's file name for the GGUF named `gguf_name`.
pub fn file_name(gguf_name: &str) -> String {
    format!("{gguf_name}{SUFFIX}")
}

/// The manifest text of the GGUF at `path`, naming it `name`: sha256 per tensor, then the
/// model line.
///
/// Errors: the file cannot be opened or is not a well-formed GGUF (naming the file).
pub fn render(path: &Path, name: &str) -> Result<String> {
    let g = gguf::Gguf::open(path).with_context(|| format!("{}", path.display()))?;
    let mut model = Sha256::new();
    let mut out = String::new();
    for t in &g.header.tensors {
        let data = g.tensor_data(t);
        model.update(data);
        let hex = crate::hash::sha256_bytes(data);
        let _ = writeln!(out, "{:<8}  {hex}  {name}:{}", "sha256", t.name);
        // The pages are read once; dropping them keeps a large file's RSS flat.
        g.release(t);
    }
    let _ = writeln!(
        out,
        "{:<8}  {}  {name}",
        "sha256",
        crate::hash::hex(&model.finalize())
    );
    Ok(out)
}

/// Largest manifest read (a line is ~100 bytes per tensor; a 1,000-tensor MoE's is 0.1 MB).
const MAX_BYTES: u64 = 64 << 20;

/// Why the manifest `dir/NAME.gguf.manifest` does not describe `dir/NAME.gguf` (`None` when it
/// does, byte for byte). A manifest that is missing, not a regular file (a FIFO, a symlink, a
/// device) or over [`MAX_BYTES`], and a GGUF that cannot be parsed, are reasons, not errors:
/// `release --check` reports them with its other blockers.
pub fn mismatch(dir: &Path, gguf_name: &str) -> Option<String> {
    let m = dir.join(file_name(gguf_name));
    if std::fs::symlink_metadata(&m).is_err() {
        return Some("missing from the release folder".into());
    }
    let have = match crate::paths::read_text_capped(&m, MAX_BYTES) {
        Ok(t) => t,
        Err(e) => return Some(format!("unreadable: {e:#}")),
    };
    let want = match render(&dir.join(gguf_name), gguf_name) {
        Ok(t) => t,
        Err(e) => return Some(format!("the GGUF cannot be hashed: {e:#}")),
    };
    if have == want {
        return None;
    }
    let first = want
        .lines()
        .zip(have.lines())
        .find(|(w, h)| w != h)
        .map_or_else(
            || {
                format!(
                    "{} lines, {} expected",
                    have.lines().count(),
                    want.lines().count()
                )
            },
            |(w, _)| format!("first differing entry: expected `{w}`"),
        );
    Some(format!("does not match the GGUF's tensors: {first}"))
}
