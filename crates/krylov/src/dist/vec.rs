//! Distributed vectors: each rank owns a contiguous block and keeps room for ghost values.

/// One rank's part of a distributed vector: the owned values followed by room for the
/// values of other ranks that this rank's SpMV reads (ghosts, or the whole vector in
/// allgather mode). Create them with [`crate::DistCsr::new_vec`] so the layout matches.
#[derive(Debug, Clone, PartialEq)]
pub struct DistVec {
    data: Vec<f64>,
    n_local: usize,
}

impl DistVec {
    /// A zero vector with `n_local` owned values and `n_ext - n_local` ghost slots.
    pub fn zeros(n_local: usize, n_ext: usize) -> Self {
        Self {
            data: vec![0.0; n_ext.max(n_local)],
            n_local,
        }
    }

    /// Number of owned values.
    pub fn n_local(&self) -> usize {
        self.n_local
    }

    /// Owned values.
    pub fn local(&self) -> &[f64] {
        &self.data[..self.n_local]
    }

    /// Owned values, mutable.
    pub fn local_mut(&mut self) -> &mut [f64] {
        &mut self.data[..self.n_local]
    }

    /// Owned values and ghost slots.
    pub fn ext(&self) -> &[f64] {
        &self.data
    }

    /// Owned values (read) and ghost slots (write), split.
    pub fn split_ghosts(&mut self) -> (&[f64], &mut [f64]) {
        let (a, b) = self.data.split_at_mut(self.n_local);
        (a, b)
    }

    /// Copy the owned values of `other` (same layout).
    pub fn copy_from(&mut self, other: &DistVec) {
        self.local_mut().copy_from_slice(other.local());
    }
}
