//! Graph constants as archive payloads: the one place where the graph's streaming meets the archive
//! writer, and where each side's errors are put back in the other's terms.

use tapeout_graph::{ByteSink, ConstantData, StreamError};
use tapeout_irpa::{ByteSource, ChunkSink, IrpaError};

/// A constant's values as an archive payload, streamed from the memory it borrows (one chunk at a
/// time for widened or dequantized data). `ConstantData` only describes borrowed memory, so a copy of it
/// is a few words: the payload holds its own.
#[derive(Debug, Clone)]
pub struct ConstantPayload<'a>(pub ConstantData<'a>);

/// The archive entry being written, as the graph's byte sink.
struct Entry<'s, 'w>(&'s mut ChunkSink<'w>);

impl ByteSink for Entry<'_, '_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), StreamError> {
        self.0.write(bytes).map_err(|e| StreamError::Sink(Box::new(e)))
    }
}

impl ByteSource for ConstantPayload<'_> {
    fn byte_len(&self) -> u64 {
        self.0.byte_len()
    }

    fn write_into(&mut self, sink: &mut ChunkSink<'_>) -> Result<(), IrpaError> {
        let streamed = self.0.stream(&mut Entry(sink));
        streamed.map_err(|e| match e {
            // The writer's own error (disk full, length mismatch) comes back as it was.
            StreamError::Sink(b) => match b.downcast::<IrpaError>() {
                Ok(e) => *e,
                Err(other) => sink.fail(other),
            },
            // A lender's or decoder's failure is this entry's source failing.
            other => sink.fail(other),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeout_graph::{ChunkLender, Lent};
    use tapeout_irpa::ArchiveWriter;

    /// A lender that fails on its second chunk, like a JVM that cannot pin an array.
    struct Failing;
    impl ChunkLender<f32> for Failing {
        fn len(&self) -> u64 {
            tapeout_graph::PASSTHROUGH_VALUES * 2
        }
        fn with_chunk(
            &self,
            start: u64,
            len: u64,
            f: &mut dyn FnMut(&[f32]) -> Result<(), StreamError>,
        ) -> Result<(), StreamError> {
            if start > 0 {
                return Err(StreamError::Lend("pinning failed".into()));
            }
            f(&vec![1.0; usize::try_from(len).map_err(|e| StreamError::Lend(e.into()))?])
        }
    }

    #[test]
    fn a_lender_failure_names_the_entry_and_leaves_no_archive() {
        let dir = tempfile::tempdir().unwrap();
        let data = ConstantData::F32(Lent::Chunked(&Failing));
        let mut w = ArchiveWriter::new();
        w.add_data("model.w", ConstantPayload(data)).unwrap();
        let path = dir.path().join("a.irpa");
        let e = w.write(&path).unwrap_err();
        assert!(matches!(&e, IrpaError::Source { key, .. } if key == "model.w"), "{e}");
        assert!(e.to_string().contains("pinning failed"), "{e}");
        assert!(!path.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the temporary file is removed");
    }
}
