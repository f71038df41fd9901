//! Lowering a [`ComputeGraph`] to StableHLO text.
//!
//! `builder` holds the emitter's state and the StableHLO primitives, `lower` dispatches each node by its
//! [`OpKind`](tapeout_graph::OpKind), `nn` lowers the neural-network ops (convolution, pooling, norms,
//! attention, rope), `constants` places each constant (external parameter or inline hex).

mod builder;
mod constants;
mod lower;
mod nn;
mod rows;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::Write;

use tapeout_graph::{ComputeGraph, DType, TensorId};

use crate::error::{HloError, Result};
use crate::text::{push_hex, string_literal, symbol};
use builder::{Emitter, Val, list, ty};
use constants::{HexSink, constant_failed, is_external, splat_element};

/// The largest constant written inline: one buffer of 2 GiB − 1 bytes.
pub const INLINE_CEILING: u64 = (1 << 31) - 1;

/// Which constants become external parameters (`#flow.parameter.named`) and which are inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaterializationPolicy {
    /// Every constant inline as `stablehlo.constant dense<"0x…">`.
    InlineAlways,
    /// Every constant external, in `scope` (scalars and booleans stay inline).
    ExternalAlways {
        /// Parameter scope (bound with `--parameters=SCOPE=file.irpa`).
        scope: String,
    },
    /// External when the constant has at least `bytes` bytes.
    SizeThreshold {
        /// Threshold in bytes (inclusive).
        bytes: u64,
        /// Parameter scope.
        scope: String,
    },
}

impl Default for MaterializationPolicy {
    fn default() -> Self {
        MaterializationPolicy::SizeThreshold { bytes: 4096, scope: "model".into() }
    }
}

/// Options of [`emit`].
#[derive(Debug, Clone)]
pub struct EmitOptions {
    /// `module @<name>`.
    pub module_name: String,
    /// The function's name (`main`).
    pub function: String,
    /// Inline or external constants.
    pub policy: MaterializationPolicy,
}

impl Default for EmitOptions {
    fn default() -> Self {
        Self { module_name: "model".into(), function: "main".into(), policy: MaterializationPolicy::default() }
    }
}

/// A constant the module reads from a parameter archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalParameter {
    /// Its scope.
    pub scope: String,
    /// Its key (the archive entry name).
    pub key: String,
    /// The graph tensor it provides (in the graph of [`Self::function`]).
    pub tensor: TensorId,
    /// Which function's graph first declares it (0 for a single-function module).
    pub function: usize,
}

/// An emitted module.
#[derive(Debug, Clone)]
pub struct Module {
    /// The MLIR text.
    pub text: String,
    /// The external parameters it declares, in declaration order.
    pub externals: Vec<ExternalParameter>,
}

/// Text is written to the output whenever this much is pending.
pub(crate) const SPILL_BYTES: usize = 1 << 20;

/// Where the emitter's pending text goes. `take` consumes `text` and leaves it empty: a writer copies it
/// out; the export's pipeline swaps the whole buffer for an empty one and hands it to its writer thread.
pub(crate) trait TextOut {
    /// Takes the pending text.
    fn take(&mut self, text: &mut String) -> std::io::Result<()>;
}

/// [`TextOut`] for any [`Write`]: writes the text and clears it.
pub(crate) struct WriteOut<'w>(&'w mut dyn Write);

impl TextOut for WriteOut<'_> {
    fn take(&mut self, text: &mut String) -> std::io::Result<()> {
        self.0.write_all(text.as_bytes())?;
        text.clear();
        Ok(())
    }
}

/// Emits the module for `graph` as a string.
pub fn emit(graph: &ComputeGraph<'_>, opts: &EmitOptions) -> Result<Module> {
    let mut out = Vec::new();
    let externals = emit_to(graph, opts, &mut out)?;
    let text = String::from_utf8(out).map_err(|e| HloError::Output(std::io::Error::other(e)))?;
    Ok(Module { text, externals })
}

/// Emits the module for `graph` into `out`, returning its external parameters.
///
/// The text is written once, in order: globals, signature (argument and result types are known
/// from the specs), constants (hex streamed in 1 MiB pieces), then the ops. Memory stays bounded
/// however large the inline constants are.
pub fn emit_to(graph: &ComputeGraph<'_>, opts: &EmitOptions, out: &mut dyn Write) -> Result<Vec<ExternalParameter>> {
    emit_into(graph, opts, &mut WriteOut(out))
}

/// [`emit_to`] into any [`TextOut`].
pub(crate) fn emit_into(
    graph: &ComputeGraph<'_>,
    opts: &EmitOptions,
    out: &mut dyn TextOut,
) -> Result<Vec<ExternalParameter>> {
    emit_functions_into(&[(opts.function.as_str(), graph)], opts, out)
}

/// One module holding a public function per `(name, graph)`, into any [`TextOut`]. A constant that several
/// functions use under one key (a shared weight) is one `util.global` (and so one archive entry); each
/// function loads it. One key for two different types is an error naming the key and both functions.
pub(crate) fn emit_functions_into(
    functions: &[(&str, &ComputeGraph<'_>)],
    opts: &EmitOptions,
    out: &mut dyn TextOut,
) -> Result<Vec<ExternalParameter>> {
    let mut seen_fn = HashSet::new();
    for (name, _) in functions {
        if !seen_fn.insert(*name) {
            return Err(HloError::Unsupported {
                node: format!("function '{name}'"),
                op: "module",
                detail: "two functions have this name; give each its own".into(),
            });
        }
    }
    let mut text = String::new();
    let _ = writeln!(text, "module {} {{", symbol(&opts.module_name));
    let (externals, placements) = declare_globals(functions, opts, &mut text)?;
    let mut next = 0;
    let several = functions.len() > 1;
    for ((fname, graph), placement) in functions.iter().zip(&placements) {
        let in_function = |e: HloError| match e {
            HloError::Output(_) => e,
            e if several => HloError::InFunction { function: (*fname).to_owned(), source: Box::new(e) },
            e => e,
        };
        let func_symbol = symbol(fname);
        // Argument and result names travel as discardable `tapeout.name` attributes, so a caller can
        // match tensors to positions (IREE ignores them).
        let named = |id: TensorId, more: &str| {
            format!("{} {{tapeout.name = {}{more}}}", graph.spec(id).mlir_type(), string_literal(&graph.spec(id).name))
        };
        // An argument with `?` dims also says which of them the graph requires equal (`tapeout.dims = "d0x4"`),
        // so a runtime can refuse a call that breaks what the lowering assumes instead of reading out of bounds.
        let arg_dims = tapeout_graph::argument_dims(graph);
        let args = list(graph.inputs().iter().zip(&arg_dims).enumerate().map(|(i, (&id, dims))| {
            let more = if graph.spec(id).shape.is_dynamic() {
                format!(", tapeout.dims = {}", string_literal(&tapeout_graph::dims_text(dims)))
            } else {
                String::new()
            };
            format!("%arg{i}: {}", named(id, &more))
        }));
        let result_decls = list(graph.outputs().iter().map(|&o| named(o, "")));
        let _ = writeln!(text, "  func.func {func_symbol}({args}) -> ({result_decls}) {{");

        let mut e = Emitter {
            g: graph,
            body: std::mem::take(&mut text),
            out: &mut *out,
            next,
            vals: HashMap::new(),
            widened: HashSet::new(),
            node: None,
            pool_inits: HashMap::new(),
        };
        for (i, &id) in graph.inputs().iter().enumerate() {
            let s = graph.spec(id);
            e.vals.insert(id, Val { name: format!("%arg{i}"), shape: s.shape.clone(), dtype: s.dtype });
        }
        load_constants(&mut e, graph, placement, &in_function)?;
        for node in graph.nodes() {
            e.lower(node).map_err(in_function)?;
            e.spill(false)?;
        }
        e.node = None;

        let results: Vec<Val> =
            graph.outputs().iter().map(|&o| e.val(o)).collect::<Result<_>>().map_err(in_function)?;
        let result_types = list(results.iter().map(Val::ty));
        let _ = writeln!(e.body, "    return {} : {result_types}", list(results.iter().map(|r| r.name.clone())));
        e.body.push_str("  }\n");
        e.spill(false)?;
        next = e.next;
        text = std::mem::take(&mut e.body);
    }
    text.push_str("}\n");
    spill(&mut text, out, true)?;
    Ok(externals)
}

/// Where every constant of every function goes, decided first: a `util.global` declared into `text` per external
/// parameter key (its symbol in the placement), or inline (`None`). Returns the external parameters and, per
/// function, each constant's placement.
#[allow(clippy::type_complexity, reason = "two results the caller takes apart at once")]
fn declare_globals(
    functions: &[(&str, &ComputeGraph<'_>)],
    opts: &EmitOptions,
    text: &mut String,
) -> Result<(Vec<ExternalParameter>, Vec<Vec<Option<String>>>)> {
    let func_symbols: HashSet<String> = functions.iter().map(|(n, _)| symbol(n)).collect();
    let mut externals = Vec::new();
    // key -> (symbol, declared type, first function)
    let mut declared: HashMap<String, (String, String, usize)> = HashMap::new();
    let mut placements: Vec<Vec<Option<String>>> = Vec::with_capacity(functions.len());
    for (fi, (fname, graph)) in functions.iter().enumerate() {
        let mut placement = Vec::with_capacity(graph.constants().len());
        for c in graph.constants() {
            let spec = graph.spec(c.tensor);
            match is_external(&opts.policy, &c.data, &spec.shape) {
                Some(scope) => {
                    // The parameter has the dtype it is stored in (bf16 kept as bf16; an unsigned integer as the
                    // signless one of its width, which IREE 3.13 requires of a `util.global`) and the shape (row
                    // bands of a linear's weight); the program converts it.
                    let t = ty(&spec.shape, parameter_dtype(c.data.dtype()));
                    if let Some((sym, first_ty, first_fn)) = declared.get(&c.key) {
                        if *first_ty != t {
                            return Err(HloError::Unsupported {
                                node: format!("parameter '{}'", c.key),
                                op: "module",
                                detail: format!(
                                    "function '{}' uses it as {first_ty} and function '{fname}' as {t}; one key is one \
                                     parameter",
                                    functions[*first_fn].0
                                ),
                            });
                        }
                        placement.push(Some(sym.clone()));
                        continue;
                    }
                    let mut sym = symbol(&c.key);
                    if func_symbols.contains(&sym) {
                        sym = symbol(&format!("{}.global", c.key));
                    }
                    let _ = writeln!(
                        text,
                        "  util.global private {sym} = #flow.parameter.named<{}::{}> : {t}",
                        string_literal(&scope),
                        string_literal(&c.key),
                    );
                    externals.push(ExternalParameter { scope, key: c.key.clone(), tensor: c.tensor, function: fi });
                    declared.insert(c.key.clone(), (sym.clone(), t, fi));
                    placement.push(Some(sym));
                }
                None => {
                    if c.data.dtype().is_sub_byte() {
                        return Err(HloError::Unsupported {
                            node: format!("constant '{}'", spec.label()),
                            op: "constant",
                            detail:
                                "its 4- or 2-bit codes (a packed weight kept packed) can only be an external parameter, \
                                 not inline text; use an external policy, or dequantize the weight"
                                    .into(),
                        });
                    }
                    let bytes = c.data.byte_len();
                    if bytes > INLINE_CEILING {
                        return Err(HloError::ConstantTooLarge {
                            tensor: spec.label().to_owned(),
                            bytes,
                            ceiling: INLINE_CEILING,
                        });
                    }
                    placement.push(None);
                }
            }
        }
        placements.push(placement);
    }
    Ok((externals, placements))
}

/// Loads (or writes inline) every constant of `graph` in the function `e` is emitting, as `placement` says, and
/// gives each tensor its value: converted where a 16-bit weight is used as f32, read as stored bands where a
/// product reads bands.
fn load_constants(
    e: &mut Emitter<'_, '_, '_>,
    graph: &ComputeGraph<'_>,
    placement: &[Option<String>],
    in_function: &dyn Fn(HloError) -> HloError,
) -> Result<()> {
    for (c, place) in graph.constants().iter().zip(placement) {
        let spec = graph.spec(c.tensor);
        let stored = c.data.dtype();
        let shape = spec.shape.clone();
        let t = ty(&shape, stored);
        let v = match place {
            Some(sym) => {
                let held = parameter_dtype(stored);
                let loaded = e.assign(&format!("util.global.load {sym} : {}", ty(&shape, held)), shape.clone(), held);
                if held == stored { loaded } else { e.bitcast(&loaded, stored) }
            }
            None => {
                let name = e.fresh();
                let _ = write!(e.body, "    {name} = stablehlo.constant dense<\"0x");
                let streamed = splat_element(&c.data).and_then(|splat| match splat {
                    Some(one) => {
                        push_hex(&mut e.body, &one);
                        Ok(())
                    }
                    None => c.data.stream(&mut HexSink { text: &mut e.body, out: &mut *e.out }),
                });
                streamed.map_err(|err| in_function(constant_failed(spec.label(), err)))?;
                let _ = writeln!(e.body, "\"> : {t}");
                e.spill(false)?;
                Val { name, shape: shape.clone(), dtype: stored }
            }
        };
        match c.data.row_tile() {
            // Row bands, which the program names as stored (a linear's weight `[N / T, K, T]`, codes kept packed
            // `[Np / T, Kb, B, T]`): `banded` matmuls read them as stored, a 16-bit weight or a code widened inside
            // the contraction, and any other use through a view the pass wrote.
            Some(_) => {
                e.vals.insert(c.tensor, v);
            }
            // A 16-bit weight kept as stored is widened where it is used: IREE fuses the convert into the
            // consumer.
            None => {
                let v = if stored == spec.dtype {
                    v
                } else {
                    let rhs = format!("stablehlo.convert {} : ({t}) -> {}", v.name, ty(&shape, spec.dtype));
                    e.assign(&rhs, shape, spec.dtype)
                };
                e.vals.insert(c.tensor, v);
            }
        }
    }
    Ok(())
}

pub(crate) fn spill(text: &mut String, out: &mut dyn TextOut, force: bool) -> Result<()> {
    if force || text.len() >= SPILL_BYTES {
        out.take(text).map_err(HloError::Output)?;
    }
    Ok(())
}

/// The element type a parameter's `util.global` is declared with: the stored one, or for an unsigned integer the
/// signless one of its width (the same bytes), read back as unsigned after the load.
fn parameter_dtype(stored: DType) -> DType {
    builder::signless(stored).unwrap_or(stored)
}
