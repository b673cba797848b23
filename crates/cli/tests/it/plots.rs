//! What every `--plot` draws (crates/cli/src/plot.rs): the legend beside the data, never on
//! it; log axes with ticks in human units (B, KiB, MiB; ns, us, ms, s); a distinct marker
//! per series, so curves that coincide stay visible.

use std::path::Path;

use crate::common::krylov_in as krylov;

/// The text of every `<text>` element with its x position.
fn texts(svg: &str) -> Vec<(f64, String)> {
    let mut found = Vec::new();
    for piece in svg.split("<text").skip(1) {
        let (attrs, rest) = piece.split_once('>').unwrap();
        let text = rest.split("</text>").next().unwrap().trim().to_string();
        let x = attrs
            .split("x=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or(f64::NAN);
        found.push((x, text));
    }
    found
}

/// The largest x of every data line (`<polyline points="x,y x,y ...">`).
fn rightmost_line_point(svg: &str) -> f64 {
    svg.split("<polyline")
        .skip(1)
        .flat_map(|p| {
            let pts = p
                .split("points=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            pts.split_whitespace()
                .map(|xy| xy.split(',').next().unwrap().parse::<f64>().unwrap())
                .collect::<Vec<_>>()
        })
        .fold(f64::NEG_INFINITY, f64::max)
}

fn svg(dir: &Path, args: &[&str], name: &str) -> String {
    let out = krylov(args, dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(dir.join(name)).unwrap()
}

#[test]
fn latency_plots_keep_the_legend_off_the_data_and_tick_in_human_units() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "bench",
        "collectives",
        "--op",
        "allreduce",
        "--backend",
        "sim",
        "--price-only",
        "--ranks",
        "4,16",
        "--sizes",
        "8..4M",
        "--plot",
        "lat.svg",
    ];
    let svg = svg(dir.path(), &args, "lat.svg");
    let texts = texts(&svg);
    let labels: Vec<&str> = texts.iter().map(|(_, t)| t.as_str()).collect();
    // Bytes in binary units, latency in time units, each axis named with its unit.
    for tick in ["16 B", "1 KiB", "1 MiB", "4 MiB"] {
        assert!(labels.contains(&tick), "tick {tick} missing: {labels:?}");
    }
    assert!(
        labels.iter().any(|t| t.ends_with(" us")),
        "no microsecond tick: {labels:?}"
    );
    assert!(labels
        .iter()
        .any(|t| t.contains("size") && t.contains("bytes")));
    assert!(labels
        .iter()
        .any(|t| t.contains("latency") && t.contains("time")));
    // Every legend entry lies right of every data point.
    let right = rightmost_line_point(&svg);
    for name in ["recursive_doubling p=4", "auto p=16"] {
        let (x, _) = texts
            .iter()
            .find(|(_, t)| t == name)
            .unwrap_or_else(|| panic!("legend entry {name} missing"));
        assert!(
            *x > right,
            "legend entry {name} at x {x} over the data (right end {right})"
        );
    }
}

#[test]
fn identical_curves_stay_visible_with_a_marker_shape_per_series() {
    // recursive_doubling and auto are the same schedule at these sizes: identical lines.
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "bench",
        "collectives",
        "--op",
        "allreduce",
        "--algo",
        "all",
        "--backend",
        "sim",
        "--price-only",
        "--ranks",
        "4",
        "--sizes",
        "8..1K",
        "--json",
        "--plot",
        "lat.svg",
    ];
    let svg = svg(dir.path(), &args, "lat.svg");
    let out = krylov(&args, dir.path());
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let times = |algo: &str| -> Vec<f64> {
        rows.iter()
            .filter(|r| r["algo"] == algo)
            .map(|r| r["avg_us"].as_f64().unwrap())
            .collect()
    };
    assert_eq!(times("recursive_doubling"), times("auto"), "the premise");
    // Markers are polygons, each series' its own shape (five series here: five shapes), so
    // where two lines coincide both markers show (which points a long series marks is
    // plot.rs's unit test).
    let markers: Vec<&str> = svg.split("<polygon").skip(1).collect();
    assert!(
        markers.len() >= 2 * 8,
        "markers on the lines: {}",
        markers.len()
    );
    let mut shapes = std::collections::BTreeSet::new();
    for m in &markers {
        let pts = m
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let coords: Vec<(f64, f64)> = pts
            .split_whitespace()
            .map(|xy| {
                let (x, y) = xy.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        let cx = coords.iter().map(|c| c.0).sum::<f64>() / coords.len() as f64;
        let cy = coords.iter().map(|c| c.1).sum::<f64>() / coords.len() as f64;
        // The shape: its vertices relative to its centre, rounded.
        let shape: Vec<(i64, i64)> = coords
            .iter()
            .map(|c| ((c.0 - cx).round() as i64, (c.1 - cy).round() as i64))
            .collect();
        shapes.insert(shape);
    }
    assert_eq!(shapes.len(), 5, "distinct marker shapes");
}

/// Runs `krylov args` in `dir` with its stdout a pipe whose reader is closed before the
/// run prints anything (`krylov ... | head -0`): the exit status.
fn with_closed_stdout(dir: &Path, args: &[&str]) -> std::process::ExitStatus {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_krylov"))
        .args(args)
        .current_dir(dir)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("HOME")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the krylov binary runs");
    drop(child.stdout.take());
    child.wait().unwrap()
}

#[test]
fn a_plot_is_written_when_stdout_is_a_closed_pipe() {
    // Issue 47, item 7: the first line printed to a closed pipe ended the run (exit 0)
    // before the plot was written.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = krylov(&["gen", "poisson3d", "--n", "24", "-o", "p.mtx"], d);
    assert!(out.status.success());
    let runs: [&[&str]; 3] = [
        &["compare", "p.mtx", "--methods", "cg,ccg", "--plot", "c.svg"],
        &[
            "plan",
            "p.mtx",
            "--ranks",
            "2,4",
            "--fabric",
            "fx100",
            "--methods",
            "cg,pipecg",
            "--no-probe-cache",
            "--plot",
            "p.svg",
        ],
        &[
            "bench",
            "collectives",
            "--op",
            "allreduce",
            "--backend",
            "sim",
            "--price-only",
            "--ranks",
            "8",
            "--sizes",
            "8,64K",
            "--fabric",
            "fx100",
            "--plot",
            "b.svg",
        ],
    ];
    for args in runs {
        let name = args.last().unwrap();
        let status = with_closed_stdout(d, args);
        assert!(status.success(), "{args:?}: {status}");
        let svg = std::fs::read_to_string(d.join(name))
            .unwrap_or_else(|e| panic!("{args:?}: no plot ({e})"));
        assert!(svg.contains("<svg") && svg.contains("</svg>"), "{args:?}");
    }
    // Without a file to write, a closed stdout still ends the run at once, quietly.
    let status = with_closed_stdout(d, &["solve", "p.mtx"]);
    assert_eq!(status.code(), Some(0));
}
