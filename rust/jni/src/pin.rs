//! JVM arrays lent to the exporter one pinned chunk at a time, with no other JNI call while pinned.

use std::cell::{Cell, RefCell};

use jni::Env;
use jni::objects::{JByteArray, JFloatArray, JObjectArray, JShortArray};
use tapeout::graph::{ChunkLender, StreamError};

/// Pin statistics, reported back to Kotlin (the no-copy proof).
#[derive(Default)]
pub(crate) struct Pins {
    pub(crate) pins: Cell<u64>,
    pub(crate) copies: Cell<u64>,
}

/// A JVM array lent to the exporter one pinned chunk at a time: element `slot` of the tape's `Object[]`.
pub(crate) struct JvmArray<'e, 'l> {
    pub(crate) env: &'e RefCell<&'e mut Env<'l>>,
    pub(crate) data: &'e JObjectArray<'l>,
    pub(crate) slot: usize,
    pub(crate) len: u64,
    pub(crate) stats: &'e Pins,
}

/// A critical pin of a primitive array: exactly `GetPrimitiveArrayCritical` on creation and
/// `ReleasePrimitiveArrayCritical(JNI_ABORT)` on drop, and no other JNI call in between.
///
/// The `jni` crate's own guard checks for a pending exception right after pinning, which is itself a
/// JNI call inside the critical section (`-Xcheck:jni` reports it); this one does not.
pub(crate) struct CriticalPin<T> {
    env: *mut jni::sys::JNIEnv,
    array: jni::sys::jarray,
    ptr: *mut T,
    len: usize,
    pub(crate) is_copy: bool,
}

impl<T> CriticalPin<T> {
    /// Pins `array`, whose element type is `T` and whose length is `len`.
    ///
    /// # Safety
    /// `env` must be this thread's JNI environment, `array` a live reference to a primitive array of
    /// `len` elements of type `T`, and no JNI function may be called until the pin is dropped.
    pub(crate) unsafe fn new(env: &Env<'_>, array: jni::sys::jarray, len: usize) -> Option<Self> {
        let raw = env.get_raw();
        let mut is_copy: jni::sys::jboolean = false;
        // SAFETY: per the contract above; the function table is valid for an attached thread.
        let ptr = unsafe { ((**raw).v1_2.GetPrimitiveArrayCritical)(raw, array, &mut is_copy) };
        (!ptr.is_null()).then(|| CriticalPin { env: raw, array, ptr: ptr.cast(), len, is_copy })
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: the JVM guarantees `len` elements at `ptr` until ReleasePrimitiveArrayCritical.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T> Drop for CriticalPin<T> {
    fn drop(&mut self) {
        // SAFETY: releases exactly what `new` pinned; JNI_ABORT: nothing is written back.
        unsafe {
            ((**self.env).v1_2.ReleasePrimitiveArrayCritical)(
                self.env,
                self.array,
                self.ptr.cast(),
                jni::sys::JNI_ABORT,
            );
        }
    }
}

/// Implements [`ChunkLender`] for a JVM primitive array type: each chunk opens a local frame,
/// takes the array out of the `Object[]` (type-checked), pins it, lends `start..start + len`,
/// and releases it (JNI_ABORT) before the frame is popped. Nothing calls into the JVM while it
/// is pinned: `f` only writes the archive.
macro_rules! lender {
    ($wrapper:ty, $elem:ty, $array:ident, $view:expr) => {
        impl ChunkLender<$elem> for $wrapper {
            fn len(&self) -> u64 {
                self.array().len
            }
            fn with_chunk(
                &self,
                start: u64,
                len: u64,
                f: &mut dyn FnMut(&[$elem]) -> Result<(), StreamError>,
            ) -> Result<(), StreamError> {
                let me = self.array();
                let lend = |e: jni::errors::Error| StreamError::Lend(Box::new(e));
                let range = usize::try_from(start).and_then(|s| Ok((s, usize::try_from(start.saturating_add(len))?)));
                let (s, e) = range.map_err(|e| StreamError::Lend(Box::new(e)))?;
                let env = me.env.borrow();
                let out = env.with_local_frame(4, |env| -> Result<Result<(), StreamError>, jni::errors::Error> {
                    let obj = me.data.get_element(env, me.slot)?;
                    let array = $array::cast_local(env, obj)?;
                    let len = array.len(env)?;
                    // SAFETY: `array` is a live local reference of `len` elements of this type, and
                    // nothing below calls into the JVM before `pin` is dropped.
                    let Some(pin) = (unsafe { CriticalPin::new(env, array.as_raw(), len) }) else {
                        return Err(jni::errors::Error::NullPtr(
                            "GetPrimitiveArrayCritical returned null (out of memory)",
                        ));
                    };
                    me.stats.pins.set(me.stats.pins.get() + 1);
                    if pin.is_copy {
                        me.stats.copies.set(me.stats.copies.get() + 1);
                    }
                    let view: fn(&[_]) -> &[$elem] = $view;
                    let result = match view(pin.as_slice()).get(s..e) {
                        Some(chunk) => f(chunk),
                        None => Err(StreamError::Lend("the JVM array is shorter than its tensor".into())),
                    };
                    drop(pin); // ReleasePrimitiveArrayCritical(JNI_ABORT) before anything else
                    Ok(result)
                });
                out.map_err(lend)?
            }
            /// All runs under one short pin (a JVM array's chunks are views of one memory): the strided reads
            /// of a transposition, one tile of at most a few MiB at a time.
            fn copy_runs(&self, start: u64, run: u64, stride: u64, out: &mut [$elem]) -> Result<(), StreamError> {
                let Some(width) = usize::try_from(run).ok().filter(|&w| w > 0 && out.len() % w == 0) else {
                    return Err(StreamError::Lend(format!("{} elements are not runs of {run}", out.len()).into()));
                };
                let count = (out.len() / width) as u64;
                let span = count.checked_sub(1).and_then(|k| k.checked_mul(stride)?.checked_add(run));
                let Some(span) = span else {
                    return Err(StreamError::Lend("the runs overflow the array's length".into()));
                };
                self.with_chunk(start, span, &mut |view| {
                    let stride = usize::try_from(stride).map_err(|e| StreamError::Lend(Box::new(e)))?;
                    for (k, dst) in out.chunks_exact_mut(width).enumerate() {
                        dst.copy_from_slice(&view[k * stride..k * stride + width]);
                    }
                    Ok(())
                })
            }
        }
    };
}

impl<'e, 'l> JvmArray<'e, 'l> {
    fn array(&self) -> &JvmArray<'e, 'l> {
        self
    }
}

/// `ByteArray` lender: Java bytes are `i8`, lent as `u8`.
pub(crate) struct JvmBytes<'e, 'l>(pub(crate) JvmArray<'e, 'l>);

impl<'e, 'l> JvmBytes<'e, 'l> {
    fn array(&self) -> &JvmArray<'e, 'l> {
        &self.0
    }
}

/// `ShortArray` lender: 16-bit patterns lent as their little-endian bytes (the host's order; see below).
pub(crate) struct JvmShorts<'e, 'l>(pub(crate) JvmArray<'e, 'l>);

impl<'e, 'l> JvmShorts<'e, 'l> {
    fn array(&self) -> &JvmArray<'e, 'l> {
        &self.0
    }
}

lender!(JvmArray<'_, '_>, f32, JFloatArray, |a: &[f32]| a);
lender!(JvmBytes<'_, '_>, u8, JByteArray, bytemuck::cast_slice::<i8, u8>);
lender!(JvmShorts<'_, '_>, u8, JShortArray, bytemuck::cast_slice::<i16, u8>);

// A pinned `short[]` holds host-order values; lending them as bytes without a copy is only the little-endian
// encoding the archive needs on a little-endian host.
#[cfg(not(target_endian = "little"))]
compile_error!("tapeout-jni lends ShortArray weights as little-endian bytes; big-endian hosts need a swapping lender");

/// A tensor's lender, by the JVM array type that holds its data.
pub(crate) enum Lender<'e, 'l> {
    /// A `FloatArray`.
    Floats(JvmArray<'e, 'l>),
    /// A `ByteArray`, and what its bytes are.
    Bytes(JvmBytes<'e, 'l>, ByteUse),
    /// A `ShortArray` of 16-bit float patterns.
    Shorts(JvmShorts<'e, 'l>),
}

/// What a `ByteArray`'s bytes are.
pub(crate) enum ByteUse {
    /// f16/bf16 values, row-major.
    Half,
    /// Packed blocks of this encoding, row-major.
    Packed(tapeout::graph::Encoding),
    /// Another dtype, row-major.
    Dense,
}
