//! A neighbour exchange staged for any device: the values to send are packed on the device
//! into ONE send buffer (a gather by an index list), copied to the host in one copy,
//! exchanged by the host communicator ([`castack_neighbor::Exchange`] over the packed
//! buffers), copied back to the device in one copy and unpacked there (a scatter, or no
//! kernel at all when the received values land in consecutive slots, as the sorted ghost
//! slots of a halo do).
//!
//! On the CPU the two copies are memory copies of the packed values (the ghost count, not
//! the vector); on a GPU they are the only host-device traffic of an exchange, and a rank
//! with nothing to send skips its device-to-host copy (and its synchronisation).

use castack_collectives::Communicator;
use castack_neighbor::{Exchange, ExchangePattern, Strategy};

use crate::count::{Bucket, SolverComm};
use crate::device::{work, Cpu, Device};
use crate::ops::Ops;
use crate::LinalgError;

/// Where received values go.
enum RecvTo<D: Device> {
    /// Consecutive slots starting here (no unpack kernel).
    Contiguous(usize),
    /// The positions of an index list (a scatter from the receive buffer).
    Scatter(D::Index),
}

/// One staged exchange (see the module documentation).
pub(crate) struct Staged<D: Device> {
    exchange: Exchange,
    /// Position in the source vector of each packed value to send.
    send_idx: D::Index,
    recv: RecvTo<D>,
    /// Packed values to send (device), then received (device; unused when contiguous).
    send_dev: D::Vector,
    recv_dev: D::Vector,
    /// Host buffers the communicator reads and writes.
    send_host: Vec<f64>,
    recv_host: Vec<f64>,
    /// Host copies of the index lists (positions), for the host path and for uploads.
    send_pos: Vec<u32>,
    recv_pos: Vec<u32>,
}

impl<D: Device> std::fmt::Debug for Staged<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged")
            .field("send", &self.send_pos.len())
            .field("recv", &self.recv_pos.len())
            .finish()
    }
}

/// `pos` as 32-bit indices (the callers' vectors are below 2^32 values).
fn positions(lists: &[(usize, Vec<usize>)], offset: usize) -> Result<Vec<u32>, LinalgError> {
    lists
        .iter()
        .flat_map(|(_, idx)| idx.iter().map(move |&i| i + offset))
        .map(|p| u32::try_from(p).map_err(|_| LinalgError::TooLarge { n: p }))
        .collect()
}

/// Each list replaced by its consecutive range in the packed buffer.
fn packed(lists: &[(usize, Vec<usize>)]) -> Vec<(usize, Vec<usize>)> {
    let mut at = 0;
    lists
        .iter()
        .map(|(rank, idx)| {
            let range = (at..at + idx.len()).collect();
            at += idx.len();
            (*rank, range)
        })
        .collect()
}

impl Staged<Cpu> {
    /// The staged exchange of `pattern`: sends index the source vector, receives index the
    /// destination vector from `recv_offset` on. Collective (as [`Exchange::new`]).
    pub(crate) fn new<C: Communicator + ?Sized>(
        comm: &C,
        pattern: &ExchangePattern,
        recv_offset: usize,
        strategy: Strategy,
    ) -> Result<Self, LinalgError> {
        let send_pos = positions(&pattern.sends, 0)?;
        let recv_pos = positions(&pattern.recvs, recv_offset)?;
        let (ms, mr) = (send_pos.len(), recv_pos.len());
        let packed_pattern = ExchangePattern {
            sends: packed(&pattern.sends),
            recvs: packed(&pattern.recvs),
        };
        let exchange = Exchange::new(comm, packed_pattern, ms, mr, strategy)?;
        let contiguous = recv_pos
            .iter()
            .enumerate()
            .all(|(i, &p)| p as usize == recv_offset + i);
        let recv = if contiguous {
            RecvTo::Contiguous(recv_offset)
        } else {
            RecvTo::Scatter(recv_pos.clone())
        };
        Ok(Self {
            exchange,
            send_idx: send_pos.clone(),
            recv,
            send_dev: vec![0.0; ms],
            recv_dev: vec![0.0; mr],
            send_host: vec![0.0; ms],
            recv_host: vec![0.0; mr],
            send_pos,
            recv_pos,
        })
    }

    /// One counted exchange on host slices: pack from `src`, receive into `dst` (set-up:
    /// the scaling of the matrix, before it moves to its device).
    pub(crate) fn exchange_host<C: Communicator + ?Sized>(
        &mut self,
        sc: &mut SolverComm<'_, C>,
        src: &[f64],
        dst: &mut [f64],
    ) -> Result<(), LinalgError> {
        for (o, &i) in self.send_host.iter_mut().zip(&self.send_pos) {
            *o = src[i as usize];
        }
        let t = sc.now();
        self.exchange
            .exchange(sc.comm(), &self.send_host, &mut self.recv_host)?;
        sc.halo_since(self.exchange.send_values(), t);
        for (v, &i) in self.recv_host.iter().zip(&self.recv_pos) {
            dst[i as usize] = *v;
        }
        Ok(())
    }

    /// The same exchange with its index lists and buffers on `dev`.
    pub(crate) fn upload<D: Device>(self, dev: &mut D) -> Result<Staged<D>, LinalgError> {
        let recv = match self.recv {
            RecvTo::Contiguous(at) => RecvTo::Contiguous(at),
            RecvTo::Scatter(idx) => RecvTo::Scatter(dev.upload_index(&idx)?),
        };
        Ok(Staged {
            exchange: self.exchange,
            send_idx: dev.upload_index(&self.send_pos)?,
            recv,
            send_dev: dev.zeros(self.send_pos.len().max(1))?,
            recv_dev: dev.zeros(self.recv_pos.len().max(1))?,
            send_host: self.send_host,
            recv_host: self.recv_host,
            send_pos: self.send_pos,
            recv_pos: self.recv_pos,
        })
    }
}

impl<D: Device> Staged<D> {
    /// Values this rank sends per exchange.
    pub(crate) fn send_values(&self) -> usize {
        self.exchange.send_values()
    }

    /// Pack the values to send from `src` and copy them to the host.
    fn pack<C: Communicator + ?Sized>(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        src: &D::Vector,
    ) -> Result<(), LinalgError> {
        let ms = self.send_pos.len();
        if ms == 0 {
            return Ok(());
        }
        let (idx, buf) = (&self.send_idx, &mut self.send_dev);
        ops.run(Bucket::Halo, work::gather(ms), |d, _| {
            d.gather(src, idx, buf)
        })?;
        ops.stage_out(&self.send_dev, 0, &mut self.send_host, Bucket::Halo)
    }

    /// The host exchange, counted as ONE halo exchange.
    fn communicate<C: Communicator + ?Sized>(
        &mut self,
        ops: &mut Ops<'_, C, D>,
    ) -> Result<(), LinalgError> {
        let sc = ops.sc_mut();
        let t = sc.now();
        self.exchange
            .exchange(sc.comm(), &self.send_host, &mut self.recv_host)?;
        sc.halo_since(self.exchange.send_values(), t);
        Ok(())
    }

    /// Copy the received values to the device and unpack them into `dst`.
    fn unpack<C: Communicator + ?Sized>(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        dst: &mut D::Vector,
    ) -> Result<(), LinalgError> {
        let mr = self.recv_pos.len();
        if mr == 0 {
            return Ok(());
        }
        match &self.recv {
            RecvTo::Contiguous(at) => ops.stage_in(&self.recv_host, dst, *at, Bucket::Halo),
            RecvTo::Scatter(idx) => {
                ops.stage_in(&self.recv_host, &mut self.recv_dev, 0, Bucket::Halo)?;
                let buf = &self.recv_dev;
                ops.run(Bucket::Halo, work::gather(mr), |d, _| {
                    d.scatter(buf, idx, dst)
                })
            }
        }
    }

    /// ONE counted exchange within one vector: send from `x`, receive into `x` (owned
    /// values first, ghost slots after them).
    pub(crate) fn exchange_within<C: Communicator + ?Sized>(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        x: &mut D::Vector,
    ) -> Result<(), LinalgError> {
        self.pack(ops, x)?;
        self.communicate(ops)?;
        self.unpack(ops, x)
    }

    /// ONE counted exchange from `src` into `dst`.
    pub(crate) fn exchange<C: Communicator + ?Sized>(
        &mut self,
        ops: &mut Ops<'_, C, D>,
        src: &D::Vector,
        dst: &mut D::Vector,
    ) -> Result<(), LinalgError> {
        self.pack(ops, src)?;
        self.communicate(ops)?;
        self.unpack(ops, dst)
    }
}
