//! Progress bars with ETA on stderr for long evaluations (hidden when stderr is not a terminal,
//! so logs and tests see only the result lines on stdout).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `len` units named `what` (e.g. "chunks"), drawn on stderr at most 4 times a second.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr_with_hz(4));
    let template =
        format!("{{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} {what} · ETA {{eta}} {{msg}}");
    pb.set_style(
        ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb
}

/// Installs the library's progress hook ([`quantgate::progress`]): one stderr line when a step
/// starts and, within a counted step, at most one every 5 s (`verify: gate 2 vectors:
/// llama.cpp 1200/5000`), so a long run is never silent.
pub fn install_stderr_hook(command: &'static str) {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    let last: Mutex<(String, Option<Instant>)> = Mutex::new((String::new(), None));
    quantgate::progress::set_hook(Box::new(move |step, done, total| {
        let Ok(mut l) = last.lock() else { return };
        let new_step = l.0 != step;
        let due = l.1.is_none_or(|t| t.elapsed() >= Duration::from_secs(5));
        if !new_step && !due {
            return;
        }
        *l = (step.to_string(), Some(Instant::now()));
        if total > 0 {
            eprintln!("{command}: {step} {done}/{total}");
        } else {
            eprintln!("{command}: {step}");
        }
    }));
}
