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
    /// The cluster refused this node or could not be reached, with its
    /// stable code (`SLC-CLU-nnn`).
    Cluster(sluice_cluster::ClusterError),
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
/// A follower of a shuffled split finished its share, but the split's
/// leader stopped before it recorded the end of the run.
pub const CODE_LEADER_GONE: &str = "SLC-CLI-004";

impl CliError {
    /// The stable code printed as `error[CODE]`.
    pub fn code(&self) -> &'static str {
        match self {
            CliError::Sluice(e) | CliError::Unrecovered { source: e, .. } => e.code(),
            CliError::Cluster(e) => e.code(),
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

    /// The leader of a shuffled split stopped before the end of the run.
    pub fn leader_gone(message: impl Into<String>) -> Self {
        CliError::Cli {
            code: CODE_LEADER_GONE,
            message: message.into(),
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
            // The cluster's messages start with their code, which the
            // `error[CODE]` prefix already shows.
            CliError::Cluster(e) => {
                let text = e.to_string();
                let code = e.code();
                f.write_str(
                    text.strip_prefix(code)
                        .map_or(&*text, |t| t.trim_start_matches(": ")),
                )
            }
            CliError::Cli { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Sluice(e) | CliError::Unrecovered { source: e, .. } => Some(e),
            CliError::Cluster(e) => Some(e),
            CliError::Cli { .. } => None,
        }
    }
}

impl From<sluice::Error> for CliError {
    fn from(e: sluice::Error) -> Self {
        CliError::Sluice(e)
    }
}

impl From<sluice_cluster::ClusterError> for CliError {
    fn from(e: sluice_cluster::ClusterError) -> Self {
        CliError::Cluster(e)
    }
}
