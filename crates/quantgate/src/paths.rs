//! Output paths: guards (an output must never be one of the command's inputs — writing it would
//! destroy the input, and a check comparing the output with "its source" would compare a file
//! with itself — and must not be a folder) and the one atomic writer every report uses.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// (device, inode) of an existing path, following symlinks.
fn identity(p: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// Errors if `output` exists and is not a regular file ([`gguf::ensure_replaceable`]: a
/// symlink, FIFO or device is never replaced), or is the same file as any of `inputs` (by device and
/// inode, so links and `a/../a` spellings count). A missing output is always distinct.
pub fn ensure_output_distinct(output: &Path, inputs: &[&Path]) -> Result<()> {
    if output.is_dir() {
        bail!("{}: output is a folder; give a file path", output.display());
    }
    gguf::ensure_replaceable(output)?;
    let Some(out_id) = identity(output) else {
        return Ok(());
    };
    for i in inputs {
        if identity(i) == Some(out_id) {
            bail!(
                "{}: output is the input {}; refusing to overwrite an input",
                output.display(),
                i.display()
            );
        }
    }
    Ok(())
}

/// Every regular file directly inside `dir` (the files a conversion may read).
pub fn files_in(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether an optional input file is there: `false` only when nothing is at the path. A
/// dangling symlink, a symlink loop or an unreadable folder is an error naming the path, never
/// "absent" (that would silently change the output).
///
/// Errors: the OS error of inspecting `p`, with the path.
pub fn present(p: &Path) -> Result<bool> {
    // One rule for the converter and the reference (which depends on nothing of ours).
    Ok(reference::present(p)?)
}

/// Errors unless `p` is a regular file (after symlinks): FIFOs, devices and folders would
/// block or never end when read.
pub fn ensure_regular_file(p: &Path) -> Result<()> {
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => bail!("{}: not a regular file", p.display()),
        Err(e) => bail!("{}: {e}", p.display()),
    }
}

/// Reads a regular file of at most `cap` bytes as UTF-8 text: a FIFO, a device (a symlink to
/// `/dev/zero`) or a file over the cap is refused instead of hanging or filling memory.
///
/// Errors: not a regular file, larger than `cap`, unreadable or not UTF-8 (naming the path).
pub fn read_text_capped(p: &Path, cap: u64) -> Result<String> {
    ensure_regular_file(p)?;
    let len = std::fs::metadata(p)?.len();
    if len > cap {
        bail!("{}: {len} bytes, more than the {cap} accepted", p.display());
    }
    std::fs::read_to_string(p).with_context(|| format!("{}", p.display()))
}

/// Writes `bytes` to `path` through a temp file in the same folder, synced, then renamed: a
/// reader never sees a partial file, and an interrupted write leaves the old file (or none).
///
/// Errors: the folder cannot be created, or the write, sync or rename fails (named by path).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    gguf::ensure_replaceable(path)?;
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    let mut tmp = tempfile::Builder::new()
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .tempfile_in(dir)
        .with_context(|| format!("{}: cannot create a temp file", dir.display()))?;
    std::io::Write::write_all(&mut tmp, bytes)
        .with_context(|| format!("{}: write failed", path.display()))?;
    tmp.as_file().sync_all()?;
    gguf::ensure_replaceable(path)?;
    tmp.persist(path)
        .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.error))?;
    Ok(())
}

/// An exclusive advisory lock (flock) on the file `p`, created if missing: `Ok(Some)` held
/// until the returned file is dropped, `Ok(None)` when another process holds it.
///
/// Errors: the file cannot be created or opened (naming it).
pub fn try_lock(p: &Path) -> Result<Option<std::fs::File>> {
    use std::os::unix::io::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(p)
        .with_context(|| format!("{}: cannot open", p.display()))?;
    // SAFETY: flock on a descriptor we own; released when the file is closed.
    let held = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    Ok(held.then_some(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_file_by_any_spelling_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a.gguf");
        std::fs::write(&a, b"x").unwrap();
        let b = d.path().join("b.gguf");
        assert!(ensure_output_distinct(&b, &[&a]).is_ok());
        let alias = d.path().join("sub/../a.gguf");
        std::fs::create_dir(d.path().join("sub")).unwrap();
        assert!(ensure_output_distinct(&alias, &[&a]).is_err());
        std::os::unix::fs::symlink(&a, &b).unwrap();
        assert!(ensure_output_distinct(&b, &[&a]).is_err());
        assert!(ensure_output_distinct(d.path(), &[&a]).is_err());
        assert!(ensure_regular_file(Path::new("/dev/zero")).is_err());
        assert!(ensure_regular_file(&a).is_ok());
    }

    #[test]
    fn a_symlink_loop_or_dangling_link_is_an_error_not_absent() {
        let d = tempfile::tempdir().unwrap();
        assert!(!present(&d.path().join("none.json")).unwrap());
        let l = d.path().join("tokenizer_config.json");
        std::os::unix::fs::symlink(&l, &l).unwrap();
        let e = present(&l).unwrap_err().to_string();
        assert!(e.contains("tokenizer_config.json"), "{e}");
        let dangling = d.path().join("x.json");
        std::os::unix::fs::symlink(d.path().join("gone"), &dangling).unwrap();
        assert!(present(&dangling).is_err());
        std::fs::write(d.path().join("gone"), b"{}").unwrap();
        assert!(present(&dangling).unwrap());
    }
}
