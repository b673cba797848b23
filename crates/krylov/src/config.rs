//! Solver settings.

use castack_collectives::AllreduceAlgo;
use serde::{Deserialize, Serialize};

use crate::method::Method;

/// Preconditioners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precond {
    /// No preconditioning.
    None,
    /// Symmetric diagonal scaling `D^-1/2 A D^-1/2`.
    #[default]
    Jacobi,
    /// Jacobi scaling, then block Jacobi with one block per rank, each factored by
    /// incomplete Cholesky without fill (IC(0)); a diagonal shift where the factorization
    /// breaks down ([`crate::precond`]).
    BjacobiIc0,
    /// Jacobi scaling, then a Chebyshev polynomial of degree
    /// [`SolverConfig::precond_degree`] in the scaled matrix ([`crate::precond`]).
    Chebyshev,
}

impl Precond {
    /// Every preconditioner.
    pub const ALL: &'static [Precond] = &[
        Precond::None,
        Precond::Jacobi,
        Precond::BjacobiIc0,
        Precond::Chebyshev,
    ];

    /// The preconditioners that only scale the system (nothing applied in the loop): what
    /// `krylov plan` prices.
    pub const SCALINGS: &'static [Precond] = &[Precond::None, Precond::Jacobi];

    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Precond::None => "none",
            Precond::Jacobi => "jacobi",
            Precond::BjacobiIc0 => "bjacobi_ic0",
            Precond::Chebyshev => "chebyshev",
        }
    }

    /// Whether the methods apply a preconditioner `M^-1` in their loop (preconditioned
    /// recurrences) besides the Jacobi scaling: `bjacobi_ic0` and `chebyshev`.
    pub fn applies(self) -> bool {
        matches!(self, Precond::BjacobiIc0 | Precond::Chebyshev)
    }
}

/// Default degree of the Chebyshev preconditioner (`--precond-degree`). Measured with cg on
/// 2 ranks over nine shared matrices (the sweep of [`crate::precond::chebyshev::RATIO`]),
/// totals of SpMVs / reductions: degree 2: 25,251 / 16,837; 3: 26,149 / 13,079; 5: 28,299
/// / 9,439. Degree 3 takes 22% of the reductions off degree 2's for 4% more SpMVs; higher
/// degrees pay only where a reduction costs several SpMVs (many ranks), so they are the
/// user's choice. Counts, not times: on two shared-memory ranks no degree beat Jacobi
/// scaling alone in time (the issue note).
pub const PRECOND_DEGREE: usize = 3;

/// Largest degree of the Chebyshev preconditioner: each degree is one SpMV (one halo
/// exchange) per application; beyond a few dozen the polynomial's gain in iterations no
/// longer pays for its SpMVs, and the limit turns a mistyped degree into an error.
pub const PRECOND_DEGREE_MAX: usize = 64;

castack_collectives::impl_registry!(Precond, "preconditioner");

/// Bases of the s-step methods (see `basis/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// `s_{j+1} = A s_j`: cheapest, loses accuracy from s ~ 6-8.
    Monomial,
    /// `s_{j+1} = (A - theta_j) s_j` with Leja-ordered Ritz values.
    Newton,
    /// Chebyshev polynomials on `[lmin, lmax]`.
    #[default]
    Chebyshev,
}

impl Basis {
    /// Every basis.
    pub const ALL: &'static [Basis] = &[Basis::Monomial, Basis::Newton, Basis::Chebyshev];

    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Basis::Monomial => "monomial",
            Basis::Newton => "newton",
            Basis::Chebyshev => "chebyshev",
        }
    }
}

castack_collectives::impl_registry!(Basis, "basis");

use castack_linalg::K_MAX;

/// Default pipeline depth of `plcg` (`--depth`): 1, as PETSc's `KSPPIPELCG`. p(1)-CG
/// keeps CG's iterations, the shortest start-up and the fewest vectors; a deeper pipeline
/// pays only where one reduction costs more than one SpMV (many ranks: `krylov plan`
/// prices it), and its iterations grow with the depth (`cg/plcg.rs`, the family sweep).
pub const DEPTH: usize = 1;

/// Largest pipeline depth of `plcg`: each level is one more reduction in flight, three more
/// vectors and a band of `G` two rows wider; the paper (Cornelis, Cools and Vanroose, SISC
/// 2018) measures gains to about `l = 3` and growing rounding errors beyond, and the limit
/// turns a mistyped depth into an error.
pub const DEPTH_MAX: usize = 8;

/// Everything a solve needs besides the matrix and vectors.
#[derive(Debug, Clone, PartialEq)]
pub struct SolverConfig {
    /// The method.
    pub method: Method,
    /// Relative tolerance on the TRUE residual of the original system.
    pub tol: f64,
    /// Absolute tolerance on the true residual (0 disables it).
    pub atol: f64,
    /// Maximum CG-equivalent iterations.
    pub max_iter: usize,
    /// Preconditioner.
    pub precond: Precond,
    /// Degree of the Chebyshev preconditioner (`precond = chebyshev`; SpMVs per
    /// application), `1..=`[`PRECOND_DEGREE_MAX`]; ignored by the others.
    pub precond_degree: usize,
    /// Allreduce algorithm (must guarantee bit-identical results).
    pub allreduce: AllreduceAlgo,
    /// Record the relative recurrence residual per iteration.
    pub history: bool,
    /// Block size / s of the s-step methods (ignored by the others), `1..=`[`K_MAX`].
    pub k: usize,
    /// Basis of the s-step methods (ignored by the others).
    pub basis: Basis,
    /// Pipeline depth `l` of `plcg` (reductions in flight, each overlapped with the next
    /// `l` SpMVs), `1..=`[`DEPTH_MAX`]; ignored by the others. Default [`DEPTH`] (the
    /// choice: `cg/plcg.rs`).
    pub depth: usize,
    /// Replace the recurrence residual by the true one every this many CG-equivalent
    /// iterations (every method; each method's module doc gives the cost; `None`: only
    /// when the recurrence claims convergence, or, for cbcg/cbcgr, when their drift
    /// monitor asks for it).
    pub replace_every: Option<usize>,
    /// Replace the residual automatically where its estimated gap to the true residual
    /// crosses `sqrt(eps) ||r||` (pipecg; Cools et al., SIMAX 2018, as PETSc's
    /// `KSPPIPECGRR`); the other methods do not drift that way and ignore it. On by
    /// default; `false` (CLI: `--no-auto-replace`) gives plain pipelined CG.
    pub auto_replace: bool,
    /// Build the s-step bases with the matrix powers kernel (one depth-k exchange per
    /// basis, redundant work on a ghost zone; s-step methods only). Needs a
    /// [`crate::MatrixPowers`] plan: [`crate::Solver::with_mpk`].
    pub mpk: bool,
    /// Strategy of the SpMV halo exchange (`castack_neighbor::Strategy`; default naive):
    /// build the matrix with [`crate::DistCsr::from_global_with`]`(.., cfg.exchange)`.
    /// Every strategy delivers the same values, so iterates are bit-identical.
    pub exchange: castack_neighbor::Strategy,
    /// Estimate the extreme eigenvalues and the condition number of the operator iterated
    /// on from the solve's CG coefficients (`SolveReport::eigs`; [`crate::ritz`]). Methods
    /// with scalar CG coefficients only: cg, ccg, pipecg, prcg, pipeprcg, groppcg, plcg, cacg.
    pub eigs: bool,
}

impl Default for SolverConfig {
    fn default() -> Self {
        Self {
            method: Method::Cg,
            tol: 1e-8,
            atol: 0.0,
            max_iter: 100_000,
            precond: Precond::Jacobi,
            precond_degree: PRECOND_DEGREE,
            allreduce: AllreduceAlgo::default(),
            history: false,
            k: 4,
            basis: Basis::Chebyshev,
            depth: DEPTH,
            replace_every: None,
            auto_replace: true,
            mpk: false,
            exchange: castack_neighbor::Strategy::Naive,
            eigs: false,
        }
    }
}

/// A setting outside what the solvers accept: the setting's name (the field of
/// [`SolverConfig`], which is also the CLI's config-file key and, with `-` for `_`, its
/// flag) and what is wrong with it. Displayed as `key problem`, e.g.
/// `k must be within 1..=20 (got 0)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSetting {
    /// The setting (a field of [`SolverConfig`]).
    pub key: &'static str,
    /// What is wrong, as a predicate of the key ("must be within ...").
    pub problem: String,
}

impl std::fmt::Display for InvalidSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.key, self.problem)
    }
}

impl SolverConfig {
    /// Check the settings: the one place where every setting's range and every combination
    /// the solvers refuse are decided ([`Solver::new`](crate::Solver::new) calls it; the
    /// CLI calls it to name the flag or config key of a refused setting).
    pub fn check(&self) -> Result<(), InvalidSetting> {
        let bad = |key: &'static str, problem: String| Err(InvalidSetting { key, problem });
        for (key, v) in [("tol", self.tol), ("atol", self.atol)] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(key, format!("must be a finite number >= 0 (got {v})"));
            }
        }
        if self.tol == 0.0 && self.atol == 0.0 {
            return bad(
                "tol",
                "and atol are both 0: the solve could never converge".into(),
            );
        }
        if self.k == 0 || self.k > K_MAX {
            return bad("k", format!("must be within 1..={K_MAX} (got {})", self.k));
        }
        if self.method == Method::Plcg && !(1..=DEPTH_MAX).contains(&self.depth) {
            return bad(
                "depth",
                format!("must be within 1..={DEPTH_MAX} (got {})", self.depth),
            );
        }
        if self.replace_every == Some(0) {
            return bad("replace_every", "must be at least 1 (got 0)".into());
        }
        if self.precond == Precond::Chebyshev
            && !(1..=PRECOND_DEGREE_MAX).contains(&self.precond_degree)
        {
            return bad(
                "precond_degree",
                format!(
                    "must be within 1..={PRECOND_DEGREE_MAX} (got {})",
                    self.precond_degree
                ),
            );
        }
        if self.mpk && self.precond.applies() {
            return bad("mpk", format!(
                "builds the basis with the matrix alone; preconditioner {} is applied between its SpMVs and has no matrix powers kernel (use precond jacobi or none with mpk)",
                self.precond.name()
            ));
        }
        if self.mpk && !self.method.is_s_step() {
            return bad(
                "mpk",
                format!(
                    "applies to s-step methods; method {} has no matrix powers kernel",
                    self.method.name()
                ),
            );
        }
        if self.eigs && matches!(self.method, Method::Cbcg | Method::Cbcgr) {
            return bad(
                "eigs",
                format!(
                    "needs scalar CG coefficients (cg, ccg, pipecg, prcg, pipeprcg, groppcg, plcg, cacg); {} is a block method",
                    self.method.name()
                ),
            );
        }
        if !self.allreduce.bit_identical() {
            return bad(
                "allreduce",
                format!(
                "'{}' does not give bit-identical results on all ranks; solvers need one that does",
                self.allreduce
            ),
            );
        }
        Ok(())
    }

    /// [`SolverConfig::check`] as the crate's error ([`crate::KrylovError::InvalidConfig`]).
    pub fn validate(&self) -> Result<(), crate::KrylovError> {
        self.check()
            .map_err(|e| crate::KrylovError::InvalidConfig(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_is_checked_against_k_max_before_any_workspace_exists() {
        let with_k = |k| SolverConfig {
            method: Method::Cacg,
            k,
            ..SolverConfig::default()
        };
        with_k(1).validate().unwrap();
        with_k(K_MAX).validate().unwrap();
        for k in [0, K_MAX + 1, 1000, 4_294_967_296] {
            let e = with_k(k).validate().unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("invalid solver setting: k must be within 1..={K_MAX} (got {k})")
            );
        }
    }
}
