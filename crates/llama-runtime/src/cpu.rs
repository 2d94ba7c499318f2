//! Which CPU backend runs. llama.cpp is built with ggml's CPU variants as loadable modules
//! (llama-cpp-sys-2 `dynamic-backends`: `GGML_BACKEND_DL` + `GGML_CPU_ALL_VARIANTS`, as
//! llama.cpp's release builds), one `libggml-cpu-VARIANT.so` per x86 level (`x64`, `sse42`,
//! `sandybridge`, `haswell`, `skylakex`, `icelake`, `alderlake`, `sapphirerapids`, `zen4`, …).
//!
//! Without a pin, the variant with the highest `ggml_backend_score` on this host is loaded, as
//! `ggml_backend_load_all` would choose, except variants known to crash with this pin
//! ([`BROKEN_VARIANTS`]). With `QUANTGATE_CPU_VARIANT=NAME` exactly that module is loaded, and
//! a host that cannot run it (score 0) or a broken variant is refused. Which one
//! ran, and the ISA features ggml reports for it (`ggml_backend_get_features`), go into every
//! report: results depend on both, since the kernels differ in summation order.

use std::ffi::CString;
use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::{cstr, log, sys, RuntimeError};

/// The environment variable that pins the CPU variant (protocols set it for their steps).
pub const CPU_VARIANT_ENV: &str = "QUANTGATE_CPU_VARIANT";

/// The CPU backend of this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuBackend {
    /// The variant loaded, from its module name `libggml-cpu-VARIANT.so` (`haswell`, …).
    pub variant: String,
    /// Whether it was pinned by [`CPU_VARIANT_ENV`] (else ggml chose the best for the host).
    pub pinned: bool,
    /// `(name, value)` pairs as ggml reports them, e.g. `("AVX2", "1")`.
    pub features: Vec<(String, String)>,
}

impl fmt::Display for CpuBackend {
    /// `haswell (host best) [SSE3 SSSE3 AVX AVX2 …]`: every feature whose value is `1` by name,
    /// others as `NAME=value`.
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
        let how = if self.pinned { "pinned" } else { "host best" };
        write!(f, "{} ({how}) [{}]", self.variant, feats.join(" "))
    }
}

/// The folder of the variant modules: where llama-cpp-sys-2 installed them at build time,
/// else the executable's folder (where ggml also looks).
pub fn backends_dir() -> PathBuf {
    let built = PathBuf::from(env!("QUANTGATE_GGML_BACKENDS_DIR"));
    if built.is_dir() {
        return built;
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(PathBuf::from))
        .unwrap_or_default()
}

/// The variants built, from the module names in [`backends_dir`], sorted.
pub fn variants() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(backends_dir())
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            Some(
                n.strip_prefix("libggml-cpu-")?
                    .strip_suffix(".so")?
                    .to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Variants this llama.cpp pin builds but that crash where ggml scores them runnable, with why.
/// The host-best choice skips them, and a pin to one is refused with the reason.
pub const BROKEN_VARIANTS: &[(&str, &str)] = &[(
    "sapphirerapids",
    "its AMX tile kernels (ggml-cpu/amx, used for Q4_0/Q4_1/Q8_0/K-quant weights) raise SIGILL \
     at `tileloadd`: the tile config is built on the stack and the compiler drops it \
     (llama.cpp PR #26954, open; seen with this pin on a Sapphire Rapids VM)",
)];

static LOADED: OnceLock<Result<CpuBackend, RuntimeError>> = OnceLock::new();

/// Loads the CPU backend (once per process; called by [`crate::init`] before
/// `llama_backend_init`).
pub(crate) fn load() {
    LOADED.get_or_init(|| {
        let pin = std::env::var(CPU_VARIANT_ENV)
            .ok()
            .filter(|v| !v.is_empty());
        let variant = match &pin {
            Some(v) => v.clone(),
            None => host_best()?,
        };
        let (loaded, _) = log::record(|| load_variant(&variant, pin.is_some()));
        loaded?;
        Ok(CpuBackend {
            variant,
            pinned: pin.is_some(),
            features: features(),
        })
    });
}

/// ggml's score of each built variant on this host (`ggml_backend_score` of the module; 0 =
/// cannot run), in [`variants`] order. A module that cannot be opened scores 0.
pub fn scores() -> Vec<(String, i32)> {
    variants()
        .into_iter()
        .map(|v| {
            let s = module_score(&module_path(&v));
            (v, s)
        })
        .collect()
}

/// The variant `ggml_backend_load_all` would choose (highest score), less [`BROKEN_VARIANTS`].
fn host_best() -> Result<String, RuntimeError> {
    scores()
        .into_iter()
        .filter(|(v, s)| *s > 0 && broken(v).is_none())
        .max_by_key(|(_, s)| *s)
        .map(|(v, _)| v)
        .ok_or_else(|| RuntimeError::Backend {
            detail: format!(
                "no CPU variant in {} runs on this host (scores: {:?})",
                backends_dir().display(),
                scores()
            ),
        })
}

fn broken(v: &str) -> Option<&'static str> {
    BROKEN_VARIANTS
        .iter()
        .find(|(b, _)| *b == v)
        .map(|(_, why)| *why)
}

fn module_path(v: &str) -> PathBuf {
    backends_dir().join(format!("libggml-cpu-{v}.so"))
}

/// `ggml_backend_score()` of one module, opened privately and closed again (as
/// ggml-backend-reg.cpp `ggml_backend_load_best` scores candidates).
fn module_score(path: &std::path::Path) -> i32 {
    let Ok(c) = CString::new(path.to_string_lossy().as_bytes()) else {
        return 0;
    };
    let sym = CString::new("ggml_backend_score").expect("no NUL");
    // SAFETY: dlopen/dlsym/dlclose on a NUL-terminated path; the symbol, when present, is
    // ggml's `int ggml_backend_score(void)` (ggml-backend-dl.h), which only reads CPUID.
    unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            return 0;
        }
        let f = libc::dlsym(h, sym.as_ptr());
        let s = if f.is_null() {
            0
        } else {
            let score: unsafe extern "C" fn() -> i32 = std::mem::transmute(f);
            score()
        };
        libc::dlclose(h);
        s
    }
}

fn load_variant(v: &str, pinned: bool) -> Result<(), RuntimeError> {
    let path = module_path(v);
    let built = variants();
    let who = if pinned {
        format!("{CPU_VARIANT_ENV}={v}")
    } else {
        format!("CPU variant {v}")
    };
    if !path.is_file() {
        return Err(RuntimeError::Backend {
            detail: format!("{who}: no such CPU variant (built: {built:?})"),
        });
    }
    if let Some(why) = broken(v) {
        return Err(RuntimeError::Backend {
            detail: format!("{who}: refused, {why}"),
        });
    }
    let c = CString::new(path.to_string_lossy().as_bytes()).map_err(|_| RuntimeError::Backend {
        detail: format!("{}: path has a NUL byte", path.display()),
    })?;
    // SAFETY: a NUL-terminated path; ggml returns NULL when it cannot load the module or the
    // module's score on this host is 0.
    let reg = unsafe { sys::ggml_backend_load(c.as_ptr()) };
    if reg.is_null() {
        return Err(RuntimeError::Backend {
            detail: format!(
                "{who}: this host cannot run that CPU variant ({} refused; built: {built:?})",
                path.display()
            ),
        });
    }
    Ok(())
}

/// The CPU backend of this process, loading it first if needed.
///
/// Errors: [`RuntimeError::Backend`] when the pinned variant does not exist or the host cannot
/// run it, or no CPU module could be loaded.
pub fn cpu_backend() -> Result<CpuBackend, RuntimeError> {
    crate::init();
    LOADED.get().cloned().unwrap_or_else(|| {
        Err(RuntimeError::Backend {
            detail: "not initialised".into(),
        })
    })
}

/// `ggml_backend_get_features_t` (ggml-backend.h): a NULL-name-terminated array.
type GetFeatures =
    unsafe extern "C" fn(sys::ggml_backend_reg_t) -> *const sys::ggml_backend_feature;

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
    fn the_host_best_variant_loads_and_is_named_with_its_features() {
        std::env::remove_var(CPU_VARIANT_ENV);
        let c = cpu_backend().unwrap();
        assert!(!c.pinned, "{c}");
        let best = host_best().unwrap();
        assert_eq!(c.variant, best, "{:?}", scores());
        // Every x86-64 host runs the baseline, and the choice scores at least as high.
        let score = |v: &str| scores().into_iter().find(|(n, _)| n == v).unwrap().1;
        assert!(
            score("x64") > 0 && score(&best) >= score("x64"),
            "{:?}",
            scores()
        );
        // Its ISA features are ggml's own report, named in the Display.
        let has = |n: &str| c.features.iter().any(|(k, v)| k == n && v == "1");
        assert!(has("OPENMP"), "{c}");
        assert!(
            c.to_string().starts_with(&format!("{best} (host best) [")),
            "{c}"
        );
    }

    #[test]
    fn a_broken_variant_is_never_the_host_best_and_a_pin_to_it_is_refused() {
        assert_ne!(host_best().unwrap(), "sapphirerapids");
        let e = load_variant("sapphirerapids", true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("QUANTGATE_CPU_VARIANT=sapphirerapids: refused"),
            "{e}"
        );
        assert!(e.contains("PR #26954"), "{e}");
    }
}
