//! Emulated device memory: one reserved address range (the arena), bump-allocated and never
//! reused, so a stale device address always names the allocation it came from.
//!
//! Every allocation starts on a page and is followed by at least one page that is never
//! mapped for access. New memory is filled with `0xff` bytes (a NaN as `f64`, index
//! `u32::MAX` as `u32`: reading what was never written shows), freed memory is poisoned
//! the same way and then made inaccessible (`PROT_NONE`, pages released), so an access the
//! checks below did not see faults instead of reading stale values. The checks themselves
//! (`Memory::live_range`, `Memory::describe`) are what kernel accesses, copies and
//! launch arguments go through.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

/// Size of a page of the arena.
pub(crate) const PAGE: usize = 4096;
/// Freed allocations remembered for messages ("freed allocation #12"); older ones are
/// forgotten (their addresses stay unmapped and unused, so accesses are still errors).
const FREED_KEPT: usize = 1 << 16;
/// The byte every new and freed allocation is filled with.
pub(crate) const POISON: u8 = 0xff;

/// One device allocation.
#[derive(Debug, Clone)]
pub(crate) struct Alloc {
    /// Running number, for messages.
    pub(crate) id: u64,
    /// Bytes asked for.
    pub(crate) len: usize,
    /// Whether it is live (not freed).
    pub(crate) live: bool,
}

/// The arena and its allocations.
#[derive(Debug)]
pub(crate) struct Memory {
    base: usize,
    size: usize,
    /// Offset of the next allocation.
    next: usize,
    allocs: BTreeMap<usize, Alloc>,
    freed: VecDeque<usize>,
    live_bytes: usize,
    next_id: u64,
}

/// The arena sizes tried, largest first (`CASTACK_CUDA_EMU_ARENA_GIB` overrides).
const ARENA_GIB: [usize; 4] = [256, 64, 16, 4];

impl Memory {
    /// Reserve the arena (address space only: nothing is committed until allocated).
    pub(crate) fn reserve() -> Result<Memory, String> {
        let sizes: Vec<usize> = match std::env::var("CASTACK_CUDA_EMU_ARENA_GIB") {
            Ok(v) => vec![v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&g| g > 0)
                .ok_or_else(|| {
                    format!("CASTACK_CUDA_EMU_ARENA_GIB: not a positive integer: `{v}`")
                })?],
            Err(_) => ARENA_GIB.to_vec(),
        };
        for gib in sizes {
            let size = gib << 30;
            // SAFETY: an anonymous private mapping with no access: reserves address space.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                return Ok(Memory {
                    base: p as usize,
                    size,
                    next: PAGE,
                    allocs: BTreeMap::new(),
                    freed: VecDeque::new(),
                    live_bytes: 0,
                    next_id: 1,
                });
            }
        }
        Err("could not reserve address space for the emulated device memory".into())
    }

    /// Bytes of live allocations.
    pub(crate) fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    /// Whether `addr` lies in the arena.
    pub(crate) fn in_arena(&self, addr: usize) -> bool {
        addr >= self.base && addr < self.base + self.size
    }

    /// A new allocation of `len > 0` bytes, filled with [`POISON`].
    pub(crate) fn alloc(&mut self, len: usize) -> Result<usize, String> {
        let span = len
            .checked_add(PAGE - 1)
            .map(|l| l / PAGE * PAGE)
            .ok_or_else(|| format!("allocation of {len} bytes: too large"))?;
        // One unmapped page after it.
        let need = span + PAGE;
        if self.next + need > self.size {
            return Err(format!(
                "allocation of {len} bytes: the emulated device address space ({} GiB, set \
                 CASTACK_CUDA_EMU_ARENA_GIB) is used up: the emulator never reuses addresses",
                self.size >> 30
            ));
        }
        let start = self.base + self.next;
        // SAFETY: [start, start + span) lies in the reserved arena and in no live
        // allocation (addresses are handed out once).
        let rc = unsafe {
            libc::mprotect(
                start as *mut libc::c_void,
                span,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            return Err(format!(
                "allocation of {len} bytes: the host refused the memory ({})",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: just mapped read-write, `len <= span`.
        unsafe { std::ptr::write_bytes(start as *mut u8, POISON, len) };
        self.next += need;
        let id = self.next_id;
        self.next_id += 1;
        self.allocs.insert(
            start,
            Alloc {
                id,
                len,
                live: true,
            },
        );
        self.live_bytes += len;
        Ok(start)
    }

    /// Free the allocation that starts at `addr`: poisoned, then made inaccessible.
    pub(crate) fn free(&mut self, addr: usize) -> Result<(), String> {
        let Some(a) = self.allocs.get_mut(&addr) else {
            return Err(format!("free of {addr:#x}: {}", self.describe_addr(addr)));
        };
        if !a.live {
            return Err(format!(
                "free of {addr:#x}: allocation #{} was freed already (double free)",
                a.id
            ));
        }
        a.live = false;
        let len = a.len;
        self.live_bytes -= len;
        let span = len.div_ceil(PAGE) * PAGE;
        // SAFETY: the allocation's own pages, mapped by `alloc`, not used after this.
        unsafe {
            std::ptr::write_bytes(addr as *mut u8, POISON, len);
            libc::mprotect(addr as *mut libc::c_void, span, libc::PROT_NONE);
            libc::madvise(addr as *mut libc::c_void, span, libc::MADV_DONTNEED);
        }
        self.freed.push_back(addr);
        if self.freed.len() > FREED_KEPT {
            if let Some(old) = self.freed.pop_front() {
                self.allocs.remove(&old);
            }
        }
        Ok(())
    }

    /// The live allocation holding all of `[addr, addr + len)`, as `(start, end)`.
    pub(crate) fn live_range(&self, addr: usize, len: usize) -> Option<(usize, usize)> {
        let (&start, a) = self.allocs.range(..=addr).next_back()?;
        let end = start + a.len;
        (a.live && addr.checked_add(len).is_some_and(|e| e <= end)).then_some((start, end))
    }

    /// Whether `[addr, addr + len)` lies in one live allocation.
    pub(crate) fn is_live(&self, addr: usize, len: usize) -> bool {
        self.live_range(addr, len).is_some()
    }

    /// What `[addr, addr + len)` is, for an error message: past the end of allocation #N,
    /// inside freed allocation #N, in no allocation, or host memory.
    pub(crate) fn describe(&self, addr: usize, len: usize) -> String {
        format!("{len} bytes at {addr:#x}: {}", self.what(addr, len))
    }

    /// What the address `addr` is, for a pointer argument's message: `describe` without the
    /// access's size.
    pub(crate) fn describe_pointer(&self, addr: usize) -> String {
        format!("holds {addr:#x}: {}", self.what(addr, 1))
    }

    fn what(&self, addr: usize, len: usize) -> String {
        let mut s = String::new();
        if let Some((&start, a)) = self.allocs.range(..=addr).next_back() {
            let end = start + a.len;
            let state = if a.live { "" } else { "freed " };
            if addr < end {
                if a.live {
                    let _ = write!(
                        s,
                        "runs {} bytes past the end of allocation #{} ({} bytes at {start:#x}, \
                         offset {})",
                        addr + len - end,
                        a.id,
                        a.len,
                        addr - start
                    );
                } else {
                    let _ = write!(
                        s,
                        "inside freed allocation #{} ({} bytes at {start:#x}, offset {}): use \
                         after free",
                        a.id,
                        a.len,
                        addr - start
                    );
                }
                return s;
            }
            if self.in_arena(addr) {
                let _ = write!(
                    s,
                    "{} bytes past the end of {state}allocation #{} ({} bytes at {start:#x})",
                    addr - end,
                    a.id,
                    a.len
                );
                if let Some((&next, b)) = self.allocs.range(addr..).next() {
                    let _ = write!(
                        s,
                        ", {} bytes before allocation #{} ({} bytes at {next:#x})",
                        next - addr,
                        b.id,
                        b.len
                    );
                }
                return s;
            }
        }
        s.push_str(&self.describe_addr(addr));
        s
    }

    fn describe_addr(&self, addr: usize) -> String {
        if addr == 0 {
            "the null address".into()
        } else if self.in_arena(addr) {
            match self.allocs.range(addr..).next() {
                Some((&start, a)) if start - addr < PAGE => format!(
                    "{} bytes before allocation #{} ({} bytes at {start:#x})",
                    start - addr,
                    a.id,
                    a.len
                ),
                _ => "a device address in no allocation".into(),
            }
        } else {
            "not device memory (a host address?)".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_fresh_poisoned_and_checked() {
        let mut m = Memory::reserve().expect("arena");
        let a = m.alloc(100).expect("alloc");
        let b = m.alloc(8).expect("alloc");
        assert!(a.is_multiple_of(PAGE) && b.is_multiple_of(PAGE) && b > a + 100);
        // SAFETY: 100 bytes allocated at a.
        let bytes = unsafe { std::slice::from_raw_parts(a as *const u8, 100) };
        assert!(bytes.iter().all(|&x| x == POISON));
        assert!(m.is_live(a, 100) && m.is_live(a + 96, 4));
        assert!(!m.is_live(a + 96, 8));
        assert!(m
            .describe(a + 100, 8)
            .contains("0 bytes past the end of allocation #1"));
        assert!(m.describe(a + 96, 8).contains("runs 4 bytes past the end"));
        m.free(a).expect("free");
        assert!(!m.is_live(a, 8));
        assert!(m.describe(a, 8).contains("use after free"));
        assert!(m.free(a).unwrap_err().contains("double free"));
        assert!(m.free(a + 8).is_err());
        let host = 0u64;
        assert!(m
            .describe(&host as *const u64 as usize, 8)
            .contains("host address"));
        // Addresses are never reused.
        let c = m.alloc(100).expect("alloc");
        assert!(c > b);
        assert_eq!(m.live_bytes(), 108);
    }
}
