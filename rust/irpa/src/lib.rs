//! IRPA v0 — the IREE parameter archive — written and read exactly as IREE 3.13 does.
//!
//! * [`ArchiveWriter`] streams payloads from [`ByteSource`]s in bounded chunks into a temporary
//!   file beside the destination, then syncs and renames it into place. Its output is
//!   byte-identical to IREE's own builder (`iree.runtime.ParameterIndex.create_archive_file`), except that a
//!   large entry copied from a file starts at its source offset modulo 64 KiB, where the kernel copies it
//!   fastest ([`ArchiveWriter::iree_placement`] turns that off).
//! * [`Archive`] memory-maps an archive, validates every field with checked arithmetic, and hands
//!   out zero-copy views of the entries.
//!
//! Every size and offset is a `u64`; everything on disk is little-endian whatever the host.
#![deny(missing_docs)]

mod error;
mod layout;
mod reader;
mod records;
mod source;
mod writer;

pub use error::{FormatProblem, IrpaError, Result, io_remedy};
pub use layout::{EntryPlacement, Layout, Range};
pub use reader::{Archive, Entry, Index, IndexEntry, IndexKind, Payload, parse_index};
pub use source::{
    ByteSource, BytesSource, ChunkSink, F32Source, FileRegionSource, FnSource, MAX_CHUNK_BYTES, ZerosSource,
};
pub use writer::{ArchiveWriter, AtomicFile, Progress, WriteSummary, write_atomically};
