//! An application's own preconditioner: line Jacobi for an anisotropic operator.
//!
//! The operator is the 2-D five-point stencil of `-(100 u_xx + u_yy)` on an `m x m` grid;
//! each rank assembles only its own grid lines (`DistCsr::from_local_rows`). The strong
//! coupling runs along x, which Jacobi scaling cannot see; the application knows it, and
//! hands the solver a preconditioner that solves each x-line's tridiagonal system exactly
//! (the Thomas algorithm on the line's own coefficients): `M` = the x-couplings plus the
//! diagonal, symmetric positive definite. It implements `castack_krylov::Preconditioner`
//! (apply `z = M^-1 r` on the solver's vectors, through the device layer), is set with
//! `Solver::set_preconditioner`, and runs with cg and with the s-step method cbcgr. The
//! example asserts the solution against the known one, and that the line preconditioner
//! needs fewer than a third of the iterations of Jacobi-scaled CG.
//!
//! Run: `cargo run -p castack-krylov --example user_precond`

use castack_collectives::{Communicator, ThreadUniverse};
use castack_krylov::Bucket;
use castack_krylov::{
    Cpu, DistCsr, DistVec, KrylovError, LinearOperator, LocalRows, Method, Ops, Precond,
    Preconditioner, Solver, SolverConfig, SpmvMode,
};
use castack_neighbor::Strategy;

/// Grid points per side.
const M: usize = 48;
/// Coupling along x (along y: 1).
const KX: f64 = 100.0;

/// This rank's rows `first..first + count` (whole grid lines): CSR with global columns.
fn my_rows(first: usize, count: usize) -> (Vec<usize>, Vec<usize>, Vec<f64>) {
    let (mut indptr, mut cols, mut vals) = (vec![0], Vec::new(), Vec::new());
    for row in first..first + count {
        let mut push = |c: usize, v: f64| {
            cols.push(c);
            vals.push(v);
        };
        if row >= M {
            push(row - M, -1.0);
        }
        if row % M > 0 {
            push(row - 1, -KX);
        }
        push(row, 2.0 * KX + 2.0);
        if row % M + 1 < M {
            push(row + 1, -KX);
        }
        if row + M < M * M {
            push(row + M, -1.0);
        }
        indptr.push(cols.len());
    }
    (indptr, cols, vals)
}

/// The known solution at a global row.
fn exact(row: usize) -> f64 {
    let (x, y) = ((row % M) as f64 / M as f64, (row / M) as f64 / M as f64);
    1.0 + x * (1.0 - y)
}

/// Line Jacobi: each grid line along x of this rank's rows solved exactly. Host buffers are
/// made once, so an application allocates nothing per call.
struct LineJacobi {
    lines: usize,
    r: Vec<f64>,
    z: Vec<f64>,
    /// Thomas algorithm scratch (one line).
    c: Vec<f64>,
}

impl LineJacobi {
    fn new(rows: usize) -> Self {
        Self {
            lines: rows / M,
            r: vec![0.0; rows],
            z: vec![0.0; rows],
            c: vec![0.0; M],
        }
    }
}

impl<C: Communicator + ?Sized> Preconditioner<C, Cpu> for LineJacobi {
    fn apply(
        &mut self,
        _a: &mut dyn LinearOperator<C, Cpu>,
        ops: &mut Ops<'_, C, Cpu>,
        r: &DistVec<Cpu>,
        z: &mut DistVec<Cpu>,
    ) -> Result<(), KrylovError> {
        // `precond = none`: the solver's matrix is the operator itself, so the line's
        // coefficients are the assembled ones.
        ops.stage_out(r.raw(), 0, &mut self.r, Bucket::Blas)?;
        let (d, e) = (2.0 * KX + 2.0, -KX);
        for l in 0..self.lines {
            let (r, z) = (&self.r[l * M..(l + 1) * M], &mut self.z[l * M..(l + 1) * M]);
            // Forward elimination, then back substitution.
            self.c[0] = e / d;
            z[0] = r[0] / d;
            for i in 1..M {
                let m = d - e * self.c[i - 1];
                self.c[i] = e / m;
                z[i] = (r[i] - e * z[i - 1]) / m;
            }
            for i in (0..M - 1).rev() {
                z[i] -= self.c[i] * z[i + 1];
            }
        }
        Ok(ops.stage_in(&self.z, z.raw_mut(), 0, Bucket::Blas)?)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let p = 3;
    // Rank r owns grid lines [M r / p, M (r + 1) / p).
    let first_line = |r: usize| M * r / p;
    let offsets: Vec<usize> = (0..=p).map(|r| first_line(r) * M).collect();
    let outs = ThreadUniverse::new(p)?.run(|comm| -> Result<_, KrylovError> {
        let me = comm.rank();
        let (first, count) = (offsets[me], offsets[me + 1] - offsets[me]);
        let (indptr, cols, vals) = my_rows(first, count);
        let rows = LocalRows {
            indptr: &indptr,
            cols: &cols,
            vals: &vals,
        };
        // b = A x_exact, from this rank's own rows.
        let b: Vec<f64> = (0..count)
            .map(|i| {
                (indptr[i]..indptr[i + 1])
                    .map(|k| vals[k] * exact(cols[k]))
                    .sum()
            })
            .collect();
        let mut out = Vec::new();
        for (method, line) in [
            (Method::Cg, false),
            (Method::Cg, true),
            (Method::Cbcgr, true),
        ] {
            let (a, _) = DistCsr::from_local_rows(comm, rows, SpmvMode::Halo, Strategy::Naive)?;
            let cfg = SolverConfig {
                method,
                precond: if line { Precond::None } else { Precond::Jacobi },
                tol: 1e-10,
                ..SolverConfig::default()
            };
            let mut solver = Solver::new(comm, a, cfg, Cpu::sequential())?;
            if line {
                solver.set_preconditioner(Box::new(LineJacobi::new(count)))?;
            }
            let sol = solver.solve(&b, None)?;
            let err = (0..count)
                .map(|i| (sol.x[i] - exact(first + i)).abs())
                .fold(0.0, f64::max);
            out.push((method, line, sol.report, err));
        }
        Ok(out)
    })?;
    let mut iters = Vec::new();
    for rank_out in outs {
        for (method, line, report, err) in rank_out? {
            assert!(report.converged, "{method} line={line}: {report:?}");
            assert!(err < 1e-7, "{method} line={line}: error {err}");
            iters.push((method, line, report.equivalent_iterations, report.precond));
        }
    }
    let (jacobi, line_cg) = (iters[0].2, iters[1].2);
    for (method, line, it, precond) in &iters[..3] {
        println!(
            "{method:>6} {:<7} {it:>4} CG-equivalent iterations",
            if *line { precond.as_str() } else { "jacobi" }
        );
    }
    assert!(
        3 * line_cg < jacobi,
        "line Jacobi {line_cg} vs Jacobi {jacobi}"
    );
    println!("line Jacobi cut CG's iterations {jacobi} -> {line_cg}");
    Ok(())
}
