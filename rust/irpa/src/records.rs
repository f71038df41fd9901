//! The fixed-size on-disk records of IRPA v0 as plain-old-data structs, used by both the writer and the
//! reader.
//!
//! IREE declares them `#pragma pack(1)`: a u64 follows a u32 with no padding, so a naturally aligned
//! `#[repr(C)]` DATA entry would be 80 bytes instead of 76 (exactly the bug of a writer IREE rejects).
//! Every field here is therefore a little-endian byte array wrapper of alignment 1: the structs have no
//! padding, are little-endian whatever the host, and their sizes are checked at compile time.

use bytemuck::{Pod, Zeroable};

use crate::layout::Range;

macro_rules! le_int {
    ($name:ident, $int:ty, $n:literal) => {
        /// A little-endian integer of alignment 1.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Pod, Zeroable)]
        #[repr(transparent)]
        pub(crate) struct $name([u8; $n]);

        impl $name {
            pub(crate) fn new(v: $int) -> Self {
                Self(v.to_le_bytes())
            }
            pub(crate) fn get(self) -> $int {
                <$int>::from_le_bytes(self.0)
            }
        }
    };
}

le_int!(U16Le, u16, 2);
le_int!(U32Le, u32, 4);
le_int!(U64Le, u64, 8);

/// `{u64 offset, u64 length}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct RangeLe {
    pub(crate) offset: U64Le,
    pub(crate) length: U64Le,
}

impl From<Range> for RangeLe {
    fn from(r: Range) -> Self {
        Self { offset: U64Le::new(r.offset), length: U64Le::new(r.length) }
    }
}

impl From<RangeLe> for Range {
    fn from(r: RangeLe) -> Self {
        Range { offset: r.offset.get(), length: r.length.get() }
    }
}

/// The archive header at offset 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct Header {
    pub(crate) magic: U32Le,
    pub(crate) version_major: U16Le,
    pub(crate) version_minor: U16Le,
    pub(crate) header_size: U64Le,
    pub(crate) next_header_offset: U64Le,
    pub(crate) flags: U64Le,
    pub(crate) entry_count: U64Le,
    pub(crate) entry_segment: RangeLe,
    pub(crate) metadata_segment: RangeLe,
    pub(crate) storage_segment: RangeLe,
}

/// The header every entry starts with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct EntryCommon {
    pub(crate) entry_size: U64Le,
    pub(crate) entry_type: U32Le,
    pub(crate) flags: U64Le,
    pub(crate) name: RangeLe,
    pub(crate) metadata: RangeLe,
    pub(crate) minimum_alignment: U64Le,
}

/// A DATA entry: bytes in the storage segment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct DataEntry {
    pub(crate) common: EntryCommon,
    pub(crate) storage: RangeLe,
}

/// A SPLAT entry: a repeated pattern that takes no storage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct SplatEntry {
    pub(crate) common: EntryCommon,
    pub(crate) length: U64Le,
    pub(crate) pattern: [u8; 16],
    pub(crate) pattern_length: u8,
}

// A layout mistake fails the build, not a test.
const _: () = assert!(size_of::<Header>() as u64 == crate::layout::HEADER_SIZE);
const _: () = assert!(size_of::<EntryCommon>() as u64 == crate::layout::ENTRY_COMMON_SIZE);
const _: () = assert!(size_of::<DataEntry>() as u64 == crate::layout::DATA_ENTRY_SIZE);
const _: () = assert!(size_of::<SplatEntry>() as u64 == crate::layout::SPLAT_ENTRY_SIZE);
const _: () = assert!(align_of::<Header>() == 1 && align_of::<DataEntry>() == 1 && align_of::<SplatEntry>() == 1);

/// The record of type `T` at `at` in `bytes`, when the bytes are there.
pub(crate) fn read<T: Pod>(bytes: &[u8], at: usize) -> Option<T> {
    let end = at.checked_add(size_of::<T>())?;
    bytes.get(at..end).map(bytemuck::pod_read_unaligned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_at_the_reference_offsets() {
        let mut h = Header::zeroed();
        h.entry_count = U64Le::new(0x0102_0304_0506_0708);
        h.storage_segment.length = U64Le::new(7);
        let b = bytemuck::bytes_of(&h);
        assert_eq!(&b[32..40], &0x0102_0304_0506_0708u64.to_le_bytes(), "entry_count at 32");
        assert_eq!(&b[80..88], &7u64.to_le_bytes(), "storage_segment.length at 80");

        let mut e = SplatEntry::zeroed();
        e.common.entry_type = U32Le::new(1);
        e.common.minimum_alignment = U64Le::new(9);
        e.length = U64Le::new(12);
        e.pattern_length = 4;
        let b = bytemuck::bytes_of(&e);
        assert_eq!(&b[8..12], &1u32.to_le_bytes(), "type at 8");
        assert_eq!(&b[52..60], &9u64.to_le_bytes(), "minimum_alignment at 52");
        assert_eq!(&b[60..68], &12u64.to_le_bytes(), "length at 60");
        assert_eq!(b[84], 4, "pattern_length at 84");
    }

    #[test]
    fn reading_past_the_end_is_none() {
        let bytes = [0u8; 100];
        assert!(read::<Header>(&bytes, 0).is_some());
        assert!(read::<Header>(&bytes, 13).is_none());
        assert!(read::<DataEntry>(&bytes, usize::MAX - 3).is_none());
    }
}
