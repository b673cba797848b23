//! [`Cpu`] as a [`Device`]: host vectors, delegating every operation to the existing
//! kernels of [`crate::cpu`] (the same bits as calling them directly; the fused updates use
//! the same closures as the solvers in `cg/`). Costs are those of the kernels: O(nnz) for
//! SpMV, O(n) per vector for the rest.

use super::{check_len, checks, CsrRef, Device, DeviceError, HostCsr};
use crate::Cpu;

impl Device for Cpu {
    type Vector = Vec<f64>;
    type Matrix = HostCsr;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn vec_len(v: &Vec<f64>) -> usize {
        v.len()
    }

    fn shape(a: &HostCsr) -> (usize, usize) {
        (a.indptr.len() - 1, a.ncols)
    }

    fn zeros(&mut self, n: usize) -> Result<Vec<f64>, DeviceError> {
        self.reserve(n);
        Ok(vec![0.0; n])
    }

    fn upload(&mut self, host: &[f64]) -> Result<Vec<f64>, DeviceError> {
        self.reserve(host.len());
        Ok(host.to_vec())
    }

    fn write(&mut self, host: &[f64], dst: &mut Vec<f64>) -> Result<(), DeviceError> {
        check_len("write", dst.len(), host.len())?;
        dst.copy_from_slice(host);
        Ok(())
    }

    fn download(&mut self, src: &Vec<f64>, host: &mut [f64]) -> Result<(), DeviceError> {
        check_len("download", src.len(), host.len())?;
        host.copy_from_slice(src);
        Ok(())
    }

    fn copy(&mut self, src: &Vec<f64>, dst: &mut Vec<f64>) -> Result<(), DeviceError> {
        check_len("copy", dst.len(), src.len())?;
        dst.copy_from_slice(src);
        Ok(())
    }

    fn upload_csr(&mut self, a: CsrRef<'_>) -> Result<HostCsr, DeviceError> {
        a.validate()?;
        Ok(HostCsr {
            indptr: a.indptr.to_vec(),
            cols: a.cols.to_vec(),
            vals: a.vals.to_vec(),
            ncols: a.ncols,
        })
    }

    fn spmv(&mut self, a: &HostCsr, x: &Vec<f64>, y: &mut Vec<f64>) -> Result<(), DeviceError> {
        checks::spmv(Self::shape(a), x.len(), y.len())?;
        Cpu::spmv(self, &a.indptr, &a.cols, &a.vals, x, y);
        Ok(())
    }

    fn axpy(&mut self, alpha: f64, x: &Vec<f64>, y: &mut Vec<f64>) -> Result<(), DeviceError> {
        check_len("axpy", y.len(), x.len())?;
        self.zip2(y, x, |y, x| {
            for (yi, xi) in y.iter_mut().zip(x) {
                *yi += alpha * xi;
            }
        });
        Ok(())
    }

    fn xpay(&mut self, x: &Vec<f64>, beta: f64, y: &mut Vec<f64>) -> Result<(), DeviceError> {
        check_len("xpay", y.len(), x.len())?;
        self.zip2(y, x, |y, x| {
            for (yi, xi) in y.iter_mut().zip(x) {
                *yi = xi + beta * *yi;
            }
        });
        Ok(())
    }

    fn axpy_dots(
        &mut self,
        alpha: f64,
        x: &Vec<f64>,
        y: &mut Vec<f64>,
        w: &Vec<f64>,
    ) -> Result<[f64; 2], DeviceError> {
        check_len("axpy_dots", y.len(), x.len())?;
        check_len("axpy_dots (weights)", y.len(), w.len())?;
        let (s0, s1) = self.zip3_sum2(y, x, w, |y, x, w| {
            let mut s = (0.0, 0.0);
            for ((yi, xi), wi) in y.iter_mut().zip(x).zip(w) {
                *yi += alpha * xi;
                s.0 += *yi * *yi;
                s.1 += *yi * *yi * wi;
            }
            s
        });
        Ok([s0, s1])
    }

    fn lincomb(
        &mut self,
        coef: &[f64],
        cols: &[&Vec<f64>],
        y: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        let lens: Vec<usize> = cols.iter().map(|c| c.len()).collect();
        checks::lincomb(coef.len(), &lens, y.len())?;
        for (&c, col) in coef.iter().zip(cols) {
            self.zip2(y, col, |y, v| {
                for (yi, vi) in y.iter_mut().zip(v) {
                    *yi += c * vi;
                }
            });
        }
        Ok(())
    }

    fn dots(
        &mut self,
        pairs: &[(&Vec<f64>, &Vec<f64>)],
        out: &mut [f64],
    ) -> Result<(), DeviceError> {
        let lens: Vec<(usize, usize)> = pairs.iter().map(|(a, b)| (a.len(), b.len())).collect();
        checks::dots(&lens, out.len())?;
        for (o, (a, b)) in out.iter_mut().zip(pairs) {
            *o = self.dot(a, b);
        }
        Ok(())
    }

    fn gram(
        &mut self,
        x: &[&Vec<f64>],
        y: &[&Vec<f64>],
        out: &mut [f64],
    ) -> Result<(), DeviceError> {
        let lx: Vec<usize> = x.iter().map(|v| v.len()).collect();
        let ly: Vec<usize> = y.iter().map(|v| v.len()).collect();
        checks::gram(&lx, &ly, out.len())?;
        for (i, xi) in x.iter().enumerate() {
            for (j, yj) in y.iter().enumerate() {
                out[i * y.len() + j] = self.dot(xi, yj);
            }
        }
        Ok(())
    }

    fn chebyshev_step(
        &mut self,
        eta: f64,
        zeta: f64,
        a_sj: &Vec<f64>,
        sj: &Vec<f64>,
        prev: Option<&Vec<f64>>,
        out: &mut Vec<f64>,
    ) -> Result<(), DeviceError> {
        checks::chebyshev(a_sj.len(), sj.len(), prev.map(|p| p.len()), out.len())?;
        match prev {
            None => {
                for ((o, a), s) in out.iter_mut().zip(a_sj).zip(sj) {
                    *o = eta * a - zeta * s;
                }
            }
            Some(p) => {
                for (((o, a), s), pm) in out.iter_mut().zip(a_sj).zip(sj).zip(p) {
                    *o = 2.0 * (eta * a - zeta * s) - pm;
                }
            }
        }
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }
}
