//! Explicit 3-D diffusion (13-point stencil, ghost width 2, 5 fields), z-split across
//! thread ranks, overlapping the interior update with the halo exchange; prints the time
//! per step split into compute and exchange (measured on threads) and asserts that the
//! result equals a single-rank run bit for bit.
//!
//! Run with
//! `cargo run --release -p castack-neighbor --example stencil -- [ranks] [n] [steps] [strategy] [packing] [fabric]`
//! (defaults 4, 64 (an n^3 grid), 100, naive, batched; with a fabric preset name, e.g.
//! `tofu-fx10`, the run is on the sim backend and the split is modeled).

use castack_collectives::fabric_sim::Fabric;
use castack_collectives::{SimOptions, SimUniverse, ThreadUniverse};
use castack_neighbor::grid::Packing;
use castack_neighbor::stencil::{Diffusion, DiffusionResult};
use castack_neighbor::Strategy;

fn run(
    p: usize,
    d: Diffusion,
    fabric: Option<&str>,
) -> Result<Vec<DiffusionResult>, Box<dyn std::error::Error>> {
    let parts = match fabric {
        Some(name) => SimUniverse::new(p, Fabric::preset(name)?, SimOptions::default())?
            .run(|comm| d.run(comm))?,
        None => ThreadUniverse::new(p)?.run(|comm| d.run(comm))?,
    };
    Ok(parts.into_iter().collect::<Result<Vec<_>, _>>()?)
}

/// Global owned values (field, z, y, x) as bits.
fn assemble(d: &Diffusion, parts: &[DiffusionResult]) -> Vec<u64> {
    let [nx, ny, nz] = d.global;
    let plane = nx * ny;
    let mut out = vec![0u64; d.fields * nz * plane];
    for part in parts {
        let local = part.z.len() * plane;
        for f in 0..d.fields {
            let at = f * nz * plane + part.z.start * plane;
            for (o, v) in out[at..at + local]
                .iter_mut()
                .zip(&part.values[f * local..(f + 1) * local])
            {
                *o = v.to_bits();
            }
        }
    }
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: usize| -> Result<usize, Box<dyn std::error::Error>> {
        Ok(args
            .get(i)
            .map(|s| s.parse())
            .transpose()?
            .unwrap_or(default))
    };
    let (p, n, steps) = (num(0, 4)?, num(1, 64)?, num(2, 100)?);
    let strategy: Strategy = args.get(3).map_or(Ok(Strategy::Naive), |s| s.parse())?;
    let packing: Packing = args.get(4).map_or(Ok(Packing::Batched), |s| s.parse())?;
    let fabric = args.get(5).map(String::as_str);
    let d = Diffusion {
        global: [n, n, n],
        fields: 5,
        steps,
        overlap: true,
        strategy,
        packing,
        ..Diffusion::default()
    };
    let parts = run(p, d, fabric)?;
    // The slowest rank sets the pace.
    let slowest = parts
        .iter()
        .max_by(|a, b| (a.compute_s + a.exchange_s).total_cmp(&(b.compute_s + b.exchange_s)))
        .ok_or("no ranks")?;
    let per = |s: f64| s / steps.max(1) as f64 * 1e6;
    let face = 2 * n * n * 5 * 8;
    println!(
        "stencil: {n}^3 x 5 fields, {p} rank(s), {steps} steps, {strategy}, {packing}, overlap on; \
         face message {face} bytes"
    );
    let how = fabric.map_or("measured on threads".to_string(), |f| {
        format!("modeled on sim, {f}")
    });
    println!(
        "per step (slowest rank, {how}): compute {:.1} us, exchange {:.1} us",
        per(slowest.compute_s),
        per(slowest.exchange_s)
    );
    let single = run(1, d, None)?;
    assert!(
        assemble(&d, &parts) == assemble(&d, &single),
        "the {p}-rank result differs from the single-rank result"
    );
    println!("result equals the single-rank run bit for bit");
    Ok(())
}
