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
