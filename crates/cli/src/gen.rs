//! `krylov gen`: test matrices in Matrix Market format.

use std::io::Write;
use std::process::ExitCode;

use castack_krylov::gen::{poisson2d, poisson3d, poisson3d_heterogeneous};
use castack_krylov::io::write_coordinate_symmetric_lower;

use crate::args::{GenArgs, GenKind};
use crate::exit::CliError;
use crate::output::write_atomic;

/// Run `krylov gen`.
pub(crate) fn run(args: GenArgs) -> Result<ExitCode, CliError> {
    let (a, output) = match args.kind {
        GenKind::Poisson3d {
            n,
            heterogeneous,
            contrast,
            seed,
            output,
        } => {
            let a = if heterogeneous {
                poisson3d_heterogeneous(n, contrast, seed)
            } else {
                poisson3d(n)
            };
            (a.map_err(CliError::bad)?, output)
        }
        GenKind::Poisson2d { n, output } => (poisson2d(n).map_err(CliError::bad)?, output),
    };
    match output {
        Some(path) => write_atomic(&path, |w| Ok(write_coordinate_symmetric_lower(w, &a)?))?,
        None => {
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            match write_coordinate_symmetric_lower(&mut w, &a).and_then(|()| w.flush()) {
                // The reader went away (`krylov gen ... | head`): not an error.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                other => other.map_err(CliError::bad)?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
