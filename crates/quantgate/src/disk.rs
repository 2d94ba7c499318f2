//! Free disk space, checked before a step writes: convert, quantize and verify compute what
//! they will write and refuse up front, so they never fail half-way through a file.

use std::path::{Path, PathBuf};

/// Not enough free space for a step's output (the folder, what the step needs and what the
/// filesystem has free, bytes).
#[derive(Debug, thiserror::Error)]
#[error("{what} needs {} in {}, {} free", size(*.need), .dir.display(), size(*.free))]
pub struct NoSpace {
    /// What would write it.
    pub what: String,
    /// The folder written to.
    pub dir: PathBuf,
    /// Bytes the step writes there.
    pub need: u64,
    /// Bytes free for an unprivileged writer (`statvfs`: `f_bavail × f_frsize`).
    pub free: u64,
}

/// `31.9 GB`, or `12.3 MB` below 1 GB (decimal units, as `df -H`).
pub fn size(bytes: u64) -> String {
    if bytes >= 1_000_000_000 {
        format!("{:.1} GB", bytes as f64 / 1e9)
    } else {
        format!("{:.1} MB", bytes as f64 / 1e6)
    }
}

/// Bytes free to unprivileged writers on the filesystem of `dir` (`statvfs`: `f_bavail ×
/// f_frsize`). Errors: `dir` cannot be queried (e.g. it does not exist).
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::other("NUL byte in the path"))?;
    // SAFETY: a NUL-terminated path and a zeroed out-struct libc fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Refuses with [`NoSpace`] when the filesystem of `dir` has less than `need` bytes free.
///
/// Errors: [`NoSpace`]; `dir` cannot be queried (named).
pub fn ensure_free(dir: &Path, need: u64, what: &str) -> anyhow::Result<()> {
    let free = free_bytes(dir)
        .map_err(|e| anyhow::anyhow!("{}: cannot read its free space: {e}", dir.display()))?;
    if free < need {
        return Err(NoSpace {
            what: what.to_string(),
            dir: dir.to_path_buf(),
            need,
            free,
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_the_folder_and_both_figures() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_bytes(dir.path()).unwrap();
        assert!(free > 0);
        ensure_free(dir.path(), 1, "a test").unwrap();
        let e = ensure_free(dir.path(), u64::MAX, "verify's F32 expansion").unwrap_err();
        let msg = e.to_string();
        assert!(e.is::<NoSpace>());
        assert!(
            msg.starts_with("verify's F32 expansion needs 18446744073.7 GB in ")
                && msg.contains(&dir.path().display().to_string())
                && msg.ends_with(&format!("{} free", size(free))),
            "{msg}"
        );
        assert_eq!(size(31_900_000_000), "31.9 GB");
        assert_eq!(size(12_345_678), "12.3 MB");
        let gone = dir.path().join("missing");
        assert!(ensure_free(&gone, 1, "x")
            .unwrap_err()
            .to_string()
            .contains("missing"));
    }
}
