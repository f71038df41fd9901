//! A tensor on the device.

use std::sync::Arc;

use crate::error::{IreeError, native, runtime};
use crate::ffi;
use crate::module::{SessionInner, shape_text};
use crate::signature::DType;
use crate::wait::BatchWait;

/// A tensor on the device (an IREE buffer view). Passing it to another call does not copy it.
pub struct Value {
    pub(crate) raw: *mut ffi::TioValue,
    pub(crate) session: Arc<SessionInner>,
}
// SAFETY: buffer views are reference counted and immutable in shape; reads go through the session's device.
unsafe impl Send for Value {}
unsafe impl Sync for Value {}
impl Drop for Value {
    fn drop(&mut self) {
        // SAFETY: a buffer view this Value owns one reference of.
        unsafe { ffi::tio_value_release(self.raw) }
    }
}

impl Value {
    /// Its element type, `None` for a type tapeout does not name.
    pub fn dtype(&self) -> Option<DType> {
        // SAFETY: live buffer view.
        DType::from_element_type(unsafe { ffi::tio_value_element_type(self.raw) })
    }

    /// Its dimensions.
    pub fn dims(&self) -> Vec<u64> {
        // SAFETY: live buffer view; axes below its rank.
        let rank = unsafe { ffi::tio_value_rank(self.raw) };
        (0..rank).map(|axis| unsafe { ffi::tio_value_dim(self.raw, axis) }).collect()
    }

    /// Its size in bytes.
    pub fn byte_len(&self) -> u64 {
        // SAFETY: live buffer view.
        unsafe { ffi::tio_value_byte_length(self.raw) }
    }

    /// Copies its bytes into `dst`, whose length must be [`Value::byte_len`].
    pub fn read_into(&self, dst: &mut [u8]) -> Result<(), IreeError> {
        let given = u64::try_from(dst.len()).unwrap_or(u64::MAX);
        if given != self.byte_len() {
            return Err(IreeError::Size {
                what: "reading a value".into(),
                expected: self.byte_len(),
                given,
                dtype: self.dtype().unwrap_or(DType::U8),
                shape: shape_text(&self.dims()),
            });
        }
        // Not under the session lock either (a HAL device transfer, thread-safe), for the same reason as in value.
        let _wait = BatchWait::begin(&self.session.device);
        // SAFETY: live session (its device is read only) and view; dst has exactly byte_len bytes.
        native(|m| unsafe { ffi::tio_value_read(self.session.raw, self.raw, dst.as_mut_ptr().cast(), dst.len(), m) })
            .map_err(runtime("reading a value"))
    }

    /// Its bytes, copied to the host.
    pub fn to_bytes(&self) -> Result<Vec<u8>, IreeError> {
        let len = usize::try_from(self.byte_len()).map_err(|_| IreeError::Size {
            what: "reading a value".into(),
            expected: self.byte_len(),
            given: 0,
            dtype: self.dtype().unwrap_or(DType::U8),
            shape: shape_text(&self.dims()),
        })?;
        let mut out = vec![0u8; len];
        self.read_into(&mut out)?;
        Ok(out)
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dtype = self.dtype().map_or_else(|| "?".to_owned(), |d| d.to_string());
        write!(f, "Value({dtype} {})", shape_text(&self.dims()))
    }
}
