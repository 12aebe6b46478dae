//! The latency chart of a run, as one self-contained SVG file a browser opens: latency (y, ms)
//! against percentile (x, on the "nines" scale, so p99.9 is as far from p99 as p99 is from p90),
//! one curve per kind of request. Tails are what a flash sale is judged by, and a table of five
//! percentiles hides their shape.

use crate::report::Report;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::fmt::Write;

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 480.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 160.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 50.0;
/// The x axis ends at p99.999 (five nines).
const NINES: f64 = 5.0;
/// Points per curve: enough for a smooth line, few enough for a small file.
const POINTS: usize = 200;
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// Draws the latency curves of `latency` (microseconds, by kind) under the report's headline.
pub fn svg(report: &Report, latency: &BTreeMap<&'static str, Histogram<u64>>) -> String {
    let curves: Vec<(&str, Vec<(f64, f64)>)> = latency
        .iter()
        .filter(|(_, h)| !h.is_empty())
        .map(|(kind, h)| (*kind, curve(h)))
        .collect();
    let top_ms = curves
        .iter()
        .flat_map(|(_, points)| points.iter().map(|&(_, ms)| ms))
        .fold(0.0, f64::max);
    let y_max = nice_ceiling(top_ms);
    let x = |nines: f64| LEFT + nines / NINES * (WIDTH - LEFT - RIGHT);
    let y = |ms: f64| HEIGHT - BOTTOM - ms / y_max * (HEIGHT - TOP - BOTTOM);

    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    out.push_str(r#"<rect width="100%" height="100%" fill="white"/>"#);
    let title = format!(
        "{:?} against {}: {:.0} req/s, {} in flight, {:.1} s",
        report.scenario, report.url, report.requests_per_sec, report.concurrency, report.seconds
    );
    let _ = write!(
        out,
        r#"<text x="{LEFT}" y="28" font-size="15">{}</text>"#,
        escape(&title)
    );
    for step in 0..=5 {
        let ms = y_max * f64::from(step) / 5.0;
        let (x0, x1, yy) = (x(0.0), x(NINES), y(ms));
        let _ = write!(
            out,
            r##"<line x1="{x0}" y1="{yy:.1}" x2="{x1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            yy + 4.0,
            tick_label(ms, y_max)
        );
    }
    for (nines, label) in [
        (0.0, "min"),
        (1.0, "p90"),
        (2.0, "p99"),
        (3.0, "p99.9"),
        (4.0, "p99.99"),
        (5.0, "p99.999"),
    ] {
        let (xx, y0, y1) = (x(nines), y(0.0), y(y_max));
        let _ = write!(
            out,
            r##"<line x1="{xx:.1}" y1="{y0}" x2="{xx:.1}" y2="{y1}" stroke="#ddd"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            y0 + 18.0
        );
    }
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile</text><text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">latency, ms</text>"#,
        x(NINES / 2.0),
        HEIGHT - 10.0,
        y(y_max / 2.0),
        y(y_max / 2.0)
    );
    for (i, (kind, points)) in curves.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let path: Vec<String> = points
            .iter()
            .map(|&(nines, ms)| format!("{:.1},{:.1}", x(nines), y(ms)))
            .collect();
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        let legend_y = TOP + 20.0 * i as f64;
        let legend_x = WIDTH - RIGHT + 20.0;
        let _ = write!(
            out,
            r#"<line x1="{legend_x}" y1="{legend_y}" x2="{:.1}" y2="{legend_y}" stroke="{colour}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            legend_x + 20.0,
            legend_x + 26.0,
            legend_y + 4.0,
            escape(kind)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// The histogram sampled along the x axis: (nines, milliseconds) pairs.
fn curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    (0..=POINTS)
        .map(|i| {
            let nines = NINES * i as f64 / POINTS as f64;
            let quantile = 1.0 - 10f64.powf(-nines);
            (nines, h.value_at_quantile(quantile) as f64 / 1000.0)
        })
        .collect()
}

/// The smallest of 1, 2 or 5 × a power of ten at or above `ms` (so grid lines fall on round
/// numbers); 1 ms for an empty chart.
fn nice_ceiling(ms: f64) -> f64 {
    if ms <= 0.0 || !ms.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(ms.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&candidate| candidate >= ms)
        .unwrap_or(10.0 * power)
}

/// A grid line's label, with as many decimals as the axis's scale needs (0, 4, 8 … or 0, 0.2,
/// 0.4 …).
fn tick_label(ms: f64, y_max: f64) -> String {
    let decimals = match y_max {
        m if m >= 10.0 => 0,
        m if m >= 1.0 => 1,
        _ => 2,
    };
    format!("{ms:.decimals$}")
}

/// Text safe inside an SVG element (the URL comes from the command line).
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_axis_ends_on_a_round_number_at_or_above_the_slowest_request() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(3.7), 5.0);
        assert_eq!(nice_ceiling(5.0), 5.0);
        assert_eq!(nice_ceiling(12.0), 20.0);
        assert!((nice_ceiling(0.31) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn each_curve_climbs_from_the_median_to_the_tail() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for micros in 1..=100_000u64 {
            h.record(micros).unwrap();
        }
        let points = curve(&h);
        assert_eq!(points.len(), POINTS + 1);
        assert!(points.windows(2).all(|w| w[0].1 <= w[1].1));
        let p99 = points[POINTS * 2 / 5].1;
        assert!((p99 - 99.0).abs() < 0.2, "p99 was {p99} ms");
        assert!((points[POINTS].1 - 100.0).abs() < 0.2);
    }

    #[test]
    fn one_curve_and_one_legend_entry_per_kind_of_request() {
        let mut latency = BTreeMap::new();
        for kind in ["buy", "pay", "cancel"] {
            let mut h = Histogram::<u64>::new(3).unwrap();
            h.record(1_500).unwrap();
            latency.insert(kind, h);
        }
        latency.insert("browse", Histogram::<u64>::new(3).unwrap());
        let report = Report {
            scenario: crate::Scenario::Mixed,
            guard: crate::Guard::None,
            url: "http://127.0.0.1:8080/?a&b".into(),
            concurrency: 64,
            product: Some(1),
            stock: 10,
            buckets: 1,
            seconds: 1.0,
            requests: 3,
            requests_per_sec: 3.0,
            latency_ms: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            cpu_us_per_request: BTreeMap::new(),
            checks: Vec::new(),
            passed: true,
        };
        let svg = svg(&report, &latency);
        assert_eq!(
            svg.matches("<polyline").count(),
            3,
            "browse had no requests"
        );
        assert!(svg.contains(">cancel</text>") && !svg.contains(">browse</text>"));
        assert!(svg.contains("?a&amp;b") && svg.ends_with("</svg>\n"));
        assert!(
            svg.contains(">2.0</text>"),
            "1.5 ms rounds the axis up to 2 ms"
        );
    }

    #[test]
    fn grid_labels_carry_the_decimals_the_scale_needs() {
        assert_eq!(tick_label(16.0, 20.0), "16");
        assert_eq!(tick_label(0.8, 2.0), "0.8");
        assert_eq!(tick_label(0.1, 0.5), "0.10");
    }

    #[test]
    fn markup_in_names_cannot_break_the_file() {
        assert_eq!(escape("http://a/?x=<1>&y"), "http://a/?x=&lt;1&gt;&amp;y");
    }
}
