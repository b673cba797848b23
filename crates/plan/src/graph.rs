//! Per-rank quantities of a row partition, computed from the global CSR graph directly (no
//! distributed matrix is built, so P = 4096 ranks cost one pass over the graph per rank's
//! ghost zone).
//!
//! For rank r owning rows `part.range(r)`: level 0 is the owned rows; level `l` is every row
//! read (as a column) by a row of level `l - 1` and of no lower level, exactly the
//! breadth-first levels of [`crate::MatrixPowers`] (its module doc, "Ghost zone"). Level 1
//! is the depth-1 halo of [`crate::DistCsr`] (its ghost columns). Each ghost level records
//! its rows' owners, which gives the receive lists of the depth-k exchange (levels 1..=k
//! from their owners) and, transposed, every rank's sends.
//!
//! Cost: the sum over ranks of (zone rows x row length) edge visits, spread over the rayon
//! pool, with one stamp array of n u32 per worker.

use rayon::prelude::*;
use sprs::CsMatView;

use castack_krylov::Partition;

/// One level of a rank's ghost zone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Level {
    /// Rows (vector entries) in this level.
    pub rows: usize,
    /// Stored nonzeros of these rows (what computing them in a matrix powers step reads).
    pub nnz: usize,
    /// `(owner rank, values)` of the level's rows, ascending by rank (empty for level 0).
    pub owners: Vec<(usize, usize)>,
}

/// One rank's load: its owned rows (level 0) and ghost levels 1..=depth.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankGraph {
    /// `levels[0]`: owned rows; `levels[l]`: ghost level l.
    pub levels: Vec<Level>,
}

impl RankGraph {
    /// Owned rows.
    pub fn rows(&self) -> usize {
        self.levels[0].rows
    }

    /// Stored nonzeros of the owned rows.
    pub fn nnz(&self) -> usize {
        self.levels[0].nnz
    }

    /// Depth-1 ghosts (the SpMV halo).
    pub fn ghosts(&self) -> usize {
        self.levels.get(1).map_or(0, |l| l.rows)
    }

    /// Deepest level computed.
    pub fn depth(&self) -> usize {
        self.levels.len() - 1
    }

    /// Ghost values of levels `1..=k`, summed per owner rank (ascending): the receive
    /// lists of a depth-`k` exchange.
    pub fn recvs(&self, k: usize) -> Vec<(usize, usize)> {
        let mut all: Vec<(usize, usize)> = self.levels[1..=k.min(self.depth())]
            .iter()
            .flat_map(|l| l.owners.iter().copied())
            .collect();
        all.sort_unstable();
        let mut out: Vec<(usize, usize)> = Vec::new();
        for (q, c) in all {
            match out.last_mut() {
                Some((o, n)) if *o == q => *n += c,
                _ => out.push((q, c)),
            }
        }
        out
    }

    /// Rows (owned and ghost) of levels `0..=l`.
    pub fn rows_through(&self, l: usize) -> usize {
        self.levels[..=l.min(self.depth())]
            .iter()
            .map(|v| v.rows)
            .sum()
    }

    /// Stored nonzeros of the rows of levels `0..=l`.
    pub fn nnz_through(&self, l: usize) -> usize {
        self.levels[..=l.min(self.depth())]
            .iter()
            .map(|v| v.nnz)
            .sum()
    }

    /// Redundant flops of one matrix powers build of size `b` (`b <= depth`): `2 * nnz` of
    /// the non-owned rows computed in steps `j = 0..b` (rows of level `1..=b - 1 - j`), as
    /// [`crate::MatrixPowers::local_redundant_flops_per_build`] counts them.
    pub fn redundant_flops(&self, b: usize) -> u64 {
        (0..b)
            .map(|j| 2 * (self.nnz_through(b - 1 - j) - self.nnz()) as u64)
            .sum()
    }
}

/// Every rank's levels `0..=depth` for the partition `part` of the square matrix `a`.
pub fn rank_graphs(a: CsMatView<'_, f64>, part: &Partition, depth: usize) -> Vec<RankGraph> {
    let n = a.rows();
    let indptr = a.indptr();
    let indptr = indptr.raw_storage();
    let cols = a.indices();
    (0..part.ranks())
        .into_par_iter()
        .map_init(
            || vec![0u32; n],
            |stamp, r| zone(indptr, cols, part, r, depth, stamp),
        )
        .collect()
}

/// Rank `r`'s levels by breadth-first search; `stamp[j] == r + 1` marks rows seen (each
/// rank is visited once per worker, so stale stamps of other ranks never collide).
fn zone(
    indptr: &[usize],
    cols: &[usize],
    part: &Partition,
    r: usize,
    depth: usize,
    stamp: &mut [u32],
) -> RankGraph {
    let mark = r as u32 + 1;
    let range = part.range(r);
    let row_nnz = |g: usize| indptr[g + 1] - indptr[g];
    let mut frontier: Vec<usize> = range.clone().collect();
    for &g in &frontier {
        stamp[g] = mark;
    }
    let mut levels = vec![Level {
        rows: frontier.len(),
        nnz: frontier.iter().map(|&g| row_nnz(g)).sum(),
        owners: Vec::new(),
    }];
    for _ in 1..=depth {
        let mut next = Vec::new();
        for &g in &frontier {
            for &j in &cols[indptr[g]..indptr[g + 1]] {
                if stamp[j] != mark {
                    stamp[j] = mark;
                    next.push(j);
                }
            }
        }
        next.sort_unstable();
        let mut owners: Vec<(usize, usize)> = Vec::new();
        for &g in &next {
            let q = part.owner(g);
            match owners.last_mut() {
                Some((o, c)) if *o == q => *c += 1,
                _ => owners.push((q, 1)),
            }
        }
        levels.push(Level {
            rows: next.len(),
            nnz: next.iter().map(|&g| row_nnz(g)).sum(),
            owners,
        });
        frontier = next;
    }
    RankGraph { levels }
}

/// Values each rank sends in a depth-`depth` exchange: the transpose of every rank's
/// receive lists ([`RankGraph::recvs`]).
pub fn send_counts(graphs: &[RankGraph], depth: usize) -> Vec<usize> {
    let mut out = vec![0; graphs.len()];
    for g in graphs {
        for (q, c) in g.recvs(depth) {
            out[q] += c;
        }
    }
    out
}
