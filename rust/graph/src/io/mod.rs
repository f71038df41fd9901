//! Reading graphs and weights from files: the JSON graph format (`docs/graph-format.md`) and
//! safetensors. Weights are memory-mapped and borrowed, never copied.

pub mod gguf;
mod json;
pub mod safetensors;
mod weights;

use std::path::PathBuf;

pub use json::{FileAccess, GraphFile, WeightSet};
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
    /// A GGUF file is invalid.
    #[error("{path}: invalid GGUF file: {source}")]
    Gguf {
        /// The file.
        path: PathBuf,
        /// What is wrong, where.
        #[source]
        source: gguf::GgufError,
    },
    /// A safetensors file is invalid.
    #[error("{path}: invalid safetensors file: {source}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong, where.
        #[source]
        source: safetensors::SafetensorsError,
    },
    /// A graph's data entry names a file outside the graph's directory tree, and the graph is not trusted to.
    #[error(
        "{graph}: tensor '{tensor}' names the data file {file:?}, but {why}; a graph file may only read files in \
         its own directory tree"
    )]
    OutsideGraphDir {
        /// The graph file.
        graph: PathBuf,
        /// The tensor whose data it is.
        tensor: String,
        /// The path as the graph wrote it.
        file: PathBuf,
        /// Why it is outside.
        why: &'static str,
    },
    /// The file is not valid in its format.
    #[error("{path}: invalid {format} file: {detail}")]
    Format {
        /// The file.
        path: PathBuf,
        /// The format ("graph JSON").
        format: &'static str,
        /// What is wrong.
        detail: String,
    },
}
