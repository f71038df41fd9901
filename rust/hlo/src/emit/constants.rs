//! Where each constant goes (an external parameter or inline hex), and the hex sink that streams it.

use tapeout_graph::{ConstantData, DType, Shape, StreamError};

use super::{MaterializationPolicy, SPILL_BYTES, TextOut};
use crate::error::HloError;
use crate::text::push_hex;

pub(crate) fn is_external(policy: &MaterializationPolicy, data: &ConstantData<'_>, shape: &Shape) -> Option<String> {
    if shape.rank() == 0 || data.dtype() == DType::Bool {
        return None;
    }
    // i4/i2 codes (a packed weight kept packed) are packed several per byte, which inline hex cannot say: external
    // whatever their size, whenever the policy has a scope.
    if data.dtype().is_sub_byte() {
        return match policy {
            MaterializationPolicy::InlineAlways => None,
            MaterializationPolicy::ExternalAlways { scope } | MaterializationPolicy::SizeThreshold { scope, .. } => {
                Some(scope.clone())
            }
        };
    }
    match policy {
        MaterializationPolicy::InlineAlways => None,
        MaterializationPolicy::ExternalAlways { scope } => Some(scope.clone()),
        MaterializationPolicy::SizeThreshold { bytes, scope } => (data.byte_len() >= *bytes).then(|| scope.clone()),
    }
}

/// Checks whether every element of `data` equals the first (a splat), streaming.
pub(crate) fn splat_element(data: &ConstantData<'_>) -> Result<Option<Vec<u8>>, StreamError> {
    struct Probe {
        width: usize,
        first: Vec<u8>,
        carry: Vec<u8>,
        uniform: bool,
    }
    impl Probe {
        /// Compares one element with the first; false once a difference is seen.
        fn check(first: &mut Vec<u8>, e: &[u8]) -> bool {
            if first.is_empty() {
                first.extend_from_slice(e);
                true
            } else {
                first.as_slice() == e
            }
        }
    }
    impl tapeout_graph::ByteSink for Probe {
        fn put(&mut self, mut bytes: &[u8]) -> Result<(), StreamError> {
            if !self.uniform {
                return Ok(());
            }
            // Complete an element split across chunks; compare the rest in place (no copy).
            if !self.carry.is_empty() {
                let take = (self.width - self.carry.len()).min(bytes.len());
                self.carry.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if self.carry.len() == self.width {
                    self.uniform = Self::check(&mut self.first, &self.carry);
                    self.carry.clear();
                }
            }
            let whole = bytes.len() / self.width * self.width;
            for e in bytes[..whole].chunks_exact(self.width) {
                if !Self::check(&mut self.first, e) {
                    self.uniform = false;
                    return Ok(());
                }
            }
            self.carry.extend_from_slice(&bytes[whole..]);
            Ok(())
        }
    }
    #[allow(clippy::cast_possible_truncation)] // a dtype's byte width is 1 to 8
    let width = data.dtype().byte_width() as usize;
    let mut p = Probe { width, first: Vec::new(), carry: Vec::new(), uniform: true };
    data.stream(&mut p)?;
    Ok((p.uniform && !p.first.is_empty()).then_some(p.first))
}

/// Streams constant bytes into hex text, writing it out in 1 MiB pieces.
pub(crate) struct HexSink<'s> {
    pub(crate) text: &'s mut String,
    pub(crate) out: &'s mut dyn TextOut,
}

impl tapeout_graph::ByteSink for HexSink<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), StreamError> {
        for piece in bytes.chunks(SPILL_BYTES / 2) {
            push_hex(self.text, piece);
            if self.text.len() >= SPILL_BYTES {
                self.out.take(self.text).map_err(|e| StreamError::Sink(Box::new(e)))?;
            }
        }
        Ok(())
    }
}

/// A failure while writing an inline constant's hex: the module's own write error is [`HloError::Output`];
/// anything else is the constant's ([`HloError::ConstantValues`]).
pub(crate) fn constant_failed(tensor: &str, err: StreamError) -> HloError {
    match err {
        StreamError::Sink(e) => match e.downcast::<std::io::Error>() {
            Ok(io) => HloError::Output(*io),
            Err(other) => HloError::ConstantValues { tensor: tensor.to_owned(), source: StreamError::Sink(other) },
        },
        other => HloError::ConstantValues { tensor: tensor.to_owned(), source: other },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lends 3 bytes at a time, so 4-byte elements straddle chunks.
    struct Odd(Vec<u8>);
    impl tapeout_graph::ChunkLender<u8> for Odd {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn with_chunk(
            &self,
            start: u64,
            len: u64,
            f: &mut dyn FnMut(&[u8]) -> Result<(), StreamError>,
        ) -> Result<(), StreamError> {
            let s = usize::try_from(start).map_err(|e| StreamError::Lend(e.into()))?;
            let e = usize::try_from(start + len).map_err(|e| StreamError::Lend(e.into()))?;
            self.0[s..e].chunks(3).try_for_each(f)
        }
    }

    #[test]
    fn splat_probe_handles_elements_split_across_chunks() {
        let uniform = Odd(7i32.to_le_bytes().repeat(5));
        let data = ConstantData::Raw { dtype: DType::I32, bytes: tapeout_graph::Lent::Chunked(&uniform) };
        assert_eq!(splat_element(&data).unwrap(), Some(7i32.to_le_bytes().to_vec()));
        let mut bytes = 7i32.to_le_bytes().repeat(5);
        bytes[18] = 1; // the last element differs in its third byte
        let varied = Odd(bytes);
        let data = ConstantData::Raw { dtype: DType::I32, bytes: tapeout_graph::Lent::Chunked(&varied) };
        assert_eq!(splat_element(&data).unwrap(), None);
    }
}
