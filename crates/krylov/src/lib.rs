//! castack krylov

pub mod gen;
pub mod io;
