//! The container image a command runs in, as its executor names it: the Kubernetes Job and the
//! sbatch script of `quantgate sweep submit` set [`ENV`] to the image's digest, and every report
//! made under it records the digest (verify's and release's `image_digest`). Results depend on
//! the binary and its ggml CPU modules, which the digest pins.

use anyhow::{bail, Result};

/// The environment variable holding the digest (`sha256:` and 64 lowercase hex digits, as
/// OCI image IDs and `buildah inspect --format '{{.FromImageDigest}}'` spell it).
pub const ENV: &str = "QUANTGATE_IMAGE_DIGEST";

/// The digest of the image this process runs in, `None` outside one.
///
/// Errors: [`ENV`] is set but is not `sha256:` followed by 64 lowercase hex digits (a report
/// must not name an image it cannot pin).
pub fn digest() -> Result<Option<String>> {
    match std::env::var(ENV) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => bail!("{ENV}: not UTF-8"),
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => {
            if is_digest(&v) {
                Ok(Some(v))
            } else {
                bail!("{ENV}={v:?}: not an image digest (sha256: and 64 lowercase hex digits)")
            }
        }
    }
}

/// Whether `s` is `sha256:` followed by 64 lowercase hex digits.
pub fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests() {
        let d = format!("sha256:{}", "ab".repeat(32));
        assert!(is_digest(&d));
        assert!(!is_digest(&d.to_uppercase()));
        assert!(!is_digest(&d[..70]));
        assert!(!is_digest(&format!("sha512:{}", "ab".repeat(32))));
        assert!(!is_digest("quantgate:latest"));
    }
}
