//! The error type every command returns; `main` maps it to one line and an exit code.

use crate::exit_code;

/// What went wrong, with enough context to say what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input from the user: printed as is, exit code 2.
    #[error("{0}")]
    Usage(String),
    /// A node could not be reached: exit code 255.
    #[error("{0}")]
    Connection(String),
    /// Anything else that stops the command: exit code 1.
    #[error("{0}")]
    Failed(String),
}

impl From<crate::env_map::BadVar> for Error {
    fn from(bad: crate::env_map::BadVar) -> Self {
        Error::Usage(bad.to_string())
    }
}

impl Error {
    pub fn usage(msg: impl Into<String>) -> Self {
        Error::Usage(msg.into())
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => exit_code::USAGE,
            Error::Connection(_) => exit_code::CONNECTION_FAILED,
            Error::Failed(_) => 1,
        }
    }
}
