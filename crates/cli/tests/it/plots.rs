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

/// The stroke colour and width of every data line (`<polyline>`), the axes' black ones
/// left out.
fn line_strokes(svg: &str) -> Vec<(String, String)> {
    let attr = |piece: &str, name: &str| {
        piece
            .split(&format!(" {name}=\""))
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or_default()
            .to_string()
    };
    svg.split("<polyline")
        .skip(1)
        .map(|p| p.split('>').next().unwrap())
        .map(|p| (attr(p, "stroke"), attr(p, "stroke-width")))
        .filter(|(colour, _)| colour != "#000000")
        .collect()
}

/// The label `krylov plan`'s table gives a JSON row: `method[:k][:basis][:mpk]`.
fn candidate(r: &serde_json::Value) -> String {
    let mut s = r["method"].as_str().unwrap().to_string();
    if let Some(k) = r["k"].as_u64() {
        s.push_str(&format!(":{k}"));
    }
    if let Some(b) = r["basis"].as_str() {
        s.push_str(&format!(":{b}"));
    }
    if r["mpk"] == true {
        s.push_str(":mpk");
    }
    if let Some(l) = r["depth"].as_u64() {
        s.push_str(&format!(":{l}"));
    }
    s
}

#[test]
fn plan_plots_name_the_recommended_and_nearest_candidates_and_grey_the_rest() {
    // Issue 47 ("First hour"): the default candidates (every method and k, about 45) each
    // had a legend entry, colours repeating every ten, the recommended one not marked.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = krylov(&["gen", "poisson3d", "--n", "8", "-o", "p.mtx"], d);
    assert!(out.status.success());
    let args = [
        "plan", "p.mtx", "--ranks", "4,16,64", "--fabric", "fx100", "--json", "--plot", "plan.svg",
    ];
    let svg = svg(d, &args, "plan.svg");
    let out = krylov(&args, d);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut candidates: Vec<String> = rows
        .iter()
        .filter(|r| r["predicted_total_s"].is_f64())
        .map(candidate)
        .collect();
    candidates.sort();
    candidates.dedup();
    assert!(candidates.len() > 40, "the premise: {}", candidates.len());
    // The legend: the texts right of every data line.
    let right = rightmost_line_point(&svg);
    let legend: Vec<String> = texts(&svg)
        .into_iter()
        .filter(|(x, _)| *x > right)
        .map(|(_, t)| t)
        .collect();
    assert!(
        legend.len() <= 8,
        "{} legend entries: {legend:?}",
        legend.len()
    );
    let named: Vec<&String> = legend
        .iter()
        .filter(|t| candidates.iter().any(|c| t.starts_with(&format!("{c} ("))))
        .collect();
    // Each candidate recommended at some P is named, its entry saying at which.
    let mut recommended: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r["recommended"] == true) {
        let (c, p) = (candidate(r), r["ranks"].as_u64().unwrap());
        let entry = named
            .iter()
            .find(|t| t.starts_with(&format!("{c} (recommended at P = ")))
            .unwrap_or_else(|| panic!("{c} (recommended at P = {p}) not in {legend:?}"));
        let ps = entry.split("P = ").nth(1).unwrap().trim_end_matches(')');
        assert!(
            ps.split(", ").any(|q| q == p.to_string()),
            "{entry}: P = {p}"
        );
        if !recommended.contains(&c) {
            recommended.push(c);
        }
    }
    assert!(!recommended.is_empty());
    // The rest are summarised by one entry that counts them.
    let summary = legend
        .iter()
        .find(|t| t.ends_with(" other candidates (grey)"))
        .unwrap_or_else(|| panic!("no summary entry in {legend:?}"));
    let others: usize = summary.split(' ').next().unwrap().parse().unwrap();
    assert_eq!(named.len() + others, candidates.len(), "{legend:?}");
    assert!(named.len() >= 4, "the nearest are named too: {legend:?}");
    // A line per candidate: the grey ones share one colour, every named one has its own,
    // the recommended ones drawn thicker.
    let strokes = line_strokes(&svg);
    assert_eq!(strokes.len(), candidates.len());
    let grey = strokes
        .iter()
        .filter(|(_, w)| w == "1")
        .map(|(c, _)| c.as_str())
        .collect::<Vec<_>>();
    assert_eq!(grey.len(), others);
    assert!(grey.iter().all(|c| *c == grey[0]), "{grey:?}");
    let mut named_colours: Vec<&str> = strokes
        .iter()
        .filter(|(_, w)| w != "1")
        .map(|(c, _)| c.as_str())
        .collect();
    named_colours.sort();
    named_colours.dedup();
    assert_eq!(named_colours.len(), named.len(), "{strokes:?}");
    assert!(!named_colours.contains(&grey[0]));
    let bold = strokes.iter().filter(|(_, w)| w == "4").count();
    assert_eq!(bold, recommended.len(), "{strokes:?}");
    // The recommended point at each P is circled (black circles: one per P, one in the
    // legend).
    let rings = svg
        .split("<circle")
        .skip(1)
        .filter(|c| c.split('>').next().unwrap().contains("stroke=\"#000000\""))
        .count();
    assert_eq!(rings, 3 + 1, "a circle per P and the legend's");
}
