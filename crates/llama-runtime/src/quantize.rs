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

/// Quantizes `input` into `output` (overwritten; the caller's temp file) as llama.cpp ftype
/// `ftype` (`LLAMA_FTYPE_*`, e.g. 15 = Q4_K_M) with `nthread` threads and no importance matrix.
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
) -> Result<(), RuntimeError> {
    init();
    let fail = |detail: String| RuntimeError::Eval {
        call: "llama_model_quantize",
        detail,
    };
    let mark = crate::log::mark();
    let cin = CString::new(input.as_os_str().as_encoded_bytes())
        .map_err(|_| fail("NUL in input path".into()))?;
    let cout = CString::new(output.as_os_str().as_encoded_bytes())
        .map_err(|_| fail("NUL in output path".into()))?;
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
    let rc = unsafe {
        let mut p = sys::llama_model_quantize_default_params();
        p.nthread = nthread;
        p.ftype = ftype as _;
        sys::llama_model_quantize(cin.as_ptr(), cout.as_ptr(), &p)
    };
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
