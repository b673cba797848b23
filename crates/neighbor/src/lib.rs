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
//! ALGORITHMS.md section 2. [`Strategy::Naive`] is what MPI implementations do: post all N
//! sends, then wait all N receives; with C communication devices of bandwidth B and
//! per-message cost L, devices carry whole messages: D_naive = L*ceil(N/C) + ceil(N/C)*m/B.
//! [`Strategy::Segmented`] is the gcd-based segmentation for nodes with several devices:
//! N' = N/gcd(N, C) steps of C pieces of m*gcd(N, C)/C bytes, one per device, no two to one
//! destination: D_seg = L*N' + N'*m/(C'*B) (falls back to naive when N <= C or C == 1). The
//! model is [`model::time`]; [`Mode`] picks two-sided messages or one-sided puts. Per
//! exchange a rank sends each destination in its pattern 8 bytes per listed index (in one
//! message, or C' pieces when segmented), zero-length messages included for naive.
//!
//! Every exchange hands a modeling backend (`sim`) its
//! [`RankSchedule`](castack_collectives::schedule::RankSchedule), built once at
//! construction ([`Exchange::rank_schedule`]).
//!
//! Also here: [`grid`] (halo exchange of block-decomposed structured grids, with batched
//! concurrent copies [`copy_many`] or staged ones [`copy_staged`], and overlap), and
//! [`stencil`] (the 13-point diffusion demo, `examples/stencil.rs`).
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

mod copy;
mod error;
mod exchange;
pub mod grid;
mod mode;
pub mod model;
mod pattern;
pub mod stencil;
mod strategy;
mod validate;

pub use copy::{check_copies, copy_many, copy_staged, CopyOp};
pub use error::{NeighborError, Side};
pub use exchange::Exchange;
pub use mode::Mode;
pub use pattern::ExchangePattern;
pub use strategy::{Strategy, DEFAULT_DEVICES};
