//! castack-plan embedded: which CG-family method and block size would be fastest for a 3-D
//! Poisson problem at 16 and 128 nodes of the FX100 model, without running at that scale.
//! The planner probes iteration counts with real solves on 2 thread ranks and prices every
//! candidate's communication on the modeled fabric. Asserted: one recommendation per rank
//! count, and it is the candidate with the least predicted time.
//!
//! `cargo run --release -p castack-plan --example plan_poisson`

use std::error::Error;

use castack_collectives::fabric_sim::{Fabric, MemoryKind};
use castack_collectives::AllreduceAlgo;
use castack_krylov::sparse::gen;
use castack_krylov::{Basis, Method};
use castack_plan::probe::ProbeOptions;
use castack_plan::{plan, Candidate, PlanConfig, DEFAULT_PRICE_LIMIT};

fn main() -> Result<(), Box<dyn Error>> {
    let a = gen::poisson3d(16)?;
    // b = A * ones, so the exact solution is all ones.
    let b: Vec<f64> = a.outer_iterator().map(|r| r.data().iter().sum()).collect();
    let cfg = PlanConfig {
        ranks: vec![16, 128],
        candidates: Candidate::grid(
            &[
                (Method::Cg, Basis::Chebyshev),
                (Method::Pipecg, Basis::Chebyshev),
                (Method::Cbcgr, Basis::Chebyshev),
            ],
            2..=6,
            true,
        ),
        probe: ProbeOptions {
            ranks: 2,
            tol: 1e-8,
            ..ProbeOptions::default()
        },
        allreduce: AllreduceAlgo::default(),
        price_limit: DEFAULT_PRICE_LIMIT,
        device: MemoryKind::Host,
    };
    let rows = plan(a.view(), &b, &Fabric::preset("fx100")?, &cfg)?;
    for p in [16, 128] {
        let at_p: Vec<_> = rows.iter().filter(|r| r.ranks == p).collect();
        let best = at_p
            .iter()
            .filter_map(|r| r.predicted_total_s.map(|t| (t, *r)))
            .min_by(|x, y| x.0.total_cmp(&y.0))
            .ok_or("no candidate was priced")?;
        let chosen: Vec<_> = at_p.iter().filter(|r| r.recommended).collect();
        assert_eq!(chosen.len(), 1);
        assert_eq!(chosen[0].predicted_total_s, Some(best.0));
        let r = chosen[0];
        println!(
            "P = {p:3}: {} k={:?} mpk={} predicted {:.3e} s ({:.0} CG-equivalent iterations; per iteration compute {:.2e} s, allreduce {:.2e} s, halo {:.2e} s)",
            r.method,
            r.k,
            r.mpk,
            best.0,
            r.predicted_eq_iterations.unwrap_or(f64::NAN),
            r.compute_s,
            r.allreduce_s.unwrap_or(f64::NAN),
            r.halo_s.unwrap_or(f64::NAN),
        );
    }
    Ok(())
}
