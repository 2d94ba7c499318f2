//! Golden vectors for our reference quantizers (`gguf::quant_ref`): every type's bytes against
//! ggml's own `ggml_quantize_chunk` (llama-cpp-sys-2 =0.1.161, no imatrix), byte for byte, on
//! seeded Gaussian rows, outliers, zero / constant / subnormal / huge / grid-valued blocks,
//! non-finite values, and real weights (tensors of the fetched GGUF files, dequantized).

use crate::common;

use gguf::quant_ref::{self, quantize_ref_to_vec};
use gguf::{dequant, GgmlType, Gguf};
use quantgate::benchmarks::dequant::gaussian;
use rand::{Rng, SeedableRng};

fn types() -> impl Iterator<Item = GgmlType> {
    quant_ref::SUPPORTED.iter().copied()
}

fn ggml(ty: GgmlType, x: &[f32], n_per_row: usize) -> Vec<u8> {
    llama_runtime::ggml_quantize(ty.id(), x, n_per_row).unwrap()
}

/// `None` if identical, else a message naming the block and first differing byte.
fn difference(ty: GgmlType, ours: &[u8], theirs: &[u8]) -> Option<String> {
    if ours.len() != theirs.len() {
        return Some(format!("{ty}: {} bytes, ggml {}", ours.len(), theirs.len()));
    }
    let i = ours.iter().zip(theirs).position(|(a, b)| a != b)?;
    let ts = ty.type_size() as usize;
    let (blk, off) = (i / ts, i % ts);
    let block = |v: &[u8]| format!("{:02x?}", &v[blk * ts..(blk + 1) * ts]);
    Some(format!(
        "{ty}: block {blk} (elements {}..), byte {off}: ours {:#04x}, ggml {:#04x}\n  ours {}\n  ggml {}",
        blk * ty.block_size() as usize,
        ours[i],
        theirs[i],
        block(ours),
        block(theirs)
    ))
}

/// Asserts that our bytes for `x` equal ggml's, for every type.
fn check_all(what: &str, x: &[f32], n_per_row: usize) {
    for ty in types() {
        check(ty, what, x, n_per_row);
    }
}

fn check(ty: GgmlType, what: &str, x: &[f32], n_per_row: usize) {
    let ours = quantize_ref_to_vec(ty, x).unwrap();
    let theirs = ggml(ty, x, n_per_row);
    if let Some(msg) = difference(ty, &ours, &theirs) {
        panic!("{what} (n_per_row {n_per_row}): {msg}");
    }
}

#[test]
fn gaussian_rows_match_ggml() {
    for seed in [1u64, 2, 3, 0xdead_beef] {
        for n_per_row in [256usize, 512] {
            let x = gaussian(3 * n_per_row, seed);
            check_all(&format!("gaussian seed {seed}"), &x, n_per_row);
            // Other scales: small weights (typical of real tensors) and shifted rows.
            let small: Vec<f32> = x.iter().map(|v| v * 0.02).collect();
            check_all(&format!("gaussian·0.02 seed {seed}"), &small, n_per_row);
            let shifted: Vec<f32> = x.iter().map(|v| v + 3.0).collect();
            check_all(&format!("gaussian+3 seed {seed}"), &shifted, n_per_row);
        }
    }
}

#[test]
fn rows_with_outliers_match_ggml() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let mut x = gaussian(8 * 256, 5);
    for _ in 0..40 {
        let i = rng.gen_range(0..x.len());
        x[i] *= rng.gen_range(20.0..500.0) * if rng.gen_bool(0.5) { -1.0 } else { 1.0 };
    }
    check_all("outliers", &x, 512);
    // One huge value per 32-block, same sign everywhere / alternating.
    let mut y = gaussian(4 * 256, 6);
    for (b, c) in y.chunks_exact_mut(32).enumerate() {
        c[b % 32] = if b % 2 == 0 { 1e3 } else { -1e3 };
    }
    check_all("one outlier per block", &y, 256);
}

#[test]
fn zero_constant_and_degenerate_blocks_match_ggml() {
    check_all("all zero", &[0.0; 512], 256);
    check_all("all -0.0", &[-0.0; 512], 256);
    for c in [1.0f32, -1.0, 0.7, -1.3, 1e-3, -2.5e4, 65504.0] {
        check_all(&format!("constant {c}"), &[c; 512], 512);
    }
    // Mixed: zero 16-element sub-blocks, constant sub-blocks and Gaussian ones in a super-block.
    let g = gaussian(1024, 9);
    let mut x = g.clone();
    for (k, c) in x.chunks_exact_mut(16).enumerate() {
        match k % 5 {
            0 => c.fill(0.0),
            1 => c.fill(0.5),
            2 => c.fill(-0.25),
            3 => c[3..].fill(0.0),
            _ => {}
        }
    }
    check_all("mixed zero/constant sub-blocks", &x, 256);
    // A single non-zero value per super-block, and one per 32-block.
    let mut one = vec![0f32; 1024];
    one[17] = 0.3;
    one[300] = -7.0;
    one[700] = 1e-6;
    check_all("single non-zero", &one, 1024);
    let sparse: Vec<f32> = (0..1024)
        .map(|i| if i % 32 == 5 { (i as f32) - 500.0 } else { 0.0 })
        .collect();
    check_all("one per 32-block", &sparse, 256);
    // Two values only (±a), and all-positive / all-negative ramps.
    let two: Vec<f32> = (0..512)
        .map(|i| if i % 3 == 0 { 0.4 } else { -0.4 })
        .collect();
    check_all("two values", &two, 256);
    let ramp: Vec<f32> = (0..512).map(|i| i as f32 / 511.0).collect();
    check_all("positive ramp", &ramp, 512);
    let neg: Vec<f32> = ramp.iter().map(|v| -v - 1.0).collect();
    check_all("negative ramp", &neg, 512);
}

#[test]
fn tiny_and_huge_values_match_ggml() {
    let g = gaussian(1024, 21);
    for scale in [
        1e-40f32, 1e-38, 1e-30, 1e-20, 1e-15, 1e-10, 1e-7, 1e4, 1e6, 1e15,
    ] {
        let x: Vec<f32> = g.iter().map(|v| v * scale).collect();
        check_all(&format!("gaussian·{scale:e}"), &x, 512);
    }
    // Every value a subnormal (positive, negative, mixed), and subnormals next to normals.
    let sub: Vec<f32> = (0..512)
        .map(|i| f32::from_bits(1 + i as u32 * 997))
        .collect();
    check_all("positive subnormals", &sub, 256);
    let mixed: Vec<f32> = sub
        .iter()
        .enumerate()
        .map(|(i, v)| if i % 2 == 0 { *v } else { -*v })
        .collect();
    check_all("mixed-sign subnormals", &mixed, 256);
    let mut near = g[..512].to_vec();
    for (i, v) in near.iter_mut().enumerate() {
        if i % 64 < 32 {
            *v *= 1e-41;
        }
    }
    check_all("subnormal blocks next to normal ones", &near, 512);
    // Values whose f16 scale overflows or underflows.
    let big: Vec<f32> = g.iter().map(|v| v * 3e5).collect();
    check_all("f16 scale overflow", &big, 256);
}

#[test]
fn grid_values_with_rounding_ties_match_ggml() {
    // Integers and half-integers put many products exactly on .5 ties of nearest_int and of
    // the +8.5/+0.5 truncations.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(31);
    for (k, step) in [1.0f32, 0.5, 0.25, 0.125, 1.0 / 3.0]
        .into_iter()
        .enumerate()
    {
        let x: Vec<f32> = (0..1024)
            .map(|_| rng.gen_range(-16i32..=16) as f32 * step)
            .collect();
        check_all(&format!("grid {k}"), &x, 512);
        let pos: Vec<f32> = x.iter().map(|v| v.abs()).collect();
        check_all(&format!("non-negative grid {k}"), &pos, 256);
    }
}

#[test]
fn non_finite_values_match_ggml() {
    let g = gaussian(512, 41);
    for (name, bad) in [
        ("inf", f32::INFINITY),
        ("-inf", f32::NEG_INFINITY),
        ("nan", f32::NAN),
        ("max", f32::MAX),
        ("-max", f32::MIN),
    ] {
        let mut x = g.clone();
        x[3] = bad;
        x[63] = bad; // last of its 32-block: C's MAX(amax, NaN) keeps the NaN only there
        x[300] = bad;
        check_all(&format!("{name} values"), &x, 256);
    }
}

/// Tensors of the fetched GGUF files (scripts/fetch-models.sh), dequantized with our
/// bit-exact dequantizer: realistic value distributions (and, being on a quantization grid,
/// many exact ties).
#[test]
fn real_weights_match_ggml() {
    let dir = common::repo().join(".cache/models");
    let files = [
        "gemma-3-270m-q4_k_m.gguf",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
    ];
    let mut checked = 0;
    for file in files {
        let p = dir.join(file);
        // The test command fetches both: a missing file is a failure, never a silent pass.
        assert!(
            p.exists(),
            "{} is missing: run scripts/fetch-models.sh",
            p.display()
        );
        let g = Gguf::open(&p).unwrap();
        // A few tensors of every stored type: first and last blocks, attention and FFN.
        let mut per_type = std::collections::BTreeMap::<GgmlType, usize>::new();
        for t in &g.header.tensors {
            let seen = per_type.entry(t.ggml_type).or_default();
            if *seen >= 3 || !dequant::is_supported(t.ggml_type) {
                continue;
            }
            *seen += 1;
            let n: u64 = t.dims.iter().product();
            // At most 64 Ki values, whole 256-element blocks.
            let take = (n as usize).min(65536) / 256 * 256;
            if take == 0 {
                continue;
            }
            let bs = t.ggml_type.block_size() as usize;
            let n_src = take.div_ceil(bs) * bs;
            let src_bytes = n_src / bs * t.ggml_type.type_size() as usize;
            let all = g.tensor_data(t);
            let x = dequant::dequantize_to_vec(t.ggml_type, &all[..src_bytes], n_src).unwrap();
            let x = &x[..take];
            let row = t.dims[0] as usize;
            let n_per_row = if row.is_multiple_of(256) && take.is_multiple_of(row) {
                row
            } else {
                256
            };
            check_all(&format!("{file} {}", t.name), x, n_per_row);
            // And scaled, as a converter would see other checkpoints.
            let scaled: Vec<f32> = x.iter().map(|v| v * 0.37).collect();
            check_all(&format!("{file} {} ·0.37", t.name), &scaled, n_per_row);
            checked += 1;
        }
    }
    eprintln!("checked {checked} real tensors");
    // Three of each stored type of both files: Q4_K, Q6_K, Q4_1, F32 and more.
    assert!(checked >= 12, "only {checked} real tensors checked");
}

/// The comparison can fail: one changed input value changes the bytes, for every type.
#[test]
fn a_changed_input_value_changes_the_output() {
    let x = gaussian(512, 77);
    for ty in types() {
        let theirs = ggml(ty, &x, 256);
        assert!(difference(ty, &quantize_ref_to_vec(ty, &x).unwrap(), &theirs).is_none());
        for i in [0usize, 37, 300, 511] {
            let mut y = x.clone();
            y[i] = if y[i].abs() > 1.0 { -y[i] } else { y[i] + 2.5 };
            let ours = quantize_ref_to_vec(ty, &y).unwrap();
            let msg = difference(ty, &ours, &theirs)
                .unwrap_or_else(|| panic!("{ty}: changing element {i} went unnoticed"));
            let blk = i / ty.block_size() as usize;
            assert!(
                msg.contains(&format!("block {blk} ")),
                "{ty}: element {i} changed, but: {msg}"
            );
        }
    }
}
