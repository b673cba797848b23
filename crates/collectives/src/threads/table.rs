//! The channels of a universe, created per communicating pair on first use.
//!
//! A universe of P ranks has P x P ordered pairs, but a rank talks to few of them (its halo
//! neighbours and the log P partners of a collective), so a table of P x P channels made up
//! front cost memory that grew with P^2 (512 bytes a channel: 41 GB at 9000 ranks) for
//! pairs that never talked. Here the channel of a pair is allocated by the first send or
//! receive between the two, and found again through two levels that are never P^2 in size:
//!
//! - a shared [`ChannelTable`]: per receiving rank, its sources in blocks of [`BLOCK`];
//!   a block (its slots) is allocated when the first of its pairs talks, and each slot
//!   holds one channel, created once ([`OnceLock`]). P x P / [`BLOCK`] block pointers of 16 bytes
//!   in all (4 MiB at [`crate::threads::MAX_THREAD_RANKS`] ranks), then memory that
//!   follows the pairs that talk;
//! - a per-rank [`PeerCache`]: a small direct-mapped cache from peer to channel, owned by
//!   the rank's thread, so a message costs one uncontended check (is this peer's channel
//!   cached?) before it touches the channel, as the fixed table's index did. A miss (the
//!   first message to a peer, or a peer that shares the cache entry of a busier one) goes
//!   to the shared table.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use super::channel::Channel;

/// Sources per block of a receiver's row in the shared table.
pub(crate) const BLOCK: usize = 64;

/// One block: the channels into one receiver from [`BLOCK`] consecutive sources.
type Block = [OnceLock<Arc<Channel>>; BLOCK];

/// Every channel of a universe, created per ordered pair on first use.
pub(crate) struct ChannelTable {
    /// Blocks per receiver: `size` sources in blocks of [`BLOCK`].
    blocks_per_row: usize,
    /// Block `to * blocks_per_row + from / BLOCK` holds the channel from `from` to `to` at
    /// `from % BLOCK`, once a pair of the block has talked.
    blocks: Box<[OnceLock<Box<Block>>]>,
    /// Channels created so far.
    created: AtomicUsize,
}

impl ChannelTable {
    /// The (empty) table of a universe of `size` ranks.
    pub(crate) fn new(size: usize) -> Self {
        let blocks_per_row = size.div_ceil(BLOCK);
        Self {
            blocks_per_row,
            blocks: (0..size * blocks_per_row)
                .map(|_| OnceLock::new())
                .collect(),
            created: AtomicUsize::new(0),
        }
    }

    fn slot(&self, from: usize, to: usize) -> &OnceLock<Arc<Channel>> {
        let block = self.blocks[to * self.blocks_per_row + from / BLOCK]
            .get_or_init(|| Box::new(std::array::from_fn(|_| OnceLock::new())));
        &block[from % BLOCK]
    }

    /// The channel from `from` to `to`, created now if the pair has not talked before.
    ///
    /// # Panics
    /// When `from` or `to` is not a rank of the universe (callers check ranks first).
    pub(crate) fn get_or_create(&self, from: usize, to: usize) -> &Arc<Channel> {
        self.slot(from, to).get_or_init(|| {
            self.created.fetch_add(1, Ordering::Relaxed);
            Arc::new(Channel::new())
        })
    }

    /// The channel from `from` to `to` if the pair has talked (no allocation: for checks
    /// made by other ranks, such as the deadlock check).
    pub(crate) fn get(&self, from: usize, to: usize) -> Option<&Channel> {
        let block = self.blocks[to * self.blocks_per_row + from / BLOCK].get()?;
        block[from % BLOCK].get().map(|c| &**c)
    }

    /// How many channels (ordered pairs that talked) exist so far.
    pub(crate) fn created(&self) -> usize {
        self.created.load(Ordering::Relaxed)
    }
}

/// Entries of a [`PeerCache`] (a power of two).
const CACHE: usize = 32;

/// A cached peer: its rank and the channel to or from it.
type Entry = Option<(usize, Arc<Channel>)>;

/// A rank's direct-mapped cache from peer rank to the channel it sends to or receives from
/// that peer (one cache per direction). Only the owning rank's thread uses it.
pub(crate) struct PeerCache {
    entries: RefCell<[Entry; CACHE]>,
}

impl PeerCache {
    pub(crate) fn new() -> Self {
        Self {
            entries: RefCell::new(std::array::from_fn(|_| None)),
        }
    }

    /// The cache entry of `peer` (a multiplicative hash, so peers at power-of-two
    /// distances, the partners of recursive doubling, do not all share one entry).
    #[inline]
    fn index(peer: usize) -> usize {
        ((peer as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - CACHE.trailing_zeros()))
            as usize
    }

    /// Call `f` with `peer`'s channel: from the cache when it holds it (one compare),
    /// else from `fill` (the shared table), which is then cached in `peer`'s entry.
    #[inline]
    pub(crate) fn with<R>(
        &self,
        peer: usize,
        fill: impl FnOnce() -> Arc<Channel>,
        f: impl FnOnce(&Channel) -> R,
    ) -> R {
        let i = Self::index(peer);
        {
            let entries = self.entries.borrow();
            if let Some((p, ch)) = &entries[i] {
                if *p == peer {
                    return f(ch);
                }
            }
        }
        let ch = fill();
        // A `f` running further up this thread's stack (a delivery callback that sends)
        // holds a borrow: then the channel is used without being cached.
        if let Ok(mut entries) = self.entries.try_borrow_mut() {
            entries[i] = Some((peer, Arc::clone(&ch)));
        }
        f(&ch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_created_once_per_pair_on_first_use() {
        let t = ChannelTable::new(3 * BLOCK + 5);
        assert_eq!(t.created(), 0);
        assert!(t.get(1, 2).is_none());
        let a = Arc::as_ptr(t.get_or_create(1, 2));
        assert_eq!(
            Arc::as_ptr(t.get_or_create(1, 2)),
            a,
            "one channel per pair"
        );
        assert!(std::ptr::eq(t.get(1, 2).expect("created"), a));
        // The reverse direction is another pair; a pair in the same block too.
        let b = Arc::as_ptr(t.get_or_create(2, 1));
        assert_ne!(a, b);
        t.get_or_create(3, 2);
        // The last source of the last, partial block.
        let last = 3 * BLOCK + 4;
        t.get_or_create(last, last);
        assert_eq!(t.created(), 4);
        assert!(
            t.get(0, 2).is_none(),
            "a neighbour in a used block is not created"
        );
    }

    #[test]
    fn the_cache_returns_each_peers_own_channel() {
        let t = ChannelTable::new(300);
        let cache = PeerCache::new();
        // More peers than entries, at power-of-two distances and beyond: each lookup must
        // give the table's channel of that peer, hit or miss.
        let peers: Vec<usize> = (0..9).map(|k| 1 << k).chain(0..100).collect();
        for _ in 0..3 {
            for &p in &peers {
                let got = cache.with(p, || Arc::clone(t.get_or_create(p, 0)), |c| c as *const _);
                assert!(std::ptr::eq(got, t.get(p, 0).expect("created")));
            }
        }
        assert_eq!(t.created(), 100 + 9 - 7, "1, 2, .., 64 are among 0..100");
    }
}
