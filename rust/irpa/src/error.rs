//! The one error type of this crate.

use std::path::PathBuf;

/// Everything that can go wrong while building, writing or reading an IRPA archive.
///
/// Each message says what happened, to which file or key, and what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IrpaError {
    /// Two entries were given the same key. IREE resolves a duplicate silently to the first one,
    /// so the writer refuses it instead.
    #[error(
        "duplicate parameter key {key:?}: every key in an archive must be unique (IREE would silently use the first); rename one of the entries"
    )]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },

    /// A splat pattern has a length IREE cannot store.
    #[error(
        "splat {key:?}: pattern of {pattern_len} bytes is not allowed; use 1, 2, 4, 8 or 16 bytes (one element of the tensor's dtype)"
    )]
    BadSplatPattern {
        /// The entry key.
        key: String,
        /// Length of the offending pattern.
        pattern_len: usize,
    },

    /// A splat's virtual length is not a whole number of patterns.
    #[error(
        "splat {key:?}: length {length} is not a multiple of the {pattern_len}-byte pattern; give the tensor's byte size (element count × element size)"
    )]
    SplatLengthNotMultiple {
        /// The entry key.
        key: String,
        /// Declared virtual length.
        length: u64,
        /// Pattern length in bytes.
        pattern_len: usize,
    },

    /// A payload produced more or fewer bytes than it declared. The archive is not written.
    #[error(
        "parameter {key:?}: its source declared {declared} bytes but produced {produced}{more}; nothing was written to the destination. This is a bug in the source (or the input changed while exporting)",
        more = if *.overflow { " or more" } else { "" }
    )]
    PayloadLengthMismatch {
        /// The entry key.
        key: String,
        /// Bytes the source promised.
        declared: u64,
        /// Bytes the source produced (up to the point the mismatch was detected).
        produced: u64,
        /// True when the source tried to write past its declared length.
        overflow: bool,
    },

    /// A payload source failed while producing bytes (a decoder error, a JVM error, …).
    #[error("parameter {key:?}: its data source failed: {source}")]
    Source {
        /// The entry key.
        key: String,
        /// The source's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// A size or offset computation does not fit in 64 bits.
    #[error("archive layout overflows 64 bits while placing {what}; the entries are too large to address")]
    LayoutOverflow {
        /// What was being placed when the overflow happened.
        what: String,
    },

    /// An I/O operation failed.
    #[error("{action} {path}: {source}{}", io_remedy(.source))]
    Io {
        /// What was being done ("cannot create temporary file in", "cannot read", …).
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// The file is not an IRPA archive, or is one that this reader (and IREE 3.13) cannot accept.
    #[error("{path}: not a valid IRPA archive: {problem}")]
    Format {
        /// The archive read.
        path: PathBuf,
        /// The precise problem.
        problem: FormatProblem,
    },

    /// A key asked for is not in the archive.
    #[error("{path}: no parameter with key {key:?}; run `tapeout dump {path}` to list the keys")]
    KeyNotFound {
        /// The archive read.
        path: PathBuf,
        /// The missing key.
        key: String,
    },
}

/// The precise reason an archive was rejected by the reader.
///
/// The wording follows IREE's parser where it has an equivalent, so messages can be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatProblem {
    /// The file is shorter than the fixed header.
    #[error("file is {size} bytes, shorter than the 88-byte IRPA header (truncated or empty file)")]
    TooShort {
        /// Actual file size.
        size: u64,
    },
    /// The magic bytes are wrong.
    #[error("IRPA file magic missing or invalid {found:08x}; expected 41505249 (\"IRPA\")")]
    BadMagic {
        /// The u32 found at offset 0.
        found: u32,
    },
    /// The version is not 0.0.
    #[error("IRPA version {major}.{minor} not supported; only 0.0 is (the version IREE 3.13 reads)")]
    UnsupportedVersion {
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },
    /// The header size field is not 88.
    #[error(
        "IRPA v0 header expected to be exactly 88 bytes but was reported as {found} (archives from the SKaiNET IrpaWriter report 40 and are not IREE archives)"
    )]
    BadHeaderSize {
        /// Value found.
        found: u64,
    },
    /// A chained archive; IREE 3.13 cannot read those correctly.
    #[error("next_header_offset is {found}, but chained archives are not supported (IREE 3.13 misreads them)")]
    ChainedArchive {
        /// Value found.
        found: u64,
    },
    /// A segment lies (partly) outside the file.
    #[error("{segment} segment out of range ({offset} to {end} for {length}, file_size={file_size})")]
    SegmentOutOfFile {
        /// Segment name.
        segment: &'static str,
        /// Segment offset.
        offset: u64,
        /// Segment length.
        length: u64,
        /// offset + length, saturated.
        end: u64,
        /// File size.
        file_size: u64,
    },
    /// The entry table does not hold the number of entries the header declares.
    #[error(
        "entry table of {table_len} bytes does not hold exactly the {declared} entries the header declares (entry {index} {detail})"
    )]
    EntryTableMismatch {
        /// Declared entry count.
        declared: u64,
        /// Table length in bytes.
        table_len: u64,
        /// Index of the entry where the mismatch was found.
        index: u64,
        /// What went wrong there.
        detail: &'static str,
    },
    /// An entry's size field is wrong for its type.
    #[error("entry {index}: entry_size {found} is invalid for a {kind} entry (expected {expected})")]
    BadEntrySize {
        /// Entry index.
        index: u64,
        /// Entry kind name.
        kind: &'static str,
        /// Size found.
        found: u64,
        /// Size required.
        expected: u64,
    },
    /// An entry type this reader (and IREE 3.13) does not support.
    #[error("entry {index}: entry type {found} is not supported (only 0 SKIP, 1 SPLAT and 2 DATA are)")]
    UnsupportedEntryType {
        /// Entry index.
        index: u64,
        /// Type value found.
        found: u32,
    },
    /// A splat pattern length that is not 1, 2, 4, 8 or 16, or does not divide the length.
    #[error("entry {index}: splat pattern length {pattern_len} is invalid for a {length}-byte splat")]
    BadSplat {
        /// Entry index.
        index: u64,
        /// Pattern length found.
        pattern_len: u8,
        /// Virtual length.
        length: u64,
    },
    /// A name or metadata reference points outside the metadata segment.
    #[error(
        "entry {index}: metadata segment reference out of range ({offset} to {end} for {length}, segment_size={segment_len}); resolving entry {what}"
    )]
    MetadataRefOutOfRange {
        /// Entry index.
        index: u64,
        /// "name" or "metadata".
        what: &'static str,
        /// Reference offset.
        offset: u64,
        /// Reference length.
        length: u64,
        /// offset + length, saturated.
        end: u64,
        /// Metadata segment length.
        segment_len: u64,
    },
    /// A data reference points outside the storage segment.
    #[error(
        "entry {index}: storage segment reference out of range ({offset} to {end} for {length}, segment_size={segment_len})"
    )]
    StorageRefOutOfRange {
        /// Entry index.
        index: u64,
        /// Reference offset.
        offset: u64,
        /// Reference length.
        length: u64,
        /// offset + length, saturated.
        end: u64,
        /// Storage segment length.
        segment_len: u64,
    },
    /// Two DATA entries share storage bytes.
    #[error(
        "entries {first} and {second} overlap in the storage segment ({first_end} > {second_start}); every DATA entry needs its own bytes"
    )]
    OverlappingEntries {
        /// Index of the entry that starts first.
        first: u64,
        /// Index of the entry that starts inside it.
        second: u64,
        /// End of the first entry's range (relative to the file).
        first_end: u64,
        /// Start of the second entry's range.
        second_start: u64,
    },
    /// A key is not valid UTF-8.
    #[error("entry {index}: key is not valid UTF-8 (tapeout keys are text, as in MLIR and IREE's Python API)")]
    KeyNotUtf8 {
        /// Entry index.
        index: u64,
    },
    /// Two entries share a key.
    #[error("entries {first} and {second} share the key {key:?}; IREE would silently use the first")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Index of the first entry.
        first: u64,
        /// Index of the second entry.
        second: u64,
    },
}

/// What to do about the write faults a user can fix (a full file system, a file-size limit), as the end of a
/// sentence; empty for any other error.
#[must_use]
pub fn io_remedy(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::StorageFull => "; free space on that file system or write the output elsewhere",
        std::io::ErrorKind::FileTooLarge => {
            "; the file-size limit (ulimit -f) or the file system's largest file is below the output's size"
        }
        _ => "",
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = IrpaError> = std::result::Result<T, E>;
