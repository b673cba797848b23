//! The crate's error type.

use thiserror::Error;

/// Everything that can go wrong loading a fabric or pricing transfers on it. Every message is
/// one line.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum FabricError {
    /// The TOML text does not parse or does not have the expected shape.
    #[error("fabric config does not parse: {0}")]
    Parse(String),
    /// The config parses but describes an impossible fabric.
    #[error("fabric config `{config}`: {field}: {reason}")]
    Invalid {
        /// The config's `name`.
        config: String,
        /// The offending field, as a TOML path.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The fabric the config describes would not fit the memory budget.
    #[error("fabric config `{config}`: {error}")]
    OverBudget {
        /// The config's `name`.
        config: String,
        /// What was asked and the budget.
        error: crate::budget::BudgetError,
    },
    /// No preset of that name is embedded.
    #[error("unknown fabric preset `{name}` (presets: {known})")]
    UnknownPreset {
        /// The requested name.
        name: String,
        /// The embedded presets, comma separated.
        known: String,
    },
    /// A transfer the fabric cannot carry (node out of range, PIO from GPU memory, ...).
    #[error("transfer {index}: {reason}")]
    Transfer {
        /// Position of the transfer in the caller's list (or the engine's post order).
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A run stopped at its work limit ([`crate::Fabric::price_concurrent_within`]).
    #[error("pricing stopped after {updates} flow rate updates (limit {limit})")]
    WorkLimit {
        /// Rate updates done when it stopped (just over the limit).
        updates: u64,
        /// The limit.
        limit: u64,
    },
    /// A schedule that cannot be priced (unmatched puts, deadlock, bad rank mapping).
    #[error("schedule: {0}")]
    Schedule(String),
    /// Local work priced on a fabric whose config has no device model for that memory.
    #[error("fabric `{config}` has no compute model for {memory} memory (add [compute.{memory}])")]
    NoComputeModel {
        /// The config's `name`.
        config: String,
        /// The memory kind (`host` or `gpu`).
        memory: &'static str,
    },
    /// Host-device copies priced on a device model without a host link.
    #[error("fabric `{config}`: its [compute.{memory}] model has no host link (add host_link_gbs and host_link_us)")]
    NoHostLink {
        /// The config's `name`.
        config: String,
        /// The memory kind (`host` or `gpu`).
        memory: &'static str,
    },
}
