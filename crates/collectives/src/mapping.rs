//! Rank-to-node mappings: which modeled node each rank runs on (the `sim` backend and
//! `bench collectives --mapping`). A registry enum like the algorithms'.
//!
//! # Why a mapping matters
//!
//! Recursive doubling (allgather and allreduce) pairs rank r with r xor 2^s at step s. In
//! allgather the exchanged block doubles every step, so the LAST steps, whose partners differ
//! in the HIGHEST bits of the rank, carry most of the bytes (half of the result in the last
//! step alone). Under the identity mapping those partners are the farthest apart: with
//! nodes numbered along the torus's first dimension, r xor p/2 sits p/2 nodes away (or in
//! another ring), and every pair's route shares links with the others', so the big steps
//! run at a fraction of the link bandwidth (ALGORITHMS.md section 1: "on a mesh/torus
//! recursive doubling collides on links").
//!
//! [`Mapping::BitReversal`] puts rank r on the node whose index is r's bits reversed (in
//! ceil(log2 p) bits): ranks that differ in the highest bit land on nodes that differ in the
//! LOWEST bit, i.e. neighbours along the first torus dimension (nodes 2j and 2j + 1), the
//! second-highest bit two nodes apart, and so on. The large late steps take the short,
//! uncontended paths; the small early steps take the long ones. For an allreduce, whose
//! steps all move the whole vector, the multiset of distances is the same under both
//! mappings; what changes is which step meets which contention.
//!
//! For p not a power of two, the reversed indices of 0..p are not 0..p: the mapping keeps
//! their ORDER (node of r = the position of reverse(r) among the reversed indices of all
//! ranks), so p ranks always occupy nodes 0..p, as under the identity.

use castack_fabric_sim::Fabric;

/// A rank-to-node mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mapping {
    /// Rank r on node r.
    #[default]
    Identity,
    /// Rank r on the node numbered by r's bits reversed (see the module docs): recursive
    /// doubling's large late steps on neighbouring nodes.
    BitReversal,
}

/// A mapping that does not fit the fabric.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mapping {mapping}: {ranks} ranks do not fit on fabric `{fabric}`, which has {nodes} nodes (one rank per node)")]
pub struct MappingError {
    /// The mapping's name.
    pub mapping: &'static str,
    /// Ranks asked for.
    pub ranks: usize,
    /// The fabric's nodes.
    pub nodes: usize,
    /// The fabric's name.
    pub fabric: String,
}

impl Mapping {
    /// Every mapping, for help text and sweeps.
    pub const ALL: &'static [Mapping] = &[Mapping::Identity, Mapping::BitReversal];

    /// The snake_case name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mapping::Identity => "identity",
            Mapping::BitReversal => "bit_reversal",
        }
    }

    /// One line for help text.
    pub fn description(self) -> &'static str {
        match self {
            Mapping::Identity => "rank r on node r",
            Mapping::BitReversal => {
                "rank r on node bit-reverse(r): ranks differing in the highest bits on neighbouring nodes"
            }
        }
    }

    /// The node of every rank of `ranks` (a permutation of 0..ranks).
    pub fn nodes(self, ranks: usize) -> Vec<usize> {
        match self {
            Mapping::Identity => (0..ranks).collect(),
            Mapping::BitReversal => {
                let bits = ranks.next_power_of_two().trailing_zeros();
                let rev = |r: usize| {
                    if bits == 0 {
                        0
                    } else {
                        r.reverse_bits() >> (usize::BITS - bits)
                    }
                };
                let mut order: Vec<usize> = (0..ranks).collect();
                order.sort_by_key(|&r| rev(r));
                let mut nodes = vec![0; ranks];
                for (node, r) in order.into_iter().enumerate() {
                    nodes[r] = node;
                }
                nodes
            }
        }
    }

    /// [`Mapping::nodes`] checked against `fabric` (one rank per node).
    ///
    /// # Errors
    /// [`MappingError`] when the fabric has fewer nodes than ranks.
    pub fn nodes_on(self, ranks: usize, fabric: &Fabric) -> Result<Vec<usize>, MappingError> {
        if ranks > fabric.nodes() {
            return Err(MappingError {
                mapping: self.name(),
                ranks,
                nodes: fabric.nodes(),
                fabric: fabric.config().name.clone(),
            });
        }
        Ok(self.nodes(ranks))
    }
}

crate::impl_registry!(Mapping, "mapping");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mapping_is_a_permutation() {
        for &m in Mapping::ALL {
            for p in 0..70 {
                let mut n = m.nodes(p);
                n.sort_unstable();
                assert_eq!(n, (0..p).collect::<Vec<_>>(), "{m} p={p}");
            }
        }
    }

    #[test]
    fn bit_reversal_puts_the_highest_bit_partners_next_to_each_other() {
        let n = Mapping::BitReversal.nodes(16);
        assert_eq!(&n[..4], &[0, 8, 4, 12]);
        for r in 0..8 {
            assert_eq!(n[r] ^ n[r + 8], 1, "rank {r}");
        }
        // Not a power of two: the order of the reversed indices.
        assert_eq!(Mapping::BitReversal.nodes(3), vec![0, 2, 1]);
        assert_eq!(Mapping::BitReversal.nodes(1), vec![0]);
    }
}
