//! Memory-mapped, validating IRPA reader.
//!
//! Every field is checked against the file size with checked arithmetic before it is used, and
//! nothing is allocated in proportion to a size the file merely declares: the entry index is
//! bounded by the bytes actually present in the entry table.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::{FormatProblem, IrpaError, Result};
use crate::layout::{
    DATA_ENTRY_SIZE, ENTRY_ALIGNMENT, ENTRY_COMMON_SIZE, HEADER_SIZE, MAGIC, Range, SPLAT_ENTRY_SIZE, entry_type,
};
use crate::records::{self, DataEntry, EntryCommon, Header, SplatEntry};

/// One entry's location in the archive, as validated offsets (no borrowed data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Absolute byte range of the key.
    pub key: Range,
    /// Absolute byte range of the metadata blob (empty when absent).
    pub metadata: Range,
    /// What the entry holds.
    pub kind: IndexKind,
}

/// The payload of an [`IndexEntry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    /// Bytes at an absolute range of the file.
    Data(Range),
    /// A repeated pattern.
    Splat {
        /// Pattern bytes, zero-padded to 16.
        pattern: [u8; 16],
        /// Pattern length: 1, 2, 4, 8 or 16.
        pattern_len: u8,
        /// Virtual byte length.
        length: u64,
    },
}

/// The validated header and entry index of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// Entry segment (absolute).
    pub entry_segment: Range,
    /// Metadata segment (absolute).
    pub metadata_segment: Range,
    /// Storage segment (absolute).
    pub storage_segment: Range,
    /// Entries in table order (SKIP entries left out).
    pub entries: Vec<IndexEntry>,
}

fn check_segment(name: &'static str, seg: Range, file_size: u64) -> Result<(), FormatProblem> {
    match seg.end() {
        Some(end) if end <= file_size => Ok(()),
        _ => Err(FormatProblem::SegmentOutOfFile {
            segment: name,
            offset: seg.offset,
            length: seg.length,
            end: seg.offset.saturating_add(seg.length),
            file_size,
        }),
    }
}

/// Resolves a range relative to `seg` to an absolute one, or `None` when it leaves the segment.
fn within(seg: Range, rel: Range) -> Option<Range> {
    let end = rel.end()?;
    (end <= seg.length).then_some(Range { offset: seg.offset + rel.offset, length: rel.length })
}

/// Parses and validates the header and entry table of an archive held in `bytes`.
///
/// This is the whole of the reader's trust boundary; it is a pure function so it can be fuzzed.
pub fn parse_index(bytes: &[u8]) -> Result<Index, FormatProblem> {
    let file_size = bytes.len() as u64;
    if file_size < HEADER_SIZE {
        return Err(FormatProblem::TooShort { size: file_size });
    }
    let Some(header) = records::read::<Header>(bytes, 0) else {
        return Err(FormatProblem::TooShort { size: file_size });
    };
    let magic = header.magic.get();
    if magic != MAGIC {
        return Err(FormatProblem::BadMagic { found: magic });
    }
    let (major, minor) = (header.version_major.get(), header.version_minor.get());
    if (major, minor) != (0, 0) {
        return Err(FormatProblem::UnsupportedVersion { major, minor });
    }
    let header_size = header.header_size.get();
    if header_size != HEADER_SIZE {
        return Err(FormatProblem::BadHeaderSize { found: header_size });
    }
    let next = header.next_header_offset.get();
    if next != 0 {
        return Err(FormatProblem::ChainedArchive { found: next });
    }
    let declared = header.entry_count.get();
    let entry_segment = Range::from(header.entry_segment);
    let metadata_segment = Range::from(header.metadata_segment);
    let storage_segment = Range::from(header.storage_segment);
    check_segment("entry", entry_segment, file_size)?;
    check_segment("metadata", metadata_segment, file_size)?;
    check_segment("storage", storage_segment, file_size)?;

    // Every entry takes at least the common header, so the table bounds the count we can trust.
    let table_end = entry_segment.offset + entry_segment.length;
    let mismatch = |index: u64, detail: &'static str| FormatProblem::EntryTableMismatch {
        declared,
        table_len: entry_segment.length,
        index,
        detail,
    };
    if declared > entry_segment.length / ENTRY_COMMON_SIZE {
        return Err(mismatch(0, "cannot fit: the count exceeds what the table can hold"));
    }
    let mut entries = Vec::new();
    let mut keys: HashMap<&[u8], u64> = HashMap::new();
    let mut pos = entry_segment.offset;

    for index in 0..declared {
        pos = match pos.checked_add(ENTRY_ALIGNMENT - 1) {
            Some(p) => p & !(ENTRY_ALIGNMENT - 1),
            None => return Err(mismatch(index, "lies past the end of the table")),
        };
        if pos.checked_add(ENTRY_COMMON_SIZE).is_none_or(|end| end > table_end) {
            return Err(mismatch(index, "lies past the end of the table"));
        }
        let past = || mismatch(index, "lies past the end of the table");
        let at = usize::try_from(pos).map_err(|_| past())?;
        let common = records::read::<EntryCommon>(bytes, at).ok_or_else(past)?;
        let entry_size = common.entry_size.get();
        let ty = common.entry_type.get();
        let (kind_name, min_size) = match ty {
            entry_type::SKIP => ("SKIP", ENTRY_COMMON_SIZE),
            entry_type::SPLAT => ("SPLAT", SPLAT_ENTRY_SIZE),
            entry_type::DATA => ("DATA", DATA_ENTRY_SIZE),
            found => return Err(FormatProblem::UnsupportedEntryType { index, found }),
        };
        if entry_size < min_size {
            return Err(FormatProblem::BadEntrySize { index, kind: kind_name, found: entry_size, expected: min_size });
        }
        let end = pos.checked_add(entry_size).filter(|&e| e <= table_end);
        let Some(end) = end else { return Err(mismatch(index, "runs past the end of the table")) };
        pos = end;
        if ty == entry_type::SKIP {
            continue;
        }

        let name_rel = Range::from(common.name);
        let meta_rel = Range::from(common.metadata);
        let out_of_meta = |what: &'static str, r: Range| FormatProblem::MetadataRefOutOfRange {
            index,
            what,
            offset: r.offset,
            length: r.length,
            end: r.offset.saturating_add(r.length),
            segment_len: metadata_segment.length,
        };
        let key = within(metadata_segment, name_rel).ok_or_else(|| out_of_meta("name", name_rel))?;
        let metadata = if meta_rel.length == 0 {
            Range { offset: metadata_segment.offset, length: 0 }
        } else {
            within(metadata_segment, meta_rel).ok_or_else(|| out_of_meta("metadata", meta_rel))?
        };

        // The entry's size was checked against its type and the table above, so its record is in bounds.
        let kind = if ty == entry_type::DATA {
            let rel = Range::from(records::read::<DataEntry>(bytes, at).ok_or_else(past)?.storage);
            let abs = within(storage_segment, rel).ok_or(FormatProblem::StorageRefOutOfRange {
                index,
                offset: rel.offset,
                length: rel.length,
                end: rel.offset.saturating_add(rel.length),
                segment_len: storage_segment.length,
            })?;
            IndexKind::Data(abs)
        } else {
            let splat = records::read::<SplatEntry>(bytes, at).ok_or_else(past)?;
            let (length, pattern, pattern_len) = (splat.length.get(), splat.pattern, splat.pattern_length);
            if !matches!(pattern_len, 1 | 2 | 4 | 8 | 16) || length % u64::from(pattern_len) != 0 {
                return Err(FormatProblem::BadSplat { index, pattern_len, length });
            }
            IndexKind::Splat { pattern, pattern_len, length }
        };

        // Both ranges were checked against the file above, so these slices are in bounds.
        let key_bytes = slice(bytes, key);
        if std::str::from_utf8(key_bytes).is_err() {
            return Err(FormatProblem::KeyNotUtf8 { index });
        }
        if let Some(&first) = keys.get(key_bytes) {
            return Err(FormatProblem::DuplicateKey {
                key: String::from_utf8_lossy(key_bytes).into_owned(),
                first,
                second: index,
            });
        }
        keys.insert(key_bytes, index);
        entries.push(IndexEntry { key, metadata, kind });
    }
    // Every DATA entry owns its bytes (as in safetensors; IREE itself does not check).
    let mut data: Vec<(u64, u64, u64)> = entries
        .iter()
        .zip(0u64..)
        .filter_map(|(e, i)| match e.kind {
            IndexKind::Data(r) if r.length > 0 => Some((r.offset, r.offset + r.length, i)),
            _ => None,
        })
        .collect();
    data.sort_unstable();
    for w in data.windows(2) {
        let ((_, first_end, first), (second_start, _, second)) = (w[0], w[1]);
        if second_start < first_end {
            return Err(FormatProblem::OverlappingEntries { first, second, first_end, second_start });
        }
    }
    // IREE's builder ends the segment at the last entry; allow only alignment padding after it.
    if table_end.saturating_sub(pos) >= ENTRY_ALIGNMENT {
        return Err(mismatch(declared, "would start in the unused bytes left at the end of the table"));
    }
    Ok(Index { entry_segment, metadata_segment, storage_segment, entries })
}

/// `bytes[r]` for a range already validated against `bytes.len()`.
#[allow(clippy::expect_used, reason = "every range passed here was checked against these bytes by parse_index")]
fn slice(bytes: &[u8], r: Range) -> &[u8] {
    let start = usize::try_from(r.offset).expect("range validated against the in-memory file");
    let end = usize::try_from(r.offset + r.length).expect("range validated against the in-memory file");
    bytes.get(start..end).expect("range validated against the in-memory file")
}

/// An open archive: the file is memory-mapped and every DATA entry is a zero-copy slice of it.
pub struct Archive {
    path: PathBuf,
    map: Mmap,
    index: Index,
}

/// One entry of an open [`Archive`].
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// The key (validated UTF-8).
    pub key: &'a str,
    /// The metadata blob (empty when absent).
    pub metadata: &'a [u8],
    /// The payload.
    pub payload: Payload<'a>,
    /// Where it sits in the file.
    pub location: IndexEntry,
}

/// The payload of an [`Entry`].
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// The bytes, borrowed from the mapping.
    Data(&'a [u8]),
    /// A repeated pattern.
    Splat {
        /// The pattern (1, 2, 4, 8 or 16 bytes).
        pattern: &'a [u8],
        /// Virtual length in bytes.
        length: u64,
    },
}

impl Entry<'_> {
    /// The parameter's byte length (a splat's virtual length).
    #[must_use]
    pub fn byte_len(&self) -> u64 {
        match self.payload {
            Payload::Data(d) => d.len() as u64,
            Payload::Splat { length, .. } => length,
        }
    }

    /// Writes the parameter's bytes to `out`: a DATA entry's bytes in 64 MiB pieces, a splat expanded from a
    /// 64 KiB block (nothing of the entry's size is allocated).
    ///
    /// # Errors
    /// `out`'s write error.
    pub fn write_bytes_to(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        match self.payload {
            Payload::Data(bytes) => bytes.chunks(crate::MAX_CHUNK_BYTES).try_for_each(|c| out.write_all(c)),
            Payload::Splat { pattern, length } => {
                let block: Vec<u8> = pattern.iter().copied().cycle().take(1 << 16).collect();
                let mut left = length;
                while left > 0 {
                    let n = block.len().min(usize::try_from(left).unwrap_or(usize::MAX)); // saturating: more than a block
                    out.write_all(&block[..n])?;
                    left -= n as u64;
                }
                Ok(())
            }
        }
    }
}

impl Archive {
    /// Opens and validates the archive at `path`.
    ///
    /// The file is memory-mapped: it must not be truncated or rewritten while the archive is open
    /// (tapeout's own writer never does this: it replaces files by rename).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let io = |source| IrpaError::Io { action: "cannot read", path: path.clone(), source };
        let file = File::open(&path).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        if size < HEADER_SIZE {
            return Err(IrpaError::Format { path, problem: FormatProblem::TooShort { size } });
        }
        // SAFETY: the mapping is read-only; see the doc comment for the concurrent-modification caveat.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let index = parse_index(&map).map_err(|problem| IrpaError::Format { path: path.clone(), problem })?;
        Ok(Self { path, map, index })
    }

    /// The path this archive was opened from.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The validated index.
    #[must_use]
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The file size in bytes.
    #[must_use]
    pub fn file_size(&self) -> u64 {
        self.map.len() as u64
    }

    /// Number of (non-SKIP) entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.index.entries.len()
    }

    /// True when the archive has no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.index.entries.is_empty()
    }

    /// Entries in table order.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = Entry<'_>> + '_ {
        self.index.entries.iter().map(|e| self.entry(e))
    }

    /// The entry with `key`.
    pub fn get(&self, key: &str) -> Result<Entry<'_>> {
        self.entries()
            .find(|e| e.key == key)
            .ok_or_else(|| IrpaError::KeyNotFound { path: self.path.clone(), key: key.to_owned() })
    }

    #[allow(clippy::expect_used, reason = "the entry comes from parse_index over this mapping, which checked its key")]
    fn entry<'a>(&'a self, e: &'a IndexEntry) -> Entry<'a> {
        let key = std::str::from_utf8(slice(&self.map, e.key)).expect("parse_index checked every key is UTF-8");
        let metadata = slice(&self.map, e.metadata);
        let payload = match &e.kind {
            IndexKind::Data(r) => Payload::Data(slice(&self.map, *r)),
            IndexKind::Splat { pattern, pattern_len, length } => {
                Payload::Splat { pattern: &pattern[..usize::from(*pattern_len)], length: *length }
            }
        };
        Entry { key, metadata, payload, location: *e }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArchiveWriter, BytesSource};

    /// A valid archive: DATA "weight" (48 B) at 96, SPLAT "s" at 176, DATA "bias" (12 B) at 272.
    fn valid() -> Vec<u8> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("v.irpa");
        let mut w = ArchiveWriter::new();
        w.add_data("weight", BytesSource(&[1; 48])).expect("add");
        w.add_splat("s", &[2; 4], 16).expect("add");
        w.add_data_with_metadata("bias", b"md".to_vec(), BytesSource(&[3; 12])).expect("add");
        w.write(&path).expect("write");
        std::fs::read(&path).expect("read")
    }

    fn put_u64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    fn parse_mutated(f: impl FnOnce(&mut Vec<u8>)) -> Result<Index, FormatProblem> {
        let mut b = valid();
        f(&mut b);
        parse_index(&b)
    }

    #[test]
    fn valid_archive_parses() {
        let idx = parse_index(&valid()).expect("valid");
        assert_eq!(idx.entries.len(), 3);
        assert!(matches!(idx.entries[1].kind, IndexKind::Splat { pattern_len: 4, length: 16, .. }));
    }

    #[test]
    fn header_corruptions() {
        assert!(matches!(parse_mutated(|b| b[0] = b'X'), Err(FormatProblem::BadMagic { .. })));
        assert!(matches!(parse_mutated(|b| b[4] = 1), Err(FormatProblem::UnsupportedVersion { major: 1, minor: 0 })));
        assert!(matches!(parse_mutated(|b| b[6] = 1), Err(FormatProblem::UnsupportedVersion { major: 0, minor: 1 })));
        assert!(matches!(parse_mutated(|b| b[8] = 40), Err(FormatProblem::BadHeaderSize { found: 40 })));
        assert!(matches!(parse_mutated(|b| put_u64(b, 16, 4096)), Err(FormatProblem::ChainedArchive { .. })));
        assert!(matches!(parse_index(&[]), Err(FormatProblem::TooShort { size: 0 })));
        assert!(matches!(parse_index(&valid()[..87]), Err(FormatProblem::TooShort { size: 87 })));
    }

    #[test]
    fn truncation_at_every_segment_boundary_is_detected() {
        let full = valid();
        let idx = parse_index(&full).expect("valid");
        let cuts = [
            idx.entry_segment.offset + 1,
            idx.metadata_segment.offset,
            idx.metadata_segment.offset + 3,
            idx.storage_segment.offset,
            idx.storage_segment.offset + idx.storage_segment.length - 1,
        ];
        for cut in cuts {
            let r = parse_index(&full[..usize::try_from(cut).expect("small")]);
            assert!(matches!(r, Err(FormatProblem::SegmentOutOfFile { .. })), "cut at {cut}: {r:?}");
        }
    }

    #[test]
    fn entry_corruptions() {
        // entry 0 (DATA) starts at 96: size@96 type@104 name@116 metadata@132 storage@156
        assert!(matches!(
            parse_mutated(|b| put_u64(b, 96, 60)),
            Err(FormatProblem::BadEntrySize { index: 0, found: 60, expected: 76, .. })
        ));
        assert!(matches!(
            parse_mutated(|b| b[104] = 3),
            Err(FormatProblem::UnsupportedEntryType { index: 0, found: 3 })
        ));
        assert!(matches!(
            parse_mutated(|b| put_u64(b, 116 + 8, 1000)),
            Err(FormatProblem::MetadataRefOutOfRange { index: 0, what: "name", .. })
        ));
        assert!(matches!(
            parse_mutated(|b| put_u64(b, 156, 64)),
            Err(FormatProblem::StorageRefOutOfRange { index: 0, .. })
        ));
        assert!(matches!(
            parse_mutated(|b| put_u64(b, 156 + 8, u64::MAX)),
            Err(FormatProblem::StorageRefOutOfRange { end: u64::MAX, .. })
        ));
        // entry 1 (SPLAT) at 176: pattern_len@260
        for bad in [0u8, 3, 17] {
            assert!(
                matches!(parse_mutated(|b| b[260] = bad), Err(FormatProblem::BadSplat { index: 1, .. })),
                "pattern length {bad}"
            );
        }
        // length@236 = 18 is not a multiple of the 4-byte pattern.
        assert!(matches!(
            parse_mutated(|b| put_u64(b, 236, 18)),
            Err(FormatProblem::BadSplat { index: 1, pattern_len: 4, length: 18 })
        ));
        assert!(parse_mutated(|b| b[260] = 16).is_ok(), "a 16-byte pattern divides a 16-byte splat");
    }

    #[test]
    fn entry_count_must_match_the_table() {
        assert!(matches!(parse_mutated(|b| put_u64(b, 32, 4)), Err(FormatProblem::EntryTableMismatch { .. })));
        assert!(matches!(parse_mutated(|b| put_u64(b, 32, 2)), Err(FormatProblem::EntryTableMismatch { .. })));
        let r = parse_mutated(|b| put_u64(b, 32, u64::MAX));
        assert!(matches!(r, Err(FormatProblem::EntryTableMismatch { .. })), "{r:?}");
    }

    #[test]
    fn overlapping_data_entries_are_refused() {
        // entry 2 (DATA "bias", storage@272+60=332) pointed at entry 0's bytes.
        let r = parse_mutated(|b| put_u64(b, 332, 16));
        assert!(matches!(r, Err(FormatProblem::OverlappingEntries { first: 0, second: 2, .. })), "{r:?}");
    }

    #[test]
    fn zero_length_entries_are_valid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("z.irpa");
        let mut w = ArchiveWriter::new();
        w.add_data("empty", BytesSource(&[])).expect("add");
        w.add_data("one", BytesSource(&[1])).expect("add");
        w.write(&path).expect("write");
        let a = Archive::open(&path).expect("open");
        assert_eq!(a.get("empty").expect("empty").byte_len(), 0);
    }

    #[test]
    fn duplicate_and_non_utf8_keys_are_refused() {
        // Make entry 2's name point at entry 0's name ("weight" at 0..6).
        let r = parse_mutated(|b| {
            let e2 = 272;
            put_u64(b, e2 + 20, 0);
            put_u64(b, e2 + 28, 6);
        });
        assert!(matches!(r, Err(FormatProblem::DuplicateKey { first: 0, second: 2, .. })), "{r:?}");
        let r = parse_mutated(|b| {
            let meta = 272 + 76;
            b[meta] = 0xff;
        });
        assert!(matches!(r, Err(FormatProblem::KeyNotUtf8 { index: 0 })), "{r:?}");
    }

    #[test]
    fn open_reports_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("bad.irpa");
        std::fs::write(&p, b"short").expect("write");
        let e = Archive::open(&p).err().expect("must fail").to_string();
        assert!(e.contains("bad.irpa") && e.contains("shorter than the 88-byte"), "{e}");
    }
}
