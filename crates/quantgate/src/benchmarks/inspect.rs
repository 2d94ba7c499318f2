//! `bench inspect`: wall time of `inspect` (open, validate, sha256, render) on real files.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;

/// One file's timings.
#[derive(Clone, Debug)]
pub struct InspectTiming {
    /// File size, bytes.
    pub bytes: u64,
    /// Wall time per repetition, seconds.
    pub times_s: Vec<f64>,
}

/// Times `reps` full inspections of `file`.
///
/// Errors: the file cannot be opened or hashed.
pub fn run(file: &Path, reps: usize) -> Result<InspectTiming> {
    let mut times_s = Vec::new();
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let g = gguf::Gguf::open(file)?;
        let sha = crate::hash::sha256_file(file)?;
        let r = crate::inspect::inspect(&g, sha);
        std::hint::black_box(crate::inspect::render_text(&r, true));
        times_s.push(t.elapsed().as_secs_f64());
    }
    Ok(InspectTiming {
        bytes: std::fs::metadata(file)?.len(),
        times_s,
    })
}
