//! Which CPU backend runs. llama.cpp is built with ggml's CPU variants as loadable modules
//! (llama-cpp-sys-2 `dynamic-backends`: `GGML_BACKEND_DL` + `GGML_CPU_ALL_VARIANTS`, as
//! llama.cpp's release builds), one `libggml-cpu-VARIANT.so` per x86 level (`x64`, `sse42`,
//! `sandybridge`, `haswell`, `skylakex`, `icelake`, `alderlake`, `sapphirerapids`, `zen4`, …).
//!
//! Without a pin, ggml loads the best variant the host can run (`ggml_backend_load_all`, which
//! scores each module with its `ggml_backend_score`). With `QUANTGATE_CPU_VARIANT=NAME` exactly
//! that module is loaded, and a host that cannot run it is refused (its score is 0). Which one
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
            .map(|(n, v)| if v == "1" { n.clone() } else { format!("{n}={v}") })
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
            Some(n.strip_prefix("libggml-cpu-")?.strip_suffix(".so")?.to_string())
        })
        .collect();
    v.sort();
    v
}

static LOADED: OnceLock<Result<CpuBackend, RuntimeError>> = OnceLock::new();

/// Loads the CPU backend (once per process; called by [`crate::init`] before
/// `llama_backend_init`).
pub(crate) fn load() {
    LOADED.get_or_init(|| {
        let pin = std::env::var(CPU_VARIANT_ENV).ok().filter(|v| !v.is_empty());
        let (loaded, text) = log::record(|| match &pin {
            Some(v) => load_variant(v),
            // SAFETY: plain loader; logs which module it loaded.
            None => unsafe {
                sys::ggml_backend_load_all();
                Ok(())
            },
        });
        loaded?;
        let variant = match &pin {
            Some(v) => v.clone(),
            None => variant_from_log(&text).ok_or_else(|| RuntimeError::Backend {
                detail: format!(
                    "no CPU backend was loaded from {} (modules: {:?})",
                    backends_dir().display(),
                    variants()
                ),
            })?,
        };
        Ok(CpuBackend {
            variant,
            pinned: pin.is_some(),
            features: features(),
        })
    });
}

fn load_variant(v: &str) -> Result<(), RuntimeError> {
    let path = backends_dir().join(format!("libggml-cpu-{v}.so"));
    let built = variants();
    if !path.is_file() {
        return Err(RuntimeError::Backend {
            detail: format!("{CPU_VARIANT_ENV}={v}: no such CPU variant (built: {built:?})"),
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
                "{CPU_VARIANT_ENV}={v}: this host cannot run that CPU variant ({} refused; built: {built:?})",
                path.display()
            ),
        });
    }
    Ok(())
}

/// The variant of `load_backend: loaded CPU backend from …/libggml-cpu-VARIANT.so`.
fn variant_from_log(text: &str) -> Option<String> {
    text.lines()
        .filter(|l| l.contains("loaded CPU backend from"))
        .filter_map(|l| {
            let file = l.trim().rsplit('/').next()?;
            Some(file.strip_prefix("libggml-cpu-")?.strip_suffix(".so")?.to_string())
        })
        .next_back()
}

/// The CPU backend of this process, loading it first if needed.
///
/// Errors: [`RuntimeError::Backend`] when the pinned variant does not exist or the host cannot
/// run it, or no CPU module could be loaded.
pub fn cpu_backend() -> Result<CpuBackend, RuntimeError> {
    crate::init();
    LOADED
        .get()
        .cloned()
        .unwrap_or_else(|| Err(RuntimeError::Backend { detail: "not initialised".into() }))
}

/// `ggml_backend_get_features_t` (ggml-backend.h): a NULL-name-terminated array.
type GetFeatures = unsafe extern "C" fn(sys::ggml_backend_reg_t) -> *const sys::ggml_backend_feature;

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
    fn the_loaded_variant_is_named_with_its_features() {
        let c = cpu_backend().unwrap();
        assert!(variants().contains(&c.variant), "{c} not in {:?}", variants());
        assert!(!c.features.is_empty(), "{c}");
        eprintln!("{c}");
    }

    #[test]
    fn the_variant_is_read_from_ggmls_load_line() {
        let log = "load_backend: loaded CPU backend from /x/backends/libggml-cpu-haswell.so\n";
        assert_eq!(variant_from_log(log).as_deref(), Some("haswell"));
        assert_eq!(variant_from_log("nothing"), None);
    }
}
