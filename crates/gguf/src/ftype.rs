//! llama.cpp's file types (`enum llama_ftype` in `include/llama.h`, `LLAMA_FTYPE_MOSTLY_*`):
//! the value of `general.file_type` and the names `llama-quantize` accepts. One table, used by
//! convert, the MLX repack, quantize and verify.

use crate::GgmlType;

/// One llama.cpp file type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LlamaFtype {
    /// Name as `llama-quantize` spells it (`Q4_K_M`), or the outtype (`F16`).
    pub name: &'static str,
    /// `LLAMA_FTYPE_*` value, written as `general.file_type`.
    pub id: u32,
    /// The ggml type of the file's main (2-D weight) tensors.
    pub base: GgmlType,
    /// Whether `quantize` (llama_model_quantize) accepts it as a target.
    pub quantize_target: bool,
}

const fn f(name: &'static str, id: u32, base: GgmlType, quantize_target: bool) -> LlamaFtype {
    LlamaFtype {
        name,
        id,
        base,
        quantize_target,
    }
}

impl LlamaFtype {
    /// Every file type quantgate writes or quantizes to (llama.h values; 4–6 were removed
    /// upstream and are not listed).
    pub const ALL: &'static [LlamaFtype] = &[
        f("F32", 0, GgmlType::F32, false),
        f("F16", 1, GgmlType::F16, false),
        f("Q4_0", 2, GgmlType::Q4_0, true),
        f("Q4_1", 3, GgmlType::Q4_1, true),
        f("Q8_0", 7, GgmlType::Q8_0, true),
        f("Q5_0", 8, GgmlType::Q5_0, true),
        f("Q5_1", 9, GgmlType::Q5_1, true),
        f("Q2_K", 10, GgmlType::Q2_K, true),
        f("Q3_K_S", 11, GgmlType::Q3_K, true),
        f("Q3_K_M", 12, GgmlType::Q3_K, true),
        f("Q3_K_L", 13, GgmlType::Q3_K, true),
        f("Q4_K_S", 14, GgmlType::Q4_K, true),
        f("Q4_K_M", 15, GgmlType::Q4_K, true),
        f("Q5_K_S", 16, GgmlType::Q5_K, true),
        f("Q5_K_M", 17, GgmlType::Q5_K, true),
        f("Q6_K", 18, GgmlType::Q6_K, true),
        f("BF16", 32, GgmlType::BF16, false),
        // The IQ types, after the others so that a search of the targets tries the common
        // types first. Those marked in llama-quant.cpp's `tensor_requires_imatrix` (IQ2_XXS,
        // IQ2_XS, IQ2_S, IQ1_S, IQ1_M, IQ3_XXS, and Q2_K in a Q2_K_S file) need an imatrix.
        f("IQ4_XS", 30, GgmlType::IQ4_XS, true),
        f("IQ4_NL", 25, GgmlType::IQ4_NL, true),
        f("IQ3_M", 27, GgmlType::IQ3_S, true),
        f("IQ3_S", 26, GgmlType::IQ3_S, true),
        f("IQ3_XS", 22, GgmlType::IQ3_S, true),
        f("IQ3_XXS", 23, GgmlType::IQ3_XXS, true),
        f("IQ2_M", 29, GgmlType::IQ2_S, true),
        f("IQ2_S", 28, GgmlType::IQ2_S, true),
        f("IQ2_XS", 20, GgmlType::IQ2_XS, true),
        f("IQ2_XXS", 19, GgmlType::IQ2_XXS, true),
        f("IQ1_M", 31, GgmlType::IQ1_M, true),
        f("IQ1_S", 24, GgmlType::IQ1_S, true),
        f("Q2_K_S", 21, GgmlType::Q2_K, true),
    ];

    /// Whether llama-quantize refuses this target without an importance matrix (its
    /// `--imatrix` check in tools/quantize/quantize.cpp: IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M,
    /// IQ3_XXS and Q2_K_S).
    pub fn requires_imatrix(&self) -> bool {
        matches!(self.id, 19 | 20 | 21 | 23 | 24 | 28 | 31)
    }

    /// The entry named `name` (ASCII case-insensitive).
    pub fn by_name(name: &str) -> Option<LlamaFtype> {
        Self::ALL
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(name))
            .copied()
    }

    /// The entry with `LLAMA_FTYPE_*` value `id`.
    pub fn by_id(id: u32) -> Option<LlamaFtype> {
        Self::ALL.iter().find(|t| t.id == id).copied()
    }

    /// The plain `MOSTLY_<type>` entry whose base is `ty` (`Q4_1` → 3), where one exists.
    /// For K-quants this is the `_S`/plain entry llama.cpp uses for a uniform file
    /// (`Q6_K` → 18); types without an entry give `None`.
    pub fn mostly(ty: GgmlType) -> Option<LlamaFtype> {
        Self::ALL
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(ty.ggml_name()))
            .copied()
    }

    /// The targets `quantize` accepts.
    pub fn quantize_targets() -> impl Iterator<Item = LlamaFtype> {
        Self::ALL.iter().copied().filter(|t| t.quantize_target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_h_values() {
        assert_eq!(LlamaFtype::by_name("q4_k_m").unwrap().id, 15);
        assert_eq!(LlamaFtype::mostly(GgmlType::BF16).unwrap().id, 32);
        assert_eq!(LlamaFtype::mostly(GgmlType::Q5_1).unwrap().id, 9);
        assert_eq!(LlamaFtype::by_id(7).unwrap().base, GgmlType::Q8_0);
        assert_eq!(LlamaFtype::quantize_targets().count(), 27);
        assert_eq!(LlamaFtype::by_name("IQ4_XS").unwrap().id, 30);
        assert_eq!(LlamaFtype::by_name("iq3_m").unwrap().base, GgmlType::IQ3_S);
        assert_eq!(LlamaFtype::mostly(GgmlType::IQ4_NL).unwrap().id, 25);
        assert!(LlamaFtype::mostly(GgmlType::Q8_K).is_none());
    }
}
