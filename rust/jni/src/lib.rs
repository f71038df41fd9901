//! JNI entry points of tapeout for the Kotlin library `dev.tapeout` (object `NativeBridge`).
//!
//! A Kotlin `ExecutionTape` reaches Rust as graph JSON (`tapeout-graph/1`, without data) plus an
//! `Object[]` holding, per tensor, the JVM array with its values (`FloatArray`, `ShortArray` or `ByteArray`) and
//! an `int[]` saying what kind of data each array is. The kind codes, the `options` bits, the remedy names and the
//! dtype names are defined once, in `contract`, which renders the Kotlin side's `NativeContract.kt`.
//!
//! **No weight is copied.** Arrays are lent to the exporter through `pin::JvmArray`, which pins the
//! array with `GetPrimitiveArrayCritical` for **one chunk at a time** (at most 64 MiB, re-pinned
//! per chunk, because a critical section blocks the GC on JDK 17), hands the chunk to the writer,
//! and releases it with `JNI_ABORT` (never writing back). No JNI call is made while an array is
//! pinned: each chunk opens its own local frame, takes the array out of the `Object[]`, pins,
//! writes, unpins and pops the frame.
//!
//! Every entry point runs inside one wrapper: Rust errors become specific Kotlin exceptions
//! (`PackedConstantException`, `ConstantTooLargeException`, `GraphValidationException`,
//! `IrpaFormatException`, `java.io.IOException`) carrying their fields as data (detail, remedy and its argument,
//! node indices, tensor), and a panic becomes a `RuntimeException` that carries the panic message. The JVM is
//! never aborted.
//!
//! This crate marshals and words; the pipeline is the `tapeout` crate's. Modules: `contract` (the numbers and
//! names both sides share), `error` (exception mapping), `pin` (critical pins and chunk lenders), `marshal` (tape arguments to a graph); the test and
//! benchmark entry points are behind the `test-hooks` feature.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use jni::EnvUnowned;
use jni::objects::{JClass, JIntArray, JLongArray, JObject, JObjectArray, JString};
use jni::sys::{jint, jlong};

mod contract;
mod error;
#[cfg(feature = "test-hooks")]
mod hooks;
mod marshal;
mod pin;

use error::{Failure, ThrowMapped};
use marshal::{TapeArgs, emit_options, string, summary, with_graph, with_graphs};

/// Progress of the export in flight: payload bytes written and in total. Updated by the archive writer
/// (no JNI call); read by `NativeBridge.progressWritten/progressTotal` from another Kotlin thread, which is
/// allowed while the exporting thread holds a pin (those calls allocate nothing).
static PROGRESS_WRITTEN: AtomicU64 = AtomicU64::new(0);
static PROGRESS_TOTAL: AtomicU64 = AtomicU64::new(0);

/// `NativeBridge.finalize(graphJson, data, kinds, encodings, options, forcedInputs): String`
/// — runs extraction and returns a JSON summary (inputs, constants with keys and kinds).
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_finalize<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    graph_json: JString<'l>,
    data: JObjectArray<'l>,
    kinds: JIntArray<'l>,
    encodings_arr: JObjectArray<'l>,
    options: jint,
    forced: JIntArray<'l>,
) -> JObject<'l> {
    unowned
        .with_env(|env| -> Result<JObject<'l>, Failure> {
            let tape = TapeArgs {
                graph_json: &graph_json,
                data: &data,
                kinds: &kinds,
                encodings: &encodings_arr,
                options,
                forced: &forced,
            };
            with_graph(env, &tape, |graph, stats| Ok(summary(graph, stats).to_string()))
        })
        .resolve::<ThrowMapped>()
}

/// `NativeBridge.export(graphJson, data, kinds, encodings, options, forcedInputs, outDir, name,
/// scope, inlineBelow, maxArchiveBytes): String` — writes `<outDir>/<name>.mlir` and `.irpa` (or, with
/// `maxArchiveBytes > 0`, the shards of a set and its index); returns a JSON summary with the paths, sizes,
/// IREE's `--parameters` flags and pin statistics. `inlineBelow < 0` means inline everything.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_export<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    graph_json: JString<'l>,
    data: JObjectArray<'l>,
    kinds: JIntArray<'l>,
    encodings_arr: JObjectArray<'l>,
    options: jint,
    forced: JIntArray<'l>,
    out_dir: JString<'l>,
    name: JString<'l>,
    scope: JString<'l>,
    inline_below: jlong,
    max_archive_bytes: jlong,
) -> JObject<'l> {
    unowned
        .with_env(|env| -> Result<JObject<'l>, Failure> {
            let (out_dir, name, scope) = (string(env, &out_dir)?, string(env, &name)?, string(env, &scope)?);
            let max_archive_bytes = u64::try_from(max_archive_bytes).ok().filter(|&n| n > 0);
            let tape = TapeArgs {
                graph_json: &graph_json,
                data: &data,
                kinds: &kinds,
                encodings: &encodings_arr,
                options,
                forced: &forced,
            };
            // A tape is one function (`main`); several tapes exported as one module are a graph with "functions".
            with_graphs(env, &tape, |functions, files, stats| {
                let mut opts = emit_options(name, scope, inline_below);
                if let [(only, _)] = functions {
                    opts.function = (*only).to_owned();
                }
                PROGRESS_WRITTEN.store(0, Ordering::Relaxed);
                PROGRESS_TOTAL.store(0, Ordering::Relaxed);
                let s = tapeout::export_functions(
                    functions,
                    &opts,
                    Some(files),
                    max_archive_bytes,
                    Path::new(&out_dir),
                    &mut |p| {
                        PROGRESS_TOTAL.store(p.total, Ordering::Relaxed);
                        PROGRESS_WRITTEN.store(p.written, Ordering::Relaxed);
                    },
                )?;
                let graph = functions
                    .first()
                    .map(|(_, g)| *g)
                    .ok_or_else(|| Failure::invalid("the graph has no function".to_owned()))?;
                let mut v = summary(graph, stats);
                v["functions"] = functions.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>().into();
                v["mlir"] = s.mlir.display().to_string().into();
                v["mlir_bytes"] = s.mlir_bytes.into();
                v["signature"] = s.signature.display().to_string().into();
                v["tuning_spec"] = s.tuning_spec.as_ref().map(|p| p.display().to_string()).into();
                let archives = &s.archives.archives;
                v["archives"] = archives.iter().map(|a| a.path.display().to_string()).collect::<Vec<_>>().into();
                v["archive_bytes"] = archives.iter().map(|a| a.file_size).collect::<Vec<_>>().into();
                v["index"] = s.archives.index.as_ref().map(|p| p.display().to_string()).into();
                v["parameters_flags"] = s.parameters_flags.clone().into();
                v["externals"] = s.externals.into();
                Ok(v.to_string())
            })
        })
        .resolve::<ThrowMapped>()
}

/// `NativeBridge.toStableHlo(graphJson, data, kinds, encodings, options, forcedInputs, name,
/// scope, inlineBelow): String` — the module text.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_toStableHlo<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    graph_json: JString<'l>,
    data: JObjectArray<'l>,
    kinds: JIntArray<'l>,
    encodings_arr: JObjectArray<'l>,
    options: jint,
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
                options,
                forced: &forced,
            };
            with_graph(env, &tape, |graph, _| {
                let opts = emit_options(name, scope, inline_below);
                Ok(tapeout::module_text(graph, &opts)?)
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
            let archive = tapeout::irpa::Archive::open(&path)?;
            let entry = archive.get(&key)?;
            let offset = match entry.location.kind {
                tapeout::irpa::IndexKind::Data(r) => jlong_of(r.offset, "offset", &key)?,
                tapeout::irpa::IndexKind::Splat { .. } => -1,
            };
            let length = jlong_of(entry.byte_len(), "length", &key)?;
            let out = env.new_long_array(2)?;
            out.set_region(env, 0, &[offset, length])?;
            Ok(out)
        })
        .resolve::<ThrowMapped>()
}

/// `n` as a JVM `long`, or an error naming the entry whose `what` does not fit in one.
fn jlong_of(n: u64, what: &str, key: &str) -> Result<jlong, Failure> {
    jlong::try_from(n)
        .map_err(|_| Failure::invalid(format!("entry '{key}': its {what} {n} does not fit in a JVM long")))
}

/// A progress counter as a JVM `long`. Saturating is meant: this is a display read from another thread, outside
/// the error wrapper, where a panic would abort the JVM; no archive reaches 2^63 bytes.
fn progress(n: &AtomicU64) -> jlong {
    jlong::try_from(n.load(Ordering::Relaxed)).unwrap_or(jlong::MAX)
}

/// `NativeBridge.progressWritten(): Long` — archive bytes written so far by the export in flight.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_progressWritten<'l>(
    _env: EnvUnowned<'l>,
    _class: JClass<'l>,
) -> jlong {
    progress(&PROGRESS_WRITTEN)
}

/// `NativeBridge.progressTotal(): Long` — archive bytes the export in flight will write (0 before it starts).
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_progressTotal<'l>(
    _env: EnvUnowned<'l>,
    _class: JClass<'l>,
) -> jlong {
    progress(&PROGRESS_TOTAL)
}

/// `NativeBridge.knownOps(): String` — the names of every op of the native op table, comma-separated (the
/// Kotlin test suite checks that every op the tracing API records is one of them).
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_knownOps<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
) -> JObject<'l> {
    unowned
        .with_env(|env| -> Result<JObject<'l>, Failure> {
            Ok(env.new_string(tapeout::graph::ops::known_op_names())?.into())
        })
        .resolve::<ThrowMapped>()
}

/// `NativeBridge.describeWeights(path): String` — a safetensors or GGUF file as JSON, read by the validating
/// reader: `{"format", "tensors": [{"name", "dtype", "shape", "offset", "length", "encoding"?}], "metadata"}`.
/// Offsets are absolute in the file; a packed GGUF tensor has logical dtype `f32` and its encoding. Metadata
/// values are strings (safetensors `__metadata__`) or GGUF numbers, booleans, strings, and arrays as
/// `{"array_len", "elem_type"}` (contents are not read).
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeBridge_describeWeights<'l>(
    mut unowned: EnvUnowned<'l>,
    _class: JClass<'l>,
    path: JString<'l>,
) -> JObject<'l> {
    unowned
        .with_env(|env| -> Result<JObject<'l>, Failure> {
            let path = string(env, &path)?;
            let file = tapeout::graph::io::WeightFile::open(&path).map_err(tapeout::Error::from)?;
            let json = describe_weights(&file).to_string();
            Ok(env.new_string(json)?.into())
        })
        .resolve::<ThrowMapped>()
}

fn describe_weights(file: &tapeout::graph::io::WeightFile) -> serde_json::Value {
    use tapeout::graph::io::gguf::GgufValue;
    use tapeout::graph::io::{Stored, WeightFile};
    let tensors: Vec<serde_json::Value> = file
        .tensors()
        .iter()
        .map(|t| {
            let mut v = serde_json::json!({
                "name": t.name,
                "dtype": t.dtype().to_string(),
                "shape": t.shape,
                "offset": t.offset,
                "length": t.bytes.len() as u64,
            });
            if let Stored::Packed(e) = &t.stored {
                v["encoding"] = serde_json::Value::String(e.name().to_owned());
            }
            v
        })
        .collect();
    let (format, metadata) = match file {
        WeightFile::SafeTensors(s) => (
            "safetensors",
            s.metadata().iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect(),
        ),
        WeightFile::Gguf(g) => (
            "gguf",
            g.metadata()
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        GgufValue::U64(n) => serde_json::json!(n),
                        GgufValue::I64(n) => serde_json::json!(n),
                        GgufValue::F64(x) => serde_json::json!(x),
                        GgufValue::Bool(b) => serde_json::json!(b),
                        GgufValue::Str(s) => serde_json::json!(s),
                        GgufValue::Array { elem_type, len } => {
                            serde_json::json!({"array_len": len, "elem_type": elem_type})
                        }
                    };
                    (k.clone(), v)
                })
                .collect::<serde_json::Map<String, serde_json::Value>>(),
        ),
    };
    serde_json::json!({"format": format, "tensors": tensors, "metadata": metadata})
}
