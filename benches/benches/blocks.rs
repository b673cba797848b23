//! The CPU device's block kernels of the s-step and block methods: Gram blocks and block
//! linear combinations, at the shapes the solvers call (cbcg/cbcgr with k = 4, cacg with
//! s = 4), on vectors of 3-D Poisson 64^3's length (262,144 values, 2 MiB each: beyond L2).
//!
//! Groups (criterion reports GiB/s from `Throughput::Bytes`, the bytes of the device work
//! formulas [`castack_krylov::work::gram`] and [`castack_krylov::work::lincomb_block`]: each
//! vector read once, each destination read and written once):
//! - `gram/<nx>x<ny>_<shape>`: `4x4_upper` (`Q^T A Q`, one list), `4x1_full` (`Q^T r`),
//!   `4x4_full` (`(AQ)^T S`), `9x9_upper` (cacg's `Y^T Y`, one list);
//! - `lincomb_block/<sources>to<destinations>`: `4to4` (cbcg's new directions), `9to3`
//!   (cacg's `x, r, p` update).
//!
//! Next to `triad` (`cargo bench -p benches --bench spmv`), a GiB/s near the triad's says
//! the kernel reads each vector about once; the plain per-pair loops these kernels replaced
//! ran at 1.4-2.3x the formulas' time (`crates/linalg/src/device/cpu_block.rs`).
//!
//! Run: `cargo bench -p benches --bench blocks` (about half a minute after the build).

use std::hint::black_box;

use castack_krylov::work;
use castack_krylov::{Cpu, Device, GramShape, Refs, RefsMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// Values per vector: 3-D Poisson 64^3's rows.
const N: usize = 64 * 64 * 64;

/// `count` device vectors of `N` deterministic values.
fn vectors(dev: &mut Cpu, count: usize, seed: usize) -> Vec<Vec<f64>> {
    (0..count)
        .map(|v| {
            let host: Vec<f64> = (0..N)
                .map(|i| ((i * 31 + (v + seed) * 7) % 101) as f64 / 101.0 - 0.5)
                .collect();
            dev.upload(&host).expect("cannot upload a bench vector")
        })
        .collect()
}

fn gram(c: &mut Criterion) {
    let mut dev = Cpu::sequential();
    let xs = vectors(&mut dev, 9, 0);
    let ys = vectors(&mut dev, 4, 100);
    let mut out = vec![0.0; 64];
    let mut group = c.benchmark_group("gram");
    for (nx, ny, shape, one_list) in [
        (4, 4, GramShape::Upper, true),
        (4, 1, GramShape::Full, false),
        (4, 4, GramShape::Full, false),
        (9, 9, GramShape::Upper, true),
    ] {
        let x: Vec<&Vec<f64>> = xs[..nx].iter().collect();
        let y: Vec<&Vec<f64>> = if one_list {
            x.clone()
        } else {
            ys[..ny].iter().collect()
        };
        let bytes = work::gram(N, nx, ny, shape, false, one_list).bytes;
        group.throughput(Throughput::Bytes(bytes));
        let name = format!("{nx}x{ny}_{}", if one_list { "upper" } else { "full" });
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                dev.gram(N, &Refs(&x), &Refs(&y), shape, None, &mut out, 0)
                    .expect("gram failed");
                black_box(out[0])
            })
        });
    }
    group.finish();
}

fn lincomb_block(c: &mut Criterion) {
    let mut dev = Cpu::sequential();
    let srcs = vectors(&mut dev, 9, 0);
    let mut dsts = vectors(&mut dev, 4, 100);
    let mut group = c.benchmark_group("lincomb_block");
    for (ns, nd) in [(4, 4), (9, 3)] {
        // Small coefficients of both signs: the destinations stay bounded over the run.
        let coef: Vec<f64> = (0..ns * nd)
            .map(|t| 1e-3 * (t as f64 - (ns * nd) as f64 / 2.0))
            .collect();
        let s: Vec<&Vec<f64>> = srcs[..ns].iter().collect();
        group.throughput(Throughput::Bytes(
            work::lincomb_block(N, ns, nd, ns * nd).bytes,
        ));
        group.bench_function(BenchmarkId::from_parameter(format!("{ns}to{nd}")), |b| {
            b.iter(|| {
                let mut d: Vec<&mut Vec<f64>> = dsts[..nd].iter_mut().collect();
                dev.lincomb_block(N, &coef, &Refs(&s), &mut RefsMut(&mut d))
                    .expect("lincomb_block failed");
                black_box(dsts[0][0])
            })
        });
    }
    group.finish();
}

criterion_group!(benches, gram, lincomb_block);
criterion_main!(benches);
