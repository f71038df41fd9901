//! Reading graphs and weights from files: the JSON graph format (`docs/graph-format.md`) and
//! safetensors. Weights are memory-mapped and borrowed, never copied.

mod json;
pub mod safetensors;

use std::path::PathBuf;

pub use json::{GraphFile, WeightSet};

/// Errors reading graph and weight files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid in its format.
    #[error("{path}: invalid {format} file: {detail}")]
    Format {
        /// The file.
        path: PathBuf,
        /// "safetensors", "graph JSON", …
        format: &'static str,
        /// What is wrong.
        detail: String,
    },
}
