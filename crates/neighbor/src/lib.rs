//! # castack-neighbor
//!
//! Persistent neighbour exchanges over any castack
//! [`Communicator`](castack_collectives::Communicator): each rank declares,
//! as plain per-neighbour index lists ([`ExchangePattern`]), which of its values go to which
//! rank and where the values it receives land; an [`Exchange`] is built once (collectively
//! validated, buffers sized) and run many times without allocation, in one call or
//! split-phase (`start`, compute the interior, `finish`). This crate knows nothing of
//! matrices or grids: `krylov` builds patterns from its distributed matrix, applications
//! from their own decompositions (see `examples/halo_1d.rs`).
//!
//! ## Reference and cost
//!
//! The [`Strategy::Naive`] exchange is the naive algorithm of ALGORITHMS.md section 2 (what
//! MPI implementations do): post all N sends, then wait all N receives. Per exchange a rank
//! sends one message per destination in its pattern (zero-length ones included) carrying
//! 8 bytes per listed index, and receives one per source. With C communication devices of
//! bandwidth B and per-message cost L, devices carry whole messages, so for N neighbours of
//! m bytes each: D = L*ceil(N/C) + ceil(N/C)*m/B.
//!
//! ## Self entries
//!
//! A pattern may name the calling rank itself in both halves (lists of equal length): the
//! values are copied locally, not sent. This is how a periodic domain on one rank is its
//! own neighbour.
//!
//! ```
//! use castack_collectives::{Communicator, ThreadUniverse};
//! use castack_neighbor::{Exchange, ExchangePattern, NeighborError, Strategy};
//!
//! // A ring: every rank sends its value to the right and receives from the left.
//! let got = ThreadUniverse::new(4)?.run(|comm| {
//!     let (r, p) = (comm.rank(), comm.size());
//!     let pattern = ExchangePattern {
//!         sends: vec![((r + 1) % p, vec![0])],
//!         recvs: vec![((r + p - 1) % p, vec![0])],
//!     };
//!     let mut ex = Exchange::new(comm, pattern, 1, 1, Strategy::Naive)?;
//!     let mut from_left = [0.0];
//!     ex.exchange(comm, &[r as f64], &mut from_left)?;
//!     Ok::<_, NeighborError>(from_left[0])
//! })?;
//! assert_eq!(got.into_iter().collect::<Result<Vec<_>, _>>()?, [3.0, 0.0, 1.0, 2.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod exchange;
mod pattern;
mod strategy;
mod validate;

pub use error::{NeighborError, Side};
pub use exchange::Exchange;
pub use pattern::ExchangePattern;
pub use strategy::Strategy;
