//! Rank-to-node mappings on the modeled fabric: the bit-reversal mapping puts recursive
//! doubling's large late allgather steps on neighbouring torus nodes, which the model must
//! price faster than the identity mapping at large sizes; an allreduce, whose steps are all
//! the same size, gains nothing.

use castack_collectives::fabric_sim::Fabric;
use castack_collectives::sim::{SimOptions, SimUniverse};
use castack_collectives::{
    AllgathervAlgo, AllreduceAlgo, Datatype, Mapping, Op, Reduction, Schedule,
};

fn slowest(fabric: &str, p: usize, mapping: Mapping, sched: &Schedule) -> f64 {
    let fabric = Fabric::preset(fabric).unwrap();
    let options = SimOptions {
        nodes: Some(mapping.nodes_on(p, &fabric).unwrap()),
        ..SimOptions::default()
    };
    let u = SimUniverse::new(p, fabric, options).unwrap();
    u.price(sched).unwrap().into_iter().fold(0.0, f64::max)
}

fn allgather(p: usize, block: usize) -> Schedule {
    AllgathervAlgo::RecursiveDoubling.schedule(&vec![block; p])
}

fn allreduce(p: usize, bytes: usize) -> Schedule {
    let sum = Reduction {
        op: Op::Sum,
        datatype: Datatype::F64,
    };
    AllreduceAlgo::RecursiveDoubling.schedule(p, bytes, sum)
}

#[test]
fn bit_reversal_speeds_up_recursive_doubling_allgather_on_tori_at_large_sizes() {
    for (fabric, p) in [("tofu-fx10", 64), ("peach2", 16)] {
        for block in [64 << 10, 1 << 20] {
            let s = allgather(p, block);
            let id = slowest(fabric, p, Mapping::Identity, &s);
            let br = slowest(fabric, p, Mapping::BitReversal, &s);
            assert!(
                br < id,
                "{fabric} p={p} block={block}: identity {id} bit_reversal {br}"
            );
        }
    }
}

/// Recursive-doubling allreduce moves the whole vector at every step, so a mapping only
/// permutes which step meets which distance: the model gives it no gain (within 0.1%).
#[test]
fn bit_reversal_does_not_change_recursive_doubling_allreduce() {
    for (fabric, p) in [("tofu-fx10", 64), ("peach2", 16)] {
        for bytes in [8, 1 << 20] {
            let s = allreduce(p, bytes);
            let id = slowest(fabric, p, Mapping::Identity, &s);
            let br = slowest(fabric, p, Mapping::BitReversal, &s);
            assert!(
                (br - id).abs() <= 1e-3 * id,
                "{fabric} p={p} {bytes} B: identity {id} bit_reversal {br}"
            );
        }
    }
}
