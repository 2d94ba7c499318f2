//! The ggml type table: id, name, elements per block and bytes per block for every type a GGUF
//! tensor info can name.
//!
//! Source: `ggml/include/ggml.h` (`enum ggml_type`) and the `type_traits` table in
//! `ggml/src/ggml.c` of the llama.cpp vendored by llama-cpp-sys-2 0.1.161 (see also
//! `docs/llamacpp-spec.md` §5). Ids 4, 5 (removed Q4_2/Q4_3), 31–33 and 36–38
//! (removed Q4_0_4_4 … IQ4_NL_8_8 repacks) are not valid in a file.

use std::fmt;

/// One ggml tensor type. The discriminant is the id stored in a GGUF tensor info.
///
/// Each variant is `GGML_TYPE_<NAME>` of `enum ggml_type` (`ggml/include/ggml.h`). Its doc gives
/// the block struct and layout from `ggml/src/ggml-common.h` (fields in storage order, `d` = f16
/// scale) and elements/bytes per block as in the `type_traits` table of `ggml/src/ggml.c`; the
/// dequantization formulas are those of `dequantize_row_*` in `ggml/src/ggml-quants.c`.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    /// `GGML_TYPE_F32`: IEEE 754 binary32, 4 bytes per element (block size 1).
    F32 = 0,
    /// `GGML_TYPE_F16`: IEEE 754 binary16 (`ggml_half`), 2 bytes per element (block size 1).
    F16 = 1,
    /// `block_q4_0`: 32 elements in 18 bytes: f16 scale `d`, 16 bytes of 4-bit quants;
    /// `x = d·(q − 8)`.
    Q4_0 = 2,
    /// `block_q4_1`: 32 elements in 20 bytes: f16 `d` and min `m`, 16 bytes of 4-bit quants;
    /// `x = d·q + m`.
    Q4_1 = 3,
    /// `block_q5_0`: 32 elements in 22 bytes: f16 `d`, `qh[4]` (5th bits), 16 bytes of nibbles;
    /// `x = d·(q − 16)`.
    Q5_0 = 6,
    /// `block_q5_1`: 32 elements in 24 bytes: f16 `d` and `m`, `qh[4]`, 16 bytes of nibbles;
    /// `x = d·q + m`.
    Q5_1 = 7,
    /// `block_q8_0`: 32 elements in 34 bytes: f16 `d`, 32 `int8_t` quants; `x = d·q`.
    Q8_0 = 8,
    /// `block_q8_1`: 32 elements in 36 bytes: f16 `d`, f16 `s = d·Σq`, 32 `int8_t` quants.
    /// A dot-product intermediate: ggml's `type_traits` has no `to_float` for it.
    Q8_1 = 9,
    /// `block_q2_K`: 256 (`QK_K`) elements in 84 bytes: 16 bytes of 4-bit scales/mins, 64 bytes of
    /// 2-bit quants, f16 `d` and `dmin` (2.625 bits per weight).
    Q2_K = 10,
    /// `block_q3_K`: 256 elements in 110 bytes: `hmask[32]` (high bits), 64 bytes of low 2 bits,
    /// 12 bytes of 6-bit scales, f16 `d` (3.4375 bits per weight).
    Q3_K = 11,
    /// `block_q4_K`: 256 elements in 144 bytes: f16 `d` and `dmin`, 12 bytes of 6-bit scales and
    /// mins (8 sub-blocks of 32), 128 bytes of 4-bit quants (4.5 bits per weight).
    Q4_K = 12,
    /// `block_q5_K`: 256 elements in 176 bytes: f16 `d` and `dmin`, 12 bytes of 6-bit scales and
    /// mins, `qh[32]` (high bits), 128 bytes of low 4 bits (5.5 bits per weight).
    Q5_K = 13,
    /// `block_q6_K`: 256 elements in 210 bytes: `ql[128]` (low 4 bits), `qh[64]` (upper 2 bits),
    /// 16 `int8_t` scales (sub-blocks of 16), f16 `d` (6.5625 bits per weight).
    Q6_K = 14,
    /// `block_q8_K`: 256 elements in 292 bytes: f32 `d`, 256 `int8_t` quants, 16 `int16_t` `bsums`.
    /// The K-quant dot-product intermediate: ggml's `type_traits` has no `to_float` for it.
    Q8_K = 15,
    /// `block_iq2_xxs`: 256 elements in 66 bytes: f16 `d`, 32 `uint16_t` of grid indices, signs and
    /// scales (2.0625 bits per weight).
    IQ2_XXS = 16,
    /// `block_iq2_xs`: 256 elements in 74 bytes: f16 `d`, 32 `uint16_t` `qs`, `scales[8]`
    /// (2.3125 bits per weight).
    IQ2_XS = 17,
    /// `block_iq3_xxs`: 256 elements in 98 bytes: f16 `d`, 96 bytes of grid indices, signs and
    /// scales (3.0625 bits per weight).
    IQ3_XXS = 18,
    /// `block_iq1_s`: 256 elements in 50 bytes: f16 `d`, `qs[32]`, 8 `uint16_t` `qh`
    /// (1.5625 bits per weight).
    IQ1_S = 19,
    /// `block_iq4_nl`: 32 elements in 18 bytes: f16 `d`, 16 bytes of 4-bit indices into the
    /// non-linear `kvalues_iq4nl` table (4.5 bits per weight).
    IQ4_NL = 20,
    /// `block_iq3_s`: 256 elements in 110 bytes: f16 `d`, `qs[64]`, `qh[8]`, `signs[32]`,
    /// `scales[4]` (3.4375 bits per weight).
    IQ3_S = 21,
    /// `block_iq2_s`: 256 elements in 82 bytes: f16 `d`, `qs[64]` (grid indices, then signs),
    /// `qh[8]`, `scales[8]` (2.5625 bits per weight).
    IQ2_S = 22,
    /// `block_iq4_xs`: 256 elements in 136 bytes: f16 `d`, `uint16_t scales_h`, `scales_l[4]`,
    /// 128 bytes of 4-bit `kvalues_iq4nl` indices (4.25 bits per weight).
    IQ4_XS = 23,
    /// `GGML_TYPE_I8`: `int8_t`, 1 byte per element (block size 1).
    I8 = 24,
    /// `GGML_TYPE_I16`: little-endian `int16_t`, 2 bytes per element (block size 1).
    I16 = 25,
    /// `GGML_TYPE_I32`: little-endian `int32_t`, 4 bytes per element (block size 1).
    I32 = 26,
    /// `GGML_TYPE_I64`: little-endian `int64_t`, 8 bytes per element (block size 1).
    I64 = 27,
    /// `GGML_TYPE_F64`: IEEE 754 binary64, 8 bytes per element (block size 1).
    F64 = 28,
    /// `block_iq1_m`: 256 elements in 56 bytes: `qs[32]`, `qh[16]`, `scales[8]`; no separate `d`:
    /// the f16 super-block scale is packed into the top bits of `scales` (1.75 bits per weight).
    IQ1_M = 29,
    /// `GGML_TYPE_BF16`: bfloat16 (`ggml_bf16_t`, the top half of an f32), 2 bytes per element.
    BF16 = 30,
    /// `block_tq1_0`: ternary, 256 elements in 54 bytes: `qs[48]` (5 trits per byte), `qh[4]`,
    /// f16 `d` (1.6875 bits per weight).
    TQ1_0 = 34,
    /// `block_tq2_0`: ternary, 256 elements in 66 bytes: `qs[64]` (2 bits per element), f16 `d`
    /// (2.0625 bits per weight).
    TQ2_0 = 35,
    /// `block_mxfp4`: 32 elements in 17 bytes: one E8M0 scale `e`, 16 bytes of 4-bit E2M1 values
    /// (4.25 bits per weight).
    MXFP4 = 39,
    /// `block_nvfp4`: 64 elements in 36 bytes: 4 UE4M3 scales (one per 16-element sub-block),
    /// 32 bytes of 4-bit E2M1 values (4.5 bits per weight).
    NVFP4 = 40,
    /// `block_q1_0`: 128 elements in 18 bytes: f16 `d`, 16 bytes of sign bits; `x = ±d`
    /// (1.125 bits per weight).
    Q1_0 = 41,
    /// `block_q2_0`: 64 elements in 18 bytes: f16 `d`, 16 bytes of 2-bit quants; `x = d·(q − 1)`
    /// (2.25 bits per weight).
    Q2_0 = 42,
}

/// (type, name, elements per block, bytes per block), per ggml.c `type_traits`.
const TABLE: &[(GgmlType, &str, u64, u64)] = &[
    (GgmlType::F32, "f32", 1, 4),
    (GgmlType::F16, "f16", 1, 2),
    (GgmlType::Q4_0, "q4_0", 32, 18),
    (GgmlType::Q4_1, "q4_1", 32, 20),
    (GgmlType::Q5_0, "q5_0", 32, 22),
    (GgmlType::Q5_1, "q5_1", 32, 24),
    (GgmlType::Q8_0, "q8_0", 32, 34),
    (GgmlType::Q8_1, "q8_1", 32, 36),
    (GgmlType::Q2_K, "q2_K", 256, 84),
    (GgmlType::Q3_K, "q3_K", 256, 110),
    (GgmlType::Q4_K, "q4_K", 256, 144),
    (GgmlType::Q5_K, "q5_K", 256, 176),
    (GgmlType::Q6_K, "q6_K", 256, 210),
    (GgmlType::Q8_K, "q8_K", 256, 292),
    (GgmlType::IQ2_XXS, "iq2_xxs", 256, 66),
    (GgmlType::IQ2_XS, "iq2_xs", 256, 74),
    (GgmlType::IQ3_XXS, "iq3_xxs", 256, 98),
    (GgmlType::IQ1_S, "iq1_s", 256, 50),
    (GgmlType::IQ4_NL, "iq4_nl", 32, 18),
    (GgmlType::IQ3_S, "iq3_s", 256, 110),
    (GgmlType::IQ2_S, "iq2_s", 256, 82),
    (GgmlType::IQ4_XS, "iq4_xs", 256, 136),
    (GgmlType::I8, "i8", 1, 1),
    (GgmlType::I16, "i16", 1, 2),
    (GgmlType::I32, "i32", 1, 4),
    (GgmlType::I64, "i64", 1, 8),
    (GgmlType::F64, "f64", 1, 8),
    (GgmlType::IQ1_M, "iq1_m", 256, 56),
    (GgmlType::BF16, "bf16", 1, 2),
    (GgmlType::TQ1_0, "tq1_0", 256, 54),
    (GgmlType::TQ2_0, "tq2_0", 256, 66),
    (GgmlType::MXFP4, "mxfp4", 32, 17),
    (GgmlType::NVFP4, "nvfp4", 64, 36),
    (GgmlType::Q1_0, "q1_0", 128, 18),
    (GgmlType::Q2_0, "q2_0", 64, 18),
];

impl GgmlType {
    /// Every valid type, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TABLE.iter().map(|row| row.0)
    }

    /// The type with GGUF/ggml id `id`, or `None` for an unknown or removed id.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TABLE.iter().find(|row| row.0 as u32 == id).map(|row| row.0)
    }

    /// Parses a type name as ggml spells it (`q4_K`) or in upper case (`Q4_K`).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TABLE
            .iter()
            .find(|row| row.1.eq_ignore_ascii_case(name))
            .map(|row| row.0)
    }

    fn row(self) -> &'static (GgmlType, &'static str, u64, u64) {
        // Every variant has exactly one row (checked by a unit test).
        TABLE
            .iter()
            .find(|row| row.0 == self)
            .expect("type table row")
    }

    /// The id stored in a GGUF tensor info.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// ggml's own name (`ggml_type_name`), e.g. `q4_K`.
    pub fn ggml_name(self) -> &'static str {
        self.row().1
    }

    /// Elements per block (`ggml_blck_size`).
    pub fn block_size(self) -> u64 {
        self.row().2
    }

    /// Bytes per block (`ggml_type_size`).
    pub fn type_size(self) -> u64 {
        self.row().3
    }

    /// Bits per weight of the block layout: 8 · bytes / elements.
    pub fn bits_per_weight(self) -> f64 {
        8.0 * self.type_size() as f64 / self.block_size() as f64
    }

    /// Bytes of a row of `n` elements, or `None` if `n` is not a multiple of the block size.
    pub fn row_bytes(self, n: u64) -> Option<u64> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
    }
}

impl fmt::Display for GgmlType {
    /// Upper-case ggml name as users write it: `Q4_K`, `F16`, `IQ2_XXS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.ggml_name().to_ascii_uppercase())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_round_trips_through_its_id() {
        let mut ids: Vec<u32> = GgmlType::all().map(|t| t.id()).collect();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n);
        for t in GgmlType::all() {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(&t.to_string()), Some(t));
        }
        for removed in [4u32, 5, 31, 32, 33, 36, 37, 38, 43, u32::MAX] {
            assert_eq!(GgmlType::from_id(removed), None);
        }
    }

    #[test]
    fn bits_per_weight_match_the_spec_table() {
        assert_eq!(GgmlType::Q4_K.bits_per_weight(), 4.5);
        assert_eq!(GgmlType::Q6_K.bits_per_weight(), 6.5625);
        assert_eq!(GgmlType::Q8_0.bits_per_weight(), 8.5);
        assert_eq!(GgmlType::Q3_K.bits_per_weight(), 3.4375);
        assert_eq!(GgmlType::Q4_K.to_string(), "Q4_K");
        assert_eq!(GgmlType::IQ2_XXS.to_string(), "IQ2_XXS");
        assert_eq!(GgmlType::Q4_0.row_bytes(64), Some(36));
        assert_eq!(GgmlType::Q4_0.row_bytes(33), None);
    }
}
