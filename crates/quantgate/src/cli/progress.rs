//! Progress on stderr for long steps, never on stdout (logs and tests read the result lines
//! there). On a terminal: indicatif bars with an ETA. Elsewhere (a protocol run's log files, CI):
//! plain lines at most every 5 s with the elapsed time and an ETA, since a hidden bar left the
//! 7B protocol's eval steps silent for up to 6 minutes each.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A progress display of `len` units of `what`: a bar on a terminal, else [`Lines`].
pub enum Bar {
    /// stderr is a terminal.
    Tty(ProgressBar),
    /// stderr is a file or pipe.
    Lines(Lines),
}

/// Plain progress lines (`chunks 3/8 · 1m 12s · ETA 2m 01s`): the first position change, then
/// at most one every 5 s.
pub struct Lines {
    what: String,
    start: Instant,
    // (length, position, time of the last line)
    state: Mutex<(u64, u64, Option<Instant>)>,
}

/// A bar of `len` units named `what` (e.g. "chunks"), drawn on stderr at most 4 times a second
/// on a terminal; plain lines elsewhere.
pub fn bar(len: u64, what: &str) -> Bar {
    if !std::io::stderr().is_terminal() {
        return Bar::Lines(Lines {
            what: what.to_string(),
            start: Instant::now(),
            state: Mutex::new((len, 0, None)),
        });
    }
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr_with_hz(4));
    let template =
        format!("{{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} {what} · ETA {{eta}} {{msg}}");
    pb.set_style(
        ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    Bar::Tty(pb)
}

impl Bar {
    /// Sets the number of units.
    pub fn set_length(&self, n: u64) {
        match self {
            Bar::Tty(pb) => pb.set_length(n),
            Bar::Lines(l) => l.update(Some(n), None),
        }
    }

    /// Sets the units done.
    pub fn set_position(&self, i: u64) {
        match self {
            Bar::Tty(pb) => pb.set_position(i),
            Bar::Lines(l) => l.update(None, Some(i)),
        }
    }

    /// A message after the counts (a terminal only: lines carry counts alone).
    pub fn set_message(&self, m: String) {
        if let Bar::Tty(pb) = self {
            pb.set_message(m)
        }
    }

    /// Runs `f` (which prints to stdout) with the bar hidden.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match self {
            Bar::Tty(pb) => pb.suspend(f),
            Bar::Lines(_) => f(),
        }
    }

    /// Removes the bar (lines stay: they are the log).
    pub fn finish_and_clear(&self) {
        if let Bar::Tty(pb) = self {
            pb.finish_and_clear()
        }
    }
}

impl Lines {
    fn update(&self, len: Option<u64>, pos: Option<u64>) {
        let Ok(mut s) = self.state.lock() else { return };
        let moved = pos.is_some_and(|p| p != s.1);
        if let Some(n) = len {
            s.0 = n;
        }
        if let Some(p) = pos {
            s.1 = p;
        }
        let due = s.2.is_none_or(|t| t.elapsed() >= Duration::from_secs(5));
        if !moved || !due || s.0 == 0 {
            return;
        }
        s.2 = Some(Instant::now());
        let spent = self.start.elapsed().as_secs_f64();
        eprintln!(
            "{} {}/{}{}",
            self.what,
            s.1,
            s.0,
            timing(spent, s.1 as usize, s.0 as usize)
        );
    }
}

/// Installs the library's progress hook ([`quantgate::progress`]): one stderr line when a step
/// starts and, within a counted step, at most one every 5 s with the time since the step
/// started and an ETA from its rate so far (`verify: gate 2 vectors: llama.cpp 1200/5000 ·
/// 1m 12s · ETA 3m 48s`), so a long run is never silent.
pub fn install_stderr_hook(command: &'static str) {
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
