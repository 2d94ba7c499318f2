//! sha256 of files, streamed (never the whole file in memory).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// Lower-case hex sha256 of the file at `path`.
///
/// Errors: the file cannot be opened or read (the message names the path).
pub fn sha256_file(path: &Path) -> anyhow::Result<String> {
    // A FIFO or device (e.g. /dev/zero) would never end.
    crate::paths::ensure_regular_file(path)?;
    let mut f = File::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        crate::interrupt::check()?;
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// Lower-case hex sha256 of `bytes`.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `d` as lower-case hex, two digits a byte (how sha256sum and llama-gguf-hash print digests).
pub fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}
