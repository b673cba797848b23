//! The exchange strategy registry: one file per strategy, one row per strategy here.
//!
//! Selecting a strategy is a value ([`Strategy`], parsed from its name at the configuration
//! edge), never an `if` in callers. Tests, help text and benches iterate [`Strategy::ALL`].

use std::fmt;
use std::str::FromStr;

use castack_collectives::UnknownAlgorithm;

pub(crate) mod naive;

/// How an [`Exchange`](crate::Exchange) moves its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Strategy {
    /// Post every send, then wait every receive (ALGORITHMS.md section 2, naive).
    #[default]
    Naive,
}

impl Strategy {
    /// Every strategy, for sweeps, help text and benches.
    pub const ALL: &'static [Strategy] = &[Strategy::Naive];

    /// The snake_case name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
        }
    }

    /// One line on what the strategy does and costs.
    pub fn description(self) -> &'static str {
        match self {
            Strategy::Naive => naive::DESCRIPTION,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|a| a.name() == s)
            .ok_or_else(|| UnknownAlgorithm {
                op: "neighbour exchange",
                name: s.to_string(),
                valid: Self::ALL
                    .iter()
                    .map(|a| a.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
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
}
