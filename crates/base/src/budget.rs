//! The memory budget: how many bytes an input may make the program allocate.
//!
//! Every allocation whose size comes from an input (a Matrix Market size line, a fabric's
//! node count, a benchmark's sizes and ranks, a solver's block size) is first estimated and
//! checked against a [`MemBudget`], so an absurd input is one error line naming what was
//! asked and the budget, instead of an abort or a machine driven into swap. This module
//! reads no flags or environment (only the CLI does); the one thing it reads from the
//! operating system is the physical memory behind the default.
//!
//! The default is half of the memory the process may use ([`MemBudget::system_default`]):
//! the smallest of `MemTotal` in `/proc/meminfo`, the cgroup v2 limit (`memory.max` of the
//! process's cgroup, as a container or batch job sets it) and the soft address-space and
//! data-segment limits (`ulimit -v`, `ulimit -d`, from `/proc/self/limits`). Where none of
//! them can be read (not Linux, no `/proc`), [`FALLBACK_PHYSICAL_BYTES`] (8 GiB) stands in,
//! so the default budget is 4 GiB. Half, because the budget bounds the input-sized data
//! structures while code, thread stacks, the allocator's slack and transient copies need
//! the rest; under `ulimit -v 4G` an input is refused by the budget before an allocation
//! can fail and abort.

use std::fmt;

use thiserror::Error;

/// Physical memory assumed where `/proc/meminfo` cannot be read (8 GiB: a small node or
/// laptop; a larger machine sets its budget explicitly).
pub const FALLBACK_PHYSICAL_BYTES: u64 = 8 << 30;

/// A limit in bytes on what an input may make the program allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemBudget {
    bytes: u64,
}

impl MemBudget {
    /// A budget of `bytes` bytes.
    pub const fn new(bytes: u64) -> Self {
        Self { bytes }
    }

    /// No limit (`u64::MAX` bytes): for callers that bound their inputs themselves.
    pub const fn unlimited() -> Self {
        Self { bytes: u64::MAX }
    }

    /// The budget in bytes.
    pub const fn bytes(self) -> u64 {
        self.bytes
    }

    /// Half of the memory this process may use ([`usable_memory`], or
    /// [`FALLBACK_PHYSICAL_BYTES`] where nothing can be read): room for the input's data
    /// structures while the rest of the machine (other ranks' processes, the page cache, the
    /// OS) and of the process's own limits keeps working.
    pub fn system_default() -> Self {
        // Read once: fabrics are validated against it on every load.
        static USABLE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let usable = *USABLE.get_or_init(|| usable_memory().unwrap_or(FALLBACK_PHYSICAL_BYTES));
        Self::new(usable / 2)
    }

    /// Check that `needed` bytes for `what` fit the budget.
    ///
    /// # Errors
    /// [`BudgetError`] naming `what`, the bytes needed and the budget.
    pub fn check(self, what: impl fmt::Display, needed: u64) -> Result<(), BudgetError> {
        if needed <= self.bytes {
            Ok(())
        } else {
            Err(BudgetError {
                what: what.to_string(),
                needed,
                budget: self.bytes,
            })
        }
    }

    /// [`MemBudget::check`] of a size computed with overflow checks: `None` (the size
    /// overflowed 64 bits) is over any budget, [`MemBudget::unlimited`] included.
    ///
    /// # Errors
    /// [`BudgetError`] as [`MemBudget::check`]; an overflowed size is reported as `u64::MAX`.
    pub fn check_opt(
        self,
        what: impl fmt::Display,
        needed: Option<u64>,
    ) -> Result<(), BudgetError> {
        match needed {
            Some(bytes) => self.check(what, bytes),
            None => Err(BudgetError {
                what: what.to_string(),
                needed: u64::MAX,
                budget: self.bytes,
            }),
        }
    }
}

impl Default for MemBudget {
    /// [`MemBudget::system_default`].
    fn default() -> Self {
        Self::system_default()
    }
}

impl fmt::Display for MemBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&human_bytes(self.bytes))
    }
}

/// An input that would need more memory than the budget allows.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{what} needs {}, over the memory budget of {}", human_bytes(*.needed), human_bytes(*.budget))]
pub struct BudgetError {
    /// What would have been allocated, e.g. `the row pointer of 3000000000 rows`.
    pub what: String,
    /// Bytes it needs (`u64::MAX` when the size overflows 64 bits).
    pub needed: u64,
    /// The budget in bytes.
    pub budget: u64,
}

/// Physical memory in bytes: `MemTotal` of `/proc/meminfo`; `None` where that file cannot
/// be read or parsed.
pub fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo_total(&text)
}

/// Memory this process may use, in bytes: the smallest of [`physical_memory`], the cgroup
/// v2 `memory.max` of its cgroup and its soft `RLIMIT_AS` / `RLIMIT_DATA`; `None` where
/// none of them can be read.
pub fn usable_memory() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok();
    let limits = limits.as_deref().map_or([None, None], |t| {
        [
            parse_soft_limit(t, "Max address space"),
            parse_soft_limit(t, "Max data size"),
        ]
    });
    [physical_memory(), cgroup_memory_max()]
        .into_iter()
        .chain(limits)
        .flatten()
        .min()
}

/// The cgroup v2 memory limit of this process (`memory.max` of the cgroup named in
/// `/proc/self/cgroup`); `None` without one (`max`, cgroup v1, not Linux).
fn cgroup_memory_max() -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    // cgroup v2: the single line `0::/path`.
    let path = groups.lines().find_map(|l| l.strip_prefix("0::"))?;
    let file = format!("/sys/fs/cgroup{}/memory.max", path.trim_end_matches('/'));
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// The soft limit in bytes on the `/proc/self/limits` line starting with `name`; `None`
/// when it is `unlimited` or absent.
fn parse_soft_limit(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse().ok()
}

/// `MemTotal: N kB` of a `/proc/meminfo` text, in bytes.
fn parse_meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut toks = line["MemTotal:".len()..].split_whitespace();
    let n: u64 = toks.next()?.parse().ok()?;
    let unit = match toks.next() {
        Some("kB") | Some("KB") | Some("kb") => 1024,
        None => 1,
        Some(_) => return None,
    };
    n.checked_mul(unit)
}

/// `bytes` for a message: binary units with one decimal above 1 KiB, exact below, and the
/// overflow marker `u64::MAX` as "more than 16 EiB".
pub fn human_bytes(bytes: u64) -> String {
    if bytes == u64::MAX {
        return "more than 16 EiB".to_owned();
    }
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_total_is_read_in_bytes() {
        let text = "MemTotal:       24523456 kB\nMemFree:         1234 kB\n";
        assert_eq!(parse_meminfo_total(text), Some(24523456 * 1024));
        assert_eq!(parse_meminfo_total("MemFree: 3 kB\n"), None);
        assert_eq!(parse_meminfo_total("MemTotal: lots kB\n"), None);
        assert_eq!(parse_meminfo_total("MemTotal: 3 pages\n"), None);
    }

    #[test]
    fn default_is_half_the_usable_memory_or_of_the_fallback() {
        let usable = usable_memory().unwrap_or(FALLBACK_PHYSICAL_BYTES);
        assert_eq!(MemBudget::system_default().bytes(), usable / 2);
        assert!(MemBudget::system_default().bytes() > 0);
        if let Some(physical) = physical_memory() {
            assert!(usable <= physical);
        }
    }

    #[test]
    fn soft_limits_are_read_in_bytes() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max data size             unlimited            unlimited            bytes     \n\
                    Max address space         4294967296           unlimited            bytes     \n";
        assert_eq!(parse_soft_limit(text, "Max address space"), Some(4 << 30));
        assert_eq!(parse_soft_limit(text, "Max data size"), None);
        assert_eq!(parse_soft_limit(text, "Max file locks"), None);
    }

    #[test]
    fn check_names_what_was_asked_and_the_budget() {
        let b = MemBudget::new(1 << 20);
        assert!(b.check("x", 1 << 20).is_ok());
        let e = b.check("the row pointer", 3 << 20).unwrap_err();
        assert_eq!((e.needed, e.budget), (3 << 20, 1 << 20));
        assert_eq!(
            e.to_string(),
            "the row pointer needs 3.0 MiB, over the memory budget of 1.0 MiB"
        );
        assert!(b.check("one byte more", (1 << 20) + 1).is_err());
        let e = b.check_opt("an overflow", None).unwrap_err();
        assert_eq!(e.needed, u64::MAX);
        assert!(e.to_string().contains("more than 16 EiB"), "{e}");
        assert!(MemBudget::unlimited().check_opt("x", None).is_err());
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
