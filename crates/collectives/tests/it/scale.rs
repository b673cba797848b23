//! Universes of many thread ranks: channels exist only for the pairs that talk, and the
//! rank cap is a typed error.

use castack_collectives::fabric_sim::{Fabric, FabricConfig};
use castack_collectives::sim::{SimOptions, SimUniverse};
use castack_collectives::{
    Collectives, CommError, Communicator, PointToPoint, ThreadUniverse, MAX_THREAD_RANKS,
};
use castack_test_support::watchdog::watchdog;
use std::sync::Mutex;

/// One universe of the most ranks at a time (each is thousands of threads).
static BIG: Mutex<()> = Mutex::new(());

#[test]
fn a_token_ring_of_the_most_ranks_creates_only_its_channels() {
    let _one = BIG.lock().unwrap_or_else(|e| e.into_inner());
    let p = MAX_THREAD_RANKS;
    let out = watchdog("token ring", || {
        ThreadUniverse::new(p).unwrap().run(|c| {
            let (r, n) = (c.rank(), c.size());
            let mut token = [0u8; 8];
            if r == 0 {
                c.send(1, 7, &1u64.to_ne_bytes())?;
                c.recv(n - 1, 7, &mut token)?;
            } else {
                c.recv(r - 1, 7, &mut token)?;
                let hops = u64::from_ne_bytes(token) + 1;
                c.send((r + 1) % n, 7, &hops.to_ne_bytes())?;
            }
            // Rank 0 has the token back: every rank has received and sent, and only the
            // ring's pairs have talked.
            Ok::<_, CommError>((u64::from_ne_bytes(token), c.channels_created()))
        })
    })
    .unwrap();
    let (hops, channels) = out[0].clone().unwrap();
    assert_eq!(hops, p as u64, "the token passed every rank");
    assert_eq!(
        channels, p,
        "one channel per ring pair, none for the other pairs"
    );
    for (r, o) in out.iter().enumerate() {
        let (_, seen) = o.clone().unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert!(seen <= p, "rank {r} saw {seen} channels");
    }
}

#[test]
fn an_allreduce_on_the_most_ranks_talks_only_to_its_partners() {
    // Recursive doubling on a power of two: each rank talks with log2 p partners, each
    // ordered pair in one direction per step.
    let _one = BIG.lock().unwrap_or_else(|e| e.into_inner());
    let p = MAX_THREAD_RANKS;
    assert!(p.is_power_of_two());
    let steps = p.trailing_zeros() as usize;
    let out = watchdog("allreduce", || {
        ThreadUniverse::new(p).unwrap().run(|c| {
            let mut x = [c.rank() as f64, 1.0];
            c.allreduce_sum(&mut x)?;
            Ok::<_, CommError>((x, c.channels_created()))
        })
    })
    .unwrap();
    let sum = (p * (p - 1) / 2) as f64;
    for (r, o) in out.into_iter().enumerate() {
        let (x, seen) = o.unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert_eq!(x, [sum, p as f64], "rank {r}");
        // Every rank has received from all its partners when it returns, so at least its
        // own incoming pairs exist; never more than the algorithm's pairs.
        assert!(
            (steps..=p * steps).contains(&seen),
            "rank {r} saw {seen} channels (p x p = {})",
            p * p
        );
    }
}

#[test]
fn more_ranks_than_the_cap_is_a_typed_error() {
    let err = ThreadUniverse::new(MAX_THREAD_RANKS + 1).unwrap_err();
    assert_eq!(
        err,
        CommError::TooManyThreadRanks {
            ranks: MAX_THREAD_RANKS + 1,
            max: MAX_THREAD_RANKS
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&MAX_THREAD_RANKS.to_string()) && !msg.contains('\n'),
        "{msg}"
    );
    assert!(ThreadUniverse::new(MAX_THREAD_RANKS).is_ok());
}

#[test]
fn a_sim_universe_above_the_cap_prices_but_does_not_run() {
    // A fabric with room for more ranks than threads may run.
    let toml = include_str!("../../../../configs/fabrics/ito.toml").replace(
        "nodes = 4096",
        &format!("nodes = {}", MAX_THREAD_RANKS + 64),
    );
    let fabric = Fabric::new(FabricConfig::from_toml_str(&toml).unwrap()).unwrap();
    let u = SimUniverse::new(MAX_THREAD_RANKS + 1, fabric, SimOptions::default()).unwrap();
    let err = u.run(|c| c.rank()).unwrap_err();
    assert!(
        matches!(err, CommError::TooManyThreadRanks { ranks, .. } if ranks == MAX_THREAD_RANKS + 1),
        "{err}"
    );
}
