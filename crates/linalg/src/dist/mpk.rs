//! Matrix powers kernel (MPK): the `k` vectors of an s-step basis with ONE neighbour
//! exchange of depth `k` and redundant computation on a ghost zone, instead of `k`
//! exchanges of depth 1.
//!
//! ## Ghost zone
//!
//! Level 0 is this rank's owned rows; level `l` is every row read (as a column) by a row of
//! level `l - 1` and of no lower level: the rows within `l` hops of the owned rows in the
//! matrix graph (edges follow "row i reads column j", so non-symmetric patterns work too).
//! The extended vector is `[owned | level 1 | level 2 | ... | level k]`, each level in
//! increasing global order, and the local CSR holds the rows of levels `0..k` (owned rows
//! and the ghost rows of levels `1..k-1`) in the same order, columns renumbered into the
//! extended vector. So "the rows of level <= L" is the prefix `0..level_end[L]` of both.
//! [`MatrixPowers::from_global`] finds the levels in the global matrix;
//! [`MatrixPowers::from_local_rows`] finds the same levels from each rank's own rows,
//! fetching the rows of levels `1..k-1` from their owners one level at a time.
//!
//! ## One basis build
//!
//! The start vector's owned values are copied in and ONE exchange fills all ghost values of
//! levels `1..=k` from their owners (counted once by [`SolverComm::halo`]). Step `j`
//! (`s_{j+1}` from `s_j`, `j = 0..k`) computes `A s_j` and `s_{j+1}` on the rows of level
//! `<= k - 1 - j` (the domain shrinks by one level per step: a row of level `L` reads values
//! of level `<= L + 1`), so after `k` steps the owned parts of `s_1..s_k` and
//! `A s_0..A s_{k-1}` are exact. The work on non-owned rows is redundant (their owners
//! compute it too): `2 * nnz` of the non-owned rows computed per step, summed over the
//! steps and over all ranks in [`MatrixPowers::redundant_flops`] (agreed at construction by
//! one reduction, so the count is the same on every rank).
//!
//! Arithmetic is the same as the depth-1 path row for row: rows keep the global matrix's
//! entry order and [`MatrixPowers::scale_symmetric`] multiplies by the same factors in the
//! same order as [`DistCsr::scale_symmetric`], so the owned results agree with
//! `castack_krylov`'s `SStepBasis::build` to the last bit (tests allow round-off anyway).
//!
//! ## Two start vectors, one exchange
//!
//! [`MatrixPowers::apply_pair`] (and [`MatrixPowers::apply_pair_with`], which wraps any two
//! builds through [`MatrixPowers::apply`]) builds a basis of size `k` from one start vector
//! and one of size `k - 1` from another (CA-CG's `P = basis(p, s)` and `R = basis(r, s - 1)`)
//! with ONE message round: a second exchange, built at setup over the doubled index space
//! (`[p owned | r owned]` to `[p ghosts | r ghosts]`, each neighbour's message carrying its
//! `p` values then its `r` values), fills the ghost values of both start vectors, counted as
//! ONE halo exchange by [`SolverComm::halo`] (with twice the values). The ghost values are
//! exact copies, so both bases are bit-identical to two separate [`MatrixPowers::apply`]
//! calls; the redundant flops are the two builds' (sizes `k` and `k - 1`).
//!
//! ## Cost
//!
//! Pays where ghost zones grow slowly (2-D-like sparsity: level sizes grow linearly with
//! the depth); a 3-D 7-point stencil's zone grows with the surface of a thickening slab and
//! the redundant flops soon outweigh the saved message latencies.

use std::collections::HashMap;

use castack_collectives::{Collectives, Communicator, Op};
use castack_neighbor::{ExchangePattern, Strategy};
use sprs::CsMatView;

use crate::count::{Bucket, SolverComm};
use crate::device::{work, BasisStep, Cpu, Device, HostCsr};
use crate::dist::csr::{agree, halo_pattern, scaled_entry};
use crate::dist::stage::Staged;
use crate::dist::{DistCsr, DistVec, LocalRows};
use crate::ops::Ops;
use crate::LinalgError;
use crate::Partition;

/// No level assigned yet.
const UNSEEN: u32 = u32::MAX;

/// One rank's ghost zone, found breadth-first: the global index of every slot (levels in
/// order, each ascending), where each level ends, and the rows of levels `0..k` with
/// columns as slots (`ncols` unset).
struct Zone {
    globals: Vec<usize>,
    level_end: Vec<usize>,
    mat: HostCsr,
}

/// The local CSR of a ghost zone: rows `0..computed` (levels `0..k`) as `row(i)` gives them
/// (global columns and values, in the matrix's entry order), columns renumbered by
/// `slot_of`. Rows of level <= k - 1 read only columns of level <= k, which all have slots.
fn zone_csr<'r>(
    computed: usize,
    row: impl Fn(usize) -> (&'r [usize], &'r [f64]),
    slot_of: impl Fn(usize) -> u32,
) -> HostCsr {
    let mut indptr = Vec::with_capacity(computed + 1);
    indptr.push(0);
    let mut cols = Vec::new();
    let mut vals = Vec::new();
    for i in 0..computed {
        let (c, v) = row(i);
        cols.extend(c.iter().map(|&j| slot_of(j)));
        vals.extend_from_slice(v);
        indptr.push(cols.len());
    }
    HostCsr {
        indptr,
        cols,
        vals,
        ncols: 0,
    }
}

/// Ghost rows fetched from their owners, in zone order: CSR with global columns.
struct FetchedRows {
    indptr: Vec<usize>,
    cols: Vec<usize>,
    vals: Vec<f64>,
}

impl Default for FetchedRows {
    fn default() -> Self {
        FetchedRows {
            indptr: vec![0],
            cols: Vec::new(),
            vals: Vec::new(),
        }
    }
}

/// Fetch the rows `needed` (ascending global indices, none owned here) from their owners
/// and append them to `out` in that order; serve the rows other ranks need from `owned`
/// (this rank's rows, starting at global row `row_start`). Collective: every rank calls it
/// once per level. A row is sent as its length (u64), its global columns (u64 each) and
/// its values (f64 bits), all little-endian. `Ok(Err(_))`: a malformed request or reply
/// (the caller agrees on it with every rank before going on); `Err`: communication failed.
fn fetch_rows<C: Communicator + ?Sized>(
    comm: &C,
    part: &Partition,
    row_start: usize,
    owned: &LocalRows<'_>,
    needed: &[usize],
    out: &mut FetchedRows,
) -> Result<Result<(), String>, LinalgError> {
    let pattern = halo_pattern(comm, part, row_start, needed)?;
    let tag = comm.next_collective_tag();
    let first = owned.indptr[0];
    let n_local = owned.indptr.len() - 1;
    let mut reqs = Vec::with_capacity(pattern.sends.len());
    let mut bad_request = None;
    for (q, idx) in &pattern.sends {
        let mut bytes = Vec::new();
        for &i in idx {
            if i >= n_local {
                // Not a row of this rank (the ranks' partitions differ): an empty reply
                // keeps the message round complete; the requester sees the short reply.
                bad_request.get_or_insert(format!(
                    "rank {q} asked for row {} outside this rank's rows",
                    i.wrapping_add(row_start)
                ));
                bytes.clear();
                break;
            }
            let (lo, hi) = (owned.indptr[i] - first, owned.indptr[i + 1] - first);
            bytes.extend_from_slice(&((hi - lo) as u64).to_le_bytes());
            for &c in &owned.cols[lo..hi] {
                bytes.extend_from_slice(&(c as u64).to_le_bytes());
            }
            for &v in &owned.vals[lo..hi] {
                bytes.extend_from_slice(&v.to_bits().to_le_bytes());
            }
        }
        reqs.push(comm.isend(*q, tag, &bytes)?);
    }
    let mut got: Vec<(Vec<usize>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); needed.len()];
    let mut bad_reply = None;
    for (q, slots) in &pattern.recvs {
        comm.wait_recv_with(comm.irecv(*q, tag)?, &mut |msg| {
            let mut words = msg.chunks_exact(8).map(|b| {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                u64::from_le_bytes(a)
            });
            let whole = msg.len() % 8 == 0;
            for &t in slots {
                let Some(len) = words.next().filter(|_| whole) else {
                    bad_reply = Some(format!("rank {q} sent a short reply"));
                    return Ok(());
                };
                let len = len as usize;
                let cols: Vec<usize> = words.by_ref().take(len).map(|w| w as usize).collect();
                let vals: Vec<f64> = words.by_ref().take(len).map(f64::from_bits).collect();
                if cols.len() != len || vals.len() != len {
                    bad_reply = Some(format!("rank {q} sent a short reply"));
                    return Ok(());
                }
                got[t] = (cols, vals);
            }
            if words.next().is_some() {
                bad_reply = Some(format!("rank {q} sent a long reply"));
            }
            Ok(())
        })?;
    }
    for req in reqs {
        comm.wait_send(req)?;
    }
    if let Some(why) = bad_request.or(bad_reply) {
        return Ok(Err(format!("fetching ghost rows: {why}")));
    }
    for (cols, vals) in got {
        out.cols.extend_from_slice(&cols);
        out.vals.extend_from_slice(&vals);
        out.indptr.push(out.cols.len());
    }
    Ok(Ok(()))
}

/// One rank's matrix powers plan of depth `k` on its device `D` (built on the host,
/// [`MatrixPowers<Cpu>`], then moved with [`MatrixPowers::to_device`]): ghost zone, local
/// CSR over it, one exchange, and the work vectors of a basis build (allocated once).
pub struct MatrixPowers<D: Device = Cpu> {
    depth: usize,
    n: usize,
    row_start: usize,
    n_local: usize,
    /// `level_end[l]`: number of extended slots of level `<= l`, `l = 0..=depth`.
    level_end: Vec<usize>,
    /// Entries of the local CSR's rows `0..level_end[l]`, `l = 0..depth`.
    nnz_to_level: Vec<usize>,
    /// Global index of every extended slot (owned slots included).
    globals: Vec<usize>,
    /// Local CSR of the rows of levels `0..depth` (`level_end[depth - 1]` rows).
    mat: D::Matrix,
    exchange: Staged<D>,
    /// The same exchange over the doubled index space: `[p owned | r owned]` to
    /// `[p ghosts | r ghosts]` (one message per neighbour carrying both vectors).
    pair_exchange: Staged<D>,
    /// Owned values of the two start vectors of a pair build (`2 n_local`).
    pair_src: D::Vector,
    /// Ghost values of the two start vectors of a pair build (`2 * ghost_count`).
    pair_ghosts: D::Vector,
    /// Inside a pair build: how many of its two staged start vectors [`MatrixPowers::apply`]
    /// has consumed (`None` outside a pair build: `apply` exchanges itself).
    staged: Option<usize>,
    /// Extended work vectors `s_0..s_depth`.
    work: Vec<D::Vector>,
    /// Extended `A s_j` of the current step.
    image: D::Vector,
    /// `local_per_build[k - 1]`: this rank's redundant flops of one build of size `k`.
    local_per_build: Vec<u64>,
    /// `total_per_build[k - 1]`: redundant flops of one build of size `k`, summed over all
    /// ranks.
    total_per_build: Vec<u64>,
    /// Redundant flops of all builds so far, summed over all ranks.
    redundant_flops: u64,
}

impl<D: Device> std::fmt::Debug for MatrixPowers<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatrixPowers")
            .field("depth", &self.depth)
            .field("row_start", &self.row_start)
            .field("n_local", &self.n_local)
            .field("level_end", &self.level_end)
            .field("redundant_flops", &self.redundant_flops)
            .finish()
    }
}

impl MatrixPowers<Cpu> {
    /// Build this rank's plan of depth `k` from the global matrix `a` (CSR; every rank
    /// passes the same matrix and partition). Collective: every rank of `comm` must call it
    /// (one count reduction and one message per communicating pair to agree on the
    /// pattern, plus the validation of [`castack_neighbor::Exchange::new`] for the single
    /// exchange and for the pair exchange of [`MatrixPowers::apply_pair`]).
    ///
    /// The matrix is unscaled; a solver with Jacobi scaling calls
    /// [`MatrixPowers::scale_symmetric`] (done by `castack_krylov::Solver::with_mpk`).
    pub fn from_global<C: Communicator + ?Sized>(
        comm: &C,
        a: CsMatView<'_, f64>,
        part: &Partition,
        k: usize,
    ) -> Result<Self, LinalgError> {
        Self::from_global_with(comm, a, part, k, Strategy::Naive)
    }

    /// [`MatrixPowers::from_global`] with its ghost-zone exchanges run by `strategy`
    /// (e.g. segmented over several devices, as the SpMV halo of
    /// [`crate::DistCsr::from_global_with`]); the values moved are the same.
    pub fn from_global_with<C: Communicator + ?Sized>(
        comm: &C,
        a: CsMatView<'_, f64>,
        part: &Partition,
        k: usize,
        strategy: Strategy,
    ) -> Result<Self, LinalgError> {
        let g = super::global_rows(comm, a, part)?;
        if k == 0 || k > crate::K_MAX {
            return Err(LinalgError::InvalidConfig(format!(
                "matrix powers depth k must be within 1..={} (got {k})",
                crate::K_MAX
            )));
        }
        let n = g.n;
        if n > u32::MAX as usize {
            return Err(LinalgError::TooLarge { n });
        }
        let (range, gptr, gcols, gvals) = (g.range, g.indptr, g.cols, g.vals);
        let n_local = range.len();

        // Breadth-first levels from the owned rows.
        let mut level = vec![UNSEEN; n];
        let mut globals: Vec<usize> = range.clone().collect();
        for g in range.clone() {
            level[g] = 0;
        }
        let mut level_end = vec![n_local];
        for l in 1..=k {
            let first = if l == 1 { 0 } else { level_end[l - 2] };
            let mut next = Vec::new();
            for &g in &globals[first..level_end[l - 1]] {
                for &j in &gcols[gptr[g]..gptr[g + 1]] {
                    if level[j] == UNSEEN {
                        level[j] = l as u32;
                        next.push(j);
                    }
                }
            }
            next.sort_unstable();
            globals.extend_from_slice(&next);
            level_end.push(globals.len());
        }
        // Slot of every global index in the zone.
        let mut slot = vec![UNSEEN; n];
        for (i, &g) in globals.iter().enumerate() {
            slot[g] = i as u32;
        }
        let mat = zone_csr(
            level_end[k - 1],
            |i| {
                let g = globals[i];
                let (lo, hi) = (gptr[g], gptr[g + 1]);
                (&gcols[lo..hi], &gvals[lo..hi])
            },
            |j| slot[j],
        );
        let zone = Zone {
            globals,
            level_end,
            mat,
        };
        Self::from_zone(comm, n, part, k, zone, strategy)
    }

    /// Build this rank's plan of depth `k` from ONLY its own rows (global columns; the
    /// rows of `part.range(rank)`, with `part` the same on every rank, e.g. the partition
    /// [`DistCsr::from_local_rows`] returned): the ghost zone is found level by level, each
    /// rank fetching the rows of levels `1..k` from their owners, so no rank ever holds
    /// more than its rows and its ghost zone (the slots of ghost rows are kept in a hash
    /// map, not in an array of the global order). The plan equals
    /// [`MatrixPowers::from_global_with`]'s on the same matrix and partition, bit for bit
    /// (same levels, same row order, same values).
    ///
    /// Collective. Cost beyond [`MatrixPowers::from_global_with`]: per level `1..k`, the
    /// pattern of that level's rows (`halo_pattern`: one reduction of 3P words, or P^2
    /// where readers are not owners), one message per communicating pair carrying the rows
    /// (8 bytes per row and 16 per entry), and one one-word reduction agreeing that every
    /// fetch succeeded; plus three one-word reductions agreeing on the input checks.
    ///
    /// # Errors
    /// [`LinalgError::InvalidConfig`] on EVERY rank when any rank's rows are malformed, do
    /// not match its range of `part`, or `k` is outside `1..=K_MAX`;
    /// [`LinalgError::TooLarge`] past 32-bit columns; communication errors.
    pub fn from_local_rows<C: Communicator + ?Sized>(
        comm: &C,
        rows: LocalRows<'_>,
        part: &Partition,
        k: usize,
        strategy: Strategy,
    ) -> Result<Self, LinalgError> {
        let (me, n) = (comm.rank(), part.n());
        agree(
            comm,
            if k == 0 || k > crate::K_MAX {
                Err(format!(
                    "matrix powers depth k must be within 1..={} (got {k})",
                    crate::K_MAX
                ))
            } else if part.ranks() != comm.size() {
                Err(format!(
                    "the partition has {} parts for {} ranks",
                    part.ranks(),
                    comm.size()
                ))
            } else {
                Ok(())
            },
        )?;
        // Only now: `part.range` indexes the partition by this rank.
        let range = part.range(me);
        let (row_start, n_local) = (range.start, range.len());
        agree(
            comm,
            rows.check_shape().and_then(|()| {
                let got = rows.indptr.len() - 1;
                if got == n_local {
                    Ok(())
                } else {
                    Err(format!(
                        "{got} rows, but the partition gives this rank {n_local} (rows                          {row_start}..{})",
                        range.end
                    ))
                }
            }),
        )?;
        agree(comm, rows.check_columns(n))?;
        if n > u32::MAX as usize {
            return Err(LinalgError::TooLarge { n });
        }

        // The zone's rows: owned ones in `rows`, fetched ghost rows (levels 1..k-1, in
        // zone order) in `ghost`.
        let mut ghost = FetchedRows::default();
        let first = rows.indptr[0];
        let row = |ghost: &FetchedRows, i: usize| -> (std::ops::Range<usize>, bool) {
            if i < n_local {
                (rows.indptr[i] - first..rows.indptr[i + 1] - first, true)
            } else {
                let t = i - n_local;
                (ghost.indptr[t]..ghost.indptr[t + 1], false)
            }
        };
        let mut slot: HashMap<usize, u32> = HashMap::new();
        let mut globals: Vec<usize> = range.clone().collect();
        let mut level_end = vec![n_local];
        for l in 1..=k {
            let from = if l == 1 { 0 } else { level_end[l - 2] };
            let mut next = Vec::new();
            for i in from..level_end[l - 1] {
                let (span, owned) = row(&ghost, i);
                let cols = if owned {
                    &rows.cols[span]
                } else {
                    &ghost.cols[span]
                };
                for &j in cols {
                    if !range.contains(&j) && !slot.contains_key(&j) {
                        slot.insert(j, UNSEEN);
                        next.push(j);
                    }
                }
            }
            next.sort_unstable();
            for (t, &g) in next.iter().enumerate() {
                slot.insert(g, (globals.len() + t) as u32);
            }
            globals.extend_from_slice(&next);
            level_end.push(globals.len());
            if l < k {
                let fetched = fetch_rows(comm, part, row_start, &rows, &next, &mut ghost)?;
                agree(comm, fetched)?;
            }
        }

        let mat = zone_csr(
            level_end[k - 1],
            |i| {
                let (span, owned) = row(&ghost, i);
                if owned {
                    (&rows.cols[span.clone()], &rows.vals[span])
                } else {
                    (&ghost.cols[span.clone()], &ghost.vals[span])
                }
            },
            |j| {
                if range.contains(&j) {
                    (j - row_start) as u32
                } else {
                    slot[&j]
                }
            },
        );
        drop(ghost);
        let zone = Zone {
            globals,
            level_end,
            mat,
        };
        Self::from_zone(comm, n, part, k, zone, strategy)
    }

    /// The plan of a ghost zone found breadth-first (by either constructor): its exchanges
    /// and work vectors.
    fn from_zone<C: Communicator + ?Sized>(
        comm: &C,
        n: usize,
        part: &Partition,
        k: usize,
        zone: Zone,
        strategy: Strategy,
    ) -> Result<Self, LinalgError> {
        let Zone {
            globals,
            level_end,
            mat,
        } = zone;
        let HostCsr {
            indptr, cols, vals, ..
        } = mat;
        let range = part.range(comm.rank());
        let (row_start, n_local) = (range.start, range.len());
        let n_ext = globals.len();
        let computed = level_end[k - 1];
        debug_assert_eq!(indptr.len(), computed + 1);

        // ONE exchange for all ghost levels: the pattern of the sorted ghost list, with
        // the receive indices mapped back to the level-ordered slots.
        let mut by_global: Vec<(usize, usize)> = globals[n_local..]
            .iter()
            .enumerate()
            .map(|(i, &g)| (g, i))
            .collect();
        by_global.sort_unstable();
        let sorted: Vec<usize> = by_global.iter().map(|&(g, _)| g).collect();
        let mut pattern = halo_pattern(comm, part, row_start, &sorted)?;
        for (_, idx) in &mut pattern.recvs {
            for i in idx.iter_mut() {
                *i = by_global[*i].1;
            }
        }
        let n_ghost = n_ext - n_local;
        // The pair exchange: every list doubled, the second half shifted to the second
        // vector's block (source by `n_local`, destination by `n_ghost`).
        let double = |lists: &[(usize, Vec<usize>)], shift: usize| -> Vec<(usize, Vec<usize>)> {
            lists
                .iter()
                .map(|(rank, idx)| {
                    let both = idx.iter().copied().chain(idx.iter().map(|&i| i + shift));
                    (*rank, both.collect())
                })
                .collect()
        };
        let pair_pattern = ExchangePattern {
            sends: double(&pattern.sends, n_local),
            recvs: double(&pattern.recvs, n_ghost),
        };
        let exchange = Staged::new(comm, &pattern, n_local, strategy)?;
        let pair_exchange = Staged::new(comm, &pair_pattern, 0, strategy)?;
        let local_per_build: Vec<u64> = (1..=k)
            .map(|kk| local_flops(&indptr, &level_end, n_local, kk))
            .collect();
        let mut totals: Vec<i64> = local_per_build.iter().map(|&f| f as i64).collect();
        comm.allreduce_i64(&mut totals, Op::Sum)?;
        let nnz_to_level = level_end[..k].iter().map(|&e| indptr[e]).collect();
        Ok(Self {
            depth: k,
            n,
            row_start,
            n_local,
            level_end,
            nnz_to_level,
            globals,
            mat: HostCsr {
                indptr,
                cols,
                vals,
                ncols: n_ext,
            },
            exchange,
            pair_exchange,
            pair_src: vec![0.0; 2 * n_local],
            pair_ghosts: vec![0.0; 2 * n_ghost],
            staged: None,
            work: (0..=k).map(|_| vec![0.0; n_ext]).collect(),
            image: vec![0.0; computed],
            local_per_build,
            total_per_build: totals.into_iter().map(|t| t as u64).collect(),
            redundant_flops: 0,
        })
    }

    /// Symmetric scaling `A <- S A S` of the local rows with `s_owned` (this rank's scale
    /// factors, the same as given to [`DistCsr::scale_symmetric`]): the ghost zone's factors
    /// come from their owners in one setup exchange (counted by [`SolverComm::halo`]).
    ///
    /// # Panics
    ///
    /// When `s_owned.len()` differs from the number of owned rows.
    #[track_caller]
    pub fn scale_symmetric<C: Communicator + ?Sized>(
        &mut self,
        sc: &mut SolverComm<'_, C>,
        s_owned: &[f64],
    ) -> Result<(), LinalgError> {
        assert_eq!(s_owned.len(), self.n_local, "scale factors: wrong length");
        let mut ext = std::mem::take(&mut self.work[0]);
        ext[..self.n_local].copy_from_slice(s_owned);
        let done = self.exchange.exchange_host(sc, s_owned, &mut ext);
        if done.is_ok() {
            let m = &mut self.mat;
            for i in 0..m.indptr.len() - 1 {
                for k in m.indptr[i]..m.indptr[i + 1] {
                    m.vals[k] = scaled_entry(m.vals[k], ext[i], ext[m.cols[k] as usize]);
                }
            }
        }
        self.work[0] = ext;
        done
    }

    /// This plan on `dev`: its local CSR moved there once, its exchanges' index lists,
    /// staging buffers and work vectors allocated there.
    pub fn to_device<D: Device>(self, dev: &mut D) -> Result<MatrixPowers<D>, LinalgError> {
        let n_ext = self.globals.len();
        let computed = self.level_end[self.depth - 1];
        let work = (0..=self.depth)
            .map(|_| dev.zeros(n_ext.max(1)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MatrixPowers {
            depth: self.depth,
            n: self.n,
            row_start: self.row_start,
            n_local: self.n_local,
            level_end: self.level_end,
            nnz_to_level: self.nnz_to_level,
            globals: self.globals,
            mat: dev.upload_csr(self.mat)?,
            exchange: self.exchange.upload(dev)?,
            pair_exchange: self.pair_exchange.upload(dev)?,
            pair_src: dev.zeros((2 * self.n_local).max(1))?,
            pair_ghosts: dev.zeros((2 * (n_ext - self.n_local)).max(1))?,
            staged: None,
            work,
            image: dev.zeros(computed.max(1))?,
            local_per_build: self.local_per_build,
            total_per_build: self.total_per_build,
            redundant_flops: 0,
        })
    }
}

impl<D: Device> MatrixPowers<D> {
    /// The depth `k`: the largest basis size one build serves.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Global number of rows.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Rows owned by this rank.
    pub fn n_local(&self) -> usize {
        self.n_local
    }

    /// First global row of this rank.
    pub fn row_start(&self) -> usize {
        self.row_start
    }

    /// Number of ghost values per level `1..=k` (the ghost zone, level by level).
    pub fn level_sizes(&self) -> Vec<usize> {
        self.level_end.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// Bytes of this rank's matrix powers data as its builds read them: the local rows of
    /// every level (the [`crate::device::work`] conventions) and the extended work vectors
    /// `s_0..s_depth` and image.
    pub fn held_bytes(&self) -> u64 {
        let nnz = self.nnz_to_level.last().copied().unwrap_or(0) as u64;
        let rows = self.level_end[self.depth.saturating_sub(1)] as u64;
        let ext = self.globals.len() as u64;
        12 * nnz + 8 * (rows + 1) + 8 * ext * (self.depth as u64 + 2)
    }

    /// Ghost values filled by the one exchange (all levels).
    pub fn ghost_count(&self) -> usize {
        self.globals.len() - self.n_local
    }

    /// Global indices of the extended vector's slots: owned, then level 1, ..., level k.
    pub fn globals(&self) -> &[usize] {
        &self.globals
    }

    /// Values this rank sends per exchange.
    pub fn send_values(&self) -> usize {
        self.exchange.send_values()
    }

    /// Values this rank sends per pair exchange ([`MatrixPowers::apply_pair`]): twice
    /// [`MatrixPowers::send_values`], in the same messages.
    pub fn pair_send_values(&self) -> usize {
        self.pair_exchange.send_values()
    }

    /// This rank's redundant flops of one basis build of size `k` (`2 * nnz` of the
    /// non-owned rows it computes over the `k` steps).
    ///
    /// # Panics
    ///
    /// When `k` is 0 or exceeds the depth.
    #[track_caller]
    pub fn local_redundant_flops_per_build(&self, k: usize) -> u64 {
        assert!(k >= 1 && k <= self.depth, "basis size outside 1..=depth");
        self.local_per_build[k - 1]
    }

    /// Redundant flops of one basis build of size `k`, summed over all ranks (the same
    /// on every rank).
    ///
    /// # Panics
    ///
    /// When `k` is 0 or exceeds the depth.
    #[track_caller]
    pub fn redundant_flops_per_build(&self, k: usize) -> u64 {
        assert!(k >= 1 && k <= self.depth, "basis size outside 1..=depth");
        self.total_per_build[k - 1]
    }

    /// Redundant flops of all builds so far, summed over all ranks (the same on every
    /// rank, like the report's other counters).
    pub fn redundant_flops(&self) -> u64 {
        self.redundant_flops
    }

    /// An s-step basis of size `k <= depth` from `s[0]`'s owned values: fills the owned
    /// values of `s[1..=k]` and `a_s[0..k]` (`a_s[j] = A s[j]`) with ONE counted exchange
    /// and `k` local SpMVs on the shrinking ghost zone. `step(j)` is the recurrence that
    /// makes `s_{j+1}` from `A s_j`, `s_j` and `s_{j-1}` ([`BasisStep`]; see
    /// `castack_krylov`'s `SStepBasis::build_mpk`). Only owned values are written; the ghost
    /// slots of the [`DistVec`]s are left alone. Collective; allocates nothing.
    ///
    /// # Panics
    ///
    /// When `k` is 0 or exceeds the depth, `s.len() < k + 1`, `a_s.len() < k`, or a
    /// vector's owned length differs from the plan's.
    #[track_caller]
    pub fn apply<C, F>(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        k: usize,
        s: &mut [DistVec<D>],
        a_s: &mut [DistVec<D>],
        step: F,
    ) -> Result<(), LinalgError>
    where
        C: Communicator + ?Sized,
        F: Fn(usize) -> BasisStep,
    {
        assert!(k >= 1 && k <= self.depth, "basis size outside 1..=depth");
        assert!(s.len() > k && a_s.len() >= k, "basis: too few work vectors");
        assert_eq!(s[0].n_local(), self.n_local, "basis: wrong vector layout");
        let nl = self.n_local;
        let ng = self.globals.len() - nl;
        // Inside a pair build: the ghost values of this start vector came with the pair
        // exchange (p's first, then r's); the start must be the vector exchanged.
        let staged = self.staged;
        if let Some(i) = staged {
            assert!(i < 2, "apply_pair: more than two builds in one pair build");
        }
        let mut work = std::mem::take(&mut self.work);
        let done = (|| -> Result<(), LinalgError> {
            ops.run(Bucket::Blas, work::copy(nl), |d, _| {
                d.copy(nl, s[0].raw(), 0, &mut work[0], 0)
            })?;
            match staged {
                Some(i) => {
                    let src = &self.pair_ghosts;
                    ops.run(Bucket::Halo, work::copy(ng), |d, _| {
                        d.copy(ng, src, i * ng, &mut work[0], nl)
                    })?;
                    self.staged = Some(i + 1);
                }
                None => self.exchange.exchange_within(ops, &mut work[0])?,
            }
            for j in 0..k {
                let m = self.level_end[k - 1 - j];
                let w = work::spmv(m, self.nnz_to_level[k - 1 - j], self.globals.len());
                let (mat, image) = (&self.mat, &mut self.image);
                let sj = &work[j];
                ops.run(Bucket::Spmv, w, |d, _| d.spmv(mat, m, sj, image))?;
                let image = &self.image;
                ops.run(Bucket::Blas, work::copy(nl), |d, _| {
                    d.copy(nl, image, 0, a_s[j].raw_mut(), 0)
                })?;
                let (done_s, rest) = work.split_at_mut(j + 1);
                let prev = j.checked_sub(1).map(|i| &done_s[i]);
                ops.basis_step(m, step(j), image, &done_s[j], prev, &mut rest[0])?;
                let next = &rest[0];
                ops.run(Bucket::Blas, work::copy(nl), |d, _| {
                    d.copy(nl, next, 0, s[j + 1].raw_mut(), 0)
                })?;
            }
            Ok(())
        })();
        if done.is_ok() {
            self.redundant_flops += self.total_per_build[k - 1];
        }
        self.work = work;
        done
    }

    /// Two s-step bases from two start vectors with ONE counted exchange: `p.0[0]`'s basis
    /// of size `k` into `p.0[1..=k]`, `p.1[0..k]` and `r.0[0]`'s basis of size `k - 1` into
    /// `r.0[1..k]`, `r.1[0..k-1]` (CA-CG's `P` and `R`), `step` as in
    /// [`MatrixPowers::apply`] (for `p`'s steps, then `r`'s). The ghost values of both start
    /// vectors travel in one message per neighbour ([`MatrixPowers::apply_pair_with`]); the
    /// results are bit-identical to `apply(k, p)` followed by `apply(k - 1, r)`, which cost
    /// two exchanges. At `k = 1` `r`'s basis is empty and only `p` is exchanged (one plain
    /// [`MatrixPowers::apply`]). Collective; allocates nothing.
    ///
    /// # Panics
    ///
    /// As [`MatrixPowers::apply`] for either basis.
    #[track_caller]
    pub fn apply_pair<C, F>(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        k: usize,
        p: (&mut [DistVec<D>], &mut [DistVec<D>]),
        r: (&mut [DistVec<D>], &mut [DistVec<D>]),
        step: F,
    ) -> Result<(), LinalgError>
    where
        C: Communicator + ?Sized,
        F: Fn(usize) -> BasisStep,
    {
        let ((p_s, p_as), (r_s, r_as)) = (p, r);
        if k == 1 {
            return self.apply(ops, 1, p_s, p_as, step);
        }
        self.apply_pair_with(ops, p_s, r_s, |m, ops, p_s, r_s| {
            m.apply(ops, k, p_s, p_as, &step)?;
            m.apply(ops, k - 1, r_s, r_as, &step)
        })
    }

    /// ONE counted exchange of the ghost values of `p_s[0]` and `r_s[0]` together (the
    /// pair exchange: one message per neighbour, twice the values of one exchange), then
    /// `build(self, ops, p_s, r_s)`, which must run exactly two builds through
    /// [`MatrixPowers::apply`] (for instance `castack_krylov`'s `SStepBasis::build_mpk`):
    /// the first from `p_s[0]`, the second from `r_s[0]` (the vectors exchanged; a build
    /// from another start would use their ghost values). Those builds take their ghost
    /// values from the pair exchange instead of exchanging, so they are bit-identical to
    /// the same builds run alone. Collective; allocates nothing.
    ///
    /// # Panics
    ///
    /// When a start vector's owned length differs from the plan's, or when `build` runs
    /// more or fewer than two builds (and returns `Ok`).
    #[track_caller]
    pub fn apply_pair_with<'c, C, B, E>(
        &mut self,
        ops: &mut Ops<'c, C, D>,
        p_s: &mut [DistVec<D>],
        r_s: &mut [DistVec<D>],
        build: B,
    ) -> Result<(), E>
    where
        C: Communicator + ?Sized,
        B: FnOnce(
            &mut Self,
            &mut Ops<'c, C, D>,
            &mut [DistVec<D>],
            &mut [DistVec<D>],
        ) -> Result<(), E>,
        E: From<LinalgError>,
    {
        let nl = self.n_local;
        assert!(self.staged.is_none(), "apply_pair: nested pair builds");
        assert!(
            p_s[0].n_local() == nl && r_s[0].n_local() == nl,
            "basis: wrong vector layout"
        );
        let src = &mut self.pair_src;
        ops.run(Bucket::Halo, work::copy(2 * nl), |d, _| {
            d.copy(nl, p_s[0].raw(), 0, src, 0)?;
            d.copy(nl, r_s[0].raw(), 0, src, nl)
        })?;
        self.pair_exchange
            .exchange(ops, &self.pair_src, &mut self.pair_ghosts)?;
        self.staged = Some(0);
        let done = build(self, ops, p_s, r_s);
        let used = self.staged.take();
        done?;
        assert_eq!(
            used,
            Some(2),
            "apply_pair: the build must run exactly two bases (p's, then r's)"
        );
        Ok(())
    }

    /// Whether this plan fits `a`'s rows (same matrix size and row block).
    pub fn fits<E: Device>(&self, a: &DistCsr<E>) -> bool {
        self.n == a.n() && self.row_start == a.row_start() && self.n_local == a.n_local()
    }
}

/// Redundant flops of one build of size `k` on one rank: step `j` computes the rows of
/// level `<= k - 1 - j`, `2 * nnz` each beyond the owned ones.
fn local_flops(indptr: &[usize], level_end: &[usize], n_local: usize, k: usize) -> u64 {
    (0..k)
        .map(|j| 2 * (indptr[level_end[k - 1 - j]] - indptr[n_local]) as u64)
        .sum()
}
