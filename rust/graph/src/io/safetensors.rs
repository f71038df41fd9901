//! A validating, memory-mapped safetensors reader: tensors are borrowed from the mapping.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::dtype::DType;
use crate::io::IoError;

/// The largest JSON header accepted (the safetensors crate uses the same cap).
pub const MAX_HEADER_BYTES: u64 = 100 << 20;

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
pub struct SafeTensors {
    path: PathBuf,
    map: Option<Mmap>,
    tensors: HashMap<String, SafeTensor>,
    order: Vec<String>,
}

fn dtype_of(s: &str) -> Option<DType> {
    Some(match s {
        "F32" => DType::F32,
        "F64" => DType::F64,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "I8" => DType::I8,
        "I16" => DType::I16,
        "I32" => DType::I32,
        "I64" => DType::I64,
        "U8" => DType::U8,
        "U16" => DType::U16,
        "U32" => DType::U32,
        "U64" => DType::U64,
        "BOOL" => DType::Bool,
        _ => return None,
    })
}

impl SafeTensors {
    /// Opens and validates `path`: header size capped, every offset checked against the file,
    /// every byte length equal to shape × dtype width.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, IoError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|source| IoError::Io { path: path.clone(), source })?;
        let size = file.metadata().map_err(|source| IoError::Io { path: path.clone(), source })?.len();
        let map = if size == 0 {
            None
        } else {
            // SAFETY: read-only mapping; the file must not be truncated while open (documented on `SafeTensors`).
            Some(unsafe { Mmap::map(&file) }.map_err(|source| IoError::Io { path: path.clone(), source })?)
        };
        let (tensors, order) = parse(map.as_deref().unwrap_or(&[])).map_err(|detail| IoError::Format {
            path: path.clone(),
            format: "safetensors",
            detail,
        })?;
        Ok(Self { path, map, tensors, order })
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tensor names in file order.
    #[must_use]
    pub fn names(&self) -> &[String] {
        &self.order
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

    /// The bytes of `tensor`, borrowed from the mapping.
    #[must_use]
    pub fn bytes(&self, tensor: &SafeTensor) -> &[u8] {
        let (Ok(s), Ok(e)) = (usize::try_from(tensor.start), usize::try_from(tensor.end)) else { return &[] };
        self.map.as_deref().and_then(|m| m.get(s..e)).unwrap_or(&[])
    }
}

/// Tensors by name, and names in file order.
type Parsed = (HashMap<String, SafeTensor>, Vec<String>);

/// Parses and validates a safetensors file held in `bytes`. Pure, so it can be fuzzed.
pub fn parse(bytes: &[u8]) -> Result<Parsed, String> {
    let size = bytes.len() as u64;
    if size < 8 {
        return Err(format!("file is {size} bytes; a safetensors file starts with an 8-byte header length"));
    }
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8]));
    if header_len > MAX_HEADER_BYTES {
        return Err(format!("header claims {header_len} bytes, more than the {MAX_HEADER_BYTES}-byte limit"));
    }
    let data_start = 8 + header_len;
    if data_start > size {
        return Err(format!("header claims {header_len} bytes but the file has {}", size - 8));
    }
    let header = &bytes[8..usize::try_from(data_start).map_err(|_| "header too large".to_string())?];
    let json: serde_json::Value =
        serde_json::from_slice(header).map_err(|e| format!("header is not valid JSON: {e}"))?;
    let obj = json.as_object().ok_or_else(|| "header is not a JSON object".to_string())?;
    let data_len = size - data_start;
    let mut tensors = HashMap::with_capacity(obj.len());
    let mut order = Vec::with_capacity(obj.len());
    for (name, info) in obj {
        if name == "__metadata__" {
            continue;
        }
        let field = |k: &str| info.get(k).ok_or_else(|| format!("tensor {name:?} has no {k:?}"));
        let dtype_name = field("dtype")?.as_str().unwrap_or_default();
        let dtype = dtype_of(dtype_name).ok_or_else(|| format!("tensor {name:?}: unsupported dtype {dtype_name:?}"))?;
        let shape: Vec<u64> = field("shape")?
            .as_array()
            .and_then(|a| a.iter().map(serde_json::Value::as_u64).collect())
            .ok_or_else(|| format!("tensor {name:?}: shape is not a list of sizes"))?;
        let offsets: Vec<u64> = field("data_offsets")?
            .as_array()
            .and_then(|a| a.iter().map(serde_json::Value::as_u64).collect())
            .filter(|v: &Vec<u64>| v.len() == 2)
            .ok_or_else(|| format!("tensor {name:?}: data_offsets is not [begin, end]"))?;
        let (begin, end) = (offsets[0], offsets[1]);
        if begin > end || end > data_len {
            return Err(format!("tensor {name:?}: data_offsets [{begin}, {end}] outside the {data_len}-byte data"));
        }
        let want = shape
            .iter()
            .try_fold(dtype.byte_width(), |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| format!("tensor {name:?}: shape {shape:?} overflows 64 bits"))?;
        if want != end - begin {
            return Err(format!(
                "tensor {name:?}: {} bytes for shape {shape:?} of {dtype} ({want} expected)",
                end - begin
            ));
        }
        order.push(name.clone());
        tensors.insert(name.clone(), SafeTensor { dtype, shape, start: data_start + begin, end: data_start + end });
    }
    order.sort_by_key(|n| tensors.get(n).map_or(0, |t| t.start));
    Ok((tensors, order))
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
        let st = SafeTensors::open(&p).unwrap();
        assert_eq!(st.names(), ["a", "b"]);
        let a = st.get("a").unwrap();
        assert_eq!((a.dtype, a.shape.as_slice()), (DType::F32, &[3u64][..]));
        assert_eq!(st.bytes(a), &data[..12]);
        assert_eq!(st.bytes(st.get("b").unwrap()), &[7, 8]);
    }

    #[test]
    fn hostile_headers_are_typed_errors() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![1, 2, 3], "8-byte header length"),
            ((1u64 << 40).to_le_bytes().to_vec(), "limit"),
            (file("{", &[]), "not valid JSON"),
            (file(r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}"#, &[0; 4]), "outside"),
            (file(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}}"#, &[0; 12]), "12 bytes for shape"),
            (file(r#"{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}}"#, &[0; 2]), "unsupported dtype"),
            (file(r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}"#, &[]), "overflows"),
        ];
        for (bytes, needle) in cases {
            let (_d, p) = write(&bytes);
            let e = SafeTensors::open(&p).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(needle), "{needle:?} not in {e:?}");
        }
    }
}
