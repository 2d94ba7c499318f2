//! `bench dequant`: dequantization throughput of our Rust code vs ggml's
//! own `to_float`, single thread, measured side by side in one run with the arms alternated.

use std::time::Instant;

use gguf::{dequant, GgmlType};
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Types with both our dequantizer and a ggml `to_float`: every supported type but F32,
/// which ggml uses in place.
pub fn benched() -> Vec<GgmlType> {
    dequant::SUPPORTED
        .iter()
        .copied()
        .filter(|t| *t != GgmlType::F32)
        .collect()
}

/// One type's result.
#[derive(Clone, Debug, Serialize)]
pub struct DequantBenchRow {
    /// ggml type name.
    pub ggml_type: String,
    /// Elements dequantized per repetition.
    pub elements: usize,
    /// Median GB/s of f32 output, ours.
    pub ours_gbps: f64,
    /// Median GB/s of f32 output, ggml `to_float`.
    pub ggml_gbps: f64,
    /// ours / ggml.
    pub ratio: f64,
    /// Whether both outputs were bit-identical (u32 view) on the benchmark data.
    pub bit_identical: bool,
}

/// Seeded test data: `n` values ~ N(0, 1) with a few outliers, like real weights.
pub fn gaussian(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let u1: f32 = rng.gen_range(f32::EPSILON..1.0);
            let u2: f32 = rng.gen::<f32>();
            let z = (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos();
            if rng.gen_ratio(1, 1000) {
                z * 8.0
            } else {
                z
            }
        })
        .collect()
}

/// Encodes `x` (rows of `row` values) as type `ty`: ggml's quantizer for block types, exact
/// encodings for F32/F16/BF16, and a direct encoding for Q8_K (ggml has no row quantizer API
/// for it): d = amax/127 as f32, q = round(x/d), bsums = sums of 16 q.
pub fn encode(ty: GgmlType, x: &[f32], row: usize) -> Vec<u8> {
    match ty {
        GgmlType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => x
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_bits().to_le_bytes())
            .collect(),
        GgmlType::BF16 => x
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_bits().to_le_bytes())
            .collect(),
        GgmlType::Q8_K => {
            let mut out = Vec::with_capacity(x.len() / 256 * 292);
            for b in x.chunks_exact(256) {
                let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
                let d = if amax == 0.0 { 0.0 } else { amax / 127.0 };
                let q: Vec<i8> = b
                    .iter()
                    .map(|v| {
                        if d == 0.0 {
                            0
                        } else {
                            (v / d).round().clamp(-127.0, 127.0) as i8
                        }
                    })
                    .collect();
                out.extend_from_slice(&d.to_le_bytes());
                out.extend(q.iter().map(|v| *v as u8));
                for s in q.chunks_exact(16) {
                    let sum: i16 = s.iter().map(|v| *v as i16).sum();
                    out.extend_from_slice(&sum.to_le_bytes());
                }
            }
            out
        }
        _ => {
            llama_runtime::ggml_quantize(ty.id(), x, row).expect("ggml quantizer for a block type")
        }
    }
}

/// Runs the dequantization benchmark for every type ours supports (or those in `only`, if not
/// empty): `elements` per repetition,
/// `reps` repetitions per arm, arms alternated (ours, ggml, ours, ggml …), single thread.
pub fn bench_dequant(
    elements: usize,
    reps: usize,
    only: &[GgmlType],
    mut on_row: impl FnMut(&DequantBenchRow),
) -> Vec<DequantBenchRow> {
    let elements = elements.max(1).div_ceil(256) * 256;
    let x = gaussian(elements, 42);
    let mut rows = Vec::new();
    let types: Vec<GgmlType> = if only.is_empty() {
        benched()
    } else {
        only.to_vec()
    };
    for ty in types {
        let src = encode(ty, &x, 4096.min(elements));
        let mut ours = vec![0f32; elements];
        let mut theirs = vec![0f32; elements];
        // Warm-up both (page faults, caches).
        dequant::dequantize(ty, &src, &mut ours).expect("ours");
        llama_runtime::ggml_to_float(ty.id(), &src, &mut theirs).expect("ggml");
        let bit_identical = ours
            .iter()
            .zip(&theirs)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        let (mut t_ours, mut t_ggml) = (Vec::new(), Vec::new());
        for _ in 0..reps.max(1) {
            let t = Instant::now();
            dequant::dequantize(ty, &src, &mut ours).expect("ours");
            t_ours.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            llama_runtime::ggml_to_float(ty.id(), &src, &mut theirs).expect("ggml");
            t_ggml.push(t.elapsed().as_secs_f64());
        }
        let gb = elements as f64 * 4.0 / 1e9;
        let ours_gbps = gb / crate::stats::median(&t_ours);
        let ggml_gbps = gb / crate::stats::median(&t_ggml);
        let row = DequantBenchRow {
            ggml_type: ty.to_string(),
            elements,
            ours_gbps,
            ggml_gbps,
            ratio: ours_gbps / ggml_gbps,
            bit_identical,
        };
        on_row(&row);
        rows.push(row);
    }
    rows
}
