//! Distributed CSR: a contiguous block of rows per rank, columns split into owned and ghost.

use castack_collectives::{
    AllgathervAlgo, Collectives, CommError, Communicator, Op, PersistentCollective,
};
use castack_neighbor::{ExchangePattern, Strategy};
use sprs::CsMatView;

use crate::count::{Bucket, SolverComm};
use crate::device::{work, Cpu, Device, HostCsr};
use crate::dist::stage::Staged;
use crate::dist::DistVec;
use crate::ops::Ops;
use crate::LinalgError;
use crate::Partition;

/// How the SpMV input reaches the ranks that read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpmvMode {
    /// Only ghost entries move, neighbour to neighbour (default).
    #[default]
    Halo,
    /// The whole vector is gathered on every rank (the seed paper's 1-D scheme).
    Allgather,
}

impl SpmvMode {
    /// Every mode.
    pub const ALL: &'static [SpmvMode] = &[SpmvMode::Halo, SpmvMode::Allgather];

    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            SpmvMode::Halo => "halo",
            SpmvMode::Allgather => "allgather",
        }
    }
}

castack_collectives::impl_registry!(SpmvMode, "spmv mode");

/// How the input vector's other-rank values arrive.
enum InputComm<D: Device> {
    /// Neighbour exchange of ghost values into slots `n_local..`, staged on the device.
    Halo(Box<Staged<D>>),
    /// Allgather of the whole vector (through a host buffer of `n` values) into slots
    /// `n_local..n_local + n`.
    Allgather {
        plan: PersistentCollective,
        row_start: usize,
        full: Vec<f64>,
    },
}

/// One rank's rows of a distributed matrix in CSR with GLOBAL column indices, for
/// [`DistCsr::from_local_rows`]: row `i` holds
/// `cols[indptr[i] - indptr[0]..indptr[i + 1] - indptr[0]]` (strictly increasing) and the values alongside.
#[derive(Debug, Clone, Copy)]
pub struct LocalRows<'a> {
    /// Row offsets, `n_local + 1` of them, non-decreasing (a slice of a larger array's
    /// offsets is fine: they are taken relative to the first).
    pub indptr: &'a [usize],
    /// Global column of each entry.
    pub cols: &'a [usize],
    /// Value of each entry.
    pub vals: &'a [f64],
}

impl LocalRows<'_> {
    /// The block's own shape: offsets non-decreasing and spanning the entries, columns
    /// strictly increasing in every row. `Err`: what is wrong.
    pub(super) fn check_shape(&self) -> Result<(), String> {
        let (Some(&first), Some(&last)) = (self.indptr.first(), self.indptr.last()) else {
            return Err("indptr must hold n_local + 1 offsets".into());
        };
        if self.indptr.windows(2).any(|w| w[0] > w[1]) {
            return Err("indptr decreases".into());
        }
        if last - first != self.cols.len() || self.cols.len() != self.vals.len() {
            return Err(format!(
                "indptr spans {} entries, cols holds {} and vals {}",
                last - first,
                self.cols.len(),
                self.vals.len()
            ));
        }
        for (i, w) in self.indptr.windows(2).enumerate() {
            let row = &self.cols[w[0] - first..w[1] - first];
            if row.windows(2).any(|c| c[0] >= c[1]) {
                return Err(format!(
                    "row {i}: columns not strictly increasing (sort them, sum duplicates)"
                ));
            }
        }
        Ok(())
    }

    /// Every column below the global order `n` (rows are sorted: the last entry of each
    /// row decides). `Err`: the first offending entry.
    pub(super) fn check_columns(&self, n: usize) -> Result<(), String> {
        let first = self.indptr[0];
        for (i, w) in self.indptr.windows(2).enumerate() {
            if w[1] > w[0] && self.cols[w[1] - first - 1] >= n {
                let j = self.cols[w[1] - first - 1];
                return Err(format!("row {i}: column {j} outside the {n} columns"));
            }
        }
        Ok(())
    }
}

/// Agree on a check made on every rank (ONE reduction of one word): `Ok` when it passed
/// everywhere, else this rank's own message or, where this rank's part passed, how many
/// ranks failed.
pub(super) fn agree<C: Communicator + ?Sized>(
    comm: &C,
    mine: Result<(), String>,
) -> Result<(), LinalgError> {
    let mut bad = [i64::from(mine.is_err())];
    comm.allreduce_i64(&mut bad, Op::Sum)?;
    match mine {
        Err(m) => Err(LinalgError::InvalidConfig(format!(
            "local rows of rank {}: {m}",
            comm.rank()
        ))),
        Ok(()) if bad[0] > 0 => Err(LinalgError::InvalidConfig(format!(
            "local rows: {} other rank(s) passed malformed rows",
            bad[0]
        ))),
        Ok(()) => Ok(()),
    }
}

/// What [`DistCsr::assemble`] builds a rank's block from.
struct Block<'a> {
    n: usize,
    nnz: usize,
    part: &'a Partition,
    /// This rank's row offsets from 0.
    indptr: Vec<usize>,
    /// Global column of each of its entries.
    gcols: &'a [usize],
    vals: Vec<f64>,
}

/// One rank's block of rows of a distributed sparse matrix, in the memory of its device
/// `D` (built on the host, [`DistCsr<Cpu>`], then moved to a device with
/// [`DistCsr::to_device`]; a solver does that after scaling it).
///
/// Columns are renumbered into the layout of [`DistVec`]: owned columns `0..n_local`, then
/// (halo mode) ghost columns in increasing global order, or (allgather mode) the whole
/// vector at `n_local + j`. Column indices are 32-bit.
pub struct DistCsr<D: Device = Cpu> {
    n: usize,
    nnz: usize,
    row_start: usize,
    n_local: usize,
    n_ext: usize,
    mat: D::Matrix,
    ghosts: Vec<usize>,
    mode: SpmvMode,
    input: InputComm<D>,
}

impl<D: Device> std::fmt::Debug for DistCsr<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistCsr")
            .field("n", &self.n)
            .field("row_start", &self.row_start)
            .field("n_local", &self.n_local)
            .field("ghosts", &self.ghosts.len())
            .field("mode", &self.mode)
            .finish()
    }
}

impl DistCsr<Cpu> {
    /// Build this rank's block from the global matrix `a` (CSR; every rank passes the same
    /// matrix and partition). Collective: every rank of `comm` must call it.
    ///
    /// The halo pattern is computed once: each rank lists the ghost columns its rows read,
    /// tells their owners (one message per owner), and hands the resulting index lists to
    /// [`castack_neighbor::Exchange`].
    pub fn from_global<C: Communicator + ?Sized>(
        comm: &C,
        a: CsMatView<'_, f64>,
        part: &Partition,
        mode: SpmvMode,
    ) -> Result<Self, LinalgError> {
        Self::from_global_with(comm, a, part, mode, Strategy::Naive)
    }

    /// [`DistCsr::from_global`] with the halo exchange run by `exchange` (e.g.
    /// `castack_krylov::SolverConfig::exchange`; `Strategy::Segmented` for multi-NIC nodes).
    /// Ignored in [`SpmvMode::Allgather`].
    pub fn from_global_with<C: Communicator + ?Sized>(
        comm: &C,
        a: CsMatView<'_, f64>,
        part: &Partition,
        mode: SpmvMode,
        exchange: Strategy,
    ) -> Result<Self, LinalgError> {
        let nnz = a.nnz();
        let g = super::global_rows(comm, a, part)?;
        let (lo, hi) = (g.indptr[g.range.start], g.indptr[g.range.end]);
        let indptr: Vec<usize> = g.indptr[g.range.start..=g.range.end]
            .iter()
            .map(|&k| k - lo)
            .collect();
        Self::assemble(
            comm,
            Block {
                n: g.n,
                nnz,
                part,
                indptr,
                gcols: &g.cols[lo..hi],
                vals: g.vals[lo..hi].to_vec(),
            },
            mode,
            exchange,
        )
    }

    /// Build this rank's block from the rows it owns, with no global structure anywhere:
    /// `rows` holds them in CSR with GLOBAL column indices, each row's columns strictly
    /// increasing (as a [`sprs::CsMat`] keeps them; sum duplicates first). Rank `r` owns
    /// the contiguous global rows after those of ranks `0..r`, as many as it passes (any
    /// contiguous distribution: by rows, by nonzeros, or the application's own), and the
    /// matrix is square of order the sum of the counts. Collective: every rank of `comm`
    /// must call it. The ranks find the halo pattern themselves ([`DistCsr::from_global`]'s
    /// own procedure, fed with local rows), so the block, its halo and every solve are bit
    /// for bit those of [`DistCsr::from_global_with`] on the assembled global matrix with
    /// the same partition. Returns the block and the partition the counts make (for the
    /// right-hand side and the solution: each rank's entries are its rows).
    ///
    /// Cost: one reduction of `P + 1` words (the row counts and nonzeros) and two of one
    /// word (every rank agrees on the checks of the rows) besides the halo pattern's own;
    /// memory: this rank's rows and O(P) words.
    ///
    /// # Errors
    /// [`LinalgError::InvalidConfig`] on EVERY rank when any rank's block is malformed
    /// (pointer array, a column out of range or out of order; that rank's message names
    /// the row), [`LinalgError::TooLarge`] past 32-bit columns, communication errors.
    pub fn from_local_rows<C: Communicator + ?Sized>(
        comm: &C,
        rows: LocalRows<'_>,
        mode: SpmvMode,
        exchange: Strategy,
    ) -> Result<(Self, Partition), LinalgError> {
        let (p, me) = (comm.size(), comm.rank());
        // Every rank agrees on every check, so no rank is left waiting in a collective.
        agree(comm, rows.check_shape())?;
        // Every rank's row count and nonzeros, in one reduction of P + 1 words.
        let mut counts = vec![0i64; p + 1];
        counts[me] = (rows.indptr.len() - 1) as i64;
        counts[p] = rows.cols.len() as i64;
        comm.allreduce_i64(&mut counts, Op::Sum)?;
        let nnz = counts[p] as usize;
        let part = Partition::from_counts(counts[..p].iter().map(|&c| c as usize));
        let n = part.n();
        agree(comm, rows.check_columns(n))?;
        let block = Block {
            n,
            nnz,
            part: &part,
            indptr: rows.indptr.iter().map(|&k| k - rows.indptr[0]).collect(),
            gcols: rows.cols,
            vals: rows.vals.to_vec(),
        };
        let a = Self::assemble(comm, block, mode, exchange)?;
        Ok((a, part))
    }

    /// This rank's block from its rows in global columns: local columns, ghosts and the
    /// input communication of `mode`.
    fn assemble<C: Communicator + ?Sized>(
        comm: &C,
        block: Block<'_>,
        mode: SpmvMode,
        exchange: Strategy,
    ) -> Result<Self, LinalgError> {
        let Block {
            n,
            nnz,
            part,
            indptr,
            gcols,
            vals,
        } = block;
        let ext_limit = match mode {
            SpmvMode::Halo => n,
            SpmvMode::Allgather => 2 * n,
        };
        if ext_limit > u32::MAX as usize {
            return Err(LinalgError::TooLarge { n });
        }
        let range = part.range(comm.rank());
        let (row_start, n_local) = (range.start, range.len());
        let owned = |j: usize| range.contains(&j);

        let (cols, ghosts, n_ext, input) = match mode {
            SpmvMode::Halo => {
                let mut ghosts: Vec<usize> = gcols.iter().copied().filter(|&j| !owned(j)).collect();
                ghosts.sort_unstable();
                ghosts.dedup();
                let cols = gcols
                    .iter()
                    .map(|&j| {
                        if owned(j) {
                            (j - row_start) as u32
                        } else {
                            // `j` is in `ghosts` by construction.
                            (n_local + ghosts.partition_point(|&g| g < j)) as u32
                        }
                    })
                    .collect();
                let pattern = halo_pattern(comm, part, row_start, &ghosts)?;
                let staged = Staged::new(comm, &pattern, n_local, exchange)?;
                let n_ext = n_local + ghosts.len();
                (cols, ghosts, n_ext, InputComm::Halo(Box::new(staged)))
            }
            SpmvMode::Allgather => {
                let cols = gcols.iter().map(|&j| (n_local + j) as u32).collect();
                let plan = PersistentCollective::allgatherv_f64(
                    comm,
                    &part.counts(),
                    AllgathervAlgo::default(),
                )?;
                (
                    cols,
                    Vec::new(),
                    n_local + n,
                    InputComm::Allgather {
                        plan,
                        row_start,
                        full: vec![0.0; n],
                    },
                )
            }
        };
        Ok(Self {
            n,
            nnz,
            row_start,
            n_local,
            n_ext,
            mat: HostCsr {
                indptr,
                cols,
                vals,
                ncols: n_ext,
            },
            ghosts,
            mode,
            input,
        })
    }

    /// A zero host vector laid out for this matrix (owned values plus input slots).
    pub fn new_vec(&self) -> DistVec {
        DistVec::zeros(self.n_local, self.n_ext)
    }

    /// The local CSR arrays (row pointers, renumbered column indices, values).
    pub fn local_csr(&self) -> (&[usize], &[u32], &[f64]) {
        (&self.mat.indptr, &self.mat.cols, &self.mat.vals)
    }

    /// The diagonal of this rank's rows (0 where no entry is stored).
    pub fn diagonal(&self) -> Vec<f64> {
        let m = &self.mat;
        (0..self.n_local)
            .map(|i| {
                let own = self.own_column(i);
                let (lo, hi) = (m.indptr[i], m.indptr[i + 1]);
                m.cols[lo..hi]
                    .iter()
                    .zip(&m.vals[lo..hi])
                    .filter(|(c, _)| **c as usize == own)
                    .fold(0.0, |acc, (_, v)| acc + v)
            })
            .collect()
    }

    /// The column slot of this rank's local row `i` in the input layout.
    fn own_column(&self, i: usize) -> usize {
        match self.mode {
            SpmvMode::Halo => i,
            SpmvMode::Allgather => self.n_local + self.row_start + i,
        }
    }

    /// Symmetric scaling `A <- S A S` with `S = diag(s)`; `s` holds this rank's scale
    /// factors and its input slots are filled here (one setup exchange, on the host).
    pub fn scale_symmetric<C: Communicator + ?Sized>(
        &mut self,
        sc: &mut SolverComm<'_, C>,
        s: &mut DistVec,
    ) -> Result<(), LinalgError> {
        let own = s.local().to_vec();
        match &mut self.input {
            InputComm::Halo(staged) => staged.exchange_host(sc, &own, s.ext_mut())?,
            InputComm::Allgather {
                plan,
                row_start,
                full,
            } => {
                let t = sc.now();
                full[*row_start..*row_start + own.len()].copy_from_slice(&own);
                plan.execute_f64(sc.comm(), full)?;
                s.ext_mut()[self.n_local..].copy_from_slice(full);
                let sent = own.len() * sc.size().saturating_sub(1);
                sc.halo_since(sent, t);
            }
        }
        let ext = s.ext();
        let m = &mut self.mat;
        for i in 0..self.n_local {
            let (lo, hi) = (m.indptr[i], m.indptr[i + 1]);
            for k in lo..hi {
                m.vals[k] = scaled_entry(m.vals[k], ext[i], ext[m.cols[k] as usize]);
            }
        }
        Ok(())
    }

    /// This block on `dev`: the matrix moved there once (the CPU keeps its arrays), the
    /// exchange's index lists and staging buffers allocated there.
    pub fn to_device<D: Device>(self, dev: &mut D) -> Result<DistCsr<D>, LinalgError> {
        let input = match self.input {
            InputComm::Halo(s) => InputComm::Halo(Box::new(s.upload(dev)?)),
            InputComm::Allgather {
                plan,
                row_start,
                full,
            } => InputComm::Allgather {
                plan,
                row_start,
                full,
            },
        };
        Ok(DistCsr {
            n: self.n,
            nnz: self.nnz,
            row_start: self.row_start,
            n_local: self.n_local,
            n_ext: self.n_ext,
            mat: dev.upload_csr(self.mat)?,
            ghosts: self.ghosts,
            mode: self.mode,
            input,
        })
    }
}

impl<D: Device> DistCsr<D> {
    /// Global number of rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Global number of stored entries.
    pub fn nnz(&self) -> usize {
        self.nnz
    }

    /// Rows owned by this rank.
    pub fn n_local(&self) -> usize {
        self.n_local
    }

    /// Owned values plus input slots of a vector this matrix reads.
    pub fn n_ext(&self) -> usize {
        self.n_ext
    }

    /// Stored entries of this rank's rows.
    pub fn nnz_local(&self) -> usize {
        D::nnz(&self.mat)
    }

    /// Bytes of this rank's matrix as its SpMV reads them: 8-byte values, 4-byte column
    /// indices, 8-byte row pointers (the [`crate::device::work`] conventions).
    pub fn held_bytes(&self) -> u64 {
        12 * self.nnz_local() as u64 + 8 * (self.n_local as u64 + 1)
    }

    /// First global row of this rank.
    pub fn row_start(&self) -> usize {
        self.row_start
    }

    /// Number of ghost columns (halo mode; 0 in allgather mode).
    pub fn ghost_count(&self) -> usize {
        self.ghosts.len()
    }

    /// Global indices of the ghost columns, in slot order.
    pub fn ghosts(&self) -> &[usize] {
        &self.ghosts
    }

    /// The SpMV input mode.
    pub fn mode(&self) -> SpmvMode {
        self.mode
    }

    /// The local block in device memory.
    pub fn matrix(&self) -> &D::Matrix {
        &self.mat
    }

    /// Fill the input slots of `x` with other ranks' values: ONE counted exchange (the
    /// ghost values staged through one packed buffer each way; see `dist/stage.rs`).
    pub fn exchange_input<C: Communicator + ?Sized>(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        x: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        match &mut self.input {
            InputComm::Halo(staged) => staged.exchange_within(ops, x.raw_mut()),
            InputComm::Allgather {
                plan,
                row_start,
                full,
            } => {
                let own = self.n_local;
                let part = &mut full[*row_start..*row_start + own];
                ops.stage_out(x.raw(), 0, part, Bucket::Halo)?;
                let sc = ops.sc_mut();
                let t = sc.now();
                plan.execute_f64(sc.comm(), full)?;
                let sent = own * sc.size().saturating_sub(1);
                sc.halo_since(sent, t);
                ops.stage_in(full, x.raw_mut(), own, Bucket::Halo)
            }
        }
    }

    /// `y = A x`: one counted exchange of `x`'s input slots, then the local product.
    pub fn spmv<C: Communicator + ?Sized>(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        x: &mut DistVec<D>,
        y: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        self.exchange_input(ops, x)?;
        self.spmv_local(ops, x, y)
    }

    /// `y = A x` fused with this rank's `x . y` into reduction slot `at` (CG's `p^T A p`):
    /// one counted exchange, then one pass.
    pub fn spmv_dot<C: Communicator + ?Sized>(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        x: &mut DistVec<D>,
        y: &mut DistVec<D>,
        at: usize,
    ) -> Result<(), LinalgError> {
        self.exchange_input(ops, x)?;
        let w = work::spmv_dot(self.n_local, D::nnz(&self.mat), self.n_ext);
        let mat = &self.mat;
        ops.run(Bucket::Spmv, w, |d, s| {
            d.spmv_dot(mat, x.raw(), y.raw_mut(), s, at)
        })
    }

    /// The true residual `y = b - A x` with its norms and the bound on its rounding error
    /// ([`Device::residual_bound`]: `[y.y, sum y_i^2 w_i]` into reduction slots `at`,
    /// `at + 1`, `sum w_i e_i^2` into `bound_at`): one counted exchange, then one pass.
    #[allow(clippy::too_many_arguments)]
    pub fn residual_bound<C: Communicator + ?Sized>(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        x: &mut DistVec<D>,
        b: &DistVec<D>,
        w: &DistVec<D>,
        y: &mut DistVec<D>,
        at: usize,
        bound_at: usize,
    ) -> Result<(), LinalgError> {
        self.exchange_input(ops, x)?;
        let work = work::residual_bound(self.n_local, D::nnz(&self.mat), self.n_ext);
        let mat = &self.mat;
        ops.run(Bucket::Spmv, work, |d, s| {
            d.residual_bound(mat, x.raw(), b.raw(), y.raw_mut(), w.raw(), s, at, bound_at)
        })
    }

    /// `y = A x` with `x`'s input slots already filled (no communication).
    pub fn spmv_local<C: Communicator + ?Sized>(
        &self,
        ops: &mut Ops<'_, C, D>,
        x: &DistVec<D>,
        y: &mut DistVec<D>,
    ) -> Result<(), LinalgError> {
        let w = work::spmv(self.n_local, D::nnz(&self.mat), self.n_ext);
        let (mat, rows) = (&self.mat, self.n_local);
        ops.run(Bucket::Spmv, w, |d, _| {
            d.spmv(mat, rows, x.raw(), y.raw_mut())
        })
    }
}

/// SplitMix64 finaliser: a 64-bit hash of a rank for the requester fingerprints.
fn rank_hash(rank: usize) -> i64 {
    let mut z = (rank as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as i64
}

/// Tell each owner which of its rows this rank reads, and learn which of ours the others
/// read. `ghosts` must be sorted (the receive lists index into it).
///
/// Who reads from a rank is what each rank must learn. When every rank reads from exactly
/// the ranks that read from it (a structurally symmetric matrix: every SPD solve), those
/// are its own owners, so one allreduce of `3p` words checks that (per rank, the count,
/// rank sum and rank-hash sum of its readers against those of its owners, as
/// `castack_neighbor`'s validation fingerprints declarations; every rank sees the same sums,
/// so all agree) and one message per communicating pair carries the lists: O(p) words
/// per rank. Otherwise (an unsymmetric pattern), a p x p count matrix by one allreduce
/// tells each rank its readers: p^2 words per rank, which at thousands of ranks was most of
/// a solve's memory (8 MB a rank at 1000 ranks).
pub(super) fn halo_pattern<C: Communicator + ?Sized>(
    comm: &C,
    part: &Partition,
    row_start: usize,
    ghosts: &[usize],
) -> Result<ExchangePattern, LinalgError> {
    let (p, me) = (comm.size(), comm.rank());
    // needs[q]: my ghost slots owned by q (contiguous, ghosts are sorted).
    let mut recvs: Vec<(usize, Vec<usize>)> = Vec::new();
    for (k, &g) in ghosts.iter().enumerate() {
        let q = part.owner(g);
        match recvs.last_mut() {
            Some((owner, slots)) if *owner == q => slots.push(k),
            _ => recvs.push((q, vec![k])),
        }
    }
    // Readers' fingerprints: per rank q, (count, rank sum, hash sum) of the ranks reading
    // from it, minus those of q's own owners; all zero where readers == owners.
    let mut v = vec![0i64; 3 * p];
    for (q, _) in recvs.iter().filter(|(q, _)| *q != me) {
        v[*q] += 1;
        v[p + q] = v[p + q].wrapping_add(me as i64);
        v[2 * p + q] = v[2 * p + q].wrapping_add(rank_hash(me));
        v[me] -= 1;
        v[p + me] = v[p + me].wrapping_sub(*q as i64);
        v[2 * p + me] = v[2 * p + me].wrapping_sub(rank_hash(*q));
    }
    comm.allreduce_i64(&mut v, Op::Sum)?;
    let symmetric = (0..p).all(|q| v[q] == 0 && v[p + q] == 0 && v[2 * p + q] == 0);
    drop(v);
    let readers: Vec<(usize, usize)> = if symmetric {
        // My readers are my owners; their counts come with their lists.
        recvs
            .iter()
            .filter(|(q, _)| *q != me)
            .map(|(q, _)| (*q, usize::MAX))
            .collect()
    } else {
        let mut counts = vec![0i64; p * p];
        for (q, slots) in &recvs {
            counts[me * p + q] = slots.len() as i64;
        }
        comm.allreduce_i64(&mut counts, Op::Sum)?;
        (0..p)
            .filter(|&r| r != me && counts[r * p + me] != 0)
            .map(|r| (r, counts[r * p + me] as usize))
            .collect()
    };
    let tag = comm.next_collective_tag();
    let mut reqs = Vec::with_capacity(recvs.len());
    for (q, slots) in &recvs {
        let bytes: Vec<u8> = slots
            .iter()
            .flat_map(|&k| (ghosts[k] as u64).to_le_bytes())
            .collect();
        reqs.push(comm.isend(*q, tag, &bytes)?);
    }
    let mut sends = Vec::new();
    for (r, count) in readers {
        let mut idx = Vec::new();
        let mut bad = None;
        comm.wait_recv_with(comm.irecv(r, tag)?, &mut |msg| {
            if msg.len() % 8 != 0 || (count != usize::MAX && msg.len() != 8 * count) {
                bad = Some(msg.len());
                return Ok(());
            }
            idx.extend(msg.chunks_exact(8).map(|b| {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                (u64::from_le_bytes(a) as usize).wrapping_sub(row_start)
            }));
            Ok(())
        })?;
        if let Some(got) = bad {
            return Err(CommError::LengthMismatch {
                rank: me,
                from: r,
                expected: if count == usize::MAX { 8 } else { 8 * count },
                got,
            }
            .into());
        }
        sends.push((r, idx));
    }
    for req in reqs {
        comm.wait_send(req)?;
    }
    Ok(ExchangePattern { sends, recvs })
}

/// `a s_i s_j`, an entry of the symmetrically scaled matrix `S A S`: the product of the
/// two factors first (the bits every ordinary input has), or, where that product leaves
/// the normal range (a subnormal or huge diagonal entry: `s_i^2 = 1/a_ii` overflows for
/// `a_ii = 1e-310`), the entry times each factor in turn, which stays in range for an
/// SPD matrix's `|a_ij| <= sqrt(a_ii a_jj)`.
pub(crate) fn scaled_entry(a: f64, si: f64, sj: f64) -> f64 {
    let f = si * sj;
    if f.is_normal() {
        a * f
    } else {
        a * si * sj
    }
}

#[cfg(test)]
mod halo_pattern_tests {
    use std::cell::Cell;

    use castack_collectives::{RecvRequest, SendRequest, Tag, ThreadComm, ThreadUniverse};

    use super::*;

    /// A rank's communicator that records the longest message it sends.
    struct Longest<'a> {
        inner: &'a ThreadComm,
        max: Cell<usize>,
    }

    impl Communicator for Longest<'_> {
        fn rank(&self) -> usize {
            self.inner.rank()
        }
        fn size(&self) -> usize {
            self.inner.size()
        }
        fn isend(&self, dest: usize, tag: Tag, data: &[u8]) -> Result<SendRequest, CommError> {
            self.max.set(self.max.get().max(data.len()));
            self.inner.isend(dest, tag, data)
        }
        fn irecv(&self, source: usize, tag: Tag) -> Result<RecvRequest, CommError> {
            self.inner.irecv(source, tag)
        }
        fn wait_send(&self, req: SendRequest) -> Result<(), CommError> {
            self.inner.wait_send(req)
        }
        fn wait_recv_with(
            &self,
            req: RecvRequest,
            deliver: &mut dyn FnMut(&[u8]) -> Result<(), CommError>,
        ) -> Result<(), CommError> {
            self.inner.wait_recv_with(req, deliver)
        }
        fn next_collective_tag(&self) -> Tag {
            self.inner.next_collective_tag()
        }
    }

    /// Run `halo_pattern` on `p` ranks over `n` rows with each rank's (sorted) ghosts, and
    /// check every rank's send lists against those computed from all ranks' ghosts; return
    /// the longest message any rank sent.
    fn check(
        n: usize,
        p: usize,
        ghosts: &(dyn Fn(&Partition, usize) -> Vec<usize> + Sync),
    ) -> usize {
        let part = Partition::rows(n, p);
        let out = ThreadUniverse::new(p)
            .unwrap()
            .run(|comm| {
                let c = Longest {
                    inner: comm,
                    max: Cell::new(0),
                };
                let me = comm.rank();
                let pat =
                    halo_pattern(&c, &part, part.range(me).start, &ghosts(&part, me)).unwrap();
                (pat, c.max.get())
            })
            .unwrap();
        for (me, (pat, _)) in out.iter().enumerate() {
            let start = part.range(me).start;
            let want: Vec<(usize, Vec<usize>)> = (0..p)
                .filter(|&r| r != me)
                .filter_map(|r| {
                    let mine: Vec<usize> = ghosts(&part, r)
                        .into_iter()
                        .filter(|&g| part.owner(g) == me)
                        .map(|g| g - start)
                        .collect();
                    (!mine.is_empty()).then_some((r, mine))
                })
                .collect();
            assert_eq!(pat.sends, want, "rank {me}'s readers");
        }
        out.iter().map(|(_, m)| *m).max().unwrap_or(0)
    }

    #[test]
    fn a_symmetric_pattern_costs_o_p_words_per_rank() {
        // A 1-D Laplacian: each rank reads the rows beside its block.
        let (n, p) = (256, 64);
        let longest = check(n, p, &|part, r| {
            let range = part.range(r);
            let mut g = Vec::new();
            if range.start > 0 {
                g.push(range.start - 1);
            }
            if range.end < n {
                g.push(range.end);
            }
            g
        });
        // 3p words of fingerprints (was a p x p count matrix: 8 p^2 = 32 KiB).
        assert!(longest <= 8 * 3 * p, "a message of {longest} bytes");
    }

    #[test]
    fn an_unsymmetric_pattern_falls_back_to_the_count_matrix() {
        // Rank r reads the first row of r + 1 and, on even ranks, of r + 3 too: readers of
        // a rank are not its owners.
        let (n, p) = (64, 8);
        check(n, p, &|part, r| {
            let mut g: Vec<usize> = [1, 3]
                .iter()
                .filter(|&&d| d == 1 || r % 2 == 0)
                .filter(|&&d| r + d < p)
                .map(|&d| part.range(r + d).start)
                .collect();
            g.sort_unstable();
            g
        });
    }
}
