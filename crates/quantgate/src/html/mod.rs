//! The page frame of the self-contained HTML reports (inline CSS, no script, no font or
//! anything else from the network) and their inline SVG charts ([`plots`]). Each report's page
//! lives beside its report: `verify::html`, `release::html`, `protocol::analyze::html`.

pub mod plots;

use anyhow::Result;
use plots::Chart;

use crate::verify::outcome::Verdict;

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

/// A whole page: `title` (escaped) and the inline CSS around `body`.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style></head>\n<body>\n{body}</body></html>\n",
        escape(title)
    )
}

/// The GO / NO-GO badge of a verdict.
pub fn badge(v: Verdict) -> String {
    match v {
        Verdict::Go => "<span class=\"go\">GO</span>".into(),
        Verdict::NoGo => "<span class=\"nogo\">NO-GO</span>".into(),
    }
}

/// One chart as an inline SVG figure, 760 × 340 px.
///
/// Errors: a chart that cannot be drawn.
pub fn figure(c: &Chart) -> Result<String> {
    Ok(format!("<figure>{}</figure>\n", plots::svg(c, 760, 340)?))
}

/// `(index, value)` points of a series.
pub fn indexed(v: &[f64]) -> Vec<(f64, f64)> {
    v.iter().enumerate().map(|(i, y)| (i as f64, *y)).collect()
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
