//! `report.html` of `quantgate release`: the files, their gates 1–2, size against quality,
//! and each file's verify section.

use std::fmt::Write as _;

use anyhow::Result;

use super::{choose, ReleaseReport};
use crate::html::plots::{Chart, Series, Style};
use crate::html::{badge, escape, figure, page};
use crate::verify::html::verify_section;

/// Size against quality across the files of a release: mean KLD and, where measured, the PPL
/// change.
fn release_charts(r: &ReleaseReport) -> Result<String> {
    let mb = |b: u64| b as f64 / 1e6;
    let kld = |f: &super::ReleasedFile| {
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
    files_and_advice(&mut body, r);
    body += &release_charts(r)?;
    for f in &r.files {
        let _ = writeln!(body, "<h2>{} ({})</h2>", escape(&f.name), escape(&f.ftype));
        body += &verify_section(&f.verify)?;
    }
    Ok(page("quantgate release", &body))
}

/// The card's files table and "which file to choose" ([`choose`]), as HTML.
fn files_and_advice(body: &mut String, r: &ReleaseReport) {
    let (head, rows) = choose::table(r);
    body.push_str("<table><tr>");
    for h in &head {
        let _ = write!(body, "<th>{}</th>", escape(h));
    }
    body.push_str("</tr>\n");
    for row in rows {
        body.push_str("<tr>");
        for (h, c) in head.iter().zip(row) {
            // The full hash is in the card and SHA256SUMS; 16 digits keep the table on screen.
            let c = match c.get(..17) {
                Some(short) if h == "sha256" => format!("{short}…`"),
                _ => c,
            };
            let _ = write!(body, "<td>{}</td>", inline_code(&c));
        }
        body.push_str("</tr>\n");
    }
    body.push_str("</table>\n");
    let (intro, items) = choose::advice(r);
    let _ = writeln!(
        body,
        "<h2>Which file to choose</h2>\n<p>{}</p>\n<ul>",
        inline_code(&intro)
    );
    for i in items {
        let _ = writeln!(body, "<li>{}</li>", inline_code(&i));
    }
    body.push_str("</ul>\n");
}

/// `text` escaped, with Markdown's `inline code` spans as `<code>`.
fn inline_code(text: &str) -> String {
    escape(text)
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("<code>{part}</code>")
            } else {
                part.to_string()
            }
        })
        .collect()
}
