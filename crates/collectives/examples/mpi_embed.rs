//! How an MPI application embeds castack-collectives: it initializes MPI itself, keeps using
//! its world communicator for its own messages, and hands castack a communicator of its
//! choosing (the world, and a split of it into two halves) wrapped in `MpiComm`. Every result
//! is asserted; a wrong one aborts the job with a non-zero status.
//!
//! Run with `mpirun -np 4 target/debug/examples/mpi_embed` after
//! `cargo build -p castack-collectives --features mpi --example mpi_embed`
//! (`cargo xtask test-mpi` runs it at 1..4 ranks).

use castack_collectives::mpi::MpiComm;
use castack_collectives::{AllreduceAlgo, Collectives, Communicator, Op};
use mpi::collective::SystemOperation;
use mpi::point_to_point::{Destination, Source};
use mpi::topology::{Color, Communicator as _};
use mpi::traits::CommunicatorCollectives;

fn main() {
    // The application owns MPI: initialize once per process.
    let Some(universe) = mpi::initialize() else {
        eprintln!("mpi_embed: MPI was already initialized");
        std::process::exit(1);
    };
    let world = universe.world();
    let (rank, p) = (world.rank(), world.size());

    // castack over the whole world, next to the application's own traffic on `world`.
    let comm = MpiComm::new(&world);
    let mut dot = [f64::from(rank + 1)];
    // The application's own message, with a tag castack also uses internally: castack runs
    // on a duplicate of `world`, so the two never match each other.
    let next = (rank + 1) % p;
    let prev = (rank + p - 1) % p;
    let token = mpi::request::scope(|scope| {
        let send = world
            .process_at_rank(next)
            .immediate_send_with_tag(scope, &rank, 16384);
        comm.allreduce_f64_with(&mut dot, Op::Sum, AllreduceAlgo::default())
            .unwrap_or_else(|e| fail(&world, &format!("allreduce: {e}")));
        let (token, _) = world.process_at_rank(prev).receive_with_tag::<i32>(16384);
        send.wait();
        token
    });
    check(&world, token == prev, "the application's own ring message");
    check(
        &world,
        dot[0] == f64::from(p * (p + 1) / 2),
        "allreduce over the world",
    );

    // castack over a split: even and odd ranks, each half its own communicator.
    let half = world
        .split_by_color(Color::with_value(rank % 2))
        .unwrap_or_else(|| fail(&world, "split_by_color gave no communicator"));
    let sub = MpiComm::new(&half);
    let members: Vec<i32> = (0..p).filter(|r| r % 2 == rank % 2).collect();
    check(
        &world,
        sub.size() == members.len(),
        "the split's size is its half's",
    );
    let mut x = [f64::from(rank), 1.0];
    sub.allreduce_f64_with(&mut x, Op::Sum, AllreduceAlgo::RecursiveDoubling)
        .unwrap_or_else(|e| fail(&world, &format!("allreduce on the split: {e}")));
    let want = members.iter().map(|&r| f64::from(r)).sum::<f64>();
    check(
        &world,
        x == [want, members.len() as f64],
        "allreduce over the split",
    );

    // The MPI library's own allreduce through castack agrees with the application's.
    let mut native = [f64::from(rank) * 0.5];
    sub.native_allreduce_f64(&mut native, Op::Sum);
    let mut theirs = 0.0;
    half.all_reduce_into(
        &(f64::from(rank) * 0.5),
        &mut theirs,
        SystemOperation::sum(),
    );
    check(&world, native[0] == theirs, "native allreduce on the split");

    if rank == 0 {
        println!("mpi_embed: ok on {p} rank(s)");
    }
}

fn check(world: &impl mpi::topology::Communicator, ok: bool, what: &str) {
    if !ok {
        fail(world, what);
    }
}

fn fail(world: &impl mpi::topology::Communicator, what: &str) -> ! {
    eprintln!("mpi_embed: FAILED on rank {}: {what}", world.rank());
    world.abort(1)
}
