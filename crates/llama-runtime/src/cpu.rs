//! Which CPU backend runs. Results depend on it (the kernels differ in summation order), so
//! every report names it beside the llama.cpp pin.
//!
//! This build links ggml's CPU backend statically, compiled once with llama-cpp-sys-2's flags:
//! `GGML_NATIVE=OFF`, and ggml's x86 defaults for a non-native build (ggml/CMakeLists.txt
//! `INS_ENB`: AVX, AVX2, BMI2, FMA, F16C on; AVX-512 off). The ISA features come from the
//! registered CPU backend itself (`ggml_backend_get_features`, ggml-cpu.cpp
//! `ggml_backend_cpu_get_features`, which reports the compile-time flags of its kernels).

use std::ffi::CString;
use std::fmt;

use crate::{cstr, init, sys};

/// The CPU backend of this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuBackend {
    /// How the backend got into the process: `static` (compiled into the binary).
    pub variant: String,
    /// `(name, value)` pairs as ggml reports them, e.g. `("AVX2", "1")`.
    pub features: Vec<(String, String)>,
}

impl fmt::Display for CpuBackend {
    /// `static [SSE3 SSSE3 AVX AVX2 …]`: every feature whose value is `1` by name, others as
    /// `NAME=value`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let feats: Vec<String> = self
            .features
            .iter()
            .map(|(n, v)| {
                if v == "1" {
                    n.clone()
                } else {
                    format!("{n}={v}")
                }
            })
            .collect();
        write!(f, "{} [{}]", self.variant, feats.join(" "))
    }
}

/// `ggml_backend_get_features_t` (ggml-backend.h): a NULL-name-terminated array.
type GetFeatures =
    unsafe extern "C" fn(sys::ggml_backend_reg_t) -> *const sys::ggml_backend_feature;

/// The CPU backend's identity.
pub fn cpu_backend() -> CpuBackend {
    init();
    CpuBackend {
        variant: "static".into(),
        features: features(),
    }
}

fn features() -> Vec<(String, String)> {
    let name = CString::new("CPU").expect("no NUL");
    let proc_name = CString::new("ggml_backend_get_features").expect("no NUL");
    // SAFETY: registry lookups return NULL or a static registry; the proc address, when
    // present, has ggml's documented signature, and the array it returns is static and ends
    // with a NULL name.
    unsafe {
        let reg = sys::ggml_backend_reg_by_name(name.as_ptr());
        if reg.is_null() {
            return Vec::new();
        }
        let p = sys::ggml_backend_reg_get_proc_address(reg, proc_name.as_ptr());
        if p.is_null() {
            return Vec::new();
        }
        let get: GetFeatures = std::mem::transmute(p);
        let mut out = Vec::new();
        let mut f = get(reg);
        while !f.is_null() && !(*f).name.is_null() {
            out.push((cstr((*f).name), cstr((*f).value)));
            f = f.add(1);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_backend_reports_the_isa_of_its_kernels() {
        let c = cpu_backend();
        assert_eq!(c.variant, "static");
        let has = |n: &str| c.features.iter().any(|(k, v)| k == n && v == "1");
        // ggml's non-native x86 defaults: AVX2 and FMA kernels, no AVX-512.
        assert!(has("AVX2") && has("FMA") && has("F16C"), "{c}");
        assert!(!has("AVX512"), "{c}");
        assert!(c.to_string().starts_with("static [SSE3 "), "{c}");
    }
}
