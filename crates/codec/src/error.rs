//! Errors returned by the codec. Two kinds matter to callers: the input they gave us is
//! unusable (`InvalidInput`), or a stream we were asked to read is damaged (`Corrupt`).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// The caller's array or parameters cannot be compressed as asked.
    InvalidInput(String),
    /// A stream failed validation: wrong magic, bad lengths, checksum mismatch, truncation...
    Corrupt(String),
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::InvalidInput(m) => write!(f, "invalid input: {m}"),
            CodecError::Corrupt(m) => write!(f, "corrupt stream: {m}"),
        }
    }
}

impl std::error::Error for CodecError {}

pub type Result<T> = std::result::Result<T, CodecError>;

/// Shorthand for building a `Corrupt` error from a format string.
macro_rules! corrupt {
    ($($arg:tt)*) => { $crate::error::CodecError::Corrupt(format!($($arg)*)) };
}
pub(crate) use corrupt;
