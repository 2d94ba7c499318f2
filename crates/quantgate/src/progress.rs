//! Progress of long library calls, for a front end to show: the library never prints, it
//! reports steps and counts to a hook the CLI installs (none installed: nothing happens).
//! Without it, verify on 5,000 texts said nothing for minutes.

use std::sync::OnceLock;

/// What the hook hears: a step name (`gate 2 vectors`), units done and the total (0 for a
/// step without a count).
pub type Hook = Box<dyn Fn(&str, usize, usize) + Send + Sync>;

static HOOK: OnceLock<Hook> = OnceLock::new();

/// Installs the process-wide hook (the first call wins; later calls are ignored).
pub fn set_hook(h: Hook) {
    let _ = HOOK.set(h);
}

/// Reports `done` of `total` units of `step` to the hook, if one is installed.
pub fn report(step: &str, done: usize, total: usize) {
    if let Some(h) = HOOK.get() {
        h(step, done, total);
    }
}
