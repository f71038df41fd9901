//! Streaming, atomic IRPA writer.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{IrpaError, Result};
use crate::layout::{self, EntryShape, Layout, entry_type};
use crate::records::{DataEntry, EntryCommon, SplatEntry, U32Le, U64Le};
use crate::source::{ByteSource, ChunkSink, SinkTarget};

/// What a pending entry will hold: bytes still to be streamed from a source, or a splat. (The reader's
/// [`Payload`](crate::Payload) is the other side: the bytes of an entry already in an archive.)
enum Contents<'a> {
    Data(Box<dyn ByteSource + 'a>),
    Splat { pattern: [u8; 16], pattern_len: u8, length: u64 },
}

struct Pending<'a> {
    key: String,
    metadata: Vec<u8>,
    payload: Contents<'a>,
}

/// Progress of a write, reported after every chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Payload bytes written so far.
    pub written: u64,
    /// Payload bytes in the whole archive (DATA entries only).
    pub total: u64,
}

/// What a completed write produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteSummary {
    /// The final path.
    pub path: PathBuf,
    /// The archive's size on disk (padded to 4096).
    pub file_size: u64,
    /// Number of entries.
    pub entry_count: u64,
    /// Payload bytes written (DATA entries).
    pub data_bytes: u64,
}

/// Builds an IRPA v0 archive that IREE 3.13 reads, byte-identical to IREE's own builder for the
/// same entries in the same order, with one difference by default: an entry of at least 8 MiB copied from a file
/// ([`ByteSource::file_offset`]) starts at its source offset modulo 64 KiB (when that offset is 64-aligned), where
/// the kernel copies it fastest. [`ArchiveWriter::iree_placement`] turns that off for byte-for-byte comparisons
/// with IREE's tools.
///
/// ```
/// use tapeout_irpa::{ArchiveWriter, F32Source};
/// # let dir = tempfile::tempdir().unwrap();
/// let weight = [1.0f32, 2.0, 3.0];
/// let mut w = ArchiveWriter::new();
/// w.add_data("weight", F32Source(&weight))?;
/// w.add_splat("bias", &0.5f32.to_le_bytes(), 12)?;
/// let summary = w.write(dir.path().join("params.irpa"))?;
/// assert_eq!(summary.file_size, 4096);
/// # Ok::<(), tapeout_irpa::IrpaError>(())
/// ```
#[derive(Default)]
pub struct ArchiveWriter<'a> {
    entries: Vec<Pending<'a>>,
    keys: HashSet<String>,
    iree_placement: bool,
}

fn shape(e: &Pending<'_>, iree_placement: bool) -> (EntryShape, u64, u64) {
    let shape = match &e.payload {
        Contents::Data(s) => {
            EntryShape::Data { len: s.byte_len(), file_offset: if iree_placement { None } else { s.file_offset() } }
        }
        Contents::Splat { .. } => EntryShape::Splat,
    };
    (shape, e.key.len() as u64, e.metadata.len() as u64)
}

impl<'a> ArchiveWriter<'a> {
    /// An empty archive (valid on its own: one 4096-byte page).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Places every entry exactly as IREE's builder does (64-byte alignment only), so that the archive is
    /// byte-identical to IREE's `ParameterIndex.create_archive_file` output for the same entries.
    #[must_use]
    pub fn iree_placement(mut self, on: bool) -> Self {
        self.iree_placement = on;
        self
    }

    /// Number of entries added so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The keys added so far, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.key.as_str())
    }

    /// True when no entry was added.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn claim_key(&mut self, key: &str) -> Result<()> {
        if !self.keys.insert(key.to_owned()) {
            return Err(IrpaError::DuplicateKey { key: key.to_owned() });
        }
        Ok(())
    }

    /// Adds a DATA entry whose bytes come from `source`.
    pub fn add_data(&mut self, key: impl Into<String>, source: impl ByteSource + 'a) -> Result<()> {
        self.add_data_with_metadata(key, Vec::new(), source)
    }

    /// Adds a DATA entry with a metadata blob (stored next to the key; IREE ignores it).
    pub fn add_data_with_metadata(
        &mut self,
        key: impl Into<String>,
        metadata: Vec<u8>,
        source: impl ByteSource + 'a,
    ) -> Result<()> {
        let key = key.into();
        self.claim_key(&key)?;
        self.entries.push(Pending { key, metadata, payload: Contents::Data(Box::new(source)) });
        Ok(())
    }

    /// Adds a SPLAT entry: `pattern` (1, 2, 4, 8 or 16 bytes, little-endian) repeated to `length` bytes.
    pub fn add_splat(&mut self, key: impl Into<String>, pattern: &[u8], length: u64) -> Result<()> {
        self.add_splat_with_metadata(key, Vec::new(), pattern, length)
    }

    /// Adds a SPLAT entry with a metadata blob.
    pub fn add_splat_with_metadata(
        &mut self,
        key: impl Into<String>,
        metadata: Vec<u8>,
        pattern: &[u8],
        length: u64,
    ) -> Result<()> {
        let key = key.into();
        let pattern_len: u8 = match pattern.len() {
            1 => 1,
            2 => 2,
            4 => 4,
            8 => 8,
            16 => 16,
            pattern_len => return Err(IrpaError::BadSplatPattern { key, pattern_len }),
        };
        if length % u64::from(pattern_len) != 0 {
            return Err(IrpaError::SplatLengthNotMultiple { key, length, pattern_len: pattern.len() });
        }
        self.claim_key(&key)?;
        let mut padded = [0u8; 16];
        padded[..pattern.len()].copy_from_slice(pattern);
        self.entries.push(Pending { key, metadata, payload: Contents::Splat { pattern: padded, pattern_len, length } });
        Ok(())
    }

    /// The layout the archive will have.
    pub fn layout(&self) -> Result<Layout> {
        layout::compute(self.entries.iter().map(|e| shape(e, self.iree_placement)))
    }

    /// Splits the entries, in order, into archives of at most `max_file_bytes` each (the padded file size): an
    /// archive is closed when the next entry would take it past the limit, and an entry larger than the limit
    /// on its own gets an archive to itself. No entry is split. An empty writer stays one (empty) archive.
    ///
    /// # Errors
    /// [`IrpaError::LayoutOverflow`] when an archive's layout cannot be computed.
    pub fn split(self, max_file_bytes: u64) -> Result<Vec<ArchiveWriter<'a>>> {
        let iree = self.iree_placement;
        let shape = |e: &Pending<'_>| shape(e, iree);
        let mut shards = vec![ArchiveWriter::new().iree_placement(iree)];
        let mut shapes = Vec::new();
        for entry in self.entries {
            shapes.push(shape(&entry));
            let full = shards.last().is_some_and(|w| !w.entries.is_empty())
                && layout::compute(shapes.iter().copied())?.file_size > max_file_bytes;
            if full {
                shapes = vec![shape(&entry)];
                shards.push(ArchiveWriter::new().iree_placement(iree));
            }
            if let Some(w) = shards.last_mut() {
                w.keys.insert(entry.key.clone());
                w.entries.push(entry);
            }
        }
        Ok(shards)
    }

    /// Writes the archive to `path` atomically (see [`ArchiveWriter::write_with_progress`]).
    pub fn write(self, path: impl AsRef<Path>) -> Result<WriteSummary> {
        self.write_with_progress(path, &mut |_| {})
    }

    /// Writes the archive to `path`, reporting progress after every chunk.
    ///
    /// The bytes go to a temporary file in the same directory, which is synced and then renamed
    /// over `path`. On any error the temporary file is removed and an existing file at `path` is
    /// left untouched. Stale temporary files of earlier, killed runs for the same destination are
    /// removed first.
    pub fn write_with_progress(
        mut self,
        path: impl AsRef<Path>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<WriteSummary> {
        let path = path.as_ref();
        let layout = self.layout()?;
        let mut temp = TempFile::create_beside(path)?;
        // Errors name the destination: the temporary file is an implementation detail, removed on failure.
        let data_bytes = self.write_body(&layout, temp.file(), path, progress)?;
        temp.commit(path)?;
        Ok(WriteSummary {
            path: path.to_path_buf(),
            file_size: layout.file_size,
            entry_count: self.entries.len() as u64,
            data_bytes,
        })
    }

    fn write_body(
        &mut self,
        layout: &Layout,
        file: &mut File,
        path: &Path,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<u64> {
        let io = |action: &'static str| move |source| IrpaError::Io { action, path: path.to_path_buf(), source };
        // Final size first: the padding is a hole, and a full disk shows up before any payload.
        file.set_len(layout.file_size).map_err(io("cannot size"))?;

        let head = self.encode_head(layout)?;
        let mut out = Target {
            inner: BufWriter::with_capacity(1 << 20, &mut *file),
            path,
            pos: 0,
            storage_start: layout.storage_segment.offset,
            total: layout.storage_segment.length,
            progress,
        };
        out.write_all(&head)?;
        let mut data_bytes = 0u64;

        for (entry, placement) in self.entries.iter_mut().zip(&layout.entries) {
            let Some(storage) = placement.storage else { continue };
            let start = layout.storage_segment.offset + storage.offset;
            out.skip_zeros(start - out.pos)?;
            let Contents::Data(source) = &mut entry.payload else { continue };
            let mut sink = ChunkSink { out: &mut out, key: &entry.key, declared: storage.length, written: 0 };
            source.write_into(&mut sink)?;
            if sink.written != storage.length {
                return Err(IrpaError::PayloadLengthMismatch {
                    key: entry.key.clone(),
                    declared: storage.length,
                    produced: sink.written,
                    overflow: false,
                });
            }
            data_bytes += storage.length;
        }
        out.inner.flush().map_err(io("cannot write"))?;
        drop(out);
        file.sync_all().map_err(io("cannot sync"))?;
        Ok(data_bytes)
    }

    /// The header, entry table and metadata segment: everything before the storage segment, built in memory.
    ///
    /// # Errors
    /// [`IrpaError::LayoutOverflow`] when that head does not fit this platform's address space.
    #[allow(clippy::expect_used, reason = "layout::compute gives every DATA entry its storage range")]
    fn encode_head(&self, layout: &Layout) -> Result<Vec<u8>> {
        let in_memory = |offset: u64| {
            usize::try_from(offset)
                .map_err(|_| IrpaError::LayoutOverflow { what: "the archive header in memory".into() })
        };
        let mut buf = Vec::with_capacity(in_memory(layout.metadata_segment.offset + layout.metadata_segment.length)?);
        layout::encode_header(layout, self.entries.len() as u64, &mut buf);
        for (entry, placement) in self.entries.iter().zip(&layout.entries) {
            buf.resize(in_memory(placement.record_offset)?, 0);
            let common = |entry_type: u32, size: u64, alignment: u64| EntryCommon {
                entry_size: U64Le::new(size),
                entry_type: U32Le::new(entry_type),
                flags: U64Le::default(),
                name: placement.name.into(),
                metadata: placement.metadata.into(),
                minimum_alignment: U64Le::new(alignment),
            };
            match &entry.payload {
                Contents::Data(_) => buf.extend_from_slice(bytemuck::bytes_of(&DataEntry {
                    common: common(entry_type::DATA, layout::DATA_ENTRY_SIZE, layout::DATA_ALIGNMENT),
                    storage: placement.storage.expect("layout::compute places storage for every DATA entry").into(),
                })),
                Contents::Splat { pattern, pattern_len, length } => {
                    buf.extend_from_slice(bytemuck::bytes_of(&SplatEntry {
                        common: common(entry_type::SPLAT, layout::SPLAT_ENTRY_SIZE, 0),
                        length: U64Le::new(*length),
                        pattern: *pattern,
                        pattern_length: *pattern_len,
                    }))
                }
            }
        }
        for entry in &self.entries {
            buf.extend_from_slice(entry.key.as_bytes());
            buf.extend_from_slice(&entry.metadata);
        }
        Ok(buf)
    }
}

struct Target<'f, 'p> {
    inner: BufWriter<&'f mut File>,
    path: &'p Path,
    pos: u64,
    storage_start: u64,
    total: u64,
    progress: &'p mut dyn FnMut(Progress),
}

impl SinkTarget for Target<'_, '_> {
    fn copy_from(&mut self, src: &File, len: u64) -> Result<u64> {
        let copied = self.copy(src, len).map_err(|source| IrpaError::Io {
            action: "cannot copy the input into",
            path: self.path.to_path_buf(),
            source,
        })?;
        self.advance(copied);
        Ok(copied)
    }

    fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        self.inner.write_all(bytes).map_err(|source| IrpaError::Io {
            action: "cannot write",
            path: self.path.to_path_buf(),
            source,
        })?;
        self.advance(bytes.len() as u64);
        Ok(())
    }

    fn skip_zeros(&mut self, len: u64) -> Result<()> {
        const ZEROS: [u8; 4096] = [0; 4096];
        if let Some(n) = usize::try_from(len).ok().filter(|&n| n <= ZEROS.len()) {
            self.inner.write_all(&ZEROS[..n]).map_err(|source| IrpaError::Io {
                action: "cannot write",
                path: self.path.to_path_buf(),
                source,
            })?;
        } else {
            // The file was sized up front and is new: seeking leaves a hole that reads as zeros.
            let offset = i64::try_from(len).map_err(|_| IrpaError::LayoutOverflow { what: "zero run".into() })?;
            self.inner.seek(SeekFrom::Current(offset)).map_err(|source| IrpaError::Io {
                action: "cannot seek in",
                path: self.path.to_path_buf(),
                source,
            })?;
        }
        self.advance(len);
        Ok(())
    }
}

impl Target<'_, '_> {
    fn copy(&mut self, src: &File, len: u64) -> std::io::Result<u64> {
        use std::io::Read;
        self.inner.flush()?;
        // File to file through `std::io::copy`: `copy_file_range` on Linux (the kernel moves the bytes; a
        // file system that shares extents may share them), read/write elsewhere.
        let dest: &mut File = self.inner.get_mut();
        std::io::copy(&mut src.take(len), dest)
    }

    fn advance(&mut self, len: u64) {
        self.pos += len;
        if self.pos > self.storage_start {
            let written = (self.pos - self.storage_start).min(self.total);
            (self.progress)(Progress { written, total: self.total });
        }
    }
}

/// Writes a file atomically: `write` fills a new temporary file in the destination's directory,
/// which is then synced and renamed over `path`. On any error the temporary file is removed and
/// an existing file at `path` is untouched. (The archive writer uses the same mechanism.)
pub fn write_atomically(path: impl AsRef<Path>, write: impl FnOnce(&mut File) -> std::io::Result<()>) -> Result<()> {
    let mut file = AtomicFile::create(path)?;
    let result = write(file.file());
    result.map_err(|source| IrpaError::Io { action: "cannot write", path: file.dest.clone(), source })?;
    file.commit()
}

/// A file being written atomically: a temporary file beside the destination that becomes the
/// destination only on [`AtomicFile::commit`] (sync, rename, sync of the directory). Dropping it
/// uncommitted removes the temporary file and leaves any existing destination untouched.
pub struct AtomicFile {
    temp: TempFile,
    dest: PathBuf,
}

impl AtomicFile {
    /// Creates the temporary file for `path` (removing stale ones of killed runs first).
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        let dest = path.as_ref().to_path_buf();
        Ok(Self { temp: TempFile::create_beside(&dest)?, dest })
    }

    /// The open temporary file.
    pub fn file(&mut self) -> &mut File {
        self.temp.file()
    }

    /// Where the bytes go until commit.
    #[must_use]
    pub fn temp_path(&self) -> &Path {
        self.temp.path()
    }

    /// Syncs the file and renames it over the destination.
    pub fn commit(mut self) -> Result<()> {
        let path = self.dest.clone();
        self.temp.file().sync_all().map_err(|source| IrpaError::Io { action: "cannot sync", path, source })?;
        self.temp.commit(&self.dest)
    }
}

/// A temporary file beside the destination (`tempfile`'s, so it is removed on drop unless committed),
/// named `.<destination>.<pid>-<random>.tapeout-tmp` so that one left by a killed run can be recognised
/// and removed.
struct TempFile {
    inner: tempfile::NamedTempFile,
}

const TEMP_SUFFIX: &str = ".tapeout-tmp";

/// `.<file name>.` — with the name cut to 100 bytes (at a character boundary), so that the temp name stays
/// under the 255-byte file name limit whatever the destination is called.
fn temp_prefix(dest: &Path) -> Option<String> {
    dest.file_name().map(|n| {
        let name = n.to_string_lossy();
        let mut end = name.len().min(100);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        format!(".{}.", &name[..end])
    })
}

impl TempFile {
    fn create_beside(dest: &Path) -> Result<Self> {
        let dir = parent_dir(dest);
        let prefix = temp_prefix(dest).ok_or_else(|| IrpaError::Io {
            action: "cannot write to",
            path: dest.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "the destination has no file name"),
        })?;
        remove_stale_temps(&dir, &prefix);
        let mut builder = tempfile::Builder::new();
        let ours = format!("{prefix}{}-", std::process::id());
        builder.prefix(&ours).suffix(TEMP_SUFFIX);
        // An archive is an ordinary output file: the umask decides, not tempfile's private 0600.
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let inner = builder.tempfile_in(&dir).map_err(|source| IrpaError::Io {
            action: "cannot create temporary file in",
            path: dir.clone(),
            source,
        })?;
        Ok(Self { inner })
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn file(&mut self) -> &mut File {
        self.inner.as_file_mut()
    }

    fn commit(self, dest: &Path) -> Result<()> {
        self.inner.persist(dest).map_err(|e| IrpaError::Io {
            action: "cannot move the finished archive into place at",
            path: dest.to_path_buf(),
            source: e.error,
        })?;
        // Make the rename durable. Failure here leaves a complete file; report it anyway.
        let dir = parent_dir(dest);
        if let Ok(d) = File::open(&dir) {
            d.sync_all().map_err(|source| IrpaError::Io { action: "cannot sync directory", path: dir, source })?;
        }
        Ok(())
    }
}

fn parent_dir(dest: &Path) -> PathBuf {
    match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Removes `<prefix><pid>-<random>.tapeout-tmp` files left by processes that no longer run.
fn remove_stale_temps(dir: &Path, prefix: &str) {
    let Ok(read) = std::fs::read_dir(dir) else { return };
    for entry in read.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_suffix(TEMP_SUFFIX)) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid != std::process::id() && !process_alive(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn process_alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        Path::new(&format!("/proc/{pid}")).exists()
    } else {
        true // cannot tell: keep the file
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Archive, BytesSource, F32Source, FnSource, Payload, ZerosSource};

    fn temps_in(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(TEMP_SUFFIX))
            .collect()
    }

    #[test]
    fn split_keeps_order_whole_entries_and_the_limit() -> Result<()> {
        // 64 KiB limit: 20 KiB entries go three to an archive (the 4 KiB header page + 60 KiB fits exactly; four do not),
        // a 100 KiB entry alone in its own, a splat rides along with its neighbours.
        let mut w = ArchiveWriter::new();
        for i in 0..7 {
            w.add_data(format!("e{i}"), ZerosSource(20 << 10))?;
        }
        w.add_data("big", ZerosSource(100 << 10))?;
        w.add_splat("s", &[1, 0, 0, 0], 1 << 30)?;
        w.add_data("tail", ZerosSource(1))?;
        let shards = w.split(64 << 10)?;
        let keys: Vec<Vec<String>> = shards.iter().map(|s| s.entries.iter().map(|e| e.key.clone()).collect()).collect();
        assert_eq!(keys, [vec!["e0", "e1", "e2"], vec!["e3", "e4", "e5"], vec!["e6"], vec!["big"], vec!["s", "tail"]]);
        for s in &shards {
            let size = s.layout()?.file_size;
            assert!(size <= 64 << 10 || s.len() == 1, "{size}");
        }
        // Everything in one when the limit allows; an empty writer stays one empty archive.
        let mut w = ArchiveWriter::new();
        w.add_data("a", ZerosSource(10))?;
        w.add_data("b", ZerosSource(10))?;
        assert_eq!(w.split(u64::MAX)?.len(), 1);
        assert_eq!(ArchiveWriter::new().split(1)?.len(), 1);
        Ok(())
    }

    #[test]
    fn round_trip_data_splat_and_metadata() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| IrpaError::Io { action: "tmp", path: ".".into(), source: e })?;
        let path = dir.path().join("p.irpa");
        let w_vals: Vec<f32> = (0..12).map(|i| i as f32 * 0.5).collect();
        let mut w = ArchiveWriter::new();
        w.add_splat("s", &1.5f32.to_le_bytes(), 64)?;
        w.add_data_with_metadata("weight", b"{\"dtype\":\"f32\"}".to_vec(), F32Source(&w_vals))?;
        w.add_data("odd/key::with spaces é", BytesSource(&[1, 2, 3]))?;
        let summary = w.write(&path)?;
        assert_eq!((summary.entry_count, summary.data_bytes), (3, 51));

        let a = Archive::open(&path)?;
        assert_eq!(a.len(), 3);
        let weight = a.get("weight")?;
        assert_eq!(weight.metadata, b"{\"dtype\":\"f32\"}");
        let Payload::Data(bytes) = weight.payload else { panic!("weight is data") };
        assert_eq!(bytes, bytemuck::cast_slice::<f32, u8>(&w_vals));
        let Payload::Splat { pattern, length } = a.get("s")?.payload else { panic!("s is a splat") };
        assert_eq!((pattern, length), (&1.5f32.to_le_bytes()[..], 64));
        assert!(matches!(a.get("odd/key::with spaces é")?.payload, Payload::Data(&[1, 2, 3])));
        assert!(matches!(a.get("nope"), Err(IrpaError::KeyNotFound { .. })));
        assert!(temps_in(dir.path()).is_empty());
        Ok(())
    }

    #[test]
    fn duplicate_keys_and_bad_splats_are_refused() {
        let mut w = ArchiveWriter::new();
        assert!(w.add_data("k", BytesSource(&[1])).is_ok());
        let e = w.add_splat("k", &[0], 4);
        assert!(matches!(&e, Err(IrpaError::DuplicateKey { key }) if key == "k"), "{e:?}");
        assert!(matches!(w.add_splat("a", &[0, 0, 0], 3), Err(IrpaError::BadSplatPattern { pattern_len: 3, .. })));
        assert!(matches!(w.add_splat("b", &[0; 17], 17), Err(IrpaError::BadSplatPattern { .. })));
        assert!(matches!(w.add_splat("c", &[], 0), Err(IrpaError::BadSplatPattern { .. })));
        assert!(matches!(w.add_splat("d", &[0; 4], 6), Err(IrpaError::SplatLengthNotMultiple { .. })));
        assert_eq!(w.len(), 1);
    }

    fn failing_write(source: impl ByteSource) -> (IrpaError, Vec<u8>, Vec<String>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.irpa");
        std::fs::write(&path, b"previous complete archive").expect("seed");
        let mut w = ArchiveWriter::new();
        w.add_data("first", BytesSource(&[7; 100])).expect("add");
        w.add_data("bad", source).expect("add");
        let err = w.write(&path).expect_err("must fail");
        (err, std::fs::read(&path).expect("still there"), temps_in(dir.path()))
    }

    #[test]
    fn short_source_fails_and_leaves_destination_untouched() {
        let (err, kept, temps) = failing_write(FnSource::new(10, |s| s.write(&[1; 4])));
        assert!(
            matches!(err, IrpaError::PayloadLengthMismatch { declared: 10, produced: 4, overflow: false, .. }),
            "{err}"
        );
        assert_eq!(kept, b"previous complete archive");
        assert!(temps.is_empty(), "{temps:?}");
    }

    #[test]
    fn long_source_is_stopped_at_its_declared_length() {
        let (err, kept, temps) = failing_write(FnSource::new(4, |s| s.write(&[1; 10])));
        assert!(
            matches!(&err, IrpaError::PayloadLengthMismatch { key, declared: 4, overflow: true, .. } if key == "bad"),
            "{err}"
        );
        assert_eq!(kept, b"previous complete archive");
        assert!(temps.is_empty());
    }

    #[test]
    fn source_error_names_the_key() {
        let (err, kept, temps) = failing_write(FnSource::new(4, |s| Err(s.fail("decoder exploded"))));
        assert_eq!(err.to_string(), "parameter \"bad\": its data source failed: decoder exploded");
        assert_eq!(kept, b"previous complete archive");
        assert!(temps.is_empty());
    }

    #[test]
    fn stale_temp_files_of_dead_processes_are_removed() -> Result<()> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.irpa");
        // PIDs on Linux are at most 2^22, so this one never runs.
        let stale = dir.path().join(format!(".p.irpa.999999999-0{TEMP_SUFFIX}"));
        let other = dir.path().join(format!(".q.irpa.999999999-0{TEMP_SUFFIX}"));
        std::fs::write(&stale, b"junk").expect("seed");
        std::fs::write(&other, b"junk").expect("seed");
        ArchiveWriter::new().write(&path)?;
        assert!(!stale.exists());
        assert!(other.exists(), "another destination's temp file is not ours to remove");
        Ok(())
    }

    #[test]
    fn gaps_are_zero_and_file_is_page_padded() -> Result<()> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.irpa");
        let mut w = ArchiveWriter::new();
        w.add_data("a", BytesSource(&[0xff; 3]))?;
        w.add_splat("b", &[0xee; 16], 32)?;
        w.add_data("c", BytesSource(&[0xff; 5]))?;
        let layout = w.layout()?;
        w.write(&path)?;
        let bytes = std::fs::read(&path).expect("read");
        assert_eq!(bytes.len() as u64, layout.file_size);
        let s = usize::try_from(layout.storage_segment.offset).expect("small");
        assert_eq!(&bytes[s..s + 3], &[0xff; 3]);
        assert!(bytes[s + 3..s + 64].iter().all(|&b| b == 0));
        assert_eq!(&bytes[s + 64..s + 69], &[0xff; 5]);
        assert!(bytes[s + 69..].iter().all(|&b| b == 0));
        // Between the end of the first record (96+76) and the next 16-byte boundary.
        assert!(bytes[172..176].iter().all(|&b| b == 0));
        Ok(())
    }

    #[test]
    fn a_large_file_region_is_copied_to_its_source_phase_unless_iree_placement() -> Result<()> {
        use crate::layout::{COPY_PHASE, COPY_PHASE_MIN_LEN};
        use crate::reader::IndexKind;
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path().join("src.bin");
        let offset = COPY_PHASE + 4096 + 192; // a tensor inside a checkpoint: 64-aligned, not page-aligned
        let len = COPY_PHASE_MIN_LEN + 5;
        let bytes: Vec<u8> = (0..offset + len).map(|i| (i % 251) as u8).collect();
        std::fs::write(&src, &bytes).expect("write source");
        let region = || crate::source::FileRegionSource::region(&src, offset, len);
        let start = |iree: bool| -> Result<(u64, Vec<u8>)> {
            let path = dir.path().join(format!("p{iree}.irpa"));
            let mut w = ArchiveWriter::new().iree_placement(iree);
            w.add_data("small", BytesSource(&[7; 3]))?;
            w.add_data("w", region())?;
            w.write(&path)?;
            let a = Archive::open(&path)?;
            let e = a.get("w")?;
            let (IndexKind::Data(r), Payload::Data(got)) = (e.location.kind, e.payload) else { panic!("w is data") };
            Ok((r.offset, got.to_vec()))
        };
        let usize_of = |v: u64| usize::try_from(v).expect("small");
        let want = &bytes[usize_of(offset)..];
        let (placed, got) = start(false)?;
        assert_eq!((placed % COPY_PHASE, placed % 64), (offset % COPY_PHASE, 0));
        assert!(got == want, "the bytes arrive whole");
        let (iree, got) = start(true)?;
        assert!(iree < 4096 && iree % 64 == 0, "IREE's placement: right after the small entry ({iree})");
        assert!(got == want);
        Ok(())
    }

    #[cfg(unix)]
    #[test]
    fn zero_payloads_are_holes_not_written_bytes() -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.irpa");
        let mut w = ArchiveWriter::new();
        w.add_data("zeros", ZerosSource(1 << 30))?;
        w.add_data("tail", BytesSource(&[9; 8]))?;
        w.write(&path)?;
        let md = std::fs::metadata(&path).expect("stat");
        assert!(md.len() > 1 << 30);
        assert!(md.blocks() * 512 < 1 << 20, "{} bytes allocated", md.blocks() * 512);
        assert!(matches!(Archive::open(&path)?.get("tail")?.payload, Payload::Data(&[9, 9, 9, 9, 9, 9, 9, 9])));
        Ok(())
    }

    #[test]
    fn progress_is_monotonic_and_complete() -> Result<()> {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = vec![1u8; 3 << 20];
        let mut w = ArchiveWriter::new();
        w.add_data("a", FnSource::new(data.len() as u64, |s| data.chunks(1 << 20).try_for_each(|c| s.write(c))))?;
        w.add_data("b", BytesSource(&data[..10]))?;
        let mut seen = Vec::new();
        w.write_with_progress(dir.path().join("p.irpa"), &mut |p| seen.push(p))?;
        assert!(seen.windows(2).all(|w| w[0].written <= w[1].written));
        let last = seen.last().expect("progress reported");
        assert_eq!(last.written, last.total);
        assert_eq!(last.total, (3 << 20) + 10);
        Ok(())
    }

    #[test]
    fn a_destination_name_of_250_bytes_is_written() -> Result<()> {
        let dir = tempfile::tempdir().expect("tempdir");
        let name = format!("{}.irpa", "é".repeat(122)); // 244 + 5 bytes, multi-byte characters
        ArchiveWriter::new().write(dir.path().join(&name))?;
        assert!(dir.path().join(&name).exists());
        assert!(temps_in(dir.path()).is_empty());
        Ok(())
    }

    #[test]
    fn missing_directory_is_an_io_error_naming_the_path() {
        let err = ArchiveWriter::new().write("/nonexistent-dir/p.irpa").expect_err("must fail");
        assert!(err.to_string().contains("/nonexistent-dir/"), "{err}");
    }
}
