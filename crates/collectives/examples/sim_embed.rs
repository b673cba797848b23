//! An application embedding the `sim` backend: a toy iterative solver step (local work, then
//! a global dot product) run on 8 modeled HA-PACS/TCA nodes, once blocking and once with the
//! reduction overlapped with the next local work, as pipelined CG does. The data is checked
//! against the threads backend and the modeled time against its parts.
//!
//! ```text
//! cargo run -p castack-collectives --example sim_embed
//! ```

use castack_collectives::fabric_sim::Fabric;
use castack_collectives::{
    Collectives, CommError, Communicator, ComputeWork, SimOptions, SimUniverse, ThreadUniverse,
};

const N: usize = 100_000; // vector length per rank
const ITERS: usize = 10;

/// Local work of one iteration: an axpy-like sweep over three vectors.
fn local_work() -> ComputeWork {
    ComputeWork {
        bytes: 3 * 8 * N as u64,
        flops: 2 * N as u64,
        launches: 1,
        ..ComputeWork::default()
    }
}

/// The application, written once over any communicator.
fn solver<C: Communicator>(comm: &C, overlap: bool) -> Result<(f64, Option<f64>), CommError> {
    let x: Vec<f64> = (0..N)
        .map(|i| ((comm.rank() * N + i) % 17) as f64)
        .collect();
    let mut acc = 0.0;
    for _ in 0..ITERS {
        let mut dot = [x.iter().map(|v| v * v).sum::<f64>()];
        if overlap {
            let req = comm.immediate_allreduce_sum(&mut dot)?;
            comm.model_compute(local_work());
            req.wait(comm)?;
        } else {
            comm.model_compute(local_work());
            comm.allreduce_sum(&mut dot)?;
        }
        acc += dot[0];
    }
    Ok((acc, comm.model_clock()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let p = 8;
    let fabric = Fabric::preset("peach2")?;
    let compute = fabric.compute_time(
        castack_collectives::fabric_sim::MemoryKind::Host,
        castack_collectives::fabric_sim::ComputeCost {
            bytes: local_work().bytes,
            flops: local_work().flops,
            launches: local_work().launches,
            ..castack_collectives::fabric_sim::ComputeCost::default()
        },
    )?;
    let universe = SimUniverse::new(p, fabric, SimOptions::default())?;
    let reference = ThreadUniverse::new(p)?.run(|c| solver(c, false))?;
    for overlap in [false, true] {
        let out = universe.run(|c| solver(c, overlap))?;
        let mut slowest: f64 = 0.0;
        for (r, (sim, thr)) in out.into_iter().zip(&reference).enumerate() {
            let (sim, thr) = (sim?, thr.clone()?);
            assert_eq!(sim.0.to_bits(), thr.0.to_bits(), "rank {r}: data differs");
            assert_eq!(thr.1, None, "threads has no modeled clock");
            slowest = slowest.max(sim.1.ok_or("sim has a clock")?);
        }
        let per_iter = slowest / ITERS as f64;
        let comm_part = per_iter - compute;
        println!(
            "{}: {:.2} us per iteration (compute {:.2} us, exposed allreduce {:.2} us)",
            if overlap { "overlapped" } else { "blocking  " },
            per_iter * 1e6,
            compute * 1e6,
            comm_part * 1e6
        );
        if overlap {
            // The 8-byte allreduce (a few us) hides behind 40 us of compute.
            assert!(comm_part.abs() < 1e-9, "exposed {comm_part}");
        } else {
            assert!(
                comm_part > 1e-6 && comm_part < 20e-6,
                "allreduce {comm_part}"
            );
        }
    }
    Ok(())
}
