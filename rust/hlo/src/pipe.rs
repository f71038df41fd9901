//! Module text written on a second thread while the emitter converts: the fastest way to put a module with
//! large inline constants into a file.

use std::io::Write;
use std::sync::mpsc::{Receiver, SyncSender, channel, sync_channel};

use tapeout_graph::ComputeGraph;

use crate::emit::{EmitOptions, ExternalParameter, SPILL_BYTES, TextOut, emit_functions_into};
use crate::error::{HloError, Result};

/// Emits the module into `sink` like [`crate::emit_to`], but converts on this thread while a second thread writes
/// the previous megabyte: what the pipeline's export (`tapeout`) does, and the fastest way to put a module with large inline
/// constants into a file. A write error is [`HloError::Output`].
///
/// # Errors
/// As [`crate::emit_to`]; and the sink's first write error.
pub fn emit_pipelined<W: Write + Send>(
    graph: &ComputeGraph<'_>,
    opts: &EmitOptions,
    sink: W,
) -> Result<Vec<ExternalParameter>> {
    emit_functions_pipelined(&[(opts.function.as_str(), graph)], opts, sink)
}

/// [`emit_pipelined`] for a module of several public functions sharing parameters (`(name, graph)` each;
/// [`EmitOptions::function`] is not used): a constant used under one key by several functions is one
/// `util.global`, and [`ExternalParameter::function`] says which graph holds it.
///
/// # Errors
/// As [`emit_pipelined`]; two functions with one name, or one key with two types, name them.
pub fn emit_functions_pipelined<W: Write + Send>(
    functions: &[(&str, &ComputeGraph<'_>)],
    opts: &EmitOptions,
    sink: W,
) -> Result<Vec<ExternalParameter>> {
    pipelined(sink, |out| emit_functions_into(functions, opts, out)).map_err(|e| match e {
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
    use super::{PipeError, pipelined};
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
}
