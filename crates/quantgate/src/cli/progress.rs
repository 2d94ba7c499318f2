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
/// starts and, within a counted step, at most one every 5 s with the time since the step
/// started and an ETA from its rate so far (`verify: gate 2 vectors: llama.cpp 1200/5000 ·
/// 1m 12s · ETA 3m 48s`), so a long run is never silent.
pub fn install_stderr_hook(command: &'static str) {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    // (step, its start, the last line's time)
    let last: Mutex<(String, Instant, Option<Instant>)> =
        Mutex::new((String::new(), Instant::now(), None));
    quantgate::progress::set_hook(Box::new(move |step, done, total| {
        let Ok(mut l) = last.lock() else { return };
        if l.0 != step {
            *l = (step.to_string(), Instant::now(), None);
        } else if l.2.is_some_and(|t| t.elapsed() < Duration::from_secs(5)) {
            return;
        }
        l.2 = Some(Instant::now());
        if total > 0 {
            let spent = l.1.elapsed().as_secs_f64();
            eprintln!(
                "{command}: {step} {done}/{total}{}",
                timing(spent, done, total)
            );
        } else {
            eprintln!("{command}: {step}");
        }
    }));
}

/// ` · 1m 12s · ETA 3m 48s` after `spent` seconds with `done` of `total` (no ETA before the
/// first unit is done).
fn timing(spent: f64, done: usize, total: usize) -> String {
    let hms = |s: f64| {
        let s = s.round() as u64;
        match (s / 3600, s / 60 % 60, s % 60) {
            (0, 0, s) => format!("{s}s"),
            (0, m, s) => format!("{m}m {s:02}s"),
            (h, m, _) => format!("{h}h {m:02}m"),
        }
    };
    if done == 0 || spent < 1.0 {
        return String::new();
    }
    let eta = spent * (total.saturating_sub(done)) as f64 / done as f64;
    format!(" · {} · ETA {}", hms(spent), hms(eta))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_eta_follows_the_rate_so_far() {
        assert_eq!(super::timing(72.0, 1200, 5000), " · 1m 12s · ETA 3m 48s");
        assert_eq!(super::timing(3.0, 0, 10), "");
        assert_eq!(super::timing(3700.0, 1, 2), " · 1h 01m · ETA 1h 01m");
    }
}
