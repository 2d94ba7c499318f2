//! Golden vectors: our dequantizers against ggml's own `to_float` (llama-cpp-sys-2 =0.1.161),
//! compared as u32 bit patterns on seeded non-zero data — fully random block bytes (NaN, inf
//! and subnormal scales included) and ggml-quantized Gaussian rows — plus hand-computed blocks.

use gguf::{dequant, GgmlType};
use quantgate::benchmarks::dequant::{encode, gaussian};
use rand::{RngCore, SeedableRng};

fn ggml(ty: GgmlType, src: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    llama_runtime::ggml_to_float(ty.id(), src, &mut out).unwrap();
    out
}

fn assert_bits_equal(ty: GgmlType, what: &str, ours: &[f32], theirs: &[f32]) {
    assert_eq!(ours.len(), theirs.len());
    if let Some(i) = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        panic!(
            "{ty} {what}: element {i}: ours {:#010x} ({}), ggml {:#010x} ({})",
            ours[i].to_bits(),
            ours[i],
            theirs[i].to_bits(),
            theirs[i]
        );
    }
}

fn types() -> impl Iterator<Item = GgmlType> {
    dequant::SUPPORTED
        .iter()
        .copied()
        .filter(|t| *t != GgmlType::F32)
}

#[test]
fn random_blocks_match_ggml_bit_for_bit() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x9e37_79b9);
    for ty in types() {
        // 16 blocks: at least two super-blocks for every K-quant.
        let n_blocks = 16;
        let n = n_blocks * ty.block_size() as usize;
        let mut src = vec![0u8; n_blocks * ty.type_size() as usize];
        rng.fill_bytes(&mut src);
        assert!(src.iter().any(|b| *b != 0));
        let ours = dequant::dequantize_to_vec(ty, &src, n).unwrap();
        assert_bits_equal(ty, "random bytes", &ours, &ggml(ty, &src, n));
        assert!(
            ours.iter().any(|v| *v != 0.0),
            "{ty}: all-zero output hides bugs"
        );
    }
}

#[test]
fn ggml_quantized_rows_match_ggml_bit_for_bit() {
    let x = gaussian(4 * 1024, 7);
    for ty in types() {
        let src = encode(ty, &x, 1024);
        let ours = dequant::dequantize_to_vec(ty, &src, x.len()).unwrap();
        assert_bits_equal(ty, "quantized gaussian", &ours, &ggml(ty, &src, x.len()));
        // Sanity: the dequantized rows approximate the input (mean abs error well below 1σ).
        let mae: f32 =
            ours.iter().zip(&x).map(|(a, b)| (a - b).abs()).sum::<f32>() / x.len() as f32;
        assert!(mae < 0.45, "{ty}: mean abs error {mae}");
    }
}

#[test]
fn every_f16_and_bf16_bit_pattern_matches_ggml() {
    let src: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
    for ty in [GgmlType::F16, GgmlType::BF16] {
        let ours = dequant::dequantize_to_vec(ty, &src, 65536).unwrap();
        assert_bits_equal(ty, "exhaustive", &ours, &ggml(ty, &src, 65536));
    }
    // And against `half` as a third opinion on the non-NaN values.
    let ours = dequant::dequantize_to_vec(GgmlType::F16, &src, 65536).unwrap();
    for (h, v) in (0..=u16::MAX).zip(&ours) {
        let r = half::f16::from_bits(h).to_f32();
        if !r.is_nan() {
            assert_eq!(v.to_bits(), r.to_bits(), "f16 {h:#06x}");
        }
    }
}

#[test]
fn hand_computed_q4_0_and_q4_k_blocks() {
    // Q4_0: d = 0.5 (f16 0x3800); qs[j] = j | (15 − j) << 4 → y[j] = (j − 8)/2, y[j+16] = (7 − j)/2.
    let mut b = vec![0x00, 0x38];
    b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let y = dequant::dequantize_to_vec(GgmlType::Q4_0, &b, 32).unwrap();
    for j in 0..16 {
        assert_eq!(y[j], (j as f32 - 8.0) * 0.5);
        assert_eq!(y[j + 16], (7.0 - j as f32) * 0.5);
    }
    // Q4_K: d = 1.0, dmin = 0.5; sub-block 0 has scale 2, min 3 (scales[0] = 2, scales[4] = 3);
    // sub-block 5 (j ≥ 4 path) has scale 5 | 1<<4 = 21 (scales[9] low nibble 5, scales[1] bits
    // 6..7 = 1) and min 0; all codes q = 7. Sub-block 0: 2·7 − 1.5 = 12.5; sub-block 5: 21·7 = 147.
    let mut b = vec![0x00, 0x3c, 0x00, 0x38];
    let mut scales = [0u8; 12];
    scales[0] = 2;
    scales[4] = 3;
    scales[9] = 5;
    scales[1] = 1 << 6;
    b.extend_from_slice(&scales);
    b.extend(std::iter::repeat_n(0x77u8, 128));
    let y = dequant::dequantize_to_vec(GgmlType::Q4_K, &b, 256).unwrap();
    assert!(y[..32].iter().all(|v| *v == 12.5), "{:?}", &y[..4]);
    assert!(
        y[160..192].iter().all(|v| *v == 147.0),
        "{:?}",
        &y[160..164]
    );
    assert_bits_equal(
        GgmlType::Q4_K,
        "hand block",
        &y,
        &ggml(GgmlType::Q4_K, &b, 256),
    );
}

#[test]
fn our_type_table_matches_ggml_type_traits() {
    for ty in GgmlType::all() {
        let t = llama_runtime::type_traits(ty.id()).unwrap();
        assert_eq!(t.name, ty.ggml_name(), "{ty}");
        assert_eq!(t.block_size, ty.block_size(), "{ty}");
        assert_eq!(t.type_size, ty.type_size(), "{ty}");
    }
    // Removed ids have no block size in ggml either.
    for id in [4u32, 5] {
        assert_eq!(llama_runtime::type_traits(id).unwrap().block_size, 0);
        assert_eq!(GgmlType::from_id(id), None);
    }
    // Unsupported types give a clear error, not wrong numbers.
    let e = dequant::dequantize_to_vec(GgmlType::IQ2_XXS, &[0u8; 66], 256).unwrap_err();
    assert_eq!(e.to_string(), "dequantization of IQ2_XXS is not supported");
}

#[test]
fn our_encoders_match_ggml_quantize_chunk_bit_for_bit() {
    // Gaussian rows plus edge values: signed zeros, subnormals, f16 overflow, NaN, ties.
    let mut x = gaussian(32 * 64, 11);
    let edges = [
        0.0,
        -0.0,
        1e-8,
        6e-8,
        -6.1e-5,
        65504.0,
        65519.0,
        65520.0,
        1e6,
        f32::INFINITY,
        f32::NAN,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
        f32::from_bits(0x3f80_8000),
    ];
    x[..edges.len()].copy_from_slice(&edges);
    let mut ours = Vec::new();
    gguf::quant::encode_f16(&x, &mut ours);
    assert_eq!(
        ours,
        llama_runtime::ggml_quantize(GgmlType::F16.id(), &x, 64).unwrap(),
        "F16"
    );
    ours.clear();
    gguf::quant::encode_bf16(&x, &mut ours);
    assert_eq!(
        ours,
        llama_runtime::ggml_quantize(GgmlType::BF16.id(), &x, 64).unwrap(),
        "BF16"
    );
    // Q8_0 without inf/NaN (ggml's reference gives undefined int casts there).
    let finite: Vec<f32> = x
        .iter()
        .map(|v| if v.is_finite() { *v } else { 1.5 })
        .collect();
    ours.clear();
    gguf::quant_ref::quantize_q8_0(&finite, &mut ours);
    assert_eq!(
        ours,
        llama_runtime::ggml_quantize(GgmlType::Q8_0.id(), &finite, 64).unwrap(),
        "Q8_0"
    );
}
