//! The exchange strategy registry: one file per strategy, one row per strategy here.
//!
//! Selecting a strategy is a value ([`Strategy`], parsed from its name at the configuration
//! edge), never an `if` in callers. Tests, help text and benches iterate [`Strategy::ALL`].

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

castack_collectives::impl_registry!(Strategy, "neighbour exchange strategy");

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
