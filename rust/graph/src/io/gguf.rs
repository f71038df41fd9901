//! A validating, memory-mapped GGUF (v2, v3) reader: tensors are borrowed from the mapping.
//!
//! Every count, string length, array length, dimension and offset read from the file is checked
//! against the bytes actually present before it is used, and nothing is allocated in proportion
//! to a size the file merely declares.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use std::sync::Arc;

use crate::dtype::DType;
use crate::io::IoError;
use crate::packed::Encoding;

/// GGUF's magic: "GGUF".
const MAGIC: [u8; 4] = *b"GGUF";
/// ggml's limit on tensor rank.
const MAX_DIMS: u32 = 4;
/// Arrays nested inside arrays deeper than this are refused (GGUF never needs more than one level).
const MAX_ARRAY_DEPTH: u32 = 2;

/// Why a GGUF file is refused: what is wrong, where.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// A field or blob runs past the end of the file.
    #[error("{what} at offset {offset} needs {needed} bytes, but the file ends at {file_len}")]
    Truncated {
        /// The field.
        what: String,
        /// Where it starts.
        offset: u64,
        /// Bytes it needs.
        needed: u64,
        /// The file's length.
        file_len: u64,
    },
    /// The file does not start with "GGUF".
    #[error("magic is {found:02x?}, not \"GGUF\"")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A GGUF version other than 2 or 3.
    #[error("version {found} is not supported (2 and 3 are)")]
    UnsupportedVersion {
        /// The version in the file.
        found: u32,
    },
    /// A count larger than the rest of the file could hold.
    #[error("{what} {count} is more than the file can hold")]
    CountTooLarge {
        /// `tensor count`, `metadata count`, or an array.
        what: String,
        /// The count in the file.
        count: u64,
    },
    /// Arrays nested deeper than GGUF ever needs.
    #[error("{what}: arrays nested deeper than {MAX_ARRAY_DEPTH} levels")]
    NestedTooDeep {
        /// The metadata value.
        what: String,
    },
    /// A metadata value of an unknown type.
    #[error("{what}: unknown value type {found}")]
    UnknownValueType {
        /// The metadata value.
        what: String,
        /// Its type id.
        found: u32,
    },
    /// `general.alignment` is not a power of two.
    #[error("general.alignment is {value}; it must be a power of two")]
    BadAlignment {
        /// The value, as read.
        value: String,
    },
    /// A tensor of more dimensions than ggml allows.
    #[error("tensor {tensor:?}: {dims} dimensions; ggml allows at most {MAX_DIMS}")]
    TooManyDims {
        /// The tensor.
        tensor: String,
        /// Its dimension count.
        dims: u32,
    },
    /// Two tensors of one name.
    #[error("tensor {tensor:?} appears twice")]
    DuplicateTensor {
        /// The name.
        tensor: String,
    },
    /// A GGML type tapeout does not read.
    #[error("tensor {tensor:?}: GGML type {found} is not supported ({} are)", supported_type_names())]
    UnsupportedType {
        /// The tensor.
        tensor: String,
        /// Its GGML type id.
        found: u32,
    },
    /// The element count or byte size overflows 64 bits.
    #[error("tensor {tensor:?}: shape {dims:?} overflows 64 bits")]
    ShapeOverflow {
        /// The tensor.
        tensor: String,
        /// Its dims as stored (innermost first).
        dims: Vec<u64>,
    },
    /// Rows that are not whole blocks.
    #[error("tensor {tensor:?}: its rows of {row} values are not whole {block}-value blocks")]
    PartialBlocks {
        /// The tensor.
        tensor: String,
        /// Values per row.
        row: u64,
        /// Values per block.
        block: u64,
    },
    /// An offset off the file's alignment.
    #[error("tensor {tensor:?}: offset {offset} is not a multiple of the {alignment}-byte alignment")]
    Misaligned {
        /// The tensor.
        tensor: String,
        /// Its offset in the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// Tensor data past the end of the file.
    #[error("tensor {tensor:?}: its {size} bytes at offset {offset} run past the end of the {file_len}-byte file")]
    OutOfFile {
        /// The tensor.
        tensor: String,
        /// Its byte size.
        size: u64,
        /// Its offset in the data section.
        offset: u64,
        /// The file's length.
        file_len: u64,
    },
}

/// How a GGUF tensor's bytes are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GgufStorage {
    /// Dense elements of a dtype.
    Dense(DType),
    /// Packed GGML blocks; the logical dtype is f32.
    Packed(Encoding),
}

/// One tensor of a GGUF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensor {
    /// Its name.
    pub name: String,
    /// Row-major shape (GGUF stores dims innermost first; this is reversed).
    pub shape: Vec<u64>,
    /// The GGML type id.
    pub ggml_type: u32,
    /// How the bytes are stored.
    pub storage: GgufStorage,
    /// Absolute byte range in the file.
    pub start: u64,
    /// End of the range (exclusive).
    pub end: u64,
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// Any unsigned integer type.
    U64(u64),
    /// Any signed integer type.
    I64(i64),
    /// f32 or f64.
    F64(f64),
    /// A boolean.
    Bool(bool),
    /// A string (lossily decoded).
    Str(String),
    /// An array (element count only; contents are skipped).
    Array {
        /// Element type id.
        elem_type: u32,
        /// Number of elements.
        len: u64,
    },
}

/// An open GGUF file.
pub struct GgufFile {
    path: PathBuf,
    file: Arc<File>,
    map: Mmap,
    version: u32,
    alignment: u64,
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<GgufTensor>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], GgufError> {
        let truncated = || GgufError::Truncated {
            what: what.to_owned(),
            offset: self.pos as u64,
            needed: n,
            file_len: self.bytes.len() as u64,
        };
        let end = usize::try_from(n).ok().and_then(|n| self.pos.checked_add(n)).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else { return Err(truncated()) };
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        let b = self.take(len, what)?;
        Ok(String::from_utf8_lossy(b).into_owned())
    }
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    /// Reads a value of `ty`; arrays are skipped (their size checked) at `depth`.
    fn value(&mut self, ty: u32, depth: u32, what: &str) -> Result<GgufValue, GgufError> {
        macro_rules! le {
            ($t:ty) => {{
                let mut a = [0u8; size_of::<$t>()];
                a.copy_from_slice(self.take(size_of::<$t>() as u64, what)?);
                <$t>::from_le_bytes(a)
            }};
        }
        Ok(match ty {
            0 => GgufValue::U64(u64::from(le!(u8))),
            2 => GgufValue::U64(u64::from(le!(u16))),
            4 => GgufValue::U64(u64::from(le!(u32))),
            10 => GgufValue::U64(le!(u64)),
            1 => GgufValue::I64(i64::from(le!(i8))),
            3 => GgufValue::I64(i64::from(le!(i16))),
            5 => GgufValue::I64(i64::from(le!(i32))),
            11 => GgufValue::I64(le!(i64)),
            6 => GgufValue::F64(f64::from(le!(f32))),
            12 => GgufValue::F64(le!(f64)),
            7 => GgufValue::Bool(le!(u8) != 0),
            8 => GgufValue::Str(self.string(what)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::NestedTooDeep { what: what.to_owned() });
                }
                let elem_type = self.u32(what)?;
                let len = self.u64(what)?;
                let width = match elem_type {
                    0 | 1 | 7 => Some(1),
                    2 | 3 => Some(2),
                    4..=6 => Some(4),
                    10..=12 => Some(8),
                    _ => None,
                };
                match width {
                    Some(w) => {
                        let too_many = || GgufError::CountTooLarge { what: format!("{what}: array"), count: len };
                        let total = len.checked_mul(w).ok_or_else(too_many)?;
                        self.take(total, what)?;
                    }
                    None => {
                        // Strings or nested arrays: each takes at least 8 bytes, so the count is bounded.
                        if len > self.remaining() / 8 {
                            return Err(GgufError::CountTooLarge { what: format!("{what}: array"), count: len });
                        }
                        for _ in 0..len {
                            self.value(elem_type, depth + 1, what)?;
                        }
                    }
                }
                GgufValue::Array { elem_type, len }
            }
            other => return Err(GgufError::UnknownValueType { what: what.to_owned(), found: other }),
        })
    }
}

/// The dense GGML type ids tapeout reads, with their dtype; the packed ones are [`Encoding::ggml_type`] of
/// [`Encoding::DECODABLE`].
const DENSE_GGML_TYPES: [(u32, DType); 8] = [
    (0, DType::F32),
    (1, DType::F16),
    (24, DType::I8),
    (25, DType::I16),
    (26, DType::I32),
    (27, DType::I64),
    (28, DType::F64),
    (30, DType::BF16),
];

/// `(storage, elements per block, bytes per block)` of a GGML type id.
fn ggml_type(id: u32) -> Option<(GgufStorage, u64, u64)> {
    if let Some(&(_, d)) = DENSE_GGML_TYPES.iter().find(|(i, _)| *i == id) {
        return Some((GgufStorage::Dense(d), 1, d.byte_width()));
    }
    let e = Encoding::DECODABLE.into_iter().find(|e| e.ggml_type() == Some(id))?;
    let (elems, bytes) = e.block_geometry()?;
    Some((GgufStorage::Packed(e), elems, bytes))
}

/// The GGML type names tapeout reads, from the two tables, for messages.
fn supported_type_names() -> String {
    let dense = DENSE_GGML_TYPES.iter().map(|(_, d)| d.name().to_ascii_uppercase());
    dense.chain(Encoding::DECODABLE.iter().map(|e| e.name().to_owned())).collect::<Vec<_>>().join(", ")
}

impl GgufFile {
    /// Opens and validates `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, IoError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| IoError::Io { path: path.clone(), source };
        let file = File::open(&path).map_err(io)?;
        // SAFETY: read-only mapping; the file must not be truncated while it is open.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let parsed = parse(&map).map_err(|source| IoError::Gguf { path: path.clone(), source })?;
        let ParsedGguf { version, alignment, metadata, tensors } = parsed;
        Ok(Self { path, file: Arc::new(file), map, version, alignment, metadata, tensors })
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file and its whole mapping.
    pub(crate) fn mapping(&self) -> (&Arc<File>, &[u8]) {
        (&self.file, &self.map)
    }

    /// The GGUF version (2 or 3).
    #[must_use]
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment (`general.alignment`, default 32).
    #[must_use]
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Metadata key/value pairs in file order.
    #[must_use]
    pub fn metadata(&self) -> &[(String, GgufValue)] {
        &self.metadata
    }

    /// Tensors in file order.
    #[must_use]
    pub fn tensors(&self) -> &[GgufTensor] {
        &self.tensors
    }

    /// The tensor called `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&GgufTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The bytes of `tensor`, borrowed from the mapping. Every tensor this file lists lies inside it (checked at
    /// open); a tensor that does not (one built by hand, or another file's) gets an empty slice.
    #[must_use]
    pub fn bytes(&self, tensor: &GgufTensor) -> &[u8] {
        let (Ok(s), Ok(e)) = (usize::try_from(tensor.start), usize::try_from(tensor.end)) else { return &[] };
        self.map.get(s..e).unwrap_or(&[])
    }
}

/// What [`parse`] reads from a GGUF file: everything but the tensor data, which it only locates.
#[derive(Debug, Clone)]
pub struct ParsedGguf {
    /// The format version (2 or 3).
    pub version: u32,
    /// The data alignment (`general.alignment`, 32 when absent).
    pub alignment: u64,
    /// The metadata key/value pairs, in file order.
    pub metadata: Vec<(String, GgufValue)>,
    /// The tensor infos, in file order, each located inside the input.
    pub tensors: Vec<GgufTensor>,
}

/// Parses the header, metadata and tensor infos of a GGUF file held in `bytes`. Pure, so it can be
/// fuzzed.
///
/// # Errors
/// [`GgufError`] naming the field or tensor.
pub fn parse(bytes: &[u8]) -> Result<ParsedGguf, GgufError> {
    let mut r = Reader { bytes, pos: 0 };
    let mut magic = [0u8; 4];
    magic.copy_from_slice(r.take(4, "magic")?);
    if magic != MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = r.u32("version")?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion { found: version });
    }
    let tensor_count = r.u64("tensor count")?;
    let kv_count = r.u64("metadata count")?;
    // A metadata pair takes at least 12 bytes and a tensor info at least 24: bound the counts by the file.
    if kv_count > r.remaining() / 12 {
        return Err(GgufError::CountTooLarge { what: "metadata count".into(), count: kv_count });
    }
    let mut metadata = Vec::new();
    let mut alignment = 32u64;
    for i in 0..kv_count {
        let key = r.string(&format!("metadata key {i}"))?;
        let ty = r.u32(&format!("metadata {key:?} type"))?;
        let value = r.value(ty, 0, &format!("metadata {key:?}"))?;
        if key == "general.alignment" {
            alignment = match value {
                GgufValue::U64(a) if a > 0 && a.is_power_of_two() => a,
                _ => return Err(GgufError::BadAlignment { value: format!("{value:?}") }),
            };
        }
        metadata.push((key, value));
    }
    if tensor_count > r.remaining() / 24 {
        return Err(GgufError::CountTooLarge { what: "tensor count".into(), count: tensor_count });
    }
    let mut infos = Vec::new();
    for i in 0..tensor_count {
        let name = r.string(&format!("tensor {i} name"))?;
        let what = format!("tensor {name:?}");
        let n_dims = r.u32(&what)?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::TooManyDims { tensor: name, dims: n_dims });
        }
        let mut dims = Vec::with_capacity(4);
        for _ in 0..n_dims {
            dims.push(r.u64(&what)?);
        }
        let ty = r.u32(&what)?;
        let offset = r.u64(&what)?;
        infos.push((name, dims, ty, offset));
    }
    let data_start = (r.pos as u64).div_ceil(alignment) * alignment;
    let file_len = bytes.len() as u64;
    let mut tensors = Vec::with_capacity(infos.len());
    let mut seen = std::collections::HashSet::new();
    for (name, dims, ty, offset) in infos {
        if !seen.insert(name.clone()) {
            return Err(GgufError::DuplicateTensor { tensor: name });
        }
        let Some((storage, per_block, block_bytes)) = ggml_type(ty) else {
            return Err(GgufError::UnsupportedType { tensor: name, found: ty });
        };
        let count = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let size = count.and_then(|c| (c / per_block).checked_mul(block_bytes));
        let Some(size) = size else { return Err(GgufError::ShapeOverflow { tensor: name, dims }) };
        if let Some(&row) = dims.first().filter(|&&inner| inner % per_block != 0) {
            return Err(GgufError::PartialBlocks { tensor: name, row, block: per_block });
        }
        if offset % alignment != 0 {
            return Err(GgufError::Misaligned { tensor: name, offset, alignment });
        }
        let end = data_start.checked_add(offset).and_then(|s| s.checked_add(size)).filter(|&e| e <= file_len);
        let Some(end) = end else { return Err(GgufError::OutOfFile { tensor: name, size, offset, file_len }) };
        let start = end - size;
        let shape = dims.into_iter().rev().collect();
        tensors.push(GgufTensor { name, shape, ggml_type: ty, storage, start, end });
    }
    Ok(ParsedGguf { version, alignment, metadata, tensors })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Vec<u8> {
        let mut v = (text.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(text.as_bytes());
        v
    }

    /// A GGUF v3 file: one u32 metadata pair, tensors given as (name, dims, type, offset), data.
    fn file(tensors: &[(&str, &[u64], u32, u64)], data: &[u8]) -> Vec<u8> {
        let mut v = b"GGUF".to_vec();
        v.extend(3u32.to_le_bytes());
        v.extend((tensors.len() as u64).to_le_bytes());
        v.extend(1u64.to_le_bytes());
        v.extend(s("general.alignment"));
        v.extend(4u32.to_le_bytes());
        v.extend(32u32.to_le_bytes());
        for (name, dims, ty, off) in tensors {
            v.extend(s(name));
            v.extend(u32::try_from(dims.len()).unwrap().to_le_bytes());
            for d in *dims {
                v.extend(d.to_le_bytes());
            }
            v.extend(ty.to_le_bytes());
            v.extend(off.to_le_bytes());
        }
        v.resize(v.len().div_ceil(32) * 32, 0);
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn reads_dense_and_packed_tensors_with_reversed_dims() {
        let data = vec![0u8; 64 + 34 * 2];
        let bytes = file(&[("w", &[4, 2], 0, 0), ("q", &[32, 2], 8, 64)], &data);
        let ParsedGguf { alignment: align, metadata: md, tensors: t, .. } = parse(&bytes).unwrap();
        assert_eq!(align, 32);
        assert_eq!(md[0], ("general.alignment".into(), GgufValue::U64(32)));
        assert_eq!(t[0].shape, [2, 4]);
        assert_eq!(t[0].storage, GgufStorage::Dense(DType::F32));
        assert_eq!(t[0].end - t[0].start, 32);
        assert_eq!(t[1].storage, GgufStorage::Packed(Encoding::Q8_0));
        assert_eq!(t[1].end - t[1].start, 68);
    }

    #[test]
    fn hostile_files_are_typed_errors_without_large_allocations() {
        let ok = file(&[("w", &[4], 0, 0)], &[0; 16]);
        let mut absurd_tensors = ok.clone();
        absurd_tensors[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        let mut absurd_kv = ok.clone();
        absurd_kv[16..24].copy_from_slice(&(1u64 << 60).to_le_bytes());
        type Check = fn(&GgufError) -> bool;
        let cases: Vec<(Vec<u8>, Check)> = vec![
            (b"GGUX".to_vec(), |e| matches!(e, GgufError::BadMagic { .. })),
            (ok[..10].to_vec(), |e| matches!(e, GgufError::Truncated { .. })),
            (absurd_tensors, |e| matches!(e, GgufError::CountTooLarge { count: u64::MAX, .. })),
            (absurd_kv, |e| matches!(e, GgufError::CountTooLarge { count: 0x1000_0000_0000_0000, .. })),
            (file(&[("w", &[1 << 40, 1 << 40], 0, 0)], &[]), |e| matches!(e, GgufError::ShapeOverflow { .. })),
            (file(&[("w", &[4, 1, 1, 1, 1], 0, 0)], &[]), |e| matches!(e, GgufError::TooManyDims { dims: 5, .. })),
            (file(&[("w", &[4], 0, 0)], &[0; 8]), |e| matches!(e, GgufError::OutOfFile { size: 16, .. })),
            (file(&[("w", &[4], 0, 3)], &[0; 64]), |e| matches!(e, GgufError::Misaligned { offset: 3, .. })),
            (file(&[("w", &[30], 8, 0)], &[0; 64]), |e| {
                matches!(e, GgufError::PartialBlocks { row: 30, block: 32, .. })
            }),
            (file(&[("w", &[4], 99, 0)], &[0; 64]), |e| matches!(e, GgufError::UnsupportedType { found: 99, .. })),
            (
                file(&[("w", &[4], 0, 0), ("w", &[4], 0, 0)], &[0; 64]),
                |e| matches!(e, GgufError::DuplicateTensor { tensor } if tensor == "w"),
            ),
        ];
        for (i, (bytes, check)) in cases.into_iter().enumerate() {
            let e = parse(&bytes).err();
            assert!(e.as_ref().is_some_and(check), "case {i}: {e:?}");
        }
    }

    #[test]
    fn an_unsupported_type_lists_the_two_tables() {
        let e = GgufError::UnsupportedType { tensor: "w".into(), found: 99 }.to_string();
        assert!(
            e.contains("F32, F16, I8, I16, I32, I64, F64, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"),
            "{e}"
        );
    }

    #[test]
    fn string_lengths_near_u64_max_do_not_allocate() {
        let mut v = b"GGUF".to_vec();
        v.extend(3u32.to_le_bytes());
        v.extend(0u64.to_le_bytes());
        v.extend(1u64.to_le_bytes());
        v.extend(u64::MAX.to_le_bytes()); // key length
        v.extend([0u8; 64]); // enough bytes for the count check, far too few for the key
        let e = parse(&v).err();
        assert!(matches!(e, Some(GgufError::Truncated { needed: u64::MAX, .. })), "{e:?}");
    }
}
