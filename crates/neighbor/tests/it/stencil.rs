//! The z-split 13-point diffusion demo: the multi-rank result equals the single-rank result
//! bit for bit after 100 steps, for 1, 2, 3 and 4 ranks (a small 6 x 5 x 12 grid, 5 fields),
//! with every strategy, and with and without overlap and for every packing.

use castack_collectives::ThreadUniverse;
use castack_neighbor::grid::Packing;
use castack_neighbor::stencil::Diffusion;
use castack_neighbor::{Mode, Strategy};

/// Run on `p` ranks and assemble the global owned values (field, z, y, x) as bits.
fn run(p: usize, d: Diffusion) -> Vec<u64> {
    let parts = ThreadUniverse::new(p)
        .unwrap()
        .run(|comm| d.run(comm).unwrap())
        .unwrap();
    let [nx, ny, nz] = d.global;
    let plane = nx * ny;
    let mut out = vec![0u64; d.fields * nz * plane];
    for part in &parts {
        let local = part.z.len() * plane;
        for f in 0..d.fields {
            let src = &part.values[f * local..(f + 1) * local];
            let at = f * nz * plane + part.z.start * plane;
            for (o, v) in out[at..at + local].iter_mut().zip(src) {
                *o = v.to_bits();
            }
        }
    }
    out
}

#[test]
fn multi_rank_equals_single_rank_bit_for_bit_after_100_steps() {
    let base = Diffusion {
        global: [6, 5, 12],
        fields: 5,
        steps: 100,
        ..Diffusion::default()
    };
    let single = run(1, base);
    // The field moved: the test would not pass on an unchanged initial state.
    let initial = run(1, Diffusion { steps: 0, ..base });
    assert_ne!(single, initial);
    for p in 1..=4 {
        for &strategy in &[Strategy::Naive, Strategy::Segmented { devices: 2 }] {
            let d = Diffusion { strategy, ..base };
            assert!(run(p, d) == single, "p={p} {strategy:?}");
        }
    }
    // Without overlap, with the put mode and with every packing: the same bits.
    for &packing in Packing::ALL {
        let d = Diffusion {
            packing,
            overlap: packing != Packing::Gather,
            mode: Mode::Put,
            ..base
        };
        assert!(run(3, d) == single, "{packing:?}");
    }
}

#[test]
fn a_slab_thinner_than_the_halo_is_an_error_on_every_rank() {
    let d = Diffusion {
        global: [4, 4, 5],
        steps: 1,
        ..Diffusion::default()
    };
    let errs = ThreadUniverse::new(3)
        .unwrap()
        .run(|comm| d.run(comm).map(|_| ()))
        .unwrap();
    assert!(errs.iter().all(|e| e.is_err()), "{errs:?}");
}

#[test]
fn on_sim_the_bits_are_the_same_and_the_split_is_modeled() {
    use castack_collectives::fabric_sim::Fabric;
    use castack_collectives::{SimOptions, SimUniverse};
    let d = Diffusion {
        global: [6, 5, 12],
        steps: 10,
        ..Diffusion::default()
    };
    let single = run(1, d);
    let u = SimUniverse::new(
        3,
        Fabric::preset("tofu-fx10").unwrap(),
        SimOptions::default(),
    )
    .unwrap();
    let parts: Vec<_> = u.run(|comm| d.run(comm).unwrap()).unwrap();
    let [nx, ny, nz] = d.global;
    let plane = nx * ny;
    let mut bits = vec![0u64; d.fields * nz * plane];
    for part in &parts {
        let local = part.z.len() * plane;
        for f in 0..d.fields {
            let at = f * nz * plane + part.z.start * plane;
            for (o, v) in bits[at..at + local]
                .iter_mut()
                .zip(&part.values[f * local..])
            {
                *o = v.to_bits();
            }
        }
        // Modeled: positive, and the clock covers both parts.
        let clock = part.modeled_s.unwrap();
        assert!(part.compute_s > 0.0 && part.exchange_s > 0.0);
        assert!(part.compute_s + part.exchange_s <= clock * (1.0 + 1e-12));
    }
    assert!(bits == single);
}
