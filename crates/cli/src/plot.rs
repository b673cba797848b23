//! SVG line charts (plotters), one for every `--plot` of the CLI: `bench collectives`
//! (latency vs size), `bench neighbor` (GB/s vs size), `compare` (residual vs iteration) and
//! `plan` (predicted time vs ranks). Written through `crate::output::write_atomic`.

use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use crate::exit::{bad, CliError};
use crate::output::write_atomic;

/// Labelled lines of (x, y) points, drawn in this order.
pub(crate) type Series = Vec<(String, Vec<(f64, f64)>)>;

/// Appends `point` to the line labelled `label`, creating it (last) if new.
pub(crate) fn push(series: &mut Series, label: String, point: (f64, f64)) {
    match series.iter_mut().find(|(l, _)| *l == label) {
        Some((_, pts)) => pts.push(point),
        None => series.push((label, vec![point])),
    }
}

/// An axis: its description and whether it is logarithmic.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Axis<'a> {
    pub(crate) desc: &'a str,
    pub(crate) log: bool,
}

/// What to draw around the lines.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chart<'a> {
    pub(crate) caption: &'a str,
    pub(crate) x: Axis<'a>,
    pub(crate) y: Axis<'a>,
}

/// The range a chart shows for `values`: a log axis gets a factor `pad` of room each side
/// (values <= 0 cannot be drawn on it and are ignored), a linear one starts at zero and gets
/// 10% on top. `None` when nothing can be drawn.
pub(crate) fn span(values: impl Iterator<Item = f64>, log: bool, pad: f64) -> Option<Range<f64>> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
    if !lo.is_finite() {
        return None;
    }
    Some(if log {
        lo / pad..hi * pad
    } else {
        0.0f64.min(lo)..hi * 1.1 + 1e-9
    })
}

/// Draw `series` on `x` by `y` and write the SVG to `path`.
pub(crate) fn write_svg(
    path: &Path,
    chart: Chart<'_>,
    series: &Series,
    (x, y): (Range<f64>, Range<f64>),
) -> Result<(), CliError> {
    if series.is_empty() || x.start >= x.end || y.start >= y.end {
        return Err(bad("nothing to plot: fewer than two distinct points"));
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 600)).into_drawing_area();
        let drawn = match (chart.x.log, chart.y.log) {
            (true, true) => draw(&root, chart, series, x.log_scale(), y.log_scale()),
            (true, false) => draw(&root, chart, series, x.log_scale(), y),
            (false, true) => draw(&root, chart, series, x, y.log_scale()),
            (false, false) => draw(&root, chart, series, x, y),
        };
        drawn.map_err(|e| CliError::failed(anyhow::anyhow!("plot: {e}")))?;
    }
    write_atomic(path, |w| Ok(w.write_all(svg.as_bytes())?))
}

fn draw<DB, X, Y>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    chart: Chart<'_>,
    series: &Series,
    x: X,
    y: Y,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    root.fill(&WHITE)?;
    let mut c = ChartBuilder::on(root)
        .caption(chart.caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)?;
    let mut mesh = c.configure_mesh();
    mesh.x_desc(chart.x.desc).y_desc(chart.y.desc);
    let exponent = |v: &f64| format!("{v:.0e}");
    if chart.y.log {
        mesh.y_label_formatter(&exponent);
    }
    mesh.draw()?;
    for (i, (label, pts)) in series.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        c.draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    c.configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_pad_log_axes_and_start_linear_ones_at_zero() {
        let v = [2.0, 8.0, -1.0, f64::NAN];
        assert_eq!(span(v.into_iter(), true, 2.0), Some(1.0..16.0));
        let lin = span(v.into_iter(), false, 2.0).unwrap();
        assert_eq!(lin.start, -1.0);
        assert!((lin.end - 8.8).abs() < 1e-6);
        assert_eq!(span([0.0, -3.0].into_iter(), true, 2.0), None);
    }

    #[test]
    fn lines_group_points_by_label_in_first_seen_order() {
        let mut s = Series::new();
        push(&mut s, "b".into(), (1.0, 1.0));
        push(&mut s, "a".into(), (1.0, 2.0));
        push(&mut s, "b".into(), (2.0, 3.0));
        assert_eq!(s[0], ("b".to_string(), vec![(1.0, 1.0), (2.0, 3.0)]));
        assert_eq!(s[1].0, "a");
    }

    #[test]
    fn writes_an_svg_with_every_label_on_each_axis_kind() {
        let dir = std::env::temp_dir().join(format!("castack-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let series: Series = vec![
            ("first".into(), vec![(1.0, 1e-3), (10.0, 1e-6)]),
            ("second".into(), vec![(2.0, 1e-2), (20.0, 1e-4)]),
        ];
        for (xl, yl) in [(true, true), (true, false), (false, true), (false, false)] {
            let path = dir.join(format!("p{xl}{yl}.svg"));
            let chart = Chart {
                caption: "test chart",
                x: Axis {
                    desc: "xs",
                    log: xl,
                },
                y: Axis {
                    desc: "ys",
                    log: yl,
                },
            };
            let pts = || series.iter().flat_map(|(_, p)| p.iter().copied());
            let ranges = (
                span(pts().map(|p| p.0), xl, 1.5).unwrap(),
                span(pts().map(|p| p.1), yl, 2.0).unwrap(),
            );
            write_svg(&path, chart, &series, ranges).unwrap();
            let svg = std::fs::read_to_string(&path).unwrap();
            for text in ["test chart", "first", "second", "xs", "ys"] {
                assert!(svg.contains(text), "{text} missing ({xl}, {yl})");
            }
        }
        let empty = Series::new();
        let chart = Chart {
            caption: "c",
            x: Axis {
                desc: "x",
                log: false,
            },
            y: Axis {
                desc: "y",
                log: false,
            },
        };
        assert!(write_svg(&dir.join("e.svg"), chart, &empty, (0.0..1.0, 0.0..1.0)).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
