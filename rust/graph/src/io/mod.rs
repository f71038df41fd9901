//! Reading graphs and weights from files: the JSON graph format (`docs/graph-format.md`) and
//! safetensors. Weights are memory-mapped and borrowed, never copied.

pub mod gguf;
mod json;
pub mod safetensors;
mod weights;

use std::path::PathBuf;

pub use json::{GraphFile, WeightSet};
pub use weights::{Stored, StoredTensor, WeightFile};

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
    /// A conversion could not be done as asked.
    #[error("cannot convert {path}: {detail}")]
    Convert {
        /// The input file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
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
