//! ggml block layouts (`ggml/src/ggml-common.h`, `block_q4_0` … `block_q8_K`) as named structs,
//! with their sizes asserted at compile time and against the type table. Half-precision fields
//! are `[u8; 2]` (little-endian f16 bits), so no struct has padding and `size_of` is the
//! on-disk block size. The dequantizers and reference quantizers take their block sizes from
//! here, never from literals.

use std::mem::size_of;

/// Elements per block of the 32-wide types (`QK4_0`, `QK4_1`, `QK5_0`, `QK5_1`, `QK8_0`).
pub const QK: usize = 32;
/// Elements per K-quant super-block (`QK_K`).
pub const QK_K: usize = 256;
/// Bytes of the packed 6-bit scales/mins of Q4_K and Q5_K (`K_SCALE_SIZE`).
pub const K_SCALE_SIZE: usize = 12;

/// `block_q4_0`: 32 elements, value = d · (q − 8).
#[repr(C)]
pub struct BlockQ4_0 {
    /// Scale (f16).
    pub d: [u8; 2],
    /// 4-bit codes: element j in the low nibble of byte j, element j + 16 in the high nibble.
    pub qs: [u8; QK / 2],
}

/// `block_q4_1`: 32 elements, value = d · q + m.
#[repr(C)]
pub struct BlockQ4_1 {
    /// Scale (f16).
    pub d: [u8; 2],
    /// Minimum (f16).
    pub m: [u8; 2],
    /// 4-bit codes, nibbles as in [`BlockQ4_0`].
    pub qs: [u8; QK / 2],
}

/// `block_q5_0`: 32 elements, value = d · (q − 16).
#[repr(C)]
pub struct BlockQ5_0 {
    /// Scale (f16).
    pub d: [u8; 2],
    /// Fifth bits, bit j for element j.
    pub qh: [u8; 4],
    /// Low nibbles, as in [`BlockQ4_0`].
    pub qs: [u8; QK / 2],
}

/// `block_q5_1`: 32 elements, value = d · q + m.
#[repr(C)]
pub struct BlockQ5_1 {
    /// Scale (f16).
    pub d: [u8; 2],
    /// Minimum (f16).
    pub m: [u8; 2],
    /// Fifth bits.
    pub qh: [u8; 4],
    /// Low nibbles.
    pub qs: [u8; QK / 2],
}

/// `block_q8_0`: 32 elements, value = d · q.
#[repr(C)]
pub struct BlockQ8_0 {
    /// Scale (f16).
    pub d: [u8; 2],
    /// Signed 8-bit codes.
    pub qs: [i8; QK],
}

/// `block_q2_K`: 256 elements in 16 groups of 16.
#[repr(C)]
pub struct BlockQ2K {
    /// 4-bit scale (low) and min (high) per group.
    pub scales: [u8; QK_K / 16],
    /// 2-bit codes.
    pub qs: [u8; QK_K / 4],
    /// Super-block scale of the scales (f16).
    pub d: [u8; 2],
    /// Super-block scale of the mins (f16).
    pub dmin: [u8; 2],
}

/// `block_q3_K`: 256 elements in 16 groups of 16.
#[repr(C)]
pub struct BlockQ3K {
    /// High bits of the 3-bit codes.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits of the codes.
    pub qs: [u8; QK_K / 4],
    /// 6-bit scales, packed.
    pub scales: [u8; 12],
    /// Super-block scale (f16).
    pub d: [u8; 2],
}

/// `block_q4_K`: 256 elements in 8 groups of 32.
#[repr(C)]
pub struct BlockQ4K {
    /// Super-block scale of the scales (f16).
    pub d: [u8; 2],
    /// Super-block scale of the mins (f16).
    pub dmin: [u8; 2],
    /// 6-bit scales and mins, packed ([`get_scale_min_k4`]).
    pub scales: [u8; K_SCALE_SIZE],
    /// 4-bit codes.
    pub qs: [u8; QK_K / 2],
}

/// `block_q5_K`: 256 elements in 8 groups of 32.
#[repr(C)]
pub struct BlockQ5K {
    /// Super-block scale of the scales (f16).
    pub d: [u8; 2],
    /// Super-block scale of the mins (f16).
    pub dmin: [u8; 2],
    /// 6-bit scales and mins, packed ([`get_scale_min_k4`]).
    pub scales: [u8; K_SCALE_SIZE],
    /// Fifth bits.
    pub qh: [u8; QK_K / 8],
    /// Low nibbles.
    pub qs: [u8; QK_K / 2],
}

/// `block_q6_K`: 256 elements in 16 groups of 16.
#[repr(C)]
pub struct BlockQ6K {
    /// Low 4 bits of the codes.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of the codes.
    pub qh: [u8; QK_K / 4],
    /// 8-bit signed scales.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale (f16).
    pub d: [u8; 2],
}

/// `block_q8_K`: 256 elements (the CPU backend's activation type for K-quant matmuls).
#[repr(C)]
pub struct BlockQ8K {
    /// Scale (f32).
    pub d: [u8; 4],
    /// Signed 8-bit codes.
    pub qs: [i8; QK_K],
    /// Sums of groups of 16 codes.
    pub bsums: [i16; QK_K / 16],
}

/// Bytes per block, from the layouts above.
pub const Q4_0_BYTES: usize = size_of::<BlockQ4_0>();
/// Bytes per block of Q4_1.
pub const Q4_1_BYTES: usize = size_of::<BlockQ4_1>();
/// Bytes per block of Q5_0.
pub const Q5_0_BYTES: usize = size_of::<BlockQ5_0>();
/// Bytes per block of Q5_1.
pub const Q5_1_BYTES: usize = size_of::<BlockQ5_1>();
/// Bytes per block of Q8_0.
pub const Q8_0_BYTES: usize = size_of::<BlockQ8_0>();
/// Bytes per block of Q2_K.
pub const Q2_K_BYTES: usize = size_of::<BlockQ2K>();
/// Bytes per block of Q3_K.
pub const Q3_K_BYTES: usize = size_of::<BlockQ3K>();
/// Bytes per block of Q4_K.
pub const Q4_K_BYTES: usize = size_of::<BlockQ4K>();
/// Bytes per block of Q5_K.
pub const Q5_K_BYTES: usize = size_of::<BlockQ5K>();
/// Bytes per block of Q6_K.
pub const Q6_K_BYTES: usize = size_of::<BlockQ6K>();
/// Bytes per block of Q8_K.
pub const Q8_K_BYTES: usize = size_of::<BlockQ8K>();
/// Bytes per block of IQ4_NL (`block_iq4_nl`: d f16, qs[16]).
pub const IQ4_NL_BYTES: usize = 2 + QK / 2;
/// Bytes per block of IQ4_XS (`block_iq4_xs`: d f16, scales_h u16, scales_l[4], qs[128]).
pub const IQ4_XS_BYTES: usize = 2 + 2 + QK_K / 64 + QK_K / 2;

// ggml-common.h's static_asserts, restated.
const _: () = assert!(Q4_0_BYTES == 18);
const _: () = assert!(Q4_1_BYTES == 20);
const _: () = assert!(Q5_0_BYTES == 22);
const _: () = assert!(Q5_1_BYTES == 24);
const _: () = assert!(Q8_0_BYTES == 34);
const _: () = assert!(Q2_K_BYTES == 84);
const _: () = assert!(Q3_K_BYTES == 110);
const _: () = assert!(Q4_K_BYTES == 144);
const _: () = assert!(Q5_K_BYTES == 176);
const _: () = assert!(Q6_K_BYTES == 210);
const _: () = assert!(Q8_K_BYTES == 292);
const _: () = assert!(IQ4_NL_BYTES == 18);
const _: () = assert!(IQ4_XS_BYTES == 136);

/// ggml-quants.c `get_scale_min_k4`: the 6-bit (scale, min) pair `j` (0..8) of a Q4_K/Q5_K
/// `scales[12]` array. Used by both the dequantizers and the reference quantizers.
#[inline(always)]
pub fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgmlType as T;

    #[test]
    fn layouts_match_the_type_table() {
        for (t, bytes, bs) in [
            (T::Q4_0, Q4_0_BYTES, QK),
            (T::Q4_1, Q4_1_BYTES, QK),
            (T::Q5_0, Q5_0_BYTES, QK),
            (T::Q5_1, Q5_1_BYTES, QK),
            (T::Q8_0, Q8_0_BYTES, QK),
            (T::Q2_K, Q2_K_BYTES, QK_K),
            (T::Q3_K, Q3_K_BYTES, QK_K),
            (T::Q4_K, Q4_K_BYTES, QK_K),
            (T::Q5_K, Q5_K_BYTES, QK_K),
            (T::Q6_K, Q6_K_BYTES, QK_K),
            (T::Q8_K, Q8_K_BYTES, QK_K),
            (T::IQ4_NL, IQ4_NL_BYTES, QK),
            (T::IQ4_XS, IQ4_XS_BYTES, QK_K),
        ] {
            assert_eq!(t.type_size() as usize, bytes, "{t:?}");
            assert_eq!(t.block_size() as usize, bs, "{t:?}");
        }
    }

    #[test]
    fn scale_min_k4_unpacks_high_bits() {
        let mut q = [0u8; 12];
        q[0] = 0b1100_0001; // scale 0 = 1, high bits of scale 4 = 3
        q[8] = 0x52; // scale 4 low = 2, min 4 low = 5
        assert_eq!(get_scale_min_k4(0, &q), (1, 0));
        assert_eq!(get_scale_min_k4(4, &q), (2 | (3 << 4), 5));
    }
}
