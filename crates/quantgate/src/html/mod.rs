//! Self-contained HTML reports: `report.html` of verify and release, `analysis.html` of
//! analyze. One file each, inline SVG charts ([`plots`]), inline CSS, no script, no font or
//! anything else from the network.

pub mod plots;

use std::fmt::Write as _;

use anyhow::Result;
use plots::{Chart, Series, Style};

use crate::protocol::analyze::Analysis;
use crate::release::ReleaseReport;
use crate::verify::logits::LogitsReport;
use crate::verify::{Verdict, VerifyReport};

const CSS: &str = "body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}\
.go{color:#fff;background:#2a7d2a;padding:2px 10px;border-radius:4px}\
.nogo{color:#fff;background:#b22222;padding:2px 10px;border-radius:4px}\
figure{margin:1em 0}code{background:#f3f3f3;padding:0 3px}";

/// `s` with `& < > " '` escaped for HTML text and attributes.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style></head>\n<body>\n{body}</body></html>\n",
        escape(title)
    )
}

fn badge(v: Verdict) -> String {
    match v {
        Verdict::Go => "<span class=\"go\">GO</span>".into(),
        Verdict::NoGo => "<span class=\"nogo\">NO-GO</span>".into(),
    }
}

fn figure(c: &Chart) -> Result<String> {
    Ok(format!("<figure>{}</figure>\n", plots::svg(c, 760, 340)?))
}

fn indexed(v: &[f64]) -> Vec<(f64, f64)> {
    v.iter().enumerate().map(|(i, y)| (i as f64, *y)).collect()
}

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

fn verify_section(r: &VerifyReport) -> Result<String> {
    let mut s = String::new();
    let g = &r.gate1;
    let _ = writeln!(
        s,
        "<p>Gate 1: metadata {}/{} keys, tensors {}/{} bit-identical.</p>",
        g.metadata_matching, g.metadata_keys, g.bit_identical, g.tensors
    );
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
    blockers_html(&mut s, r);
    s += &verify_charts(r)?;
    Ok(s)
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

/// Size against quality across the files of a release: mean KLD and, where measured, the PPL
/// change.
fn release_charts(r: &ReleaseReport) -> Result<String> {
    let mb = |b: u64| b as f64 / 1e6;
    let kld = |f: &crate::release::ReleasedFile| {
        f.verify.quality.as_ref().map(|q| q.logits.mean_kld).or(f
            .verify
            .gate2_logits
            .as_ref()
            .map(|l| l.mean_kld))
    };
    let (pts, names): (Vec<(f64, f64)>, Vec<String>) = r
        .files
        .iter()
        .filter_map(|f| kld(f).map(|k| ((mb(f.bytes), k), f.ftype.clone())))
        .unzip();
    let mut out = String::new();
    if !pts.is_empty() {
        out += &figure(&Chart {
            title: "Size against mean KLD vs the source".into(),
            x_desc: "file size (MB)".into(),
            y_desc: "mean KLD (nats)".into(),
            series: vec![Series {
                label: "files".into(),
                points: pts,
                style: Style::Points,
                point_labels: names,
            }],
            hline: None,
            x_labels: None,
        })?;
    }
    let (ppl, ppl_names): (Vec<(f64, f64)>, Vec<String>) = r
        .files
        .iter()
        .filter_map(|f| {
            let p = f.verify.quality.as_ref()?.ppl.as_ref()?;
            Some(((mb(f.bytes), 100.0 * (p.ratio - 1.0)), f.ftype.clone()))
        })
        .unzip();
    if !ppl.is_empty() {
        out += &figure(&Chart {
            title: "Size against ΔPPL vs the source".into(),
            x_desc: "file size (MB)".into(),
            y_desc: "ΔPPL (%)".into(),
            series: vec![Series {
                label: "files".into(),
                points: ppl,
                style: Style::Points,
                point_labels: ppl_names,
            }],
            hline: None,
            x_labels: None,
        })?;
    }
    Ok(out)
}

/// `report.html` of `quantgate release`.
///
/// Errors: a chart that cannot be drawn.
pub fn release_page(r: &ReleaseReport) -> Result<String> {
    let mut body = format!(
        "<h1>quantgate release: {} — gates 1–2 {}</h1>\n",
        escape(&r.source),
        badge(r.gates_1_2)
    );
    let _ = writeln!(
        body,
        "<p>quantgate {} · llama.cpp {} · {} threads. Gate 3: <code>quantgate release --check .</code>; this run's result is in receipt.json.</p>",
        escape(&r.quantgate),
        escape(&r.llama_cpp),
        r.threads
    );
    body.push_str("<table><tr><th>file</th><th>ftype</th><th>bytes</th><th>bits/weight</th><th>sha256</th><th>gates 1–2</th></tr>\n");
    for f in &r.files {
        let _ = writeln!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td><code>{}</code></td><td>{}</td></tr>",
            escape(&f.name),
            escape(&f.ftype),
            f.bytes,
            f.bits_per_weight,
            &f.sha256[..16.min(f.sha256.len())],
            badge(f.verify.verdict)
        );
    }
    body.push_str("</table>\n");
    body += &release_charts(r)?;
    for f in &r.files {
        let _ = writeln!(body, "<h2>{} ({})</h2>", escape(&f.name), escape(&f.ftype));
        body += &verify_section(&f.verify)?;
    }
    Ok(page("quantgate release", &body))
}

/// `analysis.html` of `quantgate analyze`: each judged quantity's run-to-run deviation as a
/// fraction of its tolerance (1 = the tolerance).
///
/// Errors: a chart that cannot be drawn.
pub fn analysis_page(a: &Analysis) -> Result<String> {
    let judged: Vec<_> = a
        .rows
        .iter()
        .filter(|r| r.tolerance.is_some_and(|t| t > 0.0))
        .collect();
    let pts: Vec<(f64, f64)> = judged
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let d = r.deviation.map_or(f64::NAN, f64::abs);
            (i as f64, d / r.tolerance.unwrap_or(f64::NAN))
        })
        .collect();
    let mut body = format!(
        "<h1>quantgate analyze: {}</h1>\n<p>protocol {} · {}</p>\n",
        a.decision,
        escape(&a.protocol_id),
        escape(&a.decision_rule)
    );
    body += &figure(&Chart {
        title: "Run-to-run deviation against tolerance".into(),
        x_desc: "quantity (index in the table below)".into(),
        y_desc: "|deviation| / tolerance".into(),
        series: vec![Series {
            label: "judged quantities".into(),
            points: pts,
            style: Style::Points,
            point_labels: (0..judged.len()).map(|i| i.to_string()).collect(),
        }],
        hline: Some((1.0, "tolerance".into())),
        x_labels: Some(judged.len()),
    })?;
    body.push_str("<table><tr><th>#</th><th>model</th><th>quantity</th><th>run 1</th><th>run 2</th><th>deviation</th><th>tolerance</th><th>verdict</th></tr>\n");
    let opt = |x: Option<f64>| x.map_or("—".to_string(), |v| format!("{v:.6}"));
    for (i, r) in judged.iter().enumerate() {
        let _ = writeln!(
            body,
            "<tr><td>{i}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:?}</td></tr>",
            escape(&r.model),
            escape(&r.quantity),
            opt(r.run1),
            opt(r.run2),
            opt(r.deviation),
            opt(r.tolerance),
            r.verdict
        );
    }
    body.push_str("</table>\n");
    Ok(page("quantgate analyze", &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
