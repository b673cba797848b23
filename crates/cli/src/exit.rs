//! Exit codes and one-line error messages (the CLI contract: 2 for bad input, 1 for a run
//! that failed, never a panic or a backtrace for anything a user controls).

use std::process::ExitCode;

/// Bad input: file, flag, config, unsupported combination.
pub(crate) const BAD_INPUT: u8 = 2;
/// A run that failed: breakdown, no convergence with `--strict`.
pub(crate) const RUN_FAILED: u8 = 1;

/// An error with the exit code it maps to.
#[derive(Debug)]
pub(crate) struct CliError {
    code: u8,
    error: anyhow::Error,
}

impl CliError {
    /// Bad input (exit 2).
    pub(crate) fn bad(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: BAD_INPUT,
            error: error.into(),
        }
    }

    /// A failed run (exit 1).
    pub(crate) fn failed(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: RUN_FAILED,
            error: error.into(),
        }
    }

    /// The same error (and exit code) with `context` before its message.
    pub(crate) fn context(self, context: impl std::fmt::Display + Send + Sync + 'static) -> Self {
        Self {
            code: self.code,
            error: self.error.context(context),
        }
    }

    /// The exit code (`MPI_Abort` takes it as a number; `launch::agree` reduces it).
    pub(crate) fn code(&self) -> u8 {
        self.code
    }

    /// The message on one line, without the `error: ` prefix.
    pub(crate) fn message(&self) -> String {
        one_line(&format!("{:#}", self.error))
    }

    /// Print one line on stderr and return the exit code.
    pub(crate) fn report(self) -> ExitCode {
        let msg = format!("{:#}", self.error);
        eprintln!("error: {}", one_line(&msg));
        ExitCode::from(self.code)
    }
}

/// The error of a universe's run: more ranks than threads may run
/// ([`castack_collectives::CommError::TooManyThreadRanks`], which a `sim` universe reports
/// only when it runs) is bad input (exit 2), anything else a failed run (exit 1), after
/// `context` (the matrix or case).
pub(crate) fn run_error(
    context: impl std::fmt::Display,
    e: castack_collectives::CommError,
) -> CliError {
    match e {
        castack_collectives::CommError::TooManyThreadRanks { .. } => CliError::bad(e),
        e => CliError::failed(anyhow::anyhow!("{context}: {e}")),
    }
}

/// Shorthand for a bad-input error from a message.
pub(crate) fn bad(msg: impl std::fmt::Display) -> CliError {
    CliError::bad(anyhow::anyhow!("{msg}"))
}

fn one_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Render a clap error: help and version go to stdout with exit 0; usage errors become one
/// line on stderr with exit 2.
pub(crate) fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(BAD_INPUT)
            } else {
                ExitCode::SUCCESS
            }
        }
        _ => {
            let text = e.render().to_string();
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .filter(|l| !l.is_empty())
                .collect();
            let msg = lines.join(" ");
            let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
            eprintln!("error: {msg}");
            ExitCode::from(BAD_INPUT)
        }
    }
}
