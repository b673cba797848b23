//! # castack-base
//!
//! The two things every castack crate shares, in a crate of their own below all the others,
//! so that `castack-fabric-sim` (the interconnect model) and `castack-sparse` (Matrix Market
//! I/O, generators, reordering, partitioning) need no other castack crate:
//!
//! - [`budget`]: the memory budget ([`MemBudget`]) that every allocation sized by an input
//!   is checked against first;
//! - [`registry`]: the error of an unknown name in a registry enum ([`UnknownAlgorithm`])
//!   and [`impl_registry!`], which derives `Display` and `FromStr` from a registry's `ALL`
//!   and `name()`.
//!
//! ```
//! use castack_base::MemBudget;
//!
//! let budget = MemBudget::new(1 << 20); // 1 MiB
//! // 100,000 f64 values fit; 1,000,000 do not, and the error says what and how much.
//! assert!(budget.check("a vector", 100_000 * 8).is_ok());
//! let err = budget.check("a vector", 1_000_000 * 8).unwrap_err();
//! assert_eq!(err.to_string(), "a vector needs 7.6 MiB, over the memory budget of 1.0 MiB");
//! ```

pub mod budget;
pub mod registry;

pub use budget::{BudgetError, MemBudget};
pub use registry::UnknownAlgorithm;
