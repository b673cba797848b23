//! Halo exchange for block-decomposed structured grids (ALGORITHMS.md section 2, halo
//! exchange; the DS-CUDA 3-D Euler code's z-split with a 2-cell halo and 5 fields).
//!
//! A [`ProcessGrid`] of `px x py x pz` ranks (x fastest), periodic or not per dimension,
//! splits a global grid into blocks; each rank holds a [`Block`]: `fields` arrays of its
//! owned cells plus ghost layers of width `h` on every side (one buffer, field after field,
//! x fastest). A [`Halo`] exchanges the faces (not edges or corners: axis-aligned stencils
//! such as the 13-point one need faces only) of every field with the face neighbours: the
//! `h` owned layers next to a face go to the neighbour across it and land in its ghost
//! layers. A periodic dimension of one rank makes a rank its own neighbour (a local copy);
//! of two ranks, its neighbour on both sides (one merged message each way).
//!
//! Faces reach the [`Exchange`] in one of three [`Packing`]s: `gather` hands the exchange
//! the face cells' indices (it packs value by value into its contiguous message buffer);
//! `batched` first copies the faces' contiguous runs (x-rows, whole planes for z-faces)
//! into one contiguous send buffer with [`copy_many`] (concurrent) and unpacks the same way;
//! `staged` does those copies one after another through a staging buffer. All three move
//! the same values; they differ only in how the faces are packed.
//!
//! Overlap: [`Halo::start`] packs and posts the faces; the caller computes the interior
//! that needs no ghost ([`Block::interior`]), then [`Halo::finish`] and the boundary.
//!
//! Cost per exchange: per field and face, `h` layers of the face's cells, 8 bytes each, in
//! one message per distinct neighbour (all fields and both faces to one rank merged).

use std::ops::Range;

use castack_collectives::{Collectives, Communicator, Op};

use crate::copy::{copy_many, copy_staged, CopyOp};
use crate::error::{NeighborError, Side};
use crate::exchange::Exchange;
use crate::mode::Mode;
use crate::pattern::ExchangePattern;
use crate::strategy::Strategy;

/// Ranks arranged as a 3-D grid (x fastest: rank = x + px*(y + py*z)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessGrid {
    /// Ranks per dimension.
    pub procs: [usize; 3],
    /// Whether each dimension wraps around.
    pub periodic: [bool; 3],
}

impl ProcessGrid {
    /// `p` ranks split along z only (slabs), x and y not exchanged.
    pub fn slabs(p: usize, periodic_z: bool) -> Self {
        Self {
            procs: [1, 1, p],
            periodic: [false, false, periodic_z],
        }
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.procs.iter().product()
    }

    /// Grid coordinates of `rank`.
    pub fn coords(&self, rank: usize) -> [usize; 3] {
        let [px, py, _] = self.procs;
        [rank % px, (rank / px) % py, rank / (px * py)]
    }

    /// The rank at grid coordinates `c`.
    pub fn rank_of(&self, c: [usize; 3]) -> usize {
        c[0] + self.procs[0] * (c[1] + self.procs[1] * c[2])
    }

    /// The face neighbour of `rank` in dimension `dim` on the `high` (or low) side; `None`
    /// at a non-periodic boundary.
    pub fn neighbor(&self, rank: usize, dim: usize, high: bool) -> Option<usize> {
        let mut c = self.coords(rank);
        let n = self.procs[dim];
        c[dim] = match (high, c[dim]) {
            (true, x) if x + 1 < n => x + 1,
            (true, _) if self.periodic[dim] => 0,
            (false, x) if x > 0 => x - 1,
            (false, _) if self.periodic[dim] => n - 1,
            _ => return None,
        };
        Some(self.rank_of(c))
    }

    /// The block of a global grid of `global` cells owned by `rank`: per dimension its
    /// global cell range (contiguous blocks, the first `n mod parts` one cell longer).
    pub fn owned_range(&self, rank: usize, global: [usize; 3]) -> [Range<usize>; 3] {
        let c = self.coords(rank);
        std::array::from_fn(|d| block_range(global[d], self.procs[d], c[d]))
    }
}

/// Cells `i` of `n` split into `parts` contiguous blocks, the first `n mod parts` one longer.
pub fn block_range(n: usize, parts: usize, i: usize) -> Range<usize> {
    let (base, extra) = (n / parts.max(1), n % parts.max(1));
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

/// One rank's cells: `fields` arrays of `owned` cells padded by `ghost` layers on every
/// side, stored field after field, x fastest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Owned cells per dimension.
    pub owned: [usize; 3],
    /// Ghost width h.
    pub ghost: usize,
    /// Number of fields.
    pub fields: usize,
}

impl Block {
    /// Cells per dimension including ghosts.
    pub fn padded(&self) -> [usize; 3] {
        self.owned.map(|n| n + 2 * self.ghost)
    }

    /// Values of one field (padded).
    pub fn field_len(&self) -> usize {
        self.padded().iter().product()
    }

    /// Values of all fields.
    pub fn len(&self) -> usize {
        self.fields * self.field_len()
    }

    /// Whether the block holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Index of field `f` at padded coordinates `(x, y, z)` (owned cells start at `ghost`).
    pub fn index(&self, f: usize, x: usize, y: usize, z: usize) -> usize {
        let [px, py, _] = self.padded();
        f * self.field_len() + (z * py + y) * px + x
    }

    /// Padded z-range of the owned cells whose stencil of reach `ghost` in z needs no ghost
    /// cell (empty when the block is thinner than `2 * ghost`); the rest of the owned range
    /// is the two boundary slabs.
    pub fn interior(&self) -> Range<usize> {
        let h = self.ghost;
        let end = h + self.owned[2];
        (2 * h).min(end.saturating_sub(h))..end.saturating_sub(h)
    }

    /// Indices, field by field, z then y then x, of the box `r` (padded coordinates).
    fn box_indices(&self, r: &[Range<usize>; 3], out: &mut Vec<usize>) {
        for f in 0..self.fields {
            for z in r[2].clone() {
                for y in r[1].clone() {
                    out.extend(r[0].clone().map(|x| self.index(f, x, y, z)));
                }
            }
        }
    }
}

/// How faces are packed into contiguous messages; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Packing {
    /// The exchange gathers the face cells value by value.
    #[default]
    Gather,
    /// Contiguous runs copied concurrently into one buffer ([`copy_many`]).
    Batched,
    /// Contiguous runs copied one after another through a staging buffer.
    Staged,
}

impl Packing {
    /// Every packing.
    pub const ALL: &'static [Packing] = &[Packing::Gather, Packing::Batched, Packing::Staged];

    /// The snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Packing::Gather => "gather",
            Packing::Batched => "batched",
            Packing::Staged => "staged",
        }
    }

    /// One line on the packing.
    pub fn description(self) -> &'static str {
        match self {
            Packing::Gather => "the exchange gathers face cells value by value",
            Packing::Batched => "face runs copied concurrently into one contiguous buffer",
            Packing::Staged => "face runs copied one after another through a staging buffer",
        }
    }
}

castack_collectives::impl_registry!(Packing, "face packing");

/// Buffers and copy lists of the `batched` and `staged` packings.
#[derive(Debug)]
struct Packed {
    send: Vec<f64>,
    recv: Vec<f64>,
    stage: Vec<f64>,
    /// Block -> send buffer.
    pack: Vec<CopyOp>,
    /// Receive buffer -> block (sorted by destination).
    unpack: Vec<CopyOp>,
}

/// A persistent face exchange of a [`Block`] on a [`ProcessGrid`]; see the module
/// documentation.
#[derive(Debug)]
pub struct Halo {
    block: Block,
    packing: Packing,
    exchange: Exchange,
    packed: Option<Packed>,
}

/// Runs of consecutive values in `idx`, as copies from `idx` positions (offset `base` in
/// the buffer) into the block (`to_block`) or the other way.
fn runs(idx: &[usize], base: usize, to_block: bool, out: &mut Vec<CopyOp>) {
    let mut k = 0;
    while k < idx.len() {
        let mut len = 1;
        while k + len < idx.len() && idx[k + len] == idx[k] + len {
            len += 1;
        }
        let (block, buf) = (idx[k], base + k);
        out.push(if to_block {
            CopyOp {
                dst: block,
                src: buf,
                len,
            }
        } else {
            CopyOp {
                dst: buf,
                src: block,
                len,
            }
        });
        k += len;
    }
}

impl Halo {
    /// Build the face exchange of this rank's `block` on `grid` (collective over `comm`,
    /// whose size must be `grid.size()`).
    ///
    /// Errors (on every rank): [`NeighborError::ProcessGrid`] for a size mismatch,
    /// [`NeighborError::GridTooThin`] (the thin rank; the others
    /// [`NeighborError::PeerInvalid`]) when a block has fewer owned cells than `ghost` in a
    /// dimension with a neighbour, or an exchange construction error (e.g. face sizes that
    /// differ between neighbours: [`NeighborError::CountMismatch`]).
    pub fn new<C: Communicator + ?Sized>(
        comm: &C,
        grid: &ProcessGrid,
        block: Block,
        strategy: Strategy,
        mode: Mode,
        packing: Packing,
    ) -> Result<Self, NeighborError> {
        let (rank, size) = (comm.rank(), comm.size());
        if grid.size() != size {
            return Err(NeighborError::ProcessGrid {
                procs: grid.procs,
                size,
            });
        }
        let h = block.ghost;
        let thin = (0..3).find(|&d| {
            let has =
                grid.neighbor(rank, d, false).is_some() || grid.neighbor(rank, d, true).is_some();
            has && h > 0 && block.owned[d] < h
        });
        let mut flags = vec![0i64; size];
        flags[rank] = i64::from(thin.is_some());
        comm.allreduce_i64(&mut flags, Op::Sum)?;
        if let Some(dim) = thin {
            return Err(NeighborError::GridTooThin {
                rank,
                dim,
                owned: block.owned[dim],
                ghost: h,
            });
        }
        if let Some(peer) = flags.iter().position(|&f| f != 0) {
            return Err(NeighborError::PeerInvalid { rank, peer });
        }

        // Per (dim, side): my face goes to the neighbour on that side; the neighbour on the
        // other side's face lands in my ghost layers there. Both ends list the pieces in
        // the same (dim, side) order, so merged lists for a double neighbour match.
        let mut pattern = ExchangePattern::new();
        let n = block.owned;
        for d in 0..3 {
            for high in [false, true] {
                if h == 0 {
                    continue;
                }
                let owned: [Range<usize>; 3] = std::array::from_fn(|e| h..h + n[e]);
                if let Some(to) = grid.neighbor(rank, d, high) {
                    let mut face = owned.clone();
                    face[d] = if high { n[d]..n[d] + h } else { h..2 * h };
                    let mut idx = Vec::new();
                    block.box_indices(&face, &mut idx);
                    append(&mut pattern.sends, to, idx);
                }
                if let Some(from) = grid.neighbor(rank, d, !high) {
                    let mut ghost = owned;
                    ghost[d] = if high { 0..h } else { h + n[d]..n[d] + 2 * h };
                    let mut idx = Vec::new();
                    block.box_indices(&ghost, &mut idx);
                    append(&mut pattern.recvs, from, idx);
                }
            }
        }
        let len = block.len();
        let (exchange, packed) = match packing {
            Packing::Gather => (
                Exchange::with_mode(comm, pattern, len, len, strategy, mode)?,
                None,
            ),
            Packing::Batched | Packing::Staged => {
                let (mut pack, mut unpack) = (Vec::new(), Vec::new());
                let mut flat = ExchangePattern::new();
                let mut at = 0;
                for (to, idx) in &pattern.sends {
                    runs(idx, at, false, &mut pack);
                    flat.sends.push((*to, (at..at + idx.len()).collect()));
                    at += idx.len();
                }
                let send_len = at;
                at = 0;
                for (from, idx) in &pattern.recvs {
                    runs(idx, at, true, &mut unpack);
                    flat.recvs.push((*from, (at..at + idx.len()).collect()));
                    at += idx.len();
                }
                unpack.sort_unstable_by_key(|c| c.dst);
                let longest = pack.iter().chain(&unpack).map(|c| c.len).max().unwrap_or(0);
                let exchange = Exchange::with_mode(comm, flat, send_len, at, strategy, mode)?;
                let packed = Packed {
                    send: vec![0.0; send_len],
                    recv: vec![0.0; at],
                    stage: vec![0.0; longest],
                    pack,
                    unpack,
                };
                (exchange, Some(packed))
            }
        };
        Ok(Self {
            block,
            packing,
            exchange,
            packed,
        })
    }

    /// Pack the faces of `data` (the whole block) and post the exchange.
    pub fn start<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        data: &[f64],
    ) -> Result<(), NeighborError> {
        self.check_len(Side::Send, data.len())?;
        match (&mut self.packed, self.packing) {
            (None, _) => self.exchange.start(comm, data),
            (Some(p), packing) => {
                run_copies(packing, &mut p.send, data, &p.pack, &mut p.stage)?;
                self.exchange.start(comm, &p.send)
            }
        }
    }

    /// Wait for the faces and write them into the ghost layers of `data`.
    pub fn finish<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        data: &mut [f64],
    ) -> Result<(), NeighborError> {
        self.check_len(Side::Recv, data.len())?;
        match (&mut self.packed, self.packing) {
            (None, _) => self.exchange.finish(comm, data),
            (Some(p), packing) => {
                self.exchange.finish(comm, &mut p.recv)?;
                run_copies(packing, data, &p.recv, &p.unpack, &mut p.stage)
            }
        }
    }

    /// [`Halo::start`] then [`Halo::finish`] on one block buffer.
    pub fn exchange<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        data: &mut [f64],
    ) -> Result<(), NeighborError> {
        self.start(comm, data)?;
        self.finish(comm, data)
    }

    /// The block this halo was built for.
    pub fn block(&self) -> Block {
        self.block
    }

    /// The underlying neighbour exchange.
    pub fn neighbor_exchange(&self) -> &Exchange {
        &self.exchange
    }

    fn check_len(&self, side: Side, got: usize) -> Result<(), NeighborError> {
        let expected = self.block.len();
        if got != expected {
            return Err(NeighborError::SliceLength {
                side,
                expected,
                got,
            });
        }
        Ok(())
    }
}

/// Append `idx` to the list of `peer` (merging a neighbour met twice).
fn append(list: &mut Vec<(usize, Vec<usize>)>, peer: usize, idx: Vec<usize>) {
    match list.iter_mut().find(|(r, _)| *r == peer) {
        Some((_, l)) => l.extend(idx),
        None => list.push((peer, idx)),
    }
}

fn run_copies(
    packing: Packing,
    dst: &mut [f64],
    src: &[f64],
    copies: &[CopyOp],
    stage: &mut [f64],
) -> Result<(), NeighborError> {
    match packing {
        Packing::Staged => copy_staged(dst, src, copies, stage),
        Packing::Gather | Packing::Batched => copy_many(dst, src, copies),
    }
}
