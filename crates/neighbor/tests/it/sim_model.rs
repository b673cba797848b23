//! On the sim backend, on a fabric where the analytic model's assumptions hold (the Tofu
//! FX10 preset as a 3 x 3 x 3 torus: every neighbour one hop away on a link of its own, no
//! node injection or memory cap, no per-hop router cost, C DMA devices of 5 GB/s with 1 us per put), the modeled time of one
//! exchange with N = 6 neighbours equals D_naive / D_seg of `model::time`, for several
//! device counts and sizes.

use castack_collectives::fabric_sim::config::TopologyConfig;
use castack_collectives::fabric_sim::{Fabric, FabricConfig};
use castack_collectives::{Collectives, Communicator, SimMechanism, SimOptions, SimUniverse};
use castack_neighbor::grid::ProcessGrid;
use castack_neighbor::{model, Exchange, ExchangePattern, Mode, Strategy};

fn fabric(devices: usize) -> Fabric {
    let mut c = FabricConfig::preset("tofu-fx10").unwrap();
    c.injection_gbs = None;
    // The model has no per-hop cost (neighbours are one hop away; the preset charges 0.1 us
    // per router traversal).
    c.forward_us = 0.0;
    // The preset sets host memory to what 4 devices move together; with 5 devices it would
    // cap the node below C * B, which the model does not know.
    c.memory.host.read_gbs = 1000.0;
    c.memory.host.write_gbs = 1000.0;
    c.dma.devices = u32::try_from(devices).unwrap();
    match &mut c.topology {
        TopologyConfig::Torus { dims, .. } => *dims = vec![3, 3, 3],
        other => panic!("tofu-fx10 is not a torus: {other:?}"),
    }
    Fabric::new(c).unwrap()
}

/// Modeled seconds of one exchange of `values` f64 with each of the 6 torus neighbours.
fn simulated(devices: usize, strategy: Strategy, values: usize) -> f64 {
    let grid = ProcessGrid {
        procs: [3, 3, 3],
        periodic: [true; 3],
    };
    let options = SimOptions {
        mechanism: SimMechanism::Dma,
        ..SimOptions::default()
    };
    let u = SimUniverse::new(27, fabric(devices), options).unwrap();
    let times = u
        .run(|comm| {
            let r = comm.rank();
            let mut pat = ExchangePattern::new();
            for (k, q) in (0..3)
                .flat_map(|d| [grid.neighbor(r, d, false), grid.neighbor(r, d, true)])
                .flatten()
                .enumerate()
            {
                pat.sends
                    .push((q, (k * values..(k + 1) * values).collect()));
                pat.recvs
                    .push((q, (k * values..(k + 1) * values).collect()));
            }
            let len = 6 * values;
            let mut ex = Exchange::with_mode(comm, pat, len, len, strategy, Mode::Put).unwrap();
            let src = vec![r as f64; len];
            let mut dst = vec![0.0; len];
            comm.barrier().unwrap();
            let t0 = comm.model_clock().unwrap();
            ex.exchange(comm, &src, &mut dst).unwrap();
            (t0, comm.model_clock().unwrap())
        })
        .unwrap();
    // The slowest rank from its own entry (the barrier leaves the clocks a few hundred ns
    // apart, which is no part of the exchange).
    times.iter().map(|t| t.1 - t.0).fold(0.0, f64::max)
}

#[test]
fn sim_agrees_with_the_model_without_contention() {
    let (l, b) = (1e-6, 5e9);
    for devices in [2, 4, 5] {
        for values in [512, 32768] {
            let bytes = (8 * values) as f64;
            for strategy in [Strategy::Naive, Strategy::Segmented { devices }] {
                let sim = simulated(devices, strategy, values);
                let want = model::time(strategy, 6, devices, bytes, l, b);
                let rel = (sim - want).abs() / want;
                assert!(
                    rel < 1e-3,
                    "C={devices} m={bytes} {strategy:?}: sim {sim:e} s, model {want:e} s"
                );
            }
        }
    }
}
