//! The exchange strategy registry: one file per strategy, one row per strategy here.
//!
//! Selecting a strategy is a value ([`Strategy`], parsed from its name at the configuration
//! edge), never an `if` in callers. Tests, help text and benches iterate [`Strategy::ALL`].
//!
//! A strategy only decides how this rank's messages are cut and ordered: it returns a
//! [`Cut`], from which [`Exchange`](crate::Exchange) builds, once at construction, the steps
//! it executes (the ONE executor for every strategy) and the
//! [`RankSchedule`](castack_collectives::schedule::RankSchedule) a modeling backend prices.

pub(crate) mod naive;
pub(crate) mod segmented;

/// Devices of a [`Strategy::Segmented`] parsed from the bare name `segmented`: the four
/// TNIs of a Tofu (FX10) node (CALIBRATION.md).
pub const DEFAULT_DEVICES: usize = 4;

/// How an [`Exchange`](crate::Exchange) moves its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Strategy {
    /// Post every send, then wait every receive (ALGORITHMS.md section 2, naive).
    #[default]
    Naive,
    /// The gcd-based segmentation over `devices` communication devices (ALGORITHMS.md
    /// section 2, segmented); falls back to naive when a rank has `N <= devices` neighbours
    /// or `devices == 1`. `devices` must be at least 1.
    Segmented {
        /// C: the communication devices (NICs) of a node.
        devices: usize,
    },
}

impl Strategy {
    /// Every strategy, for sweeps, help text and benches (`segmented` with
    /// [`DEFAULT_DEVICES`]; set the count with [`Strategy::with_devices`]).
    pub const ALL: &'static [Strategy] = &[
        Strategy::Naive,
        Strategy::Segmented {
            devices: DEFAULT_DEVICES,
        },
    ];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::Segmented { .. } => "segmented",
        }
    }

    /// One line on what the strategy does and costs.
    pub fn description(self) -> &'static str {
        match self {
            Strategy::Naive => naive::DESCRIPTION,
            Strategy::Segmented { .. } => segmented::DESCRIPTION,
        }
    }

    /// The same strategy for a node with `devices` communication devices (naive ignores
    /// the count).
    pub fn with_devices(self, devices: usize) -> Self {
        match self {
            Strategy::Naive => Strategy::Naive,
            Strategy::Segmented { .. } => Strategy::Segmented { devices },
        }
    }

    /// How this rank's `n` messages (to distinct other ranks) are cut into steps.
    pub(crate) fn cut(self, n: usize) -> Cut {
        match self {
            Strategy::Naive => naive::cut(n),
            Strategy::Segmented { devices } => segmented::cut(n, devices),
        }
    }
}

castack_collectives::impl_registry!(Strategy, "neighbour exchange strategy");

/// How a rank's `n` messages are cut: each message into `segments` pieces (the piece `s` of
/// a message of `m` values holds values `s*m/segments .. (s+1)*m/segments`, so remainders
/// are spread and empty pieces only occur when `m < segments`), sent over `steps` steps.
///
/// The receiver rebuilds the sender's `Cut` from the four numbers of [`Cut::to_wire`], so
/// ranks whose `n` differ (a general pattern) still agree on every piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cut {
    /// Messages (distinct destinations) of the sending rank.
    pub(crate) n: usize,
    /// Devices the pieces are spread over.
    pub(crate) devices: usize,
    /// Pieces per message (C').
    pub(crate) segments: usize,
    /// Steps (N'; 1 for naive with n > 0, 0 with n = 0).
    pub(crate) steps: usize,
    /// All messages whole in one step (naive, or segmented's fallback).
    pub(crate) whole: bool,
}

impl Cut {
    /// The step and device of piece `iseg` of the message to the `inbr`-th destination.
    pub(crate) fn slot(&self, inbr: usize, iseg: usize) -> (usize, usize) {
        if self.whole {
            (0, inbr % self.devices.max(1))
        } else {
            segmented::slot(self, inbr, iseg)
        }
    }

    /// Value range of piece `iseg` of a message of `m` values.
    pub(crate) fn piece(&self, m: usize, iseg: usize) -> std::ops::Range<usize> {
        let s = self.segments.max(1);
        (iseg * m / s)..((iseg + 1) * m / s)
    }

    /// The numbers a receiver needs, as sent at construction.
    pub(crate) fn to_wire(self) -> [u64; 4] {
        [
            self.n as u64,
            self.devices as u64,
            self.segments as u64,
            u64::from(self.whole),
        ]
    }

    /// Rebuild a sender's cut; `None` if the numbers are inconsistent.
    pub(crate) fn from_wire(w: [u64; 4]) -> Option<Self> {
        let n = usize::try_from(w[0]).ok()?;
        let devices = usize::try_from(w[1]).ok()?;
        let whole = w[3] != 0;
        let cut = if whole {
            naive::cut(n).with_devices(devices)
        } else {
            segmented::cut(n, devices)
        };
        (cut.segments as u64 == w[2] && cut.whole == whole).then_some(cut)
    }

    fn with_devices(mut self, devices: usize) -> Self {
        self.devices = devices.max(1);
        self
    }
}

/// The gcd of two non-negative integers (`gcd(0, b) = b`).
pub(crate) fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_described() {
        for &s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>(), Ok(s));
            assert_eq!(s.to_string(), s.name());
            assert!(!s.description().is_empty());
        }
    }

    #[test]
    fn unknown_name_lists_the_valid_ones() {
        let err = "segmentd".parse::<Strategy>().unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("segmentd"), "{msg}");
        for &s in Strategy::ALL {
            assert!(msg.contains(s.name()), "{msg}");
        }
    }

    #[test]
    fn cuts_survive_the_wire_and_pieces_tile_every_message() {
        for n in 0..=13 {
            for c in 1..=7 {
                for s in [Strategy::Naive, Strategy::Segmented { devices: c }] {
                    let cut = s.cut(n);
                    assert_eq!(Cut::from_wire(cut.to_wire()), Some(cut), "{s:?} n={n}");
                    for m in [0, 1, 2, 5, 7, 100, 4097] {
                        let mut next = 0;
                        for iseg in 0..cut.segments {
                            let r = cut.piece(m, iseg);
                            assert_eq!(r.start, next);
                            next = r.end;
                        }
                        assert_eq!(next, m);
                    }
                }
            }
        }
        assert_eq!(Cut::from_wire([6, 4, 3, 0]), None);
    }

    #[test]
    fn gcd_of_small_numbers() {
        assert_eq!(gcd(6, 4), 2);
        assert_eq!(gcd(4, 6), 2);
        assert_eq!(gcd(7, 3), 1);
        assert_eq!(gcd(0, 5), 5);
        assert_eq!(gcd(12, 6), 6);
    }
}
