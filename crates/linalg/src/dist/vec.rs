//! Distributed vectors: each rank owns a contiguous block and keeps room for ghost values.

use crate::device::{Cpu, Device, VecList, VecListMut};

/// One rank's part of a distributed vector, in the memory of its device `D`: the owned
/// values followed by room for the values of other ranks that this rank's SpMV reads
/// (ghosts, or the whole vector in allgather mode). Create them with
/// [`crate::DistCsr::new_vec`] (host) or [`crate::Ops::new_vec`] so the layout matches.
#[derive(Debug)]
pub struct DistVec<D: Device = Cpu> {
    data: D::Vector,
    n_local: usize,
}

impl<D: Device> DistVec<D> {
    /// A vector from a device buffer whose first `n_local` values are the owned ones.
    ///
    /// # Panics
    /// When the buffer holds fewer than `n_local` values (a caller bug).
    #[track_caller]
    pub fn from_raw(data: D::Vector, n_local: usize) -> Self {
        assert!(
            D::len(&data) >= n_local,
            "DistVec::from_raw: buffer shorter than the owned values"
        );
        Self { data, n_local }
    }

    /// Number of owned values.
    pub fn n_local(&self) -> usize {
        self.n_local
    }

    /// Owned values plus ghost slots.
    pub fn n_ext(&self) -> usize {
        D::len(&self.data)
    }

    /// The device buffer (owned values first).
    pub fn raw(&self) -> &D::Vector {
        &self.data
    }

    /// The device buffer, mutably.
    pub fn raw_mut(&mut self) -> &mut D::Vector {
        &mut self.data
    }
}

impl DistVec<Cpu> {
    /// A zero vector with `n_local` owned values and `n_ext - n_local` ghost slots.
    pub fn zeros(n_local: usize, n_ext: usize) -> Self {
        Self {
            data: vec![0.0; n_ext.max(n_local)],
            n_local,
        }
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

    /// Owned values and ghost slots, mutable.
    pub fn ext_mut(&mut self) -> &mut [f64] {
        &mut self.data
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

impl Clone for DistVec<Cpu> {
    fn clone(&self) -> Self {
        Self {
            data: self.data.clone(),
            n_local: self.n_local,
        }
    }
}

impl PartialEq for DistVec<Cpu> {
    fn eq(&self, other: &Self) -> bool {
        self.n_local == other.n_local && self.data == other.data
    }
}

impl<D: Device> VecList<D::Vector> for [DistVec<D>] {
    fn count(&self) -> usize {
        self.len()
    }
    fn get(&self, i: usize) -> &D::Vector {
        &self[i].data
    }
}

impl<D: Device> VecList<D::Vector> for [&DistVec<D>] {
    fn count(&self) -> usize {
        self.len()
    }
    fn get(&self, i: usize) -> &D::Vector {
        &self[i].data
    }
}

impl<D: Device> VecListMut<D::Vector> for [DistVec<D>] {
    fn count(&self) -> usize {
        self.len()
    }
    fn get_mut(&mut self, i: usize) -> &mut D::Vector {
        &mut self[i].data
    }
}

impl<D: Device> VecListMut<D::Vector> for [&mut DistVec<D>] {
    fn count(&self) -> usize {
        self.len()
    }
    fn get_mut(&mut self, i: usize) -> &mut D::Vector {
        &mut self[i].data
    }
}
