//! Tensors as a trace records them: a spec plus the storage that someone else owns.

use std::path::PathBuf;

use crate::dtype::DType;
use crate::packed::{BlockOrder, Encoding};
use crate::shape::Shape;

/// Failure reported by a [`ChunkLender`] (for example a JVM error while pinning an array), or by a
/// [`crate::ByteSink`] refusing bytes.
pub type LendError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why streaming a constant's values stopped. The graph layer knows nothing of where the bytes go:
/// a sink's own error travels as [`StreamError::Sink`] and the caller that chose the sink takes it back
/// (downcast) to report it in its own terms.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The memory holding the values could not be lent (a JVM error while pinning an array, an array
    /// shorter than its tensor).
    #[error("its values could not be read: {0}")]
    Lend(#[source] LendError),
    /// The stored values cannot be decoded (a packed block the decoder rejects).
    #[error("its values cannot be decoded: {0}")]
    Decode(String),
    /// The destination refused the bytes (a write error of the archive or module being written).
    #[error("{0}")]
    Sink(#[source] LendError),
}

/// Memory that can only be reached one bounded chunk at a time.
///
/// The JNI binding implements this over a JVM array that it pins per chunk: the slice handed to
/// `f` is valid only during the call, and nothing else may run on the JVM meanwhile.
pub trait ChunkLender<T> {
    /// Number of elements.
    fn len(&self) -> u64;

    /// True when there are no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lends elements `start .. start + len` to `f` and returns what `f` returned; the lender's own
    /// failure is [`StreamError::Lend`].
    fn with_chunk(
        &self,
        start: u64,
        len: u64,
        f: &mut dyn FnMut(&[T]) -> Result<(), StreamError>,
    ) -> Result<(), StreamError>;

    /// Copies `out.len() / run` runs of `run` elements into `out`, in order, run `k` starting at element
    /// `start + k · stride`: the strided reads of a transposition. The default lends each run as its own chunk;
    /// a lender whose chunks are views of one memory (a pinned JVM array) serves them all under one short pin.
    ///
    /// # Errors
    /// The lender's failure ([`StreamError::Lend`]), or `out.len()` not a multiple of `run`.
    fn copy_runs(&self, start: u64, run: u64, stride: u64, out: &mut [T]) -> Result<(), StreamError>
    where
        T: Copy,
    {
        let width = usize::try_from(run).map_err(|e| StreamError::Lend(e.into()))?;
        if width == 0 || out.len() % width != 0 {
            return Err(StreamError::Lend(format!("{} elements are not runs of {run}", out.len()).into()));
        }
        for (k, dst) in out.chunks_exact_mut(width).enumerate() {
            let at = start + k as u64 * stride;
            self.with_chunk(at, run, &mut |chunk| {
                if chunk.len() != dst.len() {
                    return Err(StreamError::Lend(format!("lent {} elements for a run of {run}", chunk.len()).into()));
                }
                dst.copy_from_slice(chunk);
                Ok(())
            })?;
        }
        Ok(())
    }
}

/// Copies runs out of addressable memory; see [`ChunkLender::copy_runs`].
pub(crate) fn copy_runs_from<T: Copy>(
    src: &[T],
    start: u64,
    run: u64,
    stride: u64,
    out: &mut [T],
) -> Result<(), StreamError> {
    let host = |n: u64| usize::try_from(n).map_err(|e| StreamError::Lend(e.into()));
    let (start, width, stride) = (host(start)?, host(run)?, host(stride)?);
    if width == 0 || out.len() % width != 0 {
        return Err(StreamError::Lend(format!("{} elements are not runs of {run}", out.len()).into()));
    }
    for (k, dst) in out.chunks_exact_mut(width).enumerate() {
        let at = k.checked_mul(stride).and_then(|o| o.checked_add(start));
        let Some(chunk) = at.and_then(|a| src.get(a..a.checked_add(width)?)) else {
            return Err(StreamError::Lend(format!("run {k} lies beyond the {} elements held", src.len()).into()));
        };
        dst.copy_from_slice(chunk);
    }
    Ok(())
}

/// Memory lent to tapeout for the lifetime `'a`: never copied as a whole.
pub enum Lent<'a, T> {
    /// An addressable slice (Rust memory, an mmap).
    Slice(&'a [T]),
    /// Memory reached one chunk at a time (a pinned JVM array).
    Chunked(&'a dyn ChunkLender<T>),
}

impl<T> Clone for Lent<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Lent<'_, T> {}

impl<T> std::fmt::Debug for Lent<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lent::Slice(s) => write!(f, "Slice({:p}, {} elements)", s.as_ptr(), s.len()),
            Lent::Chunked(c) => write!(f, "Chunked({} elements)", c.len()),
        }
    }
}

impl<'a, T> Lent<'a, T> {
    /// Number of elements.
    #[must_use]
    pub fn len(&self) -> u64 {
        match self {
            Lent::Slice(s) => s.len() as u64,
            Lent::Chunked(c) => c.len(),
        }
    }

    /// True when there are no elements.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slice itself, when the memory is addressable (for identity checks and fast paths).
    #[must_use]
    pub fn as_slice(&self) -> Option<&'a [T]> {
        match self {
            Lent::Slice(s) => Some(s),
            Lent::Chunked(_) => None,
        }
    }

    /// Copies strided runs into `out`; see [`ChunkLender::copy_runs`].
    ///
    /// # Errors
    /// The lender's failure, or runs beyond the elements held.
    pub fn copy_runs(&self, start: u64, run: u64, stride: u64, out: &mut [T]) -> Result<(), StreamError>
    where
        T: Copy,
    {
        match self {
            Lent::Slice(s) => copy_runs_from(s, start, run, stride, out),
            Lent::Chunked(c) => c.copy_runs(start, run, stride, out),
        }
    }

    /// Calls `f` on consecutive chunks of at most `max` elements (chunk starts are multiples of
    /// `max`, so a caller can keep blocks whole by choosing `max` as a multiple of the block).
    pub fn for_each_chunk(
        &self,
        max: u64,
        f: &mut dyn FnMut(&[T]) -> Result<(), StreamError>,
    ) -> Result<(), StreamError> {
        let max = max.max(1);
        match self {
            // A limit past the address space is no limit: a slice in memory is shorter than usize::MAX.
            Lent::Slice(s) => s.chunks(usize::try_from(max).unwrap_or(usize::MAX)).try_for_each(f),
            Lent::Chunked(c) => {
                let total = c.len();
                let mut start = 0;
                while start < total {
                    let n = max.min(total - start);
                    c.with_chunk(start, n, f)?;
                    start += n;
                }
                Ok(())
            }
        }
    }
}

/// Physical order of a dense 16-bit float tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HalfLayout {
    /// Row-major, like every other tensor.
    #[default]
    RowMajor,
    /// A rank-2 `[rows, cols]` tensor stored column by column: element `[r, c]` at index
    /// `c · rows + r` (the reference's "input-major" variant). Decoded in row-major order.
    ColumnMajor,
}

/// Where a tensor's values live. tapeout borrows; it never takes ownership of weights.
#[derive(Debug)]
#[non_exhaustive]
pub enum Storage<'a> {
    /// Dense f32 values.
    F32(Lent<'a, f32>),
    /// Dense f16 or bf16 values as little-endian bytes (the spec's dtype says which).
    Half {
        /// Two bytes per element.
        bytes: Lent<'a, u8>,
        /// Physical order.
        layout: HalfLayout,
    },
    /// Packed blocks of a quantized encoding. The spec's dtype is the logical dtype (f32).
    Packed {
        /// The block encoding.
        encoding: Encoding,
        /// The block order.
        order: BlockOrder,
        /// The packed bytes.
        bytes: Lent<'a, u8>,
    },
    /// Dense values of any other dtype (integers, bool, f64) as little-endian bytes.
    Dense(Lent<'a, u8>),
    /// A region of a file that the program reads at run time; becomes a graph input.
    Mapped {
        /// The file.
        path: PathBuf,
        /// Byte offset of the region.
        offset: u64,
        /// Byte length of the region.
        len: u64,
    },
    /// No values (a shape-only placeholder); becomes a graph input.
    None,
}

impl Storage<'_> {
    /// Short name of the storage kind, for messages.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Storage::F32(_) => "dense f32",
            Storage::Half { .. } => "dense 16-bit float",
            Storage::Packed { .. } => "packed blocks",
            Storage::Dense(_) => "dense bytes",
            Storage::Mapped { .. } => "mapped file region",
            Storage::None => "shape only",
        }
    }
}

/// What a tensor is, independent of where its values live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// The trace's name for it (for example `t12`). Used in messages and as a fallback key.
    pub name: String,
    /// Shape, outermost first.
    pub shape: Shape,
    /// Logical element type.
    pub dtype: DType,
    /// Module path (`model.layers.3.attn.q_proj.weight`): the stable parameter key when present.
    pub path: Option<String>,
}

impl TensorSpec {
    /// A spec without a module path.
    pub fn new(name: impl Into<String>, shape: Shape, dtype: DType) -> Self {
        Self { name: name.into(), shape, dtype, path: None }
    }

    /// The same spec with a module path.
    #[must_use]
    pub fn with_path(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }

    /// How messages name it: the module path when it has one, else its name.
    #[must_use]
    pub fn label(&self) -> &str {
        self.path.as_deref().filter(|p| !p.is_empty()).unwrap_or(&self.name)
    }

    /// The MLIR tensor type, e.g. `tensor<4x3xf32>`, `tensor<?x8xbf16>`, `tensor<i1>`.
    #[must_use]
    pub fn mlir_type(&self) -> String {
        self.shape.mlir_type(self.dtype)
    }
}

/// A recorded tensor: its spec and its (borrowed) storage.
#[derive(Debug)]
pub struct Tensor<'a> {
    /// What it is.
    pub spec: TensorSpec,
    /// Where its values live.
    pub storage: Storage<'a>,
}

impl<'a> Tensor<'a> {
    /// A tensor with no values (an activation, or a placeholder input).
    #[must_use]
    pub fn placeholder(spec: TensorSpec) -> Self {
        Self { spec, storage: Storage::None }
    }

    /// A dense f32 tensor that borrows `values` (no copy).
    #[must_use]
    pub fn f32(spec: TensorSpec, values: &'a [f32]) -> Self {
        Self { spec, storage: Storage::F32(Lent::Slice(values)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlir_types() {
        assert_eq!(TensorSpec::new("t", Shape::of(&[4, 3]), DType::F32).mlir_type(), "tensor<4x3xf32>");
        assert_eq!(TensorSpec::new("t", Shape::scalar(), DType::Bool).mlir_type(), "tensor<i1>");
    }

    #[test]
    fn slice_chunks_cover_everything_in_order() {
        let v: Vec<u8> = (0..10).collect();
        let mut seen = Vec::new();
        Lent::Slice(&v[..])
            .for_each_chunk(4, &mut |c| {
                seen.push(c.to_vec());
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]);
    }
}
