//! Exchange patterns: plain per-neighbour index lists, and their local validation.

use crate::error::{NeighborError, Side};

/// Who sends which values to whom, from one rank's point of view.
///
/// Built by the application (a ghost map of a distributed matrix, a grid decomposition) and
/// handed to [`Exchange::new`](crate::Exchange::new). Every value travels as an `f64`: the
/// `k`-th index of the send list for rank `j` picks the `k`-th value of the message to `j`,
/// which lands at the `k`-th index of `j`'s receive list for this rank.
///
/// An entry for the calling rank itself is allowed in both halves, with lists of equal
/// length: it is a local copy from the source slice to the destination slice, done without
/// the communicator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExchangePattern {
    /// For each destination rank: indices into the caller's source slice to send, in order.
    pub sends: Vec<(usize, Vec<usize>)>,
    /// For each source rank: indices into the caller's destination slice where the received
    /// values land, in order.
    pub recvs: Vec<(usize, Vec<usize>)>,
}

impl ExchangePattern {
    /// A pattern with no neighbours (the rank still takes part in every exchange).
    pub fn new() -> Self {
        Self::default()
    }

    /// Check what one rank can check alone, for rank `rank` of `size` with a source slice of
    /// `src_len` values and a destination slice of `dst_len` values:
    ///
    /// - every neighbour rank is in `0..size`, and no neighbour appears twice in one half;
    /// - every send index is `< src_len`, every receive index is `< dst_len`;
    /// - no destination index is written twice (across all sources);
    /// - a self entry (local copy) appears in both halves with lists of equal length.
    ///
    /// Whether the other ranks' declarations match this one's is checked collectively by
    /// [`Exchange::new`](crate::Exchange::new).
    pub fn validate_local(
        &self,
        rank: usize,
        size: usize,
        src_len: usize,
        dst_len: usize,
    ) -> Result<(), NeighborError> {
        if rank >= size {
            return Err(NeighborError::RankOutOfRange { rank, size });
        }
        check_half(rank, size, Side::Send, &self.sends, src_len)?;
        check_half(rank, size, Side::Recv, &self.recvs, dst_len)?;

        let own_send = self.sends.iter().find(|(r, _)| *r == rank);
        let own_recv = self.recvs.iter().find(|(r, _)| *r == rank);
        match (own_send, own_recv) {
            (Some((_, s)), None) => {
                return Err(NeighborError::UnmatchedSend {
                    sender: rank,
                    receiver: rank,
                    values: s.len(),
                })
            }
            (None, Some((_, r))) => {
                return Err(NeighborError::UnmatchedRecv {
                    sender: rank,
                    receiver: rank,
                    values: r.len(),
                })
            }
            (Some((_, s)), Some((_, r))) if s.len() != r.len() => {
                return Err(NeighborError::CountMismatch {
                    sender: rank,
                    receiver: rank,
                    sent: s.len(),
                    expected: r.len(),
                })
            }
            _ => {}
        }

        // Every destination index at most once: sort (index, source) pairs.
        let mut written: Vec<(usize, usize)> = self
            .recvs
            .iter()
            .flat_map(|(src, idx)| idx.iter().map(move |&i| (i, *src)))
            .collect();
        written.sort_unstable();
        if let Some(w) = written.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(NeighborError::DuplicateDestination {
                rank,
                index: w[0].0,
                first: w[0].1,
                second: w[1].1,
            });
        }
        Ok(())
    }
}

fn check_half(
    rank: usize,
    size: usize,
    side: Side,
    list: &[(usize, Vec<usize>)],
    len: usize,
) -> Result<(), NeighborError> {
    for (neighbor, idx) in list {
        let neighbor = *neighbor;
        if neighbor >= size {
            return Err(NeighborError::NeighborOutOfRange {
                rank,
                side,
                neighbor,
                size,
            });
        }
        if let Some(&index) = idx.iter().find(|&&i| i >= len) {
            return Err(NeighborError::IndexOutOfRange {
                rank,
                side,
                neighbor,
                index,
                len,
            });
        }
    }
    let mut ranks: Vec<usize> = list.iter().map(|(r, _)| *r).collect();
    ranks.sort_unstable();
    if let Some(w) = ranks.windows(2).find(|w| w[0] == w[1]) {
        return Err(NeighborError::DuplicateNeighbor {
            rank,
            side,
            neighbor: w[0],
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pat(sends: &[(usize, &[usize])], recvs: &[(usize, &[usize])]) -> ExchangePattern {
        ExchangePattern {
            sends: sends.iter().map(|(r, i)| (*r, i.to_vec())).collect(),
            recvs: recvs.iter().map(|(r, i)| (*r, i.to_vec())).collect(),
        }
    }

    #[test]
    fn empty_pattern_is_valid() {
        assert_eq!(ExchangePattern::new().validate_local(0, 1, 0, 0), Ok(()));
    }

    #[test]
    fn valid_pattern_with_local_copy_and_empty_lists() {
        let p = pat(
            &[(1, &[0, 2, 2]), (0, &[1]), (2, &[])],
            &[(2, &[3]), (0, &[0]), (1, &[])],
        );
        assert_eq!(p.validate_local(0, 3, 3, 4), Ok(()));
    }

    #[test]
    fn rank_out_of_range() {
        assert_eq!(
            ExchangePattern::new().validate_local(3, 3, 0, 0),
            Err(NeighborError::RankOutOfRange { rank: 3, size: 3 })
        );
    }

    #[test]
    fn neighbour_out_of_range_on_either_side() {
        let p = pat(&[(5, &[])], &[]);
        assert_eq!(
            p.validate_local(1, 4, 1, 1),
            Err(NeighborError::NeighborOutOfRange {
                rank: 1,
                side: Side::Send,
                neighbor: 5,
                size: 4
            })
        );
        let p = pat(&[], &[(4, &[0])]);
        assert!(matches!(
            p.validate_local(1, 4, 1, 1),
            Err(NeighborError::NeighborOutOfRange {
                side: Side::Recv,
                neighbor: 4,
                ..
            })
        ));
    }

    #[test]
    fn duplicate_neighbour() {
        let p = pat(&[(2, &[0]), (1, &[0]), (2, &[1])], &[]);
        assert_eq!(
            p.validate_local(0, 3, 2, 0),
            Err(NeighborError::DuplicateNeighbor {
                rank: 0,
                side: Side::Send,
                neighbor: 2
            })
        );
    }

    #[test]
    fn index_out_of_range() {
        let p = pat(&[(1, &[0, 7])], &[]);
        assert_eq!(
            p.validate_local(0, 2, 7, 0),
            Err(NeighborError::IndexOutOfRange {
                rank: 0,
                side: Side::Send,
                neighbor: 1,
                index: 7,
                len: 7
            })
        );
        let p = pat(&[], &[(1, &[3])]);
        assert!(matches!(
            p.validate_local(0, 2, 0, 3),
            Err(NeighborError::IndexOutOfRange {
                side: Side::Recv,
                index: 3,
                len: 3,
                ..
            })
        ));
    }

    #[test]
    fn duplicate_destination_across_and_within_sources() {
        let p = pat(&[], &[(2, &[0, 5]), (1, &[5])]);
        assert_eq!(
            p.validate_local(0, 3, 0, 6),
            Err(NeighborError::DuplicateDestination {
                rank: 0,
                index: 5,
                first: 1,
                second: 2
            })
        );
        let p = pat(&[], &[(1, &[4, 4])]);
        assert!(matches!(
            p.validate_local(0, 2, 0, 6),
            Err(NeighborError::DuplicateDestination {
                index: 4,
                first: 1,
                second: 1,
                ..
            })
        ));
    }

    #[test]
    fn inconsistent_local_copy() {
        let p = pat(&[(0, &[0])], &[]);
        assert!(matches!(
            p.validate_local(0, 1, 1, 1),
            Err(NeighborError::UnmatchedSend {
                sender: 0,
                receiver: 0,
                values: 1
            })
        ));
        let p = pat(&[], &[(0, &[0])]);
        assert!(matches!(
            p.validate_local(0, 1, 1, 1),
            Err(NeighborError::UnmatchedRecv {
                sender: 0,
                receiver: 0,
                values: 1
            })
        ));
        let p = pat(&[(0, &[0])], &[(0, &[0, 1])]);
        assert!(matches!(
            p.validate_local(0, 1, 1, 2),
            Err(NeighborError::CountMismatch {
                sent: 1,
                expected: 2,
                ..
            })
        ));
    }
}
