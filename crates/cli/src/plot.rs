//! SVG line charts (plotters), one for every `--plot` of the CLI: `bench collectives`
//! (latency vs size), `bench neighbor` (GB/s vs size), `compare` (residual vs iteration) and
//! `plan` (predicted time vs ranks). Written through [`crate::output::write_atomic`].
//!
//! What a reader needs from them, and why they are drawn this way:
//! - the legend sits in a column of its own right of the plotting area (more columns when
//!   the series do not fit one), so it never covers data;
//! - each axis says its quantity, and its ticks carry human units ([`Unit`]: `16 B`, `4 KiB`,
//!   `10 us`, `2 ms`; powers of two on byte and rank axes, powers of ten elsewhere), so a
//!   log axis reads without counting decades;
//! - every series has its own colour AND marker (shape, filled or hollow), and a long
//!   series marks a subset of its points shifted by its index, and marker sizes take turns,
//!   so curves that coincide (algorithms that run the same schedule) still show each of
//!   their markers;
//! - a plot of many series (the plan's 45 candidates) names only the few a reader needs
//!   ([`Look`]: bold for the chosen ones, grey without an entry of its own for the rest,
//!   summarised by one legend entry) and may circle the chosen point at each x ([`Emphasis`]),
//!   so colours never repeat among the named series.

use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::element::ComposedElement;
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

/// How one series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Look {
    /// Its own colour and marker, a 2-pixel line and a legend entry (every series of a plot
    /// that singles none out).
    #[default]
    Normal,
    /// As [`Look::Normal`], with a 4-pixel line and larger markers, drawn over the others:
    /// the series the chart is about.
    Bold,
    /// A thin light-grey line without markers or legend entry of its own, drawn under the
    /// others: context ([`Emphasis::grey_label`] is their one entry).
    Grey,
}

/// What a chart draws beyond lines of [`Look::Normal`]: the plan plot's bold recommended
/// candidates, grey others and circled best points.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Emphasis<'a> {
    /// Each series' look, by index (a series past its end is [`Look::Normal`]).
    pub(crate) looks: &'a [Look],
    /// The one legend entry of all the [`Look::Grey`] series (`None`: they have none).
    pub(crate) grey_label: Option<&'a str>,
    /// Points circled in black, over every line.
    pub(crate) rings: &'a [(f64, f64)],
    /// The legend entry of the circles (`None`: they have none).
    pub(crate) ring_label: Option<&'a str>,
}

impl Emphasis<'_> {
    /// Series `i`'s look.
    fn look(&self, i: usize) -> Look {
        self.looks.get(i).copied().unwrap_or_default()
    }

    /// Series `i`'s style slot (colour and marker): its place among the series that are not
    /// grey, so the named series take distinct colours however many grey ones lie between.
    fn slot(&self, i: usize) -> usize {
        (0..i).filter(|&j| self.look(j) != Look::Grey).count()
    }

    /// Series `i`'s colour: its slot's in the palette, which in a chart that singles series
    /// out (any look given) leaves out its yellow and grey (faint on white, and like the
    /// grey lines): eight distinct colours for the named series.
    fn colour(&self, i: usize) -> RGBColor {
        const SINGLED_OUT: [usize; 8] = [0, 1, 2, 3, 4, 6, 7, 8];
        let slot = self.slot(i);
        if self.looks.is_empty() {
            colour(slot)
        } else {
            colour(SINGLED_OUT[slot % SINGLED_OUT.len()])
        }
    }
}

/// One legend row: a series (by index), the grey summary or the circles, with its label.
#[derive(Debug, Clone, Copy)]
enum Entry<'a> {
    Series(usize, &'a str),
    Grey(&'a str),
    Ring(&'a str),
}

impl<'a> Entry<'a> {
    fn label(&self) -> &'a str {
        match self {
            Entry::Series(_, l) | Entry::Grey(l) | Entry::Ring(l) => l,
        }
    }
}

/// The legend's rows: every series that is not grey, in order, then the grey summary and
/// the circles where they have a label.
fn entries<'a>(series: &'a Series, emphasis: &Emphasis<'a>) -> Vec<Entry<'a>> {
    let mut rows: Vec<Entry<'a>> = series
        .iter()
        .enumerate()
        .filter(|(i, _)| emphasis.look(*i) != Look::Grey)
        .map(|(i, (l, _))| Entry::Series(i, l.as_str()))
        .collect();
    let any_grey = (0..series.len()).any(|i| emphasis.look(i) == Look::Grey);
    if let (true, Some(l)) = (any_grey, emphasis.grey_label) {
        rows.push(Entry::Grey(l));
    }
    if let (false, Some(l)) = (emphasis.rings.is_empty(), emphasis.ring_label) {
        rows.push(Entry::Ring(l));
    }
    rows
}

/// An axis: its description (the quantity) and whether it is logarithmic.
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

/// The unit of an axis' values, which sets its tick positions and labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// A plain number (iterations, residuals, GB/s): ticks at powers of ten on a log axis,
    /// labels as numbers (`1e-8` below 1e-3 and from 1e5 on).
    Number,
    /// A count that doubles (ranks): ticks at powers of two, integer labels.
    Ranks,
    /// Bytes: ticks at powers of two, labels in B, KiB, MiB, GiB.
    Bytes,
    /// Seconds: labels in ns, us, ms or s.
    Seconds,
    /// Microseconds: labels in ns, us, ms or s.
    Microseconds,
}

/// The units of a chart's axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Units {
    pub(crate) x: Unit,
    pub(crate) y: Unit,
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

/// Draw `series` on `x` by `y` with plain numbers on both axes and write the SVG to `path`.
pub(crate) fn write_svg(
    path: &Path,
    chart: Chart<'_>,
    series: &Series,
    ranges: (Range<f64>, Range<f64>),
) -> Result<(), CliError> {
    let units = Units {
        x: Unit::Number,
        y: Unit::Number,
    };
    write_svg_in(path, chart, units, series, ranges)
}

/// Draw `series` on `x` by `y`, ticks in `units`, and write the SVG to `path`.
pub(crate) fn write_svg_in(
    path: &Path,
    chart: Chart<'_>,
    units: Units,
    series: &Series,
    ranges: (Range<f64>, Range<f64>),
) -> Result<(), CliError> {
    write_svg_with(path, chart, units, series, ranges, Emphasis::default())
}

/// Draw `series` on `x` by `y`, ticks in `units`, some series singled out or greyed by
/// `emphasis`, and write the SVG to `path`.
pub(crate) fn write_svg_with(
    path: &Path,
    chart: Chart<'_>,
    units: Units,
    series: &Series,
    ranges: (Range<f64>, Range<f64>),
    emphasis: Emphasis<'_>,
) -> Result<(), CliError> {
    let svg = render_with(chart, units, series, ranges, emphasis)?;
    write_atomic(path, |w| Ok(w.write_all(svg.as_bytes())?))
}

/// Width and height of the plotting part (axes included), in pixels.
const PLOT_SIZE: (u32, u32) = (880, 600);
/// Height of one legend row, in pixels.
const LEGEND_ROW: u32 = 18;
/// Top of the first legend row (level with the plotting area under the caption).
const LEGEND_TOP: u32 = 52;
/// Font size of legend labels; the legend's width assumes at most 0.6 em per character.
const LEGEND_FONT: u32 = 13;

/// Grey of the [`Look::Grey`] lines: light, so they read as background.
const GREY: RGBColor = RGBColor(0xb4, 0xb4, 0xb4);

/// The legend's columns, rows per column and column width for `entries`.
fn legend_layout(entries: &[Entry<'_>]) -> (u32, u32, u32) {
    let rows = ((PLOT_SIZE.1 - LEGEND_TOP - 20) / LEGEND_ROW).max(1);
    let n = u32::try_from(entries.len()).unwrap_or(u32::MAX);
    let cols = n.div_ceil(rows).max(1);
    let chars = entries
        .iter()
        .map(|e| e.label().chars().count())
        .max()
        .unwrap_or(0);
    let width = 44 + u32::try_from(chars).unwrap_or(200).min(200) * LEGEND_FONT * 6 / 10;
    (cols, rows, width)
}

/// The SVG text of the chart, every series [`Look::Normal`].
#[cfg(test)]
fn render(
    chart: Chart<'_>,
    units: Units,
    series: &Series,
    ranges: (Range<f64>, Range<f64>),
) -> Result<String, CliError> {
    render_with(chart, units, series, ranges, Emphasis::default())
}

/// The SVG text of the chart, series drawn as `emphasis` says.
fn render_with(
    chart: Chart<'_>,
    units: Units,
    series: &Series,
    (x, y): (Range<f64>, Range<f64>),
    emphasis: Emphasis<'_>,
) -> Result<String, CliError> {
    if series.is_empty() || x.start >= x.end || y.start >= y.end {
        return Err(bad("nothing to plot: fewer than two distinct points"));
    }
    let entries = entries(series, &emphasis);
    let (cols, _, col_width) = legend_layout(&entries);
    let size = (PLOT_SIZE.0 + cols * col_width + 10, PLOT_SIZE.1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        let failed = |e: Box<dyn std::error::Error>| CliError::failed(anyhow::anyhow!("plot: {e}"));
        root.fill(&WHITE).map_err(|e| failed(e.into()))?;
        let (plot_area, legend_area) = root.split_horizontally(PLOT_SIZE.0);
        let style = Style {
            chart,
            units,
            emphasis,
        };
        let (xl, yl) = (chart.x.log, chart.y.log);
        let (xk, yk) = (log_ticks(&x, units.x), log_ticks(&y, units.y));
        let lx = || {
            x.clone()
                .log_scale()
                .with_key_points(xk.0.clone())
                .with_light_points(xk.1.clone())
        };
        let ly = || {
            y.clone()
                .log_scale()
                .with_key_points(yk.0.clone())
                .with_light_points(yk.1.clone())
        };
        match (xl, yl) {
            (true, true) => draw(&plot_area, style, series, lx(), ly()),
            (true, false) => draw(&plot_area, style, series, lx(), y.clone()),
            (false, true) => draw(&plot_area, style, series, x.clone(), ly()),
            (false, false) => draw(&plot_area, style, series, x.clone(), y.clone()),
        }
        .map_err(failed)?;
        draw_legend(&legend_area, &entries, &emphasis).map_err(failed)?;
        root.present().map_err(|e| failed(e.into()))?;
    }
    Ok(svg)
}

/// Chart texts, units and emphasis, together.
#[derive(Clone, Copy)]
struct Style<'a> {
    chart: Chart<'a>,
    units: Units,
    emphasis: Emphasis<'a>,
}

fn draw<DB, X, Y>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    style: Style<'_>,
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
    let Style {
        chart,
        units,
        emphasis,
    } = style;
    let mut c = ChartBuilder::on(area)
        .caption(chart.caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(84)
        .build_cartesian_2d(x, y)?;
    let fx = |v: &f64| human(*v, units.x);
    let fy = |v: &f64| human(*v, units.y);
    c.configure_mesh()
        .x_desc(chart.x.desc)
        .y_desc(chart.y.desc)
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 13))
        .x_label_formatter(&fx)
        .y_label_formatter(&fy)
        .draw()?;
    // Grey lines under the others, bold ones over them; then the markers in the same order
    // (a line never hides a marker).
    let layers = [Look::Grey, Look::Normal, Look::Bold];
    for layer in layers {
        for (i, (_, pts)) in series.iter().enumerate() {
            let (look, paint) = (emphasis.look(i), emphasis.colour(i));
            let line = match look {
                _ if look != layer => continue,
                Look::Grey => GREY.stroke_width(1),
                Look::Normal => paint.stroke_width(2),
                Look::Bold => paint.stroke_width(4),
            };
            c.draw_series(LineSeries::new(pts.iter().copied(), line))?;
            if look == Look::Grey {
                // A dot per point: a candidate of one point is no line but still shows.
                let dots = pts.iter().map(|p| Circle::new(*p, 2, GREY.filled()));
                c.draw_series(dots)?;
            }
        }
    }
    // Within a layer the larger markers first, so that a smaller one shows inside a larger
    // one where series coincide.
    let mut by_size: Vec<usize> = (0..series.len()).collect();
    by_size.sort_by_key(|&i| emphasis.slot(i) % 3);
    for layer in layers {
        for &i in &by_size {
            let pts = &series[i].1;
            if emphasis.look(i) != layer || layer == Look::Grey {
                continue;
            }
            let (slot, paint, bold) = (emphasis.slot(i), emphasis.colour(i), layer == Look::Bold);
            let marked = marked(pts.len(), slot);
            c.draw_series(marked.map(|j| marker(pts[j], paint, slot, bold)))?;
        }
    }
    // Each circled point's own marker again, over any that coincide with it, in its circle.
    for p in emphasis.rings {
        let owner = layers.iter().rev().find_map(|&layer| {
            (0..series.len()).find(|&i| {
                layer != Look::Grey && emphasis.look(i) == layer && series[i].1.contains(p)
            })
        });
        if let Some(i) = owner {
            let bold = emphasis.look(i) == Look::Bold;
            c.draw_series([marker(*p, emphasis.colour(i), emphasis.slot(i), bold)])?;
        }
        c.draw_series([Circle::new(*p, RING, BLACK.stroke_width(2))])?;
    }
    Ok(())
}

/// Radius of the circles around [`Emphasis::rings`], in pixels: clear of a bold marker.
const RING: i32 = 12;

/// The legend: per entry a line sample (with the series' marker) or a circle, and the
/// label, in columns.
fn draw_legend<DB>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[Entry<'_>],
    emphasis: &Emphasis<'_>,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    let (_, rows, width) = legend_layout(entries);
    for (n, entry) in entries.iter().enumerate() {
        let i32_of = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        let row = u32::try_from(n).unwrap_or(u32::MAX);
        let x = i32_of((row / rows) * width + 6);
        let y = i32_of(LEGEND_TOP + (row % rows) * LEGEND_ROW);
        match *entry {
            Entry::Series(i, _) => {
                let (slot, paint) = (emphasis.slot(i), emphasis.colour(i));
                let bold = emphasis.look(i) == Look::Bold;
                let half = if bold { 2 } else { 1 };
                area.draw(&Rectangle::new(
                    [(x, y - half), (x + 28, y + half)],
                    paint.filled(),
                ))?;
                area.draw(&marker((x + 14, y), paint, slot, bold))?;
            }
            Entry::Grey(_) => {
                // Three thin lines (rectangles, so that every polyline is a data line).
                for dy in [-4, 0, 4] {
                    area.draw(&Rectangle::new(
                        [(x, y + dy), (x + 28, y + dy + 1)],
                        GREY.filled(),
                    ))?;
                }
            }
            Entry::Ring(_) => {
                area.draw(&Circle::new((x + 14, y), 8, BLACK.stroke_width(2)))?;
            }
        }
        let label = entry.label();
        let font = ("sans-serif", LEGEND_FONT).into_font().color(&BLACK).pos(
            plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Left,
                plotters::style::text_anchor::VPos::Center,
            ),
        );
        area.draw(&Text::new(label, (x + 36, y), font))?;
    }
    Ok(())
}

/// Ten distinct colours (Tableau 10), series `i` taking colour `i mod 10`.
fn colour(i: usize) -> RGBColor {
    const TABLEAU: [(u8, u8, u8); 10] = [
        (0x4e, 0x79, 0xa7),
        (0xf2, 0x8e, 0x2b),
        (0xe1, 0x57, 0x59),
        (0x76, 0xb7, 0xb2),
        (0x59, 0xa1, 0x4f),
        (0xed, 0xc9, 0x48),
        (0xb0, 0x7a, 0xa1),
        (0xff, 0x9d, 0xa7),
        (0x9c, 0x75, 0x5f),
        (0x79, 0x70, 0x6e),
    ];
    let (r, g, b) = TABLEAU[i % TABLEAU.len()];
    RGBColor(r, g, b)
}

/// Marker shapes: (corners, rotation in degrees); series `i` takes shape `i mod 8`, filled
/// for the first eight, hollow for the next eight, so (colour, marker) pairs repeat only
/// after 80 series.
const SHAPES: [(u32, f64); 8] = [
    (4, 45.0),  // square
    (3, -90.0), // triangle up
    (4, 0.0),   // diamond
    (3, 90.0),  // triangle down
    (8, 22.5),  // circle-like octagon
    (3, 0.0),   // triangle right
    (5, -90.0), // pentagon
    (3, 180.0), // triangle left
];

/// The corners of shape `shape` of radius `r` pixels around the origin.
fn corners(shape: usize, r: f64) -> Vec<(i32, i32)> {
    let (n, rot) = SHAPES[shape % SHAPES.len()];
    (0..n)
        .map(|k| {
            let a = (rot + 360.0 * f64::from(k) / f64::from(n)).to_radians();
            // Pixel offsets of a few pixels: the casts cannot overflow.
            ((r * a.cos()).round() as i32, (r * a.sin()).round() as i32)
        })
        .collect()
}

/// A marker drawn on `DB` at a `C`: its outline filled with the series' colour, then its
/// inside (the same polygon again for a filled marker, a smaller white one for a hollow one).
type Marker<C, DB> = ComposedElement<C, DB, Polygon<(i32, i32)>, Polygon<(i32, i32)>>;

/// The marker of style slot `i` in `colour` at `at` (a bold series' a third larger).
fn marker<C, DB: DrawingBackend>(at: C, colour: RGBColor, i: usize, bold: bool) -> Marker<C, DB> {
    let shape = i % SHAPES.len();
    // Three sizes in turn: where series coincide, a smaller marker sits inside a larger one.
    let r = 7.0 - 1.5 * f64::from(u8::try_from(i % 3).unwrap_or(0));
    let r = if bold { r * 4.0 / 3.0 } else { r };
    let outer = corners(shape, r);
    let inside = if (i / SHAPES.len()).is_multiple_of(2) {
        Polygon::new(outer.clone(), colour.filled())
    } else {
        Polygon::new(corners(shape, r * 0.55), WHITE.filled())
    };
    EmptyElement::at(at) + Polygon::new(outer, colour.filled()) + inside
}

/// At most this many markers per series.
const MARKERS: usize = 12;

/// The indices of the points of series `i` (of `len` points) that get a marker: all of a
/// short series; every `stride`-th point of a long one, starting at `i mod stride`, so
/// series that coincide mark different points.
fn marked(len: usize, i: usize) -> impl Iterator<Item = usize> {
    let stride = len.div_ceil(MARKERS).max(1);
    (i % stride..len).step_by(stride)
}

/// Tick positions of a log axis over `range`: (labelled, light grid lines). Powers of two
/// for bytes and ranks (every 1st, 2nd, 5th or 10th power, so KiB and MiB stay labelled),
/// powers of ten otherwise (with 2 and 5 times them on a range under two decades).
fn log_ticks(range: &Range<f64>, unit: Unit) -> (Vec<f64>, Vec<f64>) {
    const LABELS: usize = 12;
    let (lo, hi) = (range.start, range.end);
    if !(lo > 0.0 && hi > lo && hi.is_finite()) {
        return (Vec::new(), Vec::new());
    }
    let inside = |v: &f64| *v >= lo * (1.0 - 1e-9) && *v <= hi * (1.0 + 1e-9);
    let base: f64 = if matches!(unit, Unit::Bytes | Unit::Ranks) {
        2.0
    } else {
        10.0
    };
    // Exponents within the range (a span of at most ~2100 for any f64 range).
    let (e0, e1) = (lo.log(base).ceil() as i32, hi.log(base).floor() as i32);
    let powers: Vec<i32> = (e0..=e1).collect();
    let step = [1, 2, 5, 10, 20, 50, 100]
        .into_iter()
        .find(|s| powers.iter().filter(|e| *e % s == 0).count() <= LABELS)
        .unwrap_or(200);
    let mut bold: Vec<f64> = powers
        .iter()
        .filter(|e| *e % step == 0)
        .map(|e| base.powi(*e))
        .collect();
    let light: Vec<f64> = if base == 2.0 {
        powers.iter().map(|e| base.powi(*e)).collect()
    } else {
        (e0 - 1..=e1)
            .flat_map(|e| (1..10).map(move |d| f64::from(d) * 10f64.powi(e)))
            .filter(inside)
            .collect()
    };
    if base == 10.0 && powers.len() < 3 {
        bold = (e0 - 1..=e1)
            .flat_map(|e| [1.0, 2.0, 5.0].map(|d| d * 10f64.powi(e)))
            .filter(inside)
            .collect();
    }
    if bold.len() < 2 && base == 2.0 || bold.len() < 3 && base == 10.0 {
        // Under a decade: label every light line (1..9 x 10^k), so at least two are.
        bold = light.clone();
    }
    (bold, light)
}

/// `v` in `unit`, as a tick label: `16 B`, `4 KiB`, `250 us`, `1.5 ms`, `64`, `1e-8`.
pub(crate) fn human(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Number => number(v),
        Unit::Ranks => number(v),
        Unit::Bytes => {
            const PREFIXES: [(f64, &str); 4] = [
                (1_099_511_627_776.0, "TiB"),
                (1_073_741_824.0, "GiB"),
                (1_048_576.0, "MiB"),
                (1024.0, "KiB"),
            ];
            match PREFIXES.iter().find(|(s, _)| v.abs() >= *s) {
                Some((s, name)) => format!("{} {name}", sig3(v / s)),
                None => format!("{} B", sig3(v)),
            }
        }
        Unit::Seconds => seconds(v),
        Unit::Microseconds => seconds(v * 1e-6),
    }
}

/// A time in seconds with the unit that keeps it between 1 and 1000.
fn seconds(s: f64) -> String {
    let a = s.abs();
    let (scale, name) = if a == 0.0 || a >= 1.0 {
        (1.0, "s")
    } else if a >= 1e-3 * (1.0 - 1e-9) {
        (1e3, "ms")
    } else if a >= 1e-6 * (1.0 - 1e-9) {
        (1e6, "us")
    } else {
        (1e9, "ns")
    };
    format!("{} {name}", sig3(s * scale))
}

/// A plain number: up to three significant digits, exponent form far from 1.
fn number(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || (1e-3..1e5).contains(&a) {
        sig3(v)
    } else {
        let e = a.log10().floor();
        let m = v / 10f64.powf(e);
        // Rounding may carry the mantissa to 10.
        let (m, e) = if sig3(m.abs()) == "10" {
            (m / 10.0, e + 1.0)
        } else {
            (m, e)
        };
        format!("{}e{e}", sig3(m))
    }
}

/// `v` rounded to three significant digits, without trailing zeros.
fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = v.abs().log10().floor();
    // At most 2 - (-324) decimals for the smallest f64: bounded.
    let decimals = (2.0 - digits).clamp(0.0, 330.0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
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
    fn ticks_read_in_human_units() {
        let cases = [
            (8.0, Unit::Bytes, "8 B"),
            (1024.0, Unit::Bytes, "1 KiB"),
            (1536.0, Unit::Bytes, "1.5 KiB"),
            (4.0 * 1_048_576.0, Unit::Bytes, "4 MiB"),
            (2.5e-6, Unit::Seconds, "2.5 us"),
            (1e-3, Unit::Seconds, "1 ms"),
            (3.0, Unit::Seconds, "3 s"),
            (4e-8, Unit::Seconds, "40 ns"),
            (100.0, Unit::Microseconds, "100 us"),
            (1000.0, Unit::Microseconds, "1 ms"),
            (4096.0, Unit::Ranks, "4096"),
            (1e-8, Unit::Number, "1e-8"),
            (0.25, Unit::Number, "0.25"),
            (2.5e6, Unit::Number, "2.5e6"),
            (9.9999e-5, Unit::Number, "1e-4"),
            (0.0, Unit::Number, "0"),
            (12.0, Unit::Number, "12"),
        ];
        for (v, unit, want) in cases {
            assert_eq!(human(v, unit), want, "{v} {unit:?}");
        }
    }

    #[test]
    fn log_axes_get_labelled_ticks_across_their_whole_range() {
        // Bytes 8..4M: powers of four (1 KiB and 1 MiB among them), every power of two light.
        let (bold, light) = log_ticks(&(8.0..4.0 * 1_048_576.0), Unit::Bytes);
        assert!(bold.len() >= 5 && bold.len() <= 12, "{bold:?}");
        for v in [1024.0, 1_048_576.0, 4.0 * 1_048_576.0] {
            assert!(bold.contains(&v), "{v} in {bold:?}");
        }
        assert_eq!(light.len(), 20);
        // A range under two decades still gets at least three labels (1, 2, 5 x 10^k).
        let (bold, _) = log_ticks(&(2e-6..5e-4), Unit::Seconds);
        assert!(bold.len() >= 3, "{bold:?}");
        assert!(bold.iter().all(|v| (2e-6..=5e-4).contains(v)), "{bold:?}");
        // The neighbour plot's 1K..512K: a label per power of two.
        let (bold, _) = log_ticks(&(1024.0..524_288.0), Unit::Bytes);
        assert_eq!(bold.len(), 10, "{bold:?}");
        // Ranks 1..4096 in powers of two or four.
        let (bold, _) = log_ticks(&(1.0..4096.0), Unit::Ranks);
        assert!(bold.contains(&1.0) && bold.contains(&4096.0), "{bold:?}");
        // Under a decade (a plan of one rank count): every light line labelled, two or more.
        let (bold, _) = log_ticks(&(5.3e-4..2.1e-3), Unit::Seconds);
        let want = [6e-4, 7e-4, 8e-4, 9e-4, 1e-3, 2e-3];
        assert_eq!(bold.len(), want.len(), "{bold:?}");
        assert!(bold
            .iter()
            .zip(want)
            .all(|(b, w)| (b / w - 1.0).abs() < 1e-9));
        let (bold, _) = log_ticks(&(0.55..0.95), Unit::Number);
        assert_eq!(bold.len(), 4, "{bold:?}");
        // Nothing drawable: no ticks.
        assert_eq!(log_ticks(&(0.0..1.0), Unit::Number).0, Vec::<f64>::new());
    }

    #[test]
    fn coinciding_series_mark_different_points_with_different_markers() {
        // Short series mark every point.
        assert_eq!(marked(5, 3).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
        // Long ones at most MARKERS points, shifted by the series' index.
        let a: Vec<usize> = marked(1000, 0).collect();
        let b: Vec<usize> = marked(1000, 1).collect();
        assert!(a.len() <= MARKERS && b.len() <= MARKERS && !a.is_empty());
        assert!(a.iter().all(|j| !b.contains(j)), "{a:?} {b:?}");
        // (colour, shape, fill) pairs differ for the first 80 series.
        let key = |i: usize| {
            let c = colour(i);
            (c.0, c.1, c.2, i % SHAPES.len(), (i / SHAPES.len()) % 2)
        };
        let keys: std::collections::BTreeSet<_> = (0..80).map(key).collect();
        assert_eq!(keys.len(), 80);
        // Every shape is a different polygon.
        let shapes: std::collections::BTreeSet<_> =
            (0..SHAPES.len()).map(|s| corners(s, 5.5)).collect();
        assert_eq!(shapes.len(), SHAPES.len());
    }

    #[test]
    fn the_legend_lies_right_of_the_plotting_area() {
        let series: Series = (0..40)
            .map(|i| {
                (
                    format!("series-with-a-long-name-{i}"),
                    vec![(1.0, 1.0 + f64::from(i)), (1e3, 2.0)],
                )
            })
            .collect();
        let chart = Chart {
            caption: "legend",
            x: Axis {
                desc: "x",
                log: true,
            },
            y: Axis {
                desc: "y",
                log: true,
            },
        };
        let units = Units {
            x: Unit::Bytes,
            y: Unit::Seconds,
        };
        let svg = render(chart, units, &series, (0.5..2e3, 0.5..100.0)).unwrap();
        // Each label's x (left anchor) is past the plotting part; 40 labels need two columns.
        let texts: Vec<(f64, &str)> = svg
            .split("<text")
            .skip(1)
            .map(|piece| {
                let (attrs, rest) = piece.split_once('>').unwrap();
                let x = attrs
                    .split("x=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                (
                    x.parse().unwrap(),
                    rest.split("</text>").next().unwrap().trim(),
                )
            })
            .collect();
        let mut xs = Vec::new();
        for (label, _) in &series {
            let (x, _) = texts
                .iter()
                .find(|(_, t)| t == label)
                .unwrap_or_else(|| panic!("{label} missing"));
            assert!(*x > f64::from(PLOT_SIZE.0), "{label} at {x}");
            xs.push(*x);
        }
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        assert_eq!(xs.len(), 2, "two legend columns");
    }

    #[test]
    fn singled_out_series_take_distinct_colours_and_grey_ones_one_entry() {
        // 14 grey series between 6 named ones: the named take slots 0..6, the grey none.
        let mut looks = vec![Look::Grey; 20];
        for i in [0, 5, 9, 13, 17, 19] {
            looks[i] = Look::Normal;
        }
        looks[9] = Look::Bold;
        let series: Series = (0..20)
            .map(|i| (format!("s{i}"), vec![(1.0, 1.0 + f64::from(i)), (8.0, 2.0)]))
            .collect();
        let emphasis = Emphasis {
            looks: &looks,
            grey_label: Some("14 others (grey)"),
            rings: &[(8.0, 2.0)],
            ring_label: Some("best (circled)"),
        };
        let labels: Vec<&str> = entries(&series, &emphasis)
            .iter()
            .map(|e| e.label())
            .collect();
        assert_eq!(
            labels,
            [
                "s0",
                "s5",
                "s9",
                "s13",
                "s17",
                "s19",
                "14 others (grey)",
                "best (circled)"
            ]
        );
        let named: Vec<usize> = (0..20).filter(|&i| looks[i] != Look::Grey).collect();
        let colours: std::collections::BTreeSet<_> = named
            .iter()
            .map(|&i| {
                let c = emphasis.colour(i);
                (c.0, c.1, c.2)
            })
            .collect();
        assert_eq!(colours.len(), named.len());
        // Neither the palette's yellow nor its grey, nor the grey lines' colour.
        for faint in [colour(5), colour(9), GREY] {
            assert!(!colours.contains(&(faint.0, faint.1, faint.2)));
        }
        let chart = Chart {
            caption: "emphasis",
            x: Axis {
                desc: "x",
                log: true,
            },
            y: Axis {
                desc: "y",
                log: true,
            },
        };
        let units = Units {
            x: Unit::Ranks,
            y: Unit::Seconds,
        };
        let svg = render_with(chart, units, &series, (0.5..16.0, 0.5..40.0), emphasis).unwrap();
        let widths: Vec<&str> = svg
            .split("<polyline")
            .skip(1)
            .map(|p| p.split('>').next().unwrap())
            .filter(|p| !p.contains("stroke=\"#000000\""))
            .map(|p| {
                p.split("stroke-width=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
            })
            .collect();
        // Grey lines first (under the others), then the named, the bold one widest.
        assert_eq!(widths.len(), 20);
        assert!(widths[..14].iter().all(|w| *w == "1"), "{widths:?}");
        assert_eq!(widths.iter().filter(|w| **w == "4").count(), 1);
        for label in ["s9", "14 others (grey)", "best (circled)"] {
            assert!(svg.contains(label), "{label}");
        }
        assert!(
            !svg.contains("\ns1\n") && !svg.contains("\ns2\n"),
            "grey series unnamed"
        );
        // Without looks (every other plot): the palette in order, no entries added.
        let plain = Emphasis::default();
        assert_eq!(entries(&series, &plain).len(), 20);
        assert_eq!(plain.colour(5), colour(5));
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
