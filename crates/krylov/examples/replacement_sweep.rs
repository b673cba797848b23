//! Iterations of one method against `replace_every` on one Matrix Market file, b = A * ones,
//! Jacobi, tol 1e-8, ranks 1 and 3 (threads backend). The CLI has no flag for
//! `replace_every`; this is how the periodic residual replacement was measured.
//!
//! ```text
//! cargo run --release -p castack-krylov --example replacement_sweep -- MATRIX.mtx [METHOD [K]]
//! ```

use std::error::Error;
use std::path::Path;

use castack_collectives::{Communicator, ThreadUniverse};
use castack_krylov::{Cpu, DistCsr, Method, Partition, Solver, SolverConfig, SpmvMode};

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let Some(file) = args.get(1) else {
        return Err("usage: replacement_sweep MATRIX.mtx [METHOD [K]]".into());
    };
    let method: Method = args.get(2).map_or(Ok(Method::Pipecg), |m| m.parse())?;
    let k: usize = args.get(3).map_or(Ok(4), |k| k.parse())?;
    let a = castack_krylov::io::read_matrix_market_path(Path::new(file))?.to_csr_full()?;
    let n = a.rows();
    let b: Vec<f64> = a
        .outer_iterator()
        .map(|row| row.data().iter().sum())
        .collect();
    println!("{file}: {method} k={k}, n={n}");
    for every in [None, Some(20), Some(50), Some(100), Some(200), Some(500)] {
        for p in [1usize, 3] {
            let cfg = SolverConfig {
                method,
                k,
                replace_every: every,
                ..SolverConfig::default()
            };
            let part = Partition::rows(n, p);
            let out = ThreadUniverse::new(p)?.run(|comm| {
                let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
                let range = part.range(comm.rank());
                let mut s = Solver::new(comm, dist, cfg.clone(), Cpu::sequential())?;
                s.solve(&b[range], None).map(|s| s.report)
            })?;
            let r = out.into_iter().next().ok_or("no rank")??;
            println!(
                "replace_every {every:?} ranks {p}: equivalent {} replacements {} reductions {} halo {} converged {} relres_true {:.2e}",
                r.equivalent_iterations,
                r.residual_replacements,
                r.reductions,
                r.halo_exchanges,
                r.converged,
                r.relres_true
            );
        }
    }
    Ok(())
}
