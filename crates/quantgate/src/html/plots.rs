//! Charts as inline SVG through `plotters`' SVG backend (text as SVG `<text>`, no font files,
//! nothing fetched). One chart shape covers the reports' plots: series of points or lines
//! over a numeric x axis, with an optional horizontal threshold line.

use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// A polyline through the points in order.
    Line,
    /// A dot per point (with its label, if any).
    Points,
}

/// One named series; non-finite points are left out (and counted in the caption).
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// `(x, y)` in data units.
    pub points: Vec<(f64, f64)>,
    /// How the points are drawn.
    pub style: Style,
    /// A text beside each point (`Points` only; empty: none), e.g. the file type.
    pub point_labels: Vec<String>,
}

/// A chart: title, axis descriptions, series and an optional horizontal line (a threshold or
/// tolerance) with its label.
#[derive(Clone, Debug)]
pub struct Chart {
    /// Caption above the plot.
    pub title: String,
    /// Axis descriptions, with units.
    pub x_desc: String,
    pub y_desc: String,
    /// The data, drawn in order, coloured from a fixed palette.
    pub series: Vec<Series>,
    /// A horizontal line at `y` with its legend label (a threshold or tolerance).
    pub hline: Option<(f64, String)>,
    /// How many x labels to draw (`None`: plotters' default); an index axis sets its count.
    pub x_labels: Option<usize>,
}

const PALETTE: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// The range of `v` padded by 5 % (a unit range around a single value).
fn padded(mut lo: f64, mut hi: f64) -> std::ops::Range<f64> {
    if !(lo.is_finite() && hi.is_finite()) {
        return 0.0..1.0;
    }
    if hi - lo < 1e-12 {
        let d = if lo.abs() > 0.0 { lo.abs() * 0.01 } else { 0.5 };
        lo -= d;
        hi += d;
    }
    let pad = (hi - lo) * 0.05;
    (lo - pad)..(hi + pad)
}

/// Renders `c` as an SVG document of `w` × `h` pixels.
///
/// Errors: plotters' drawing errors (an SVG backend writing into a string has none in
/// practice).
pub fn svg(c: &Chart, w: u32, h: u32) -> Result<String> {
    let finite = |p: &&(f64, f64)| p.0.is_finite() && p.1.is_finite();
    let all: Vec<(f64, f64)> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().filter(finite).copied())
        .collect();
    let dropped: usize = c.series.iter().map(|s| s.points.len()).sum::<usize>() - all.len();
    let fold = |f: fn(&(f64, f64)) -> f64| {
        all.iter()
            .map(f)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |a, v| {
                (a.0.min(v), a.1.max(v))
            })
    };
    let (x0, x1) = fold(|p| p.0);
    let (mut y0, mut y1) = fold(|p| p.1);
    if let Some((t, _)) = &c.hline {
        y0 = y0.min(*t);
        y1 = y1.max(*t);
    }
    let title = if dropped > 0 {
        format!("{} ({dropped} non-finite values not drawn)", c.title)
    } else {
        c.title.clone()
    };
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (w, h)).into_drawing_area();
        let e = |e: &dyn std::fmt::Display| anyhow!("plot {:?}: {e}", c.title);
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(padded(x0, x1), padded(y0, y1))
            .map_err(|x| e(&x))?;
        let mut mesh = chart.configure_mesh();
        if let Some(n) = c.x_labels {
            mesh.x_labels(n.clamp(2, 30));
        }
        mesh.x_desc(c.x_desc.as_str())
            .y_desc(c.y_desc.as_str())
            .draw()
            .map_err(|x| e(&x))?;
        for (i, s) in c.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let labelled: Vec<((f64, f64), String)> = s
                .points
                .iter()
                .enumerate()
                .filter(|(_, p)| finite(p))
                .map(|(i, p)| (*p, s.point_labels.get(i).cloned().unwrap_or_default()))
                .collect();
            let drawn = match s.style {
                Style::Line => chart.draw_series(LineSeries::new(
                    labelled.into_iter().map(|(p, _)| p),
                    color.stroke_width(2),
                )),
                Style::Points => chart.draw_series(labelled.into_iter().map(move |(p, t)| {
                    EmptyElement::at(p)
                        + Circle::new((0, 0), 3, color.filled())
                        + Text::new(t, (6, -12), ("sans-serif", 12))
                })),
            };
            drawn
                .map_err(|x| e(&x))?
                .label(s.label.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 4), (x + 12, y + 4)], color.filled())
                });
        }
        if let Some((t, label)) = &c.hline {
            let (a, b) = (padded(x0, x1).start, padded(x0, x1).end);
            chart
                .draw_series(LineSeries::new(vec![(a, *t), (b, *t)], RED.stroke_width(1)))
                .map_err(|x| e(&x))?
                .label(label.as_str())
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], RED));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
        root.present().map_err(|x| e(&x))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_svg_with_its_title_and_drops_non_finite_points() {
        let c = Chart {
            title: "cosine per text".into(),
            x_desc: "text".into(),
            y_desc: "cosine".into(),
            series: vec![Series {
                label: "llama.cpp vs reference".into(),
                points: vec![(0.0, 0.999), (1.0, f64::NAN), (2.0, 0.9995)],
                style: Style::Points,
                point_labels: vec!["first".into(), "second".into(), "third".into()],
            }],
            hline: Some((0.99, "threshold 0.99".into())),
            x_labels: Some(3),
        };
        let s = svg(&c, 640, 320).unwrap();
        assert!(s.starts_with("<svg"), "{}", &s[..40]);
        assert!(s.contains("cosine per text (1 non-finite values not drawn)"));
        assert!(s.contains("threshold 0.99"));
        // Two drawn points: circles.
        assert_eq!(s.matches("<circle").count(), 2);
        // The labels of drawn points only.
        assert!(s.contains("first") && s.contains("third") && !s.contains("second"));
    }
}
