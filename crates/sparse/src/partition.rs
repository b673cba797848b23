//! Row partitions: which contiguous block of rows each rank owns.

/// How rows are split among ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartitionKind {
    /// P contiguous blocks, the first `n mod P` ranks take one extra row.
    #[default]
    Rows,
    /// Contiguous blocks balancing the stored nonzeros.
    Nnz,
}

impl PartitionKind {
    /// Every kind.
    pub const ALL: &'static [PartitionKind] = &[PartitionKind::Rows, PartitionKind::Nnz];

    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            PartitionKind::Rows => "rows",
            PartitionKind::Nnz => "nnz",
        }
    }
}

castack_base::impl_registry!(PartitionKind, "partition");

/// Contiguous row blocks: rank `r` owns global rows `starts[r]..starts[r + 1]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    starts: Vec<usize>,
}

impl Partition {
    /// `n` rows over `p >= 1` ranks, the first `n mod p` ranks taking one extra row.
    /// More ranks than rows is allowed (the last ranks own no rows).
    pub fn rows(n: usize, p: usize) -> Self {
        let p = p.max(1);
        let (base, extra) = (n / p, n % p);
        let mut starts = Vec::with_capacity(p + 1);
        let mut acc = 0;
        starts.push(0);
        for r in 0..p {
            acc += base + usize::from(r < extra);
            starts.push(acc);
        }
        Self { starts }
    }

    /// Contiguous blocks of the given row counts, rank by rank (at least one rank: no
    /// counts is one rank of 0 rows).
    pub fn from_counts(counts: impl IntoIterator<Item = usize>) -> Self {
        let mut starts = vec![0];
        let mut acc = 0usize;
        for c in counts {
            acc += c;
            starts.push(acc);
        }
        if starts.len() == 1 {
            starts.push(0);
        }
        Self { starts }
    }

    /// Contiguous blocks over `p` ranks balancing nonzeros, from a CSR row pointer array
    /// (`indptr.len() == n + 1`): rank `r`'s block ends at the first row where the running
    /// nonzero count reaches `(r + 1) * nnz / p`.
    pub fn nnz(indptr: &[usize], p: usize) -> Self {
        let p = p.max(1);
        let n = indptr.len().saturating_sub(1);
        let total = indptr.last().copied().unwrap_or(0);
        let mut starts = Vec::with_capacity(p + 1);
        starts.push(0);
        let mut row = 0;
        for r in 1..p {
            let target = (total as u128 * r as u128 / p as u128) as usize;
            while row < n && indptr[row + 1] <= target {
                row += 1;
            }
            starts.push(row.max(*starts.last().unwrap_or(&0)));
        }
        starts.push(n);
        Self { starts }
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.starts.len() - 1
    }

    /// Global number of rows.
    pub fn n(&self) -> usize {
        *self.starts.last().unwrap_or(&0)
    }

    /// Rows owned by `rank`.
    pub fn range(&self, rank: usize) -> std::ops::Range<usize> {
        self.starts[rank]..self.starts[rank + 1]
    }

    /// The rank owning global row `row` (`row < n`).
    pub fn owner(&self, row: usize) -> usize {
        // The last start <= row among non-empty blocks.
        self.starts.partition_point(|&s| s <= row) - 1
    }

    /// Block sizes, one per rank.
    pub fn counts(&self) -> Vec<usize> {
        self.starts.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_split_first_ranks_take_extra() {
        assert_eq!(Partition::rows(10, 4).counts(), vec![3, 3, 2, 2]);
        assert_eq!(Partition::rows(2, 4).counts(), vec![1, 1, 0, 0]);
        assert_eq!(Partition::rows(0, 3).counts(), vec![0, 0, 0]);
    }

    #[test]
    fn owner_skips_empty_blocks() {
        let p = Partition::rows(2, 4);
        assert_eq!(p.owner(0), 0);
        assert_eq!(p.owner(1), 1);
        let q = Partition::rows(10, 3);
        for row in 0..10 {
            assert!(q.range(q.owner(row)).contains(&row));
        }
    }

    #[test]
    fn nnz_balances_nonzeros() {
        // Row r has r + 1 nonzeros.
        let mut indptr = vec![0];
        for r in 0..100 {
            indptr.push(indptr[r] + r + 1);
        }
        let part = Partition::nnz(&indptr, 4);
        assert_eq!(part.n(), 100);
        let total = indptr[100];
        for r in 0..4 {
            let rg = part.range(r);
            let nnz = indptr[rg.end] - indptr[rg.start];
            assert!(
                (nnz as f64 - total as f64 / 4.0).abs() <= 101.0,
                "rank {r}: {nnz}"
            );
        }
        assert_eq!(Partition::nnz(&indptr, 200).n(), 100);
    }
}
