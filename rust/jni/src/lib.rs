//! JNI entry points of tapeout for the Kotlin library `dev.tapeout` (object `NativeBridge`).
//!
//! A Kotlin `ExecutionTape` reaches Rust as graph JSON (`tapeout-graph/1`, without data) plus an
//! `Object[]` holding, per tensor, the JVM array with its values (`FloatArray`, `ShortArray` or `ByteArray`) and
//! an `int[]` saying what kind of data each array is.
//!
//! **No weight is copied.** Arrays are lent to the exporter through [`JvmArray`], which pins the
//! array with `GetPrimitiveArrayCritical` for **one chunk at a time** (at most 64 MiB, re-pinned
//! per chunk, because a critical section blocks the GC on JDK 17), hands the chunk to the writer,
//! and releases it with `JNI_ABORT` (never writing back). No JNI call is made while an array is
//! pinned: each chunk opens its own local frame, takes the array out of the `Object[]`, pins,
//! writes, unpins and pops the frame.
//!
//! Every entry point runs inside one wrapper: Rust errors become specific Kotlin exceptions
//! (`PackedConstantException`, `ConstantTooLargeException`, `GraphValidationException`,
//! `IrpaFormatException`, `java.io.IOException`), and a panic becomes a `RuntimeException` that
//! carries the panic message. The JVM is never aborted.

use std::cell::{Cell, RefCell};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use jni::errors::ErrorPolicy;
use jni::objects::{
    JByteArray, JClass, JFloatArray, JIntArray, JLongArray, JObject, JObjectArray, JShortArray, JString,
};
use jni::strings::JNIString;
use jni::sys::{jboolean, jlong};
use jni::{Env, EnvUnowned};
use tapeout_graph::io::{GraphFile, IoError, WeightSet};
use tapeout_graph::{
    BlockOrder, ChunkLender, ComputeGraph, Encoding, ExtractOptions, GraphError, HalfLayout, LendError, Lent,
    PackedConstantHandling, Storage, TensorId,
};
use tapeout_hlo::{EmitOptions, HloError, MaterializationPolicy};
use tapeout_irpa::IrpaError;

/// Progress of the export in flight: payload bytes written and in total. Updated by the archive writer
/// (no JNI call); read by `NativeBridge.progressWritten/progressTotal` from another Kotlin thread, which is
/// allowed while the exporting thread holds a pin (those calls allocate nothing).
static PROGRESS_WRITTEN: AtomicU64 = AtomicU64::new(0);
static PROGRESS_TOTAL: AtomicU64 = AtomicU64::new(0);

/// A failure to report to Kotlin: the exception class and its message.
#[derive(Debug)]
pub enum Failure {
    /// A JNI call failed (an exception may already be pending).
    Jni(jni::errors::Error),
    /// A tapeout error, mapped to a Kotlin exception class.
    Tapeout {
        /// JNI class name, e.g. `dev/tapeout/PackedConstantException`.
        class: &'static str,
        /// The message.
        message: String,
    },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Jni(e) => write!(f, "JNI error: {e}"),
            Failure::Tapeout { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for Failure {}

impl From<jni::errors::Error> for Failure {
    fn from(e: jni::errors::Error) -> Self {
        Failure::Jni(e)
    }
}

const VALIDATION: &str = "dev/tapeout/GraphValidationException";

fn graph_failure(e: &GraphError) -> Failure {
    let class = match e {
        GraphError::PackedConstant { .. } => "dev/tapeout/PackedConstantException",
        _ => VALIDATION,
    };
    Failure::Tapeout { class, message: e.to_string() }
}

fn irpa_failure(e: &IrpaError) -> Failure {
    let class = match e {
        IrpaError::Format { .. } | IrpaError::KeyNotFound { .. } => "dev/tapeout/IrpaFormatException",
        IrpaError::Io { .. } => "java/io/IOException",
        _ => "dev/tapeout/TapeoutException",
    };
    Failure::Tapeout { class, message: e.to_string() }
}

impl From<HloError> for Failure {
    fn from(e: HloError) -> Self {
        match &e {
            HloError::Graph(g) => graph_failure(g),
            HloError::Irpa(i) => irpa_failure(i),
            HloError::ConstantTooLarge { .. } => {
                Failure::Tapeout { class: "dev/tapeout/ConstantTooLargeException", message: e.to_string() }
            }
            HloError::Io { .. } | HloError::Output(_) => {
                Failure::Tapeout { class: "java/io/IOException", message: e.to_string() }
            }
            _ => Failure::Tapeout { class: VALIDATION, message: e.to_string() },
        }
    }
}

impl From<GraphError> for Failure {
    fn from(e: GraphError) -> Self {
        graph_failure(&e)
    }
}

impl From<IrpaError> for Failure {
    fn from(e: IrpaError) -> Self {
        irpa_failure(&e)
    }
}

impl From<IoError> for Failure {
    fn from(e: IoError) -> Self {
        let class = match e {
            IoError::Io { .. } => "java/io/IOException",
            _ => VALIDATION,
        };
        Failure::Tapeout { class, message: e.to_string() }
    }
}

/// Throws the mapped exception for an error, a `RuntimeException` with the message for a panic.
pub struct ThrowMapped;

impl<T: Default> ErrorPolicy<T, Failure> for ThrowMapped {
    type Captures<'unowned_env_local: 'native_method, 'native_method> = ();

    fn on_error<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _cap: &mut Self::Captures<'unowned_env_local, 'native_method>,
        err: Failure,
    ) -> jni::errors::Result<T> {
        if env.exception_check() {
            return Ok(T::default()); // a Java exception is already on its way
        }
        let (class, message) = match err {
            Failure::Tapeout { class, message } => (class, message),
            Failure::Jni(e) => ("java/lang/RuntimeException", format!("tapeout: JNI call failed: {e}")),
        };
        let _ = env.throw_new(JNIString::from(class), JNIString::from(message));
        Ok(T::default())
    }

    fn on_panic<'unowned_env_local: 'native_method, 'native_method>(
        env: &mut Env<'unowned_env_local>,
        _cap: &mut Self::Captures<'unowned_env_local, 'native_method>,
        payload: Box<dyn std::any::Any + Send + 'static>,
    ) -> jni::errors::Result<T> {
        let message = match payload.downcast::<String>() {
            Ok(s) => *s,
            Err(payload) => {
                payload.downcast::<&'static str>().map_or_else(|_| "unknown panic".to_owned(), |s| (*s).to_owned())
            }
        };
        let _ = env.throw_new(
            JNIString::from("java/lang/RuntimeException"),
            JNIString::from(format!("tapeout native panic: {message}")),
        );
        Ok(T::default())
    }
}

/// What kind of JVM array a tensor's data is (the `kinds[i]` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// No JVM data: shape only, or data described in the graph JSON (mapped files).
    None,
    /// `FloatArray`, borrowed.
    F32,
    /// `ByteArray` of f16/bf16, row-major.
    Half,
    /// `ShortArray` of f16/bf16 bit patterns, row-major (up to 2^31 - 1 elements, 4 GiB).
    HalfShorts,
    /// `ByteArray` of packed blocks (encoding in `encodings[i]`).
    Packed,
    /// `ByteArray` of another dtype.
    Dense,
}

impl Kind {
    fn from_code(code: i32) -> Option<Kind> {
        Some(match code {
            0 => Kind::None,
            1 => Kind::F32,
            2 => Kind::Half,
            3 => Kind::HalfShorts,
            4 => Kind::Packed,
            5 => Kind::Dense,
            _ => return None,
        })
    }
}

/// Pin statistics, reported back to Kotlin (the no-copy proof).
#[derive(Default)]
struct Pins {
    pins: Cell<u64>,
    copies: Cell<u64>,
}

/// A JVM array lent to the exporter one pinned chunk at a time.
struct JvmArray<'e, 'l> {
    env: &'e RefCell<&'e mut Env<'l>>,
    data: &'e JObjectArray<'l>,
    slot: usize,
    len: u64,
    stats: &'e Pins,
}

/// A critical pin of a primitive array: exactly `GetPrimitiveArrayCritical` on creation and
/// `ReleasePrimitiveArrayCritical(JNI_ABORT)` on drop, and no other JNI call in between.
///
/// The `jni` crate's own guard checks for a pending exception right after pinning, which is itself a
/// JNI call inside the critical section (`-Xcheck:jni` reports it); this one does not.
struct CriticalPin<T> {
    env: *mut jni::sys::JNIEnv,
    array: jni::sys::jarray,
    ptr: *mut T,
    len: usize,
    is_copy: bool,
}

impl<T> CriticalPin<T> {
    /// Pins `array`, whose element type is `T` and whose length is `len`.
    ///
    /// # Safety
    /// `env` must be this thread's JNI environment, `array` a live reference to a primitive array of
    /// `len` elements of type `T`, and no JNI function may be called until the pin is dropped.
    unsafe fn new(env: &Env<'_>, array: jni::sys::jarray, len: usize) -> Option<Self> {
        let raw = env.get_raw();
        let mut is_copy: jni::sys::jboolean = false;
        // SAFETY: per the contract above; the function table is valid for an attached thread.
        let ptr = unsafe { ((**raw).v1_2.GetPrimitiveArrayCritical)(raw, array, &mut is_copy) };
        (!ptr.is_null()).then(|| CriticalPin { env: raw, array, ptr: ptr.cast(), len, is_copy })
    }

    fn as_slice(&self) -> &[T] {
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
                f: &mut dyn FnMut(&[$elem]) -> Result<(), IrpaError>,
            ) -> Result<Result<(), IrpaError>, LendError> {
                let me = self.array();
                let (s, e) = (usize::try_from(start)?, usize::try_from(start + len)?);
                let env = me.env.borrow();
                let out = env.with_local_frame(4, |env| -> Result<Result<(), IrpaError>, jni::errors::Error> {
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
                        None => Err(IrpaError::Source {
                            key: String::new(),
                            source: "the JVM array is shorter than its tensor".into(),
                        }),
                    };
                    drop(pin); // ReleasePrimitiveArrayCritical(JNI_ABORT) before anything else
                    Ok(result)
                });
                out.map_err(|e| Box::new(e) as LendError)
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
struct JvmBytes<'e, 'l>(JvmArray<'e, 'l>);

impl<'e, 'l> JvmBytes<'e, 'l> {
    fn array(&self) -> &JvmArray<'e, 'l> {
        &self.0
    }
}

/// `ShortArray` lender: 16-bit patterns lent as their little-endian bytes (the host's order; see below).
struct JvmShorts<'e, 'l>(JvmArray<'e, 'l>);

impl<'e, 'l> JvmShorts<'e, 'l> {
    fn array(&self) -> &JvmArray<'e, 'l> {
        &self.0
    }
}

lender!(JvmArray<'_, '_>, f32, JFloatArray, |a: &[f32]| a);
lender!(JvmBytes<'_, '_>, u8, JByteArray, bytemuck_i8);
lender!(JvmShorts<'_, '_>, u8, JShortArray, shorts_as_le_bytes);

fn bytemuck_i8(a: &[i8]) -> &[u8] {
    // SAFETY: i8 and u8 have the same size and alignment, and every bit pattern is valid for both.
    unsafe { std::slice::from_raw_parts(a.as_ptr().cast::<u8>(), a.len()) }
}

// A pinned `short[]` holds host-order values; lending them as bytes without a copy is only the little-endian
// encoding the archive needs on a little-endian host.
#[cfg(not(target_endian = "little"))]
compile_error!("tapeout-jni lends ShortArray weights as little-endian bytes; big-endian hosts need a swapping lender");

fn shorts_as_le_bytes(a: &[i16]) -> &[u8] {
    // SAFETY: `a` covers `2 * a.len()` initialised bytes, u8 has alignment 1, and on a little-endian host
    // (checked above) each short's bytes are its little-endian encoding.
    unsafe { std::slice::from_raw_parts(a.as_ptr().cast::<u8>(), a.len() * 2) }
}

enum Lender<'e, 'l> {
    Floats(JvmArray<'e, 'l>),
    Bytes(JvmBytes<'e, 'l>),
    Shorts(JvmShorts<'e, 'l>),
}

/// Everything the entry points share: parse the graph, lend the arrays, extract.
struct Request {
    graph: GraphFile,
    packed: PackedConstantHandling,
    forced: Vec<usize>,
}

fn string(env: &Env<'_>, s: &JString<'_>) -> Result<String, Failure> {
    Ok(s.try_to_string(env)?)
}

fn ints(env: &Env<'_>, a: &JIntArray<'_>) -> Result<Vec<i32>, Failure> {
    if a.is_null() {
        return Ok(Vec::new());
    }
    let mut v = vec![0i32; a.len(env)?];
    a.get_region(env, 0, &mut v)?;
    Ok(v)
}

fn parse(
    env: &Env<'_>,
    graph_json: &JString<'_>,
    packed: jboolean,
    forced: &JIntArray<'_>,
) -> Result<Request, Failure> {
    let text = string(env, graph_json)?;
    let graph = GraphFile::parse(&text, Path::new("<kotlin tape>"))?;
    let forced = ints(env, forced)?.into_iter().map(|i| usize::try_from(i).unwrap_or(usize::MAX)).collect();
    let packed = if packed { PackedConstantHandling::Dequantize } else { PackedConstantHandling::Fail };
    Ok(Request { graph, packed, forced })
}

/// Builds the lenders for every tensor with JVM data (`kinds[i] != 0`).
fn lenders<'e, 'l>(
    env: &'e RefCell<&'e mut Env<'l>>,
    data: &'e JObjectArray<'l>,
    kinds: &[i32],
    stats: &'e Pins,
) -> Result<Vec<Option<Lender<'e, 'l>>>, Failure> {
    let mut out = Vec::with_capacity(kinds.len());
    for (slot, &code) in kinds.iter().enumerate() {
        let kind = Kind::from_code(code).ok_or(Failure::Tapeout {
            class: VALIDATION,
            message: format!("tensor #{slot}: unknown data kind {code}"),
        })?;
        if kind == Kind::None {
            out.push(None);
            continue;
        }
        // Length of the array, and a type check: one short local frame, no pin.
        let len = {
            let e = env.borrow();
            e.with_local_frame(2, |e| -> Result<u64, jni::errors::Error> {
                let obj = data.get_element(e, slot)?;
                Ok(match kind {
                    Kind::F32 => JFloatArray::cast_local(e, obj)?.len(e)? as u64,
                    // Lent as bytes: two per element.
                    Kind::HalfShorts => JShortArray::cast_local(e, obj)?.len(e)? as u64 * 2,
                    _ => JByteArray::cast_local(e, obj)?.len(e)? as u64,
                })
            })
        }
        .map_err(|err| Failure::Tapeout {
            class: VALIDATION,
            message: format!("tensor #{slot}: its data is not the JVM array its kind needs ({err})"),
        })?;
        let array = JvmArray { env, data, slot, len, stats };
        out.push(Some(match kind {
            Kind::F32 => Lender::Floats(array),
            Kind::HalfShorts => Lender::Shorts(JvmShorts(array)),
            _ => Lender::Bytes(JvmBytes(array)),
        }));
    }
    Ok(out)
}

/// The request's graph with the storage `provide` gives each tensor, extracted.
fn finalize_with<'a>(
    req: &Request,
    weights: &'a WeightSet,
    mut provide: impl FnMut(usize) -> Option<Storage<'a>>,
) -> Result<ComputeGraph<'a>, Failure> {
    let trace = req.graph.to_trace_with(weights, |i, _spec| provide(i))?;
    let forced_inputs = req.forced.iter().map(|&i| TensorId(i)).collect();
    let opts = ExtractOptions { forced_inputs, packed: req.packed, no_constants: false };
    Ok(tapeout_graph::finalize(&trace, &opts)?)
}

fn extract<'a>(
    req: &Request,
    weights: &'a WeightSet,
    kinds: &[i32],
    encodings: &[Option<String>],
    lenders: &'a [Option<Lender<'_, '_>>],
) -> Result<ComputeGraph<'a>, Failure> {
    finalize_with(req, weights, |i| {
        let lender = lenders.get(i)?.as_ref()?;
        let kind = kinds.get(i).copied().and_then(Kind::from_code)?;
        Some(match (lender, kind) {
            (Lender::Floats(a), _) => Storage::F32(Lent::Chunked(a)),
            (Lender::Shorts(h), _) => Storage::Half { bytes: Lent::Chunked(h), layout: HalfLayout::RowMajor },
            (Lender::Bytes(b), Kind::Half) => Storage::Half { bytes: Lent::Chunked(b), layout: HalfLayout::RowMajor },
            (Lender::Bytes(b), Kind::Packed) => Storage::Packed {
                encoding: Encoding::parse(encodings.get(i).cloned().flatten().as_deref().unwrap_or("")),
                order: BlockOrder::RowMajor,
                bytes: Lent::Chunked(b),
            },
            (Lender::Bytes(b), _) => Storage::Dense(Lent::Chunked(b)),
        })
    })
}

/// The tape as the Kotlin side passes it: graph JSON, the JVM arrays, their kind codes and encodings.
struct TapeArgs<'a, 'l> {
    graph_json: &'a JString<'l>,
    data: &'a JObjectArray<'l>,
    kinds: &'a JIntArray<'l>,
    encodings: &'a JObjectArray<'l>,
    dequantize: jboolean,
    forced: &'a JIntArray<'l>,
}

/// Parses the tape, lends its arrays, extracts the graph and runs `f` on it; `f`'s text is returned as a
/// Java string. `f` cannot call into the JVM: the env is lent to the arrays while it runs.
fn with_graph<'l>(
    env: &mut Env<'l>,
    tape: &TapeArgs<'_, 'l>,
    f: impl FnOnce(&ComputeGraph<'_>, &Pins) -> Result<String, Failure>,
) -> Result<JObject<'l>, Failure> {
    let req = parse(env, tape.graph_json, tape.dequantize, tape.forced)?;
    let kinds = ints(env, tape.kinds)?;
    let encs = encodings(env, tape.encodings)?;
    let weights = WeightSet::open(&req.graph, None)?;
    let text = {
        let cell = RefCell::new(&mut *env);
        let stats = Pins::default();
        let lenders = lenders(&cell, tape.data, &kinds, &stats)?;
        let graph = extract(&req, &weights, &kinds, &encs, &lenders)?;
        f(&graph, &stats)?
    };
    Ok(env.new_string(text)?.into())
}

fn encodings(env: &mut Env<'_>, a: &JObjectArray<'_>) -> Result<Vec<Option<String>>, Failure> {
    if a.is_null() {
        return Ok(Vec::new());
    }
    let n = a.len(env)?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let s = env.with_local_frame(2, |env| -> Result<Option<String>, jni::errors::Error> {
            let obj = a.get_element(env, i)?;
            if obj.is_null() {
                return Ok(None);
            }
            let s = env.cast_local::<JString>(obj)?;
            Ok(Some(s.try_to_string(env)?))
        })?;
        out.push(s);
    }
    Ok(out)
}

/// Emission options for function `main` of module `name`: constants of at least `inline_below` bytes external
/// in `scope`, or all inline when `inline_below < 0`.
fn emit_options(name: String, scope: String, inline_below: jlong) -> EmitOptions {
    let policy = match u64::try_from(inline_below) {
        Ok(bytes) => MaterializationPolicy::SizeThreshold { bytes, scope },
        Err(_) => MaterializationPolicy::InlineAlways,
    };
    EmitOptions { module_name: name, function: "main".into(), policy }
}

fn summary(graph: &ComputeGraph<'_>, stats: &Pins) -> serde_json::Value {
    let name = |t: TensorId| graph.spec(t).name.clone();
    serde_json::json!({
        "inputs": graph.inputs.iter().map(|&t| name(t)).collect::<Vec<_>>(),
        "constants": graph.constants.iter().map(|c| serde_json::json!({
            "name": name(c.tensor),
            "key": c.key,
            "bytes": c.data.byte_len(),
            "kind": match &c.data {
                tapeout_graph::ConstantData::F32(_) => "borrowed_f32",
                tapeout_graph::ConstantData::Widen { .. } => "widened",
                tapeout_graph::ConstantData::Dequantize { .. } => "dequantized",
                tapeout_graph::ConstantData::Raw { .. } => "raw",
            },
        })).collect::<Vec<_>>(),
        "key_collisions": graph.key_collisions.iter().map(|k| serde_json::json!({"tensor": k.tensor, "wanted": k.wanted, "assigned": k.assigned})).collect::<Vec<_>>(),
        "pins": stats.pins.get(),
        "copies": stats.copies.get(),
    })
}

/// `NativeBridge.finalize(graphJson, data, kinds, encodings, dequantize, forcedInputs): String`
/// — runs extraction and returns a JSON summary (inputs, constants with keys and kinds).
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_finalize<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    graph_json: JString<'l>,
    data: JObjectArray<'l>,
    kinds: JIntArray<'l>,
    encodings_arr: JObjectArray<'l>,
    dequantize: jboolean,
    forced: JIntArray<'l>,
) -> JObject<'l> {
    unowned
        .with_env(|env| -> Result<JObject<'l>, Failure> {
            let tape = TapeArgs {
                graph_json: &graph_json,
                data: &data,
                kinds: &kinds,
                encodings: &encodings_arr,
                dequantize,
                forced: &forced,
            };
            with_graph(env, &tape, |graph, stats| Ok(summary(graph, stats).to_string()))
        })
        .resolve::<ThrowMapped>()
}

/// `NativeBridge.export(graphJson, data, kinds, encodings, dequantize, forcedInputs, outDir, name,
/// scope, inlineBelow): String` — writes `<outDir>/<name>.mlir` and `.irpa`; returns a JSON
/// summary with the paths, sizes and pin statistics. `inlineBelow < 0` means inline everything.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_export<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    graph_json: JString<'l>,
    data: JObjectArray<'l>,
    kinds: JIntArray<'l>,
    encodings_arr: JObjectArray<'l>,
    dequantize: jboolean,
    forced: JIntArray<'l>,
    out_dir: JString<'l>,
    name: JString<'l>,
    scope: JString<'l>,
    inline_below: jlong,
) -> JObject<'l> {
    unowned
        .with_env(|env| -> Result<JObject<'l>, Failure> {
            let (out_dir, name, scope) = (string(env, &out_dir)?, string(env, &name)?, string(env, &scope)?);
            let tape = TapeArgs {
                graph_json: &graph_json,
                data: &data,
                kinds: &kinds,
                encodings: &encodings_arr,
                dequantize,
                forced: &forced,
            };
            with_graph(env, &tape, |graph, stats| {
                let opts = emit_options(name, scope, inline_below);
                PROGRESS_WRITTEN.store(0, Ordering::Relaxed);
                PROGRESS_TOTAL.store(0, Ordering::Relaxed);
                let s = tapeout_hlo::export(graph, &opts, Path::new(&out_dir), &mut |p| {
                    PROGRESS_TOTAL.store(p.total, Ordering::Relaxed);
                    PROGRESS_WRITTEN.store(p.written, Ordering::Relaxed);
                })?;
                let mut v = summary(graph, stats);
                v["mlir"] = s.mlir.display().to_string().into();
                v["mlir_bytes"] = s.mlir_bytes.into();
                v["irpa"] = s.irpa.path.display().to_string().into();
                v["irpa_bytes"] = s.irpa.file_size.into();
                v["externals"] = s.externals.into();
                Ok(v.to_string())
            })
        })
        .resolve::<ThrowMapped>()
}

/// `NativeBridge.toStableHlo(graphJson, data, kinds, encodings, dequantize, forcedInputs, name,
/// scope, inlineBelow): String` — the module text.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_toStableHlo<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    graph_json: JString<'l>,
    data: JObjectArray<'l>,
    kinds: JIntArray<'l>,
    encodings_arr: JObjectArray<'l>,
    dequantize: jboolean,
    forced: JIntArray<'l>,
    name: JString<'l>,
    scope: JString<'l>,
    inline_below: jlong,
) -> JObject<'l> {
    unowned
        .with_env(|env| -> Result<JObject<'l>, Failure> {
            let (name, scope) = (string(env, &name)?, string(env, &scope)?);
            let tape = TapeArgs {
                graph_json: &graph_json,
                data: &data,
                kinds: &kinds,
                encodings: &encodings_arr,
                dequantize,
                forced: &forced,
            };
            with_graph(env, &tape, |graph, _| {
                let opts = emit_options(name, scope, inline_below);
                Ok(tapeout_hlo::emit(graph, &opts)?.text)
            })
        })
        .resolve::<ThrowMapped>()
}

/// `NativeBridge.archiveEntry(path, key): LongArray` — `[absolute offset, length]` of a DATA
/// entry (or `[-1, length]` for a splat), read by the validating Rust reader.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_archiveEntry<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    path: JString<'l>,
    key: JString<'l>,
) -> JLongArray<'l> {
    unowned
        .with_env(|env| -> Result<JLongArray<'l>, Failure> {
            let (path, key) = (string(env, &path)?, string(env, &key)?);
            let archive = tapeout_irpa::Archive::open(&path)?;
            let entry = archive.get(&key)?;
            let offset = match entry.location.kind {
                tapeout_irpa::IndexKind::Data(r) => i64::try_from(r.offset).unwrap_or(i64::MAX),
                tapeout_irpa::IndexKind::Splat { .. } => -1,
            };
            let length = i64::try_from(entry.byte_len()).unwrap_or(i64::MAX);
            let out = env.new_long_array(2)?;
            out.set_region(env, 0, &[offset, length])?;
            Ok(out)
        })
        .resolve::<ThrowMapped>()
}

/// `NativeBridge.progressWritten(): Long` — archive bytes written so far by the export in flight.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_progressWritten<'l>(
    _env: EnvUnowned<'l>,
    _class: JClass<'l>,
) -> jlong {
    i64::try_from(PROGRESS_WRITTEN.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
}

/// `NativeBridge.progressTotal(): Long` — archive bytes the export in flight will write (0 before it starts).
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_progressTotal<'l>(
    _env: EnvUnowned<'l>,
    _class: JClass<'l>,
) -> jlong {
    i64::try_from(PROGRESS_TOTAL.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
}

/// `NativeBridge.benchExport(graphJson, data, kinds, lentDir, ownedDir, rounds): LongArray` — the JNI-overhead
/// benchmark. Exports the tape `rounds` times each way, alternating which goes first: from the `FloatArray`s
/// lent as `export` lends them (pinned one chunk at a time), and from Rust-owned copies of them (the baseline,
/// copied once before the first round). Only `tapeout_hlo::export` is timed. Returns `[lent ns × rounds,
/// owned ns × rounds, archive bytes, pins, copies]` (pins and copies of the lent exports). Only f32 data.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_benchExport<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    graph_json: JString<'l>,
    data: JObjectArray<'l>,
    kinds: JIntArray<'l>,
    lent_dir: JString<'l>,
    owned_dir: JString<'l>,
    rounds: jni::sys::jint,
) -> JLongArray<'l> {
    unowned
        .with_env(|env| -> Result<JLongArray<'l>, Failure> {
            let (lent_dir, owned_dir) = (string(env, &lent_dir)?, string(env, &owned_dir)?);
            let rounds = usize::try_from(rounds).unwrap_or(0);
            let req = parse(env, &graph_json, false, &JIntArray::null())?;
            let kinds = ints(env, &kinds)?;
            if let Some(slot) = kinds.iter().position(|&k| k != 0 && k != 1) {
                return Err(Failure::Tapeout {
                    class: VALIDATION,
                    message: format!("benchExport takes f32 arrays only; tensor #{slot} has kind {}", kinds[slot]),
                });
            }
            let weights = WeightSet::open(&req.graph, None)?;
            // The baseline's Rust-owned copies, made once, before anything is timed.
            let mut copies: Vec<Option<Vec<f32>>> = Vec::with_capacity(kinds.len());
            for (slot, &kind) in kinds.iter().enumerate() {
                copies.push(if kind == 1 {
                    Some(env.with_local_frame(2, |env| -> Result<Vec<f32>, jni::errors::Error> {
                        let obj = data.get_element(env, slot)?;
                        let array = JFloatArray::cast_local(env, obj)?;
                        let mut v = vec![0f32; array.len(env)?];
                        array.get_region(env, 0, &mut v)?;
                        Ok(v)
                    })?)
                } else {
                    None
                });
            }
            let opts = emit_options("bench".into(), "model".into(), 0);
            let timed = |graph: &ComputeGraph<'_>, dir: &str| -> Result<(u64, u64), Failure> {
                let t = std::time::Instant::now();
                let s = tapeout_hlo::export(graph, &opts, Path::new(dir), &mut |_| {})?;
                Ok((u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX), s.irpa.file_size))
            };
            let owned_graph =
                finalize_with(&req, &weights, |i| copies.get(i)?.as_deref().map(|v| Storage::F32(Lent::Slice(v))))?;
            let stats = Pins::default();
            let (mut lent_ns, mut owned_ns, mut bytes) = (Vec::new(), Vec::new(), 0);
            {
                let cell = RefCell::new(&mut *env);
                let lenders = lenders(&cell, &data, &kinds, &stats)?;
                let lent_graph = extract(&req, &weights, &kinds, &[], &lenders)?;
                for round in 0..rounds {
                    for owned in if round % 2 == 0 { [false, true] } else { [true, false] } {
                        if owned {
                            let (ns, _) = timed(&owned_graph, &owned_dir)?;
                            owned_ns.push(ns);
                        } else {
                            stats.pins.set(0);
                            stats.copies.set(0);
                            let (ns, b) = timed(&lent_graph, &lent_dir)?;
                            lent_ns.push(ns);
                            bytes = b;
                        }
                    }
                }
            }
            let v: Vec<i64> = lent_ns
                .into_iter()
                .chain(owned_ns)
                .chain([bytes, stats.pins.get(), stats.copies.get()])
                .map(|x| i64::try_from(x).unwrap_or(i64::MAX))
                .collect();
            let out = env.new_long_array(v.len())?;
            out.set_region(env, 0, &v)?;
            Ok(out)
        })
        .resolve::<ThrowMapped>()
}

/// `NativeBridge.panicForTest(message)` — panics, so tests can check that a native panic becomes
/// a Kotlin exception and the JVM keeps running.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_panicForTest<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    message: JString<'l>,
) {
    unowned
        .with_env(|env| -> Result<(), Failure> {
            let m = string(env, &message)?;
            panic!("{m}");
        })
        .resolve::<ThrowMapped>();
}

/// `NativeBridge.pinInfo(array): LongArray` — `[isCopy (0/1), length]` of one critical pin of
/// `array`, released with JNI_ABORT before anything else happens.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_pinInfo<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    array: JFloatArray<'l>,
) -> JLongArray<'l> {
    unowned
        .with_env(|env| -> Result<JLongArray<'l>, Failure> {
            let n = array.len(env)?;
            let (is_copy, len) = {
                // SAFETY: a live float[] of n elements; no JNI call until the pin is dropped.
                let pin = unsafe { CriticalPin::<f32>::new(env, array.as_raw(), n) }
                    .ok_or(jni::errors::Error::NullPtr("GetPrimitiveArrayCritical returned null"))?;
                (i64::from(pin.is_copy), i64::try_from(pin.as_slice().len()).unwrap_or(i64::MAX))
            };
            let out = env.new_long_array(2)?;
            out.set_region(env, 0, &[is_copy, len])?;
            Ok(out)
        })
        .resolve::<ThrowMapped>()
}
