//! Symmetric reorderings applied before partitioning: reverse Cuthill-McKee.
//!
//! Reference: A. George and J. W. H. Liu, *Computer Solution of Large Sparse Positive
//! Definite Systems*, Prentice-Hall, 1981, chapter 4 (RCM, and the pseudo-peripheral node
//! finder `FNROOT`); E. Cuthill and J. McKee, "Reducing the bandwidth of sparse symmetric
//! matrices", ACM '69.
//!
//! [`rcm`] works on the symmetric structure of `A + A^T` (values and the diagonal ignored).
//! Each connected component is numbered by a breadth-first search from a pseudo-peripheral
//! node found by George and Liu's repeated level structures: root the search at a node,
//! take a node of minimum degree in the last level, re-root there, and stop when the
//! number of levels no longer grows. Neighbours are visited in increasing degree, ties by
//! index, so the result is deterministic. The Cuthill-McKee order is reversed at the end.
//!
//! Cost: O(nnz log deg) time for sorting each adjacency list by degree (deg: the largest
//! degree), plus O(nnz) per level structure of the root search (a handful in practice);
//! O(n + nnz) memory.
//!
//! Why our own and not `sprs::linalg::reverse_cuthill_mckee` (measured 2026-11-27 on this
//! project's 2-core machine, 8 row blocks, the shared matrices and a scrambled 40^3
//! Poisson grid): sprs's is 1.4-35x faster (0.07-21 ms against 0.14-42 ms, a setup cost
//! either way) and the orders are equally good by bandwidth on 4 of 6 matrices, but
//! neither wins on what the solver pays, the ghosts of a halo exchange: ours has 8% fewer
//! on bcsstk08 (2741 against 2981), sprs's 2% fewer on s3rmt3m3 (1896 against 1930), the
//! rest are equal. Ours numbers the symmetric structure of `A + A^T` of CSR or CSC input
//! (sprs's walks the stored structure as given), and keeping it keeps every `--reorder rcm`
//! result of earlier releases bit for bit.
//!
//! What it buys: rows are split into contiguous blocks ([`crate::Partition`]), so a narrow band
//! means each rank's rows read few columns of other ranks, i.e. few ghost values per halo
//! exchange (`castack_krylov::DistCsr::ghost_count`).
//!
//! ```
//! use castack_sparse::gen;
//! use castack_sparse::reorder::{bandwidth, permute_symmetric, permute_vec, rcm, unpermute_vec};
//!
//! let a = gen::poisson2d(8)?;
//! let perm = rcm(a.view());
//! let b = permute_symmetric(a.view(), &perm);
//! assert!(bandwidth(b.view()) <= 8);
//! let x = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0].repeat(8);
//! assert_eq!(unpermute_vec(&perm, &permute_vec(&perm, &x)), x);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use serde::{Deserialize, Serialize};
use sprs::{CsMat, CsMatView};

use crate::MatrixError;

/// Reorderings (the registry behind `--reorder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reorder {
    /// Keep the given order.
    #[default]
    None,
    /// Reverse Cuthill-McKee ([`rcm`]).
    Rcm,
}

impl Reorder {
    /// Every reordering.
    pub const ALL: &'static [Reorder] = &[Reorder::None, Reorder::Rcm];

    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Reorder::None => "none",
            Reorder::Rcm => "rcm",
        }
    }

    /// One line for help texts.
    pub fn description(self) -> &'static str {
        match self {
            Reorder::None => "keep the given order",
            Reorder::Rcm => "reverse Cuthill-McKee (narrow band, few ghost columns)",
        }
    }

    /// The permutation this reordering picks for `a`; `None` for [`Reorder::None`].
    ///
    /// # Panics
    ///
    /// As [`rcm`].
    #[track_caller]
    pub fn permutation(self, a: CsMatView<'_, f64>) -> Option<Permutation> {
        match self {
            Reorder::None => None,
            Reorder::Rcm => Some(rcm(a)),
        }
    }
}

castack_base::impl_registry!(Reorder, "reordering");

/// A permutation of `0..n`: row (and column) `new` of the reordered matrix is row
/// `new_to_old[new]` of the original. Always a bijection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permutation {
    new_to_old: Vec<usize>,
    old_to_new: Vec<usize>,
}

impl Permutation {
    /// The identity on `0..n`.
    pub fn identity(n: usize) -> Self {
        Self {
            new_to_old: (0..n).collect(),
            old_to_new: (0..n).collect(),
        }
    }

    /// From the new-to-old map; an error unless it is a bijection of `0..len`.
    ///
    /// # Errors
    /// [`MatrixError::InvalidPermutation`] naming the first entry out of range or mapped twice.
    pub fn from_new_to_old(new_to_old: Vec<usize>) -> Result<Self, MatrixError> {
        let n = new_to_old.len();
        let mut old_to_new = vec![usize::MAX; n];
        for (new, &old) in new_to_old.iter().enumerate() {
            if old >= n {
                return Err(MatrixError::InvalidPermutation(format!(
                    "permutation entry {new} is {old}, outside 0..{n}"
                )));
            }
            if old_to_new[old] != usize::MAX {
                return Err(MatrixError::InvalidPermutation(format!(
                    "permutation maps both {} and {new} to {old}",
                    old_to_new[old]
                )));
            }
            old_to_new[old] = new;
        }
        Ok(Self {
            new_to_old,
            old_to_new,
        })
    }

    /// Number of elements permuted.
    pub fn len(&self) -> usize {
        self.new_to_old.len()
    }

    /// Whether it permutes nothing.
    pub fn is_empty(&self) -> bool {
        self.new_to_old.is_empty()
    }

    /// `new_to_old()[new]` is the original index of new index `new`.
    pub fn new_to_old(&self) -> &[usize] {
        &self.new_to_old
    }

    /// `old_to_new()[old]` is the new index of original index `old`.
    pub fn old_to_new(&self) -> &[usize] {
        &self.old_to_new
    }

    /// The inverse permutation.
    pub fn inverse(&self) -> Self {
        Self {
            new_to_old: self.old_to_new.clone(),
            old_to_new: self.new_to_old.clone(),
        }
    }
}

/// `x_new[new] = x_old[new_to_old[new]]`: a vector in the original order brought into
/// the reordered one.
///
/// # Panics
///
/// When `x_old.len() != perm.len()`.
#[track_caller]
pub fn permute_vec(perm: &Permutation, x_old: &[f64]) -> Vec<f64> {
    assert_eq!(x_old.len(), perm.len(), "vector length vs permutation");
    perm.new_to_old.iter().map(|&old| x_old[old]).collect()
}

/// `x_old[new_to_old[new]] = x_new[new]`: the inverse of [`permute_vec`].
///
/// # Panics
///
/// When `x_new.len() != perm.len()`.
#[track_caller]
pub fn unpermute_vec(perm: &Permutation, x_new: &[f64]) -> Vec<f64> {
    assert_eq!(x_new.len(), perm.len(), "vector length vs permutation");
    perm.old_to_new.iter().map(|&new| x_new[new]).collect()
}

/// `B = P A P^T` in CSR with sorted columns: `B[new_i, new_j] = A[old_i, old_j]`, explicit
/// zeros kept as stored. O(nnz log(row length)).
///
/// # Panics
///
/// When `a` is not square or `perm.len()` differs from its order.
#[track_caller]
pub fn permute_symmetric(a: CsMatView<'_, f64>, perm: &Permutation) -> CsMat<f64> {
    let (rows, cols) = a.shape();
    assert_eq!(rows, cols, "permute_symmetric needs a square matrix");
    assert_eq!(rows, perm.len(), "matrix order vs permutation");
    if !a.is_csr() {
        return permute_symmetric(a.to_csr().view(), perm);
    }
    let indptr_a = a.indptr();
    let indptr_a = indptr_a.raw_storage();
    let (idx, val) = (a.indices(), a.data());
    let mut indptr = Vec::with_capacity(rows + 1);
    let mut indices = Vec::with_capacity(a.nnz());
    let mut data = Vec::with_capacity(a.nnz());
    let mut row: Vec<(usize, f64)> = Vec::new();
    indptr.push(0);
    for &old in &perm.new_to_old {
        let (lo, hi) = (indptr_a[old], indptr_a[old + 1]);
        row.clear();
        row.extend((lo..hi).map(|k| (perm.old_to_new[idx[k]], val[k])));
        row.sort_unstable_by_key(|&(j, _)| j);
        for &(j, v) in &row {
            indices.push(j);
            data.push(v);
        }
        indptr.push(indices.len());
    }
    // Columns in range, strictly increasing: sprs stores no duplicates, and `perm` is a
    // bijection.
    CsMat::new((rows, rows), indptr, indices, data)
}

/// The largest `|i - j|` over stored entries (0 for an empty or diagonal matrix).
pub fn bandwidth(a: CsMatView<'_, f64>) -> usize {
    a.outer_iterator()
        .enumerate()
        .filter_map(|(i, row)| row.indices().iter().map(|&j| i.abs_diff(j)).max())
        .max()
        .unwrap_or(0)
}

/// The symmetric graph of `A + A^T` without self loops: `adj[xadj[v]..xadj[v + 1]]` are
/// the neighbours of `v`, unique, sorted by (degree, index).
struct Graph {
    xadj: Vec<usize>,
    adj: Vec<usize>,
}

impl Graph {
    fn new(a: CsMatView<'_, f64>) -> Self {
        let n = a.rows();
        // Count both directions of every off-diagonal entry, then fill.
        let mut xadj = vec![0usize; n + 1];
        for (i, row) in a.outer_iterator().enumerate() {
            for &j in row.indices() {
                if i != j {
                    xadj[i + 1] += 1;
                    xadj[j + 1] += 1;
                }
            }
        }
        for v in 0..n {
            xadj[v + 1] += xadj[v];
        }
        let mut fill = xadj.clone();
        let mut adj = vec![0usize; xadj[n]];
        for (i, row) in a.outer_iterator().enumerate() {
            for &j in row.indices() {
                if i != j {
                    adj[fill[i]] = j;
                    fill[i] += 1;
                    adj[fill[j]] = i;
                    fill[j] += 1;
                }
            }
        }
        // Dedup each list in place and compact.
        let mut out = 0;
        let mut start = 0;
        for v in 0..n {
            let end = xadj[v + 1];
            let list = &mut adj[start..end];
            list.sort_unstable();
            let mut kept = 0;
            for k in 0..list.len() {
                if k == 0 || list[k] != list[k - 1] {
                    list[kept] = list[k];
                    kept += 1;
                }
            }
            adj.copy_within(start..start + kept, out);
            start = end;
            xadj[v + 1] = out + kept;
            out += kept;
        }
        adj.truncate(out);
        let mut g = Self { xadj, adj };
        let degree: Vec<usize> = (0..n).map(|v| g.degree(v)).collect();
        for v in 0..n {
            let (lo, hi) = (g.xadj[v], g.xadj[v + 1]);
            g.adj[lo..hi].sort_unstable_by_key(|&u| (degree[u], u));
        }
        g
    }

    fn n(&self) -> usize {
        self.xadj.len() - 1
    }

    fn degree(&self, v: usize) -> usize {
        self.xadj[v + 1] - self.xadj[v]
    }

    fn neighbours(&self, v: usize) -> &[usize] {
        &self.adj[self.xadj[v]..self.xadj[v + 1]]
    }
}

/// Breadth-first level structures over one component, reusing buffers between calls.
struct Levels {
    /// `stamp[v] == epoch`: `v` was reached by the current search.
    stamp: Vec<u32>,
    epoch: u32,
    /// Nodes in BFS order; level `l` is `order[starts[l]..starts[l + 1]]`.
    order: Vec<usize>,
    starts: Vec<usize>,
}

impl Levels {
    fn new(n: usize) -> Self {
        Self {
            stamp: vec![0; n],
            epoch: 0,
            order: Vec::new(),
            starts: Vec::new(),
        }
    }

    /// The level structure rooted at `root`, skipping nodes already `numbered`.
    fn build(&mut self, g: &Graph, root: usize, numbered: &[bool]) {
        self.epoch = self.epoch.checked_add(1).unwrap_or_else(|| {
            self.stamp.fill(0);
            1
        });
        self.order.clear();
        self.starts.clear();
        self.order.push(root);
        self.stamp[root] = self.epoch;
        let mut level_start = 0;
        while level_start < self.order.len() {
            self.starts.push(level_start);
            let level_end = self.order.len();
            for k in level_start..level_end {
                let v = self.order[k];
                for &u in g.neighbours(v) {
                    if !numbered[u] && self.stamp[u] != self.epoch {
                        self.stamp[u] = self.epoch;
                        self.order.push(u);
                    }
                }
            }
            level_start = level_end;
        }
        self.starts.push(self.order.len());
    }

    fn height(&self) -> usize {
        self.starts.len() - 1
    }

    fn last_level(&self) -> &[usize] {
        let h = self.height();
        &self.order[self.starts[h - 1]..self.starts[h]]
    }
}

/// George and Liu's `FNROOT`: a pseudo-peripheral node of `start`'s component.
fn pseudo_peripheral(g: &Graph, start: usize, numbered: &[bool], lv: &mut Levels) -> usize {
    let mut root = start;
    lv.build(g, root, numbered);
    let mut height = lv.height();
    let size = lv.order.len();
    while height > 1 && height < size {
        let candidate = lv
            .last_level()
            .iter()
            .copied()
            .min_by_key(|&v| (g.degree(v), v))
            .expect("levels are non-empty");
        lv.build(g, candidate, numbered);
        let h = lv.height();
        root = candidate;
        if h <= height {
            break;
        }
        height = h;
    }
    root
}

/// Reverse Cuthill-McKee ordering of the symmetric structure of `a` (see the module doc).
/// Every component is numbered contiguously; an empty matrix gives the empty permutation.
///
/// # Panics
///
/// When `a` is not square.
#[track_caller]
pub fn rcm(a: CsMatView<'_, f64>) -> Permutation {
    let (rows, cols) = a.shape();
    assert_eq!(rows, cols, "rcm needs a square matrix");
    let g = Graph::new(a);
    let n = g.n();
    let mut numbered = vec![false; n];
    let mut order = Vec::with_capacity(n);
    let mut lv = Levels::new(n);
    for start in 0..n {
        if numbered[start] {
            continue;
        }
        let root = pseudo_peripheral(&g, start, &numbered, &mut lv);
        // Cuthill-McKee from `root`: `order` doubles as the queue.
        let mut head = order.len();
        order.push(root);
        numbered[root] = true;
        while head < order.len() {
            let v = order[head];
            head += 1;
            for &u in g.neighbours(v) {
                if !numbered[u] {
                    numbered[u] = true;
                    order.push(u);
                }
            }
        }
    }
    order.reverse();
    Permutation::from_new_to_old(order).expect("RCM numbers every node exactly once")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_symmetric;
    use crate::gen::{poisson2d, SplitMix64};
    use crate::Partition;
    use sprs::TriMat;

    fn random_perm(n: usize, seed: u64) -> Permutation {
        let mut rng = SplitMix64::new(seed);
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            p.swap(i, j);
        }
        Permutation::from_new_to_old(p).unwrap()
    }

    fn assert_bijection(p: &Permutation, n: usize) {
        assert_eq!(p.len(), n);
        let mut seen = vec![false; n];
        for new in 0..n {
            let old = p.new_to_old()[new];
            assert!(!seen[old], "{old} twice");
            seen[old] = true;
            assert_eq!(p.old_to_new()[old], new);
        }
    }

    fn block_diag(blocks: &[&CsMat<f64>], isolated: usize) -> CsMat<f64> {
        let n: usize = blocks.iter().map(|b| b.rows()).sum::<usize>() + isolated;
        let mut t = TriMat::new((n, n));
        let mut off = 0;
        for b in blocks {
            for (v, (i, j)) in b.iter() {
                t.add_triplet(off + i, off + j, *v);
            }
            off += b.rows();
        }
        for i in off..n {
            t.add_triplet(i, i, 1.0);
        }
        t.to_csr()
    }

    /// Ghost columns of a row-block partition, counted directly: for each block, the
    /// distinct columns its rows read outside it (what a halo exchange brings in).
    fn total_ghosts(a: &CsMat<f64>, ranks: usize) -> usize {
        let part = Partition::rows(a.rows(), ranks);
        (0..ranks)
            .map(|r| {
                let rows = part.range(r);
                let mut cols: Vec<usize> = rows
                    .clone()
                    .flat_map(|i| a.outer_view(i).unwrap().indices().to_vec())
                    .filter(|j| !rows.contains(j))
                    .collect();
                cols.sort_unstable();
                cols.dedup();
                cols.len()
            })
            .sum()
    }

    #[test]
    fn registry_names_round_trip() {
        for &r in Reorder::ALL {
            assert_eq!(r.name().parse::<Reorder>().unwrap(), r);
            assert!(!r.description().is_empty());
        }
        let e = "amd".parse::<Reorder>().unwrap_err().to_string();
        assert!(e.contains("rcm") && e.contains("none"), "{e}");
        let a = poisson2d(3).unwrap();
        assert_eq!(Reorder::None.permutation(a.view()), None);
        assert_eq!(Reorder::Rcm.permutation(a.view()), Some(rcm(a.view())));
    }

    #[test]
    fn from_new_to_old_rejects_non_bijections() {
        assert!(Permutation::from_new_to_old(vec![0, 0]).is_err());
        assert!(Permutation::from_new_to_old(vec![0, 2]).is_err());
        let p = Permutation::from_new_to_old(vec![2, 0, 1]).unwrap();
        assert_eq!(p.old_to_new(), &[1, 2, 0]);
        assert_eq!(p.inverse().inverse(), p);
        assert_bijection(&Permutation::identity(5), 5);
    }

    #[test]
    fn rcm_is_a_deterministic_bijection() {
        let a = poisson2d(13).unwrap();
        let p = rcm(a.view());
        assert_bijection(&p, a.rows());
        assert_eq!(rcm(a.view()), p);
        let b = permute_symmetric(a.view(), &random_perm(a.rows(), 3));
        assert_bijection(&rcm(b.view()), b.rows());
    }

    #[test]
    fn permuted_matrix_keeps_its_invariants() {
        let a = poisson2d(9).unwrap();
        let p = rcm(permute_symmetric(a.view(), &random_perm(81, 7)).view());
        let b = permute_symmetric(a.view(), &p);
        assert_eq!(b.nnz(), a.nnz());
        assert!(b.is_csr());
        check_symmetric(b.view()).unwrap();
        let diag = |m: &CsMat<f64>| {
            let mut d: Vec<f64> = m.diag().to_dense().to_vec();
            d.sort_by(f64::total_cmp);
            d
        };
        assert_eq!(diag(&b), diag(&a));
        // Entry by entry: B[new_i, new_j] = A[old_i, old_j]; columns sorted.
        for (i, row) in b.outer_iterator().enumerate() {
            assert!(row.indices().windows(2).all(|w| w[0] < w[1]));
            for (j, &v) in row.iter() {
                let (oi, oj) = (p.new_to_old()[i], p.new_to_old()[j]);
                assert_eq!(a.get(oi, oj), Some(&v));
            }
        }
        // Frobenius norm and trace.
        let fro = |m: &CsMat<f64>| m.data().iter().map(|v| v * v).sum::<f64>();
        assert_eq!(fro(&a), fro(&b));
    }

    #[test]
    fn rcm_recovers_the_natural_band_of_a_scrambled_grid() {
        let n = 20;
        let a = poisson2d(n).unwrap();
        assert_eq!(bandwidth(a.view()), n);
        let scrambled = permute_symmetric(a.view(), &random_perm(n * n, 42));
        assert!(bandwidth(scrambled.view()) > 10 * n);
        let b = permute_symmetric(scrambled.view(), &rcm(scrambled.view()));
        let bw = bandwidth(b.view());
        assert!(bw <= n, "RCM bandwidth {bw} > natural {n}");
    }

    #[test]
    fn disconnected_and_empty_graphs() {
        let (g1, g2) = (poisson2d(6).unwrap(), poisson2d(4).unwrap());
        let a = block_diag(&[&g1, &g2, &g1], 3);
        let scrambled = permute_symmetric(a.view(), &random_perm(a.rows(), 5));
        let p = rcm(scrambled.view());
        assert_bijection(&p, a.rows());
        let b = permute_symmetric(scrambled.view(), &p);
        assert_eq!(b.nnz(), a.nnz());
        check_symmetric(b.view()).unwrap();
        assert!(bandwidth(b.view()) <= 6, "{}", bandwidth(b.view()));
        // Each component's rows are contiguous: no entry crosses a component boundary,
        // so the number of components equals the number of row blocks closed off.
        let mut reach = 0;
        let mut components = 0;
        for (i, row) in b.outer_iterator().enumerate() {
            reach = reach.max(row.indices().iter().copied().max().unwrap_or(i));
            if reach == i {
                components += 1;
            }
        }
        assert_eq!(components, 3 + 3);

        let empty = CsMat::<f64>::zero((0, 0));
        let p = rcm(empty.view());
        assert!(p.is_empty());
        assert_eq!(permute_symmetric(empty.view(), &p).rows(), 0);
        assert_eq!(bandwidth(empty.view()), 0);
        assert!(permute_vec(&p, &[]).is_empty());

        let no_entries = CsMat::<f64>::zero((4, 4));
        let p = rcm(no_entries.view());
        assert_bijection(&p, 4);
    }

    #[test]
    fn structure_is_symmetrized_and_csc_accepted() {
        // Upper triangle only of a path 0-1-2-3, stored scrambled.
        let mut t = TriMat::new((4, 4));
        for (i, j) in [(0, 2), (2, 3), (3, 1)] {
            t.add_triplet(i, j, 1.0);
        }
        let upper = t.to_csr();
        let p = rcm(upper.view());
        let b = permute_symmetric(upper.view(), &p);
        assert_eq!(bandwidth(b.view()), 1);
        let csc = t.to_csc();
        assert_eq!(rcm(csc.view()), p);
        assert_eq!(permute_symmetric(csc.view(), &p), b);
    }

    #[test]
    fn permute_unpermute_round_trip() {
        let p = random_perm(57, 11);
        let x: Vec<f64> = (0..57).map(|i| i as f64 * 0.5 - 3.0).collect();
        let y = permute_vec(&p, &x);
        for (new, &old) in p.new_to_old().iter().enumerate() {
            assert_eq!(y[new], x[old]);
        }
        assert_eq!(unpermute_vec(&p, &y), x);
        assert_eq!(permute_vec(&p.inverse(), &y), x);
    }

    #[test]
    fn rcm_cuts_halo_ghosts_of_a_scrambled_grid() {
        let a = poisson2d(30).unwrap();
        let scrambled = permute_symmetric(a.view(), &random_perm(a.rows(), 2024));
        let before = total_ghosts(&scrambled, 4);
        let reordered = permute_symmetric(scrambled.view(), &rcm(scrambled.view()));
        let after = total_ghosts(&reordered, 4);
        assert!(after > 0);
        assert!(
            4 * after <= before,
            "ghosts before {before}, after RCM {after}: expected at least 4x fewer"
        );
    }
}
