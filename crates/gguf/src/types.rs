//! The ggml type table: id, name, elements per block and bytes per block for every type a GGUF
//! tensor info can name.
//!
//! Source: `ggml/include/ggml.h` (`enum ggml_type`) and the `type_traits` table in
//! `ggml/src/ggml.c` of the llama.cpp vendored by llama-cpp-sys-2 0.1.161 (see also
//! `../shared/docs/llamacpp-spec.md` §5). Ids 4, 5 (removed Q4_2/Q4_3), 31–33 and 36–38
//! (removed Q4_0_4_4 … IQ4_NL_8_8 repacks) are not valid in a file.

use std::fmt;

/// One ggml tensor type. The discriminant is the id stored in a GGUF tensor info.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
    NVFP4 = 40,
    Q1_0 = 41,
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
