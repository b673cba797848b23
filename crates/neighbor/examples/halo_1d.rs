//! How an application embeds `castack-neighbor`: its own 1-D domain decomposition with one
//! ghost cell at each end of every rank's block, and Jacobi smoothing steps for
//! -u'' = f on (0, 1) with fixed boundary values, overlapping the halo exchange with the
//! interior update. The distributed result is asserted equal (bit for bit) to a sequential
//! computation on the whole grid.
//!
//! Run with `cargo run -p castack-neighbor --example halo_1d -- [ranks] [points] [steps]`.

use std::ops::Range;

use castack_collectives::{Communicator, ThreadUniverse};
use castack_neighbor::{Exchange, ExchangePattern, Strategy};

/// Left and right boundary values (Dirichlet).
const BOUNDARY: (f64, f64) = (1.0, -0.5);

/// The right-hand side f at global point `g` of `n` interior points.
fn rhs(g: usize, n: usize) -> f64 {
    let x = (g + 1) as f64 / (n + 1) as f64;
    (3.0 * x).sin()
}

/// One Jacobi update of the local points `points` of a buffer with ghost cells whose local
/// point 1 is global point `first`, from `u` into `next`.
fn jacobi(u: &[f64], next: &mut [f64], points: Range<usize>, first: usize, n: usize) {
    let h = 1.0 / (n + 1) as f64;
    for (i, x) in next
        .iter_mut()
        .enumerate()
        .take(points.end)
        .skip(points.start)
    {
        *x = 0.5 * (u[i - 1] + u[i + 1] + h * h * rhs(first + i - 1, n));
    }
}

/// Block decomposition of `n` points over `p` ranks: (first global point, count).
fn block(rank: usize, p: usize, n: usize) -> (usize, usize) {
    let (base, extra) = (n / p, n % p);
    (
        rank * base + rank.min(extra),
        base + usize::from(rank < extra),
    )
}

/// The halo pattern of a block of `len` points at local 1..=len: the first point goes to
/// the left neighbour's right ghost, the last to the right neighbour's left ghost.
fn halo_pattern(rank: usize, p: usize, len: usize) -> ExchangePattern {
    let mut pattern = ExchangePattern::new();
    if rank > 0 {
        pattern.sends.push((rank - 1, vec![1]));
        pattern.recvs.push((rank - 1, vec![0]));
    }
    if rank + 1 < p {
        pattern.sends.push((rank + 1, vec![len]));
        pattern.recvs.push((rank + 1, vec![len + 1]));
    }
    pattern
}

/// `steps` Jacobi steps on one rank's block; returns the block's values.
fn smooth_distributed<C: Communicator>(
    comm: &C,
    n: usize,
    steps: usize,
) -> Result<Vec<f64>, Box<dyn std::error::Error + Send + Sync>> {
    let (rank, p) = (comm.rank(), comm.size());
    let (first, len) = block(rank, p, n);
    let mut ex = Exchange::new(
        comm,
        halo_pattern(rank, p, len),
        len + 2,
        len + 2,
        Strategy::Naive,
    )?;
    // Local buffer: [left ghost, owned points..., right ghost]; the outer ghosts of the
    // first and last rank hold the boundary values and are never received into.
    let mut u = vec![0.0; len + 2];
    u[0] = if rank == 0 { BOUNDARY.0 } else { 0.0 };
    u[len + 1] = if rank + 1 == p { BOUNDARY.1 } else { 0.0 };
    let mut next = u.clone();
    for _ in 0..steps {
        ex.start(comm, &u)?;
        // Interior points need no ghost: update them while the halo is in flight.
        jacobi(&u, &mut next, 2..len, first, n);
        ex.finish(comm, &mut u)?;
        jacobi(&u, &mut next, 1..2, first, n);
        jacobi(&u, &mut next, len.max(2)..len + 1, first, n);
        // Keep the boundary ghosts; interior ghosts are refreshed by the next exchange.
        next[0] = u[0];
        next[len + 1] = u[len + 1];
        std::mem::swap(&mut u, &mut next);
    }
    Ok(u[1..=len].to_vec())
}

/// The same steps on the whole grid.
fn smooth_sequential(n: usize, steps: usize) -> Vec<f64> {
    let mut u = vec![0.0; n + 2];
    (u[0], u[n + 1]) = BOUNDARY;
    let mut next = u.clone();
    for _ in 0..steps {
        jacobi(&u, &mut next, 1..n + 1, 0, n);
        std::mem::swap(&mut u, &mut next);
    }
    u[1..=n].to_vec()
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let arg =
        |k: usize, default: usize| -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
            match std::env::args().nth(k) {
                Some(s) => Ok(s
                    .parse()
                    .map_err(|e| format!("argument {k} ('{s}'): {e}"))?),
                None => Ok(default),
            }
        };
    let (p, n, steps) = (arg(1, 4)?, arg(2, 103)?, arg(3, 50)?);
    if n < p {
        return Err(format!("{n} points cannot be split over {p} ranks").into());
    }

    let blocks = ThreadUniverse::new(p)?.run(|comm| smooth_distributed(comm, n, steps))?;
    let mut distributed = Vec::with_capacity(n);
    for block in blocks {
        distributed.extend(block?);
    }
    let sequential = smooth_sequential(n, steps);
    assert_eq!(
        distributed, sequential,
        "distributed Jacobi differs from the sequential one"
    );
    println!(
        "{steps} Jacobi steps on {n} points over {p} ranks: identical to the sequential \
         result (u[{}] = {:.6})",
        n / 2,
        distributed[n / 2]
    );
    Ok(())
}
