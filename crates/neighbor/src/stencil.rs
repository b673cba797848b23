//! Explicit 3-D diffusion with a 13-point stencil on a z-split grid: the halo-exchange demo
//! of ALGORITHMS.md section 2 (after the DS-CUDA 3-D Euler code: 5 fields, 2-cell halo,
//! z-split).
//!
//! Every field f follows u <- u + r_f * L(u), with L the fourth-order Laplacian
//! sum over x, y, z of (-u[-2] + 16 u[-1] - 30 u + 16 u[+1] - u[+2]) / 12 (centre plus +-1,
//! +-2 in each direction: 13 points), r_f = 0.01 (f + 1) (stable: r * 16 < 2). x and y have
//! zero Dirichlet ghosts; z is periodic and split across the ranks ([`ProcessGrid::slabs`]),
//! so one rank is its own z-neighbour and two ranks are each other's neighbour on both
//! sides. Each cell's update is evaluated in one fixed order, so any rank count gives the
//! same bits as one rank.
//!
//! With overlap, a step is: start the halo exchange, update the interior z-planes (which
//! read no ghost), finish the exchange, update the two boundary slabs.
//!
//! Cost per step and rank: 13 loads and 15 flops per cell and field; one exchange of
//! 2 faces x h planes x nx*ny cells x fields, 8 bytes each.

use std::ops::Range;
use std::time::Instant;

use castack_collectives::{Communicator, ComputeWork};

use crate::error::NeighborError;
use crate::grid::{Block, Halo, Packing, ProcessGrid};
use crate::mode::Mode;
use crate::strategy::Strategy;

/// Ghost width of the 13-point stencil.
pub const GHOST: usize = 2;

/// Settings of a diffusion run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Diffusion {
    /// Global cells (x, y, z); z is split across the ranks.
    pub global: [usize; 3],
    /// Fields updated independently (each with its own coefficient).
    pub fields: usize,
    /// Time steps.
    pub steps: usize,
    /// Overlap the interior update with the halo exchange.
    pub overlap: bool,
    /// Exchange strategy of the halo.
    pub strategy: Strategy,
    /// Completion mode of the halo exchange.
    pub mode: Mode,
    /// Face packing.
    pub packing: Packing,
}

impl Default for Diffusion {
    fn default() -> Self {
        Self {
            global: [16, 16, 16],
            fields: 5,
            steps: 100,
            overlap: true,
            strategy: Strategy::Naive,
            mode: Mode::TwoSided,
            packing: Packing::Batched,
        }
    }
}

/// One rank's outcome of [`Diffusion::run`].
#[derive(Debug, Clone, PartialEq)]
pub struct DiffusionResult {
    /// Global z-range of this rank's planes.
    pub z: Range<usize>,
    /// Owned values after the last step: field, then z, y, x (x fastest).
    pub values: Vec<f64>,
    /// Seconds spent updating cells (measured; modeled on a modeling backend, from the
    /// work charged with `model_compute`).
    pub compute_s: f64,
    /// Seconds spent in the halo exchange's start and finish (measured or modeled; with
    /// overlap, the part not hidden behind the interior update).
    pub exchange_s: f64,
    /// The modeled clock at the end, on a modeling backend; `None` elsewhere.
    pub modeled_s: Option<f64>,
}

/// Initial value of field `f` at global cell `g`.
fn initial(f: usize, g: [usize; 3]) -> f64 {
    let k = g[0] * 7 + g[1] * 13 + g[2] * 29 + f * 31;
    (k % 97) as f64 / 97.0
}

impl Diffusion {
    /// Run on every rank of `comm` (collective); the ranks split z into contiguous blocks.
    ///
    /// Errors: a block thinner than the ghost width in z
    /// ([`NeighborError::GridTooThin`]), or an exchange error.
    pub fn run<C: Communicator + ?Sized>(
        &self,
        comm: &C,
    ) -> Result<DiffusionResult, NeighborError> {
        let (rank, p) = (comm.rank(), comm.size());
        let grid = ProcessGrid::slabs(p, true);
        let zr = grid.owned_range(rank, self.global)[2].clone();
        let block = Block {
            owned: [self.global[0], self.global[1], zr.len()],
            ghost: GHOST,
            fields: self.fields,
        };
        let mut halo = Halo::new(comm, &grid, block, self.strategy, self.mode, self.packing)?;
        let h = GHOST;
        let [nx, ny, nz] = block.owned;
        let mut u = vec![0.0; block.len()];
        for f in 0..self.fields {
            for z in 0..nz {
                for y in 0..ny {
                    for x in 0..nx {
                        u[block.index(f, x + h, y + h, z + h)] = initial(f, [x, y, zr.start + z]);
                    }
                }
            }
        }
        let mut v = u.clone();
        let interior = block.interior();
        let slabs = [h..interior.start, interior.end..h + nz];
        let (mut compute_s, mut exchange_s) = (0.0, 0.0);
        // Seconds since `wall`, or the modeled clock on a modeling backend.
        let wall = Instant::now();
        let now = || {
            comm.model_clock()
                .unwrap_or_else(|| wall.elapsed().as_secs_f64())
        };
        for _ in 0..self.steps {
            if self.overlap {
                let t = now();
                halo.start(comm, &u)?;
                let t1 = now();
                update(&block, &u, &mut v, interior.clone());
                charge(comm, &block, interior.len());
                let t2 = now();
                halo.finish(comm, &mut u)?;
                let t3 = now();
                for s in &slabs {
                    update(&block, &u, &mut v, s.clone());
                }
                charge(comm, &block, nz - interior.len());
                let t4 = now();
                exchange_s += (t1 - t) + (t3 - t2);
                compute_s += (t2 - t1) + (t4 - t3);
            } else {
                let t = now();
                halo.exchange(comm, &mut u)?;
                let t1 = now();
                update(&block, &u, &mut v, h..h + nz);
                charge(comm, &block, nz);
                let t2 = now();
                exchange_s += t1 - t;
                compute_s += t2 - t1;
            }
            std::mem::swap(&mut u, &mut v);
        }
        let mut values = Vec::with_capacity(self.fields * nx * ny * nz);
        for f in 0..self.fields {
            for z in h..h + nz {
                for y in h..h + ny {
                    let at = block.index(f, h, y, z);
                    values.extend_from_slice(&u[at..at + nx]);
                }
            }
        }
        Ok(DiffusionResult {
            z: zr,
            values,
            compute_s,
            exchange_s,
            modeled_s: comm.model_clock(),
        })
    }
}

/// Tell a modeling backend about the update of `planes` z-planes (all fields).
fn charge<C: Communicator + ?Sized>(comm: &C, block: &Block, planes: usize) {
    let cells = (block.owned[0] * block.owned[1] * planes * block.fields) as u64;
    comm.model_compute(ComputeWork {
        bytes: 16 * cells,
        flops: 15 * cells,
        launches: 1,
        ..ComputeWork::default()
    });
}

/// Update the padded z-planes `zs` of every field from `u` into `v`.
fn update(block: &Block, u: &[f64], v: &mut [f64], zs: Range<usize>) {
    let h = block.ghost;
    let [px, py, _] = block.padded();
    let (sx, sy, sz) = (1, px, px * py);
    for f in 0..block.fields {
        let r = 0.01 * (f + 1) as f64;
        for z in zs.clone() {
            for y in h..h + block.owned[1] {
                for x in h..h + block.owned[0] {
                    let c = block.index(f, x, y, z);
                    let mut lap = 0.0;
                    for s in [sx, sy, sz] {
                        lap += (-u[c - 2 * s] + 16.0 * u[c - s] - 30.0 * u[c] + 16.0 * u[c + s]
                            - u[c + 2 * s])
                            / 12.0;
                    }
                    v[c] = u[c] + r * lap;
                }
            }
        }
    }
}
