//! How another Rust HPC application embeds castack-collectives: it keeps its own buffers,
//! starts thread ranks with a `ThreadUniverse`, and calls allreduce, allgatherv and broadcast
//! through the `Collectives` extension trait, choosing algorithms from the registries. Every
//! result is checked; the example exits non-zero when one is wrong.
//!
//! Run with `cargo run -p castack-collectives --example embed_allreduce [ranks]`.

use std::process::ExitCode;

use castack_collectives::{
    AllgathervAlgo, AllreduceAlgo, BcastAlgo, Collectives, CommError, Communicator, Op,
    PersistentCollective, ThreadUniverse,
};

/// The application's own per-rank state: a slice of a distributed vector.
struct Local {
    /// Global index of the first owned entry.
    first: usize,
    /// Owned entries.
    values: Vec<f64>,
}

/// Rows owned by `rank` when `n` rows are split over `p` ranks as evenly as possible.
fn owned(n: usize, p: usize, rank: usize) -> std::ops::Range<usize> {
    let (base, rem) = (n / p, n % p);
    let start = rank * base + rank.min(rem);
    start..start + base + usize::from(rank < rem)
}

/// What one rank does; returns a description of the first wrong result, if any.
fn rank_main(comm: &impl Communicator, n: usize) -> Result<Option<String>, CommError> {
    let (rank, p) = (comm.rank(), comm.size());
    let rows = owned(n, p, rank);
    let local = Local {
        first: rows.start,
        values: rows.clone().map(|i| i as f64 + 1.0).collect(),
    };

    // 1. A dot product: local partial sum, then a bit-identical allreduce so every rank
    //    takes the same branch on the result.
    let mut dot = [local.values.iter().map(|v| v * v).sum::<f64>()];
    let algo = AllreduceAlgo::default();
    assert!(algo.bit_identical());
    comm.allreduce_f64_with(&mut dot, Op::Sum, algo)?;
    let want: f64 = (1..=n).map(|i| (i * i) as f64).sum();
    if dot[0] != want {
        return Ok(Some(format!(
            "rank {rank}: dot = {}, expected {want}",
            dot[0]
        )));
    }
    let mut biggest = [local.values.last().copied().unwrap_or(f64::MIN)];
    comm.allreduce_f64_with(&mut biggest, Op::Max, algo)?;
    if biggest[0] != n as f64 {
        return Ok(Some(format!("rank {rank}: max = {}", biggest[0])));
    }

    // 2. Gather the whole vector on every rank (uneven counts), once with the default
    //    algorithm and then with a persistent ring allgatherv as a solver loop would.
    let counts: Vec<usize> = (0..p).map(|r| owned(n, p, r).len()).collect();
    let mut full = vec![0.0; n];
    comm.allgatherv_f64(&local.values, &counts, &mut full)?;
    let expected: Vec<f64> = (0..n).map(|i| i as f64 + 1.0).collect();
    if full != expected {
        return Ok(Some(format!("rank {rank}: allgatherv gave {full:?}")));
    }
    let mut gather = PersistentCollective::allgatherv_f64(comm, &counts, AllgathervAlgo::Ring)?;
    for step in 1..=3 {
        // In place: write the owned part of the full vector, then gather the rest.
        for (i, v) in local.values.iter().enumerate() {
            full[local.first + i] = v * step as f64;
        }
        gather.execute_f64(comm, &mut full)?;
        if full
            .iter()
            .zip(&expected)
            .any(|(a, b)| *a != b * step as f64)
        {
            return Ok(Some(format!(
                "rank {rank}: persistent allgatherv step {step}"
            )));
        }
    }

    // 3. Broadcast parameters chosen on the last rank.
    let root = p - 1;
    let mut params = if rank == root {
        [0.5, 1e-8, 42.0]
    } else {
        [0.0; 3]
    };
    comm.bcast_f64_with(root, &mut params, BcastAlgo::Binomial)?;
    if params != [0.5, 1e-8, 42.0] {
        return Ok(Some(format!("rank {rank}: bcast gave {params:?}")));
    }

    comm.barrier()?;
    Ok(None)
}

fn main() -> ExitCode {
    let ranks = match std::env::args().nth(1).map(|s| s.parse::<usize>()) {
        None => 5,
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            eprintln!("embed_allreduce: ranks must be a number: {e}");
            return ExitCode::from(2);
        }
    };
    let n = 23;
    let outcome = ThreadUniverse::new(ranks).and_then(|u| u.run(|comm| rank_main(comm, n)));
    let per_rank = match outcome {
        Ok(per_rank) => per_rank,
        Err(e) => {
            eprintln!("embed_allreduce: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    for (rank, result) in per_rank.into_iter().enumerate() {
        match result {
            Ok(None) => {}
            Ok(Some(wrong)) => {
                eprintln!("embed_allreduce: wrong result: {wrong}");
                failed = true;
            }
            Err(e) => {
                eprintln!("embed_allreduce: rank {rank}: {e}");
                failed = true;
            }
        }
    }
    if failed {
        return ExitCode::FAILURE;
    }
    println!(
        "embed_allreduce: {ranks} ranks, allreduce + allgatherv + bcast + barrier all correct"
    );
    ExitCode::SUCCESS
}
