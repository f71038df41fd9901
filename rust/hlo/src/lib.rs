//! StableHLO emission and one-pass export for tapeout graphs.
//!
//! [`emit`] lowers a [`tapeout_graph::ComputeGraph`] to textual MLIR that IREE 3.13 compiles:
//! only the `stablehlo`, `func` and `util` dialects, real `stablehlo.reduce` for every reduction,
//! bit-exact hex constants, and external parameters as
//! `util.global private @k = #flow.parameter.named<"scope"::"key">`. Any tensor name or key is
//! quoted and escaped so it stays valid MLIR. [`export`] writes the module and streams the external
//! constants into an `.irpa` archive in one pass.
#![deny(missing_docs)]

mod emit;
mod error;
mod export;
pub mod text;

pub use emit::{
    EmitOptions, ExternalParameter, INLINE_CEILING, KNOWN_OPS, MaterializationPolicy, Module, emit, emit_to,
};
pub use error::{HloError, Result};
pub use export::{ExportSummary, emit_pipelined, export, file_stem};
