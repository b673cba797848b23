//! `krylov solve --exchange segmented`: the SpMV halo and matrix-powers exchanges run by the
//! segmented multi-device strategy give the same solution, bit for bit, as naive.

use crate::common::krylov;

#[test]
fn segmented_exchange_gives_naive_bits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let m = dir.path().join("p6.mtx");
    let m = m.to_str().expect("utf-8 path");
    assert!(krylov(&["gen", "poisson3d", "--n", "6", "-o", m])
        .status
        .success());
    // 27 ranks of 8 rows: each interior rank talks to 6 others (rows +-1, +-6, +-36), more
    // than the 4 devices, so the segmented strategy really cuts messages.
    for method in [
        &["--method", "cg"][..],
        &["--method", "cbcgr", "--k", "3", "--mpk"],
    ] {
        let mut xs = Vec::new();
        for strategy in ["naive", "segmented"] {
            let x = dir.path().join(format!("x-{strategy}.mtx"));
            let x = x.to_str().expect("utf-8 path").to_string();
            let mut args = vec!["solve", m, "--ranks", "27", "--threads", "1"];
            args.extend_from_slice(method);
            args.extend_from_slice(&["--exchange", strategy, "--output", &x, "--json"]);
            let out = krylov(&args);
            assert!(
                out.status.success(),
                "{method:?} {strategy}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let report: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("one JSON report");
            assert_eq!(report["converged"], true);
            xs.push((
                std::fs::read(&x).expect("solution written"),
                report["iterations"].clone(),
                report["halo_exchanges"].clone(),
            ));
        }
        assert_eq!(xs[0], xs[1], "{method:?}: segmented differs from naive");
    }
}
