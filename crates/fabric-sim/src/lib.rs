//! # castack-fabric-sim
//!
//! A model of an HPC interconnect that answers one question: *when does this transfer
//! finish?* It knows nothing about data or buffers.
//!
//! This crate is intentionally empty until its own issue lands. What it will own
//! (see `ARCHITECTURE.md` and the project's design notes):
//!
//! - topologies (ring, 2 x N torus of the HA-PACS/TCA sub-cluster, n-D mesh/torus, fat tree,
//!   crossbar) and routing between nodes;
//! - ports and links with bandwidth, latency and contention;
//! - the PEACH2/TCA mechanisms: CPU PIO writes, DMA engines with descriptor chains, and the
//!   switch between them; memory kinds (host, GPU) at each endpoint;
//! - presets (`peach2`, `ib-qdr`, `tofu-fx10`) embedded from `configs/fabrics/*.toml` and
//!   calibrated only on point-to-point facts;
//! - pricing a whole communication schedule, with or without data, for the `sim` backend of
//!   `castack-collectives`.
//!
//! No type or function is exported yet: nothing here pretends to model a fabric before the
//! model exists.
