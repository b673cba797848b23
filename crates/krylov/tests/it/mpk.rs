//! The matrix powers kernel: basis columns through [`MatrixPowers`] against the depth-1
//! path (every basis, ranks, depths), exactly one exchange per build, CA-CG's pair of
//! bases with one exchange (bit-identical to two builds), redundant flops, the
//! solver hook (`cbcg`, `cbcgr` with `mpk = true` against `mpk = false`, exact counts),
//! configuration errors, and the ghost-zone cost of 2-D against 3-D sparsity.

use castack_collectives::{AllreduceAlgo, Communicator, ThreadUniverse};
use castack_krylov::BasisStep;
use castack_krylov::{
    sparse::gen, Basis, Cpu, DistCsr, DistVec, KrylovError, MatrixPowers, Method, Ops, Partition,
    SolveReport, Solver, SolverConfig, SpmvMode,
};
use castack_krylov::{Chebyshev, Newton, SStepBasis};
use castack_krylov::{LinalgError, Phase};
use castack_test_support::spd::hash_vec;
use sprs::CsMat;

/// What one rank saw building one basis both ways.
struct Compared {
    /// Largest `max |mpk - depth1| / max |depth1|` over the columns `s_1..s_k`, `A s_0..A s_{k-1}`
    /// (this rank's owned values).
    rel: f64,
    halo_depth1: u64,
    halo_mpk: u64,
    local_flops: u64,
    total_flops: u64,
}

/// On `p` ranks: the Jacobi-scaled matrix, `basis` of size `k` from a pseudo-random start
/// through `DistCsr` (k exchanges) and through a `MatrixPowers` plan of depth `k`.
fn compare(a: &CsMat<f64>, p: usize, basis: &SStepBasis, k: usize) -> Vec<Compared> {
    let part = Partition::rows(a.rows(), p);
    ThreadUniverse::new(p)
        .unwrap()
        .run(|comm| -> Result<Compared, KrylovError> {
            let mut dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
            let mut mpk = MatrixPowers::from_global(comm, a.view(), &part, k)?;
            let mut ops = Ops::new(
                comm,
                AllreduceAlgo::default(),
                Cpu::sequential(),
                dist.n_local(),
            )?;
            let mut scale = dist.new_vec();
            for (si, d) in scale.local_mut().iter_mut().zip(dist.diagonal()) {
                *si = 1.0 / d.sqrt();
            }
            dist.scale_symmetric(ops.sc_mut(), &mut scale)?;
            mpk.scale_symmetric(ops.sc_mut(), scale.local())?;
            ops.set_phase(Phase::Loop);
            let vecs = |m: usize| (0..m).map(|_| dist.new_vec()).collect::<Vec<DistVec>>();
            let (mut s1, mut as1, mut s2, mut as2) = (vecs(k + 1), vecs(k), vecs(k + 1), vecs(k));
            let start = hash_vec(dist.row_start(), dist.n_local(), 11);
            s1[0].local_mut().copy_from_slice(&start);
            s2[0].local_mut().copy_from_slice(&start);
            let h0 = ops.counters().halo_exchanges;
            basis.build(&mut dist, &mut ops, k, &mut s1, &mut as1)?;
            let h1 = ops.counters().halo_exchanges;
            basis.build_mpk(&mut mpk, &mut ops, k, &mut s2, &mut as2)?;
            let h2 = ops.counters().halo_exchanges;
            let mut rel = 0.0f64;
            for (x, y) in s1[1..].iter().zip(&s2[1..]).chain(as1.iter().zip(&as2)) {
                let scale = x.local().iter().fold(0.0f64, |m, v| m.max(v.abs()));
                let diff = x
                    .local()
                    .iter()
                    .zip(y.local())
                    .fold(0.0f64, |m, (u, v)| m.max((u - v).abs()));
                if scale > 0.0 {
                    rel = rel.max(diff / scale);
                } else {
                    rel = rel.max(diff);
                }
            }
            assert_eq!(mpk.redundant_flops(), mpk.redundant_flops_per_build(k));
            Ok(Compared {
                rel,
                halo_depth1: h1 - h0,
                halo_mpk: h2 - h1,
                local_flops: mpk.local_redundant_flops_per_build(k),
                total_flops: mpk.redundant_flops_per_build(k),
            })
        })
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

fn bases() -> Vec<SStepBasis> {
    // The Jacobi-scaled Poisson spectra lie in (0, 2).
    vec![
        SStepBasis::Monomial,
        SStepBasis::Newton(Newton::new(&[0.1, 0.7, 1.3, 1.9])),
        SStepBasis::Chebyshev(Chebyshev::new(0.0, 2.0).unwrap()),
    ]
}

#[test]
fn mpk_basis_columns_equal_the_depth1_path_with_one_exchange() {
    let mats = [
        ("poisson2d(20)", gen::poisson2d(20).unwrap()),
        ("poisson3d(8)", gen::poisson3d(8).unwrap()),
    ];
    for (name, a) in &mats {
        for basis in bases() {
            for p in [1, 2, 3, 4] {
                for k in [1, 2, 4, 8] {
                    let what = format!("{name} {:?} p={p} k={k}", basis.kind());
                    let ranks = compare(a, p, &basis, k);
                    let total: u64 = ranks.iter().map(|c| c.local_flops).sum();
                    for (r, c) in ranks.iter().enumerate() {
                        assert!(c.rel <= 1e-12, "{what} rank {r}: relative error {}", c.rel);
                        assert_eq!(c.halo_depth1, k as u64, "{what}");
                        assert_eq!(c.halo_mpk, 1, "{what}: one exchange per build");
                        assert_eq!(c.total_flops, total, "{what}: total agreed on every rank");
                        if p == 1 || k == 1 {
                            assert_eq!(c.local_flops, 0, "{what}: nothing redundant");
                        } else {
                            assert!(c.local_flops > 0, "{what} rank {r}: no redundant work");
                        }
                    }
                }
            }
        }
    }
}

/// What one rank saw building CA-CG's pair of bases (`p`: size k, `r`: size k - 1) through
/// two `build_mpk` calls, through `apply_pair_with` around the same calls, and through
/// `apply_pair` with the basis recurrence written out (monomial here).
struct Pair {
    /// Every column and image of the pair paths equals the two-call path's, bit for bit.
    bitwise: bool,
    halo_two: u64,
    halo_pair_with: u64,
    halo_pair: u64,
    values_two: u64,
    values_pair: u64,
    flops_ok: bool,
}

fn compare_pair(a: &CsMat<f64>, p: usize, basis: &SStepBasis, k: usize) -> Vec<Pair> {
    let part = Partition::rows(a.rows(), p);
    ThreadUniverse::new(p)
        .unwrap()
        .run(|comm| -> Result<Pair, KrylovError> {
            let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
            let mut mpk = MatrixPowers::from_global(comm, a.view(), &part, k)?;
            assert_eq!(mpk.pair_send_values(), 2 * mpk.send_values());
            let mut ops = Ops::new(
                comm,
                AllreduceAlgo::default(),
                Cpu::sequential(),
                dist.n_local(),
            )?;
            let scale: Vec<f64> = dist.diagonal().iter().map(|d| 1.0 / d.sqrt()).collect();
            mpk.scale_symmetric(ops.sc_mut(), &scale)?;
            ops.set_phase(Phase::Loop);
            let vecs = |m: usize| (0..m).map(|_| dist.new_vec()).collect::<Vec<DistVec>>();
            let pstart = hash_vec(dist.row_start(), dist.n_local(), 21);
            let rstart = hash_vec(dist.row_start(), dist.n_local(), 22);
            let kr = k.max(2) - 1;
            let mut sets: Vec<[Vec<DistVec>; 4]> = (0..3)
                .map(|_| [vecs(k + 1), vecs(k), vecs(k), vecs(kr)])
                .collect();
            for [pv, _, rv, _] in &mut sets {
                pv[0].local_mut().copy_from_slice(&pstart);
                rv[0].local_mut().copy_from_slice(&rstart);
            }
            let counts = |ops: &Ops<'_, _, Cpu>| {
                let c = ops.counters();
                (c.halo_exchanges, c.halo_values_sent)
            };
            let flops0 = mpk.redundant_flops();
            let c0 = counts(&ops);
            {
                let [pv, pa, rv, ra] = &mut sets[0];
                basis.build_mpk(&mut mpk, &mut ops, k, pv, pa)?;
                if k > 1 {
                    basis.build_mpk(&mut mpk, &mut ops, k - 1, rv, ra)?;
                }
            }
            let c1 = counts(&ops);
            let flops_two = mpk.redundant_flops() - flops0;
            {
                let [pv, pa, rv, ra] = &mut sets[1];
                if k > 1 {
                    mpk.apply_pair_with(&mut ops, pv, rv, |m, ops, pv, rv| {
                        basis.build_mpk(m, ops, k, pv, pa)?;
                        basis.build_mpk(m, ops, k - 1, rv, ra)
                    })?;
                } else {
                    basis.build_mpk(&mut mpk, &mut ops, k, pv, pa)?;
                }
            }
            let c2 = counts(&ops);
            let flops_pair = mpk.redundant_flops() - flops0 - flops_two;
            // `apply_pair` with the recurrence written out: monomial only.
            let monomial = matches!(basis, SStepBasis::Monomial);
            if monomial {
                let [pv, pa, rv, ra] = &mut sets[2];
                mpk.apply_pair(&mut ops, k, (pv, pa), (rv, ra), |_| BasisStep::Copy)?;
            }
            let c3 = counts(&ops);
            let same = |x: &[DistVec], y: &[DistVec]| {
                x.iter().zip(y).all(|(u, v)| {
                    u.local()
                        .iter()
                        .zip(v.local())
                        .all(|(a, b)| a.to_bits() == b.to_bits())
                })
            };
            let paths = if monomial { 1..3 } else { 1..2 };
            let bitwise = paths
                .into_iter()
                .all(|o| (0..4).all(|i| same(&sets[0][i], &sets[o][i])));
            let halo3 = if monomial { c3.0 - c2.0 } else { 1 };
            Ok(Pair {
                bitwise,
                halo_two: c1.0 - c0.0,
                halo_pair_with: c2.0 - c1.0,
                halo_pair: halo3,
                values_two: c1.1 - c0.1,
                values_pair: c2.1 - c1.1,
                flops_ok: flops_two == flops_pair,
            })
        })
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn mpk_pair_builds_both_bases_with_one_exchange_bit_identical_to_two_builds() {
    let a = gen::poisson2d(16).unwrap();
    for basis in bases() {
        for p in [1, 2, 3] {
            for k in [1, 2, 3, 5] {
                let what = format!("{:?} p={p} k={k}", basis.kind());
                for (r, c) in compare_pair(&a, p, &basis, k).iter().enumerate() {
                    assert!(c.bitwise, "{what} rank {r}: pair path differs");
                    let two = if k == 1 { 1 } else { 2 };
                    assert_eq!(c.halo_two, two, "{what}");
                    assert_eq!(c.halo_pair_with, 1, "{what}: one exchange for p and r");
                    assert_eq!(c.halo_pair, 1, "{what}: one exchange for p and r");
                    // The same values travel, in half the message rounds.
                    assert_eq!(c.values_two, c.values_pair, "{what}");
                    assert!(c.flops_ok, "{what}: redundant flops of the two builds");
                }
            }
        }
    }
}

/// Solve `a x = a * ones` on `p` thread ranks, with or without the kernel; the gathered x,
/// rank 0's report and the plan's redundant flops per build.
fn solve(a: &CsMat<f64>, p: usize, cfg: &SolverConfig) -> (Vec<f64>, SolveReport, u64) {
    let part = Partition::rows(a.rows(), p);
    let ones = vec![1.0; a.rows()];
    let mut b = vec![0.0; a.rows()];
    for (i, row) in a.outer_iterator().enumerate() {
        b[i] = row.iter().map(|(j, v)| v * ones[j]).sum();
    }
    let out = ThreadUniverse::new(p)
        .unwrap()
        .run(|comm| -> Result<_, KrylovError> {
            let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
            let range = part.range(comm.rank());
            let (mut solver, per_build) = if cfg.mpk {
                let mpk = MatrixPowers::from_global(comm, a.view(), &part, cfg.k)?;
                let per_build = mpk.redundant_flops_per_build(cfg.k);
                let s = Solver::with_mpk(comm, dist, mpk, cfg.clone(), Cpu::sequential())?;
                (s, per_build)
            } else {
                (Solver::new(comm, dist, cfg.clone(), Cpu::sequential())?, 0)
            };
            Ok((solver.solve(&b[range], None)?, per_build))
        })
        .unwrap();
    let mut x = Vec::new();
    let mut first = None;
    for r in out {
        let (s, f) = r.unwrap();
        x.extend_from_slice(&s.x);
        first.get_or_insert((s.report, f));
    }
    let (report, f) = first.unwrap();
    (x, report, f)
}

#[test]
fn cbcg_and_cbcgr_with_mpk_match_the_depth1_path_and_count_one_exchange_per_basis() {
    let mats = [
        ("poisson2d(20)", gen::poisson2d(20).unwrap()),
        ("poisson3d(8)", gen::poisson3d(8).unwrap()),
    ];
    for (name, a) in &mats {
        for method in [Method::Cbcg, Method::Cbcgr] {
            for &basis in Basis::ALL {
                for k in [2, 4] {
                    for p in [1, 3, 4] {
                        let what = format!("{method} {basis} k={k} p={p} {name}");
                        let cfg = SolverConfig {
                            method,
                            basis,
                            k,
                            tol: 1e-8,
                            ..SolverConfig::default()
                        };
                        let (x0, r0, _) = solve(a, p, &cfg);
                        let mpk_cfg = SolverConfig {
                            mpk: true,
                            ..cfg.clone()
                        };
                        let (x1, r1, per_build) = solve(a, p, &mpk_cfg);
                        assert!(r0.converged && r1.converged, "{what}");
                        assert!(!r0.mpk && r1.mpk, "{what}");
                        assert!(
                            r0.iterations.abs_diff(r1.iterations) <= 1,
                            "{what}: {} vs {} outer iterations",
                            r0.iterations,
                            r1.iterations
                        );
                        let xmax = x0.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                        let dx = x0
                            .iter()
                            .zip(&x1)
                            .fold(0.0f64, |m, (u, v)| m.max((u - v).abs()));
                        assert!(dx <= 1e-12 * xmax, "{what}: x differs by {dx}");
                        // Same arithmetic, so the same path: compare the counts exactly.
                        assert_eq!(r0.iterations, r1.iterations, "{what}");
                        assert_eq!(r0.reductions, r1.reductions, "{what}");
                        assert_eq!(r0.residual_replacements, r1.residual_replacements, "{what}");
                        // Loop exchanges: one per basis build (outer + 1) plus, per true
                        // residual (replacements + 1), one SpMV and the k depth-1 SpMVs
                        // that recompute A Q (cbcg: only after a replacement; cbcgr: at
                        // every refresh); the depth-1 path pays k per build.
                        let (outer, repl) = (r1.iterations as u64, r1.residual_replacements);
                        let builds = outer + 1;
                        let ku = k as u64;
                        let other = match method {
                            Method::Cbcg => 1 + (ku + 1) * repl,
                            _ => (ku + 1) * (repl + 1),
                        };
                        assert_eq!(r1.halo_exchanges, builds + other, "{what}");
                        assert_eq!(r0.halo_exchanges, ku * builds + other, "{what}");
                        // Setup: the scaling exchange of the plan on top of the matrix's.
                        assert_eq!(
                            r1.setup_halo_exchanges,
                            r0.setup_halo_exchanges + 1,
                            "{what}"
                        );
                        assert_eq!(r0.redundant_flops, 0, "{what}");
                        assert_eq!(r1.redundant_flops, builds * per_build, "{what}");
                        if p > 1 {
                            assert!(r1.redundant_flops > 0, "{what}");
                        } else {
                            assert_eq!(r1.redundant_flops, 0, "{what}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn mpk_configuration_errors() {
    let a = gen::poisson2d(6).unwrap();
    let bad = |e: KrylovError, needle: &str| match e {
        KrylovError::InvalidConfig(m) => assert!(m.contains(needle), "{m}"),
        other => panic!("expected InvalidConfig, got {other}"),
    };
    // Only the s-step methods have bases.
    for &method in Method::ALL {
        let cfg = SolverConfig {
            method,
            mpk: true,
            ..SolverConfig::default()
        };
        match (method.is_s_step(), cfg.validate()) {
            (true, r) => assert!(r.is_ok(), "{method}"),
            (false, Err(e)) => bad(e, "s-step"),
            (false, Ok(())) => panic!("{method} accepted mpk"),
        }
    }
    let part = Partition::rows(a.rows(), 2);
    let errs = ThreadUniverse::new(2)
        .unwrap()
        .run(|comm| -> Result<Vec<KrylovError>, KrylovError> {
            let cfg = SolverConfig {
                method: Method::Cbcg,
                k: 4,
                mpk: true,
                ..SolverConfig::default()
            };
            let mut errs = Vec::new();
            let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
            errs.extend(Solver::new(comm, dist, cfg.clone(), Cpu::sequential()).err());
            let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
            let shallow = MatrixPowers::from_global(comm, a.view(), &part, 2)?;
            errs.extend(
                Solver::with_mpk(comm, dist, shallow, cfg.clone(), Cpu::sequential()).err(),
            );
            let dist = DistCsr::from_global(comm, a.view(), &part, SpmvMode::Halo)?;
            let plan = MatrixPowers::from_global(comm, a.view(), &part, 4)?;
            let off = SolverConfig { mpk: false, ..cfg };
            errs.extend(Solver::with_mpk(comm, dist, plan, off, Cpu::sequential()).err());
            assert!(matches!(
                MatrixPowers::from_global(comm, a.view(), &part, 0),
                Err(LinalgError::InvalidConfig(_))
            ));
            Ok(errs)
        })
        .unwrap();
    for e in errs {
        let mut e = e.unwrap().into_iter();
        bad(e.next().unwrap(), "Solver::with_mpk");
        bad(e.next().unwrap(), "depth 2 < k = 4");
        bad(e.next().unwrap(), "mpk = false");
        assert!(e.next().is_none());
    }
}

/// Ghost zone and redundant work of a depth-`k` plan on `p` ranks: per rank the level
/// sizes, and the redundant flops per build (all ranks) with the useful SpMV flops of one
/// build (`2 nnz k`).
fn zone(a: &CsMat<f64>, p: usize, k: usize) -> (Vec<Vec<usize>>, u64, u64) {
    let part = Partition::rows(a.rows(), p);
    let out = ThreadUniverse::new(p)
        .unwrap()
        .run(|comm| -> Result<_, KrylovError> {
            let mpk = MatrixPowers::from_global(comm, a.view(), &part, k)?;
            assert_eq!(
                mpk.globals().len(),
                mpk.n_local() + mpk.level_sizes().iter().sum::<usize>()
            );
            Ok((mpk.level_sizes(), mpk.redundant_flops_per_build(k)))
        })
        .unwrap();
    let mut levels = Vec::new();
    let mut total = 0;
    for r in out {
        let (l, t) = r.unwrap();
        levels.push(l);
        total = t;
    }
    (levels, total, 2 * a.nnz() as u64 * k as u64)
}

#[test]
fn ghost_zones_grow_slowly_in_2d_and_fast_in_3d() {
    let (p, k) = (4, 4);
    let (l2, f2, u2) = zone(&gen::poisson2d(100).unwrap(), p, k);
    let (l3, f3, u3) = zone(&gen::poisson3d(30).unwrap(), p, k);
    let (q2, q3) = (f2 as f64 / u2 as f64, f3 as f64 / u3 as f64);
    println!("poisson2d(100) k={k} p={p}: levels per rank {l2:?}, redundant flops per build {f2} ({:.2}% of {u2})", 100.0 * q2);
    println!("poisson3d(30)  k={k} p={p}: levels per rank {l3:?}, redundant flops per build {f3} ({:.2}% of {u3})", 100.0 * q3);
    // A block of grid lines (2-D) reads one more line per level on each side; a block of
    // planes (3-D) one more plane: 9x more values per level here.
    assert_eq!(l2[0], vec![100; k]);
    assert_eq!(l2[1], vec![200; k]);
    assert_eq!(l3[0], vec![900; k]);
    assert_eq!(l3[1], vec![1800; k]);
    // Step j recomputes levels 1..=k-1-j: k(k-1)/2 ghost levels per side and build, a far
    // larger share of the useful work in 3-D (14 flops per row on a plane of 900 against
    // 10 on a line of 100, over blocks of 6750 and 2500 rows).
    assert!(q3 > 2.5 * q2, "3-D {q3} vs 2-D {q2}");
}
