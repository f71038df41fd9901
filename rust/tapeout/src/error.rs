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
    /// Two functions of one module share a kept weight, one multiplying it with its codes in row bands and the
    /// other gathering its rows, which needs them in block rows: one key cannot hold both layouts.
    #[error(
        "the codes '{key}' are in row bands in function '{banded}' and in block rows in function '{gathering}', \
         which gathers rows of the weight: one parameter cannot hold both layouts"
    )]
    MixedCodeLayouts {
        /// The key of the codes (`<weight>.qs`).
        key: String,
        /// The function that multiplies the weight, in row bands.
        banded: String,
        /// The function that gathers the weight's rows, in block rows.
        gathering: String,
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
    /// Keep the codes of packed weights in block rows (the default layout), not in row bands.
    BlockRowCodes,
}

impl Remedy {
    /// Every remedy (with a zero argument), in the order front ends list them.
    pub const ALL: [Remedy; 5] = [
        Remedy::Dequantize,
        Remedy::ExternalAtOrBelow { bytes: 0 },
        Remedy::DeclareOutputs,
        Remedy::AllowFilesOutsideGraphDir,
        Remedy::BlockRowCodes,
    ];

    /// Its name as front ends spell the constant (`DEQUANTIZE`, `EXTERNAL_PARAMETER`, …).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Remedy::Dequantize => "DEQUANTIZE",
            Remedy::ExternalAtOrBelow { .. } => "EXTERNAL_PARAMETER",
            Remedy::DeclareOutputs => "DECLARE_OUTPUTS",
            Remedy::AllowFilesOutsideGraphDir => "ALLOW_FILES_OUTSIDE_GRAPH_DIR",
            Remedy::BlockRowCodes => "BLOCK_ROW_CODES",
        }
    }

    /// Its argument: the constant's size for [`Remedy::ExternalAtOrBelow`], else 0.
    #[must_use]
    pub const fn argument(self) -> u64 {
        match self {
            Remedy::ExternalAtOrBelow { bytes } => bytes,
            Remedy::Dequantize | Remedy::DeclareOutputs | Remedy::AllowFilesOutsideGraphDir | Remedy::BlockRowCodes => {
                0
            }
        }
    }
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
            Error::MixedCodeLayouts { .. } => Some(Remedy::BlockRowCodes),
            Error::InFunction { source, .. } => source.remedy(),
            _ => None,
        }
    }

    /// The indices of the recorded nodes this error is about (empty when it names none), for front ends to
    /// point at the code that recorded them.
    #[must_use]
    pub fn nodes(&self) -> Vec<u64> {
        match self {
            Error::InFunction { source, .. } => source.nodes(),
            Error::Graph(e) => e.nodes(),
            Error::Emit(e) => e.node().into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// The module function the error is in, when it is in one of several: [`Self::nodes`] index its graph.
    #[must_use]
    pub fn function(&self) -> Option<&str> {
        match self {
            Error::InFunction { function, .. } => Some(function),
            Error::Emit(e) => e.function(),
            _ => None,
        }
    }

    /// The tensor (module path or name) this error is about, when it is about one.
    #[must_use]
    pub fn tensor(&self) -> Option<&str> {
        match self {
            Error::InFunction { source, .. } => source.tensor(),
            Error::Graph(e) => e.tensor(),
            Error::Emit(e) => e.tensor(),
            Error::MixedCodeLayouts { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_remedy_is_listed_once_with_its_own_name() {
        let names: std::collections::BTreeSet<_> = Remedy::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), Remedy::ALL.len());
        assert_eq!(Remedy::ExternalAtOrBelow { bytes: 7 }.argument(), 7);
        let e = Error::InFunction {
            function: "f".into(),
            source: Box::new(Error::Emit(HloError::ConstantTooLarge { tensor: "w".into(), bytes: 9, ceiling: 1 })),
        };
        assert_eq!(
            (e.remedy(), e.tensor(), e.nodes()),
            (Some(Remedy::ExternalAtOrBelow { bytes: 9 }), Some("w"), vec![])
        );
    }
}
