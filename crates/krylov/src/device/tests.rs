//! `Cpu` through the `Device` trait against the direct kernels and independent loops; the
//! CUDA kernels' compilation (NVRTC, no GPU needed) and the no-driver error path.

use std::sync::Arc;

use castack_collectives::{AllreduceAlgo, ThreadUniverse};

use super::{CsrRef, Device, DeviceError, HostCsr};
use crate::basis::{Chebyshev, SStepBasis};
use crate::gen::{poisson3d, SplitMix64};
use crate::{Cpu, DistCsr, DistVec, Partition, SolverComm, SpmvMode};

fn random_vec(n: usize, seed: u64) -> Vec<f64> {
    let mut r = SplitMix64::new(seed);
    (0..n).map(|_| 2.0 * r.next_f64() - 1.0).collect()
}

fn pooled() -> Cpu {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .expect("a 3-thread pool");
    Cpu::with_pool(Arc::new(pool))
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every operation of `Cpu` as a `Device` gives the bits of the direct kernels (SpMV, dot)
/// or of plain sequential loops (elementwise updates), sequential and on a pool.
#[test]
fn cpu_device_matches_direct_kernels_bit_for_bit() {
    let a = HostCsr::from_csmat(&poisson3d(12).expect("poisson")).expect("32-bit columns");
    let irr = HostCsr::random_irregular(40_000, 35_000, 60, 7);
    for mut dev in [Cpu::sequential(), pooled()] {
        for (m, seed) in [(&a, 1u64), (&irr, 2)] {
            let (rows, ncols) = (m.indptr.len() - 1, m.ncols);
            let xh = random_vec(ncols, seed);
            let da = dev.upload_csr(m.as_csr_ref()).expect("valid CSR");
            let x = dev.upload(&xh).expect("upload");
            let mut y = dev.zeros(rows).expect("zeros");
            Device::spmv(&mut dev, &da, &x, &mut y).expect("spmv");
            let mut direct = vec![0.0; rows];
            dev.spmv_direct(m, &xh, &mut direct);
            assert_eq!(bits(&y), bits(&direct));
            // Independent reference: a plain row loop (CSR order) gives the same bits.
            let naive: Vec<f64> = m
                .indptr
                .windows(2)
                .map(|w| (w[0]..w[1]).fold(0.0, |s, k| s + m.vals[k] * xh[m.cols[k] as usize]))
                .collect();
            assert_eq!(bits(&y), bits(&naive));
        }
        let n = 3 * crate::cpu::CHUNK + 11;
        let (xh, yh, wh) = (random_vec(n, 3), random_vec(n, 4), random_vec(n, 5));
        let (x, w) = (dev.upload(&xh).unwrap(), dev.upload(&wh).unwrap());

        let mut y = dev.upload(&yh).unwrap();
        dev.axpy(0.37, &x, &mut y).unwrap();
        let want: Vec<f64> = yh.iter().zip(&xh).map(|(y, x)| y + 0.37 * x).collect();
        assert_eq!(bits(&y), bits(&want));

        let mut y = dev.upload(&yh).unwrap();
        dev.xpay(&x, -1.25, &mut y).unwrap();
        let want: Vec<f64> = yh.iter().zip(&xh).map(|(y, x)| x + -1.25 * y).collect();
        assert_eq!(bits(&y), bits(&want));

        let mut y = dev.upload(&yh).unwrap();
        let [s0, s1] = dev.axpy_dots(-0.5, &x, &mut y, &w).unwrap();
        let want: Vec<f64> = yh.iter().zip(&xh).map(|(y, x)| y - 0.5 * x).collect();
        assert_eq!(bits(&y), bits(&want));
        let rr: f64 = want.iter().map(|v| v * v).sum();
        let rw: f64 = want.iter().zip(&wh).map(|(v, w)| v * v * w).sum();
        assert!((s0 - rr).abs() <= 1e-12 * rr.abs());
        assert!((s1 - rw).abs() <= 1e-10 * rr.abs());

        let cols: Vec<Vec<f64>> = (0..5).map(|j| random_vec(n, 10 + j)).collect();
        let coef = [0.5, -2.0, 1e-3, 3.25, -0.75];
        let refs: Vec<&Vec<f64>> = cols.iter().collect();
        let mut y = dev.upload(&yh).unwrap();
        dev.lincomb(&coef, &refs, &mut y).unwrap();
        let want: Vec<f64> = (0..n)
            .map(|i| {
                coef.iter()
                    .zip(&cols)
                    .fold(yh[i], |acc, (c, v)| acc + c * v[i])
            })
            .collect();
        assert_eq!(bits(&y), bits(&want));

        // Fused reductions give the direct deterministic dot's bits, pair by pair.
        let mut out = [0.0; 3];
        let yv = dev.upload(&yh).unwrap();
        dev.dots(&[(&x, &yv), (&x, &x), (&w, &yv)], &mut out)
            .unwrap();
        let direct = [dev.dot(&xh, &yh), dev.dot(&xh, &xh), dev.dot(&wh, &yh)];
        assert_eq!(bits(&out), bits(&direct));
        let mut g = vec![0.0; 2 * 5];
        dev.gram(&[&x, &yv], &refs, &mut g).unwrap();
        for (i, xi) in [&xh, &yh].iter().enumerate() {
            for (j, c) in cols.iter().enumerate() {
                assert_eq!(g[i * 5 + j].to_bits(), dev.dot(xi, c).to_bits());
            }
        }
        let mut back = vec![0.0; n];
        dev.download(&y, &mut back).unwrap();
        assert_eq!(bits(&back), bits(&y));
    }
}

impl Cpu {
    fn spmv_direct(&self, m: &HostCsr, x: &[f64], y: &mut [f64]) {
        self.spmv(&m.indptr, &m.cols, &m.vals, x, y);
    }
}

/// `spmv` + `chebyshev_step` through the trait rebuild the Chebyshev basis that
/// `SStepBasis::build` computes on a one-rank `DistCsr`, bit for bit.
#[test]
fn chebyshev_steps_match_the_solver_basis() {
    let g = poisson3d(8).expect("poisson");
    let m = HostCsr::from_csmat(&g).expect("32-bit columns");
    let n = m.ncols;
    let (lmin, lmax, k) = (0.05, 11.5, 5);
    let cheb = Chebyshev::new(lmin, lmax).expect("interval");
    let s0 = random_vec(n, 9);
    let basis = ThreadUniverse::new(1)
        .expect("universe")
        .run(|comm| {
            let mut dist =
                DistCsr::from_global(comm, g.view(), &Partition::rows(n, 1), SpmvMode::Halo)
                    .expect("dist");
            let mut sc = SolverComm::new(comm, AllreduceAlgo::default()).expect("comm");
            let mut s: Vec<DistVec> = (0..=k).map(|_| dist.new_vec()).collect();
            let mut a_s: Vec<DistVec> = (0..k).map(|_| dist.new_vec()).collect();
            s[0].local_mut().copy_from_slice(&s0);
            SStepBasis::Chebyshev(cheb)
                .build(&mut dist, &mut sc, &Cpu::sequential(), k, &mut s, &mut a_s)
                .expect("basis");
            s.iter().map(|v| v.local().to_vec()).collect::<Vec<_>>()
        })
        .expect("run")
        .remove(0);
    let mut dev = Cpu::sequential();
    let (eta, zeta) = cheb.map();
    let da = dev.upload_csr(m.as_csr_ref()).unwrap();
    let mut s = vec![dev.upload(&s0).unwrap()];
    let mut asj = dev.zeros(n).unwrap();
    for j in 0..k {
        Device::spmv(&mut dev, &da, &s[j], &mut asj).unwrap();
        let mut out = dev.zeros(n).unwrap();
        let prev = j.checked_sub(1).map(|i| &s[i]);
        dev.chebyshev_step(eta, zeta, &asj, &s[j], prev, &mut out)
            .unwrap();
        s.push(out);
    }
    for (j, (got, want)) in s.iter().zip(&basis).enumerate() {
        assert_eq!(bits(got), bits(want), "basis column {j}");
    }
}

/// Operand lengths and CSR structure are checked before any kernel runs.
#[test]
fn bad_operands_are_errors_not_panics() {
    let mut dev = Cpu::sequential();
    let (x, mut y) = (dev.zeros(4).unwrap(), dev.zeros(5).unwrap());
    assert!(matches!(
        dev.axpy(1.0, &x, &mut y),
        Err(DeviceError::LengthMismatch {
            expected: 5,
            got: 4,
            ..
        })
    ));
    let mut out = [0.0; 1];
    assert!(matches!(
        dev.gram(&[&x], &[&y], &mut out),
        Err(DeviceError::LengthMismatch { .. })
    ));
    let bad_col = CsrRef {
        indptr: &[0, 1, 2],
        cols: &[0, 7],
        vals: &[1.0, 1.0],
        ncols: 3,
    };
    assert!(matches!(
        dev.upload_csr(bad_col),
        Err(DeviceError::InvalidCsr(_))
    ));
    let decreasing = CsrRef {
        indptr: &[0, 2, 1],
        cols: &[0, 1],
        vals: &[1.0, 1.0],
        ncols: 3,
    };
    assert!(matches!(
        dev.upload_csr(decreasing),
        Err(DeviceError::InvalidCsr(_))
    ));
    let a = dev
        .upload_csr(CsrRef {
            indptr: &[0, 1],
            cols: &[0],
            vals: &[2.0],
            ncols: 1,
        })
        .unwrap();
    assert!(matches!(
        Device::spmv(&mut dev, &a, &y, &mut x.clone()),
        Err(DeviceError::LengthMismatch { .. })
    ));
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::super::cuda::{
        compile_ptx, driver_present, nvrtc_present, CudaDevice, KERNELS_PTX, KERNEL_NAMES,
    };
    use super::DeviceError;

    /// Every kernel compiles to PTX for compute_90. Without NVRTC the test says so loudly,
    /// and fails when `CASTACK_REQUIRE_NVRTC=1` (CI sets it after installing NVRTC).
    #[test]
    fn kernels_compile_to_ptx_for_compute_90() {
        if !nvrtc_present() {
            let required = std::env::var("CASTACK_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
            eprintln!(
                "\n!!! NVRTC (libnvrtc.so.13) NOT FOUND: the CUDA kernels were NOT compile-checked.\n\
                 !!! pip install nvidia-cuda-nvrtc==13.0.88 and put its nvidia/cu13/lib on LD_LIBRARY_PATH.\n"
            );
            assert!(
                !required,
                "CASTACK_REQUIRE_NVRTC=1 but NVRTC is not loadable"
            );
            return;
        }
        let ptx = match compile_ptx() {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        assert!(ptx.contains(".target sm_90"), "PTX is not for sm_90");
        for name in KERNEL_NAMES {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "kernel {name} missing from the PTX"
            );
        }
        // Compiled without FMA contraction (the bit-compatibility with the CPU relies on it).
        assert!(
            !ptx.contains("fma.rn.f64"),
            "PTX contains fused multiply-adds"
        );
        // The embedded PTX is what NVRTC makes of the current source.
        if ptx != KERNELS_PTX {
            if std::env::var("CASTACK_WRITE_PTX").is_ok_and(|v| v == "1") {
                let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/device/kernels.ptx");
                std::fs::write(path, &ptx).expect("write kernels.ptx");
                eprintln!("rewrote {path}; rebuild to embed it");
            } else {
                panic!(
                    "src/device/kernels.ptx is stale (or from another NVRTC than 13.0.88): \
                     rerun this test with CASTACK_WRITE_PTX=1"
                );
            }
        }
    }

    /// Without a driver, opening a device is an error value, not a panic; with one, any
    /// failure is an error value too.
    #[test]
    fn no_driver_is_an_error_not_a_panic() {
        match CudaDevice::new(0) {
            Err(DeviceError::NoDriver) => assert!(!driver_present()),
            Err(e) => assert!(driver_present(), "unexpected error without a driver: {e}"),
            Ok(dev) => assert!(driver_present() && !dev.gpu_name().is_empty()),
        }
        assert!(matches!(
            CudaDevice::new(usize::MAX),
            Err(DeviceError::NoDriver | DeviceError::NoDevice { .. })
        ));
    }
}

/// The SELL-C-sigma layout, run with the GPU kernel's loop on the host, gives the CPU
/// kernel's bits; padding, sorting windows and the permutation are consistent.
#[test]
fn sell_layout_gives_the_cpu_bits() {
    use super::sell::Sell;
    let a = HostCsr::from_csmat(&poisson3d(9).expect("poisson")).expect("32-bit columns");
    let irr = HostCsr::random_irregular(5_000, 4_000, 80, 11);
    let cpu = Cpu::sequential();
    for m in [&a, &irr] {
        let rows = m.indptr.len() - 1;
        let x = random_vec(m.ncols, 5);
        let mut want = vec![0.0; rows];
        cpu.spmv(&m.indptr, &m.cols, &m.vals, &x, &mut want);
        for (c, sigma) in [(32, 1), (32, 256), (7, 7), (1, 1)] {
            let s = Sell::from_csr(m.as_csr_ref(), c, sigma).expect("layout");
            let mut seen = vec![false; rows];
            s.perm.iter().for_each(|&r| seen[r as usize] = true);
            assert!(seen.iter().all(|&b| b), "perm is a permutation");
            assert!(s.fill() >= 1.0);
            let mut got = vec![f64::NAN; rows];
            s.spmv_host(&x, &mut got);
            assert_eq!(bits(&got), bits(&want), "C = {c}, sigma = {sigma}");
            if sigma > 1 {
                for w in s.perm.chunks(sigma) {
                    let lens: Vec<usize> = w
                        .iter()
                        .map(|&r| m.indptr[r as usize + 1] - m.indptr[r as usize])
                        .collect();
                    assert!(lens.windows(2).all(|p| p[0] >= p[1]), "sorted window");
                }
            }
        }
        // Sorting the irregular block cuts the padding.
        if std::ptr::eq(m, &irr) {
            let unsorted = Sell::from_csr(m.as_csr_ref(), 32, 1).unwrap().fill();
            let sorted = Sell::from_csr(m.as_csr_ref(), 32, 256).unwrap().fill();
            assert!(sorted < unsorted, "{sorted} vs {unsorted}");
        }
    }
    assert!(Sell::from_csr(a.as_csr_ref(), 32, 48).is_err());
    assert!(Sell::from_csr(a.as_csr_ref(), 0, 1).is_err());
}
