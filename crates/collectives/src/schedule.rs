//! Communication schedules: an algorithm as data.
//!
//! A collective or neighbour algorithm is a function that builds a [`Schedule`]: for each
//! rank an ordered list of [`Step`]s. A step is the set of transfers a rank issues together
//! (puts of byte ranges of its working buffer into another rank's working buffer, optionally
//! reduced on arrival) plus local copies, and the arrivals it waits for before the next step.
//! One step with several puts from one rank is exactly one chained-DMA start on TCA.
//!
//! The working buffer of a rank is the caller's buffer followed by `scratch_bytes` of scratch
//! space: offsets below the caller buffer's length address it, offsets above address scratch.
//!
//! Every backend interprets the same schedule: `threads` and `mpi` execute each put as a
//! matched send/receive pair ([`crate::execute`]); the simulator prices the whole schedule.
//!
//! A step may also say what its data movement costs beyond the transfers, for the model
//! only: where its arrivals land ([`Step::arrivals_in`]) and the local work done once they
//! have ([`Step::local`]: a reduction kernel, a host<->device copy). The interpreter does
//! not read these (the data effect is already in the arrivals and copies); `sim` prices them
//! with the fabric's device model.

use std::ops::Range;

/// Element type of a reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Datatype {
    /// 64-bit IEEE float.
    F64,
    /// 64-bit signed integer (counts).
    I64,
}

impl Datatype {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        8
    }
}

/// A reduction operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Element-wise sum.
    Sum,
    /// Element-wise maximum.
    Max,
    /// Element-wise minimum.
    Min,
}

impl Op {
    /// Combine `a` and `b` (`a` from the lower-ranked block).
    #[inline]
    pub fn apply_f64(self, a: f64, b: f64) -> f64 {
        match self {
            Op::Sum => a + b,
            Op::Max => a.max(b),
            Op::Min => a.min(b),
        }
    }

    /// Combine `a` and `b` as integers (wrapping sum).
    #[inline]
    pub fn apply_i64(self, a: i64, b: i64) -> i64 {
        match self {
            Op::Sum => a.wrapping_add(b),
            Op::Max => a.max(b),
            Op::Min => a.min(b),
        }
    }
}

/// A reduction applied when data arrives: `local = combine(incoming, local)` element-wise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reduction {
    /// The operator.
    pub op: Op,
    /// The element type.
    pub datatype: Datatype,
}

/// What happens to arriving bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Combine {
    /// Overwrite the destination range.
    Copy,
    /// Reduce into the destination range.
    Reduce(Reduction),
}

/// One put: bytes `src` of my working buffer into rank `to`'s buffer at `dst_offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Put {
    /// Destination rank.
    pub to: usize,
    /// Source byte range in my working buffer.
    pub src: Range<usize>,
    /// Byte offset in the destination's working buffer.
    pub dst_offset: usize,
}

/// One expected arrival: a put from `from` landing at `dst_offset`, `len` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// Source rank.
    pub from: usize,
    /// Byte offset in my working buffer.
    pub dst_offset: usize,
    /// Length in bytes.
    pub len: usize,
    /// How the bytes are combined with what is there.
    pub combine: Combine,
}

/// A local copy within my working buffer (done before the step's puts are issued).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalCopy {
    /// Source byte range.
    pub src: Range<usize>,
    /// Destination byte offset.
    pub dst_offset: usize,
}

/// A memory of a rank's node, named relative to where its buffers live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum WorkMemory {
    /// The memory the rank's buffers live in (host memory, or the GPU's on `sim` with
    /// GPU memory).
    #[default]
    Buffer,
    /// Host memory (the same as `Buffer` when the buffers are in host memory).
    Host,
}

/// Local work a step does after its puts and arrivals completed, before the next step: a
/// cost annotation for modeling backends (the interpreter ignores it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocalWork {
    /// Kernels (or a CPU loop) on the device that owns `on`: `bytes` through memory,
    /// `flops` operations, `launches` kernel launches.
    Compute {
        /// The memory the work runs on (host: the CPU).
        on: WorkMemory,
        /// Bytes read and written.
        bytes: u64,
        /// Floating-point operations.
        flops: u64,
        /// Kernel launches.
        launches: u32,
    },
    /// A copy of `bytes` between two memories of the node (free when both are the same).
    Copy {
        /// Source memory.
        from: WorkMemory,
        /// Destination memory.
        to: WorkMemory,
        /// Bytes copied.
        bytes: u64,
    },
}

/// The transfers one rank issues together and the arrivals it waits for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    /// Local copies, done first.
    pub copies: Vec<LocalCopy>,
    /// Puts issued together (one chained-DMA start where the fabric supports chaining).
    pub puts: Vec<Put>,
    /// Arrivals this rank waits for before its next step.
    pub arrivals: Vec<Arrival>,
    /// Where the arrivals land (model only; default: the buffers' memory).
    pub arrivals_in: WorkMemory,
    /// Local work after the puts and arrivals (model only).
    pub local: Vec<LocalWork>,
}

impl Step {
    /// A step with no copies, puts or arrivals.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a put.
    pub fn put(mut self, to: usize, src: Range<usize>, dst_offset: usize) -> Self {
        self.puts.push(Put {
            to,
            src,
            dst_offset,
        });
        self
    }

    /// Add an arrival that overwrites.
    pub fn arrive(mut self, from: usize, dst_offset: usize, len: usize) -> Self {
        self.arrivals.push(Arrival {
            from,
            dst_offset,
            len,
            combine: Combine::Copy,
        });
        self
    }

    /// Add an arrival that is reduced into place.
    pub fn arrive_reduce(
        mut self,
        from: usize,
        dst_offset: usize,
        len: usize,
        reduction: Reduction,
    ) -> Self {
        self.arrivals.push(Arrival {
            from,
            dst_offset,
            len,
            combine: Combine::Reduce(reduction),
        });
        self
    }

    /// Add a local copy.
    pub fn copy(mut self, src: Range<usize>, dst_offset: usize) -> Self {
        self.copies.push(LocalCopy { src, dst_offset });
        self
    }

    /// Say where the arrivals land (model only).
    pub fn arrivals_in(mut self, memory: WorkMemory) -> Self {
        self.arrivals_in = memory;
        self
    }

    /// Add local work (model only).
    pub fn work(mut self, work: LocalWork) -> Self {
        self.local.push(work);
        self
    }

    /// True when the step does nothing.
    pub fn is_empty(&self) -> bool {
        self.copies.is_empty()
            && self.puts.is_empty()
            && self.arrivals.is_empty()
            && self.local.is_empty()
    }
}

/// One rank's part of a schedule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankSchedule {
    /// Steps in order.
    pub steps: Vec<Step>,
    /// Scratch bytes appended after the caller's buffer.
    pub scratch_bytes: usize,
}

impl RankSchedule {
    /// Append a step unless it is empty.
    pub fn push(&mut self, step: Step) {
        if !step.is_empty() {
            self.steps.push(step);
        }
    }
}

/// A whole schedule: one [`RankSchedule`] per rank, plus the caller buffer length each rank
/// passes (so the schedule can be validated and priced without data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Per-rank parts, indexed by rank.
    pub ranks: Vec<RankSchedule>,
    /// Caller buffer length in bytes, per rank.
    pub buffer_bytes: Vec<usize>,
}

impl Schedule {
    /// An empty schedule for `p` ranks with the given caller buffer lengths.
    pub fn new(buffer_bytes: Vec<usize>) -> Self {
        let ranks = vec![RankSchedule::default(); buffer_bytes.len()];
        Self {
            ranks,
            buffer_bytes,
        }
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// Take rank `r`'s part (used by backends that run one rank per process or thread).
    pub fn into_rank(mut self, r: usize) -> RankSchedule {
        std::mem::take(&mut self.ranks[r])
    }

    /// Total messages and bytes put by all ranks (for the cost lines in algorithm docs).
    pub fn totals(&self) -> (usize, usize) {
        let mut msgs = 0;
        let mut bytes = 0;
        for rs in &self.ranks {
            for st in &rs.steps {
                msgs += st.puts.len();
                bytes += st.puts.iter().map(|p| p.src.len()).sum::<usize>();
            }
        }
        (msgs, bytes)
    }

    /// Check the schedule is consistent: every put has exactly one matching arrival at its
    /// destination (same source, offset and length, in the same order per pair), every range
    /// lies inside the working buffers. Used by tests of every algorithm.
    pub fn validate(&self) -> Result<(), String> {
        let p = self.size();
        let work = |r: usize| self.buffer_bytes[r] + self.ranks[r].scratch_bytes;
        // Per ordered pair (from, to): the sequence of (dst_offset, len) of puts and arrivals.
        let mut sent: Vec<Vec<Vec<(usize, usize)>>> = vec![vec![Vec::new(); p]; p];
        let mut recv: Vec<Vec<Vec<(usize, usize)>>> = vec![vec![Vec::new(); p]; p];
        for (r, rs) in self.ranks.iter().enumerate() {
            for (s, st) in rs.steps.iter().enumerate() {
                for c in &st.copies {
                    if c.src.end > work(r) || c.dst_offset + c.src.len() > work(r) {
                        return Err(format!("rank {r} step {s}: local copy out of range"));
                    }
                }
                for put in &st.puts {
                    if put.to >= p {
                        return Err(format!("rank {r} step {s}: put to rank {}", put.to));
                    }
                    if put.src.start > put.src.end || put.src.end > work(r) {
                        return Err(format!("rank {r} step {s}: put source out of range"));
                    }
                    if put.dst_offset + put.src.len() > work(put.to) {
                        return Err(format!("rank {r} step {s}: put overflows rank {}", put.to));
                    }
                    sent[r][put.to].push((put.dst_offset, put.src.len()));
                }
                for a in &st.arrivals {
                    if a.from >= p {
                        return Err(format!("rank {r} step {s}: arrival from rank {}", a.from));
                    }
                    if a.dst_offset + a.len > work(r) {
                        return Err(format!("rank {r} step {s}: arrival out of range"));
                    }
                    if let Combine::Reduce(red) = a.combine {
                        if a.len % red.datatype.size() != 0 || a.dst_offset % 8 != 0 {
                            return Err(format!("rank {r} step {s}: misaligned reduction"));
                        }
                    }
                    recv[a.from][r].push((a.dst_offset, a.len));
                }
            }
        }
        for from in 0..p {
            for to in 0..p {
                if sent[from][to] != recv[from][to] {
                    return Err(format!(
                        "puts from {from} to {to} {:?} do not match arrivals {:?}",
                        sent[from][to], recv[from][to]
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Offsets of blocks with the given byte lengths, laid end to end; the last entry is the
/// total. `displacements(&[3, 0, 5]) == [0, 3, 3, 8]`.
pub fn displacements(lens: &[usize]) -> Vec<usize> {
    let mut d = Vec::with_capacity(lens.len() + 1);
    let mut acc = 0;
    d.push(0);
    for &l in lens {
        acc += l;
        d.push(acc);
    }
    d
}
