//! Errors of the store. Callers tell apart what they asked wrongly (`Invalid`), what is damaged
//! or missing on disk (`Corrupt`), a folder that is no store (`NotAStore`), a snapshot name
//! already taken (`Exists`), a snapshot or field name that does not exist (`NotFound`), the
//! operating system's failures (`Io`) and a write stopped by its caller (`Interrupted`). Every
//! message names the file or snapshot it is about.

use amrzip_codec::CodecError;
use std::fmt;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Invalid,
    Corrupt,
    NotAStore,
    Exists,
    NotFound,
    Io,
    Interrupted,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into() }
    }

    /// The same error with `context` (a file, a snapshot, an array) in front of its message.
    pub fn within(self, context: impl fmt::Display) -> Error {
        Error { kind: self.kind, message: format!("{context}: {}", self.message) }
    }

    pub fn io(path: &Path, e: std::io::Error) -> Error {
        match e.kind() {
            std::io::ErrorKind::NotFound => Error::new(ErrorKind::Corrupt, format!("{}: missing", path.display())),
            std::io::ErrorKind::AlreadyExists => Error::new(ErrorKind::Exists, format!("{}: exists", path.display())),
            _ => Error::new(ErrorKind::Io, format!("{}: {e}", path.display())),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<CodecError> for Error {
    fn from(e: CodecError) -> Error {
        match e {
            CodecError::InvalidInput(m) => Error::new(ErrorKind::Invalid, m),
            CodecError::Corrupt(m) => Error::new(ErrorKind::Corrupt, m),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

macro_rules! corrupt {
    ($($arg:tt)*) => { $crate::error::Error::new($crate::error::ErrorKind::Corrupt, format!($($arg)*)) };
}
macro_rules! invalid {
    ($($arg:tt)*) => { $crate::error::Error::new($crate::error::ErrorKind::Invalid, format!($($arg)*)) };
}
pub(crate) use {corrupt, invalid};
