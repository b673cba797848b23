//! Pricing speed: a 4096-rank recursive-doubling allreduce on the 16 x 16 x 16 Tofu preset,
//! priced without data or threads, with link and device contention.
//!
//! The schedule is built here (fabric-sim knows no collectives types): in step s every rank
//! r puts its whole vector to r xor 2^s and waits for the partner's. Rank r sits on node r
//! (x fastest), so steps 0-3 run along x, 4-7 along y, 8-11 along z, with distances 1, 2, 4,
//! 8 hops: the 8-hop steps share links.
//!
//! Run with `cargo run --release -p castack-fabric-sim --example price_allreduce`.

use std::time::Instant;

use castack_fabric_sim::{
    Fabric, FabricError, Mechanism, MemoryKind, Placement, PricePut, PriceSchedule, PriceStep,
};

fn recursive_doubling(p: usize, bytes: u64) -> PriceSchedule {
    assert!(p.is_power_of_two());
    let steps = p.trailing_zeros() as usize;
    let ranks = (0..p)
        .map(|r| {
            (0..steps)
                .map(|s| {
                    let partner = r ^ (1 << s);
                    PriceStep {
                        puts: vec![PricePut { to: partner, bytes }],
                        waits_for: vec![partner],
                        ..Default::default()
                    }
                })
                .collect()
        })
        .collect();
    PriceSchedule { ranks }
}

fn main() -> Result<(), FabricError> {
    let fabric = Fabric::preset("tofu-fx10")?;
    let p = fabric.nodes();
    assert_eq!(p, 4096);
    let placement = Placement::one_per_node(p, MemoryKind::Host);
    let start = vec![0.0; p];
    println!("recursive-doubling allreduce, {p} ranks, tofu-fx10 16x16x16 torus");
    println!(
        "{:>10} {:>10} {:>14} {:>12} {:>16}",
        "bytes", "transfers", "modeled (us)", "price (ms)", "transfers/s"
    );
    for bytes in [8u64, 65_536, 1 << 20] {
        let sched = recursive_doubling(p, bytes);
        let n = sched.transfers();
        let mut best = f64::INFINITY;
        let mut first: Option<Vec<f64>> = None;
        for _ in 0..5 {
            let t0 = Instant::now();
            let fin = fabric.price_schedule(&sched, &placement, &start, Mechanism::Auto)?;
            best = best.min(t0.elapsed().as_secs_f64());
            match &first {
                None => first = Some(fin),
                Some(f) => assert_eq!(f, &fin, "pricing is deterministic"),
            }
        }
        let fin = first.expect("priced at least once");
        let end = fin.iter().cloned().fold(0.0, f64::max);
        assert!(end > 0.0 && fin.iter().all(|&t| t > 0.0));
        // Contention-free lower bound: 12 messages of 1 us each, plus the data at 5 GB/s.
        let bound = 12.0 * (1e-6 + bytes as f64 / 5e9);
        assert!(end >= bound * (1.0 - 1e-12), "{end} < {bound}");
        println!(
            "{:>10} {:>10} {:>14.2} {:>12.2} {:>16.0}",
            bytes,
            n,
            end * 1e6,
            best * 1e3,
            n as f64 / best
        );
    }
    Ok(())
}
