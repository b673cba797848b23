//! `krylov bench pingpong`: the half round trip between two ranks, as the calibration
//! figures were measured, on the threads backend (wall time), the mpi backend (wall time,
//! the two processes of `mpirun -np 2`) or the sim backend (modeled time on two nodes
//! `--hops` apart). Every backend runs the same loop, [`ping`], generic
//! over the communicator.
//!
//! On mpi (what differs, honestly): our `Communicator` has no one-sided operation (no MPI
//! RMA window), so in both modes a message is `MPI_Isend` of a copy of the buffer, received
//! with `MPI_Mprobe`/`MPI_Mrecv` (`castack_collectives::mpi`); the row's `algo` is
//! `mpi_isend`. The modes differ only in how they time: `put` is the half round trip of
//! rank 0 with every receive posted up front (which on MPI records the receive; nothing is
//! pre-registered); `two_sided` is the mean one-way latency, each message timed by its
//! receiver from a barrier (the barrier's exit skew between the two processes enters the
//! figure). `--hops`, `--fabric`, `--mechanism` and `--memory device` are sim-only
//! (exit 2), and the job must have exactly 2 processes (else exit 2).
//!
//! On sim, both modes run real messages through the backend's point-to-point path, which
//! prices every message with the two-sided protocol over puts
//! (castack_fabric_sim::two_sided):
//!
//! - `put`: one-sided puts into pre-registered buffers. Every receive address is posted at
//!   start and an untimed first round trip lets the notifications land, so each timed message
//!   costs its put alone. The time is half the round trip of rank 0.
//! - `two_sided`: each message's receive is posted when its send is: a barrier aligns both
//!   clocks before every message, so the notification is never hidden. The time is the mean
//!   of the two one-way latencies measured from the aligned clocks (the barrier excluded).

use std::process::ExitCode;

use crate::args::{Backend, BenchPingpongArgs, MechanismArg, Memory, PingMode as Mode};
use crate::budget::check_buffers;
use crate::clock::BenchClock;
use crate::exit::{bad, CliError};
use crate::fabric::sim_backend;
use crate::launch::{Job, Ranks};
use crate::output::out;
use crate::table::{parse_sizes, print_machine_row, Row, CSV_HEADER};
use castack_collectives::fabric_sim::{Endpoint, Fabric, Mechanism, Transfer};
use castack_collectives::{Collectives, CommError, Communicator, PointToPoint, SimMechanism};

/// Two nodes `hops` links apart (`None`: the nearest pair), searched from node 0. On a
/// fabric of several devices per node the nearest pair is two devices of one node; a pair
/// `hops` apart is of two nodes where there is one (a route inside a node is two links too,
/// up to the node's switch and down).
fn node_pair(fabric: &Fabric, hops: Option<usize>) -> Result<(usize, usize), CliError> {
    let from0: Vec<(usize, usize)> = (1..fabric.nodes())
        .map(|d| (d, fabric.route(0, d).hops()))
        .collect();
    let pick = match hops {
        None => from0.iter().min_by_key(|(_, h)| *h).copied(),
        Some(h) => {
            let at = |other_node: bool| {
                from0
                    .iter()
                    .find(|(d, x)| *x == h && (!other_node || !fabric.topology().same_node(0, *d)))
            };
            at(true).or_else(|| at(false)).copied()
        }
    };
    match pick {
        Some((d, _)) => Ok((0, d)),
        None => {
            let mut have: Vec<usize> = from0.iter().map(|(_, h)| *h).collect();
            have.sort_unstable();
            have.dedup();
            Err(bad(format!(
                "--hops {}: fabric `{}` has no two nodes that far apart (hop counts: {})",
                hops.unwrap_or(1),
                fabric.config().name,
                have.iter()
                    .map(|h| h.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    }
}

/// Run `krylov bench pingpong`.
pub(crate) fn run(args: BenchPingpongArgs) -> Result<ExitCode, CliError> {
    if args.backend == Backend::Mpi {
        // One rank of an mpirun job.
        return crate::launch::mpi(|job| run_on(args, Some(job)));
    }
    run_on(args, None)
}

/// `krylov bench pingpong` in this process; `mpi` is this rank's MPI job under `--backend
/// mpi` (2 processes; rank 0 prints the rows).
fn run_on(args: BenchPingpongArgs, mpi: Option<&Job>) -> Result<ExitCode, CliError> {
    if args.json && args.csv {
        return Err(bad("--json and --csv are exclusive"));
    }
    let budget = args.budget.resolve()?;
    let sim = match args.backend {
        Backend::Threads | Backend::Mpi => {
            let name = args.backend.name();
            if args.memory == Memory::Device {
                return Err(bad(format!(
                    "--memory device is a modeled GPU endpoint of the sim backend; the {name} backend has host memory only"
                )));
            }
            if let Some(f) = &args.fabric {
                return Err(bad(format!("--fabric {f} applies to --backend sim only")));
            }
            if let Some(h) = args.hops {
                return Err(bad(format!(
                    "--hops {h} applies to --backend sim only (the {name} backend does not place ranks on modeled nodes)"
                )));
            }
            if args.mechanism != MechanismArg::Auto {
                return Err(bad("--mechanism applies to --backend sim only"));
            }
            None
        }
        Backend::Sim => {
            let mechanism = match args.mechanism {
                MechanismArg::Auto => SimMechanism::Auto,
                MechanismArg::Pio => SimMechanism::Pio,
                MechanismArg::Dma => SimMechanism::Dma,
            };
            let mut s = sim_backend(args.fabric.as_deref(), args.memory, mechanism, budget)?;
            let (a, b) = node_pair(&s.fabric, args.hops)?;
            s.options.nodes = Some(vec![a, b]);
            Some(s)
        }
    };
    if args.backend == Backend::Mpi && mpi.is_none() {
        return Err(bad("--backend mpi runs as one rank of `mpirun -np 2`"));
    }
    if let Some(p) = mpi.map(|job| job.comm().size()).filter(|&p| p != 2) {
        return Err(bad(format!(
            "bench pingpong runs between 2 ranks: run it under `mpirun -np 2` (this job has {p})"
        )));
    }
    let leader = mpi.is_none_or(|job| job.comm().rank() == 0);
    let sizes = parse_sizes(&args.sizes).map_err(|e| bad(format!("--sizes: {e}")))?;
    // Each of the 2 ranks holds its buffer, the message in flight and the one it receives.
    check_buffers(
        budget,
        "2 ranks",
        sizes.iter().map(|&b| (b as u64).checked_mul(2 * 3)),
    )?;
    let (iters, warmup) = match &sim {
        None => (args.iters.unwrap_or(1000), args.warmup.unwrap_or(100)),
        Some(_) => (args.iters.unwrap_or(1), args.warmup.unwrap_or(0)),
    };
    if iters == 0 {
        return Err(bad("--iters must be at least 1"));
    }
    let ranks = match (mpi, &sim) {
        (Some(job), _) => Ranks::Mpi(job),
        (None, Some(s)) => Ranks::sim(2, s.fabric.clone(), s.options.clone())?,
        (None, None) => Ranks::threads(2)?,
    };
    let universe = ranks.sim_universe();
    if !leader {
        // Rank 1 of an MPI job measures and prints nothing.
    } else if args.csv {
        out!("{CSV_HEADER}");
    } else if !args.json {
        match &universe {
            Some(u) => out!(
                "# pingpong on sim (fabric {}, nodes {:?}, {} hops, mode {}): modeled half round trip",
                u.fabric().config().name,
                u.placement().nodes,
                u.fabric().route(u.placement().nodes[0], u.placement().nodes[1]).hops(),
                match args.mode {
                    Mode::Put => "put",
                    Mode::TwoSided => "two_sided",
                }
            ),
            None => out!(
                "# pingpong on {} (mode {}): {}, {iters} round trips after {warmup} warm-up",
                args.backend.name(),
                match args.mode {
                    Mode::Put => "put",
                    Mode::TwoSided => "two_sided",
                },
                match (args.mode, mpi) {
                    (Mode::Put, Some(_)) => "half round trip of MPI_Isend + MPI_Mprobe/MPI_Mrecv (no one-sided put on mpi)",
                    (Mode::TwoSided, Some(_)) => "mean one-way latency of MPI_Isend + MPI_Mprobe/MPI_Mrecv, timed from a barrier",
                    (Mode::Put, None) => "half round trip",
                    (Mode::TwoSided, None) => "mean one-way latency, timed from a barrier",
                }
            ),
        }
        out!(
            "{:<8} {:>10} {:>12} {:>12} {:>12} {:>10}",
            "algo",
            "bytes",
            "avg_us",
            "min_us",
            "max_us",
            "GB/s"
        );
    }
    for &bytes in &sizes {
        let halves = match &ranks {
            // A failure on one rank would leave the other waiting: it aborts the job.
            Ranks::Mpi(job) => ping(job.comm(), bytes, iters, warmup, args.mode)
                .unwrap_or_else(|e| job.fail(CliError::failed(anyhow::anyhow!("pingpong: {e}")))),
            _ => collect(ranks.run(|c| ping(c, bytes, iters, warmup, args.mode)))?,
        };
        if !leader {
            continue;
        }
        let algo = match &universe {
            None if mpi.is_some() => "mpi_isend",
            None => "memcpy",
            Some(u) => {
                let nodes = &u.placement().nodes;
                let kind = u.placement().memory;
                let t = Transfer::new(
                    Endpoint {
                        node: nodes[0],
                        memory: kind,
                    },
                    Endpoint {
                        node: nodes[1],
                        memory: kind,
                    },
                    bytes as u64,
                    sim.as_ref()
                        .map_or(Mechanism::Auto, |s| s.options.mechanism.mechanism()),
                );
                match u.fabric().resolve_mechanism(&t).map_err(CliError::bad)? {
                    Mechanism::Pio => "pio",
                    _ => "dma",
                }
            }
        };
        let avg = halves.iter().sum::<f64>() / halves.len() as f64;
        let bw = if avg > 0.0 {
            bytes as f64 / avg / 1e9
        } else {
            0.0
        };
        let row = Row {
            schema_version: 1,
            op: "pingpong",
            algo,
            backend: args.backend.name(),
            fabric: sim.as_ref().map(|s| s.name.clone()),
            memory: sim.as_ref().map_or("host", |s| s.memory),
            ranks: 2,
            bytes,
            avg_us: avg * 1e6,
            min_us: halves.iter().copied().fold(f64::INFINITY, f64::min) * 1e6,
            max_us: halves.iter().copied().fold(0.0, f64::max) * 1e6,
            bandwidth_gbs: bw,
            busbw_gbs: bw,
            modeled: sim.is_some(),
            verified: None,
        };
        print_row(&row, &args);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_row(r: &Row, args: &BenchPingpongArgs) {
    if !print_machine_row(r, args.json, args.csv) {
        out!(
            "{:<8} {:>10} {:>12.3} {:>12.3} {:>12.3} {:>10.3}",
            r.algo,
            r.bytes,
            r.avg_us,
            r.min_us,
            r.max_us,
            r.bandwidth_gbs
        );
    }
}

/// Rank 0's half round trips (rank 1 returns nothing).
fn collect(res: Result<Vec<Result<Vec<f64>, CommError>>, CommError>) -> Result<Vec<f64>, CliError> {
    let per_rank = res.map_err(|e| CliError::failed(anyhow::anyhow!("pingpong: {e}")))?;
    let mut halves = Vec::new();
    for r in per_rank {
        let mut h = r.map_err(|e| CliError::failed(anyhow::anyhow!("pingpong: {e}")))?;
        if !h.is_empty() {
            halves.append(&mut h);
        }
    }
    Ok(halves)
}

/// One rank of the ping-pong, on any backend: rank 0's half round trip per timed iteration
/// (rank 1 returns none; see the module docs for the two modes); time is the modeled clock
/// where the backend has one, else this process's host clock.
fn ping<C: Communicator + ?Sized>(
    c: &C,
    bytes: usize,
    iters: usize,
    warmup: usize,
    mode: Mode,
) -> Result<Vec<f64>, CommError> {
    const TAG: u64 = 1;
    let clock = BenchClock::new(c);
    let now = || clock.now();
    let (me, peer) = (c.rank(), 1 - c.rank());
    let mut buf = vec![me as u8; bytes];
    let mut halves = Vec::with_capacity(iters);
    match mode {
        Mode::Put => {
            // Every receive address posted up front (pre-registered buffers); the first
            // round trip is untimed so that the notifications have landed.
            let mut posted: Vec<_> = (0..warmup + iters + 1)
                .map(|_| c.irecv(peer, TAG))
                .collect::<Result<_, _>>()?;
            posted.reverse();
            for it in 0..=warmup + iters {
                let t = now();
                if me == 0 {
                    c.send(peer, TAG, &buf)?;
                    let req = posted.pop().ok_or_else(|| missing(me))?;
                    c.wait_recv(req, &mut buf)?;
                } else {
                    let req = posted.pop().ok_or_else(|| missing(me))?;
                    c.wait_recv(req, &mut buf)?;
                    c.send(peer, TAG, &buf)?;
                }
                if me == 0 && it > warmup {
                    halves.push((now() - t) / 2.0);
                }
            }
        }
        Mode::TwoSided => {
            for it in 0..warmup + iters {
                let mut one_way = [0.0; 2];
                for (k, sender) in [0usize, 1].into_iter().enumerate() {
                    c.barrier()?;
                    let t = now();
                    if me == sender {
                        c.send(peer, TAG, &buf)?;
                    } else {
                        c.recv(peer, TAG, &mut buf)?;
                        one_way[k] = now() - t;
                    }
                }
                // Rank 0 measured the second leg, rank 1 the first: combine on rank 0.
                let mut both = [0.0; 4];
                c.allgatherv_f64(&one_way, &[2, 2], &mut both)?;
                if me == 0 && it >= warmup {
                    halves.push((both[2] + both[1]) / 2.0);
                }
            }
        }
    }
    Ok(halves)
}

fn missing(rank: usize) -> CommError {
    CommError::InvalidArgument(format!("pingpong rank {rank}: no posted receive left"))
}
