//! Payload sources: anything that can write its bytes into an archive in bounded chunks.
//!
//! The writer never asks for a payload as one owned buffer. A source declares its exact length
//! and then pushes chunks into a [`ChunkSink`]; the sink refuses bytes past the declared length,
//! and the writer refuses a source that stops short.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{IrpaError, Result};

/// The largest chunk a source should hand over at once, and the most extra memory any source of
/// this crate holds: 64 MiB.
pub const MAX_CHUNK_BYTES: usize = 64 << 20;

/// Where a source's bytes go. Obtained from the archive writer; tracks the count against the
/// declared length.
pub struct ChunkSink<'w> {
    pub(crate) out: &'w mut dyn SinkTarget,
    pub(crate) key: &'w str,
    pub(crate) declared: u64,
    pub(crate) written: u64,
}

/// What a [`ChunkSink`] writes to. Implemented by the archive writer (and by test doubles).
pub(crate) trait SinkTarget {
    fn write_all(&mut self, bytes: &[u8]) -> Result<()>;
    /// Advances by `len` zero bytes. The target may seek instead of writing (sparse file).
    fn skip_zeros(&mut self, len: u64) -> Result<()>;
    /// Copies up to `len` bytes from `src`'s current position (fewer only at its end); returns how many.
    /// The archive writer lets the kernel move them (`copy_file_range`), never through a user buffer.
    fn copy_from(&mut self, src: &File, len: u64) -> Result<u64>;
}

impl ChunkSink<'_> {
    /// The key of the entry being written (for error messages).
    #[must_use]
    pub fn key(&self) -> &str {
        self.key
    }

    /// Bytes still expected from the source.
    #[must_use]
    pub fn remaining(&self) -> u64 {
        self.declared - self.written
    }

    fn reserve(&mut self, len: u64) -> Result<()> {
        match self.written.checked_add(len) {
            Some(total) if total <= self.declared => {
                self.written = total;
                Ok(())
            }
            _ => Err(IrpaError::PayloadLengthMismatch {
                key: self.key.to_owned(),
                declared: self.declared,
                produced: self.written.saturating_add(len),
                overflow: true,
            }),
        }
    }

    /// Appends one chunk.
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.reserve(bytes.len() as u64)?;
        self.out.write_all(bytes)
    }

    /// Appends up to `len` bytes read from `src` at its current position, copied by the kernel file to file
    /// (`copy_file_range` on Linux, which a file system that shares extents may turn into a reflink); returns
    /// how many were copied, fewer than `len` only when `src` ends first.
    pub fn copy_file(&mut self, src: &File, len: u64) -> Result<u64> {
        self.reserve(len)?;
        match self.out.copy_from(src, len) {
            Ok(copied) => {
                self.written -= len - copied; // only what arrived counts
                Ok(copied)
            }
            Err(e) => {
                self.written -= len;
                Err(e)
            }
        }
    }

    /// Appends `len` zero bytes without materialising them (the archive file stays sparse).
    pub fn write_zeros(&mut self, len: u64) -> Result<()> {
        self.reserve(len)?;
        self.out.skip_zeros(len)
    }

    /// Appends `values` as little-endian f32 bytes, without copying on little-endian hosts.
    pub fn write_f32(&mut self, values: &[f32]) -> Result<()> {
        if cfg!(target_endian = "little") {
            for chunk in values.chunks(MAX_CHUNK_BYTES / 4) {
                self.write(bytemuck::cast_slice(chunk))?;
            }
            Ok(())
        } else {
            let mut buf = Vec::with_capacity((1 << 20).min(values.len() * 4));
            for chunk in values.chunks(1 << 18) {
                buf.clear();
                buf.extend(chunk.iter().flat_map(|v| v.to_le_bytes()));
                self.write(&buf)?;
            }
            Ok(())
        }
    }

    /// Wraps a source's own failure with this entry's key.
    pub fn fail<E>(&self, error: E) -> IrpaError
    where
        E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    {
        IrpaError::Source { key: self.key.to_owned(), source: error.into() }
    }
}

/// A payload that can stream itself into an archive.
pub trait ByteSource {
    /// The exact number of bytes [`ByteSource::write_into`] will produce.
    fn byte_len(&self) -> u64;

    /// Writes every byte, in chunks of at most [`MAX_CHUNK_BYTES`], into `sink`.
    fn write_into(&mut self, sink: &mut ChunkSink<'_>) -> Result<()>;

    /// For bytes copied from a file with [`ChunkSink::copy_file`]: where they start in that file. The writer
    /// places a large entry at the same offset modulo 64 KiB, where the kernel
    /// copies fastest (and a file system that shares extents can share them). `None` (the default) for bytes
    /// produced in memory.
    fn file_offset(&self) -> Option<u64> {
        None
    }
}

impl<S: ByteSource + ?Sized> ByteSource for Box<S> {
    fn byte_len(&self) -> u64 {
        (**self).byte_len()
    }
    fn write_into(&mut self, sink: &mut ChunkSink<'_>) -> Result<()> {
        (**self).write_into(sink)
    }
    fn file_offset(&self) -> Option<u64> {
        (**self).file_offset()
    }
}

/// Borrowed raw bytes (already little-endian).
#[derive(Debug, Clone, Copy)]
pub struct BytesSource<'a>(pub &'a [u8]);

impl ByteSource for BytesSource<'_> {
    fn byte_len(&self) -> u64 {
        self.0.len() as u64
    }
    fn write_into(&mut self, sink: &mut ChunkSink<'_>) -> Result<()> {
        self.0.chunks(MAX_CHUNK_BYTES).try_for_each(|c| sink.write(c))
    }
}

/// Borrowed f32 values, written little-endian without a copy on little-endian hosts.
#[derive(Debug, Clone, Copy)]
pub struct F32Source<'a>(pub &'a [f32]);

impl ByteSource for F32Source<'_> {
    fn byte_len(&self) -> u64 {
        self.0.len() as u64 * 4
    }
    fn write_into(&mut self, sink: &mut ChunkSink<'_>) -> Result<()> {
        sink.write_f32(self.0)
    }
}

/// `len` zero bytes that occupy no disk space (written as a hole in the file).
#[derive(Debug, Clone, Copy)]
pub struct ZerosSource(pub u64);

impl ByteSource for ZerosSource {
    fn byte_len(&self) -> u64 {
        self.0
    }
    fn write_into(&mut self, sink: &mut ChunkSink<'_>) -> Result<()> {
        sink.write_zeros(self.0)
    }
}

/// A region of a file, copied by the kernel into the archive (no user-space buffer).
#[derive(Debug)]
pub struct FileRegionSource {
    path: PathBuf,
    offset: u64,
    len: u64,
    /// The file already open (and checked) by the caller; `None`: opened at `path` when written.
    open: Option<Arc<File>>,
}

impl FileRegionSource {
    /// The whole file at `path`. Its length is taken now; a file that changes size before it is
    /// written is reported as a length mismatch, never written short.
    pub fn whole(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let len = std::fs::metadata(&path)
            .map_err(|source| IrpaError::Io { action: "cannot read", path: path.clone(), source })?
            .len();
        Ok(Self { path, offset: 0, len, open: None })
    }

    /// `len` bytes of `path` starting at `offset`.
    #[must_use]
    pub fn region(path: impl AsRef<Path>, offset: u64, len: u64) -> Self {
        Self { path: path.as_ref().to_path_buf(), offset, len, open: None }
    }

    /// `len` bytes at `offset` of a file the caller holds open (read from that handle, never reopened by
    /// name: what was checked is what is copied); `path` names it in errors. The handle's position is moved.
    #[must_use]
    pub fn of_open_file(file: Arc<File>, path: impl AsRef<Path>, offset: u64, len: u64) -> Self {
        Self { path: path.as_ref().to_path_buf(), offset, len, open: Some(file) }
    }
}

impl ByteSource for FileRegionSource {
    fn byte_len(&self) -> u64 {
        self.len
    }
    fn file_offset(&self) -> Option<u64> {
        Some(self.offset)
    }
    fn write_into(&mut self, sink: &mut ChunkSink<'_>) -> Result<()> {
        let io = |source| IrpaError::Io { action: "cannot read", path: self.path.clone(), source };
        let opened;
        let file: &File = match &self.open {
            Some(f) => f,
            None => {
                opened = File::open(&self.path).map_err(io)?;
                &opened
            }
        };
        let mut position = file;
        position.seek(SeekFrom::Start(self.offset)).map_err(io)?;
        // The kernel moves the bytes file to file; 64 MiB at a time so that progress keeps moving.
        let mut left = self.len;
        while left > 0 {
            let n = sink.copy_file(file, left.min(MAX_CHUNK_BYTES as u64))?;
            if n == 0 {
                return Err(IrpaError::PayloadLengthMismatch {
                    key: sink.key().to_owned(),
                    declared: sink.declared,
                    produced: sink.written,
                    overflow: false,
                });
            }
            left -= n;
        }
        Ok(())
    }
}

/// A source driven by a closure: the JNI and decoding paths produce bytes this way.
pub struct FnSource<F> {
    len: u64,
    produce: F,
}

impl<F> FnSource<F>
where
    F: FnMut(&mut ChunkSink<'_>) -> Result<()>,
{
    /// A source of exactly `len` bytes produced by `produce`.
    pub fn new(len: u64, produce: F) -> Self {
        Self { len, produce }
    }
}

impl<F> ByteSource for FnSource<F>
where
    F: FnMut(&mut ChunkSink<'_>) -> Result<()>,
{
    fn byte_len(&self) -> u64 {
        self.len
    }
    fn write_into(&mut self, sink: &mut ChunkSink<'_>) -> Result<()> {
        (self.produce)(sink)
    }
}
