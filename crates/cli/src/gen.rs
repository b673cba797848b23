//! `krylov gen`: test matrices in Matrix Market format.

use std::io::Write;
use std::process::ExitCode;

use castack_sparse::gen::{poisson2d, poisson3d, poisson3d_heterogeneous};
use castack_sparse::io::write_coordinate_symmetric_lower;

use crate::args::{GenArgs, GenKind};
use crate::exit::CliError;
use crate::output::write_atomic;
use castack_collectives::fabric_sim::MemBudget;

/// Run `krylov gen`.
pub(crate) fn run(args: GenArgs) -> Result<ExitCode, CliError> {
    let (a, output) = match args.kind {
        GenKind::Poisson3d {
            n,
            heterogeneous,
            contrast,
            seed,
            output,
            budget,
        } => {
            check_grid(n, 3, budget.resolve()?)?;
            let a = if heterogeneous {
                poisson3d_heterogeneous(n, contrast, seed)
            } else {
                poisson3d(n)
            };
            (a.map_err(CliError::bad)?, output)
        }
        GenKind::Poisson2d { n, output, budget } => {
            check_grid(n, 2, budget.resolve()?)?;
            (poisson2d(n).map_err(CliError::bad)?, output)
        }
    };
    match output {
        // A `.gz` name gets gzip (as the readers take it), not plain text under that name.
        Some(path) if path.extension().is_some_and(|e| e == "gz") => write_atomic(&path, |w| {
            let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
            write_coordinate_symmetric_lower(&mut gz, &a)?;
            gz.finish()?;
            Ok(())
        })?,
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

/// The CSR matrix of an `n^dims` grid's (2 dims + 1)-point stencil against the budget before
/// it is generated: per row a pointer and up to 2 dims + 1 entries of a column index and a
/// value, and the generator's triplets of as many (row, column, value).
fn check_grid(n: usize, dims: u32, budget: MemBudget) -> Result<(), CliError> {
    let rows = (n as u64).checked_pow(dims);
    let per_row = 8 + u64::from(2 * dims + 1) * (16 + 24);
    let bytes = rows.and_then(|r| r.checked_mul(per_row));
    budget
        .check_opt(format!("the {dims}-D Poisson matrix of n = {n}"), bytes)
        .map_err(crate::budget::over)
}
