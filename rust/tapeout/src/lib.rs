//! The tapeout pipeline: a recorded [`Trace`](graph::Trace) becomes a validated graph
//! ([`finalize`]), the graph a StableHLO module and an IREE parameter archive ([`export`]), and a
//! GGUF or safetensors file an archive ([`convert`]).
//!
//! This crate is where the steps meet; each lives in its own crate and knows nothing of the others'
//! errors: [`graph`] (tensors, traces, extraction, file readers), [`hlo`] (module text), [`irpa`] (the
//! archive format). The front ends (the `tapeout` binary, the JNI library) parse arguments, call this
//! crate, and word its [`Error`]s for their users, using [`Error::remedy`].
#![deny(missing_docs)]

mod archive;
mod convert;
mod error;
mod export;
mod metadata;
mod shards;
mod signature;

pub use tapeout_graph as graph;
pub use tapeout_hlo as hlo;
pub use tapeout_irpa as irpa;

pub use archive::ConstantPayload;
pub use convert::{ConvertOptions, ConvertSummary, convert};
pub use error::{Error, Remedy, Result};
pub use export::{
    ExportSummary, GraphFileExport, export, export_functions, export_graph_file, file_stem, finalize, module_text,
};
pub use metadata::TENSOR_METADATA_PREFIX;
pub use shards::{ArchiveFiles, ArchiveSet, INDEX_FORMAT, index_file_name, shard_file_name};
pub use signature::{SIGNATURE_FORMAT, signature_file_name, signature_json};
