//! Encoders from f32 to the float types a converter writes: F16 and BF16 (Q8_0 is
//! [`crate::quant_ref::quantize_q8_0`]).
//!
//! Each reproduces ggml's reference bit for bit (so a GGUF we write equals the one ggml would
//! make from the same source): `ggml_compute_fp32_to_fp16` (the FP16 library's branch-free
//! round-to-nearest-even; NaN → 0x7E00 with the sign) and `ggml_compute_fp32_to_bf16` (RNE,
//! NaN forced quiet).

/// f32 → IEEE half bits, round to nearest even; overflow gives ±inf, NaN gives ±0x7E00.
#[inline]
pub fn f32_to_f16_bits(f: f32) -> u16 {
    let scale_to_inf = f32::from_bits(0x7780_0000); // 2^112
    let scale_to_zero = f32::from_bits(0x0880_0000); // 2^-110
    let mut base = (f.abs() * scale_to_inf) * scale_to_zero;
    let w = f.to_bits();
    let shl1_w = w.wrapping_add(w);
    let sign = w & 0x8000_0000;
    let bias = (shl1_w & 0xFF00_0000).max(0x7100_0000);
    base += f32::from_bits((bias >> 1) + 0x0780_0000);
    let bits = base.to_bits();
    let exp_bits = (bits >> 13) & 0x0000_7C00;
    let mantissa_bits = bits & 0x0000_0FFF;
    let nonsign = exp_bits + mantissa_bits;
    ((sign >> 16) as u16)
        | if shl1_w > 0xFF00_0000 {
            0x7E00
        } else {
            nonsign as u16
        }
}

/// f32 → bfloat16 bits, round to nearest even; NaN keeps its top bits and is forced quiet.
#[inline]
pub fn f32_to_bf16_bits(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// Encodes `x` as little-endian F16.
pub fn encode_f16(x: &[f32], out: &mut Vec<u8>) {
    out.reserve(x.len() * 2);
    for v in x {
        out.extend_from_slice(&f32_to_f16_bits(*v).to_le_bytes());
    }
}

/// Encodes `x` as little-endian BF16.
pub fn encode_bf16(x: &[f32], out: &mut Vec<u8>) {
    out.reserve(x.len() * 2);
    for v in x {
        out.extend_from_slice(&f32_to_bf16_bits(*v).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_encoding_rounds_to_nearest_even_and_saturates_to_inf() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(-2.0), 0xc000);
        assert_eq!(f32_to_f16_bits(65504.0), 0x7bff);
        assert_eq!(f32_to_f16_bits(65520.0), 0x7c00); // halfway above max → inf
        assert_eq!(f32_to_f16_bits(1.0 + 1.0 / 2048.0), 0x3c00); // tie → even
        assert_eq!(f32_to_f16_bits(1.0 + 3.0 / 2048.0), 0x3c02); // tie → even (up)
        assert_eq!(f32_to_f16_bits(f32::NAN), 0x7e00);
        assert_eq!(f32_to_f16_bits(-0.0), 0x8000);
        assert_eq!(f32_to_f16_bits(1e-8), 0x0000); // below the smallest subnormal (5.96e-8 / 2)
        assert_eq!(f32_to_f16_bits(6e-8), 0x0001);
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80); // tie → even
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
    }
}
