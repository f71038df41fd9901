//! JNI entry points of `dev.tapeout.iree` (Kotlin object `IreeNative`) over the `tapeout-iree` crate: IREE's
//! runtime in the JVM's process.
//!
//! Handles are `Box` pointers passed as `long`s; the Kotlin classes own them (one `close` each, guarded there).
//! A value keeps its module's session alive, so closing a module before its values is safe.
//!
//! **Arrays are not copied on the way.** A `FloatArray` (or Int/Long/Short/Byte) goes to the device with one
//! copy, IREE's own, from the array pinned with `GetPrimitiveArrayCritical` (no JNI call while pinned); results
//! come back the same way into a pinned array, or straight into a direct `ByteBuffer`'s memory. Parameter files
//! are memory-mapped by the runtime and never seen by the JVM.
//!
//! Every failure becomes a `dev.tapeout.iree.IreeNativeError`, which the Kotlin side turns into the typed exception
//! `src/contract.rs` names; a panic becomes one too (an internal failure). Nothing aborts the JVM.

mod contract;
mod failure;

use std::path::PathBuf;

use jni::objects::{
    JByteArray, JByteBuffer, JClass, JFloatArray, JIntArray, JLongArray, JObject, JObjectArray, JShortArray, JString,
};
use jni::sys::{jint, jlong};
use jni::{Env, EnvUnowned};
use tapeout_iree::{DType, Device, Instance, IreeError, Module, Parameters, StatusCode, Value};

use crate::contract::ErrorKind;
use crate::failure::{Failure, Throw, string_array, usage};

fn into_handle<T>(value: T) -> jlong {
    Box::into_raw(Box::new(value)) as jlong
}

/// The object behind a live handle.
///
/// # Safety
/// `handle` must come from [`into_handle`] of a `T` and not have been released (the Kotlin classes guarantee it).
unsafe fn borrow<'a, T>(handle: jlong) -> Result<&'a T, Failure> {
    if handle == 0 {
        return Err(usage("a closed or null handle reached the native side"));
    }
    // SAFETY: per the contract above.
    Ok(unsafe { &*(handle as *const T) })
}

/// Frees a handle.
///
/// # Safety
/// As [`borrow`], and the handle is not used afterwards.
unsafe fn release<T>(handle: jlong) {
    if handle != 0 {
        // SAFETY: per the contract above.
        drop(unsafe { Box::from_raw(handle as *mut T) });
    }
}

fn string(env: &Env<'_>, s: &JString<'_>) -> Result<String, Failure> {
    Ok(s.try_to_string(env)?)
}

/// The strings of a `String[]`, each element's local reference deleted once read: a JNI method may hold only 16 (32
/// under -Xcheck:jni's count) without asking for more, and a module may come with any number of parameter files.
fn strings(env: &mut Env<'_>, a: &JObjectArray<'_>) -> Result<Vec<String>, Failure> {
    let n = a.len(env)?;
    let mut out = Vec::new();
    for i in 0..n {
        let obj = a.get_element(env, i)?;
        if obj.is_null() {
            return Err(usage(format!("element {i} of a String array is null")));
        }
        let s = JString::cast_local(env, obj)?;
        let text = s.try_to_string(env);
        env.delete_local_ref(s);
        out.push(text?);
    }
    Ok(out)
}

fn dims_of(env: &Env<'_>, dims: &JLongArray<'_>) -> Result<Vec<u64>, Failure> {
    let mut v = vec![0i64; dims.len(env)?];
    dims.get_region(env, 0, &mut v)?;
    v.into_iter().map(|d| u64::try_from(d).map_err(|_| usage(format!("a negative dimension {d}")))).collect()
}

fn dtype_of(code: jint) -> Result<DType, Failure> {
    DType::from_code(code).ok_or_else(|| usage(format!("unknown dtype code {code}")))
}

fn code_of(dtype: Option<DType>) -> jlong {
    dtype.map_or(-1, |d| jlong::from(d.code()))
}

/// A primitive array pinned with `GetPrimitiveArrayCritical`; released on drop (`JNI_ABORT` when only read, `0`
/// to commit writes). No JNI call may happen while it lives.
struct Pinned {
    env: *mut jni::sys::JNIEnv,
    array: jni::sys::jarray,
    ptr: *mut u8,
    bytes: usize,
    commit: bool,
}

impl Pinned {
    /// Pins `array` of `len` elements of `elem` bytes each.
    ///
    /// # Safety
    /// `array` is a live primitive array of `len` elements of `elem` bytes, and no JNI function is called until
    /// the pin is dropped.
    unsafe fn new(
        env: &Env<'_>,
        array: jni::sys::jarray,
        len: usize,
        elem: usize,
        commit: bool,
    ) -> Result<Pinned, Failure> {
        let bytes = len.checked_mul(elem).ok_or_else(|| usage("array too large"))?;
        let raw = env.get_raw();
        let mut is_copy: jni::sys::jboolean = false;
        // SAFETY: per the contract; the function table is valid for an attached thread.
        let ptr = unsafe { ((**raw).v1_2.GetPrimitiveArrayCritical)(raw, array, &mut is_copy) };
        if ptr.is_null() {
            return Err(Failure::new(ErrorKind::Runtime, "GetPrimitiveArrayCritical returned null (out of memory)")
                .status(StatusCode::ResourceExhausted)
                .text("pinning an array"));
        }
        Ok(Pinned { env: raw, array, ptr: ptr.cast(), bytes, commit })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the JVM keeps `bytes` bytes at `ptr` until release.
        unsafe { std::slice::from_raw_parts(self.ptr, self.bytes) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and the pin is exclusive to this call.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let mode = if self.commit { 0 } else { jni::sys::JNI_ABORT };
        // SAFETY: releases exactly what `new` pinned.
        unsafe { ((**self.env).v1_2.ReleasePrimitiveArrayCritical)(self.env, self.array, self.ptr.cast(), mode) }
    }
}

/// `IreeNative.<thing>Release(handle)`: frees a handle (the Kotlin class calls it once, from `close`; a value
/// keeps its module's session alive, so the order of closing does not matter).
macro_rules! releaser {
    ($name:ident, $type:ty) => {
        #[doc = concat!("`IreeNative` release of a `", stringify!($type), "` handle.")]
        #[unsafe(no_mangle)]
        pub extern "system" fn $name<'l>(mut unowned: EnvUnowned<'l>, _class: JClass<'l>, handle: jlong) {
            unowned
                .with_env(|_env| -> Result<(), Failure> {
                    // SAFETY: a live handle of this type, released once (its Kotlin class's close).
                    unsafe { release::<$type>(handle) };
                    Ok(())
                })
                .resolve::<Throw>()
        }
    };
}

/// `IreeNative.instanceCreate(): Long`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_iree_IreeNative_instanceCreate<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
) -> jlong {
    unowned.with_env(|_env| -> Result<jlong, Failure> { Ok(into_handle(Instance::new()?)) }).resolve::<Throw>()
}

releaser!(Java_dev_tapeout_iree_IreeNative_instanceRelease, Instance);

/// `IreeNative.instanceDrivers(handle): String` — one driver name per line.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_iree_IreeNative_instanceDrivers<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    handle: jlong,
) -> JObject<'l> {
    unowned
        .with_env(|env| -> Result<JObject<'l>, Failure> {
            // SAFETY: a live handle.
            let instance = unsafe { borrow::<Instance>(handle)? };
            Ok(env.new_string(instance.drivers()?.join("\n"))?.into())
        })
        .resolve::<Throw>()
}

/// `IreeNative.deviceCreate(instance, uri, workers): Long`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_iree_IreeNative_deviceCreate<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    instance: jlong,
    uri: JString<'l>,
    workers: jint,
) -> jlong {
    unowned
        .with_env(|env| -> Result<jlong, Failure> {
            // SAFETY: a live handle.
            let instance = unsafe { borrow::<Instance>(instance)? };
            let workers = u32::try_from(workers).map_err(|_| usage(format!("workers = {workers}: use 0 or more")))?;
            Ok(into_handle(instance.device(&string(env, &uri)?, workers)?))
        })
        .resolve::<Throw>()
}

releaser!(Java_dev_tapeout_iree_IreeNative_deviceRelease, Device);

/// `IreeNative.deviceBatchWaits(handle, set): Boolean` — `Device::set_batch_waits` when `set` is 0 (off) or 1 (on),
/// then the setting (any other `set` only reads it).
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_iree_IreeNative_deviceBatchWaits<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    handle: jlong,
    set: jint,
) -> jni::sys::jboolean {
    unowned
        .with_env(|_env| -> Result<jni::sys::jboolean, Failure> {
            // SAFETY: a live handle.
            let device = unsafe { borrow::<Device>(handle)? };
            if set == 0 || set == 1 {
                device.set_batch_waits(set == 1);
            }
            Ok(device.batch_waits())
        })
        .resolve::<Throw>()
}

/// `IreeNative.moduleLoad(device, vmfbBytes, vmfbPath, scopes, paths): Long` — the module from bytes or (when
/// `vmfbBytes` is null) from a file read here, off the JVM heap.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_iree_IreeNative_moduleLoad<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    device: jlong,
    vmfb_bytes: JByteArray<'l>,
    vmfb_path: JString<'l>,
    scopes: JObjectArray<'l>,
    paths: JObjectArray<'l>,
) -> jlong {
    unowned
        .with_env(|env| -> Result<jlong, Failure> {
            // SAFETY: a live handle.
            let device = unsafe { borrow::<Device>(device)? };
            let scopes = strings(env, &scopes)?;
            let paths = strings(env, &paths)?;
            if scopes.len() != paths.len() {
                return Err(usage("as many scopes as parameter files"));
            }
            let parameters: Vec<Parameters> =
                scopes.into_iter().zip(paths).map(|(s, p)| Parameters::new(s, PathBuf::from(p))).collect();
            let vmfb = if vmfb_bytes.is_null() {
                let path = string(env, &vmfb_path)?;
                std::fs::read(&path).map_err(|e| IreeError::io(&path, e))?
            } else {
                let mut v = vec![0i8; vmfb_bytes.len(env)?];
                vmfb_bytes.get_region(env, 0, &mut v)?;
                v.into_iter().map(|b| b as u8).collect()
            };
            Ok(into_handle(device.load(&vmfb, &parameters)?))
        })
        .resolve::<Throw>()
}

releaser!(Java_dev_tapeout_iree_IreeNative_moduleRelease, Module);

/// `IreeNative.moduleTexts(handle): Array<String>` — the texts of the module's signatures, in the order
/// `moduleLayout` walks them: per function its name and declaration, then its arguments' names, then its results'.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_iree_IreeNative_moduleTexts<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    handle: jlong,
) -> JObjectArray<'l> {
    unowned
        .with_env(|env| -> Result<JObjectArray<'l>, Failure> {
            // SAFETY: a live handle.
            let module = unsafe { borrow::<Module>(handle)? };
            let mut texts = Vec::new();
            for f in module.functions() {
                texts.push(f.name.clone());
                texts.push(f.declaration.clone());
                texts.extend(f.inputs.iter().chain(&f.outputs).map(|p| p.name.clone()));
            }
            string_array(env, &texts)
        })
        .resolve::<Throw>()
}

/// `IreeNative.moduleLayout(handle): LongArray` — the numbers of the module's signatures: the function count, then
/// per function its argument and result counts and per argument, then result: the dtype code (-1 for a type
/// tapeout does not name), the rank and the dimensions (-1 for `?`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_iree_IreeNative_moduleLayout<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    handle: jlong,
) -> JLongArray<'l> {
    unowned
        .with_env(|env| -> Result<JLongArray<'l>, Failure> {
            // SAFETY: a live handle.
            let module = unsafe { borrow::<Module>(handle)? };
            let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
            let mut layout = vec![count(module.functions().len())];
            for f in module.functions() {
                layout.extend([count(f.inputs.len()), count(f.outputs.len())]);
                for p in f.inputs.iter().chain(&f.outputs) {
                    layout.extend([code_of(p.dtype), count(p.dims.len())]);
                    layout.extend(p.dims.iter().map(|d| d.map_or(-1, |d| i64::try_from(d).unwrap_or(i64::MAX))));
                }
            }
            let out = env.new_long_array(layout.len())?;
            out.set_region(env, 0, &layout)?;
            Ok(out)
        })
        .resolve::<Throw>()
}

/// `IreeNative.parametersFromIndex(path): Array<String>` — an archive set's index read by
/// [`Parameters::from_index`]: its scope, then its files (absolute or relative to the working directory).
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_iree_IreeNative_parametersFromIndex<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    path: JString<'l>,
) -> JObjectArray<'l> {
    unowned
        .with_env(|env| -> Result<JObjectArray<'l>, Failure> {
            let path = string(env, &path)?;
            let files = Parameters::from_index(&path)?;
            let scope = files.first().map(|p| p.scope.clone()).unwrap_or_default();
            let texts: Vec<String> =
                std::iter::once(scope).chain(files.iter().map(|p| p.path.display().to_string())).collect();
            string_array(env, &texts)
        })
        .resolve::<Throw>()
}

/// Makes a value from a pinned array's bytes.
fn value_from_array(
    env: &Env<'_>,
    module: jlong,
    dtype: jint,
    dims: &JLongArray<'_>,
    array: jni::sys::jarray,
    len: usize,
    elem: usize,
) -> Result<jlong, Failure> {
    // SAFETY: a live handle.
    let module = unsafe { borrow::<Module>(module)? };
    let (dtype, dims) = (dtype_of(dtype)?, dims_of(env, dims)?);
    // SAFETY: `array` is the live primitive array of `len` elements of `elem` bytes the caller names, and nothing
    // below calls into the JVM before the pin is dropped.
    let pin = unsafe { Pinned::new(env, array, len, elem, false)? };
    let value = module.value(dtype, &dims, pin.bytes());
    drop(pin);
    Ok(into_handle(value?))
}

macro_rules! value_from {
    ($name:ident, $array:ty, $elem:expr) => {
        /// `IreeNative.valueFrom…(module, dtype, dims, array): Long` — a device value from a JVM array (one copy,
        /// from the pinned array).
        #[unsafe(no_mangle)]
        pub extern "system" fn $name<'l>(
            mut unowned: EnvUnowned<'l>,
            _class: JClass<'l>,
            module: jlong,
            dtype: jint,
            dims: JLongArray<'l>,
            array: $array,
        ) -> jlong {
            unowned
                .with_env(|env| -> Result<jlong, Failure> {
                    let len = array.len(env)?;
                    value_from_array(env, module, dtype, &dims, array.as_raw(), len, $elem)
                })
                .resolve::<Throw>()
        }
    };
}
value_from!(Java_dev_tapeout_iree_IreeNative_valueFromFloats, JFloatArray<'l>, 4);
value_from!(Java_dev_tapeout_iree_IreeNative_valueFromInts, JIntArray<'l>, 4);
value_from!(Java_dev_tapeout_iree_IreeNative_valueFromLongs, JLongArray<'l>, 8);
value_from!(Java_dev_tapeout_iree_IreeNative_valueFromShorts, JShortArray<'l>, 2);
value_from!(Java_dev_tapeout_iree_IreeNative_valueFromBytes, JByteArray<'l>, 1);

/// The `position..limit` bytes of a direct buffer, as (address, length), every page of them checked readable.
fn direct(env: &Env<'_>, buffer: &JByteBuffer<'_>, position: jint, limit: jint) -> Result<(*mut u8, usize), Failure> {
    let address = env.get_direct_buffer_address(buffer).map_err(|_| usage("the ByteBuffer is not a direct buffer"))?;
    let capacity = env.get_direct_buffer_capacity(buffer)?;
    let (p, l) = (usize::try_from(position), usize::try_from(limit));
    let (address, len) = match (p, l) {
        (Ok(p), Ok(l)) if p <= l && l <= capacity => (address.wrapping_add(p), l - p),
        _ => {
            return Err(usage(format!("position {position} / limit {limit} outside the buffer's capacity {capacity}")));
        }
    };
    if !readable(address, len) {
        return Err(usage(
            "the buffer's memory cannot be read: a mapped file truncated after it was mapped (its pages past the \
             file's end fault)? Map the file again at its current size",
        ));
    }
    Ok((address, len))
}

/// Whether every page of `len` bytes at `address` can be read, asked of the kernel (`process_vm_readv` of one byte
/// per page from this process): a page of a mapped file past its end answers EFAULT there, where touching it here
/// would take a SIGBUS that kills the JVM. A file truncated between this check and the copy still faults.
fn readable(address: *const u8, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        const BATCH: usize = 512; // below IOV_MAX (1024)
        let mut scratch = [0u8; BATCH];
        let mut offsets = (0..len).step_by(PAGE).chain((len > 0).then(|| len - 1)).peekable();
        while offsets.peek().is_some() {
            let remote: Vec<libc::iovec> = offsets
                .by_ref()
                .take(BATCH)
                .map(|o| libc::iovec { iov_base: address.wrapping_add(o).cast_mut().cast(), iov_len: 1 })
                .collect();
            let local = libc::iovec { iov_base: scratch.as_mut_ptr().cast(), iov_len: remote.len() };
            // SAFETY: reads at most `remote.len()` bytes into `scratch`, which has room; the remote ranges are only
            // read by the kernel, which reports a fault as a short count instead of a signal.
            let done = unsafe {
                libc::process_vm_readv(libc::getpid(), &local, 1, remote.as_ptr(), remote.len() as libc::c_ulong, 0)
            };
            if done < 0 {
                // Not allowed here (a seccomp filter, say): say readable, as before this check existed.
                return std::io::Error::last_os_error().raw_os_error() != Some(libc::EFAULT);
            }
            if usize::try_from(done).ok() != Some(remote.len()) {
                return false;
            }
        }
    }
    true
}

/// `IreeNative.valueFromBuffer(module, dtype, dims, buffer, position, limit): Long` — a device value from a direct
/// buffer's remaining bytes (little-endian), read in place.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_iree_IreeNative_valueFromBuffer<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    module: jlong,
    dtype: jint,
    dims: JLongArray<'l>,
    buffer: JByteBuffer<'l>,
    position: jint,
    limit: jint,
) -> jlong {
    unowned
        .with_env(|env| -> Result<jlong, Failure> {
            // SAFETY: a live handle.
            let module = unsafe { borrow::<Module>(module)? };
            let (dtype, dims) = (dtype_of(dtype)?, dims_of(env, &dims)?);
            let (address, len) = direct(env, &buffer, position, limit)?;
            // SAFETY: a direct buffer's memory, live while its local reference is (this call).
            let bytes = unsafe { std::slice::from_raw_parts(address.cast_const(), len) };
            Ok(into_handle(module.value(dtype, &dims, bytes)?))
        })
        .resolve::<Throw>()
}

releaser!(Java_dev_tapeout_iree_IreeNative_valueRelease, Value);

/// `IreeNative.valueInfo(handle): LongArray` — `[dtype code, byte length, rank, dims…]`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_iree_IreeNative_valueInfo<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    handle: jlong,
) -> JLongArray<'l> {
    unowned
        .with_env(|env| -> Result<JLongArray<'l>, Failure> {
            // SAFETY: a live handle.
            let value = unsafe { borrow::<Value>(handle)? };
            let long = |n: u64| jlong::try_from(n).map_err(|_| usage(format!("{n} does not fit in a JVM long")));
            let dims = value.dims();
            let mut info = vec![code_of(value.dtype()), long(value.byte_len())?, long(dims.len() as u64)?];
            for d in dims {
                info.push(long(d)?);
            }
            let out = env.new_long_array(info.len())?;
            out.set_region(env, 0, &info)?;
            Ok(out)
        })
        .resolve::<Throw>()
}

macro_rules! value_read {
    ($name:ident, $array:ty, $elem:expr) => {
        /// `IreeNative.valueRead…(value, array)` — copies the value's bytes into the pinned array (sizes equal).
        #[unsafe(no_mangle)]
        pub extern "system" fn $name<'l>(
            mut unowned: EnvUnowned<'l>,
            _class: JClass<'l>,
            handle: jlong,
            array: $array,
        ) {
            unowned
                .with_env(|env| -> Result<(), Failure> {
                    // SAFETY: a live handle.
                    let value = unsafe { borrow::<Value>(handle)? };
                    let len = array.len(env)?;
                    // SAFETY: `array` is a live primitive array of `len` elements of this size; no JNI call below
                    // until the pin is dropped.
                    let mut pin = unsafe { Pinned::new(env, array.as_raw(), len, $elem, true)? };
                    let result = value.read_into(pin.bytes_mut());
                    drop(pin);
                    Ok(result?)
                })
                .resolve::<Throw>()
        }
    };
}
value_read!(Java_dev_tapeout_iree_IreeNative_valueReadFloats, JFloatArray<'l>, 4);
value_read!(Java_dev_tapeout_iree_IreeNative_valueReadInts, JIntArray<'l>, 4);
value_read!(Java_dev_tapeout_iree_IreeNative_valueReadLongs, JLongArray<'l>, 8);
value_read!(Java_dev_tapeout_iree_IreeNative_valueReadShorts, JShortArray<'l>, 2);
value_read!(Java_dev_tapeout_iree_IreeNative_valueReadBytes, JByteArray<'l>, 1);

/// `IreeNative.valueReadBuffer(value, buffer, position, limit)` — copies the value's bytes into a direct buffer's
/// `position..limit` (exactly its size).
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_iree_IreeNative_valueReadBuffer<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    handle: jlong,
    buffer: JByteBuffer<'l>,
    position: jint,
    limit: jint,
) {
    unowned
        .with_env(|env| -> Result<(), Failure> {
            // SAFETY: a live handle.
            let value = unsafe { borrow::<Value>(handle)? };
            let (address, len) = direct(env, &buffer, position, limit)?;
            // SAFETY: a direct buffer's memory, live while its local reference is (this call).
            let bytes = unsafe { std::slice::from_raw_parts_mut(address, len) };
            Ok(value.read_into(bytes)?)
        })
        .resolve::<Throw>()
}

/// `IreeNative.call(module, function, inputs): LongArray` — the results' value handles.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_iree_IreeNative_call<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    module: jlong,
    function: JString<'l>,
    inputs: JLongArray<'l>,
) -> JLongArray<'l> {
    unowned
        .with_env(|env| -> Result<JLongArray<'l>, Failure> {
            // SAFETY: a live handle.
            let module = unsafe { borrow::<Module>(module)? };
            let mut handles = vec![0i64; inputs.len(env)?];
            inputs.get_region(env, 0, &mut handles)?;
            // SAFETY: live value handles (IreeValue checks it is open before passing it).
            let values = handles.iter().map(|&h| unsafe { borrow::<Value>(h) }).collect::<Result<Vec<_>, _>>()?;
            let results = module.call(&string(env, &function)?, &values)?;
            let out_handles: Vec<jlong> = results.into_iter().map(into_handle).collect();
            let out = env.new_long_array(out_handles.len())?;
            out.set_region(env, 0, &out_handles)?;
            Ok(out)
        })
        .resolve::<Throw>()
}
