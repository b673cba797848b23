//! `cargo xtask bench-report`: modeled collective latency tables, TCA (peach2) against
//! InfiniBand (ib-qdr), as CSV and SVG plots under `reports/`, and per operation the size
//! where the model says TCA stops beating InfiniBand.
//!
//! It relies only on the documented command line (`../shared/CLI.md`): `krylov bench
//! collectives --op OP --algo all --backend sim --fabric F --ranks LIST --sizes LIST
//! --price-only --json` prints one JSON row per (algorithm, ranks, size) with `avg_us`, the
//! modeled time of one call (the slowest rank's). `--price-only` prices the schedule without
//! data or threads; the threaded sim backend gives the same modeled time for a call entered by
//! every rank at once (tests/it/sim.rs in castack-collectives checks that), and 4 MB blocks on
//! 16 thread ranks would need gigabytes. These are PREDICTIONS of the model from the
//! point-to-point calibration facts, not fitted to any collective measurement.

use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::flags::{parse_positive_list, Flags};
use crate::workspace::{self, cargo, Metadata};

pub(crate) const USAGE: &str = "\
usage: cargo xtask bench-report [--out DIR] [--ranks 2,4,8,16] [--sizes 8..4M]
                                [--fabrics peach2,ib-qdr] [--memory host|device]

Builds `krylov` in release, then for each operation (bcast, scatter, gather, reduce,
allgather, allreduce) and fabric runs `krylov bench collectives --op OP --algo all --backend
sim --fabric F --ranks LIST --sizes SIZES --price-only --json` (reduce with --memory device:
host_reduce vs device_reduce on GPU buffers; the others on --memory, default host). Writes
DIR/collectives.csv (every row), DIR/crossover.csv and one DIR/<op>.svg per operation
(latency vs size, log-log: for every fabric and rank count the best algorithm at each size,
plus every algorithm of both fabrics at the largest rank count), and prints per operation
and rank count the size from which the model says TCA (the first fabric) stops beating
InfiniBand (the second), the best algorithm of each fabric at each size. Predictions, not
fitted.

  --out DIR       output folder (default: reports in the workspace root; git-ignored)
  --ranks LIST    rank counts (default 2,4,8,16)
  --sizes SIZES   krylov's --sizes (default 8..4M)
  --fabrics A,B   the TCA fabric, then the one it is compared with (default peach2,ib-qdr)
  --memory M      buffers of the operations other than reduce: host (default) or device";

/// The operations of the report, and the memory each runs on (`None`: `--memory`).
const OPS: &[(&str, Option<&str>)] = &[
    ("bcast", None),
    ("scatter", None),
    ("gather", None),
    ("reduce", Some("device")),
    ("allgather", None),
    ("allreduce", None),
];

/// Flags of `cargo xtask bench-report`.
#[derive(Debug, PartialEq)]
pub(crate) struct Args {
    out: Option<PathBuf>,
    ranks: Vec<usize>,
    sizes: String,
    fabrics: [String; 2],
    memory: String,
}

impl Args {
    pub(crate) fn parse(args: &[String]) -> Result<Args> {
        let mut flags = Flags::new(args);
        let out = flags.value("--out")?.map(PathBuf::from);
        let ranks = match flags.value("--ranks")? {
            Some(v) => parse_positive_list("--ranks", &v)?,
            None => vec![2, 4, 8, 16],
        };
        let sizes = flags.value("--sizes")?.unwrap_or_else(|| "8..4M".into());
        let fabrics = match flags.value("--fabrics")? {
            Some(v) => match v.split(',').map(str::trim).collect::<Vec<_>>()[..] {
                [a, b] if !a.is_empty() && !b.is_empty() => [a.to_string(), b.to_string()],
                _ => bail!("--fabrics takes two names, e.g. peach2,ib-qdr (got `{v}`)"),
            },
            None => ["peach2".into(), "ib-qdr".into()],
        };
        let memory = flags.value("--memory")?.unwrap_or_else(|| "host".into());
        if memory != "host" && memory != "device" {
            bail!("--memory is host or device (got `{memory}`)");
        }
        flags.finish()?;
        Ok(Args {
            out,
            ranks,
            sizes,
            fabrics,
            memory,
        })
    }
}

/// One row of `krylov bench collectives --json` (the fields the report uses).
#[derive(Debug, Clone, PartialEq)]
struct Row {
    op: String,
    algo: String,
    fabric: String,
    memory: String,
    ranks: usize,
    bytes: usize,
    avg_us: f64,
}

impl Row {
    fn from_json(line: &str) -> Result<Row> {
        let v: Value =
            serde_json::from_str(line).with_context(|| format!("not a JSON row: `{line}`"))?;
        let text = |k: &str| -> Result<String> {
            v.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .with_context(|| format!("row without text field `{k}`: {line}"))
        };
        let int = |k: &str| -> Result<usize> {
            v.get(k)
                .and_then(Value::as_u64)
                .map(|x| x as usize)
                .with_context(|| format!("row without integer field `{k}`: {line}"))
        };
        Ok(Row {
            op: text("op")?,
            algo: text("algo")?,
            fabric: text("fabric")?,
            memory: text("memory")?,
            ranks: int("ranks")?,
            bytes: int("bytes")?,
            avg_us: v
                .get("avg_us")
                .and_then(Value::as_f64)
                .with_context(|| format!("row without `avg_us`: {line}"))?,
        })
    }
}

pub(crate) fn run(args: &Args) -> Result<()> {
    workspace::run(&mut cargo(["build", "--release", "-p", "castack-cli"]))?;
    let krylov = Metadata::load()?
        .target_directory
        .join("release")
        .join("krylov");
    if !krylov.is_file() {
        bail!("{} is missing after the build", krylov.display());
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| workspace::root().join("reports"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let ranks = args
        .ranks
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut rows = Vec::new();
    for &(op, memory) in OPS {
        let memory = memory.unwrap_or(&args.memory);
        for fabric in &args.fabrics {
            let mut cmd = Command::new(&krylov);
            cmd.args(["bench", "collectives", "--op", op, "--algo", "all"])
                .args(["--backend", "sim", "--fabric", fabric, "--memory", memory])
                .args(["--ranks", &ranks, "--sizes", &args.sizes])
                .args(["--price-only", "--json"]);
            eprintln!("$ {}", workspace::describe(&cmd));
            let o = cmd
                .output()
                .with_context(|| format!("could not start {}", krylov.display()))?;
            if !o.status.success() {
                bail!(
                    "krylov bench collectives --op {op} --fabric {fabric} failed ({}): {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                );
            }
            for line in String::from_utf8_lossy(&o.stdout).lines() {
                rows.push(Row::from_json(line)?);
            }
        }
    }
    let mut csv = String::from("op,algo,fabric,memory,ranks,bytes,avg_us\n");
    for r in &rows {
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{}",
            r.op, r.algo, r.fabric, r.memory, r.ranks, r.bytes, r.avg_us
        );
    }
    write(&out.join("collectives.csv"), &csv)?;
    let [tca, ib] = &args.fabrics;
    let mut cross = String::from("op,ranks,crossover_bytes,tca_fabric,ib_fabric\n");
    println!("Where the model says {tca} stops beating {ib} (best algorithm per fabric; predictions, not fitted):");
    println!("{:<10} {:>6}  crossover", "op", "ranks");
    for &(op, _) in OPS {
        let of_op: Vec<&Row> = rows.iter().filter(|r| r.op == op).collect();
        for &p in &args.ranks {
            let best_tca = best(&of_op, tca, p);
            let best_ib = best(&of_op, ib, p);
            let c = crossover(&best_tca, &best_ib);
            let _ = writeln!(
                cross,
                "{op},{p},{},{tca},{ib}",
                match c {
                    Crossover::At(b) => b.to_string(),
                    _ => String::new(),
                }
            );
            println!("{op:<10} {p:>6}  {}", c.describe(tca, ib));
        }
        let svg = plot(op, &of_op, &args.fabrics, &args.ranks);
        write(&out.join(format!("{op}.svg")), &svg)?;
    }
    write(&out.join("crossover.csv"), &cross)?;
    println!(
        "wrote {} rows to {}, crossover.csv and one SVG per operation",
        rows.len(),
        out.join("collectives.csv").display()
    );
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

/// Per size, the best (lowest) time of any algorithm of `fabric` at `p` ranks, and which.
fn best<'a>(rows: &[&'a Row], fabric: &str, p: usize) -> BTreeMap<usize, (f64, &'a str)> {
    let mut b: BTreeMap<usize, (f64, &str)> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.fabric == fabric && r.ranks == p) {
        let e = b.entry(r.bytes).or_insert((f64::INFINITY, ""));
        if r.avg_us < e.0 {
            *e = (r.avg_us, r.algo.as_str());
        }
    }
    b
}

/// Where the first fabric stops beating the second.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Crossover {
    /// From this size on the first fabric is never faster again (it was faster below).
    At(usize),
    /// Faster at every size measured.
    Never,
    /// Not faster at the smallest size.
    NotFaster,
    /// No common sizes.
    NoData,
}

impl Crossover {
    fn describe(self, tca: &str, ib: &str) -> String {
        match self {
            Crossover::At(b) => format!("{b} B ({tca} faster below, {ib} from there on)"),
            Crossover::Never => format!("none: {tca} faster at every size"),
            Crossover::NotFaster => format!("{tca} not faster even at the smallest size"),
            Crossover::NoData => "no data".to_string(),
        }
    }
}

/// The smallest size from which `a` is never strictly faster than `b` again, over the sizes
/// both have.
fn crossover(a: &BTreeMap<usize, (f64, &str)>, b: &BTreeMap<usize, (f64, &str)>) -> Crossover {
    let both: Vec<(usize, bool)> = a
        .iter()
        .filter_map(|(s, (ta, _))| b.get(s).map(|(tb, _)| (*s, ta < tb)))
        .collect();
    let Some(&(_, first)) = both.first() else {
        return Crossover::NoData;
    };
    if !first {
        return Crossover::NotFaster;
    }
    match both.iter().rposition(|&(_, faster)| faster) {
        Some(i) if i + 1 < both.len() => Crossover::At(both[i + 1].0),
        _ => Crossover::Never,
    }
}

/// A log-log SVG of latency against size: for every fabric and rank count the best
/// algorithm per size (solid), and every algorithm of every fabric at the largest rank
/// count (thin, dashed for the second fabric).
fn plot(op: &str, rows: &[&Row], fabrics: &[String; 2], ranks: &[usize]) -> String {
    let mut series: Vec<Series> = Vec::new();
    for (k, f) in fabrics.iter().enumerate() {
        for &p in ranks {
            let pts = best(rows, f, p)
                .into_iter()
                .map(|(s, (t, _))| (s as f64, t))
                .collect();
            series.push((format!("{f} p={p} best"), pts, 2.5, k == 1));
        }
    }
    if let Some(&pmax) = ranks.iter().max() {
        for (k, f) in fabrics.iter().enumerate() {
            let mut algos: Vec<&str> = rows
                .iter()
                .filter(|r| &r.fabric == f && r.ranks == pmax)
                .map(|r| r.algo.as_str())
                .collect();
            algos.dedup();
            for a in algos {
                let pts = rows
                    .iter()
                    .filter(|r| &r.fabric == f && r.ranks == pmax && r.algo == a)
                    .map(|r| (r.bytes as f64, r.avg_us))
                    .collect();
                series.push((format!("{f} p={pmax} {a}"), pts, 1.0, k == 1));
            }
        }
    }
    svg_loglog(
        &format!("{op}: modeled latency (best algorithm per fabric and ranks; all algorithms at the largest p)"),
        &series,
    )
}

/// A plot line: label, points (bytes, us), stroke width, dashed.
type Series = (String, Vec<(f64, f64)>, f64, bool);

const PALETTE: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22",
];

/// A minimal log-log line chart: decade grid lines, one polyline per series, a legend.
fn svg_loglog(title: &str, series: &[Series]) -> String {
    let pts = || {
        series
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .filter(|&(x, y)| x > 0.0 && y > 0.0)
    };
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in pts() {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (1.0, 10.0, 1.0, 10.0);
    }
    let (lx0, lx1) = (
        x0.log10().floor(),
        x1.log10().ceil().max(x0.log10().floor() + 1.0),
    );
    let (ly0, ly1) = (
        y0.log10().floor(),
        y1.log10().ceil().max(y0.log10().floor() + 1.0),
    );
    let (w, h, left, top, pw, ph) = (1200.0, 700.0, 80.0, 40.0, 700.0, 600.0);
    let sx = |x: f64| left + (x.log10() - lx0) / (lx1 - lx0) * pw;
    let sy = |y: f64| top + ph - (y.log10() - ly0) / (ly1 - ly0) * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="24" font-size="15">{}</text>"#,
        escape(title)
    );
    for d in (lx0 as i32)..=(lx1 as i32) {
        let x = sx(10f64.powi(d));
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">1e{d} B</text>"##,
            top + ph,
            top + ph + 18.0
        );
    }
    for d in (ly0 as i32)..=(ly1 as i32) {
        let y = sy(10f64.powi(d));
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">1e{d} us</text>"##,
            left + pw,
            left - 6.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        s,
        r#"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    for (i, (label, points, width, dashed)) in series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let dash = if *dashed {
            r#" stroke-dasharray="6,3""#
        } else {
            ""
        };
        let mut path = String::new();
        for &(x, y) in points.iter().filter(|&&(x, y)| x > 0.0 && y > 0.0) {
            let _ = write!(path, "{:.1},{:.1} ", sx(x), sy(y));
        }
        let _ = writeln!(
            s,
            r#"<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="{width}"{dash}/>"#
        );
        let ly = top + 10.0 + i as f64 * 16.0;
        let lx = left + pw + 20.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="{width}"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0,
            escape(label)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(v: &[(usize, f64)]) -> BTreeMap<usize, (f64, &'static str)> {
        v.iter().map(|&(s, t)| (s, (t, "x"))).collect()
    }

    #[test]
    fn crossover_is_where_the_first_fabric_stops_being_faster_for_good() {
        let ib = times(&[(8, 2.0), (64, 3.0), (512, 4.0), (4096, 5.0)]);
        assert_eq!(
            crossover(&times(&[(8, 1.0), (64, 2.0), (512, 5.0), (4096, 9.0)]), &ib),
            Crossover::At(512)
        );
        // A dip back below does not end the crossover early: the last faster size counts.
        assert_eq!(
            crossover(&times(&[(8, 1.0), (64, 4.0), (512, 3.0), (4096, 9.0)]), &ib),
            Crossover::At(4096)
        );
        assert_eq!(
            crossover(&times(&[(8, 1.0), (64, 1.0), (512, 1.0), (4096, 1.0)]), &ib),
            Crossover::Never
        );
        assert_eq!(
            crossover(&times(&[(8, 3.0), (64, 1.0)]), &ib),
            Crossover::NotFaster
        );
        assert_eq!(crossover(&times(&[(16, 1.0)]), &ib), Crossover::NoData);
    }

    #[test]
    fn rows_parse_from_krylov_json_and_best_picks_the_fastest_algorithm() {
        let line = r#"{"schema_version":1,"op":"bcast","algo":"linear","backend":"sim","fabric":"peach2","memory":"host","ranks":4,"bytes":8,"avg_us":2.5,"min_us":2.5,"max_us":2.5,"bandwidth_gbs":0.0,"busbw_gbs":0.0,"modeled":true,"verified":null}"#;
        let a = Row::from_json(line).unwrap();
        assert_eq!((a.ranks, a.bytes, a.avg_us), (4, 8, 2.5));
        let mut b = a.clone();
        b.algo = "binomial".into();
        b.avg_us = 1.5;
        let rows = vec![&a, &b];
        assert_eq!(best(&rows, "peach2", 4)[&8], (1.5, "binomial"));
        assert!(Row::from_json(r#"{"op":"bcast"}"#).is_err());
    }

    #[test]
    fn plot_is_an_svg_with_one_polyline_per_series() {
        let series = vec![
            ("a".to_string(), vec![(8.0, 1.0), (64.0, 2.0)], 2.0, false),
            ("b<c".to_string(), vec![(8.0, 3.0), (64.0, 4.0)], 1.0, true),
        ];
        let svg = svg_loglog("t", &series);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("b&lt;c"));
    }

    #[test]
    fn flags_parse() {
        let a = Args::parse(&["--ranks".into(), "2,4".into()]).unwrap();
        assert_eq!(a.ranks, vec![2, 4]);
        assert_eq!(a.fabrics, ["peach2".to_string(), "ib-qdr".to_string()]);
        assert!(Args::parse(&["--fabrics".into(), "peach2".into()]).is_err());
        assert!(Args::parse(&["--bogus".into()]).is_err());
    }
}
