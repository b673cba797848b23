//! [`Ops`]: the operation layer a solver sees — the counted communicator ([`SolverComm`]),
//! one rank's [`Device`] and the work meter together.
//!
//! Solvers are written once against it and never name a device, a clock or a counter:
//!
//! - every vector operation is a named [`Device`] operation on [`DistVec`]s (the owned
//!   values: the first `n` of each vector, `n` fixed at [`Ops::new`]), which `Ops` meters
//!   (its [`crate::device::work`] formula, drained into a modeled clock by
//!   [`SolverComm::now`]) and times, charging the time to its bucket: by the host clock
//!   around the call where the device is synchronous (the CPU), by device events read at
//!   the next synchronisation point where it is not (a GPU; [`Device::event_timed`]);
//! - local reduction results are written into the reduction slots, a device vector; a
//!   reduction ([`Ops::reduce`], [`Ops::begin`] / [`Ops::finish`]) copies its slots to the
//!   host in ONE copy and sums them over the ranks in ONE counted global reduction;
//! - SpMV input exchanges go through [`crate::DistCsr::spmv`] and the matrix powers
//!   kernel, which stage the ghost values through [`Ops::stage_out`] / [`Ops::stage_in`]
//!   (host-device copies on a GPU, counted as `transfer`).
//!
//! Nothing here allocates after [`Ops::prepare`] and [`Ops::reserve`], which the solvers
//! call before their loops.

use castack_collectives::{AllreduceAlgo, Communicator, ComputeWork};

use crate::count::{Bucket, Counters, Pending, Phase, SolverComm, TimeBreakdown};
use crate::device::{
    work, BasisStep, CcgVecs, Device, GramShape, PipecgVecs, Refs, VecList, VecListMut,
};
use crate::dist::DistVec;
use crate::LinalgError;

/// The operation layer: counted communication, device operations, metering and timing.
/// See the module documentation.
pub struct Ops<'c, C: Communicator + ?Sized, D: Device> {
    sc: SolverComm<'c, C>,
    dev: D,
    /// Owned values per vector.
    n: usize,
    /// Local results of the next reduction.
    slots: D::Vector,
    /// Host copy of the slots for a split-phase reduction.
    host: Vec<f64>,
    /// Device time of the operations timed by events, read so far.
    event_times: TimeBreakdown,
}

impl<'c, C: Communicator + ?Sized, D: Device> Ops<'c, C, D> {
    /// The layer over `comm` for vectors of `n` owned values on `dev`; reductions use
    /// `algo`, which must give bit-identical results on every rank (solvers branch on
    /// them).
    pub fn new(
        comm: &'c C,
        algo: AllreduceAlgo,
        mut dev: D,
        n: usize,
    ) -> Result<Self, LinalgError> {
        let sc = SolverComm::new(comm, algo)?;
        let slots = dev.zeros(8)?;
        Ok(Self {
            sc,
            dev,
            n,
            slots,
            host: vec![0.0; 8],
            event_times: TimeBreakdown::default(),
        })
    }

    /// The counted communicator.
    pub fn sc(&self) -> &SolverComm<'c, C> {
        &self.sc
    }

    /// The counted communicator, mutably (halo exchanges, host-side reductions).
    pub fn sc_mut(&mut self) -> &mut SolverComm<'c, C> {
        &mut self.sc
    }

    /// The device.
    pub fn dev(&self) -> &D {
        &self.dev
    }

    /// The device, mutably (set-up work outside the counted operations).
    pub fn dev_mut(&mut self) -> &mut D {
        &mut self.dev
    }

    /// Owned values per vector.
    pub fn n(&self) -> usize {
        self.n
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.sc.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.sc.size()
    }

    /// The clock of the solve ([`SolverComm::now`]).
    pub fn now(&self) -> f64 {
        self.sc.now()
    }

    /// Switch between setup and loop counting.
    pub fn set_phase(&mut self, phase: Phase) {
        self.sc.set_phase(phase);
    }

    /// The counters so far.
    pub fn counters(&self) -> Counters {
        self.sc.counters()
    }

    /// The time breakdown so far, device-event times included (`other` left for the
    /// caller). Reads the events completed by the last synchronisation point.
    pub fn times(&mut self) -> Result<TimeBreakdown, LinalgError> {
        self.collect_events()?;
        Ok(self.sc.times().plus(&self.event_times))
    }

    /// Reset the time breakdown (after setup).
    pub fn reset_times(&mut self) -> Result<(), LinalgError> {
        self.collect_events()?;
        self.sc.reset_times();
        self.event_times = TimeBreakdown::default();
        Ok(())
    }

    fn collect_events(&mut self) -> Result<(), LinalgError> {
        let t = self.dev.take_event_times()?;
        self.event_times = self.event_times.plus(&t);
        Ok(())
    }

    /// Whether times are modeled (the communicator has a modeled clock).
    pub fn modeled(&self) -> bool {
        self.sc.modeled()
    }

    /// Build the persistent plan and the slots for blocking reductions of `len` values
    /// (before a loop, so the loop does not allocate).
    pub fn prepare(&mut self, len: usize) -> Result<(), LinalgError> {
        self.sc.prepare(len);
        self.grow_slots(len)
    }

    /// Build the plan, buffer and slots for split-phase reductions of `len` values.
    pub fn prepare_split(&mut self, len: usize) -> Result<(), LinalgError> {
        self.sc.prepare_split(len);
        self.grow_slots(len)
    }

    /// [`Ops::prepare_split`] for up to `lanes` split-phase reductions of `len` values in
    /// flight at once (`SolverComm::prepare_split_lanes`).
    pub fn prepare_split_lanes(&mut self, len: usize, lanes: usize) -> Result<(), LinalgError> {
        self.sc.prepare_split_lanes(len, lanes);
        self.grow_slots(len)
    }

    fn grow_slots(&mut self, len: usize) -> Result<(), LinalgError> {
        if D::len(&self.slots) < len {
            self.slots = self.dev.zeros(len)?;
        }
        if self.host.len() < len {
            self.host.resize(len, 0.0);
        }
        Ok(())
    }

    /// Size the device's workspaces for reductions of up to `results` values and
    /// multi-vector operations over up to `lists` vectors (before a loop).
    pub fn reserve(&mut self, results: usize, lists: usize) -> Result<(), LinalgError> {
        self.grow_slots(results)?;
        self.dev.reserve(self.n, results, lists)?;
        Ok(())
    }

    /// Count `bytes` more of data this rank's kernels keep working on: the working set
    /// that decides which cache level a modeled device streams from
    /// ([`crate::device::work::WorkMeter::hold`]). Vectors from [`Ops::new_vec`] count
    /// themselves.
    pub fn hold(&self, bytes: u64) {
        self.sc.meter().hold(bytes);
    }

    /// The working set counted so far ([`Ops::hold`]).
    pub fn held(&self) -> u64 {
        self.sc.meter().working_set()
    }

    /// Set the working set back to `bytes` (a reading of [`Ops::held`]): vectors that
    /// lived only for a set-up step leave it.
    pub fn set_held(&self, bytes: u64) {
        self.sc.meter().set_working_set(bytes);
    }

    /// A zero vector of `n_local` owned values and `n_ext - n_local` ghost slots.
    pub fn new_vec(&mut self, n_local: usize, n_ext: usize) -> Result<DistVec<D>, LinalgError> {
        self.hold(8 * n_ext.max(n_local) as u64);
        Ok(DistVec::from_raw(
            self.dev.zeros(n_ext.max(n_local))?,
            n_local,
        ))
    }

    /// Run the device operation `f` (which may write the reduction slots), metered with
    /// `w` and timed into `bucket`.
    pub fn run<R>(
        &mut self,
        bucket: Bucket,
        w: ComputeWork,
        f: impl FnOnce(&mut D, &mut D::Vector) -> Result<R, crate::DeviceError>,
    ) -> Result<R, LinalgError> {
        let bucket = self.sc.bucket(bucket);
        if self.dev.event_timed() {
            self.sc.meter().add(w);
            self.dev.event_begin(bucket)?;
            let r = f(&mut self.dev, &mut self.slots);
            self.dev.event_end()?;
            Ok(r?)
        } else {
            let t = self.sc.now();
            self.sc.meter().add(w);
            let r = f(&mut self.dev, &mut self.slots);
            self.sc.charge_since(bucket, t);
            Ok(r?)
        }
    }

    /// Run the device operation `f` on the `n` owned values (`f(device, n, slots)`),
    /// metered with `work(n)` and timed into `blas`: every vector operation below.
    fn blas(
        &mut self,
        work: impl FnOnce(usize) -> ComputeWork,
        f: impl FnOnce(&mut D, usize, &mut D::Vector) -> Result<(), crate::DeviceError>,
    ) -> Result<(), LinalgError> {
        let n = self.n;
        self.run(Bucket::Blas, work(n), |d, s| f(d, n, s))
    }

    /// The bucket and work of a copy of `m` values between device vectors and host
    /// buffers: a `transfer` where vectors live in device memory, else a memory copy
    /// charged to `host_bucket`.
    fn copy_cost(&self, m: usize, host_bucket: Bucket) -> (Bucket, ComputeWork) {
        if self.dev.host_memory() {
            (host_bucket, work::copy(m))
        } else {
            (Bucket::Transfer, work::transfer(m))
        }
    }

    /// `host = src[at..at + host.len()]`: a device-to-host copy for communication (halo
    /// staging), charged to `transfer` on a device, to `host_bucket` on the CPU.
    pub fn stage_out(
        &mut self,
        src: &D::Vector,
        at: usize,
        host: &mut [f64],
        host_bucket: Bucket,
    ) -> Result<(), LinalgError> {
        if host.is_empty() {
            return Ok(());
        }
        let (bucket, w) = self.copy_cost(host.len(), host_bucket);
        self.run(bucket, w, |d, _| d.read(src, at, host))
    }

    /// `dst[at..at + host.len()] = host`: a host-to-device copy after communication,
    /// charged like [`Ops::stage_out`].
    pub fn stage_in(
        &mut self,
        host: &[f64],
        dst: &mut D::Vector,
        at: usize,
        host_bucket: Bucket,
    ) -> Result<(), LinalgError> {
        if host.is_empty() {
            return Ok(());
        }
        let (bucket, w) = self.copy_cost(host.len(), host_bucket);
        self.run(bucket, w, |d, _| d.write(host, dst, at))
    }

    // ----- reductions ------------------------------------------------------------------

    /// Set the reduction slot `at` to a host value.
    pub fn set_slot(&mut self, at: usize, value: f64) -> Result<(), LinalgError> {
        self.run(Bucket::Blas, ComputeWork::default(), |d, s| {
            d.fill(1, value, s, at)
        })
    }

    /// The bucket and work of copying `m` reduction results to the host: a `transfer` on a
    /// device; on the CPU the slots are host memory already (nothing metered).
    fn result_cost(&self, m: usize) -> (Bucket, ComputeWork) {
        if self.dev.host_memory() {
            (Bucket::Allreduce, ComputeWork::default())
        } else {
            (Bucket::Transfer, work::transfer(m))
        }
    }

    /// Sum the local results in slots `0..out.len()` over all ranks into `out`: ONE copy to
    /// the host, ONE counted global reduction.
    pub fn reduce(&mut self, out: &mut [f64]) -> Result<(), LinalgError> {
        if !out.is_empty() {
            let (bucket, w) = self.result_cost(out.len());
            self.run(bucket, w, |d, s| d.read(s, 0, out))?;
        }
        self.sc.allreduce_sum(out)
    }

    /// Start summing the local results in slots `0..len` over all ranks: one copy to the
    /// host, then ONE counted split-phase reduction ([`SolverComm::begin`]); finish it with
    /// [`Ops::finish`].
    pub fn begin(&mut self, len: usize) -> Result<Pending, LinalgError> {
        self.grow_slots(len)?;
        let mut host = std::mem::take(&mut self.host);
        let copied = if len > 0 {
            let (bucket, w) = self.result_cost(len);
            self.run(bucket, w, |d, s| d.read(s, 0, &mut host[..len]))
        } else {
            Ok(())
        };
        let begun = copied.and_then(|()| self.sc.begin(&host[..len]));
        self.host = host;
        begun
    }

    /// Wait for the reduction begun by [`Ops::begin`] and write the sums to `out`.
    pub fn finish(&mut self, pending: Pending, out: &mut [f64]) -> Result<(), LinalgError> {
        self.sc.finish(pending, out)
    }

    /// Sum host values over all ranks in ONE counted reduction (set-up quantities that do
    /// not live on the device, such as `||b||` of a host right-hand side).
    pub fn allreduce_host(&mut self, vals: &mut [f64]) -> Result<(), LinalgError> {
        self.sc.allreduce_sum(vals)
    }

    // ----- vector operations -------------------------------------------------------------

    /// `dst = src` (owned values).
    pub fn copy(&mut self, src: &DistVec<D>, dst: &mut DistVec<D>) -> Result<(), LinalgError> {
        self.blas(work::copy, |d, n, _| {
            d.copy(n, src.raw(), 0, dst.raw_mut(), 0)
        })
    }

    /// `v = value` (owned values).
    pub fn fill(&mut self, v: &mut DistVec<D>, value: f64) -> Result<(), LinalgError> {
        self.blas(work::fill, |d, n, _| d.fill(n, value, v.raw_mut(), 0))
    }

    /// `y += alpha x`.
    pub fn axpy(
        &mut self,
        alpha: f64,
        x: &DistVec<D>,
        y: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        self.blas(work::axpy, |d, n, _| d.axpy(n, alpha, x.raw(), y.raw_mut()))
    }

    /// `z = (L L^T)^-1 r` with the IC(0) factor `f` (`bjacobi_ic0`; [`Device::ic0_solve`]).
    pub fn ic0_solve(
        &mut self,
        f: &crate::LowerFactor,
        r: &DistVec<D>,
        z: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        self.run(Bucket::Precond, f.work(), |d, _| {
            d.ic0_solve(f, r.raw(), z.raw_mut())
        })
    }

    /// `y = x + beta y`.
    pub fn xpay(
        &mut self,
        x: &DistVec<D>,
        beta: f64,
        y: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        self.blas(work::axpy, |d, n, _| d.xpay(n, x.raw(), beta, y.raw_mut()))
    }

    /// `y = alpha x`.
    pub fn scale(
        &mut self,
        alpha: f64,
        x: &DistVec<D>,
        y: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        self.blas(work::scale, |d, n, _| {
            d.scale(n, alpha, x.raw(), y.raw_mut())
        })
    }

    /// `x` as the caller will receive it from the scaling `s` and the right-hand side's
    /// power of two `scale` (see [`Device::representable`]): entries that underflow or
    /// overflow on the way out are replaced by what the caller gets; the rest are untouched.
    pub fn representable(
        &mut self,
        s: &DistVec<D>,
        scale: f64,
        x: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        self.blas(work::representable, |d, n, _| {
            d.representable(n, s.raw(), scale, x.raw_mut())
        })
    }

    /// `out = a * b` elementwise.
    pub fn mul(
        &mut self,
        a: &DistVec<D>,
        b: &DistVec<D>,
        out: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        self.blas(work::mul, |d, n, _| {
            d.mul(n, a.raw(), b.raw(), out.raw_mut())
        })
    }

    /// `out = a / b` elementwise.
    pub fn div(
        &mut self,
        a: &DistVec<D>,
        b: &DistVec<D>,
        out: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        self.blas(work::div, |d, n, _| {
            d.div(n, a.raw(), b.raw(), out.raw_mut())
        })
    }

    /// CG's `x += alpha p; p = r + beta p` in one pass.
    pub fn cg_update(
        &mut self,
        alpha: f64,
        beta: f64,
        r: &DistVec<D>,
        p: &mut DistVec<D>,
        x: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        self.blas(work::cg_update, |d, n, _| {
            d.cg_update(n, alpha, beta, r.raw(), p.raw_mut(), x.raw_mut())
        })
    }

    /// C-CG's `p = r + beta p; ap = ar + beta ap; x += a p; r -= a ap` and `[r.r,
    /// ||r||_w^2]` into slots `at`, `at + 1` (with weights `w`; else `r.r` alone into
    /// `at`), in one pass ([`Device::ccg_update`]).
    #[allow(clippy::too_many_arguments)]
    pub fn ccg_update(
        &mut self,
        a: f64,
        beta: f64,
        ar: &DistVec<D>,
        v: CcgVecs<'_, DistVec<D>>,
        w: Option<&DistVec<D>>,
        at: usize,
    ) -> Result<(), LinalgError> {
        let work = match w {
            Some(_) => work::ccg_update,
            None => work::ccg_update_dot,
        };
        self.blas(work, |d, n, s| {
            let raw = CcgVecs {
                r: v.r.raw_mut(),
                p: v.p.raw_mut(),
                ap: v.ap.raw_mut(),
                x: v.x.raw_mut(),
            };
            d.ccg_update(n, a, beta, ar.raw(), raw, w.map(DistVec::raw), s, at)
        })
    }

    /// Pipelined CG's six updates and `[r.r, ||r||_wt^2, w.r]` into slots `at..at + 3`, in
    /// one pass ([`Device::pipecg_update`]).
    #[allow(clippy::too_many_arguments)]
    pub fn pipecg_update(
        &mut self,
        a: f64,
        beta: f64,
        q: &DistVec<D>,
        v: PipecgVecs<'_, DistVec<D>>,
        wt: &DistVec<D>,
        at: usize,
    ) -> Result<(), LinalgError> {
        self.blas(work::pipecg_update, |d, n, s| {
            let raw = PipecgVecs {
                w: v.w.raw_mut(),
                r: v.r.raw_mut(),
                z: v.z.raw_mut(),
                s: v.s.raw_mut(),
                p: v.p.raw_mut(),
                x: v.x.raw_mut(),
            };
            d.pipecg_update(n, a, beta, q.raw(), raw, wt.raw(), s, at)
        })
    }

    /// `y += alpha x`, then `y.y` into slot `at`.
    pub fn axpy_dot(
        &mut self,
        alpha: f64,
        x: &DistVec<D>,
        y: &mut DistVec<D>,
        at: usize,
    ) -> Result<(), LinalgError> {
        self.blas(work::axpy_dot, |d, n, s| {
            d.axpy_dot(n, alpha, x.raw(), y.raw_mut(), s, at)
        })
    }

    /// `y += alpha x`, then `[y.y, ||y||_w^2]` into slots `at`, `at + 1`.
    pub fn axpy_norms(
        &mut self,
        alpha: f64,
        x: &DistVec<D>,
        y: &mut DistVec<D>,
        w: &DistVec<D>,
        at: usize,
    ) -> Result<(), LinalgError> {
        self.blas(work::axpy_norms, |d, n, s| {
            d.axpy_norms(n, alpha, x.raw(), y.raw_mut(), w.raw(), s, at)
        })
    }

    /// `y = b - y` (the true residual from an SpMV output), then `[y.y, ||y||_w^2]` into
    /// slots `at`, `at + 1`.
    pub fn residual_norms(
        &mut self,
        b: &DistVec<D>,
        y: &mut DistVec<D>,
        w: &DistVec<D>,
        at: usize,
    ) -> Result<(), LinalgError> {
        self.blas(work::residual_norms, |d, n, s| {
            d.residual_norms(n, b.raw(), y.raw_mut(), w.raw(), s, at)
        })
    }

    /// `||r||_w^2` into slot `at`.
    pub fn wnorm(&mut self, r: &DistVec<D>, w: &DistVec<D>, at: usize) -> Result<(), LinalgError> {
        self.blas(work::wnorm, |d, n, s| d.wnorm(n, r.raw(), w.raw(), s, at))
    }

    /// `x . y` into slot `at`.
    pub fn dot(&mut self, x: &DistVec<D>, y: &DistVec<D>, at: usize) -> Result<(), LinalgError> {
        let (xs, ys) = ([x.raw()], [y.raw()]);
        self.gram(&Refs(&xs), &Refs(&ys), GramShape::Full, None, at)
    }

    /// The Gram block of `xs` and `ys` (weighted by `w` when given) into slots `at..`, in
    /// the order of `shape` ([`Device::gram`]).
    pub fn gram<X, Y>(
        &mut self,
        xs: &X,
        ys: &Y,
        shape: GramShape,
        w: Option<&DistVec<D>>,
        at: usize,
    ) -> Result<(), LinalgError>
    where
        X: VecList<D::Vector> + ?Sized,
        Y: VecList<D::Vector> + ?Sized,
    {
        let (nx, ny, weighted) = (xs.count(), ys.count(), w.is_some());
        self.blas(
            |n| work::gram(n, nx, ny, shape, weighted, false),
            |d, n, s| d.gram(n, xs, ys, shape, w.map(DistVec::raw), s, at),
        )
    }

    /// The Gram block of `xs` with itself (each vector read once) into slots `at..`.
    pub fn gram_self<X>(
        &mut self,
        xs: &X,
        shape: GramShape,
        w: Option<&DistVec<D>>,
        at: usize,
    ) -> Result<(), LinalgError>
    where
        X: VecList<D::Vector> + ?Sized,
    {
        let (nx, weighted) = (xs.count(), w.is_some());
        self.blas(
            |n| work::gram(n, nx, nx, shape, weighted, true),
            |d, n, s| d.gram(n, xs, xs, shape, w.map(DistVec::raw), s, at),
        )
    }

    /// `y += sum_j coef[j] v_j` over the nonzero coefficients.
    pub fn lincomb<L>(
        &mut self,
        coef: &[f64],
        vs: &L,
        y: &mut DistVec<D>,
    ) -> Result<(), LinalgError>
    where
        L: VecList<D::Vector> + ?Sized,
    {
        let terms = nonzero(coef);
        self.blas(
            |n| work::lincomb(n, terms),
            |d, n, _| d.lincomb(n, coef, vs, y.raw_mut()),
        )
    }

    /// [`Ops::lincomb`] with `[y.y, ||y||_w^2]` of the result into slots `at`, `at + 1`.
    pub fn lincomb_norms<L>(
        &mut self,
        coef: &[f64],
        vs: &L,
        y: &mut DistVec<D>,
        w: &DistVec<D>,
        at: usize,
    ) -> Result<(), LinalgError>
    where
        L: VecList<D::Vector> + ?Sized,
    {
        let terms = nonzero(coef);
        self.blas(
            |n| work::lincomb_norms(n, terms),
            |d, n, s| d.lincomb_norms(n, coef, vs, y.raw_mut(), w.raw(), s, at),
        )
    }

    /// `dst_j += sum_l coef[l * nd + j] src_l` for every destination ([`Device::lincomb_block`]).
    pub fn lincomb_block<S, T>(
        &mut self,
        coef: &[f64],
        srcs: &S,
        dsts: &mut T,
    ) -> Result<(), LinalgError>
    where
        S: VecList<D::Vector> + ?Sized,
        T: VecListMut<D::Vector> + ?Sized,
    {
        let nd = dsts.count();
        let terms = nonzero(coef);
        let sources = coef
            .chunks(nd.max(1))
            .filter(|row| row.iter().any(|c| *c != 0.0))
            .count();
        self.blas(
            |n| work::lincomb_block(n, sources, nd, terms),
            |d, n, _| d.lincomb_block(n, coef, srcs, dsts),
        )
    }

    /// One basis column on the first `m` values ([`Device::basis_step`]).
    pub fn basis_step(
        &mut self,
        m: usize,
        step: BasisStep,
        a: &D::Vector,
        s: &D::Vector,
        prev: Option<&D::Vector>,
        out: &mut D::Vector,
    ) -> Result<(), LinalgError> {
        self.run(Bucket::Blas, work::basis_step(step, m), |d, _| {
            d.basis_step(m, step, a, s, prev, out)
        })
    }

    /// The smoothing's `s += eta (r - s); y += eta (x - y)`.
    pub fn smooth_update(
        &mut self,
        eta: f64,
        r: &DistVec<D>,
        x: &DistVec<D>,
        s: &mut DistVec<D>,
        y: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        self.blas(work::smooth_update, |d, n, _| {
            d.smooth_update(n, eta, r.raw(), x.raw(), s.raw_mut(), y.raw_mut())
        })
    }

    /// The smoothing's `s = g s; y = g y + (1 - g) x0`.
    pub fn smooth_rescale(
        &mut self,
        g: f64,
        x0: &DistVec<D>,
        s: &mut DistVec<D>,
        y: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        self.blas(work::smooth_rescale, |d, n, _| {
            d.smooth_rescale(n, g, x0.raw(), s.raw_mut(), y.raw_mut())
        })
    }
}

/// The nonzero coefficients of a linear combination (the terms it computes).
fn nonzero(coef: &[f64]) -> usize {
    coef.iter().filter(|c| **c != 0.0).count()
}

/// The layer's phase switch is also reachable as the communicator's.
impl<C: Communicator + ?Sized, D: Device> std::fmt::Debug for Ops<'_, C, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ops")
            .field("device", &self.dev.name())
            .field("n", &self.n)
            .field("counters", &self.sc.counters())
            .finish()
    }
}
