//! The persistent neighbour exchange: built once (collectively validated, cut into steps by
//! its strategy), run many times without allocation by the one executor below.
//!
//! Construction, after validation, runs one handshake round (two tags): every sender tells
//! each destination how it cuts its messages ([`Cut`]) and the destination's position in its
//! list, and every receiver tells each source where that source's message lands in its
//! receive layout. From that each rank builds, once, its steps (pieces to send, pieces to
//! wait for) and the [`RankSchedule`] a modeling backend prices.
//!
//! Execution of step i: post the step's pieces (buffered sends), then wait for the pieces
//! that senders post in their step i. A rank only waits, in step i, for pieces posted in
//! step i, which every sender reaches after its own earlier steps, so no exchange can
//! deadlock, whatever the ranks' neighbour counts.

use std::ops::Range;

use castack_collectives::schedule::{LocalCopy, RankSchedule, Step};
use castack_collectives::{CommError, Communicator, SendRequest, Tag};

use crate::error::{NeighborError, Side};
use crate::mode::Mode;
use crate::pattern::ExchangePattern;
use crate::strategy::{Cut, Strategy};
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

/// One piece of a message: a peer and a range of values in the flattened index list
/// (`send_index` for a piece sent, `recv_index` for a piece received).
#[derive(Debug, Clone)]
pub(crate) struct Piece {
    pub(crate) rank: usize,
    pub(crate) values: Range<usize>,
}

/// The steps of one exchange on this rank, as built from the strategy's cut.
#[derive(Debug, Default)]
pub(crate) struct Program {
    /// Pieces sent, step by step (in device order within a step).
    sends: Vec<Piece>,
    /// `sends[send_steps[i]..send_steps[i + 1]]` is step i.
    send_steps: Vec<usize>,
    /// Pieces received, step by step (in device order within a step).
    recvs: Vec<Piece>,
    /// `recvs[recv_steps[i]..recv_steps[i + 1]]` is step i.
    recv_steps: Vec<usize>,
    /// What this rank does, for a modeling backend.
    schedule: RankSchedule,
}

impl Program {
    fn steps(&self) -> usize {
        self.send_steps.len().saturating_sub(1)
    }
}

/// What the handshake tells this rank: per receive peer (in `plan.recvs` order) the
/// sender's cut and this rank's position in the sender's list; per send peer (in
/// `plan.sends` order) the byte offset of this rank's message in the receiver's layout.
struct Handshake {
    senders: Vec<(Cut, usize)>,
    recv_offsets: Vec<usize>,
}

/// Run the construction handshake. Collective: every rank calls it after validation.
fn handshake<C: Communicator + ?Sized>(
    comm: &C,
    plan: &Plan,
    cut: Cut,
) -> Result<Handshake, NeighborError> {
    let (tag_cut, tag_off) = (comm.next_collective_tag(), comm.next_collective_tag());
    let rank = plan.rank;
    let mut reqs: Vec<SendRequest> = Vec::with_capacity(plan.sends.len() + plan.recvs.len());
    let mut result: Result<(), CommError> = Ok(());
    let wire = cut.to_wire();
    for (inbr, peer) in plan.sends.iter().enumerate() {
        let mut msg = [0u8; 40];
        for (k, v) in wire.iter().chain(&[inbr as u64]).enumerate() {
            msg[8 * k..8 * k + 8].copy_from_slice(&v.to_le_bytes());
        }
        match comm.isend(peer.rank, tag_cut, &msg) {
            Ok(r) => reqs.push(r),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    if result.is_ok() {
        for peer in &plan.recvs {
            let off = (8 * peer.values.start) as u64;
            match comm.isend(peer.rank, tag_off, &off.to_le_bytes()) {
                Ok(r) => reqs.push(r),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
    }
    let mut words = Vec::with_capacity(5 * plan.recvs.len() + plan.sends.len());
    let lists = [(&plan.recvs, tag_cut, 5), (&plan.sends, tag_off, 1)];
    for (peers, tag, n) in lists {
        for peer in peers.iter() {
            if result.is_err() {
                break;
            }
            let from = peer.rank;
            result = comm.irecv(from, tag).and_then(|req| {
                comm.wait_recv_with(req, &mut |msg| {
                    if msg.len() != 8 * n {
                        return Err(CommError::LengthMismatch {
                            rank,
                            from,
                            expected: 8 * n,
                            got: msg.len(),
                        });
                    }
                    for c in msg.chunks_exact(8) {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(c);
                        words.push(u64::from_le_bytes(b));
                    }
                    Ok(())
                })
            });
        }
    }
    for req in reqs {
        let waited = comm.wait_send(req);
        if result.is_ok() {
            result = waited;
        }
    }
    result?;
    let (cuts, offs) = words.split_at(5 * plan.recvs.len());
    let mut senders = Vec::with_capacity(plan.recvs.len());
    for (w, peer) in cuts.chunks_exact(5).zip(&plan.recvs) {
        let bad = NeighborError::Protocol {
            rank,
            from: peer.rank,
        };
        let c = Cut::from_wire([w[0], w[1], w[2], w[3]]).ok_or(bad.clone())?;
        let inbr = usize::try_from(w[4]).map_err(|_| bad.clone())?;
        if inbr >= c.n.max(1) {
            return Err(bad);
        }
        senders.push((c, inbr));
    }
    let recv_offsets = offs
        .iter()
        .map(|&o| usize::try_from(o).unwrap_or(usize::MAX))
        .collect();
    Ok(Handshake {
        senders,
        recv_offsets,
    })
}

/// Whether a piece is sent: segmented cuts skip empty pieces, whole messages are always
/// sent (zero-length ones included, as the naive exchange always did). Both ends apply the
/// same rule to the sender's cut.
fn sent(cut: &Cut, values: &Range<usize>) -> bool {
    cut.whole || !values.is_empty()
}

/// Build this rank's steps and its [`RankSchedule`] from its cut and the handshake.
fn program(plan: &Plan, cut: Cut, hs: &Handshake, mode: Mode) -> Program {
    // (step, device, rank, values) per piece.
    let mut sends: Vec<(usize, usize, Piece, usize)> = Vec::new();
    for (inbr, peer) in plan.sends.iter().enumerate() {
        let m = peer.values.len();
        for iseg in 0..cut.segments {
            let r = cut.piece(m, iseg);
            if !sent(&cut, &r) {
                continue;
            }
            let (step, dev) = cut.slot(inbr, iseg);
            let at_dst = hs.recv_offsets[inbr].saturating_add(8 * r.start);
            let values = peer.values.start + r.start..peer.values.start + r.end;
            let piece = Piece {
                rank: peer.rank,
                values,
            };
            sends.push((step, dev, piece, at_dst));
        }
    }
    let mut recvs: Vec<(usize, usize, Piece)> = Vec::new();
    for (peer, &(c, inbr)) in plan.recvs.iter().zip(&hs.senders) {
        let m = peer.values.len();
        for iseg in 0..c.segments {
            let r = c.piece(m, iseg);
            if !sent(&c, &r) {
                continue;
            }
            let (step, dev) = c.slot(inbr, iseg);
            let values = peer.values.start + r.start..peer.values.start + r.end;
            recvs.push((
                step,
                dev,
                Piece {
                    rank: peer.rank,
                    values,
                },
            ));
        }
    }
    // Stable sorts: pieces of one pair stay in piece order (they are in distinct steps).
    sends.sort_by_key(|s| (s.0, s.1));
    recvs.sort_by_key(|r| (r.0, r.1));
    let steps = sends
        .iter()
        .map(|s| s.0 + 1)
        .chain(recvs.iter().map(|r| r.0 + 1))
        .max()
        .unwrap_or(0);
    let bounds = |keys: &mut dyn Iterator<Item = usize>| {
        let keys: Vec<usize> = keys.collect();
        (0..=steps)
            .map(|i| keys.partition_point(|&k| k < i))
            .collect::<Vec<usize>>()
    };
    let send_steps = bounds(&mut sends.iter().map(|s| s.0));
    let recv_steps = bounds(&mut recvs.iter().map(|r| r.0));

    // The modeled schedule: working buffer = receive layout (8 bytes per received value,
    // local copy last) followed by the packed send values.
    let recv_bytes = 8 * plan.recv_index.len();
    let mut schedule = RankSchedule {
        steps: Vec::with_capacity(2 * steps + 1),
        scratch_bytes: 8 * plan.send_index.len(),
    };
    for i in 0..steps {
        let out = &sends[send_steps[i]..send_steps[i + 1]];
        let inc = &recvs[recv_steps[i]..recv_steps[i + 1]];
        if mode == Mode::TwoSided {
            // Receive-address notifications: each receiver tells the step's senders.
            let mut note = Step::new();
            for (_, _, p) in inc {
                note = note.put(p.rank, 0..0, 0);
            }
            for (_, _, p, _) in out {
                note = note.arrive(p.rank, 0, 0);
            }
            schedule.push(note);
        }
        let mut data = Step::new();
        for (_, _, p, at_dst) in out {
            data = data.put(
                p.rank,
                recv_bytes + 8 * p.values.start..recv_bytes + 8 * p.values.end,
                *at_dst,
            );
        }
        for (_, _, p) in inc {
            data = data.arrive(p.rank, 8 * p.values.start, 8 * p.values.len());
        }
        schedule.push(data);
    }
    if let Some(local) = &plan.local {
        let copy = recv_bytes + 8 * local.send.start..recv_bytes + 8 * local.send.end;
        let copy = LocalCopy {
            src: copy,
            dst_offset: 8 * local.recv.start,
        };
        match schedule.steps.first_mut() {
            Some(first) => first.copies.push(copy),
            None => schedule.steps.push(Step {
                copies: vec![copy],
                ..Step::new()
            }),
        }
    }
    Program {
        sends: sends.into_iter().map(|s| s.2).collect(),
        send_steps,
        recvs: recvs.into_iter().map(|r| r.2).collect(),
        recv_steps,
        schedule,
    }
}

/// Buffers reused by every exchange: sized at construction, never grown.
#[derive(Debug)]
pub(crate) struct Workspace {
    /// Packed outgoing values (and the local copy), 8 bytes each in `send_index` order.
    pub(crate) pack: Vec<u8>,
    /// Sends posted and not yet completed.
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
/// needs no received values while messages are in flight. With a multi-step strategy
/// (segmented), `start` posts the first step only; the later steps run in `finish`.
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
    mode: Mode,
    plan: Plan,
    /// Boxed: keeps `Exchange` small enough to sit in enums beside other plans.
    program: Box<Program>,
    ws: Workspace,
    phase: Phase,
}

impl Exchange {
    /// Build an exchange for this rank of `comm`, whose caller slices hold `src_len`
    /// (sent from) and `dst_len` (received into) values, completing messages two-sided
    /// ([`Mode::TwoSided`]); see [`Exchange::with_mode`].
    ///
    /// Collective: every rank of `comm` must call it, in the same order relative to other
    /// collectives. The pattern is checked locally
    /// ([`ExchangePattern::validate_local`]) and globally (every declared send matches a
    /// declared receive with the same value count). If any rank's pattern is invalid, every
    /// rank returns an error (none hangs): a global mismatch is reported identically on all
    /// ranks; a local one by its rank, the others returning
    /// [`NeighborError::PeerInvalid`].
    ///
    /// Ranks may pass different strategies: every receiver follows its senders' cuts.
    ///
    /// Cost: two `i64` allreduces (of `5p` and `3p` entries), one 8-byte message per
    /// declared neighbour pair, and the handshake (a 40-byte and an 8-byte message per pair).
    pub fn new<C: Communicator + ?Sized>(
        comm: &C,
        pattern: ExchangePattern,
        src_len: usize,
        dst_len: usize,
        strategy: Strategy,
    ) -> Result<Self, NeighborError> {
        Self::with_mode(comm, pattern, src_len, dst_len, strategy, Mode::TwoSided)
    }

    /// [`Exchange::new`] with an explicit completion [`Mode`].
    pub fn with_mode<C: Communicator + ?Sized>(
        comm: &C,
        pattern: ExchangePattern,
        src_len: usize,
        dst_len: usize,
        strategy: Strategy,
        mode: Mode,
    ) -> Result<Self, NeighborError> {
        let (rank, size) = (comm.rank(), comm.size());
        let local = pattern
            .validate_local(rank, size, src_len, dst_len)
            .and(match strategy {
                Strategy::Segmented { devices: 0 } => Err(NeighborError::ZeroDevices { rank }),
                _ => Ok(()),
            });
        validate_global(comm, &pattern, local)?;
        let plan = Plan::new(pattern, rank, size, src_len, dst_len);
        let cut = strategy.cut(plan.sends.len());
        let hs = handshake(comm, &plan, cut)?;
        let program = Box::new(program(&plan, cut, &hs, mode));
        let ws = Workspace {
            pack: vec![0u8; 8 * plan.send_index.len()],
            sends: Vec::with_capacity(program.sends.len()),
        };
        Ok(Self {
            strategy,
            mode,
            plan,
            program,
            ws,
            phase: Phase::Idle,
        })
    }

    /// Pack the values of `src`, tell a modeling backend what this rank will do
    /// ([`Communicator::model_enter`]), and post the sends of the first step.
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
        for (slot, &i) in self.ws.pack.chunks_exact_mut(8).zip(&self.plan.send_index) {
            slot.copy_from_slice(&src[i].to_ne_bytes());
        }
        let started = comm
            .model_enter(tag, &self.program.schedule)
            .and_then(|()| self.post(comm, 0, tag));
        match started {
            Ok(()) => {
                self.phase = Phase::Started(tag);
                Ok(())
            }
            Err(e) => {
                let _ = wait_sends(comm, &mut self.ws.sends);
                self.phase = Phase::Failed;
                Err(e.into())
            }
        }
    }

    /// Run the remaining steps of the exchange begun by [`Exchange::start`]: wait for every
    /// incoming piece and unpack it into `dst` (only the indices of the receive lists are
    /// written), do the local copy, complete the sends, and tell a modeling backend
    /// ([`Communicator::model_leave`]).
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
        let mut result = self.run_steps(comm, dst, tag);
        if let (Some(local), true) = (&self.plan.local, result.is_ok()) {
            let bytes = &self.ws.pack[8 * local.send.start..8 * local.send.end];
            let idx = &self.plan.recv_index[local.recv.clone()];
            result = unpack(bytes, idx, dst, self.plan.rank, self.plan.rank);
        }
        let waited = wait_sends(comm, &mut self.ws.sends);
        let finished = result.and(waited).and_then(|()| comm.model_leave(tag));
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

    /// Post the pieces of step `i`.
    fn post<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        i: usize,
        tag: Tag,
    ) -> Result<(), CommError> {
        let p = &self.program;
        if i >= p.steps() {
            return Ok(());
        }
        for piece in &p.sends[p.send_steps[i]..p.send_steps[i + 1]] {
            let bytes = &self.ws.pack[8 * piece.values.start..8 * piece.values.end];
            self.ws.sends.push(comm.isend(piece.rank, tag, bytes)?);
        }
        Ok(())
    }

    /// Every step: post its pieces (step 0's were posted by `start`), wait for its
    /// arrivals, and in two-sided mode complete its sends.
    fn run_steps<C: Communicator + ?Sized>(
        &mut self,
        comm: &C,
        dst: &mut [f64],
        tag: Tag,
    ) -> Result<(), CommError> {
        let rank = self.plan.rank;
        for i in 0..self.program.steps() {
            if i > 0 {
                self.post(comm, i, tag)?;
            }
            let p = &self.program;
            for piece in &p.recvs[p.recv_steps[i]..p.recv_steps[i + 1]] {
                let idx = &self.plan.recv_index[piece.values.clone()];
                let from = piece.rank;
                let req = comm.irecv(from, tag)?;
                comm.wait_recv_with(req, &mut |msg| unpack(msg, idx, dst, rank, from))?;
            }
            if self.mode == Mode::TwoSided {
                wait_sends(comm, &mut self.ws.sends)?;
            }
        }
        Ok(())
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

    /// The completion mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Steps one exchange takes on this rank (1 for naive with neighbours, N' segmented).
    pub fn steps(&self) -> usize {
        self.program.steps()
    }

    /// Messages (pieces) this rank posts per exchange.
    pub fn send_pieces(&self) -> usize {
        self.program.sends.len()
    }

    /// What this rank does in one exchange, as handed to [`Communicator::model_enter`]: its
    /// working buffer is the receive layout (8 bytes per received value, in receive-list
    /// declaration order, the local copy last) followed by `scratch_bytes` of packed send
    /// values; two-sided mode adds a zero-byte notification step before each data step.
    pub fn rank_schedule(&self) -> &RankSchedule {
        &self.program.schedule
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

/// Unpack the `f64` values of `msg` into `dst` at `idx`, in order.
fn unpack(
    msg: &[u8],
    idx: &[usize],
    dst: &mut [f64],
    rank: usize,
    from: usize,
) -> Result<(), CommError> {
    if msg.len() != 8 * idx.len() {
        return Err(CommError::LengthMismatch {
            rank,
            from,
            expected: 8 * idx.len(),
            got: msg.len(),
        });
    }
    for (chunk, &i) in msg.chunks_exact(8).zip(idx) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        dst[i] = f64::from_ne_bytes(b);
    }
    Ok(())
}

/// Complete every posted send; the first error is returned.
fn wait_sends<C: Communicator + ?Sized>(
    comm: &C,
    sends: &mut Vec<SendRequest>,
) -> Result<(), CommError> {
    let mut result = Ok(());
    for req in sends.drain(..) {
        let waited = comm.wait_send(req);
        if result.is_ok() {
            result = waited;
        }
    }
    result
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
