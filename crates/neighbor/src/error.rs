//! Errors of the neighbour exchange.

use std::fmt;

use castack_collectives::{CommError, UnknownAlgorithm};
use thiserror::Error;

/// Which half of an [`ExchangePattern`](crate::ExchangePattern) (or which caller slice) an
/// error refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The send half: destination ranks and indices into the source slice.
    Send,
    /// The receive half: source ranks and indices into the destination slice.
    Recv,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Send => "send",
            Side::Recv => "receive",
        })
    }
}

/// What can go wrong when building or running an [`Exchange`](crate::Exchange).
///
/// Errors found by the collective validation in [`Exchange::new`](crate::Exchange::new) are
/// returned on every rank: global mismatches (one-sided declarations, count mismatches)
/// identically on all ranks, local ones by the offending rank itself while the others
/// return [`NeighborError::PeerInvalid`] naming it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NeighborError {
    /// A rank index outside `0..size` was given as the calling rank.
    #[error("rank {rank} is out of range for a communicator of {size} ranks")]
    RankOutOfRange {
        /// The offending rank.
        rank: usize,
        /// The communicator size.
        size: usize,
    },
    /// A pattern names a neighbour rank outside `0..size`.
    #[error("rank {rank} declares {side} neighbour {neighbor}, out of range for {size} ranks")]
    NeighborOutOfRange {
        /// The rank whose pattern is invalid.
        rank: usize,
        /// The half of the pattern.
        side: Side,
        /// The offending neighbour rank.
        neighbor: usize,
        /// The communicator size.
        size: usize,
    },
    /// A pattern lists the same neighbour twice in one half.
    #[error("rank {rank} lists {side} neighbour {neighbor} more than once")]
    DuplicateNeighbor {
        /// The rank whose pattern is invalid.
        rank: usize,
        /// The half of the pattern.
        side: Side,
        /// The repeated neighbour rank.
        neighbor: usize,
    },
    /// An index does not fit the source (send) or destination (receive) slice.
    #[error(
        "rank {rank}: {side} index {index} for neighbour {neighbor} is out of range \
         for a slice of {len} values"
    )]
    IndexOutOfRange {
        /// The rank whose pattern is invalid.
        rank: usize,
        /// The half of the pattern.
        side: Side,
        /// The neighbour whose index list holds the index.
        neighbor: usize,
        /// The offending index.
        index: usize,
        /// The slice length the exchange is built for.
        len: usize,
    },
    /// Two received values would land on the same destination index.
    #[error(
        "rank {rank}: destination index {index} is written twice \
         (by values from rank {first} and from rank {second})"
    )]
    DuplicateDestination {
        /// The rank whose pattern is invalid.
        rank: usize,
        /// The destination index written twice.
        index: usize,
        /// The source rank of one write.
        first: usize,
        /// The source rank of the other write (equal to `first` when one list repeats it).
        second: usize,
    },
    /// A rank declares a send that the destination does not declare as a receive.
    #[error(
        "rank {sender} declares a send of {values} value(s) to rank {receiver}, \
         which declares no receive from it"
    )]
    UnmatchedSend {
        /// The rank declaring the send.
        sender: usize,
        /// The rank that does not expect it.
        receiver: usize,
        /// The number of values the sender declares.
        values: usize,
    },
    /// A rank declares a receive that the source does not declare as a send.
    #[error(
        "rank {receiver} expects {values} value(s) from rank {sender}, \
         which declares no send to it"
    )]
    UnmatchedRecv {
        /// The rank that declares no send.
        sender: usize,
        /// The rank expecting the values.
        receiver: usize,
        /// The number of values the receiver expects.
        values: usize,
    },
    /// The ranks declaring sends to a rank differ from the sources it declares, in a way
    /// that does not reduce to one unmatched declaration.
    #[error(
        "the ranks that declare sends to rank {receiver} are not the ranks it declares \
         receives from ({excess} more send than receive declarations)"
    )]
    UnmatchedDeclarations {
        /// The rank whose incoming declarations disagree.
        receiver: usize,
        /// Send declarations towards `receiver` minus its receive declarations.
        excess: i64,
    },
    /// A sender and a receiver disagree on the number of values of their message.
    #[error("rank {sender} sends {sent} value(s) to rank {receiver}, which expects {expected}")]
    CountMismatch {
        /// The sending rank.
        sender: usize,
        /// The receiving rank.
        receiver: usize,
        /// Values the sender declares.
        sent: usize,
        /// Values the receiver declares.
        expected: usize,
    },
    /// Another rank's pattern failed its local validation; this rank rejects the exchange
    /// too so that every rank returns an error.
    #[error("rank {rank} rejects the exchange: the pattern of rank {peer} is invalid (rank {peer} reports why)")]
    PeerInvalid {
        /// The rank returning this error.
        rank: usize,
        /// The lowest rank whose local validation failed.
        peer: usize,
    },
    /// A caller slice has a length other than the exchange was built for.
    #[error("{side} slice has {got} values, the exchange was built for {expected}")]
    SliceLength {
        /// Source ([`Side::Send`]) or destination ([`Side::Recv`]) slice.
        side: Side,
        /// The length given to [`Exchange::new`](crate::Exchange::new).
        expected: usize,
        /// The length passed.
        got: usize,
    },
    /// `start` was called while the previous exchange had not been finished.
    #[error("rank {rank}: exchange started while the previous one is unfinished")]
    AlreadyStarted {
        /// The calling rank.
        rank: usize,
    },
    /// `finish` was called without a matching `start`.
    #[error("rank {rank}: exchange finished without being started")]
    NotStarted {
        /// The calling rank.
        rank: usize,
    },
    /// The exchange was called with a communicator other than the one it was built on.
    #[error(
        "exchange built for rank {expected_rank} of {expected_size}, \
         called on rank {rank} of {size}"
    )]
    WrongCommunicator {
        /// Rank at construction.
        expected_rank: usize,
        /// Size at construction.
        expected_size: usize,
        /// Rank of the communicator passed.
        rank: usize,
        /// Size of the communicator passed.
        size: usize,
    },
    /// An earlier communication error left the ranks out of step; the exchange cannot be
    /// used any more.
    #[error("rank {rank}: exchange unusable after an earlier communication error")]
    Failed {
        /// The calling rank.
        rank: usize,
    },
    /// A segmented strategy was asked for zero communication devices.
    #[error("rank {rank}: a segmented exchange needs at least one device, got 0")]
    ZeroDevices {
        /// The rank whose strategy is invalid.
        rank: usize,
    },
    /// A peer described its segmentation inconsistently at construction (ranks running
    /// different builds of this crate).
    #[error("rank {rank}: rank {from} sent an inconsistent segmentation description")]
    Protocol {
        /// The rank that detected it.
        rank: usize,
        /// The peer that sent it.
        from: usize,
    },
    /// A grid block is thinner than its ghost width in a dimension that exchanges halos.
    #[error(
        "rank {rank}: {owned} owned cell(s) in dimension {dim} is fewer than the ghost \
         width {ghost}"
    )]
    GridTooThin {
        /// The rank whose block is too thin.
        rank: usize,
        /// The dimension (0 = x, 1 = y, 2 = z).
        dim: usize,
        /// Owned cells in that dimension.
        owned: usize,
        /// The ghost width.
        ghost: usize,
    },
    /// A process grid whose size differs from the communicator's.
    #[error("process grid {procs:?} has {} ranks, the communicator {size}", procs.iter().product::<usize>())]
    ProcessGrid {
        /// Ranks per dimension.
        procs: [usize; 3],
        /// The communicator size.
        size: usize,
    },
    /// A batched copy list whose ranges are out of bounds or whose destinations overlap or
    /// are not in increasing order.
    #[error("copy {index} of a batched copy list is out of range, overlaps or is out of order")]
    BadCopy {
        /// Position of the offending copy.
        index: usize,
    },
    /// A strategy name that is not in the registry.
    #[error(transparent)]
    UnknownStrategy(#[from] UnknownAlgorithm),
    /// The communicator failed.
    #[error(transparent)]
    Comm(#[from] CommError),
}
