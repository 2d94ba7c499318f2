//! llama.cpp's log, kept so that a refusal can be explained: every ERROR-level line (with its
//! continuations) goes into a small ring buffer; with `QUANTGATE_LLAMA_LOG=1` every line is also
//! printed to stderr. Levels are ggml's `enum ggml_log_level` (`ggml/include/ggml.h`: DEBUG 1,
//! INFO 2, WARN 3, ERROR 4, CONT 5 = continues the previous message).

use std::collections::VecDeque;
use std::ffi::CStr;
use std::os::raw::{c_char, c_void};
use std::sync::Mutex;

use crate::sys;

/// Error lines kept (the most recent ones).
const KEEP: usize = 16;

struct Log {
    lines: VecDeque<String>,
    /// The message being assembled (llama.cpp logs in fragments) and whether it is an error.
    current: String,
    current_is_error: bool,
    /// Count of finished error lines, so a caller can take only those after a mark.
    n_errors: u64,
    /// Every fragment of every level while [`record`] runs (`None` otherwise).
    recording: Option<String>,
}

static LOG: Mutex<Log> = Mutex::new(Log {
    lines: VecDeque::new(),
    current: String::new(),
    current_is_error: false,
    n_errors: 0,
    recording: None,
});

const LEVEL_ERROR: u32 = 4;
const LEVEL_CONT: u32 = 5;

/// The callback given to `llama_log_set`.
pub(crate) unsafe extern "C" fn capture(
    level: sys::ggml_log_level,
    text: *const c_char,
    user_data: *mut c_void,
) {
    if text.is_null() {
        return;
    }
    // SAFETY: llama.cpp passes a NUL-terminated string valid for this call.
    let t = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    if !user_data.is_null() {
        eprint!("{t}");
    }
    if let Ok(h) = FRAGMENT_HOOK.lock() {
        if let Some(h) = h.as_ref() {
            h(&t);
        }
    }
    let Ok(mut log) = LOG.lock() else { return };
    if let Some(r) = log.recording.as_mut() {
        r.push_str(&t);
    }
    #[allow(clippy::unnecessary_cast)] // ggml_log_level is u32 or i32 depending on the target
    let level = level as u32;
    if level != LEVEL_CONT {
        log.current_is_error = level == LEVEL_ERROR;
    }
    if !log.current_is_error {
        return;
    }
    log.current.push_str(&t);
    while let Some(i) = log.current.find('\n') {
        let line: String = log.current.drain(..=i).collect();
        let line = line.trim().to_string();
        if !line.is_empty() {
            if log.lines.len() == KEEP {
                log.lines.pop_front();
            }
            log.lines.push_back(line);
            log.n_errors += 1;
        }
    }
}

/// A function that sees every fragment llama.cpp logs (see [`with_fragment_hook`]).
type FragmentHook = Box<dyn Fn(&str) + Send>;

static FRAGMENT_HOOK: Mutex<Option<FragmentHook>> = Mutex::new(None);

/// Runs `f` with `hook` called on every fragment llama.cpp logs meanwhile (any level, as
/// logged: a line may come in pieces), e.g. to follow the quantizer's `[  12/ 339]` lines.
pub fn with_fragment_hook<T>(hook: impl Fn(&str) + Send + 'static, f: impl FnOnce() -> T) -> T {
    if let Ok(mut h) = FRAGMENT_HOOK.lock() {
        *h = Some(Box::new(hook));
    }
    let out = f();
    if let Ok(mut h) = FRAGMENT_HOOK.lock() {
        *h = None;
    }
    out
}

/// A position in the error log: lines logged after it are "new".
pub fn mark() -> u64 {
    LOG.lock().map_or(0, |l| l.n_errors)
}

/// The error lines llama.cpp logged since `mark` (at most the last 16), joined with "; ".
pub fn errors_since(mark: u64) -> String {
    let Ok(log) = LOG.lock() else {
        return String::new();
    };
    let new = log
        .n_errors
        .saturating_sub(mark)
        .min(log.lines.len() as u64) as usize;
    let start = log.lines.len() - new;
    log.lines
        .iter()
        .skip(start)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ")
}

/// Held for the whole of a [`record`]: the recording buffer is process-wide, and two threads
/// recording at once (two verifies in one process) took each other's text, so one quantizer
/// plan came back empty.
static RECORDING: Mutex<()> = Mutex::new(());

/// Runs `f` and returns its result with everything llama.cpp logged meanwhile, every level,
/// fragments joined as logged. For output llama.cpp gives only as log text (the quantizer's
/// dry run). Recordings are serialized across threads; not reentrant (a nested call would
/// wait for itself).
pub fn record<T>(f: impl FnOnce() -> T) -> (T, String) {
    // A poisoned lock only means another recording panicked; its text is gone either way.
    let _one_at_a_time = RECORDING.lock().unwrap_or_else(|p| p.into_inner());
    if let Ok(mut log) = LOG.lock() {
        log.recording = Some(String::new());
    }
    let out = f();
    let text = LOG
        .lock()
        .ok()
        .and_then(|mut l| l.recording.take())
        .unwrap_or_default();
    (out, text)
}
