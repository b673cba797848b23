//! The automatic-selection table every operation's `auto` fills in (`algo/<op>/auto.rs`):
//! rows of conditions (message size, rank class, rank bound) -> algorithm, first match wins,
//! and the algorithm used when no row matches. Not an algorithm: no registry row.
//!
//! Each `auto.rs` holds one `const TABLE: Table<...>` whose rows cite their source (a
//! comment per row, the full reference in the module doc) and a `select` that says what
//! "bytes" means for its operation. The sizes the tables are keyed by are the paper's (Thakur,
//! Rabenseifner, Gropp, IJHPCA 2005), so a row states its bound as the paper does: "below
//! 2 KiB" is [`Row::bytes_below`], "at most 256 bytes" [`Row::bytes_at_most`].

/// Which rank counts a [`Row`] applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RankClass {
    /// Every p.
    Any,
    /// p a power of two (1 included).
    PowerOfTwo,
    /// p not a power of two.
    NotPowerOfTwo,
}

impl RankClass {
    fn admits(self, p: usize) -> bool {
        match self {
            RankClass::Any => true,
            RankClass::PowerOfTwo => p.is_power_of_two(),
            RankClass::NotPowerOfTwo => !p.is_power_of_two(),
        }
    }
}

/// One row of a selection [`Table`]: `algo` applies when the message size is at most
/// `max_bytes` (inclusive; what "bytes" means is stated per operation), p is in `ranks` and
/// `p <= max_ranks`. Built by [`Row::bytes_below`], [`Row::bytes_at_most`] or
/// [`Row::ranks_below`], narrowed by [`Row::power_of_two`] and [`Row::not_power_of_two`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row<A> {
    max_bytes: usize,
    ranks: RankClass,
    max_ranks: usize,
    algo: A,
}

impl<A: Copy> Row<A> {
    /// `algo` for sizes of at most `max` bytes, any p.
    pub(crate) const fn bytes_at_most(max: usize, algo: A) -> Self {
        Self {
            max_bytes: max,
            ranks: RankClass::Any,
            max_ranks: usize::MAX,
            algo,
        }
    }

    /// `algo` for sizes below `limit` bytes (`limit >= 1`), any p.
    pub(crate) const fn bytes_below(limit: usize, algo: A) -> Self {
        Self::bytes_at_most(limit - 1, algo)
    }

    /// `algo` for fewer than `limit` ranks (`limit >= 1`), any size.
    pub(crate) const fn ranks_below(limit: usize, algo: A) -> Self {
        Self {
            max_bytes: usize::MAX,
            ranks: RankClass::Any,
            max_ranks: limit - 1,
            algo,
        }
    }

    /// The row, only where p is a power of two.
    pub(crate) const fn power_of_two(self) -> Self {
        Self {
            ranks: RankClass::PowerOfTwo,
            ..self
        }
    }

    /// The row, only where p is not a power of two.
    pub(crate) const fn not_power_of_two(self) -> Self {
        Self {
            ranks: RankClass::NotPowerOfTwo,
            ..self
        }
    }

    fn matches(&self, p: usize, bytes: usize) -> bool {
        bytes <= self.max_bytes && p <= self.max_ranks && self.ranks.admits(p)
    }
}

/// An operation's automatic-selection table: the algorithm of the first of `rows` that
/// matches (p, bytes), else `otherwise`. Neither may name the registry's `Auto` (a test in
/// `algo/mod.rs` checks every table).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Table<A: 'static> {
    /// Conditional rows, in order.
    pub(crate) rows: &'static [Row<A>],
    /// The algorithm where no row matches.
    pub(crate) otherwise: A,
}

impl<A: Copy> Table<A> {
    /// The algorithm for `bytes` over `p` ranks.
    pub(crate) fn select(&self, p: usize, bytes: usize) -> A {
        self.rows
            .iter()
            .find(|r| r.matches(p, bytes))
            .map_or(self.otherwise, |r| r.algo)
    }

    /// Every algorithm the table can select (with repeats), rows first.
    pub(crate) fn algos(&self) -> impl Iterator<Item = A> + '_ {
        self.rows
            .iter()
            .map(|r| r.algo)
            .chain(std::iter::once(self.otherwise))
    }
}

/// 1 KiB, for the selection tables.
pub(crate) const KIB: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: Table<char> = Table {
        rows: &[
            Row::bytes_below(8, 'a').power_of_two(),
            Row::bytes_at_most(8, 'b').not_power_of_two(),
            Row::ranks_below(4, 'c'),
            Row::bytes_below(100, 'd'),
        ],
        otherwise: 'e',
    };

    #[test]
    fn first_matching_row_wins_else_otherwise() {
        let cases = [
            // (p, bytes, algo)
            (1, 0, 'a'),
            (4, 7, 'a'),
            (4, 8, 'd'),
            (3, 8, 'b'),
            (3, 9, 'c'),
            (5, 9, 'd'),
            (4, 99, 'd'),
            (2, 100, 'c'),
            (8, 99, 'd'),
            (8, 100, 'e'),
            (3, usize::MAX, 'c'),
            (usize::MAX, usize::MAX, 'e'),
        ];
        for (p, bytes, want) in cases {
            assert_eq!(TABLE.select(p, bytes), want, "p {p}, {bytes} B");
        }
        assert_eq!(TABLE.algos().collect::<String>(), "abcde");
    }
}
