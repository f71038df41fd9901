//! Entry points for the JVM test suite and benchmarks (`NativeTestHooks` in the Kotlin test sources): a
//! native panic on demand, one critical pin's facts, the JNI-overhead benchmark. Built only with the cargo
//! feature `test-hooks`; the published library does not carry them.

use std::cell::RefCell;
use std::path::Path;

use jni::EnvUnowned;
use jni::objects::{JClass, JFloatArray, JIntArray, JLongArray, JObjectArray, JString};
use tapeout::graph::io::WeightSet;
use tapeout::graph::{ComputeGraph, Lent, Storage};

use crate::contract::Kind;
use crate::error::{Failure, ThrowMapped};
use crate::marshal::{emit_options, extract, finalize_with, ints, lenders, parse, string};
use crate::pin::{CriticalPin, Pins};

/// `NativeTestHooks.benchExport(graphJson, data, kinds, lentDir, ownedDir, rounds): LongArray` — the JNI-overhead
/// benchmark. Exports the tape `rounds` times each way, alternating which goes first: from the `FloatArray`s
/// lent as `export` lends them (pinned one chunk at a time), and from Rust-owned copies of them (the baseline,
/// copied once before the first round). Only `tapeout::export` is timed. Returns `[lent ns × rounds,
/// owned ns × rounds, archive bytes, pins, copies]` (pins and copies of the lent exports). Only f32 data.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeTestHooks_benchExport<'l>(
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
            let rounds = usize::try_from(rounds)
                .map_err(|_| Failure::invalid(format!("benchExport: rounds must be 0 or more, not {rounds}")))?;
            let req = parse(env, &graph_json, 0, &JIntArray::null())?;
            let kinds = ints(env, &kinds)?;
            let f32_or_none = |k| matches!(Kind::from_code(k), Some(Kind::None | Kind::F32));
            if let Some(slot) = kinds.iter().position(|&k| !f32_or_none(k)) {
                return Err(Failure::invalid(format!(
                    "benchExport takes f32 arrays only; tensor #{slot} has kind {}",
                    kinds[slot]
                )));
            }
            let weights = WeightSet::open(&req.graph, None)?;
            // The baseline's Rust-owned copies, made once, before anything is timed.
            let mut copies: Vec<Option<Vec<f32>>> = Vec::with_capacity(kinds.len());
            for (slot, &kind) in kinds.iter().enumerate() {
                copies.push(if Kind::from_code(kind) == Some(Kind::F32) {
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
                let s = tapeout::export(graph, &opts, None, Path::new(dir), &mut |_| {})?;
                Ok((
                    u64::try_from(t.elapsed().as_nanos())
                        .map_err(|_| Failure::invalid("benchExport: an export took 2^64 ns".to_owned()))?,
                    s.archives.total_file_size(),
                ))
            };
            let owned_graph =
                finalize_with(&req, &weights, |i| copies.get(i)?.as_deref().map(|v| Storage::F32(Lent::Slice(v))))?;
            let stats = Pins::default();
            let (mut lent_ns, mut owned_ns, mut bytes) = (Vec::new(), Vec::new(), 0);
            {
                let cell = RefCell::new(&mut *env);
                let lenders = lenders(&cell, &data, &kinds, &[], &stats)?;
                let lent_graph = extract(&req, &weights, &lenders)?;
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
                .map(|x| {
                    i64::try_from(x).map_err(|_| Failure::invalid(format!("benchExport: {x} does not fit in a long")))
                })
                .collect::<Result<_, _>>()?;
            let out = env.new_long_array(v.len())?;
            out.set_region(env, 0, &v)?;
            Ok(out)
        })
        .resolve::<ThrowMapped>()
}

/// `NativeTestHooks.panicForTest(message)` — panics, so tests can check that a native panic becomes
/// a Kotlin exception and the JVM keeps running.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeTestHooks_panicForTest<'l>(
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

/// `NativeTestHooks.pinInfo(array): LongArray` — `[isCopy (0/1), length]` of one critical pin of
/// `array`, released with JNI_ABORT before anything else happens.
#[unsafe(no_mangle)]
pub extern "system" fn Java_dev_tapeout_NativeTestHooks_pinInfo<'l>(
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
                (i64::from(pin.is_copy), pin.as_slice().len())
            };
            let len =
                i64::try_from(len).map_err(|_| Failure::invalid(format!("pinInfo: length {len} is not a long")))?;
            let out = env.new_long_array(2)?;
            out.set_region(env, 0, &[is_copy, len])?;
            Ok(out)
        })
        .resolve::<ThrowMapped>()
}
