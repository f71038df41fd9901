//! One view over weight files of either format (GGUF, safetensors): tensors borrowed from a mapping.

use std::path::Path;

use crate::dtype::DType;
use crate::io::IoError;
use crate::io::gguf::{GgufFile, GgufStorage};
use crate::io::safetensors::SafetensorsFile;
use crate::packed::{BlockOrder, Encoding};
use crate::tensor::{HalfLayout, Lent, Storage};

/// How a stored tensor's bytes encode its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// Dense little-endian elements.
    Dense(DType),
    /// Packed GGML blocks (logical dtype f32).
    Packed(Encoding),
}

/// A tensor of a weight file, borrowing its bytes from the mapping.
#[derive(Debug, Clone)]
pub struct StoredTensor<'a> {
    /// Its name in the file.
    pub name: &'a str,
    /// Row-major shape.
    pub shape: Vec<u64>,
    /// Stored form.
    pub stored: Stored,
    /// The bytes.
    pub bytes: &'a [u8],
    /// Where the bytes start in the file (so a writer can have the kernel copy them file to file).
    pub offset: u64,
}

impl<'a> StoredTensor<'a> {
    /// The logical dtype (f32 for packed blocks).
    #[must_use]
    pub fn dtype(&self) -> DType {
        match &self.stored {
            Stored::Dense(d) => *d,
            Stored::Packed(_) => DType::F32,
        }
    }

    /// Graph storage that borrows these bytes: f32 as a slice (raw bytes when not 4-byte aligned), f16/bf16 for
    /// lazy widening, packed blocks with their encoding, other dtypes as bytes.
    #[must_use]
    pub fn storage(&self, layout: HalfLayout) -> Storage<'a> {
        storage_of(&self.stored, self.bytes, layout)
    }
}

/// Graph storage borrowing `bytes` stored as `stored`: f32 as a slice (or raw bytes when the memory is not
/// 4-byte aligned), f16/bf16 for lazy widening, packed blocks with their encoding, other dtypes as bytes.
#[must_use]
pub fn storage_of<'a>(stored: &Stored, bytes: &'a [u8], layout: HalfLayout) -> Storage<'a> {
    match stored {
        Stored::Packed(e) => {
            Storage::Packed { encoding: e.clone(), order: BlockOrder::RowMajor, bytes: Lent::Slice(bytes) }
        }
        Stored::Dense(DType::F32) if cfg!(target_endian = "little") => match bytemuck::try_cast_slice(bytes) {
            Ok(values) => Storage::F32(Lent::Slice(values)),
            Err(_) => Storage::Dense(Lent::Slice(bytes)),
        },
        Stored::Dense(DType::F16 | DType::BF16) => Storage::Half { bytes: Lent::Slice(bytes), layout },
        Stored::Dense(_) => Storage::Dense(Lent::Slice(bytes)),
    }
}

/// An open weight file.
pub enum WeightFile {
    /// A safetensors file.
    SafeTensors(SafetensorsFile),
    /// A GGUF file.
    Gguf(GgufFile),
}

impl WeightFile {
    /// Opens `path` as GGUF when it ends in `.gguf` or starts with the GGUF magic, else as safetensors.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, IoError> {
        let path = path.as_ref();
        let by_name = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        let by_magic = || {
            let mut magic = [0u8; 4];
            std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic)).is_ok()
                && &magic == b"GGUF"
        };
        if by_name || by_magic() {
            GgufFile::open(path).map(WeightFile::Gguf)
        } else {
            SafetensorsFile::open(path).map(WeightFile::SafeTensors)
        }
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        match self {
            WeightFile::SafeTensors(s) => s.path(),
            WeightFile::Gguf(g) => g.path(),
        }
    }

    /// The open file and its whole mapping.
    pub(crate) fn mapping(&self) -> (&std::sync::Arc<std::fs::File>, &[u8]) {
        match self {
            WeightFile::SafeTensors(s) => s.mapping(),
            WeightFile::Gguf(g) => g.mapping(),
        }
    }

    /// The open file (read by the kernel's copy of a tensor kept as stored: [`StoredTensor::offset`]).
    #[must_use]
    pub fn file(&self) -> &std::sync::Arc<std::fs::File> {
        self.mapping().0
    }

    /// Every tensor, in file order.
    #[must_use]
    pub fn tensors(&self) -> Vec<StoredTensor<'_>> {
        match self {
            WeightFile::SafeTensors(s) => s.names().iter().filter_map(|n| self.get(n)).collect(),
            WeightFile::Gguf(g) => g.tensors().iter().map(|t| Self::from_gguf(g, t)).collect(),
        }
    }

    /// The tensor called `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<StoredTensor<'_>> {
        match self {
            WeightFile::SafeTensors(s) => {
                let (key, t) = s.get_key_value(name)?;
                Some(StoredTensor {
                    name: key,
                    shape: t.shape.clone(),
                    stored: Stored::Dense(t.dtype),
                    bytes: s.bytes(t),
                    offset: t.start,
                })
            }
            WeightFile::Gguf(g) => g.get(name).map(|t| Self::from_gguf(g, t)),
        }
    }

    fn from_gguf<'a>(g: &'a GgufFile, t: &'a crate::io::gguf::GgufTensor) -> StoredTensor<'a> {
        let stored = match &t.storage {
            GgufStorage::Dense(d) => Stored::Dense(*d),
            GgufStorage::Packed(e) => Stored::Packed(e.clone()),
        };
        StoredTensor { name: &t.name, shape: t.shape.clone(), stored, bytes: g.bytes(t), offset: t.start }
    }
}
