//! llama.cpp's own quantizer (`llama_model_quantize`, `src/llama-quant.cpp`). It writes to the
//! path it is given, which the caller makes a temp file beside the final output and renames
//! only after its own checks.

use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::{init, sys, RuntimeError};

/// The file being written, for the signal handler.
static TMP_PATH: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

/// SIGINT/SIGTERM during `llama_model_quantize` (which cannot be interrupted): remove the temp
/// file and exit with 128 + signal. Only async-signal-safe calls (unlink, _exit).
extern "C" fn remove_tmp_and_exit(sig: libc::c_int) {
    let p = TMP_PATH.load(Ordering::SeqCst);
    // SAFETY: `p` is null or a NUL-terminated path kept alive by quantize_model for the call.
    unsafe {
        if !p.is_null() {
            libc::unlink(p);
        }
        libc::_exit(128 + sig);
    }
}

/// `path` as a C string; a NUL byte in it is an `Eval` error of `call`.
fn c_path(call: &'static str, what: &str, path: &Path) -> Result<CString, RuntimeError> {
    CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| RuntimeError::Eval {
        call,
        detail: format!("NUL in {what} path"),
    })
}

/// Importance weights for the quantizer and the keys `llama-quantize --imatrix` writes with
/// them (`tools/quantize/quantize.cpp`: kv overrides, strings cut to 127 bytes, the counts as
/// u32; `quantize.imatrix.dataset` only with a dataset, `.chunks_count` only when > 0).
#[derive(Clone, Debug, Default)]
pub struct QuantizeImatrix {
    /// Per weight name, `n_mat · ne0` weights (the mean squared activations).
    pub weights: Vec<(String, Vec<f32>)>,
    /// `quantize.imatrix.file`: the imatrix path as given.
    pub file: String,
    /// `quantize.imatrix.dataset`: its first dataset.
    pub dataset: Option<String>,
    /// `quantize.imatrix.chunks_count`.
    pub chunks: u32,
}

/// A kv override with `key` (≤ 127 bytes) and a value filled in by `set`.
fn kv_override(
    key: &str,
    tag: sys::llama_model_kv_override_type,
    set: impl FnOnce(&mut sys::llama_model_kv_override__bindgen_ty_1),
) -> sys::llama_model_kv_override {
    // SAFETY: an all-zero override is valid plain data (a zeroed key and value).
    let mut o: sys::llama_model_kv_override = unsafe { std::mem::zeroed() };
    o.tag = tag;
    for (d, b) in o.key.iter_mut().zip(key.bytes().take(127)) {
        *d = b as libc::c_char;
    }
    set(&mut o.__bindgen_anon_1);
    o
}

/// A string kv override, cut to 127 bytes as `strncpy(…, 127)` cuts it.
fn str_override(key: &str, v: &str) -> sys::llama_model_kv_override {
    kv_override(key, sys::LLAMA_KV_OVERRIDE_TYPE_STR, |u| {
        // SAFETY: writing the union's string member of a zeroed value.
        let dst = unsafe { &mut u.val_str };
        for (d, b) in dst.iter_mut().zip(v.bytes().take(127)) {
            *d = b as libc::c_char;
        }
    })
}

/// The C arrays llama_model_quantize reads: the weights (names kept alive here) and the kv
/// overrides, each terminated as llama.h asks.
struct CImatrix {
    _names: Vec<CString>,
    data: Vec<sys::llama_model_imatrix_data>,
    kv: Vec<sys::llama_model_kv_override>,
}

impl CImatrix {
    fn new(m: &QuantizeImatrix) -> Result<CImatrix, RuntimeError> {
        let names = m
            .weights
            .iter()
            .map(|(n, _)| CString::new(n.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| RuntimeError::Eval {
                call: "llama_model_quantize",
                detail: "NUL in an imatrix entry name".into(),
            })?;
        let mut data: Vec<_> = names
            .iter()
            .zip(&m.weights)
            .map(|(c, (_, w))| sys::llama_model_imatrix_data {
                name: c.as_ptr(),
                data: w.as_ptr(),
                size: w.len(),
            })
            .collect();
        data.push(sys::llama_model_imatrix_data {
            name: std::ptr::null(),
            data: std::ptr::null(),
            size: 0,
        });
        let int = |key: &str, v: i64| {
            kv_override(key, sys::LLAMA_KV_OVERRIDE_TYPE_INT, |u| u.val_i64 = v)
        };
        let mut kv = vec![str_override("quantize.imatrix.file", &m.file)];
        if let Some(d) = &m.dataset {
            kv.push(str_override("quantize.imatrix.dataset", d));
        }
        kv.push(int(
            "quantize.imatrix.entries_count",
            m.weights.len() as i64,
        ));
        if m.chunks > 0 {
            kv.push(int("quantize.imatrix.chunks_count", m.chunks as i64));
        }
        // The terminator: an empty key.
        kv.push(kv_override("", 0, |_| {}));
        Ok(CImatrix {
            _names: names,
            data,
            kv,
        })
    }

    /// Points `p` at the arrays (valid while `self` lives).
    fn apply(&self, p: &mut sys::llama_model_quantize_params) {
        p.imatrix = self.data.as_ptr();
        p.kv_overrides = self.kv.as_ptr();
    }
}

/// Quantizes `input` into `output` (overwritten; the caller's temp file) as llama.cpp ftype
/// `ftype` (`LLAMA_FTYPE_*`, e.g. 15 = Q4_K_M) with `nthread` threads and, when given, an
/// importance matrix and its keys ([`QuantizeImatrix`]).
/// SIGINT/SIGTERM during the call (which llama.cpp cannot interrupt) remove `output` and exit
/// with 128 + signal.
///
/// Errors: llama.cpp's non-zero return (unreadable input, unsupported type, a failed write),
/// with llama.cpp's own error lines.
pub fn quantize_model(
    input: &Path,
    output: &Path,
    ftype: u32,
    nthread: i32,
    imatrix: Option<&QuantizeImatrix>,
    progress: impl Fn(usize, usize) + Send + 'static,
) -> Result<(), RuntimeError> {
    init();
    let cim = imatrix.map(CImatrix::new).transpose()?;
    let fail = |detail: String| RuntimeError::Eval {
        call: "llama_model_quantize",
        detail,
    };
    let mark = crate::log::mark();
    let cin = c_path("llama_model_quantize", "input", input)?;
    let cout = c_path("llama_model_quantize", "output", output)?;
    TMP_PATH.store(cout.as_ptr() as *mut libc::c_char, Ordering::SeqCst);
    let handler = remove_tmp_and_exit as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only unlinks and exits; previous handlers are restored below.
    let (old_int, old_term) = unsafe {
        (
            libc::signal(libc::SIGINT, handler),
            libc::signal(libc::SIGTERM, handler),
        )
    };
    // SAFETY: default params, adjusted by plain field writes; paths are NUL-terminated.
    let follow = move |t: &str| {
        if let Some((done, total)) = tensor_counter(t) {
            progress(done, total);
        }
    };
    let rc = crate::log::with_fragment_hook(follow, || unsafe {
        let mut p = sys::llama_model_quantize_default_params();
        p.nthread = nthread;
        p.ftype = ftype as _;
        if let Some(c) = &cim {
            c.apply(&mut p);
        }
        sys::llama_model_quantize(cin.as_ptr(), cout.as_ptr(), &p)
    });
    // SAFETY: restoring the handlers that were installed before.
    unsafe {
        libc::signal(libc::SIGINT, old_int);
        libc::signal(libc::SIGTERM, old_term);
    }
    TMP_PATH.store(std::ptr::null_mut(), Ordering::SeqCst);
    if rc != 0 {
        return Err(fail(format!(
            "returned {rc} for {} → {} (ftype {ftype}): {}",
            input.display(),
            output.display(),
            crate::load_log(mark)
        )));
    }
    Ok(())
}

/// One tensor of llama.cpp's quantization plan: its name and the ggml type name
/// (`ggml_type_name`, e.g. `q4_K`, `f32`) the quantizer would store it as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedType {
    /// GGUF tensor name.
    pub name: String,
    /// ggml type name as llama.cpp spells it.
    pub ggml_type: String,
    /// The quantizer keeps the input's type (not quantizable, or already that type).
    pub kept: bool,
}

/// The type llama.cpp's quantizer would give every tensor of `input` for ftype `ftype`
/// (`llama_tensor_get_type` of `src/llama-quant.cpp`), from a dry run (`params.dry_run`):
/// nothing is quantized or written. The choice depends on the tensors' names, shapes and the
/// architecture, not on their values, so any same-shaped F32/F16 file gives the same plan.
///
/// llama.cpp reports the plan only in its log: one INFO line per tensor,
/// `[  i/  n] NAME - [SHAPE], type = CUR, size = … MiB` with ` -> … MiB (NEW)` when the type
/// changes (llama-quant.cpp, llama-cpp-sys-2 =0.1.161). The lines are parsed here, so this
/// function is tied to that pin; a plan with a different tensor count is an error.
///
/// With an importance matrix the plan can differ (llama-quant.cpp's `has_imatrix` changes
/// the choice for some ffn_down and attn_v tensors), so the caller passes the one it uses.
///
/// Errors: llama.cpp's refusal (unreadable input, unknown ftype) or log lines that do not parse.
pub fn quantize_plan(
    input: &Path,
    ftype: u32,
    imatrix: Option<&QuantizeImatrix>,
) -> Result<Vec<PlannedType>, RuntimeError> {
    init();
    let cim = imatrix.map(CImatrix::new).transpose()?;
    let fail = |detail: String| RuntimeError::Eval {
        call: "llama_model_quantize (dry run)",
        detail,
    };
    let mark = crate::log::mark();
    let cin = c_path("llama_model_quantize (dry run)", "input", input)?;
    // The output path is never opened in a dry run.
    let cout = CString::new("/dev/null").expect("no NUL");
    let (rc, text) = crate::log::record(|| {
        // SAFETY: default params with plain field writes; paths are NUL-terminated.
        unsafe {
            let mut p = sys::llama_model_quantize_default_params();
            p.nthread = 1;
            p.ftype = ftype as _;
            p.dry_run = true;
            if let Some(c) = &cim {
                c.apply(&mut p);
            }
            sys::llama_model_quantize(cin.as_ptr(), cout.as_ptr(), &p)
        }
    });
    if rc != 0 {
        return Err(fail(format!(
            "returned {rc} for {} (ftype {ftype}): {}",
            input.display(),
            crate::load_log(mark)
        )));
    }
    parse_plan(&text).map_err(|e| fail(format!("{}: {e}", input.display())))
}

/// The counter of a quantizer line (`[  12/ 339] blk.0.attn_q.weight - …`): (12, 339).
fn tensor_counter(line: &str) -> Option<(usize, usize)> {
    let (counter, _) = line.trim_start().strip_prefix('[')?.split_once(']')?;
    let (done, total) = counter.split_once('/')?;
    Some((done.trim().parse().ok()?, total.trim().parse().ok()?))
}

/// Parses the dry run's per-tensor lines (see [`quantize_plan`]).
fn parse_plan(text: &str) -> Result<Vec<PlannedType>, String> {
    let mut out = Vec::new();
    let mut expected_n = None;
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix('[') else {
            continue;
        };
        let Some((counter, rest)) = rest.split_once(']') else {
            continue;
        };
        let Some((_, n)) = counter.split_once('/') else {
            continue;
        };
        let n: usize = n
            .trim()
            .parse()
            .map_err(|_| format!("bad counter in {line:?}"))?;
        expected_n = Some(n);
        let (name, rest) = rest
            .trim_start()
            .split_once(" - [")
            .ok_or_else(|| format!("no name in {line:?}"))?;
        let cur = rest
            .split_once("type = ")
            .and_then(|(_, r)| r.split_once(','))
            .map(|(t, _)| t.trim())
            .ok_or_else(|| format!("no type in {line:?}"))?;
        // "(NEW)" at the end when the tensor is converted, else it keeps its type.
        let kept = !rest.contains("->");
        let new = match rest.trim_end().strip_suffix(')') {
            Some(r) if !kept => r.rsplit_once('(').map(|(_, t)| t.trim()),
            _ => Some(cur),
        }
        .ok_or_else(|| format!("no target type in {line:?}"))?;
        out.push(PlannedType {
            name: name.trim().to_string(),
            ggml_type: new.to_string(),
            kept,
        });
    }
    match expected_n {
        Some(n) if n == out.len() => Ok(out),
        Some(n) => Err(format!("dry run listed {} of {n} tensors", out.len())),
        None => Err("dry run logged no tensor lines".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quantizers_tensor_counter_is_read_from_its_line() {
        assert_eq!(
            tensor_counter("[  12/ 339]                  blk.0.attn_q.weight - [  896,   896,"),
            Some((12, 339))
        );
        assert_eq!(tensor_counter("converting to q4_K .. size = "), None);
        assert_eq!(tensor_counter("[x/2]"), None);
    }

    #[test]
    fn plan_lines_parse_as_llama_quant_logs_them() {
        // Fragments as llama-quant.cpp logs them (two INFO calls per tensor), joined.
        let text = "llama_model_quantize_impl: model size = 513.1 MiB\n\
[   1/   2]                        token_embd.weight - [  576, 49152,     1,     1], type =    f32, size =  108.000 MiB ->   22.148 MiB (q6_K)\n\
[   2/   2]                   blk.0.attn_norm.weight - [  576,     1,     1,     1], type =    f32, size =    0.002 MiB\n";
        let plan = parse_plan(text).unwrap();
        assert_eq!(
            plan,
            vec![
                PlannedType {
                    name: "token_embd.weight".into(),
                    ggml_type: "q6_K".into(),
                    kept: false,
                },
                PlannedType {
                    name: "blk.0.attn_norm.weight".into(),
                    ggml_type: "f32".into(),
                    kept: true,
                },
            ]
        );
        assert!(
            parse_plan("[   1/   3] a - [ 1], type = f32, size = 1 MiB\n")
                .unwrap_err()
                .contains("1 of 3")
        );
        assert!(parse_plan("nothing").is_err());
    }
}
