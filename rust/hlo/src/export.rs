//! Export in one pass: the module text, and every external constant streamed into the archive.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, channel, sync_channel};

use tapeout_graph::{ComputeGraph, ConstantData};
use tapeout_irpa::{ArchiveWriter, AtomicFile, Progress, WriteSummary};

use crate::emit::{EmitOptions, ExternalParameter, SPILL_BYTES, TextOut, emit_into};
use crate::error::{HloError, Result};

/// What [`export`] wrote.
#[derive(Debug, Clone)]
pub struct ExportSummary {
    /// The module file (`<dir>/<name>.mlir`).
    pub mlir: PathBuf,
    /// Its size in bytes.
    pub mlir_bytes: u64,
    /// The parameter archive (`<dir>/<name>.irpa`).
    pub irpa: WriteSummary,
    /// Number of external parameters.
    pub externals: usize,
    /// Number of constants written inline.
    pub inline_constants: usize,
}

/// Longest file stem written: file names are limited to 255 bytes, and the writer adds a temp suffix.
const MAX_STEM: usize = 96;

/// The file stem for a module name: letters, digits, `.`, `-` and `_` kept, the rest `_`; at most 96
/// bytes, a longer name cut and given a hash of the whole name, so distinct names stay distinct.
#[must_use]
pub fn file_stem(module_name: &str) -> String {
    let stem: String =
        module_name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    let stem = if stem.is_empty() || stem.starts_with('.') { format!("model{stem}") } else { stem };
    if stem.len() <= MAX_STEM {
        return stem;
    }
    // FNV-1a of the full module name: stable across runs and platforms.
    let hash =
        module_name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("{}-{hash:016x}", &stem[..MAX_STEM - 17])
}

/// The metadata blob stored with each archive entry: dtype, shape, and the stored form it was
/// converted from (so the archive describes itself; IREE ignores it).
fn metadata(graph: &ComputeGraph<'_>, data: &ConstantData<'_>, tensor: tapeout_graph::TensorId) -> Vec<u8> {
    let spec = graph.spec(tensor);
    let mut m = serde_json::json!({
        "dtype": data.dtype().name(),
        "shape": spec.shape.static_dims().unwrap_or_default(),
    });
    match data {
        ConstantData::Widen { from, .. } => m["from"] = from.name().into(),
        ConstantData::Dequantize { encoding, .. } => m["from"] = encoding.name().into(),
        _ => {}
    }
    format!("TENSORv0:{m}").into_bytes()
}

/// Writes `<out_dir>/<name>.mlir` and `<out_dir>/<name>.irpa` for `graph`.
///
/// External constants are streamed from their sources (borrowed f32, lazily widened or
/// dequantized) through the archive writer: peak extra memory is one chunk. Both files are written
/// atomically: the module is emitted first into its temporary file (so an emission error stops the
/// export before any archive work), then the archive is written, then the module is committed.
pub fn export(
    graph: &ComputeGraph<'_>,
    opts: &EmitOptions,
    out_dir: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<ExportSummary> {
    std::fs::create_dir_all(out_dir).map_err(|source| HloError::Io { path: out_dir.to_path_buf(), source })?;
    let stem = file_stem(&opts.module_name);
    let mlir = out_dir.join(format!("{stem}.mlir"));

    // The module first, uncommitted: an emission error stops the export before any archive work.
    let mut module_file = AtomicFile::create(&mlir)?;
    let externals = pipelined(module_file.file(), |out| emit_into(graph, opts, out)).map_err(|e| e.at(&mlir))?;
    let mlir_bytes = module_file.file().metadata().map_err(|source| HloError::Io { path: mlir.clone(), source })?.len();

    let mut writer = ArchiveWriter::new();
    for ext in &externals {
        let constant = graph.constant(ext.tensor).ok_or_else(|| HloError::Unsupported {
            node: String::new(),
            op: String::new(),
            detail: format!("external parameter {:?} has no constant", ext.key),
        })?;
        writer.add_data_with_metadata(ext.key.clone(), metadata(graph, &constant.data, ext.tensor), &constant.data)?;
    }
    let irpa = writer.write_with_progress(out_dir.join(format!("{stem}.irpa")), progress)?;
    module_file.commit()?;
    Ok(ExportSummary {
        mlir,
        mlir_bytes,
        irpa,
        externals: externals.len(),
        inline_constants: graph.constants.len() - externals.len(),
    })
}

/// Emits the module into `sink` like [`emit_to`], but converts on this thread while a second thread writes
/// the previous megabyte: what [`export`] does, and the fastest way to put a module with large inline
/// constants into a file. A write error is [`HloError::Output`].
///
/// # Errors
/// As [`emit_to`]; and the sink's first write error.
pub fn emit_pipelined<W: Write + Send>(
    graph: &ComputeGraph<'_>,
    opts: &EmitOptions,
    sink: W,
) -> Result<Vec<ExternalParameter>> {
    pipelined(sink, |out| emit_into(graph, opts, out)).map_err(|e| match e {
        PipeError::Produce(e) => e,
        PipeError::Sink(e) => HloError::Output(e),
    })
}

/// Why [`pipelined`] failed: the producer's error, or the sink's I/O error (reported first: it is the cause
/// when both happened).
enum PipeError {
    Produce(HloError),
    Sink(std::io::Error),
}

impl PipeError {
    fn at(self, path: &Path) -> HloError {
        match self {
            PipeError::Produce(e) => e,
            PipeError::Sink(source) => HloError::Io { path: path.to_path_buf(), source },
        }
    }
}

/// Runs `produce` with a [`TextOut`] whose pending text buffers are written to `sink` by a second thread, so
/// that producing the text (hex conversion of inline constants) overlaps the kernel's copy of the previous
/// buffer into the page cache. Buffers change hands without a copy and are recycled; at most three exist
/// at a time. `sink` is flushed at the end.
fn pipelined<W: Write + Send, T>(
    sink: W,
    produce: impl FnOnce(&mut dyn TextOut) -> Result<T>,
) -> std::result::Result<T, PipeError> {
    std::thread::scope(|scope| {
        let (full_tx, full_rx) = sync_channel::<String>(1);
        let (empty_tx, empty_rx) = channel::<String>();
        let writer = scope.spawn(move || -> std::io::Result<()> {
            let mut sink = sink;
            for mut text in full_rx {
                sink.write_all(text.as_bytes())?;
                text.clear();
                let _ = empty_tx.send(text); // the producer may be done already
            }
            sink.flush()
        });
        let mut pipe = Pipe { full: full_tx, empty: empty_rx };
        let produced = produce(&mut pipe);
        drop(pipe); // closes the channel: the writer drains what was sent and ends
        let written = writer.join().unwrap_or_else(|_| Err(std::io::Error::other("the module writer thread panicked")));
        written.map_err(PipeError::Sink)?;
        produced.map_err(PipeError::Produce)
    })
}

/// The producer's side of [`pipelined`].
struct Pipe {
    full: SyncSender<String>,
    empty: Receiver<String>,
}

impl TextOut for Pipe {
    fn take(&mut self, text: &mut String) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let next = self.empty.try_recv().unwrap_or_else(|_| String::with_capacity(2 * SPILL_BYTES));
        let full = std::mem::replace(text, next);
        self.full.send(full).map_err(|_| std::io::Error::other("the module writer stopped"))
    }
}

#[cfg(test)]
mod tests {
    use super::{PipeError, file_stem, pipelined};
    use crate::emit::{SPILL_BYTES, TextOut};
    use crate::error::HloError;
    use std::io::Write;

    const PIPE_BYTES: usize = SPILL_BYTES;

    fn send(out: &mut dyn TextOut, bytes: &[u8]) -> Result<(), HloError> {
        let mut text: String = bytes.iter().map(|&b| char::from(b'a' + b % 26)).collect();
        out.take(&mut text).map_err(HloError::Output)?;
        assert!(text.is_empty(), "take leaves the text empty");
        Ok(())
    }

    #[test]
    fn pipelined_writes_every_byte_in_order() {
        let mut sink = Vec::new();
        let raw: Vec<u8> = (0..(3 * PIPE_BYTES + 12_345)).map(|i| u8::try_from(i % 251).unwrap_or(0)).collect();
        let want: Vec<u8> = raw.iter().map(|&b| b'a' + b % 26).collect();
        let n = pipelined(&mut sink, |out| {
            for piece in raw.chunks(777_777) {
                send(out, piece)?;
            }
            Ok(want.len())
        })
        .unwrap_or_else(|_| panic!("pipelined failed"));
        assert_eq!(n, want.len());
        assert_eq!(sink, want);
    }

    /// Fails after `left` bytes, like a full disk.
    struct Full {
        left: usize,
    }
    impl Write for Full {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left"));
            }
            let n = b.len().min(self.left);
            self.left -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_sink_error_is_reported_as_the_cause() {
        let r = pipelined(Full { left: PIPE_BYTES + 10 }, |out| {
            for _ in 0..8 {
                send(out, &[7u8; PIPE_BYTES])?;
            }
            Ok(())
        });
        match r {
            Err(PipeError::Sink(e)) => assert_eq!(e.kind(), std::io::ErrorKind::StorageFull),
            _ => panic!("expected the sink's error"),
        }
    }

    #[test]
    fn a_producer_error_stops_without_writing_the_rest() {
        let mut sink = Vec::new();
        let r: Result<(), PipeError> = pipelined(&mut sink, |out| {
            send(out, &[1u8; 10])?;
            Err(HloError::Output(std::io::Error::other("emitter failed")))
        });
        assert!(matches!(r, Err(PipeError::Produce(HloError::Output(_)))));
        assert_eq!(sink.len(), 10, "what was taken before the failure is written; nothing after");
    }

    #[test]
    fn stems_are_safe_short_and_distinct() {
        assert_eq!(file_stem("tiny_llm"), "tiny_llm");
        assert_eq!(file_stem("odd \"module\"/names"), "odd__module__names");
        assert_eq!(file_stem(".hidden"), "model.hidden");
        let (a, b) = (file_stem(&"x".repeat(1000)), file_stem(&format!("{}y", "x".repeat(999))));
        assert_eq!(a.len(), 96);
        assert_ne!(a, b, "long names that differ only at the end stay distinct");
    }
}
