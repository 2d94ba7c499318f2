//! The card's files table and its "which file to choose" section, written from the measured
//! figures only (size, bits per weight, mean KLD and PPL ratio against the source, RAM at the
//! stated context), so they are as reproducible as report.json.
//!
//! The advice follows the convention of GGUF model cards (pick a file 1–2 GB under the RAM or
//! VRAM you have) with the margin fixed at [`MARGIN_GIB`], and ranks files by their measured
//! loss: a file is not recommended when another is no larger, needs no more RAM and loses no
//! more.

use std::fmt::Write as _;

use super::{ReleaseReport, ReleasedFile};

/// Free memory to keep beside a file's measured RAM, GiB (the low end of the cards' 1–2 GB).
pub const MARGIN_GIB: f64 = 1.0;

/// The measured loss the advice ranks by, always the file as shipped in llama.cpp against the
/// reference on the HF weights: mean KLD for causal LMs (the quality section for block-quantized
/// files, else Gate 2's logits, which then compare exactly that), 1 − min cosine for embedding
/// models (likewise); `None` when not measured.
fn loss(f: &ReleasedFile) -> Option<(f64, &'static str)> {
    let v = &f.verify;
    if let Some(q) = &v.quality {
        return Some((q.logits.mean_kld, "mean KLD"));
    }
    if let Some(l) = &v.gate2_logits {
        return Some((l.mean_kld, "mean KLD"));
    }
    let x = v
        .gate2_vectors_as_shipped
        .as_ref()
        .or(v.gate2_vectors.as_ref())?;
    Some((1.0 - x.min_cosine, "1 − min cosine"))
}

/// A loss figure: 4 decimals, or 2 significant digits below 0.001 (F16's KLD is ~1e-6).
fn figure(x: f64) -> String {
    if x != 0.0 && x.abs() < 1e-3 {
        format!("{x:.1e}")
    } else {
        format!("{x:.4}")
    }
}

fn size(bytes: u64) -> String {
    let mib = bytes as f64 / (1u64 << 20) as f64;
    if mib >= 1024.0 {
        format!("{:.2} GiB", mib / 1024.0)
    } else {
        format!("{mib:.0} MiB")
    }
}

fn ram_cell(f: &ReleasedFile) -> String {
    f.ram.as_ref().map_or("not measured".into(), |r| {
        format!("{:.1} GiB", r.peak_rss_gib)
    })
}

/// The files table's header cells and rows: name, llama.cpp file type, size, bits per
/// weight, mean KLD, PPL ratio, RAM at the stated context, sha256, the gates 1–2 verdict.
/// Markdown inline code marks names and hashes.
pub fn table(r: &ReleaseReport) -> (Vec<String>, Vec<Vec<String>>) {
    let ctx = r
        .files
        .iter()
        .find_map(|f| f.ram.as_ref())
        .map_or("ctx".into(), |x| format!("n_ctx {}", x.n_ctx));
    let head = [
        "file",
        "type",
        "size",
        "bits per weight",
        "mean KLD",
        "PPL ratio",
        &format!("RAM at {ctx}"),
        "sha256",
        "gates 1–2",
    ]
    .map(String::from)
    .to_vec();
    let rows = r
        .files
        .iter()
        .map(|f| {
            let q = f.verify.quality.as_ref();
            let kld = match loss(f) {
                Some((l, "mean KLD")) => figure(l),
                _ => "—".into(),
            };
            let ppl = q
                .and_then(|q| q.ppl.as_ref())
                .map_or("—".into(), |p| format!("{:.4}", p.ratio));
            vec![
                format!("`{}`", f.name),
                f.ftype.clone(),
                size(f.bytes),
                format!("{:.2}", f.bits_per_weight),
                kld,
                ppl,
                ram_cell(f),
                format!("`{}`", f.sha256),
                f.verify.verdict.to_string(),
            ]
        })
        .collect();
    (head, rows)
}

/// The files table in Markdown ([`table`]).
pub fn files_table(s: &mut String, r: &ReleaseReport) {
    let (head, rows) = table(r);
    let _ = writeln!(s, "| {} |", head.join(" | "));
    let align: Vec<&str> = (0..head.len())
        .map(|i| if (2..7).contains(&i) { "---:" } else { "---" })
        .collect();
    let _ = writeln!(s, "|{}|", align.join("|"));
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
}

/// What the advice weighs of one file.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// File name and llama.cpp file type.
    pub name: String,
    pub ftype: String,
    /// File size, bytes.
    pub bytes: u64,
    /// Memory it needs, GiB: the measured RAM, else the file size.
    pub need_gib: f64,
    /// The measured loss and its name ([`loss`]); `None` when not measured.
    pub loss: Option<(f64, &'static str)>,
    /// PPL ratio against the source, when measured.
    pub ppl_ratio: Option<f64>,
}

impl Choice {
    fn of(f: &ReleasedFile) -> Choice {
        Choice {
            name: f.name.clone(),
            ftype: f.ftype.clone(),
            bytes: f.bytes,
            need_gib: f.ram.as_ref().map_or_else(
                || super::ram::round_up_gib(f.bytes.div_ceil(1024)),
                |r| r.peak_rss_gib,
            ),
            loss: loss(f),
            ppl_ratio: f
                .verify
                .quality
                .as_ref()
                .and_then(|q| q.ppl.as_ref())
                .map(|p| p.ratio),
        }
    }

    /// `self` beats `f` when it needs no more RAM, is no larger and loses no more, and is
    /// better in one of them or (all equal) listed later.
    fn beats(&self, f: &Choice, later: bool) -> bool {
        let (Some((ls, _)), Some((lf, _))) = (self.loss, f.loss) else {
            return false;
        };
        let no_worse = self.need_gib <= f.need_gib && self.bytes <= f.bytes && ls <= lf;
        let better = self.need_gib < f.need_gib || self.bytes < f.bytes || ls < lf;
        no_worse && (better || later)
    }
}

/// "Which file to choose": how RAM was measured (the intro), then the items of
/// [`advice_items`]. Markdown inline code marks file names.
pub fn advice(r: &ReleaseReport) -> (String, Vec<String>) {
    let mut intro = match r.files.iter().find_map(|f| f.ram.as_ref()) {
        Some(x) => format!(
            "RAM is the measured peak resident memory of llama.cpp running the file at a {}-token context (`quantgate eval ppl`, {} chunks, {} threads; llama.cpp {}), rounded up to 0.1 GiB. A longer context needs more: the KV cache grows with it.",
            x.n_ctx, x.chunks, x.threads, r.llama_cpp
        ),
        None => "RAM was not measured (the release was built without `--ppl-text`, or holds an embedding model); the file size stands in for it below, and llama.cpp needs more than that for its context.".into(),
    };
    let _ = write!(
        intro,
        " Choose the lowest-loss file that fits in the RAM (or VRAM) you have free with {MARGIN_GIB:.0}–2 GiB to spare:"
    );
    let choices: Vec<Choice> = r.files.iter().map(Choice::of).collect();
    (intro, advice_items(&choices))
}

/// One item per file, largest need first: the memory to have free (need + [`MARGIN_GIB`]) and
/// its measured loss, or, for a file another one beats ([`Choice::beats`]), that it is not
/// recommended and which file beats it.
pub fn advice_items(choices: &[Choice]) -> Vec<String> {
    let mut order: Vec<&Choice> = choices.iter().collect();
    order.sort_by(|a, b| {
        b.need_gib
            .total_cmp(&a.need_gib)
            .then(b.bytes.cmp(&a.bytes))
            .then(a.name.cmp(&b.name))
    });
    order
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let what = match (f.loss, f.ppl_ratio) {
                (Some((l, name)), None) => format!("{name} {}", figure(l)),
                (Some((l, name)), Some(p)) => format!("{name} {}, PPL ratio {p:.4}", figure(l)),
                (None, _) => "loss not measured".into(),
            };
            let by = order
                .iter()
                .enumerate()
                .find(|(j, g)| *j != i && g.beats(f, *j > i));
            match by {
                Some((_, g)) => format!(
                    "Not recommended: `{}` ({}; {what}): `{}` is no larger, needs no more RAM and loses no more.",
                    f.name, f.ftype, g.name
                ),
                None => format!(
                    "With at least {:.1} GiB free: `{}` ({}, {} on disk; {what}).",
                    f.need_gib + MARGIN_GIB,
                    f.name,
                    f.ftype,
                    size(f.bytes)
                ),
            }
        })
        .collect()
}

/// The "Which file to choose" section in Markdown ([`advice`]).
pub fn which_file(s: &mut String, r: &ReleaseReport) {
    let (intro, items) = advice(r);
    let _ = writeln!(s, "## Which file to choose\n\n{intro}\n");
    for i in items {
        let _ = writeln!(s, "- {i}");
    }
    s.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, bytes: u64, need: f64, kld: f64) -> Choice {
        Choice {
            name: name.into(),
            ftype: name.to_uppercase(),
            bytes,
            need_gib: need,
            loss: Some((kld, "mean KLD")),
            ppl_ratio: None,
        }
    }

    #[test]
    fn a_file_that_is_larger_needs_more_and_loses_more_is_not_recommended() {
        let items = advice_items(&[
            c("f16", 16 << 20, 1.4, 0.0),
            c("q8_0", 8 << 20, 0.9, 0.001),
            c("q4_k_m", 5 << 20, 0.6, 0.05),
            // Larger than q4_k_m, needs more, and loses more: beaten.
            c("iq4_xs_bad", 6 << 20, 0.7, 0.09),
        ]);
        assert_eq!(
            items,
            [
                "With at least 2.4 GiB free: `f16` (F16, 16 MiB on disk; mean KLD 0.0000).",
                "With at least 1.9 GiB free: `q8_0` (Q8_0, 8 MiB on disk; mean KLD 0.0010).",
                "Not recommended: `iq4_xs_bad` (IQ4_XS_BAD; mean KLD 0.0900): `q4_k_m` is no larger, needs no more RAM and loses no more.",
                "With at least 1.6 GiB free: `q4_k_m` (Q4_K_M, 5 MiB on disk; mean KLD 0.0500).",
            ]
        );
    }

    #[test]
    fn equal_ram_keeps_both_the_smaller_file_and_the_lower_loss() {
        // SmolLM2 at n_ctx 512: F16 and Q4_K_M both need 0.6 GiB (repacked Q4_K weights).
        let items = advice_items(&[c("f16", 258 << 20, 0.6, 0.0), c("q4", 101 << 20, 0.6, 0.12)]);
        assert!(
            items.iter().all(|i| i.starts_with("With at least 1.6 GiB")),
            "{items:?}"
        );
        // Identical figures: one is named, the other not recommended.
        let items = advice_items(&[c("a", 1 << 20, 0.1, 0.1), c("b", 1 << 20, 0.1, 0.1)]);
        assert_eq!(
            items
                .iter()
                .filter(|i| i.starts_with("Not recommended"))
                .count(),
            1
        );
    }
}
