//! Errors of the communication layer.

use thiserror::Error;

/// What can go wrong in a communicator or a collective.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CommError {
    /// A rank index outside `0..size`.
    #[error("rank {rank} is out of range for a communicator of {size} ranks")]
    RankOutOfRange {
        /// The offending rank.
        rank: usize,
        /// The communicator size.
        size: usize,
    },
    /// A universe or communicator with zero ranks was requested.
    #[error("a communicator needs at least one rank (got 0)")]
    NoRanks,
    /// More thread ranks than one process runs (see [`crate::threads::MAX_THREAD_RANKS`]).
    #[error(
        "{ranks} ranks exceed the {max} thread ranks one process runs (MAX_THREAD_RANKS); \
         use fewer ranks, or the mpi backend"
    )]
    TooManyThreadRanks {
        /// Ranks requested.
        ranks: usize,
        /// The cap, [`crate::threads::MAX_THREAD_RANKS`].
        max: usize,
    },
    /// Another rank panicked or failed; this rank gave up waiting for it.
    #[error("rank {rank} stopped waiting: another rank failed")]
    PeerFailed {
        /// The rank that observed the failure.
        rank: usize,
    },
    /// This rank waited for a message from a rank that has already finished (returned from
    /// its closure, e.g. with an error the others did not share): the message can never come.
    #[error("rank {rank} waited for rank {peer}, which has already finished")]
    PeerExited {
        /// The waiting rank.
        rank: usize,
        /// The rank that finished.
        peer: usize,
    },
    /// Every rank still running was waiting for another (a message no rank had sent, or on
    /// `sim` a call some rank had not entered): none could ever be released, so each
    /// waiting rank gets this error instead of hanging (the `threads` and `sim` backends
    /// detect it). Typically the ranks called collectives in different orders, or a receive
    /// has no matching send.
    #[error(
        "deadlock: rank {rank} waited for rank {peer} (tag {tag:#x}) while every running \
         rank was waiting for another: none could ever be released"
    )]
    Deadlock {
        /// The waiting rank.
        rank: usize,
        /// The rank it waited for (to send, or to enter the call).
        peer: usize,
        /// The tag of the message or call it waited for (collectives draw theirs from the
        /// high half).
        tag: u64,
    },
    /// A rank's closure panicked; carries the rank and the panic message.
    #[error("rank {rank} panicked: {message}")]
    RankPanicked {
        /// The rank whose closure panicked.
        rank: usize,
        /// The panic payload, when it was a string.
        message: String,
    },
    /// A message arrived with a length other than the receiver expected.
    #[error("message from rank {from} has {got} bytes, rank {rank} expected {expected}")]
    LengthMismatch {
        /// Receiving rank.
        rank: usize,
        /// Sending rank.
        from: usize,
        /// Bytes the receiver expected.
        expected: usize,
        /// Bytes that arrived.
        got: usize,
    },
    /// Arguments to a collective are inconsistent (buffer sizes, counts, root).
    #[error("invalid arguments: {0}")]
    InvalidArgument(String),
    /// The buffer length is not a multiple of the element size of a reduction.
    #[error("buffer of {bytes} bytes is not a whole number of {elem}-byte elements")]
    Misaligned {
        /// Buffer length in bytes.
        bytes: usize,
        /// Element size in bytes.
        elem: usize,
    },
}
