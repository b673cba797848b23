//! An embedder's matrix-free operator (`Solver::with_operator`): a 1-D variable-coefficient
//! Laplacian applied without a matrix, its one-value halo exchanged by the operator itself
//! through the communicator, solves as the same matrix handed in as CSR does.

use castack_collectives::{Communicator, PointToPoint, ThreadUniverse};
use castack_krylov::{
    Cpu, DistCsr, DistVec, KrylovError, Method, Operator, Ops, Partition, Precond, SolveReport,
    Solver, SolverConfig, SpmvMode,
};
use sprs::{CsMat, TriMat};

const N: usize = 400;

/// The coupling between rows `i` and `i + 1` (positive): strongly varying.
fn k(i: usize) -> f64 {
    1.0 + 30.0 * (((i * 7919) % 13) as f64 / 13.0).powi(4)
}

/// Row `i`'s diagonal: the two couplings plus a small shift.
fn d(i: usize) -> f64 {
    let left = if i > 0 { k(i - 1) } else { 1.0 };
    left + k(i) + 0.02
}

fn global() -> CsMat<f64> {
    let mut t = TriMat::new((N, N));
    for i in 0..N {
        t.add_triplet(i, i, d(i));
        if i + 1 < N {
            t.add_triplet(i, i + 1, -k(i));
            t.add_triplet(i + 1, i, -k(i));
        }
    }
    t.to_csr()
}

/// The operator without a matrix: rows `start..start + n` of this rank.
struct Laplacian1d<'c, C: ?Sized> {
    comm: &'c C,
    start: usize,
    n: usize,
    x: Vec<f64>,
    y: Vec<f64>,
}

impl<C: Communicator + ?Sized> Operator<C, Cpu> for Laplacian1d<'_, C> {
    fn n(&self) -> usize {
        N
    }

    fn n_local(&self) -> usize {
        self.n
    }

    fn row_start(&self) -> usize {
        self.start
    }

    fn diagonal(&self) -> Vec<f64> {
        (self.start..self.start + self.n).map(d).collect()
    }

    fn apply(
        &mut self,
        ops: &mut Ops<'_, C, Cpu>,
        x: &DistVec<Cpu>,
        y: &mut DistVec<Cpu>,
    ) -> Result<(), KrylovError> {
        let (me, p, n) = (self.comm.rank(), self.comm.size(), self.n);
        let bucket = castack_krylov::Bucket::Spmv;
        ops.stage_out(x.raw(), 0, &mut self.x[1..=n], bucket)?;
        // The halo: one value from each neighbour, in one counted round.
        let t = ops.sc_mut().now();
        let tag = self.comm.next_collective_tag();
        let (left, right) = (me > 0 && n > 0, me + 1 < p && n > 0);
        let mut sends = Vec::new();
        if left {
            sends.push(self.comm.isend_f64(me - 1, tag, &self.x[1..2])?);
        }
        if right {
            sends.push(self.comm.isend_f64(me + 1, tag, &self.x[n..=n])?);
        }
        self.x[0] = 0.0;
        self.x[n + 1] = 0.0;
        if left {
            self.comm.recv_f64(me - 1, tag, &mut self.x[0..1])?;
        }
        if right {
            self.comm.recv_f64(me + 1, tag, &mut self.x[n + 1..n + 2])?;
        }
        for s in sends {
            self.comm.wait_send(s)?;
        }
        ops.sc_mut()
            .halo_since(usize::from(left) + usize::from(right), t);
        for j in 0..n {
            let i = self.start + j;
            let mut v = d(i) * self.x[j + 1];
            if i > 0 {
                v -= k(i - 1) * self.x[j];
            }
            if i + 1 < N {
                v -= k(i) * self.x[j + 2];
            }
            self.y[j] = v;
        }
        Ok(ops.stage_in(&self.y[..n], y.raw_mut(), 0, bucket)?)
    }
}

/// Each rank's (x, report): the CSR matrix (`op = false`) or the operator.
fn solve(p: usize, cfg: &SolverConfig, op: bool) -> Vec<(Vec<f64>, SolveReport)> {
    let a = global();
    let b: Vec<f64> = (0..N).map(|i| ((i * 31) % 17) as f64 - 8.0).collect();
    let part = Partition::rows(N, p);
    ThreadUniverse::new(p)
        .unwrap()
        .run(|comm| {
            let range = part.range(comm.rank());
            let mut s = if op {
                let n = range.len();
                let l = Laplacian1d {
                    comm,
                    start: range.start,
                    n,
                    x: vec![0.0; n + 2],
                    y: vec![0.0; n],
                };
                Solver::with_operator(comm, Box::new(l), cfg.clone(), Cpu::sequential()).unwrap()
            } else {
                let d = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo).unwrap();
                Solver::new(comm, d, cfg.clone(), Cpu::sequential()).unwrap()
            };
            let sol = s.solve(&b[range], None).unwrap();
            (sol.x, sol.report)
        })
        .unwrap()
}

/// Every method, scaled or not, on 1 and 3 ranks: the operator's solve converges like the
/// CSR matrix's (the same iterations within one block; solutions within the tolerance's
/// reach), with the same count of exchanges per operator application.
#[test]
fn a_matrix_free_operator_solves_as_its_matrix_does() {
    for &method in Method::ALL {
        for precond in [Precond::Jacobi, Precond::None] {
            for p in [1, 3] {
                let cfg = SolverConfig {
                    method,
                    precond,
                    tol: 1e-10,
                    ..SolverConfig::default()
                };
                let what = format!("{method} {} p={p}", precond.name());
                let csr = solve(p, &cfg, false);
                let op = solve(p, &cfg, true);
                let (rc, ro) = (&csr[0].1, &op[0].1);
                assert!(ro.converged && ro.relres_true <= 1e-10, "{what}: {ro:?}");
                assert_eq!(ro.spmv, "operator");
                // Rounding differs (`s (A (s x))` against the pre-scaled entries), and
                // iteration counts with it by a little: 2% plus two iterations (blocks).
                let unit = if method.is_s_step() { cfg.k } else { 1 };
                let slack = 2 * unit + rc.equivalent_iterations / 50;
                assert!(
                    rc.equivalent_iterations.abs_diff(ro.equivalent_iterations) <= slack,
                    "{what}: csr {} operator {}",
                    rc.equivalent_iterations,
                    ro.equivalent_iterations
                );
                let xc: Vec<f64> = csr.iter().flat_map(|(x, _)| x.clone()).collect();
                let xo: Vec<f64> = op.iter().flat_map(|(x, _)| x.clone()).collect();
                let scale = xc.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                let diff = xc
                    .iter()
                    .zip(&xo)
                    .fold(0.0f64, |m, (u, v)| m.max((u - v).abs()));
                assert!(diff <= 1e-5 * scale, "{what}: {diff:e} of {scale:e}");
                // Exchanges: one round per SpMV on both (the operator reports its own).
                if rc.equivalent_iterations == ro.equivalent_iterations
                    && rc.residual_replacements == ro.residual_replacements
                {
                    assert_eq!(rc.halo_exchanges, ro.halo_exchanges, "{what}");
                    assert_eq!(rc.reductions, ro.reductions, "{what}");
                }
            }
        }
    }
}

/// The preconditioners built from matrix entries and the matrix powers kernel need a CSR
/// matrix: refused, with the reason.
#[test]
fn an_operator_refuses_what_needs_matrix_entries() {
    for (precond, mpk, needle) in [
        (Precond::BjacobiIc0, false, "bjacobi_ic0"),
        (Precond::Chebyshev, false, "chebyshev"),
        (Precond::Jacobi, true, "mpk"),
    ] {
        let cfg = SolverConfig {
            method: Method::Cbcgr,
            precond,
            mpk,
            ..SolverConfig::default()
        };
        let e = ThreadUniverse::new(1)
            .unwrap()
            .run(|comm| {
                let l = Laplacian1d {
                    comm,
                    start: 0,
                    n: N,
                    x: vec![0.0; N + 2],
                    y: vec![0.0; N],
                };
                Solver::with_operator(comm, Box::new(l), cfg.clone(), Cpu::sequential())
                    .err()
                    .map(|e| e.to_string())
            })
            .unwrap()
            .remove(0)
            .expect("refused");
        assert!(e.contains(needle), "{e}");
    }
}
