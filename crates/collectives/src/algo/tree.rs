//! Binomial trees over ranks relative to a root, shared by the rooted operations (scatter,
//! gather, reduce). Not an algorithm: no registry row.
//!
//! Relative rank v = (rank - root) mod p. The parent of v > 0 is v with its lowest set bit
//! cleared; the children of v are v + 2^k for every 2^k below v's lowest set bit (every power
//! of two below p for the root) with v + 2^k < p; the subtree of v is the relative ranks
//! `v..v + subtree(v)`, contiguous. This is the tree of `bcast/binomial.rs`.

/// A binomial tree of `p` ranks rooted at `root`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tree {
    p: usize,
    root: usize,
}

/// A piece of a relative range that is contiguous in absolute rank order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// First absolute rank of the piece.
    pub(crate) abs: usize,
    /// Offset of the piece within the relative range, in ranks.
    pub(crate) rel: usize,
    /// Number of ranks in the piece.
    pub(crate) len: usize,
}

impl Tree {
    /// The tree (`root < p`).
    pub(crate) fn new(p: usize, root: usize) -> Self {
        debug_assert!(root < p);
        Self { p, root }
    }

    /// Relative rank of absolute `rank`.
    pub(crate) fn rel(self, rank: usize) -> usize {
        (rank + self.p - self.root) % self.p
    }

    /// Absolute rank of relative `v`.
    pub(crate) fn abs(self, v: usize) -> usize {
        (v + self.root) % self.p
    }

    /// Relative parent of relative `v > 0`.
    pub(crate) fn parent(self, v: usize) -> usize {
        debug_assert!(v > 0);
        v & (v - 1)
    }

    /// Number of ranks in the subtree of relative `v` (itself included).
    pub(crate) fn subtree(self, v: usize) -> usize {
        if v == 0 {
            self.p
        } else {
            (v & v.wrapping_neg()).min(self.p - v)
        }
    }

    /// Relative children of relative `v`, largest subtree first.
    pub(crate) fn children(self, v: usize) -> impl DoubleEndedIterator<Item = usize> {
        let limit = if v == 0 {
            self.p.next_power_of_two()
        } else {
            v & v.wrapping_neg()
        };
        let p = self.p;
        (0..limit.trailing_zeros())
            .rev()
            .map(move |k| v + (1 << k))
            .filter(move |&c| c < p)
    }

    /// The relative ranks `v..v + n` as at most two pieces contiguous in absolute order (two
    /// when the range wraps past rank p - 1).
    pub(crate) fn runs(self, v: usize, n: usize) -> impl Iterator<Item = Run> {
        let a = self.abs(v);
        let first = (a + n).min(self.p) - a;
        let head = Run {
            abs: a,
            rel: 0,
            len: first,
        };
        let tail = (n > first).then_some(Run {
            abs: 0,
            rel: first,
            len: n - first,
        });
        std::iter::once(head).chain(tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtrees_partition_the_ranks() {
        for p in 1..=17 {
            let t = Tree::new(p, p / 2);
            for v in 0..p {
                let kids: Vec<_> = t.children(v).collect();
                let n: usize = kids.iter().map(|&c| t.subtree(c)).sum();
                assert_eq!(n + 1, t.subtree(v), "p={p} v={v}");
                assert!(kids.iter().all(|&c| t.parent(c) == v));
                assert!(kids.windows(2).all(|w| w[0] > w[1]), "largest first");
            }
        }
    }

    #[test]
    fn runs_split_at_the_wrap() {
        let t = Tree::new(5, 3);
        let runs: Vec<_> = t.runs(1, 3).collect();
        // Relative 1..4 is absolute 4, 0, 1.
        assert_eq!(
            runs,
            [
                Run {
                    abs: 4,
                    rel: 0,
                    len: 1
                },
                Run {
                    abs: 0,
                    rel: 1,
                    len: 2
                }
            ]
        );
        assert_eq!(t.runs(0, 2).count(), 1);
    }
}
