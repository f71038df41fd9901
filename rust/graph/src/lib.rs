//! Tensors, compute graphs and constant extraction.
//!
//! A [`Trace`] records what a model did: tensors (with storage that someone else owns) and the
//! ops between them. [`finalize`] validates it, orders it, and turns every tensor no op produces
//! into a runtime input or a frozen [`Constant`]:
//!
//! * dense f32 weights are **borrowed**: the constant is the caller's buffer, never a copy;
//! * f16/bf16 weights are **kept as stored** (the program converts them), or widened to f32 lazily, one
//!   chunk at a time, when asked;
//! * packed (quantized) weights are refused with a remedy, or dequantized lazily on request;
//! * every count and size is a `u64`; a 2^31-byte tensor needs no allocation of its size.
#![deny(missing_docs)]

mod constant;
mod dtype;
mod error;
mod graph;
pub mod io;
pub mod ops;
mod packed;
mod pass;
mod planar;
mod shape;
mod sink;
mod target;
mod tensor;
mod trace;
mod transpose;

pub use constant::{ByteSink, CHUNK_VALUES, ConstantData, MAX_LEND_BYTES, PASSTHROUGH_VALUES};
pub use dtype::DType;
pub use error::{GraphError, Result};
pub use graph::{
    ComputeGraph, Constant, ExtractOptions, HalfConstantHandling, KeyCollision, PackedCodesLayout,
    PackedConstantHandling, PassOps, WeightLayout, finalize,
};
pub use ops::{ArgDim, OpKind, argument_dims, dims_text};
pub use packed::{BlockOrder, DecodeError, Encoding, dequantize};
pub use planar::Plane;
pub use shape::{Dim, Shape};
pub use target::{FEW_ROWS, Forms, Target, Tuning};
pub use tensor::{ChunkLender, HalfLayout, LendError, Lent, Storage, StreamError, Tensor, TensorSpec};
pub use trace::{Attr, Attrs, Op, TensorId, Trace};
