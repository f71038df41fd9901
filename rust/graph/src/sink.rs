//! Where streamed bytes go, and the one widening every stream shares: below both the constants
//! ([`crate::ConstantData`]) and the tiled writers that produce their bytes, so that neither imports the other.

use crate::dtype::DType;
use crate::tensor::StreamError;

/// Where a constant's bytes go: an archive entry, the hex text of a module, any buffer.
pub trait ByteSink {
    /// Appends bytes; the sink's own failure is [`StreamError::Sink`].
    fn put(&mut self, bytes: &[u8]) -> Result<(), StreamError>;
}

impl ByteSink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), StreamError> {
        self.extend_from_slice(bytes);
        Ok(())
    }
}

/// Widens the little-endian f16 or bf16 (`from`) values of `src` into `dst` (as many as both hold).
pub(crate) fn widen_into(from: DType, src: &[u8], dst: &mut [f32]) {
    if from == DType::BF16 {
        for (y, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *y = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
        }
    } else {
        for (y, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *y = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
        }
    }
}
