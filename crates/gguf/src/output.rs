//! The one rule every output path follows: only a missing path or a regular file is replaced.
//! A rename over a symlink, FIFO, device or folder would replace that object itself (run as
//! root, `-o /dev/null` would turn /dev/null into a regular file).

use std::path::Path;

use crate::{Error, Result};

/// What sits at an existing path, in words, when it is not a regular file.
fn kind(m: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    Some(if t.is_file() {
        return None;
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    })
}

/// Errors unless `path` is absent or a regular file (not followed through a symlink): the
/// only things an output may be renamed over.
///
/// Errors: [`Error::Io`] naming the path and what sits there (`InvalidInput`), or the OS error
/// of inspecting it.
pub fn ensure_replaceable(path: &Path) -> Result<()> {
    let io = |cause| Error::Io {
        path: path.to_path_buf(),
        cause,
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(e)),
        Ok(m) => match kind(&m) {
            None => Ok(()),
            Some(what) => Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("output exists and is {what}; only a regular file is replaced"),
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absent_paths_and_regular_files_are_replaceable() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        assert!(ensure_replaceable(&f).is_ok());
        std::fs::write(&f, b"x").unwrap();
        assert!(ensure_replaceable(&f).is_ok());
        let l = d.path().join("l");
        std::os::unix::fs::symlink(&f, &l).unwrap();
        let e = ensure_replaceable(&l).unwrap_err().to_string();
        assert!(e.contains("a symbolic link") && e.contains("/l"), "{e}");
        let e = ensure_replaceable(d.path()).unwrap_err().to_string();
        assert!(e.contains("a folder"), "{e}");
        let e = ensure_replaceable(Path::new("/dev/null"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/null: output exists and is a character device"),
            "{e}"
        );
        let fifo = d.path().join("p");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let e = ensure_replaceable(&fifo).unwrap_err().to_string();
        assert!(e.contains("a FIFO"), "{e}");
    }
}
