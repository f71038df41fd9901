//! A validating, memory-mapped safetensors reader: tensors are borrowed from the mapping.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use std::sync::Arc;

use crate::dtype::DType;
use crate::io::IoError;

/// One tensor of a safetensors file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafeTensor {
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost first.
    pub shape: Vec<u64>,
    /// Absolute byte range in the file.
    pub start: u64,
    /// End of the byte range (exclusive).
    pub end: u64,
}

/// An open safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    file: Arc<File>,
    map: Option<Mmap>,
    tensors: HashMap<String, SafeTensor>,
    order: Vec<String>,
    metadata: Vec<(String, String)>,
}

impl SafetensorsFile {
    /// Opens and validates `path`: header size capped, every offset checked against the file,
    /// every byte length equal to shape × dtype width.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, IoError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|source| IoError::Io { path: path.clone(), source })?;
        let size = file.metadata().map_err(|source| IoError::Io { path: path.clone(), source })?.len();
        let map = if size == 0 {
            None
        } else {
            // SAFETY: read-only mapping; the file must not be truncated while open (documented on `SafetensorsFile`).
            Some(unsafe { Mmap::map(&file) }.map_err(|source| IoError::Io { path: path.clone(), source })?)
        };
        // An empty file has no mapping; parse refuses its zero bytes.
        let ParsedSafetensors { tensors, order, metadata } = parse(map.as_deref().unwrap_or(&[]))
            .map_err(|source| IoError::Safetensors { path: path.clone(), source })?;
        Ok(Self { path, file: Arc::new(file), map, tensors, order, metadata })
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file and its whole mapping (empty for an empty file).
    pub(crate) fn mapping(&self) -> (&Arc<File>, &[u8]) {
        (&self.file, self.map.as_deref().unwrap_or(&[]))
    }

    /// Tensor names in file order.
    #[must_use]
    pub fn names(&self) -> &[String] {
        &self.order
    }

    /// The header's `__metadata__` string pairs, sorted by key (empty when it has none).
    #[must_use]
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// The tensor called `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&SafeTensor> {
        self.tensors.get(name)
    }

    /// The tensor called `name`, with the file's own copy of the name.
    #[must_use]
    pub fn get_key_value(&self, name: &str) -> Option<(&str, &SafeTensor)> {
        self.tensors.get_key_value(name).map(|(k, v)| (k.as_str(), v))
    }

    /// The bytes of `tensor`, borrowed from the mapping. Every tensor this file lists lies inside it (checked at
    /// open); a tensor that does not (one built by hand, or another file's) gets an empty slice.
    #[must_use]
    pub fn bytes(&self, tensor: &SafeTensor) -> &[u8] {
        let (Ok(s), Ok(e)) = (usize::try_from(tensor.start), usize::try_from(tensor.end)) else { return &[] };
        self.map.as_deref().and_then(|m| m.get(s..e)).unwrap_or(&[])
    }
}

/// What [`parse`] reads from a safetensors file: the header, with every tensor located inside the input.
#[derive(Debug, Clone)]
pub struct ParsedSafetensors {
    /// Tensors by name.
    pub tensors: HashMap<String, SafeTensor>,
    /// Their names in file order.
    pub order: Vec<String>,
    /// The `__metadata__` string pairs, sorted by key.
    pub metadata: Vec<(String, String)>,
}

/// Why a safetensors file is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SafetensorsError {
    /// The header or its offsets are invalid, as the `safetensors` crate judges them (it refuses headers
    /// over 100 MB, offsets that overlap, leave holes or run past the data, and byte lengths that are not
    /// shape × dtype).
    #[error("{}{}", .0, layout_hint(.0))]
    Header(safetensors::SafeTensorError),
    /// A tensor has a dtype tapeout does not read.
    #[error("tensor {tensor:?}: unsupported dtype {dtype}")]
    UnsupportedDtype {
        /// The tensor.
        tensor: String,
        /// Its dtype as the file names it.
        dtype: String,
    },
}

/// What the format requires, for the errors whose own text does not say it.
fn layout_hint(e: &safetensors::SafeTensorError) -> &'static str {
    use safetensors::SafeTensorError as E;
    match e {
        E::TensorInvalidInfo | E::InvalidOffset(_) | E::MetadataIncompleteBuffer => {
            " (each tensor's data_offsets must span exactly shape x dtype bytes, the tensors one after another \
             without gaps or overlaps, the last ending at the end of the file)"
        }
        _ => "",
    }
}

fn dtype_of(d: safetensors::Dtype) -> Option<DType> {
    use safetensors::Dtype as S;
    Some(match d {
        S::F32 => DType::F32,
        S::F64 => DType::F64,
        S::F16 => DType::F16,
        S::BF16 => DType::BF16,
        S::I8 => DType::I8,
        S::I16 => DType::I16,
        S::I32 => DType::I32,
        S::I64 => DType::I64,
        S::U8 => DType::U8,
        S::U16 => DType::U16,
        S::U32 => DType::U32,
        S::U64 => DType::U64,
        S::BOOL => DType::Bool,
        _ => return None,
    })
}

/// Parses and validates a safetensors file held in `bytes` with the `safetensors` crate. Pure, so it can
/// be fuzzed.
///
/// # Errors
/// [`SafetensorsError`] naming the tensor where there is one.
pub fn parse(bytes: &[u8]) -> Result<ParsedSafetensors, SafetensorsError> {
    let (header_len, meta) = safetensors::SafeTensors::read_metadata(bytes).map_err(SafetensorsError::Header)?;
    let data_start = 8 + header_len as u64;
    let infos = meta.tensors();
    let mut tensors = HashMap::with_capacity(infos.len());
    let mut order = Vec::with_capacity(infos.len());
    for name in meta.offset_keys() {
        let Some(info) = infos.get(&name) else { continue };
        let dtype = dtype_of(info.dtype).ok_or_else(|| SafetensorsError::UnsupportedDtype {
            tensor: name.clone(),
            dtype: format!("{:?}", info.dtype),
        })?;
        let (begin, end) = (info.data_offsets.0 as u64, info.data_offsets.1 as u64);
        let shape = info.shape.iter().map(|&d| d as u64).collect();
        tensors.insert(name.clone(), SafeTensor { dtype, shape, start: data_start + begin, end: data_start + end });
        order.push(name);
    }
    let mut metadata: Vec<(String, String)> =
        meta.metadata().iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect();
    metadata.sort();
    Ok(ParsedSafetensors { tensors, order, metadata })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.safetensors");
        std::fs::write(&p, bytes).unwrap();
        (dir, p)
    }

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut v = (header.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn reads_and_borrows() {
        let data: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).chain([7u8, 8]).collect();
        let h = r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"U8","shape":[2],"data_offsets":[12,14]},"__metadata__":{"x":"y"}}"#;
        let (_d, p) = write(&file(h, &data));
        let st = SafetensorsFile::open(&p).unwrap();
        assert_eq!(st.names(), ["a", "b"]);
        assert_eq!(st.metadata(), [("x".to_owned(), "y".to_owned())]);
        let a = st.get("a").unwrap();
        assert_eq!((a.dtype, a.shape.as_slice()), (DType::F32, &[3u64][..]));
        assert_eq!(st.bytes(a), &data[..12]);
        assert_eq!(st.bytes(st.get("b").unwrap()), &[7, 8]);
    }

    #[test]
    fn hostile_headers_are_typed_errors() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![1, 2, 3], "header"),
            ((1u64 << 40).to_le_bytes().to_vec(), "header too large"),
            (file("{", &[]), "invalid JSON in header"),
            (file(r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}"#, &[0; 4]), "not fully covered"),
            (file(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}}"#, &[0; 12]), "invalid shape, data type"),
            (file(r#"{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}}"#, &[0; 2]), "invalid JSON in header"),
            (
                file(r#"{"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}"#, &[0; 2]),
                "unsupported dtype F8_E4M3",
            ),
            (file(r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}"#, &[]), "overflow"),
            // Two tensors over the same bytes: refused, as the IRPA reader refuses overlapping entries.
            (
                file(
                    r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#,
                    &[0; 4],
                ),
                "invalid offset",
            ),
        ];
        for (bytes, needle) in cases {
            let (_d, p) = write(&bytes);
            let e = SafetensorsFile::open(&p).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(needle), "{needle:?} not in {e:?}");
        }
    }
}
