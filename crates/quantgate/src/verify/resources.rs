//! What each gate cost: wall time and the process's peak resident set while it ran, and the
//! memory verify needs before it starts.
//!
//! Peak RSS per gate is sampled: a thread reads the resident set (/proc/self/statm) every
//! 5 ms while the gate runs and keeps the largest. Resetting the kernel's high-water mark
//! instead (/proc/self/clear_refs) would also reset what `wait4` reports to a parent for the
//! whole process (`ru_maxrss`), which benches and protocol runs measure.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One gate's cost.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GateCost {
    /// Gate number (1, 2, 3).
    pub gate: u8,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// Peak resident set while the gate ran, MiB, sampled every 5 ms (file-backed pages of
    /// mapped models included, as the kernel counts them).
    pub peak_rss_mib: f64,
}

/// Runs `f` as gate `gate`, appending its cost to `out`.
pub fn measure<T>(gate: u8, out: &mut Vec<GateCost>, f: impl FnOnce() -> T) -> T {
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let (r, peak) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = rss_bytes();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
                peak = peak.max(rss_bytes());
            }
            peak
        });
        let r = f();
        stop.store(true, Ordering::Relaxed);
        (r, sampler.join().unwrap_or(0).max(rss_bytes()))
    });
    out.push(GateCost {
        gate,
        wall_s: t0.elapsed().as_secs_f64(),
        peak_rss_mib: peak as f64 / 1048576.0,
    });
    r
}

/// Resident set of this process now, bytes (/proc/self/statm field 2, in pages).
fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64
}

/// The value in kB of `field` in a /proc text (`VmHWM:   1234 kB`).
fn kib_field(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `MemAvailable` of /proc/meminfo, bytes (`None` where it cannot be read).
pub fn mem_available() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    kib_field(&s, "MemAvailable:").map(|k| k * 1024)
}

/// What verify will hold at its peak, bytes, from the tensor table: the largest group of
/// tensors the reference expands to f32 at once (one layer `blk.N.*`, or the embedding /
/// output matrix), 512 MiB for activations, tokenizers and logits, and what llama.cpp maps and
/// touches: the file itself, or for a block-quantized file the F32 expansion of every tensor
/// (4 bytes per element; the file is released before the expansion is loaded).
///
/// `tensors`: (name, element count) of every tensor; `file_bytes`: the GGUF's size;
/// `quantized`: whether any tensor is block-quantized.
pub fn estimate_need(tensors: &[(String, u64)], file_bytes: u64, quantized: bool) -> u64 {
    let mut groups: std::collections::BTreeMap<String, u64> = Default::default();
    for (name, n) in tensors {
        let key = match name.strip_prefix("blk.") {
            Some(rest) => format!("blk.{}", rest.split('.').next().unwrap_or("")),
            None => name.clone(),
        };
        *groups.entry(key).or_default() += n * 4;
    }
    let largest = groups.values().copied().max().unwrap_or(0);
    let mapped = if quantized {
        file_bytes.max(groups.values().sum())
    } else {
        file_bytes
    };
    mapped + largest + (512 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_the_file_plus_the_largest_layer_in_f32() {
        let t = vec![
            ("token_embd.weight".to_string(), 1000),
            ("blk.0.attn_q.weight".to_string(), 300),
            ("blk.0.ffn_up.weight".to_string(), 800),
            ("blk.1.attn_q.weight".to_string(), 300),
        ];
        // blk.0: 1100 elements = 4400 bytes, more than the embedding's 4000.
        assert_eq!(
            estimate_need(&t, 10_000, false),
            10_000 + 4400 + (512 << 20)
        );
        // Block-quantized: the F32 expansion of all 2400 elements (9600 bytes) replaces the
        // file when it is larger.
        assert_eq!(estimate_need(&t, 1_000, true), 9600 + 4400 + (512 << 20));
        assert_eq!(estimate_need(&t, 10_000, true), 10_000 + 4400 + (512 << 20));
    }

    #[test]
    fn a_gate_is_measured_with_its_own_peak() {
        let mut costs = Vec::new();
        let v = measure(2, &mut costs, || {
            // 64 MiB touched inside the gate.
            let b = vec![1u8; 64 << 20];
            b.iter().map(|x| *x as u64).sum::<u64>()
        });
        assert_eq!(v, 64 << 20);
        let c = &costs[0];
        assert_eq!(c.gate, 2);
        assert!(c.peak_rss_mib >= 64.0, "{c:?}");
        // The sampler ran beside the gate: a later gate that holds nothing is measured alone.
        let before = rss_bytes() as f64 / 1048576.0;
        measure(3, &mut costs, || {
            std::thread::sleep(Duration::from_millis(20))
        });
        assert!(costs[1].peak_rss_mib < before + 16.0, "{costs:?}");
        assert!(kib_field("VmHWM:\t  2048 kB\n", "VmHWM:") == Some(2048));
    }
}
