//! StableHLO emission for tapeout graphs: module text, and the external parameters it refers to.
//!
//! [`emit`] lowers a [`tapeout_graph::ComputeGraph`] to textual MLIR that IREE 3.13 compiles:
//! `stablehlo`, `func` and `util` ops, with `tensor` reshapes and `tensor.dim` of `?` dimensions, `arith` index
//! constants, one `linalg.generic` per banded linear (below; its accumulator a `tensor.empty` filled with
//! `linalg.fill`), `tensor.insert_slice`s for a concatenation along a `?` axis, real `stablehlo.reduce` for every
//! reduction,
//! bit-exact hex constants, and external parameters as
//! `util.global private @k = #flow.parameter.named<"scope"::"key">`. Any tensor name or key is
//! quoted and escaped so it stays valid MLIR. [`emit_pipelined`] writes the text on a second thread while
//! the constants are converted. A linear's weight stored in row bands is contracted as stored by one
//! `linalg.generic` (no form of StableHLO's `dot_general` reads it without a broadcast or a copy in IREE 3.13).
//! [`cpu_tuning_spec`] is the `iree-compile` tuning spec for the module's one-row products over kept codes
//! and bf16 / f16 row bands on CPUs. This crate writes text only: archives are the pipeline's (`tapeout`).
#![deny(missing_docs)]

mod contraction;
mod emit;
mod error;
mod pipe;
pub mod text;
mod tuning;

pub use emit::{EmitOptions, ExternalParameter, INLINE_CEILING, MaterializationPolicy, Module, emit, emit_to};
pub use error::{HloError, Result};
pub use pipe::{emit_functions_pipelined, emit_pipelined};
pub use tuning::{cpu_tuning_spec, is_tuned};
