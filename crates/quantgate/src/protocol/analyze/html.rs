//! `analysis.html` of `quantgate analyze`.

use std::fmt::Write as _;

use anyhow::Result;

use super::Analysis;
use crate::html::plots::{Chart, Series, Style};
use crate::html::{escape, figure, page};

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
