//! Test helpers shared by castack's crates: dense references, seeded SPD generators and
//! `check_*` helpers, so that a test says *what* it checks rather than *how*.

pub mod reference;

pub mod collectives;
pub mod matrices;
pub mod spd;
pub mod watchdog;
