//! The one error type of the pipeline.

use std::path::PathBuf;

use tapeout_graph::GraphError;
use tapeout_graph::io::IoError;
use tapeout_hlo::HloError;
use tapeout_irpa::IrpaError;

/// Everything that can go wrong in the pipeline: each step's own error, unchanged, plus the
/// pipeline's own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error in one function of a module with several.
    #[error("function '{function}': {source}")]
    InFunction {
        /// The function's name.
        function: String,
        /// What went wrong in it.
        source: Box<Error>,
    },
    /// The functions of one module do not fit together (two with one name, one key naming two values, a tensor
    /// of one function used by another).
    #[error("{0}")]
    Functions(String),
    /// The trace is invalid, or extraction refused a weight.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The graph cannot be lowered to StableHLO.
    #[error(transparent)]
    Emit(#[from] HloError),
    /// Writing or reading an archive failed.
    #[error(transparent)]
    Archive(#[from] IrpaError),
    /// A graph or weight file cannot be read.
    #[error(transparent)]
    Read(#[from] IoError),
    /// Writing an output file failed (the module text, an output directory).
    #[error("cannot write {path}: {source}{}", tapeout_irpa::io_remedy(.source))]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Archives opened as one set do not agree: a key in two of them, or an index that does not match them.
    #[error("archive set {path}: {problem}")]
    ArchiveSet {
        /// The archive or index where the problem shows.
        path: PathBuf,
        /// What is inconsistent, and how IREE would see it.
        problem: String,
    },
    /// A conversion cannot be done as asked.
    #[error("cannot convert {path}: {detail}")]
    Convert {
        /// The input file.
        path: PathBuf,
        /// What is wrong, and what to do.
        detail: String,
    },
}

/// What the user can do about an error, as data: each front end words it in its own terms (a CLI flag,
/// a Kotlin enum constant, a Gradle setting), so that no message shows another front end's spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Remedy {
    /// Have packed (quantized) weights dequantized to f32 while exporting.
    Dequantize,
    /// Make constants of at least `bytes` bytes external parameters instead of inline text.
    ExternalAtOrBelow {
        /// The size of the constant that is too large to inline.
        bytes: u64,
    },
    /// Declare which tensors the model returns.
    DeclareOutputs,
    /// Trust the graph file to read data files outside its own directory.
    AllowFilesOutsideGraphDir,
}

impl Error {
    /// The remedy for this error, when there is one the user can apply with a setting.
    #[must_use]
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            Error::Graph(GraphError::PackedConstant { .. }) => Some(Remedy::Dequantize),
            Error::Graph(GraphError::NoOutputs) => Some(Remedy::DeclareOutputs),
            Error::Read(IoError::OutsideGraphDir { .. }) => Some(Remedy::AllowFilesOutsideGraphDir),
            Error::Emit(HloError::ConstantTooLarge { bytes, .. }) => Some(Remedy::ExternalAtOrBelow { bytes: *bytes }),
            Error::InFunction { source, .. } => source.remedy(),
            _ => None,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
