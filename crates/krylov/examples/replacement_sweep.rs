//! Iterations of one method against `replace_every` (periodic residual replacement) on one
//! Matrix Market file, or on a generated 2-D Poisson matrix (n = 40) without one: b = A * ones,
//! Jacobi, tol 1e-8, ranks 1 and 3 (threads backend). Every run must converge by the true
//! residual, and the periodic runs must report replacements (asserted). This is how the
//! effect of `--replace-every` on pipecg was measured (msc04515: 1.51x CG's iterations
//! without, 1.01x with `replace_every` 100).
//!
//! ```text
//! cargo run --release -p castack-krylov --example replacement_sweep -- [MATRIX.mtx [METHOD [K]]]
//! ```

use std::error::Error;
use std::path::Path;

use castack_collectives::{Communicator, ThreadUniverse};
use castack_krylov::{Cpu, DistCsr, Method, Partition, Solver, SolverConfig, SpmvMode};

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (file, a) = match args.get(1) {
        Some(file) => (
            file.clone(),
            castack_krylov::sparse::io::read_matrix_market_path(Path::new(file))?.to_csr_full()?,
        ),
        None => (
            "poisson2d(40)".to_string(),
            castack_krylov::sparse::gen::poisson2d(40)?,
        ),
    };
    let method: Method = args.get(2).map_or(Ok(Method::Pipecg), |m| m.parse())?;
    let k: usize = args.get(3).map_or(Ok(4), |k| k.parse())?;
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
            if !r.converged || r.relres_true > 1e-8 {
                return Err(format!("{file}: replace_every {every:?} did not converge").into());
            }
            if every.is_some_and(|e| r.equivalent_iterations >= 2 * e)
                && r.residual_replacements == 0
            {
                return Err(format!("{file}: replace_every {every:?} replaced nothing").into());
            }
        }
    }
    Ok(())
}
