//! Errors of the command-line tool: the library's own errors, plus the few
//! the CLI raises itself (bad arguments, unreadable script, push sources).

use std::fmt;

/// Anything that ends `sluice` with status 1.
#[derive(Debug)]
pub enum CliError {
    /// An error from the database, with its stable code.
    Sluice(sluice::Error),
    /// A consistency fault that came back after every recovery `sluice
    /// run` attempted (a deterministic failure replays the same way).
    Unrecovered {
        /// Recoveries attempted from the last checkpoint.
        recoveries: u32,
        /// The fault of the last attempt.
        source: sluice::Error,
    },
    /// An error found by the CLI itself.
    Cli {
        /// Stable code, `SLC-CLI-nnn`.
        code: &'static str,
        /// What went wrong.
        message: String,
    },
}

/// A command-line argument is malformed.
pub const CODE_USAGE: &str = "SLC-CLI-001";
/// The script or the terminal could not be read or written.
pub const CODE_IO: &str = "SLC-CLI-002";
/// The script cannot run to completion unattended.
pub const CODE_SCRIPT: &str = "SLC-CLI-003";

impl CliError {
    /// The stable code printed as `error[CODE]`.
    pub fn code(&self) -> &'static str {
        match self {
            CliError::Sluice(e) | CliError::Unrecovered { source: e, .. } => e.code(),
            CliError::Cli { code, .. } => code,
        }
    }

    /// A malformed argument.
    pub fn usage(message: impl Into<String>) -> Self {
        CliError::Cli {
            code: CODE_USAGE,
            message: message.into(),
        }
    }

    /// An I/O failure while doing `what`.
    pub fn io(what: impl fmt::Display, e: std::io::Error) -> Self {
        CliError::Cli {
            code: CODE_IO,
            message: format!("{what}: {e}"),
        }
    }

    /// A script that `sluice run` cannot execute.
    pub fn script(message: impl Into<String>) -> Self {
        CliError::Cli {
            code: CODE_SCRIPT,
            message: message.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Sluice(e) => write!(f, "{e}"),
            CliError::Unrecovered { recoveries, source } => write!(
                f,
                "{source}; the run was recovered from the last checkpoint {recoveries} times \
                 and failed the same way each time"
            ),
            CliError::Cli { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Sluice(e) | CliError::Unrecovered { source: e, .. } => Some(e),
            CliError::Cli { .. } => None,
        }
    }
}

impl From<sluice::Error> for CliError {
    fn from(e: sluice::Error) -> Self {
        CliError::Sluice(e)
    }
}
