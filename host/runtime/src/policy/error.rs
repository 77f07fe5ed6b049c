//! Why a policy could not be used ([`PolicyError`]).

use std::path::PathBuf;

/// Why a policy could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("policy file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not ours, or others may write it.
    #[error("policy file {path} is not trusted: {why}")]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The document is malformed.
    #[error("policy {origin}: {msg}")]
    Invalid {
        /// Where it came from.
        origin: String,
        /// What is wrong (serde names the field and position).
        msg: String,
    },
    /// A plugin has an entry in the policy file and in the policy
    /// directory.
    #[error("policy: plugin {name:?} has an entry both in {} (plugins.{name}) and in {}; remove one", file.display(), dir.display())]
    Ambiguous {
        /// The plugin.
        name: String,
        /// The policy file.
        file: PathBuf,
        /// Its file in the policy directory.
        dir: PathBuf,
    },
}
