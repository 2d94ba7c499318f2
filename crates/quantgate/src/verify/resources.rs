//! What each gate cost: wall time and the process's peak resident set while it ran, and the
//! memory verify needs before it starts.
//!
//! Peak RSS per gate is sampled: a thread reads the resident set (/proc/self/statm) every
//! 5 ms while the gate runs and keeps the largest, of all pages and of anonymous ones
//! (resident − shared: statm's `shared` counts file-backed and shmem pages, the rest are
//! anonymous). File-backed pages of a mapped model are reclaimable (llama.cpp maps, never
//! locks: `use_mmap` on, `use_mlock` off); anonymous ones are what the machine must hold. Resetting the kernel's high-water mark
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
    /// Peak anonymous resident memory while the gate ran, MiB (RssAnon: heap, llama.cpp's
    /// compute and repacked weight buffers; not the mapped files). 0 in reports written
    /// before it was measured.
    #[serde(default)]
    pub peak_anon_mib: f64,
}

/// Runs `f` as gate `gate`, appending its cost to `out`.
pub fn measure<T>(gate: u8, out: &mut Vec<GateCost>, f: impl FnOnce() -> T) -> T {
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let (r, peak) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut peak = resident();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
                peak = peak.max(resident());
            }
            peak
        });
        let r = f();
        stop.store(true, Ordering::Relaxed);
        (r, sampler.join().unwrap_or_default().max(resident()))
    });
    let mib = |b: u64| b as f64 / 1048576.0;
    out.push(GateCost {
        gate,
        wall_s: t0.elapsed().as_secs_f64(),
        peak_rss_mib: mib(peak.all),
        peak_anon_mib: mib(peak.anon),
    });
    r
}

/// Resident bytes: all, and anonymous.
#[derive(Clone, Copy, Default, Debug)]
pub struct Resident {
    /// Every resident page.
    pub all: u64,
    /// Anonymous pages (resident − shared).
    pub anon: u64,
}

impl Resident {
    /// The larger of each figure.
    fn max(self, o: Resident) -> Resident {
        Resident {
            all: self.all.max(o.all),
            anon: self.anon.max(o.anon),
        }
    }
}

/// This process's resident memory now (/proc/self/statm fields 2 and 3, in pages).
pub fn resident() -> Resident {
    let text = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let mut f = text
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse::<u64>().unwrap_or(0));
    let (all, shared) = (f.next().unwrap_or(0), f.next().unwrap_or(0));
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    Resident {
        all: all * page,
        anon: all.saturating_sub(shared) * page,
    }
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

/// The anonymous memory verify will hold at its peak, bytes, from the tensor table: what the
/// machine must have available (`MemAvailable`). Mapped files are not counted: llama.cpp maps
/// the GGUF and the F32 expansion's slices without locking them, so their pages are
/// reclaimable page cache, and the reference reads the HF weights through a mapping too.
///
/// The terms:
/// - the largest group of tensors the reference expands to f32 at once: one layer `blk.N.*`,
///   or the embedding / output matrix;
/// - the weights llama.cpp's CPU backend repacks into anonymous buffers when it loads the file
///   as shipped (`ggml_repack_get_optimal_repack_type` of ggml-cpu/repack.cpp: on x86 with
///   AVX2, matrices of Q4_0, Q4_K, IQ4_NL and MXFP4, and Q2_K with AVX-512, whose rows come
///   in multiples of 8; `token_embd.weight` is read by `get_rows`, never repacked);
/// - the logits of a 512-token context (llama.cpp's output buffer and the reference's, f32,
///   `n_vocab` per position), and 512 MiB for activations, KV cache and tokenizers.
///
/// `avx512`: whether the CPU backend that will run has AVX-512 (Q2_K is repacked then).
pub fn estimate_need(tensors: &[gguf::TensorInfo], avx512: bool) -> u64 {
    use gguf::GgmlType as T;
    let mut groups: std::collections::BTreeMap<String, u64> = Default::default();
    let mut repacked = 0;
    let mut n_vocab = 0;
    for t in tensors {
        let key = match t.name.strip_prefix("blk.") {
            Some(rest) => format!("blk.{}", rest.split('.').next().unwrap_or("")),
            None => t.name.clone(),
        };
        *groups.entry(key).or_default() += t.n_elements() * 4;
        let repackable = matches!(t.ggml_type, T::Q4_0 | T::Q4_K | T::IQ4_NL | T::MXFP4)
            || (avx512 && t.ggml_type == T::Q2_K);
        if repackable && t.name != "token_embd.weight" && t.ne()[1] % 8 == 0 {
            repacked += t.n_bytes;
        }
        if t.name == "token_embd.weight" {
            n_vocab = t.ne()[1];
        }
    }
    let largest = groups.values().copied().max().unwrap_or(0);
    largest + repacked + 2 * 512 * n_vocab * 4 + (512 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, ggml_type: gguf::GgmlType, dims: &[u64]) -> gguf::TensorInfo {
        let n_bytes = gguf::tensor_n_bytes(ggml_type, dims).unwrap();
        gguf::TensorInfo {
            name: name.into(),
            ggml_type,
            dims: dims.to_vec(),
            offset: 0,
            n_bytes,
        }
    }

    #[test]
    fn the_estimate_is_the_largest_f32_group_the_repacked_weights_and_the_logits() {
        use gguf::GgmlType as T;
        let t = vec![
            // 1000 tokens × 256: 1 MB in f32, read by get_rows (never repacked).
            info("token_embd.weight", T::Q4_K, &[256, 1000]),
            info("blk.0.attn_q.weight", T::Q4_K, &[256, 256]),
            info("blk.0.ffn_up.weight", T::Q6_K, &[256, 1024]),
            // 4 rows: not a multiple of 8, not repacked.
            info("blk.1.attn_q.weight", T::Q4_K, &[256, 4]),
            info("blk.1.ffn_up.weight", T::Q2_K, &[256, 8]),
        ];
        let logits = 2 * 512 * 1000 * 4;
        // blk.0: 1280 × 256 × 4 bytes, more than the embedding's 1000 × 256 × 4.
        let largest = 1280 * 256 * 4;
        let q4_k = 256 * 144; // 256 rows of one Q4_K block
        assert_eq!(
            estimate_need(&t, false),
            largest + q4_k + logits + (512 << 20)
        );
        // With AVX-512 the Q2_K matrix (8 rows of 84 bytes) is repacked too.
        assert_eq!(
            estimate_need(&t, true),
            largest + q4_k + 8 * 84 + logits + (512 << 20)
        );
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
        // The buffer is anonymous memory.
        assert!(c.peak_anon_mib >= 64.0, "{c:?}");
        // The sampler ran beside the gate: a later gate that holds nothing is measured alone.
        let before = resident().all as f64 / 1048576.0;
        measure(3, &mut costs, || {
            std::thread::sleep(Duration::from_millis(20))
        });
        assert!(costs[1].peak_rss_mib < before + 16.0, "{costs:?}");
        assert!(kib_field("VmHWM:\t  2048 kB\n", "VmHWM:") == Some(2048));
    }
}
