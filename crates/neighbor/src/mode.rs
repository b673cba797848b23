//! How the messages of an exchange are completed: two-sided or one-sided.
//!
//! What differs, honestly: on point-to-point backends (threads, and mpi later) both modes
//! move the data the same way, as buffered tagged sends matched by receives; there is no
//! remote-memory access. The modes differ in
//!
//! - completion: `two_sided` waits, at the end of every step, for the step's receives AND
//!   its sends (an MPI `Waitall` of the step's requests); `put` waits per step only for the
//!   step's arrivals, in device order (the per-device completion polling of an RDMA
//!   interface such as Tofu's), and completes its own sends once at the end;
//! - what a modeling backend prices (the [`RankSchedule`] given to
//!   [`Communicator::model_enter`]): `put` is one-sided puts into buffers registered once;
//!   `two_sided` puts, before every data step, a zero-byte notification from each receiver
//!   to its senders of that step (the receive-address exchange of a rendezvous), so each
//!   step pays one more latency.
//!
//! [`RankSchedule`]: castack_collectives::schedule::RankSchedule
//! [`Communicator::model_enter`]: castack_collectives::Communicator::model_enter

/// Two-sided messages or one-sided puts; see the module documentation for what differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Mode {
    /// Send/receive pairs; every step completes its sends and receives.
    #[default]
    TwoSided,
    /// One-sided puts with per-device completion polling.
    Put,
}

impl Mode {
    /// Every mode.
    pub const ALL: &'static [Mode] = &[Mode::TwoSided, Mode::Put];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::TwoSided => "two_sided",
            Mode::Put => "put",
        }
    }

    /// One line on the mode.
    pub fn description(self) -> &'static str {
        match self {
            Mode::TwoSided => "send/receive pairs, each step waits its sends and receives",
            Mode::Put => "one-sided puts, each step polls its arrivals device by device",
        }
    }
}

castack_collectives::impl_registry!(Mode, "neighbour exchange mode");
