//! The persistent neighbour exchange: built once (collectively validated), run many times
//! without allocation.

use std::ops::Range;

use castack_collectives::{Communicator, SendRequest, Tag};

use crate::error::{NeighborError, Side};
use crate::pattern::ExchangePattern;
use crate::strategy::{naive, Strategy};
use crate::validate::validate_global;

/// One neighbour's message: the peer and its range of values in the flattened index list.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) rank: usize,
    pub(crate) values: Range<usize>,
}

/// The local copy (self entry): ranges in the flattened send and receive index lists.
#[derive(Debug, Clone)]
pub(crate) struct Local {
    pub(crate) send: Range<usize>,
    pub(crate) recv: Range<usize>,
}

/// A validated pattern, flattened for packing and unpacking.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) src_len: usize,
    pub(crate) dst_len: usize,
    /// Messages to other ranks, in declaration order; their values first in `send_index`,
    /// the local copy's last.
    pub(crate) sends: Vec<Peer>,
    /// Messages from other ranks, in declaration order; likewise in `recv_index`.
    pub(crate) recvs: Vec<Peer>,
    pub(crate) send_index: Vec<usize>,
    pub(crate) recv_index: Vec<usize>,
    pub(crate) local: Option<Local>,
    neighbors: usize,
}

impl Plan {
    /// Flatten a pattern that passed validation.
    fn new(
        pattern: ExchangePattern,
        rank: usize,
        size: usize,
        src_len: usize,
        dst_len: usize,
    ) -> Self {
        fn flatten(
            list: Vec<(usize, Vec<usize>)>,
            rank: usize,
        ) -> (Vec<Peer>, Vec<usize>, Option<Range<usize>>) {
            let total = list.iter().map(|(_, i)| i.len()).sum();
            let mut index = Vec::with_capacity(total);
            let mut peers = Vec::with_capacity(list.len());
            let mut own = None;
            for (r, idx) in &list {
                if *r != rank {
                    let start = index.len();
                    index.extend_from_slice(idx);
                    peers.push(Peer {
                        rank: *r,
                        values: start..index.len(),
                    });
                }
            }
            if let Some((_, idx)) = list.iter().find(|(r, _)| *r == rank) {
                let start = index.len();
                index.extend_from_slice(idx);
                own = Some(start..index.len());
            }
            (peers, index, own)
        }
        let (sends, send_index, own_send) = flatten(pattern.sends, rank);
        let (recvs, recv_index, own_recv) = flatten(pattern.recvs, rank);
        let local = match (own_send, own_recv) {
            (Some(send), Some(recv)) => Some(Local { send, recv }),
            _ => None,
        };
        let mut peers: Vec<usize> = sends.iter().chain(&recvs).map(|p| p.rank).collect();
        peers.sort_unstable();
        peers.dedup();
        Self {
            rank,
            size,
            src_len,
            dst_len,
            sends,
            recvs,
            send_index,
            recv_index,
            local,
            neighbors: peers.len(),
        }
    }
}

/// Buffers reused by every exchange: sized at construction, never grown.
#[derive(Debug)]
pub(crate) struct Workspace {
    /// Packed outgoing values (and the local copy), 8 bytes each in `send_index` order.
    pub(crate) pack: Vec<u8>,
    /// Sends posted by `start`, completed by `finish`.
    pub(crate) sends: Vec<SendRequest>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Started(Tag),
    Failed,
}

/// A persistent neighbour exchange of `f64` values.
///
/// Built once from an [`ExchangePattern`] by [`Exchange::new`] (collective), then run any
/// number of times, either in one call ([`Exchange::exchange`]) or split-phase
/// ([`Exchange::start`], compute, [`Exchange::finish`]) so that the caller can compute what
/// needs no received values while messages are in flight.
///
/// Every rank must run the exchanges built on a communicator in the same order (each draws
/// one collective tag in `start`), including ranks with no neighbours. Exchanges allocate
/// nothing once built.
///
/// Dropping an exchange between `start` and `finish` is a bug: the posted sends are never
/// completed (debug builds assert it).
#[derive(Debug)]
pub struct Exchange {
    strategy: Strategy,
    plan: Plan,
    ws: Workspace,
    phase: Phase,
}

impl Exchange {
    /// Build an exchange for this rank of `comm`, whose caller slices hold `src_len`
    /// (sent from) and `dst_len` (received into) values.
    ///
    /// Collective: every rank of `comm` must call it, in the same order relative to other
    /// collectives. The pattern is checked locally
    /// ([`ExchangePattern::validate_local`]) and globally (every declared send matches a
    /// declared receive with the same value count). If any rank's pattern is invalid, every
    /// rank returns an error (none hangs): a global mismatch is reported identically on all
    /// ranks; a local one by its rank, the others returning
    /// [`NeighborError::PeerInvalid`].
    ///
    /// Cost: two `i64` allreduces (of `5p` and `3p` entries) and one 8-byte message per
    /// declared neighbour pair.
    pub fn new<C: Communicator + ?Sized>(
        comm: &C,
        pattern: ExchangePattern,
        src_len: usize,
        dst_len: usize,
        strategy: Strategy,
    ) -> Result<Self, NeighborError> {
        let (rank, size) = (comm.rank(), comm.size());
        let local = pattern.validate_local(rank, size, src_len, dst_len);
        validate_global(comm, &pattern, local)?;
        let plan = Plan::new(pattern, rank, size, src_len, dst_len);
        let ws = Workspace {
            pack: vec![0u8; 8 * plan.send_index.len()],
            sends: Vec::with_capacity(plan.sends.len()),
        };
        Ok(Self {
            strategy,
            plan,
            ws,
            phase: Phase::Idle,
        })
    }

    /// Pack the values of `src` and post every send of one exchange.
    ///
    /// Errors: [`NeighborError::AlreadyStarted`] if the previous exchange is unfinished,
    /// [`NeighborError::SliceLength`] if `src` is not `src_len` long (both leave the exchange
    /// as it was, drawing no tag), or a communication error (the exchange is then unusable).
    pub fn start<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        src: &[f64],
    ) -> Result<(), NeighborError> {
        self.check_comm(comm)?;
        match self.phase {
            Phase::Idle => {}
            Phase::Started(_) => {
                return Err(NeighborError::AlreadyStarted {
                    rank: self.plan.rank,
                })
            }
            Phase::Failed => {
                return Err(NeighborError::Failed {
                    rank: self.plan.rank,
                })
            }
        }
        if src.len() != self.plan.src_len {
            return Err(NeighborError::SliceLength {
                side: Side::Send,
                expected: self.plan.src_len,
                got: src.len(),
            });
        }
        let tag = comm.next_collective_tag();
        let started = match self.strategy {
            Strategy::Naive => naive::start(&self.plan, &mut self.ws, comm, src, tag),
        };
        match started {
            Ok(()) => {
                self.phase = Phase::Started(tag);
                Ok(())
            }
            Err(e) => {
                self.phase = Phase::Failed;
                Err(e.into())
            }
        }
    }

    /// Wait for every incoming message of the exchange begun by [`Exchange::start`] and
    /// unpack it into `dst` (only the indices of the receive lists are written), then
    /// complete the sends.
    ///
    /// Errors: [`NeighborError::NotStarted`] without a `start`,
    /// [`NeighborError::SliceLength`] if `dst` is not `dst_len` long (the exchange stays
    /// started: call `finish` again with the right slice), or a communication error (the
    /// exchange is then unusable).
    pub fn finish<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        dst: &mut [f64],
    ) -> Result<(), NeighborError> {
        self.check_comm(comm)?;
        let tag = match self.phase {
            Phase::Started(tag) => tag,
            Phase::Idle => {
                return Err(NeighborError::NotStarted {
                    rank: self.plan.rank,
                })
            }
            Phase::Failed => {
                return Err(NeighborError::Failed {
                    rank: self.plan.rank,
                })
            }
        };
        if dst.len() != self.plan.dst_len {
            return Err(NeighborError::SliceLength {
                side: Side::Recv,
                expected: self.plan.dst_len,
                got: dst.len(),
            });
        }
        let finished = match self.strategy {
            Strategy::Naive => naive::finish(&self.plan, &mut self.ws, comm, dst, tag),
        };
        match finished {
            Ok(()) => {
                self.phase = Phase::Idle;
                Ok(())
            }
            Err(e) => {
                self.phase = Phase::Failed;
                Err(e.into())
            }
        }
    }

    /// One whole exchange: [`Exchange::start`] from `src`, then [`Exchange::finish`] into
    /// `dst`.
    pub fn exchange<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        src: &[f64],
        dst: &mut [f64],
    ) -> Result<(), NeighborError> {
        self.start(comm, src)?;
        self.finish(comm, dst)
    }

    /// One whole exchange within one slice (owned values and ghost cells in one array, the
    /// usual halo layout): sends are packed from `buf` before any value lands in it. Needs
    /// `src_len == dst_len == buf.len()`.
    pub fn exchange_in_place<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        buf: &mut [f64],
    ) -> Result<(), NeighborError> {
        if buf.len() != self.plan.dst_len {
            return Err(NeighborError::SliceLength {
                side: Side::Recv,
                expected: self.plan.dst_len,
                got: buf.len(),
            });
        }
        self.start(comm, buf)?;
        self.finish(comm, buf)
    }

    /// The strategy this exchange runs.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// Number of distinct other ranks this rank sends to or receives from (the local copy
    /// excluded).
    pub fn neighbors(&self) -> usize {
        self.plan.neighbors
    }

    /// Messages this rank sends per exchange (the local copy excluded); zero-length ones
    /// included.
    pub fn send_messages(&self) -> usize {
        self.plan.sends.len()
    }

    /// Messages this rank receives per exchange (the local copy excluded).
    pub fn recv_messages(&self) -> usize {
        self.plan.recvs.len()
    }

    /// Values this rank sends to other ranks per exchange (8 bytes each; the local copy
    /// excluded).
    pub fn send_values(&self) -> usize {
        self.plan.sends.iter().map(|p| p.values.len()).sum()
    }

    /// Values this rank receives from other ranks per exchange (the local copy excluded).
    pub fn recv_values(&self) -> usize {
        self.plan.recvs.iter().map(|p| p.values.len()).sum()
    }

    /// Values copied locally per exchange (the pattern's self entry), 0 without one.
    pub fn local_values(&self) -> usize {
        self.plan.local.as_ref().map_or(0, |l| l.send.len())
    }

    /// Length of the source slice the exchange was built for.
    pub fn src_len(&self) -> usize {
        self.plan.src_len
    }

    /// Length of the destination slice the exchange was built for.
    pub fn dst_len(&self) -> usize {
        self.plan.dst_len
    }

    /// Whether an exchange has been started and not yet finished.
    pub fn is_started(&self) -> bool {
        matches!(self.phase, Phase::Started(_))
    }

    fn check_comm<C: Communicator + ?Sized>(&self, comm: &C) -> Result<(), NeighborError> {
        let (rank, size) = (comm.rank(), comm.size());
        if rank != self.plan.rank || size != self.plan.size {
            return Err(NeighborError::WrongCommunicator {
                expected_rank: self.plan.rank,
                expected_size: self.plan.size,
                rank,
                size,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use castack_collectives::{Collectives, ThreadUniverse};

    use super::*;

    /// Every rank sends its two source values to every other rank (and copies them locally),
    /// receiving rank s's pair at [2s, 2s+1].
    fn all_to_all(size: usize) -> ExchangePattern {
        ExchangePattern {
            sends: (0..size).map(|j| (j, vec![0, 1])).collect(),
            recvs: (0..size).map(|s| (s, vec![2 * s, 2 * s + 1])).collect(),
        }
    }

    #[test]
    fn buffers_are_sized_once_and_never_grow() {
        let out = ThreadUniverse::new(3)
            .unwrap()
            .run(|comm| {
                let (r, p) = (comm.rank(), comm.size());
                let mut ex = Exchange::new(comm, all_to_all(p), 2, 2 * p, Strategy::Naive).unwrap();
                let caps = (ex.ws.pack.capacity(), ex.ws.sends.capacity());
                let mut dst = vec![0.0; 2 * p];
                for round in 0..5 {
                    let src = [r as f64 + round as f64, r as f64 + 0.5];
                    ex.exchange(comm, &src, &mut dst).unwrap();
                    for s in 0..p {
                        assert_eq!(dst[2 * s], s as f64 + round as f64);
                        assert_eq!(dst[2 * s + 1], s as f64 + 0.5);
                    }
                }
                assert_eq!((ex.ws.pack.capacity(), ex.ws.sends.capacity()), caps);
                assert_eq!(caps, (8 * 2 * p, p - 1));
                (
                    ex.neighbors(),
                    ex.send_values(),
                    ex.recv_values(),
                    ex.local_values(),
                )
            })
            .unwrap();
        assert!(out.iter().all(|&c| c == (2, 4, 4, 2)));
    }

    #[test]
    fn phase_errors_leave_the_exchange_usable() {
        ThreadUniverse::new(2)
            .unwrap()
            .run(|comm| {
                let (r, p) = (comm.rank(), comm.size());
                let mut ex = Exchange::new(comm, all_to_all(p), 2, 2 * p, Strategy::Naive).unwrap();
                let mut dst = vec![0.0; 2 * p];
                assert_eq!(
                    ex.finish(comm, &mut dst),
                    Err(NeighborError::NotStarted { rank: r })
                );
                assert!(matches!(
                    ex.start(comm, &[1.0]),
                    Err(NeighborError::SliceLength {
                        side: Side::Send,
                        expected: 2,
                        got: 1
                    })
                ));
                ex.start(comm, &[1.0, 2.0]).unwrap();
                assert!(ex.is_started());
                assert_eq!(
                    ex.start(comm, &[1.0, 2.0]),
                    Err(NeighborError::AlreadyStarted { rank: r })
                );
                assert!(matches!(
                    ex.finish(comm, &mut [0.0; 3]),
                    Err(NeighborError::SliceLength {
                        side: Side::Recv,
                        expected: 4,
                        got: 3
                    })
                ));
                ex.finish(comm, &mut dst).unwrap();
                assert_eq!(dst, [1.0, 2.0, 1.0, 2.0]);
                assert!(!ex.is_started());
                // The collective sequence is still in step.
                let mut x = [1.0];
                comm.allreduce_sum(&mut x).unwrap();
                assert_eq!(x, [2.0]);
            })
            .unwrap();
    }

    #[test]
    fn wrong_communicator_is_an_error() {
        let ex = ThreadUniverse::new(1)
            .unwrap()
            .run(|comm| Exchange::new(comm, ExchangePattern::new(), 0, 0, Strategy::Naive))
            .unwrap()
            .pop()
            .unwrap()
            .unwrap();
        let ex = std::sync::Mutex::new(ex);
        let errs = ThreadUniverse::new(2)
            .unwrap()
            .run(|comm| ex.lock().unwrap().exchange(comm, &[], &mut []))
            .unwrap();
        for (r, e) in errs.into_iter().enumerate() {
            assert_eq!(
                e,
                Err(NeighborError::WrongCommunicator {
                    expected_rank: 0,
                    expected_size: 1,
                    rank: r,
                    size: 2
                })
            );
        }
    }
}
