//! The memory budget of a run: `--mem-budget SIZE` on every subcommand that allocates by its
//! input (solve, compare, plan, bench collectives / pingpong / neighbor, gen), else the
//! environment's `KRYLOV_MEM_BUDGET`, else half the memory the process may use
//! ([`MemBudget::system_default`]: the least of `MemTotal` of `/proc/meminfo`, the cgroup
//! v2 `memory.max` and the soft `ulimit -v` / `-d`; 8 GiB assumed where none can be read). Matrix sizes, fabrics, benchmark buffers and solver workspaces are
//! checked against it before they are allocated, so an absurd input is one line and exit
//! 2 instead of an abort or a machine driven into swap.

use std::str::FromStr;

use castack_collectives::fabric_sim::MemBudget;
use clap::Args;
use serde::Deserialize;

use crate::exit::{bad, CliError};

/// The environment variable read when `--mem-budget` is absent.
pub(crate) const ENV: &str = "KRYLOV_MEM_BUDGET";

/// `--mem-budget`'s help (shared by every subcommand that has the flag).
pub(crate) fn help() -> String {
    format!(
        "Memory budget: an input whose matrix, fabric, buffers or solver workspace would need more is refused (exit 2) before anything is allocated. SIZE in bytes with suffixes K, M, G (1K = 1024) [default: ${ENV}, else half the least of the physical memory (MemTotal), the cgroup memory.max and the soft ulimit -v / -d (8 GiB assumed where none can be read)]"
    )
}

/// A size in bytes (`4096`, `64K`, `2G`), at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Size(pub(crate) u64);

impl FromStr for Size {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bytes = crate::table::parse_size(s)?;
        if bytes == 0 {
            return Err(format!("'{s}': a memory budget must be at least 1 byte"));
        }
        Ok(Size(bytes as u64))
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `--mem-budget SIZE`, flattened into the subcommands that do not take solve's settings.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct MemBudgetArg {
    #[arg(long, value_name = "SIZE", help = help())]
    pub(crate) mem_budget: Option<Size>,
}

impl MemBudgetArg {
    /// The budget: the flag, else the environment, else the system default.
    pub(crate) fn resolve(&self) -> Result<MemBudget, CliError> {
        resolve(self.mem_budget)
    }
}

/// The budget: `flag`, else `KRYLOV_MEM_BUDGET`, else [`MemBudget::system_default`].
pub(crate) fn resolve(flag: Option<Size>) -> Result<MemBudget, CliError> {
    if let Some(Size(bytes)) = flag {
        return Ok(MemBudget::new(bytes));
    }
    match std::env::var(ENV) {
        Ok(text) => text
            .parse::<Size>()
            .map(|Size(b)| MemBudget::new(b))
            .map_err(|e| bad(format!("{ENV}: {e}"))),
        Err(std::env::VarError::NotPresent) => Ok(MemBudget::system_default()),
        Err(std::env::VarError::NotUnicode(_)) => Err(bad(format!("{ENV}: not valid UTF-8"))),
    }
}

/// One line for an input over the budget, with how to raise it.
pub(crate) fn over(e: impl std::fmt::Display) -> CliError {
    bad(format!("{e} (raise it with --mem-budget or {ENV})"))
}

/// Check the largest of a benchmark's cases, `bytes` (`None`: overflowed 64 bits) for each
/// size, against the memory budget before anything is allocated; `who` says what holds the
/// buffers (`4 ranks`).
pub(crate) fn check_buffers(
    budget: MemBudget,
    who: &str,
    bytes: impl Iterator<Item = Option<u64>>,
) -> Result<(), CliError> {
    let mut largest = Some(0u64);
    for b in bytes {
        largest = match (largest, b) {
            (Some(l), Some(b)) => Some(l.max(b)),
            _ => None,
        };
    }
    budget
        .check_opt(format!("the buffers of {who}"), largest)
        .map_err(over)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes_and_refuse_zero() {
        assert_eq!("1K".parse::<Size>(), Ok(Size(1024)));
        assert_eq!("3G".parse::<Size>(), Ok(Size(3 << 30)));
        assert_eq!("4096".parse::<Size>(), Ok(Size(4096)));
        assert!("0".parse::<Size>().is_err());
        assert!("lots".parse::<Size>().is_err());
    }

    #[test]
    fn the_flag_wins_over_everything() {
        assert_eq!(resolve(Some(Size(77))).unwrap(), MemBudget::new(77));
    }
}
