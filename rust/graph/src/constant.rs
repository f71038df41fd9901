//! Constant values produced lazily, chunk by chunk, from the storage they borrow.

pub use crate::sink::ByteSink;

use crate::dtype::DType;
use crate::packed::{self, Encoding};
use crate::sink::widen_into;
use crate::tensor::{HalfLayout, Lent, StreamError, TensorSpec};
use crate::trace::TensorId;
use crate::transpose::{self, Held};

/// Values produced per chunk when widening or dequantizing: 1 Mi f32 = 4 MiB, the only buffer
/// these paths allocate.
pub const CHUNK_VALUES: u64 = 1 << 20;

/// [`CHUNK_VALUES`] as a buffer length.
const CHUNK_USIZE: usize = 1 << 20;
const _: () = assert!(CHUNK_USIZE as u64 == CHUNK_VALUES);

/// The most bytes lent per chunk when passing stored bytes through: 64 MiB (one pin of a JVM array).
pub const MAX_LEND_BYTES: u64 = 64 << 20;

/// Elements of an f32 tensor lent per chunk when passing it through: 64 MiB.
pub const PASSTHROUGH_VALUES: u64 = MAX_LEND_BYTES / 4;

/// The values of an extracted constant. Nothing here owns or copies a whole tensor.
#[derive(Debug, Clone)]
pub enum ConstantData<'a> {
    /// f32 values written straight from the borrowed memory.
    F32(Lent<'a, f32>),
    /// f16/bf16 values widened to f32 one chunk at a time.
    Widen {
        /// `F16` or `BF16`.
        from: DType,
        /// Two bytes per element, little-endian.
        bytes: Lent<'a, u8>,
        /// Physical order of the source.
        layout: HalfLayout,
        /// `[rows, cols]` for [`HalfLayout::ColumnMajor`]; `[count, 1]` otherwise.
        dims: [u64; 2],
    },
    /// Packed blocks decoded to f32 one chunk of blocks at a time.
    Dequantize {
        /// The block encoding (decodable, row-major block order).
        encoding: Encoding,
        /// The packed bytes.
        bytes: Lent<'a, u8>,
        /// Number of decoded values.
        elements: u64,
    },
    /// The row-major `[rows, cols]` values of another constant written transposed, as `[cols, rows]`, tile by
    /// tile (strided reads of at most a few MiB each, from addressable memory or one short lend of a chunked
    /// lender): the layout chosen at export time for a weight the program only contracts on its last dimension
    /// (a PyTorch-layout `[out, in]` linear, a tied LM head), so that the module contracts it as stored.
    ///
    /// With `tile` less than `rows`, each band of `tile` source rows is written transposed in turn: the stored tensor
    /// is `[rows / tile, cols, tile]` (element `[b, k, t]` is source `[b·tile + t, k]`), the layout in which IREE
    /// 3.13's CPU code reads a decode step's matrix-vector product as contiguous runs
    /// (docs/performance.md#weights-in-iree). `tile == rows` is the plain transpose, `[cols, rows]` (the same bytes as
    /// `[1, cols, rows]`).
    Transposed {
        /// The values as held: f32, stored bytes, row-major 16-bit (kept or widened), or packed blocks.
        of: Box<ConstantData<'a>>,
        /// Rows of the source (columns of what is written).
        rows: u64,
        /// Columns of the source (rows of what is written).
        cols: u64,
        /// Source rows per band; divides `rows` (`rows` itself for the plain transpose).
        tile: u64,
    },
    /// One plane of a packed weight kept packed ([`Plane`](crate::Plane)): its codes or per-block numbers, repacked from
    /// the GGML blocks tile by tile in the layout the program contracts.
    Plane {
        /// The block encoding.
        encoding: Encoding,
        /// The packed bytes (row-major blocks along `dims[1]`).
        bytes: Lent<'a, u8>,
        /// The packed weight's logical `[rows, cols]`.
        dims: [u64; 2],
        /// The rows every plane is written with: `dims[0]` rounded up to 64 for a format with sub-byte codes (i4
        /// codes, i2 high bits), `dims[0]` itself for Q8_0; the rows past `dims[0]` are zero.
        padded_rows: u64,
        /// Which plane.
        plane: crate::planar::Plane,
        /// Rows per band when the plane is written in row bands (the codes of a Q8_0 or Q4_0 weight no use gathers):
        /// stored `[padded_rows / band, Kb, B, band]` instead of `[Kb, B, padded_rows]`, so that a decode step's
        /// product reads each band's codes as one contiguous run ([`ConstantData::row_tile`]). `None`: as the
        /// plane table of docs/graph-format.md says. Only the codes ([`Plane::Quants`](crate::Plane::Quants)) are
        /// banded, and `band` divides `padded_rows`; the writer refuses anything else.
        band: Option<u64>,
    },
    /// The bytes of another constant of a narrower type (16-bit floats, 8-bit and sub-byte integers) as they
    /// are, zero-padded to whole 32-bit words and typed `i32` (`[ceil(bytes / 4)]`): the form in which a device that
    /// stores only 32-bit values (IREE's default Vulkan profile) reads them, each decoded in the program by a
    /// `decode_words` op. Its tensor is that of the words; the narrow tensor is the decoded one.
    Words {
        /// The narrow values, as the other forms write them.
        of: Box<ConstantData<'a>>,
    },
    /// Values of another dtype written as stored (little-endian bytes).
    Raw {
        /// Their dtype.
        dtype: DType,
        /// The bytes.
        bytes: Lent<'a, u8>,
    },
}

/// Appends f32 values as little-endian bytes (no copy on little-endian hosts).
fn put_f32(out: &mut dyn ByteSink, values: &[f32]) -> Result<(), StreamError> {
    if cfg!(target_endian = "little") {
        out.put(bytemuck::cast_slice(values))
    } else {
        let le: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        out.put(&le)
    }
}

fn lend<T, F>(out: &mut dyn ByteSink, lent: &Lent<'_, T>, max: u64, mut f: F) -> Result<(), StreamError>
where
    F: FnMut(&mut dyn ByteSink, &[T]) -> Result<(), StreamError>,
{
    lent.for_each_chunk(max, &mut |chunk| f(&mut *out, chunk))
}

fn buffer(len: u64) -> Vec<f32> {
    // At most one chunk: a length past this host's usize is past a chunk.
    vec![0f32; usize::try_from(len).map_or(CHUNK_USIZE, |n| n.min(CHUNK_USIZE))]
}

/// A frozen value of the graph, with its stable parameter key.
#[derive(Debug, Clone)]
pub struct Constant<'a> {
    /// The tensor it provides.
    pub tensor: TensorId,
    /// The parameter key: the module path when the tensor has one, unique in the graph.
    pub key: String,
    /// Its values, produced lazily from the borrowed storage.
    pub data: ConstantData<'a>,
}

/// Why a constant's values and the spec of its tensor disagree, if they do: what the verifier run after every
/// rewrite of [`crate::finalize`] checks of each constant.
pub(crate) fn disagreement(spec: &TensorSpec, data: &ConstantData<'_>) -> Option<String> {
    let (held, wanted) = (data.dtype(), spec.dtype);
    // The program converts a float constant to the float type its tensor has (a 16-bit weight kept as stored).
    if held != wanted && !(held.is_float() && wanted.is_float()) {
        return Some(format!("its values are {held}, its tensor is {wanted}"));
    }
    match spec.shape.element_count().filter(|_| !spec.shape.is_dynamic()) {
        Some(n) if n == data.element_count() => None,
        Some(n) => Some(format!("it holds {} values, its tensor [{}] has {n}", data.element_count(), spec.shape)),
        None => Some(format!("its tensor [{}] has no static element count", spec.shape)),
    }
}

impl<T> Lent<'_, T> {
    /// Where the values live: the address and length of a slice, the address of a lender. Two constants with
    /// one identity read the same memory.
    #[must_use]
    pub fn identity(&self) -> String {
        match self {
            Lent::Slice(s) => format!("slice@{:p}+{}", s.as_ptr(), s.len()),
            Lent::Chunked(l) => format!("lender@{:p}", std::ptr::from_ref(*l).cast::<u8>()),
        }
    }
}

impl ConstantData<'_> {
    /// The bytes this constant writes when they are one borrowed slice written as is (f32 or another dtype as
    /// stored, not widened, decoded or transposed): what a writer may copy from the file they are mapped from.
    #[must_use]
    pub fn as_stored_bytes(&self) -> Option<&[u8]> {
        match self {
            ConstantData::Raw { bytes: Lent::Slice(b), .. } => Some(b),
            ConstantData::F32(Lent::Slice(v)) if cfg!(target_endian = "little") => Some(bytemuck::cast_slice(v)),
            // Lent in chunks, or converted on the way out.
            ConstantData::Raw { .. }
            | ConstantData::F32(_)
            | ConstantData::Widen { .. }
            | ConstantData::Dequantize { .. }
            | ConstantData::Transposed { .. }
            | ConstantData::Words { .. }
            | ConstantData::Plane { .. } => None,
        }
    }

    /// The memory this constant reads and how it converts it: equal for two constants that write the same
    /// values (a weight shared by the functions of one module).
    #[must_use]
    pub fn identity(&self) -> String {
        match self {
            ConstantData::F32(l) => format!("f32 {}", l.identity()),
            ConstantData::Widen { from, bytes, .. } => format!("widen {from} {}", bytes.identity()),
            ConstantData::Dequantize { encoding, bytes, .. } => format!("dequantize {encoding} {}", bytes.identity()),
            ConstantData::Transposed { of, rows, cols, tile } => {
                format!("transposed {rows}x{cols}/{tile} {}", of.identity())
            }
            ConstantData::Plane { encoding, bytes, plane, band, .. } => match band {
                Some(t) => format!("plane {encoding} {} bands {t} {}", plane.suffix(), bytes.identity()),
                None => format!("plane {encoding} {} {}", plane.suffix(), bytes.identity()),
            },
            ConstantData::Raw { dtype, bytes } => format!("raw {dtype} {}", bytes.identity()),
            ConstantData::Words { of } => format!("words {}", of.identity()),
        }
    }

    /// The row-major `[rows, cols]` values as the tiled transposer reads them, when it can read them.
    fn held(&self) -> Option<Held<'_, '_>> {
        match self {
            ConstantData::F32(values) => Some(Held::F32(values)),
            ConstantData::Raw { dtype, bytes } if !dtype.is_sub_byte() => {
                Some(Held::Stored { width: dtype.byte_width(), bytes })
            }
            ConstantData::Widen { from, bytes, layout: HalfLayout::RowMajor, .. } => {
                Some(Held::Widen { from: *from, bytes })
            }
            ConstantData::Dequantize { encoding, bytes, .. } => Some(Held::Dequantize { encoding, bytes }),
            // Sub-byte codes, column-major halves, planes and transposed values are not tiled again.
            ConstantData::Raw { .. }
            | ConstantData::Widen { layout: HalfLayout::ColumnMajor, .. }
            | ConstantData::Transposed { .. }
            | ConstantData::Words { .. }
            | ConstantData::Plane { .. } => None,
        }
    }

    /// True when these values, taken as row-major `[rows, cols]`, can be streamed transposed
    /// ([`ConstantData::Transposed`]): addressable or chunk-lent f32, stored bytes, row-major 16-bit (kept or
    /// widened), or packed blocks whose rows are whole blocks.
    pub(crate) fn transposable(&self, rows: u64, cols: u64) -> bool {
        self.held().is_some_and(|h| transpose::transposable(&h, rows, cols))
    }

    /// The source rows per band of a constant written in row bands ([`ConstantData::Transposed`] with `tile` less
    /// than `rows`, or a [`ConstantData::Plane`] with a `band`): its stored shape, which its tensor has too, is
    /// then `[rows / tile, cols, tile]` (a plane's codes: `[rows / tile, Kb, B, tile]`), read by `banded` matmuls and
    /// by every other use through a view the pass wrote. `None` for every other constant.
    #[must_use]
    pub fn row_tile(&self) -> Option<u64> {
        match self {
            ConstantData::Transposed { rows, tile, .. } if tile < rows => Some(*tile),
            ConstantData::Plane { band, .. } => *band,
            _ => None,
        }
    }

    /// The dtype of the bytes this constant produces (`f32` unless [`ConstantData::Raw`] or
    /// [`ConstantData::Transposed`]).
    #[must_use]
    pub fn dtype(&self) -> DType {
        match self {
            ConstantData::Raw { dtype, .. } => *dtype,
            ConstantData::Transposed { of, .. } => of.dtype(),
            ConstantData::Plane { encoding, plane, .. } => plane_split(encoding).dtype(*plane),
            ConstantData::Words { .. } => DType::I32,
            ConstantData::F32(_) | ConstantData::Widen { .. } | ConstantData::Dequantize { .. } => DType::F32,
        }
    }

    /// Number of values.
    #[must_use]
    pub fn element_count(&self) -> u64 {
        match self {
            ConstantData::F32(v) => v.len(),
            ConstantData::Widen { bytes, .. } => bytes.len() / 2,
            ConstantData::Dequantize { elements, .. } => *elements,
            ConstantData::Raw { dtype, bytes } => bytes.len() / dtype.byte_width(),
            ConstantData::Transposed { of, .. } => of.element_count(),
            ConstantData::Words { of } => of.byte_len().div_ceil(4),
            ConstantData::Plane { encoding, dims: [_, cols], padded_rows, plane, .. } => {
                let s = plane_split(encoding);
                padded_rows * (cols / s.block_values) * s.values_per_block(*plane)
            }
        }
    }

    /// Number of bytes produced.
    #[must_use]
    pub fn byte_len(&self) -> u64 {
        match self {
            ConstantData::Raw { bytes, .. } => bytes.len(),
            ConstantData::Transposed { of, .. } => of.byte_len(),
            ConstantData::Words { of } => of.byte_len().div_ceil(4) * 4,
            ConstantData::Plane { .. } => {
                let (dtype, n) = (self.dtype(), self.element_count());
                // Sub-byte codes share bytes; the other planes (i8 codes, f16 scales) are as wide as their type.
                match dtype.sub_byte_bits() {
                    Some(bits) => n.div_ceil(u64::from(8 / bits)),
                    None => n * dtype.byte_width(),
                }
            }
            ConstantData::F32(_) | ConstantData::Widen { .. } | ConstantData::Dequantize { .. } => {
                self.element_count() * 4
            }
        }
    }

    /// Writes every byte to `out`, holding at most one chunk ([`CHUNK_VALUES`] f32) of extra memory.
    ///
    /// # Errors
    /// The lender's failure ([`StreamError::Lend`]), a block the decoder rejects ([`StreamError::Decode`]),
    /// or the sink's own error, passed through.
    pub fn stream(&self, out: &mut dyn ByteSink) -> Result<(), StreamError> {
        match self {
            ConstantData::F32(values) => match values.as_slice() {
                Some(slice) => put_f32(out, slice),
                None => lend(out, values, PASSTHROUGH_VALUES, |o: &mut dyn ByteSink, chunk: &[_]| put_f32(o, chunk)),
            },
            ConstantData::Raw { bytes, .. } => {
                lend(out, bytes, MAX_LEND_BYTES, |o: &mut dyn ByteSink, chunk: &[_]| o.put(chunk))
            }
            ConstantData::Words { of } => {
                of.stream(out)?;
                // At most three zero bytes complete the last word.
                let pad = usize::try_from(of.byte_len() % 4).map_or(0, |r| (4 - r) % 4);
                out.put(&[0u8; 3][..pad])
            }
            ConstantData::Transposed { of, rows, cols, tile } => match of.held() {
                Some(held) => transpose::stream_tiled(&held, *rows, *cols, *tile, out),
                None => Err(transpose::cannot_transpose(*rows, *cols)),
            },
            ConstantData::Plane { encoding, bytes, dims, padded_rows, plane, band: None } => {
                transpose::stream_plane(encoding, bytes, *dims, *padded_rows, *plane, out)
            }
            ConstantData::Plane { encoding, bytes, dims, padded_rows, plane, band: Some(tile) } => {
                transpose::stream_plane_bands(encoding, bytes, *dims, *padded_rows, *plane, *tile, out)
            }
            ConstantData::Widen { from, bytes, layout: HalfLayout::RowMajor, .. } => {
                let mut buf = buffer(bytes.len() / 2);
                lend(out, bytes, CHUNK_VALUES * 2, |o: &mut dyn ByteSink, chunk: &[_]| {
                    let n = chunk.len() / 2;
                    widen_into(*from, chunk, &mut buf[..n]);
                    put_f32(o, &buf[..n])
                })
            }
            ConstantData::Widen { from, bytes, layout: HalfLayout::ColumnMajor, dims: [rows, cols] } => {
                // Decoding in row-major order reads with a stride, which a chunked lender cannot
                // serve one chunk at a time; extraction only builds this from addressable memory.
                let src = bytes.as_slice().ok_or_else(|| {
                    StreamError::Lend("column-major half-precision data must be addressable memory".into())
                })?;
                // The slice above is addressable, so both extents fit this host's usize.
                let host = |n: u64| usize::try_from(n).map_err(|e| StreamError::Lend(e.into()));
                let (rows, cols) = (host(*rows)?, host(*cols)?);
                let mut buf = buffer(bytes.len() / 2);
                let rows_per_chunk = (buf.len() / cols.max(1)).max(1);
                let mut r0 = 0;
                while r0 < rows {
                    let r1 = (r0 + rows_per_chunk).min(rows);
                    let mut n = 0;
                    for r in r0..r1 {
                        for c in 0..cols {
                            let at = 2 * (c * rows + r);
                            widen_into(*from, &src[at..at + 2], &mut buf[n..=n]);
                            n += 1;
                        }
                    }
                    put_f32(out, &buf[..n])?;
                    r0 = r1;
                }
                Ok(())
            }
            ConstantData::Dequantize { encoding, bytes, elements } => {
                let Some((block_elems, block_bytes)) = encoding.block_geometry() else {
                    return Err(StreamError::Decode(format!("encoding {encoding} cannot be decoded")));
                };
                let blocks_per_chunk = (CHUNK_VALUES / block_elems).max(1);
                let mut buf = buffer((*elements).max(block_elems));
                lend(out, bytes, blocks_per_chunk * block_bytes, |o: &mut dyn ByteSink, chunk: &[_]| {
                    // A chunk decodes to at most the buffer's values (a usize), as it was lent to fill it.
                    let n = usize::try_from(chunk.len() as u64 / block_bytes * block_elems)
                        .map_err(|e| StreamError::Lend(e.into()))?;
                    packed::dequantize(encoding, chunk, &mut buf[..n])
                        .map_err(|e| StreamError::Decode(e.to_string()))?;
                    put_f32(o, &buf[..n])
                })
            }
        }
    }
}

/// The split of a plane's encoding: [`ConstantData::Plane`] is only made (by the `keep_packed` rewrite) for an
/// encoding that splits.
#[allow(clippy::expect_used, reason = "an internal invariant: keep_packed makes planes only of encodings that split")]
fn plane_split(encoding: &Encoding) -> crate::planar::Split {
    crate::planar::Split::of(encoding).expect("a plane is only made for an encoding that splits into planes")
}
