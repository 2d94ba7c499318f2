//! `report.html` of `quantgate verify`, and the section each verified file has in a release's
//! page: verdict, measurements, blockers and charts.

use std::fmt::Write as _;

use anyhow::Result;

use super::logits::LogitsReport;
use super::VerifyReport;
use crate::html::plots::{Chart, Series, Style};
use crate::html::{badge, escape, figure, indexed, page};

/// Floor of the log-scale KLD axis, nats (a lossless file's KLDs sit at rounding noise).
const KLD_FLOOR: f64 = 1e-9;

/// The per-position KLD distribution: log10 KLD at each percentile.
fn kld_series(label: &str, l: &LogitsReport) -> Series {
    let log: Vec<f64> = l
        .kld_percentiles
        .iter()
        .map(|k| k.max(KLD_FLOOR).log10())
        .collect();
    Series {
        label: label.into(),
        points: indexed(&log),
        style: Style::Line,
        point_labels: Vec::new(),
    }
}

/// Per-text cosine with the threshold, and the KLD distributions, of one verify report.
fn verify_charts(r: &VerifyReport) -> Result<String> {
    let mut out = String::new();
    if let Some(v) = &r.gate2_vectors {
        out += &figure(&Chart {
            title: "Gate 2: cosine per text, llama.cpp vs reference".into(),
            x_desc: "text (corpus, queries, documents)".into(),
            y_desc: "cosine".into(),
            series: vec![Series {
                label: "cosine".into(),
                points: indexed(&v.per_text_cosine),
                style: Style::Points,
                point_labels: Vec::new(),
            }],
            hline: Some((
                r.thresholds.min_cosine,
                format!("threshold {}", r.thresholds.min_cosine),
            )),
            x_labels: None,
        })?;
    }
    if let Some(l) = &r.gate2_logits {
        out += &figure(&Chart {
            title: "Gate 2: lowest logits cosine per text".into(),
            x_desc: "text".into(),
            y_desc: "min cosine over positions".into(),
            series: vec![Series {
                label: "min cosine".into(),
                points: indexed(&l.per_text_min_cosine),
                style: Style::Points,
                point_labels: Vec::new(),
            }],
            hline: Some((
                r.thresholds.min_logits_cosine,
                format!("threshold {}", r.thresholds.min_logits_cosine),
            )),
            x_labels: None,
        })?;
        let mut series = vec![kld_series("judged (Gate 2)", l)];
        if let Some(q) = &r.quality {
            series.push(kld_series("as shipped vs source (quality)", &q.logits));
        }
        out += &figure(&Chart {
            title: "Per-position KLD distribution".into(),
            x_desc: "percentile of positions".into(),
            y_desc: "log10 KLD (nats; floor 1e-9)".into(),
            series,
            hline: Some((
                r.thresholds.max_mean_kld.max(KLD_FLOOR).log10(),
                format!("mean KLD threshold {}", r.thresholds.max_mean_kld),
            )),
            x_labels: None,
        })?;
    }
    Ok(out)
}

fn blockers_html(s: &mut String, r: &VerifyReport) {
    if r.blockers.is_empty() {
        return;
    }
    s.push_str("<table><tr><th>gate</th><th>code</th><th>subject</th><th>detail</th></tr>\n");
    for b in &r.blockers {
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            b.gate,
            b.code,
            escape(&b.subject),
            escape(&b.detail)
        );
    }
    s.push_str("</table>\n");
}

pub(crate) fn verify_section(r: &VerifyReport) -> Result<String> {
    let mut s = String::new();
    let g = &r.gate1;
    let _ = writeln!(
        s,
        "<p>Gate 1: metadata {}/{} keys, tensors {}/{} bit-identical.</p>",
        g.metadata_matching, g.metadata_keys, g.bit_identical, g.tensors
    );
    let im = &r.gate1_imatrix;
    match im.status {
        super::imatrix::ImatrixStatus::None => {}
        super::imatrix::ImatrixStatus::Checked => {
            let _ = writeln!(
                s,
                "<p>Gate 1 imatrix quant: checked with its imatrix (sha256 <code>{}</code>), every tensor re-made with its weights.</p>",
                escape(im.given.as_ref().map_or("?", |g| g.sha256.as_str()))
            );
        }
        super::imatrix::ImatrixStatus::NotGiven => {
            let worst = im.undecided.iter().map(|u| u.ratio()).fold(0.0, f64::max);
            let _ = writeln!(
                s,
                "<p><strong>Limitation:</strong> imatrix quant checked without its imatrix: {} tensors undecided byte for byte; worst RMS error {worst:.2} × the unweighted encoding's (bound {} ×).</p>",
                im.undecided.len(),
                super::imatrix::MAX_UNDECIDED_RMS_RATIO
            );
        }
    }
    if let Some(v) = &r.gate2_vectors {
        let _ = writeln!(
            s,
            "<p>Gate 2 embeddings: min cosine {:.6} over {} texts, top-1 identical {}/{}.</p>",
            v.min_cosine, v.texts, v.top1_identical, v.queries
        );
    }
    if let Some(l) = &r.gate2_logits {
        let _ = writeln!(
            s,
            "<p>Gate 2 logits: min cosine {:.6}, argmax agreement {:.4}, mean KLD {:.6} over {} positions.</p>",
            l.min_cosine, l.top1_agreement, l.mean_kld, l.positions
        );
    }
    if let Some(rt) = r.gate2_logits.as_ref().and_then(|l| l.routing.as_ref()) {
        let _ = writeln!(
            s,
            "<p>Gate 2 expert routing: {} of {} (token, layer) choices differ from the reference's, {} at a clear margin (≥ {}).</p>",
            rt.differing, rt.pairs, rt.differing_clear, super::routing::NEAR_TIE
        );
    }
    if let Some(lc) = &r.gate2_long_context {
        let _ = writeln!(
            s,
            "<p>Gate 2 long context ({}): positions {}..{}, min cosine {:.6}, argmax agreement {:.4}, mean KLD {:.6}.</p>",
            escape(&lc.why), lc.first_scored, lc.n_tokens, lc.logits.min_cosine, lc.logits.top1_agreement, lc.logits.mean_kld
        );
    }
    if let Some(q) = &r.quality {
        let _ = writeln!(
            s,
            "<p>Quality ({}), as shipped vs source: mean KLD {:.6}, p99 KLD {:.6}, same top p {:.4}, RMS Δp {:.4}{}.</p>",
            escape(&q.ftype),
            q.logits.mean_kld,
            q.logits.p99_kld,
            q.logits.top1_agreement,
            q.logits.rms_dp,
            q.ppl.as_ref().map_or(String::new(), |p| format!(", PPL ratio {:.4}", p.ratio))
        );
    }
    stress_html(&mut s, r);
    blockers_html(&mut s, r);
    s += &verify_charts(r)?;
    Ok(s)
}

/// Gate 2's generated tokenizer cases per class, if they ran.
fn stress_html(s: &mut String, r: &VerifyReport) {
    let Some(st) = &r.gate2_stress else {
        return;
    };
    let _ = writeln!(
        s,
        "<p>Gate 2 tokenizer stress (seed {}, {} per class, <code>{}</code> vocabulary):</p>\n<table><tr><th>class</th><th>declared</th><th>matched</th><th>known cause</th><th>first mismatch</th></tr>",
        st.seed,
        st.per_class,
        escape(&st.tokenizer_model)
    );
    for c in &st.classes {
        let shown = c.result.first_unexplained.as_ref();
        let first = shown
            .or(c.result.first_mismatch.as_ref())
            .map_or(String::new(), |m| {
                format!(
                    "{:?}: HF {:?}, llama.cpp {:?}",
                    m.text, m.hf_pieces, m.llama_pieces
                )
            });
        // A long word's pieces would fill the page: the start says enough.
        let first: String = first.chars().take(300).collect();
        let known = c.result.explained.values().sum::<usize>();
        let _ = writeln!(
            s,
            "<tr><td>{:?}</td><td>{:?}</td><td>{}/{}</td><td>{}</td><td>{}</td></tr>",
            c.result.class,
            c.severity,
            c.result.matched,
            c.result.cases,
            known,
            escape(&first)
        );
    }
    s.push_str("</table>\n");
}

/// `report.html` of `quantgate verify`.
///
/// Errors: a chart that cannot be drawn.
pub fn verify_page(r: &VerifyReport) -> Result<String> {
    let mut body = format!("<h1>quantgate verify {}</h1>\n", badge(r.verdict));
    let _ = writeln!(
        body,
        "<p>quantgate {} · runtime {}</p>",
        escape(&r.quantgate),
        escape(&r.llama_cpp)
    );
    body += &verify_section(r)?;
    Ok(page("quantgate verify", &body))
}
