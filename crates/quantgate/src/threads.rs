//! llama.cpp's thread count, checked once where it enters: a CLI flag (`-t`/`--threads`, parsed
//! by clap through [`std::str::FromStr`]) or a protocol's `settings.threads` (serde). Past
//! that point it cannot be out of range, so nothing downstream re-checks it.

use serde::{Deserialize, Serialize};

/// A thread count in `1..=`[`Threads::MAX`]; serialized as the plain number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i32")]
pub struct Threads(i32);

/// A thread count out of range, with the value given.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0} threads: expected 1 to {max}", max = Threads::MAX)]
pub struct ThreadsError(pub i64);

impl Threads {
    /// The most threads accepted (far beyond any CPU this runs on; llama.cpp's own limit is
    /// `GGML_MAX_N_THREADS` = 512).
    pub const MAX: i32 = 512;

    /// The default of every `--threads` flag and of the demo: 2 (the CI machine's cores;
    /// llama.cpp's outputs are reproducible for one fixed count).
    pub const DEFAULT: Threads = Threads(2);

    /// `n` threads.
    ///
    /// Errors: `n` < 1 or > [`Threads::MAX`].
    pub fn new(n: i64) -> Result<Threads, ThreadsError> {
        if (1..=Self::MAX as i64).contains(&n) {
            Ok(Threads(n as i32))
        } else {
            Err(ThreadsError(n))
        }
    }

    /// The count as llama.cpp's `n_threads` takes it.
    pub fn get(self) -> i32 {
        self.0
    }
}

impl TryFrom<i64> for Threads {
    type Error = ThreadsError;
    fn try_from(n: i64) -> Result<Threads, ThreadsError> {
        Threads::new(n)
    }
}

impl From<Threads> for i32 {
    fn from(t: Threads) -> i32 {
        t.0
    }
}

impl std::str::FromStr for Threads {
    type Err = String;
    fn from_str(s: &str) -> Result<Threads, String> {
        let n: i64 = s
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: not a whole number of threads"))?;
        Threads::new(n).map_err(|e| e.to_string())
    }
}

impl std::fmt::Display for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_counts_in_range_are_threads() {
        assert_eq!("2".parse::<Threads>().unwrap().get(), 2);
        assert_eq!(Threads::new(512).unwrap().get(), 512);
        for bad in ["0", "-1", "513", "two", ""] {
            assert!(bad.parse::<Threads>().is_err(), "{bad:?}");
        }
        let t: Threads = serde_json::from_str("4").unwrap();
        assert_eq!(serde_json::to_string(&t).unwrap(), "4");
        assert!(serde_json::from_str::<Threads>("0").is_err());
        assert!(toml::from_str::<std::collections::BTreeMap<String, Threads>>("t = -3").is_err());
    }
}
