//! From the Kotlin tape's arguments to a compute graph: the graph JSON, the JVM arrays with their kind
//! codes and encodings, lent (never copied) to extraction.

use std::cell::RefCell;
use std::path::Path;

use jni::Env;
use jni::objects::{JByteArray, JFloatArray, JIntArray, JObject, JObjectArray, JShortArray, JString};
use jni::sys::{jint, jlong};
use tapeout::graph::io::{FileAccess, GraphFile, WeightSet};
use tapeout::graph::{
    BlockOrder, ComputeGraph, Encoding, ExtractOptions, HalfConstantHandling, HalfLayout, Lent, PackedCodesLayout,
    PackedConstantHandling, Storage, Target, TensorId, Tuning,
};
use tapeout::hlo::{EmitOptions, MaterializationPolicy};

use crate::contract::{
    DEQUANTIZE_PACKED, KEEP_PACKED, Kind, NO_TUNING, OPTIONS, ROW_BAND_CODES, TARGET_BITS, TARGET_SHIFT, WIDEN_HALF,
    target_of,
};
use crate::error::Failure;
use crate::pin::{ByteUse, JvmArray, JvmBytes, JvmShorts, Lender, Pins};

/// Everything the entry points share: parse the graph, lend the arrays, extract.
pub(crate) struct Request {
    pub(crate) graph: GraphFile,
    pub(crate) packed: PackedConstantHandling,
    pub(crate) packed_codes: PackedCodesLayout,
    pub(crate) half: HalfConstantHandling,
    pub(crate) target: Target,
    pub(crate) tuning: Tuning,
    pub(crate) forced: Vec<usize>,
}

pub(crate) fn string(env: &Env<'_>, s: &JString<'_>) -> Result<String, Failure> {
    Ok(s.try_to_string(env)?)
}

pub(crate) fn ints(env: &Env<'_>, a: &JIntArray<'_>) -> Result<Vec<i32>, Failure> {
    if a.is_null() {
        return Ok(Vec::new());
    }
    let mut v = vec![0i32; a.len(env)?];
    a.get_region(env, 0, &mut v)?;
    Ok(v)
}

/// Parses the tape's graph JSON, its `options` bits (see [`crate::contract::OPTIONS`]) and its forced inputs.
pub(crate) fn parse(
    env: &Env<'_>,
    graph_json: &JString<'_>,
    options: jint,
    forced: &JIntArray<'_>,
) -> Result<Request, Failure> {
    let text = string(env, graph_json)?;
    // The program builds its own tape: the files it names (mapped regions) are its own choice.
    let graph = GraphFile::parse(&text, Path::new("<kotlin tape>"))?.with_file_access(FileAccess::Anywhere);
    let forced = ints(env, forced)?
        .into_iter()
        .map(|i| usize::try_from(i).map_err(|_| Failure::invalid(format!("forced input index {i} is negative"))))
        .collect::<Result<_, _>>()?;
    let known = OPTIONS.iter().fold(TARGET_BITS, |acc, o| acc | o.bit);
    let both = DEQUANTIZE_PACKED | KEEP_PACKED;
    if options & !known != 0 || options & both == both {
        return Err(Failure::invalid(format!("unknown option bits {options:#x}")));
    }
    if options & ROW_BAND_CODES != 0 && options & KEEP_PACKED == 0 {
        return Err(Failure::invalid(format!(
            "option bits {options:#x}: ROW_BAND_CODES lays out the codes of weights kept packed, so it needs KEEP_PACKED"
        )));
    }
    let packed_codes =
        if options & ROW_BAND_CODES != 0 { PackedCodesLayout::RowBands } else { PackedCodesLayout::BlockRows };
    let packed = if options & DEQUANTIZE_PACKED != 0 {
        PackedConstantHandling::Dequantize
    } else if options & KEEP_PACKED != 0 {
        PackedConstantHandling::Keep
    } else {
        PackedConstantHandling::Fail
    };
    let half = if options & WIDEN_HALF != 0 { HalfConstantHandling::Widen } else { HalfConstantHandling::Keep };
    let target = target_of(options).ok_or_else(|| {
        Failure::invalid(format!(
            "option bits {options:#x}: no export target has code {}",
            (options & TARGET_BITS) >> TARGET_SHIFT
        ))
    })?;
    let tuning = if options & NO_TUNING != 0 { Tuning::Off } else { Tuning::On };
    Ok(Request { graph, packed, packed_codes, half, target, tuning, forced })
}

/// Builds the lenders for every tensor with JVM data (`kinds[i] != 0`); a packed tensor's encoding is
/// `encodings[i]`.
pub(crate) fn lenders<'e, 'l>(
    env: &'e RefCell<&'e mut Env<'l>>,
    data: &'e JObjectArray<'l>,
    kinds: &[i32],
    encodings: &[Option<String>],
    stats: &'e Pins,
) -> Result<Vec<Option<Lender<'e, 'l>>>, Failure> {
    let mut out = Vec::with_capacity(kinds.len());
    for (slot, &code) in kinds.iter().enumerate() {
        let kind = Kind::from_code(code)
            .ok_or_else(|| Failure::invalid(format!("tensor #{slot}: unknown data kind {code}")))?;
        // What a ByteArray's bytes are (None: not a ByteArray).
        let used = match kind {
            Kind::None => {
                out.push(None);
                continue;
            }
            Kind::F32 | Kind::HalfShorts => None,
            Kind::Half => Some(ByteUse::Half),
            Kind::Dense => Some(ByteUse::Dense),
            Kind::Packed => {
                let Some(name) = encodings.get(slot).cloned().flatten() else {
                    return Err(Failure::invalid(format!("tensor #{slot}: packed data without an encoding")));
                };
                Some(ByteUse::Packed(Encoding::parse(&name)))
            }
        };
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
        .map_err(|err| {
            Failure::invalid(format!("tensor #{slot}: its data is not the JVM array its kind needs ({err})"))
        })?;
        let array = JvmArray { env, data, slot, len, stats };
        out.push(Some(match (kind, used) {
            (_, Some(used)) => Lender::Bytes(JvmBytes(array), used),
            (Kind::HalfShorts, None) => Lender::Shorts(JvmShorts(array)),
            (_, None) => Lender::Floats(array),
        }));
    }
    Ok(out)
}

/// The request's graph with the storage `provide` gives each tensor, extracted.
#[cfg(feature = "test-hooks")]
pub(crate) fn finalize_with<'a>(
    req: &Request,
    weights: &'a WeightSet,
    provide: impl FnMut(usize) -> Option<Storage<'a>>,
) -> Result<ComputeGraph<'a>, Failure> {
    finalize_function(req, 0, weights, provide)
}

/// The request's graph's function `f` (0 for a single tape) with the storage `provide` gives each tensor,
/// extracted.
pub(crate) fn finalize_function<'a>(
    req: &Request,
    f: usize,
    weights: &'a WeightSet,
    mut provide: impl FnMut(usize) -> Option<Storage<'a>>,
) -> Result<ComputeGraph<'a>, Failure> {
    let trace = req.graph.to_trace_of(f, weights, |i, _spec| provide(i))?;
    let forced_inputs = req
        .forced
        .iter()
        .map(|&i| {
            trace.id(i).ok_or_else(|| {
                Failure::invalid(format!(
                    "forced input #{i} is not a tensor of the tape ({} tensors)",
                    trace.tensors().len()
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    let opts = ExtractOptions {
        forced_inputs,
        packed: req.packed,
        packed_codes: req.packed_codes,
        half: req.half,
        target: req.target,
        tuning: req.tuning,
        ..ExtractOptions::default()
    };
    Ok(tapeout::finalize(&trace, &opts)?)
}

#[cfg(feature = "test-hooks")]
pub(crate) fn extract<'a>(
    req: &Request,
    weights: &'a WeightSet,
    lenders: &'a [Option<Lender<'_, '_>>],
) -> Result<ComputeGraph<'a>, Failure> {
    extract_function(req, 0, weights, lenders)
}

/// `extract` for function `f`: every function borrows the same lenders, so a weight the functions share is one
/// constant with one identity.
pub(crate) fn extract_function<'a>(
    req: &Request,
    f: usize,
    weights: &'a WeightSet,
    lenders: &'a [Option<Lender<'_, '_>>],
) -> Result<ComputeGraph<'a>, Failure> {
    finalize_function(req, f, weights, |i| {
        Some(match lenders.get(i)?.as_ref()? {
            Lender::Floats(a) => Storage::F32(Lent::Chunked(a)),
            Lender::Shorts(h) => Storage::Half { bytes: Lent::Chunked(h), layout: HalfLayout::RowMajor },
            Lender::Bytes(b, ByteUse::Half) => Storage::Half { bytes: Lent::Chunked(b), layout: HalfLayout::RowMajor },
            Lender::Bytes(b, ByteUse::Packed(encoding)) => {
                Storage::Packed { encoding: encoding.clone(), order: BlockOrder::RowMajor, bytes: Lent::Chunked(b) }
            }
            Lender::Bytes(b, ByteUse::Dense) => Storage::Dense(Lent::Chunked(b)),
        })
    })
}

/// The tape as the Kotlin side passes it: graph JSON, the JVM arrays, their kind codes and encodings.
pub(crate) struct TapeArgs<'a, 'l> {
    pub(crate) graph_json: &'a JString<'l>,
    pub(crate) data: &'a JObjectArray<'l>,
    pub(crate) kinds: &'a JIntArray<'l>,
    pub(crate) encodings: &'a JObjectArray<'l>,
    pub(crate) options: jint,
    pub(crate) forced: &'a JIntArray<'l>,
}

/// Parses the tape, lends its arrays, extracts the graph and runs `f` on it; `f`'s text is returned as a
/// Java string. `f` cannot call into the JVM: the env is lent to the arrays while it runs.
pub(crate) fn with_graph<'l>(
    env: &mut Env<'l>,
    tape: &TapeArgs<'_, 'l>,
    f: impl FnOnce(&ComputeGraph<'_>, &Pins) -> Result<String, Failure>,
) -> Result<JObject<'l>, Failure> {
    // A tape is one function; a graph of several is for `export` (with_graphs) and takes its first here.
    with_graphs(env, tape, |functions, _, stats| {
        let (_, graph) = functions.first().ok_or_else(|| Failure::invalid("the graph has no function".to_owned()))?;
        f(graph, stats)
    })
}

/// [`with_graph`] for every function of the tape's graph: `f` gets `(name, graph)` per function, in order, and the
/// files the graph's file-backed weights are mapped from.
pub(crate) fn with_graphs<'l>(
    env: &mut Env<'l>,
    tape: &TapeArgs<'_, 'l>,
    f: impl FnOnce(&[(&str, &ComputeGraph<'_>)], &WeightSet, &Pins) -> Result<String, Failure>,
) -> Result<JObject<'l>, Failure> {
    let req = parse(env, tape.graph_json, tape.options, tape.forced)?;
    let kinds = ints(env, tape.kinds)?;
    let encs = encodings(env, tape.encodings)?;
    let weights = WeightSet::open(&req.graph, None)?;
    let text = {
        let cell = RefCell::new(&mut *env);
        let stats = Pins::default();
        let lenders = lenders(&cell, tape.data, &kinds, &encs, &stats)?;
        let names = req.graph.function_names();
        let several = names.len() > 1;
        let graphs = (0..names.len())
            .map(|i| {
                extract_function(&req, i, &weights, &lenders).map_err(|e| match e {
                    Failure::Tapeout(mut t) if several => {
                        t.message = format!("function '{}': {}", names[i], t.message);
                        t.function = Some(names[i].to_owned());
                        Failure::Tapeout(t)
                    }
                    other => other,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let functions: Vec<(&str, &ComputeGraph<'_>)> = names.iter().copied().zip(graphs.iter()).collect();
        f(&functions, &weights, &stats)?
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
pub(crate) fn emit_options(name: String, scope: String, inline_below: jlong) -> EmitOptions {
    let policy = match u64::try_from(inline_below) {
        Ok(bytes) => MaterializationPolicy::SizeThreshold { bytes, scope },
        Err(_) => MaterializationPolicy::InlineAlways,
    };
    EmitOptions { module_name: name, function: "main".into(), policy }
}

pub(crate) fn summary(graph: &ComputeGraph<'_>, stats: &Pins) -> serde_json::Value {
    let name = |t: TensorId| graph.spec(t).name.clone();
    serde_json::json!({
        "inputs": graph.inputs().iter().map(|&t| name(t)).collect::<Vec<_>>(),
        "constants": graph.constants().iter().map(|c| serde_json::json!({
            "name": name(c.tensor),
            "key": c.key,
            "bytes": c.data.byte_len(),
            "kind": match &c.data {
                tapeout::graph::ConstantData::F32(_) => "borrowed_f32",
                tapeout::graph::ConstantData::Widen { .. } => "widened",
                tapeout::graph::ConstantData::Dequantize { .. } => "dequantized",
                tapeout::graph::ConstantData::Raw { dtype: tapeout::graph::DType::F16 | tapeout::graph::DType::BF16, .. } => "kept_16bit",
                tapeout::graph::ConstantData::Raw { .. } => "raw",
                tapeout::graph::ConstantData::Transposed { .. } => "transposed",
                tapeout::graph::ConstantData::Plane { .. } => "packed_plane",
                tapeout::graph::ConstantData::Words { .. } => "words",
            },
        })).collect::<Vec<_>>(),
        "key_collisions": graph.key_collisions().iter().map(|k| serde_json::json!({"tensor": k.tensor, "wanted": k.wanted, "assigned": k.assigned})).collect::<Vec<_>>(),
        "pins": stats.pins.get(),
        "copies": stats.copies.get(),
    })
}
