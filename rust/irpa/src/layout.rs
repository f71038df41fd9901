//! Byte layout of an IRPA v0 archive, reproducing IREE 3.13's builder byte for byte (large entries copied from a
//! file may start later, at their source offset modulo 64 KiB: see [`EntryShape::Data`]).
//!
//! The records themselves are the plain-old-data structs of `records` (packed, little-endian, their sizes
//! checked at compile time); this module places them.

use crate::error::{IrpaError, Result};

/// "IRPA" read as a little-endian u32.
pub const MAGIC: u32 = 0x4150_5249;
/// Size of the fixed header.
pub const HEADER_SIZE: u64 = 88;
/// Where the entry table starts: `align(88, 16)`.
pub const ENTRY_TABLE_OFFSET: u64 = 96;
/// Size of the header common to every entry.
pub const ENTRY_COMMON_SIZE: u64 = 60;
/// Size of a DATA entry (without trailing pad).
pub const DATA_ENTRY_SIZE: u64 = 76;
/// Size of a SPLAT entry (without trailing pad).
pub const SPLAT_ENTRY_SIZE: u64 = 85;
/// Entry alignment inside the table.
pub const ENTRY_ALIGNMENT: u64 = 16;
/// Alignment of every DATA payload in the storage segment.
pub const DATA_ALIGNMENT: u64 = 64;
/// The file is padded to a multiple of this.
pub const FILE_ALIGNMENT: u64 = 4096;
/// A large entry copied from a file is placed at its source offset modulo this (see [`EntryShape::Data`]).
pub const COPY_PHASE: u64 = 64 << 10;
/// The smallest entry placed by [`COPY_PHASE`]: its padding (under 64 KiB) stays under 0.8 % of it.
pub const COPY_PHASE_MIN_LEN: u64 = 8 << 20;

/// Entry type codes as stored on disk.
pub mod entry_type {
    /// Ignored by readers.
    pub const SKIP: u32 = 0;
    /// A repeated pattern that takes no storage.
    pub const SPLAT: u32 = 1;
    /// Bytes in the storage segment.
    pub const DATA: u32 = 2;
}

/// `value` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
#[must_use]
pub fn align_up(value: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    Some(value.checked_add(align - 1)? & !(align - 1))
}

/// A `{offset, length}` pair as stored on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Range {
    /// Start offset (relative to whatever the field's documentation says).
    pub offset: u64,
    /// Length in bytes.
    pub length: u64,
}

impl Range {
    /// `offset + length`, or `None` on overflow.
    #[must_use]
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.length)
    }
}

/// What the layout needs to know about one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryShape {
    /// A DATA entry with `len` payload bytes.
    Data {
        /// Payload byte length.
        len: u64,
        /// For bytes the kernel copies from a file: their offset in that file. An entry of at least
        /// [`COPY_PHASE_MIN_LEN`] whose source offset is 64-aligned is placed at that offset modulo [`COPY_PHASE`]
        /// (still 64-aligned), which IREE reads like any other placement. `copy_file_range` copies such an
        /// entry faster than one whose ends disagree modulo 64 KiB (the page cache fills whole large folios;
        /// docs/performance.md#writing-archives), and a file system that shares
        /// extents needs the ends congruent to share them.
        /// `None` places the entry exactly as IREE's builder does.
        file_offset: Option<u64>,
    },
    /// A SPLAT entry (takes no storage).
    Splat,
}

/// Where one entry's pieces go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPlacement {
    /// Absolute file offset of the entry record.
    pub record_offset: u64,
    /// Name range, relative to the metadata segment.
    pub name: Range,
    /// Metadata range, relative to the metadata segment (`{0, 0}` when absent).
    pub metadata: Range,
    /// Storage range relative to the storage segment (DATA only).
    pub storage: Option<Range>,
}

/// The full placement of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Entry segment, absolute.
    pub entry_segment: Range,
    /// Metadata segment, absolute.
    pub metadata_segment: Range,
    /// Storage segment, absolute.
    pub storage_segment: Range,
    /// One placement per entry, in order.
    pub entries: Vec<EntryPlacement>,
    /// Total file size, padded to 4096.
    pub file_size: u64,
}

fn overflow(what: &str) -> IrpaError {
    IrpaError::LayoutOverflow { what: what.to_owned() }
}

/// Places entries exactly as IREE's `iree_io_build_parameter_archive` does, except that a large entry copied from
/// a file may be placed later, at its source offset modulo [`COPY_PHASE`] (see [`EntryShape::Data`]).
///
/// `entries` yields `(shape, name_len, metadata_len)` in archive order.
pub fn compute<I>(entries: I) -> Result<Layout>
where
    I: IntoIterator<Item = (EntryShape, u64, u64)>,
{
    let mut pos = ENTRY_TABLE_OFFSET;
    let mut meta_len: u64 = 0;
    let mut has_data = false;
    let mut placements = Vec::new();
    let mut shapes = Vec::new();

    for (shape, name_len, md_len) in entries {
        let record_offset = align_up(pos, ENTRY_ALIGNMENT).ok_or_else(|| overflow("entry table"))?;
        let record_size = match shape {
            EntryShape::Data { .. } => DATA_ENTRY_SIZE,
            EntryShape::Splat => SPLAT_ENTRY_SIZE,
        };
        pos = record_offset.checked_add(record_size).ok_or_else(|| overflow("entry table"))?;

        let name = Range { offset: meta_len, length: name_len };
        meta_len = meta_len.checked_add(name_len).ok_or_else(|| overflow("names"))?;
        let metadata = if md_len == 0 {
            Range::default()
        } else {
            let r = Range { offset: meta_len, length: md_len };
            meta_len = meta_len.checked_add(md_len).ok_or_else(|| overflow("metadata"))?;
            r
        };

        has_data |= matches!(shape, EntryShape::Data { .. });
        shapes.push(shape);
        placements.push(EntryPlacement { record_offset, name, metadata, storage: None });
    }

    let entry_segment = Range { offset: ENTRY_TABLE_OFFSET, length: pos - ENTRY_TABLE_OFFSET };
    let metadata_segment = Range { offset: pos, length: meta_len };
    let meta_end = metadata_segment.end().ok_or_else(|| overflow("metadata"))?;
    // The storage alignment is the first DATA entry's (64); without one the segment is not aligned.
    let storage_offset =
        align_up(meta_end, if has_data { DATA_ALIGNMENT } else { 1 }).ok_or_else(|| overflow("storage"))?;
    let mut storage_len: u64 = 0;
    for (shape, placement) in shapes.into_iter().zip(&mut placements) {
        let EntryShape::Data { len, file_offset } = shape else { continue };
        let mut off = align_up(storage_len, DATA_ALIGNMENT).ok_or_else(|| overflow("storage"))?;
        if let Some(source) = file_offset.filter(|s| s % DATA_ALIGNMENT == 0 && len >= COPY_PHASE_MIN_LEN) {
            // Both phases are multiples of 64 (the segment starts 64-aligned), so the entry stays 64-aligned.
            let phase = (storage_offset % COPY_PHASE + off % COPY_PHASE) % COPY_PHASE;
            off = off
                .checked_add((source % COPY_PHASE + COPY_PHASE - phase) % COPY_PHASE)
                .ok_or_else(|| overflow("storage"))?;
        }
        storage_len = off.checked_add(len).ok_or_else(|| overflow("storage"))?;
        placement.storage = Some(Range { offset: off, length: len });
    }
    let storage_segment = Range { offset: storage_offset, length: storage_len };
    let storage_end = storage_segment.end().ok_or_else(|| overflow("storage"))?;
    let file_size = align_up(storage_end, FILE_ALIGNMENT).ok_or_else(|| overflow("file padding"))?;

    Ok(Layout { entry_segment, metadata_segment, storage_segment, entries: placements, file_size })
}

/// Serialises the 88-byte header.
pub(crate) fn encode_header(layout: &Layout, entry_count: u64, out: &mut Vec<u8>) {
    use crate::records::{Header, U16Le, U32Le, U64Le};
    let header = Header {
        magic: U32Le::new(MAGIC),
        version_major: U16Le::new(0),
        version_minor: U16Le::new(0),
        header_size: U64Le::new(HEADER_SIZE),
        next_header_offset: U64Le::new(0), // chains are broken in IREE 3.13
        flags: U64Le::new(0),
        entry_count: U64Le::new(entry_count),
        entry_segment: layout.entry_segment.into(),
        metadata_segment: layout.metadata_segment.into(),
        storage_segment: layout.storage_segment.into(),
    };
    out.extend_from_slice(bytemuck::bytes_of(&header));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotated_example_from_the_format_reference() {
        // weight: 4x3 f32 = 48 B under a 6-byte key, bias: 3 f32 = 12 B under a 4-byte key; the expected offsets
        // are the ones IREE's builder writes for these two entries (two 76-byte DATA records from 96, then the
        // keys, then storage 64-aligned).
        let l = compute([
            (EntryShape::Data { len: 48, file_offset: None }, 6, 0),
            (EntryShape::Data { len: 12, file_offset: None }, 4, 0),
        ])
        .expect("layout");
        assert_eq!(l.entry_segment, Range { offset: 96, length: 156 });
        assert_eq!(l.metadata_segment, Range { offset: 252, length: 10 });
        assert_eq!(l.storage_segment, Range { offset: 320, length: 76 });
        assert_eq!(l.entries[0].record_offset, 96);
        assert_eq!(l.entries[1].record_offset, 176);
        assert_eq!(l.entries[1].name, Range { offset: 6, length: 4 });
        assert_eq!(l.entries[1].storage, Some(Range { offset: 64, length: 12 }));
        assert_eq!(l.file_size, 4096);
    }

    #[test]
    fn splat_first_variant_from_the_format_reference() {
        let l = compute([(EntryShape::Splat, 1, 0), (EntryShape::Data { len: 12, file_offset: None }, 1, 0)])
            .expect("layout");
        assert_eq!(l.entries[0].record_offset, 96);
        assert_eq!(l.entries[1].record_offset, 192);
        assert_eq!(l.entry_segment, Range { offset: 96, length: 172 });
        assert_eq!(l.metadata_segment, Range { offset: 268, length: 2 });
        assert_eq!(l.storage_segment, Range { offset: 320, length: 12 });
    }

    #[test]
    fn empty_archive_is_one_page() {
        let l = compute(std::iter::empty()).expect("layout");
        let empty = Range { offset: 96, length: 0 };
        assert_eq!((l.entry_segment, l.metadata_segment, l.storage_segment), (empty, empty, empty));
        assert_eq!(l.file_size, 4096);
    }

    #[test]
    fn splat_only_storage_is_unaligned() {
        let l = compute([(EntryShape::Splat, 3, 0)]).expect("layout");
        assert_eq!(l.storage_segment, Range { offset: 96 + 85 + 3, length: 0 });
    }

    #[test]
    fn metadata_follows_its_name() {
        let l = compute([
            (EntryShape::Data { len: 1, file_offset: None }, 2, 5),
            (EntryShape::Data { len: 1, file_offset: None }, 3, 0),
        ])
        .expect("layout");
        assert_eq!(l.entries[0].metadata, Range { offset: 2, length: 5 });
        assert_eq!(l.entries[1].name, Range { offset: 7, length: 3 });
        assert_eq!(l.entries[1].metadata, Range::default());
    }

    #[test]
    fn sizes_beyond_32_bits_are_placed_exactly() {
        let big = 5 * (1u64 << 30);
        let l = compute([
            (EntryShape::Data { len: big, file_offset: None }, 1, 0),
            (EntryShape::Data { len: 4, file_offset: None }, 1, 0),
        ])
        .expect("layout");
        let second = l.entries[1].storage.expect("data");
        assert_eq!(second.offset, big); // 5 GiB is already 64-aligned
        assert!(l.storage_segment.offset + second.offset > u64::from(u32::MAX));
    }

    fn absolute(l: &Layout, i: usize) -> u64 {
        l.storage_segment.offset + l.entries[i].storage.expect("data").offset
    }

    #[test]
    fn a_large_file_copy_lands_at_its_source_offset_modulo_64_kib() {
        let big = COPY_PHASE_MIN_LEN;
        let data = |len, file_offset| (EntryShape::Data { len, file_offset }, 4, 0);
        let l = compute([
            data(12, None),
            data(big, Some(0)),                     // a whole file (pack): 64 KiB-aligned
            data(big, Some(3 * COPY_PHASE + 4160)), // a tensor of a checkpoint: the same offset modulo 64 KiB
            data(big, Some(1032)),                  // not 64-aligned: IREE's placement (the data stays 64-aligned)
            data(big - 1, Some(0)),                 // too small to pay padding for
            data(7, None),
        ])
        .expect("layout");
        assert_eq!(absolute(&l, 1) % COPY_PHASE, 0);
        assert_eq!(absolute(&l, 2) % COPY_PHASE, 4160);
        for i in 0..6 {
            assert_eq!(absolute(&l, i) % DATA_ALIGNMENT, 0, "entry {i} is 64-aligned");
        }
        for i in 1..3 {
            let previous_end = l.entries[i - 1].storage.and_then(|r| r.end()).expect("end");
            assert!(l.entries[i].storage.expect("data").offset - previous_end < COPY_PHASE, "padding under 64 KiB");
        }
        let iree_like = |i: usize| {
            let end = l.entries[i - 1].storage.and_then(|r| r.end()).expect("end");
            align_up(end, DATA_ALIGNMENT).expect("align")
        };
        for i in [3, 4, 5] {
            assert_eq!(l.entries[i].storage.expect("data").offset, iree_like(i), "entry {i} placed as IREE does");
        }
        let none = compute([data(12, None), data(big, None)]).expect("layout");
        assert_eq!(none.entries[1].storage.expect("data").offset, 64, "without a file offset: IREE's placement");
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let r = compute([
            (EntryShape::Data { len: u64::MAX - 10, file_offset: None }, 1, 0),
            (EntryShape::Data { len: 100, file_offset: None }, 1, 0),
        ]);
        assert!(matches!(r, Err(IrpaError::LayoutOverflow { .. })), "{r:?}");
    }

    #[test]
    fn header_is_88_bytes_little_endian() {
        let l = compute([(EntryShape::Data { len: 48, file_offset: None }, 6, 0)]).expect("layout");
        let mut buf = Vec::new();
        encode_header(&l, 1, &mut buf);
        assert_eq!(buf.len(), 88);
        assert_eq!(&buf[0..4], b"IRPA");
        assert_eq!(&buf[8..16], &88u64.to_le_bytes());
        assert_eq!(&buf[32..40], &1u64.to_le_bytes());
    }
}
