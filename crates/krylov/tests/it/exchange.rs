//! The halo exchange's strategies (naive, segmented over C devices) give the same solve.

use castack_collectives::{Communicator, ThreadUniverse};
use castack_krylov::sparse::gen;
use castack_krylov::{Cpu, DistCsr, Partition, Solver, SolverConfig, SpmvMode};
use castack_neighbor::Strategy;

/// A CG solve whose halo exchange is segmented (every device count; with 8 ranks on a
/// 6^3 grid inner ranks have N = 4 neighbours, so N > C > 1, N <= C and C = 1 all
/// occur) gives the same iterates, bit for bit, as the naive one.
#[test]
fn segmented_halo_gives_bit_identical_iterates() {
    let a = gen::poisson3d_heterogeneous(6, 1e3, 3).unwrap();
    let n = a.rows();
    let b: Vec<f64> = (0..n).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
    let solve = |p: usize, exchange: Strategy| {
        let part = Partition::rows(n, p);
        let cfg = SolverConfig {
            exchange,
            history: true,
            ..SolverConfig::default()
        };
        ThreadUniverse::new(p)
            .unwrap()
            .run(|comm| {
                let dist =
                    DistCsr::from_global_with(comm, a.view(), &part, SpmvMode::Halo, cfg.exchange)
                        .unwrap();
                let range = part.range(comm.rank());
                let mut solver = Solver::new(comm, dist, cfg.clone(), Cpu::sequential()).unwrap();
                let s = solver.solve(&b[range], None).unwrap();
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
                (
                    bits(&s.x),
                    bits(s.report.history.as_deref().unwrap_or(&[])),
                    s.report.iterations,
                )
            })
            .unwrap()
    };
    for p in [3, 8] {
        let naive = solve(p, Strategy::Naive);
        assert!(naive[0].2 > 5);
        for c in 1..=4 {
            assert_eq!(
                solve(p, Strategy::Segmented { devices: c }),
                naive,
                "p={p} c={c}"
            );
        }
    }
}
