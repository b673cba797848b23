//! Two-sided messages over one-sided puts (ALGORITHMS.md section 1, last paragraph), priced
//! without data.
//!
//! # Protocol
//!
//! Hardware like TCA only writes remotely, so a send/receive pair is built from puts:
//!
//! 1. the receiver posts its buffer address into a "remote address" slot at the sender: a
//!    small put of `two_sided.notify_bytes` from the receiver's host memory to the sender's
//!    host memory (PIO where the fabric has it and it is faster, else DMA), plus
//!    `two_sided.notify_overhead_us` of software on both sides (posting, polling, matching);
//! 2. the sender, once it has both a send request and an address, puts the data and then a
//!    completion flag into the receiver's completion slot (one put in this model: the
//!    calibration's put figures include their completion flag);
//! 3. both sides poll.
//!
//! A receive posted early enough (addresses posted ahead into several slots) hides step 1
//! entirely: the data put starts as soon as the send is posted. Otherwise the put waits for
//! the address:
//!
//! ```text
//! address_known = recv_posted + notification
//! data_start    = max(send_posted, address_known)
//! arrival       = data_start + put
//! ```
//!
//! so a receive posted at the same moment as the send costs `notification + put`, the ideal
//! cost ALGORITHMS.md states. Fabrics whose calibration figures already are two-sided
//! (MPI ping-pong over InfiniBand: the handshake is inside the measured start costs) set
//! `two_sided.notify = false`, and a message then costs its put alone.

use crate::error::FabricError;
use crate::fabric::{Endpoint, Fabric, Mechanism, SimTime, Transfer};

pub use crate::spec::TwoSidedConfig;

/// One message of a send/receive pair, with when each side posted its half.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TwoSidedMessage {
    /// The sender's buffer.
    pub src: Endpoint,
    /// The receiver's buffer.
    pub dst: Endpoint,
    /// Payload size.
    pub bytes: u64,
    /// Mechanism of the data put (`Auto`: PIO where it is faster, else DMA).
    pub mechanism: Mechanism,
    /// When the sender posted the send.
    pub send_posted: SimTime,
    /// When the receiver posted the receive (its address notification leaves then).
    pub recv_posted: SimTime,
}

/// The priced phases of a [`TwoSidedMessage`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TwoSidedTiming {
    /// When the sender has the receiver's address.
    pub address_known: SimTime,
    /// When the data put is issued: `max(send_posted, address_known)`.
    pub data_start: SimTime,
    /// When data and completion flag have landed at the receiver.
    pub arrival: SimTime,
    /// The mechanism the data put used (`Auto` resolved).
    pub mechanism: Mechanism,
}

impl Fabric {
    /// Time from a receive being posted on `receiver`'s node until `sender`'s node has its
    /// address: the notification put (host to host, `Auto`) plus its software overhead; 0 on
    /// a fabric with `two_sided.notify = false`.
    ///
    /// # Errors
    /// A node out of range.
    pub fn notification_time(
        &self,
        receiver: usize,
        sender: usize,
    ) -> Result<SimTime, FabricError> {
        let c = &self.config().two_sided;
        if !c.notify {
            return Ok(0.0);
        }
        let slot = Transfer::new(
            Endpoint::host(receiver),
            Endpoint::host(sender),
            c.notify_bytes,
            Mechanism::Auto,
        );
        Ok(self.estimate(&slot)? + c.notify_overhead_us * 1e-6)
    }

    /// Price one message of the two-sided protocol (see the module docs). The data put is
    /// priced alone on the fabric (no contention with other traffic).
    ///
    /// # Errors
    /// An invalid transfer (node out of range, PIO from GPU memory, ...) or a negative or
    /// non-finite post time.
    pub fn price_two_sided(&self, m: &TwoSidedMessage) -> Result<TwoSidedTiming, FabricError> {
        for (what, t) in [("send", m.send_posted), ("receive", m.recv_posted)] {
            if !(t.is_finite() && t >= 0.0) {
                return Err(FabricError::Transfer {
                    index: 0,
                    reason: format!("{what} posted at {t}, not a time >= 0"),
                });
            }
        }
        let put = Transfer::new(m.src, m.dst, m.bytes, m.mechanism);
        let mechanism = self.resolve_mechanism(&put)?;
        let address_known = m.recv_posted + self.notification_time(m.dst.node, m.src.node)?;
        let data_start = m.send_posted.max(address_known);
        let arrival = data_start + self.estimate(&put)?;
        Ok(TwoSidedTiming {
            address_known,
            data_start,
            arrival,
            mechanism,
        })
    }
}
