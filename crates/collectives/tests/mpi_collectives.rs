//! Multi-process test of the MPI backend (`harness = false`, feature `mpi`): launched by
//! `cargo xtask test-mpi` under `mpirun -np 1..4`; exits non-zero (the job aborts) on the
//! first wrong result.
//!
//! Checks, on the world communicator and on a split of it:
//! - every algorithm of every registry over `MpiComm` against a sequential reference computed
//!   on each rank (inputs are a function of (rank, index) whose sums are exact in any order);
//! - the bit-identical allreduce algorithms give the same bits on MPI as on `ThreadUniverse`
//!   with the same rank count, on inputs whose sums do round;
//! - every `native` operation against the same references, the native nonblocking allreduce
//!   and allgatherv;
//! - large point-to-point messages sent by both partners before either receives (the
//!   rendezvous protocol: a blocking send here would deadlock), and the tag range error.

use castack_collectives::mpi::{MpiComm, NativeCollective, NativeOp};
use castack_collectives::schedule::{Datatype, Reduction};
use castack_collectives::{
    AllgathervAlgo, AllreduceAlgo, AlltoallAlgo, BarrierAlgo, BcastAlgo, Collectives, Communicator,
    GatherAlgo, Op, PointToPoint, ReduceAlgo, ScatterAlgo, ThreadUniverse,
};
use mpi::topology::Communicator as _;

type Check = Result<(), String>;

/// A named check run on every rank.
type Step<'a> = (&'static str, Box<dyn Fn() -> Check + 'a>);

/// Exact values: multiples of 1/2 below 2^20, so every summation order gives the same sum.
fn exact(rank: usize, i: usize) -> f64 {
    ((rank * 131 + i * 7) % 97) as f64 * 0.5
}

/// Values whose sums round differently in different orders.
fn rounding(rank: usize, i: usize) -> f64 {
    let x = (rank as f64 + 1.0) * 0.1 + i as f64 * 1e-3;
    x.sin() * 10f64.powi((i % 7) as i32 - 3)
}

fn expect(what: &str, got: &[f64], want: &[f64]) -> Check {
    if got
        .iter()
        .map(|v| v.to_bits())
        .eq(want.iter().map(|v| v.to_bits()))
    {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

fn registries(comm: &MpiComm, label: &str) -> Check {
    let (p, rank) = (comm.size(), comm.rank());
    let e = |e| format!("{label}: {e}");
    for &len in &[1usize, 5, 4099] {
        let mine: Vec<f64> = (0..len).map(|i| exact(rank, i)).collect();
        let sums: Vec<f64> = (0..len)
            .map(|i| (0..p).map(|r| exact(r, i)).sum())
            .collect();
        for &algo in AllreduceAlgo::ALL {
            let mut x = mine.clone();
            comm.allreduce_f64_with(&mut x, Op::Sum, algo).map_err(e)?;
            expect(
                &format!("{label} allreduce {} n={len}", algo.name()),
                &x,
                &sums,
            )?;
            let mut y = mine.clone();
            let req = comm
                .immediate_allreduce_f64_with(&mut y, Op::Sum, algo)
                .map_err(e)?;
            req.wait(comm).map_err(e)?;
            expect(
                &format!("{label} iallreduce {} n={len}", algo.name()),
                &y,
                &sums,
            )?;
        }
        for &algo in ReduceAlgo::ALL {
            for root in [0, p - 1] {
                let mut x = mine.clone();
                comm.reduce_f64_with(root, &mut x, Op::Sum, algo)
                    .map_err(e)?;
                let want = if rank == root { &sums } else { &mine };
                expect(
                    &format!("{label} reduce {} root {root}", algo.name()),
                    &x,
                    want,
                )?;
            }
        }
        let blocks: Vec<Vec<f64>> = (0..p)
            .map(|r| (0..len).map(|i| exact(r, i) + 1000.0 * r as f64).collect())
            .collect();
        let all: Vec<f64> = blocks.concat();
        for &algo in BcastAlgo::ALL {
            for root in [0, p / 2] {
                let mut x = if rank == root {
                    blocks[root].clone()
                } else {
                    vec![0.0; len]
                };
                comm.bcast_f64_with(root, &mut x, algo).map_err(e)?;
                expect(&format!("{label} bcast {}", algo.name()), &x, &blocks[root])?;
            }
        }
        for &algo in ScatterAlgo::ALL {
            let root = p - 1;
            let send = if rank == root {
                all.clone()
            } else {
                Vec::new()
            };
            let mut recv = vec![0.0; len];
            comm.scatter_f64_with(root, &send, &mut recv, algo)
                .map_err(e)?;
            expect(
                &format!("{label} scatter {}", algo.name()),
                &recv,
                &blocks[rank],
            )?;
        }
        for &algo in GatherAlgo::ALL {
            let root = p / 2;
            let mut recv = if rank == root {
                vec![0.0; p * len]
            } else {
                Vec::new()
            };
            comm.gather_f64_with(root, &blocks[rank], &mut recv, algo)
                .map_err(e)?;
            if rank == root {
                expect(&format!("{label} gather {}", algo.name()), &recv, &all)?;
            }
        }
        // Uneven counts (one rank contributes nothing).
        let counts: Vec<usize> = (0..p).map(|r| if r == 1 { 0 } else { len + r }).collect();
        let local: Vec<f64> = (0..counts[rank]).map(|i| exact(rank, i)).collect();
        let want: Vec<f64> = (0..p)
            .flat_map(|r| (0..counts[r]).map(move |i| exact(r, i)))
            .collect();
        for &algo in AllgathervAlgo::ALL {
            let mut out = vec![0.0; want.len()];
            comm.allgatherv_f64_with(&local, &counts, &mut out, algo)
                .map_err(e)?;
            expect(&format!("{label} allgatherv {}", algo.name()), &out, &want)?;
        }
        let mut out = vec![0.0; want.len()];
        comm.native_allgatherv_f64(&local, &counts, &mut out)
            .map_err(e)?;
        expect(&format!("{label} native allgatherv"), &out, &want)?;
        let send: Vec<f64> = (0..p * len).map(|i| (rank * p * len + i) as f64).collect();
        let want: Vec<f64> = (0..p)
            .flat_map(|j| (0..len).map(move |i| (j * p * len + rank * len + i) as f64))
            .collect();
        for &algo in AlltoallAlgo::ALL {
            let mut recv = vec![0.0; p * len];
            comm.alltoall_f64_with(&send, &mut recv, algo).map_err(e)?;
            expect(&format!("{label} alltoall {}", algo.name()), &recv, &want)?;
        }
    }
    for &algo in BarrierAlgo::ALL {
        comm.barrier_with(algo).map_err(e)?;
    }
    Ok(())
}

/// The bench's buffer conventions, checked for every native operation.
fn native(comm: &MpiComm, label: &str) -> Check {
    let (p, rank) = (comm.size(), comm.rank());
    let e = |e| format!("{label}: {e}");
    let sum = Reduction {
        op: Op::Sum,
        datatype: Datatype::F64,
    };
    let block = 24usize; // bytes: 3 f64
    let byte = |b: usize, i: usize| ((b * 31 + i * 7) % 251) as u8;
    let f64_bytes = |v: &[f64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_ne_bytes()).collect() };
    let root = p - 1;
    let ops = [
        NativeOp::Barrier,
        NativeOp::Bcast { root },
        NativeOp::Scatter { root },
        NativeOp::Gather { root },
        NativeOp::Reduce {
            root,
            reduction: sum,
        },
        NativeOp::Allgather,
        NativeOp::Allreduce { reduction: sum },
        NativeOp::Alltoall,
    ];
    for op in ops {
        let len = op.buffer_bytes(p, rank, block);
        let mine: Vec<f64> = (0..block / 8).map(|i| exact(rank, i)).collect();
        let sums: Vec<f64> = (0..block / 8)
            .map(|i| (0..p).map(|r| exact(r, i)).sum())
            .collect();
        let all: Vec<u8> = (0..p * block).map(|i| byte(i / block, i % block)).collect();
        let own: Vec<u8> = (0..block).map(|i| byte(rank, i)).collect();
        let (input, want): (Vec<u8>, Vec<u8>) = match op {
            NativeOp::Barrier => (Vec::new(), Vec::new()),
            NativeOp::Bcast { root } => (
                if rank == root {
                    own.clone()
                } else {
                    vec![0; len]
                },
                (0..block).map(|i| byte(root, i)).collect(),
            ),
            NativeOp::Scatter { .. } if rank == root => (all.clone(), all.clone()),
            NativeOp::Scatter { .. } => (vec![0; len], own.clone()),
            NativeOp::Gather { .. } if rank == root => {
                let mut b = vec![0; len];
                b[root * block..(root + 1) * block].copy_from_slice(&own);
                (b, all.clone())
            }
            NativeOp::Gather { .. } => (own.clone(), own.clone()),
            NativeOp::Reduce { .. } if rank == root => (f64_bytes(&mine), f64_bytes(&sums)),
            NativeOp::Reduce { .. } => (f64_bytes(&mine), f64_bytes(&mine)),
            NativeOp::Allgather => {
                let mut b = vec![0; len];
                b[rank * block..(rank + 1) * block].copy_from_slice(&own);
                (b, all.clone())
            }
            NativeOp::Allreduce { .. } => (f64_bytes(&mine), f64_bytes(&sums)),
            NativeOp::Alltoall => (
                (0..len)
                    .map(|i| byte(rank * p + i / block, i % block))
                    .collect(),
                (0..len)
                    .map(|i| byte((i / block) * p + rank, i % block))
                    .collect(),
            ),
        };
        let mut plan = NativeCollective::new(comm, op, block).map_err(e)?;
        // Twice: the staging buffers are reused.
        for _ in 0..2 {
            let mut buf = input.clone();
            plan.execute_bytes(comm, &mut buf).map_err(e)?;
            if buf != want {
                return Err(format!("{label} native {op:?}: got {buf:?}, want {want:?}"));
            }
        }
        // Misaligned caller buffers take the staging path.
        if matches!(op, NativeOp::Allreduce { .. }) {
            let mut backing = vec![0u8; len + 1];
            backing[1..].copy_from_slice(&input);
            plan.execute_bytes(comm, &mut backing[1..]).map_err(e)?;
            if backing[1..] != want[..] {
                return Err(format!("{label} native allreduce on a misaligned buffer"));
            }
        }
    }
    let mut x = [exact(rank, 3), 1.0];
    let overlapped = comm.native_immediate_allreduce_f64(&mut x, Op::Max, || 41 + 1);
    let want = [(0..p).map(|r| exact(r, 3)).fold(f64::MIN, f64::max), 1.0];
    expect(&format!("{label} native iallreduce"), &x, &want)?;
    if overlapped != 42 {
        return Err(format!("{label}: overlap closure result lost"));
    }
    let mut y = [rank as f64];
    comm.native_allreduce_f64(&mut y, Op::Sum);
    expect(
        &format!("{label} native allreduce"),
        &y,
        &[(0..p).sum::<usize>() as f64],
    )
}

/// Bit-identical algorithms give the same bits on MPI as on threads.
fn same_bits_as_threads(comm: &MpiComm) -> Check {
    let (p, rank) = (comm.size(), comm.rank());
    let len = 37;
    let input = |r: usize| -> Vec<f64> { (0..len).map(|i| rounding(r, i)).collect() };
    for &algo in AllreduceAlgo::ALL.iter().filter(|a| a.bit_identical()) {
        let mut x = input(rank);
        comm.allreduce_f64_with(&mut x, Op::Sum, algo)
            .map_err(|e| e.to_string())?;
        let threads = ThreadUniverse::new(p)
            .and_then(|u| {
                u.run(|c| {
                    let mut y = input(c.rank());
                    c.allreduce_f64_with(&mut y, Op::Sum, algo).map(|()| y)
                })
            })
            .map_err(|e| e.to_string())?;
        let reference = threads[rank].clone().map_err(|e| e.to_string())?;
        expect(
            &format!("allreduce {} mpi vs threads", algo.name()),
            &x,
            &reference,
        )?;
    }
    Ok(())
}

/// Both partners send 1 MiB before either receives; then a user tag past the MPI range.
fn point_to_point(comm: &MpiComm) -> Check {
    let (p, rank) = (comm.size(), comm.rank());
    let next = (rank + 1) % p;
    let prev = (rank + p - 1) % p;
    let n = 1 << 17;
    let data: Vec<f64> = (0..n).map(|i| (rank * n + i) as f64).collect();
    let req = comm.isend_f64(next, 7, &data).map_err(|e| e.to_string())?;
    let mut got = vec![0.0; n];
    comm.recv_f64(prev, 7, &mut got)
        .map_err(|e| e.to_string())?;
    comm.wait_send(req).map_err(|e| e.to_string())?;
    let want: Vec<f64> = (0..n).map(|i| (prev * n + i) as f64).collect();
    expect("ring 1 MiB", &got[..4], &want[..4])?;
    if got != want {
        return Err("ring 1 MiB: payload differs".into());
    }
    if comm.isend(next, 1 << 20, &[]).is_ok() {
        return Err("a user tag of 2^20 was accepted".into());
    }
    comm.barrier().map_err(|e| e.to_string())?;
    Ok(())
}

fn main() {
    let Some(universe) = mpi::initialize() else {
        eprintln!("mpi_collectives: MPI was already initialized");
        std::process::exit(1);
    };
    let world = universe.world();
    let comm = MpiComm::new(&world);
    let (p, rank) = (comm.size(), comm.rank());
    // Two halves (ranks 0,2,.. and 1,3,..), each its own communicator.
    let half = world
        .split_by_color(mpi::topology::Color::with_value((rank % 2) as i32))
        .map(|c| MpiComm::new(&c));
    let steps: Vec<Step<'_>> = vec![
        (
            "registries on world",
            Box::new(|| registries(&comm, "world")),
        ),
        (
            "registries on a split",
            Box::new(|| match &half {
                Some(h) => registries(h, "split"),
                None => Err("split_by_color returned no communicator".into()),
            }),
        ),
        ("native on world", Box::new(|| native(&comm, "world"))),
        (
            "native on a split",
            Box::new(|| match &half {
                Some(h) => native(h, "split"),
                None => Err("split_by_color returned no communicator".into()),
            }),
        ),
        (
            "bit-identical vs threads",
            Box::new(|| same_bits_as_threads(&comm)),
        ),
        ("point-to-point", Box::new(|| point_to_point(&comm))),
    ];
    for (name, step) in steps {
        if let Err(msg) = step() {
            eprintln!("mpi_collectives: FAILED on rank {rank} of {p}: {name}: {msg}");
            comm.abort(1);
        }
        if rank == 0 {
            println!("ok: {name} ({p} ranks)");
        }
    }
}
