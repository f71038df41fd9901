//! Lowering a [`ComputeGraph`] to StableHLO text.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;

use tapeout_graph::{Attr, ComputeGraph, ConstantData, DType, Dim, Op as Node, Shape, StreamError, TensorId};

use crate::error::{HloError, Result};
use crate::text::{push_hex, string_literal, symbol};

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
    /// The graph tensor it provides.
    pub tensor: TensorId,
}

/// An emitted module.
#[derive(Debug, Clone)]
pub struct Module {
    /// The MLIR text.
    pub text: String,
    /// The external parameters it declares, in declaration order.
    pub externals: Vec<ExternalParameter>,
}

/// Every op the emitter lowers.
pub const KNOWN_OPS: &[&str] = &[
    "abs",
    "add",
    "avg_pool2d",
    "broadcast",
    "causal_mask",
    "clamp",
    "compare",
    "concat",
    "conv2d",
    "convert",
    "cos",
    "div",
    "exp",
    "gather",
    "gelu",
    "iota",
    "layer_norm",
    "log",
    "matmul",
    "max",
    "max_pool2d",
    "min",
    "mul",
    "neg",
    "pow",
    "reduce_max",
    "reduce_mean",
    "reduce_sum",
    "relu",
    "reshape",
    "rms_norm",
    "rope",
    "rsqrt",
    "sdpa",
    "select",
    "sigmoid",
    "silu",
    "sin",
    "slice",
    "softmax",
    "sqrt",
    "sub",
    "tanh",
    "transpose",
];

/// An SSA value with its type.
#[derive(Debug, Clone)]
struct Val {
    name: String,
    shape: Shape,
    dtype: DType,
}

fn ty(shape: &Shape, dtype: DType) -> String {
    if shape.rank() == 0 {
        format!("tensor<{}>", dtype.mlir_name())
    } else {
        format!("tensor<{shape}x{}>", dtype.mlir_name())
    }
}

impl Val {
    fn ty(&self) -> String {
        ty(&self.shape, self.dtype)
    }
    fn rank(&self) -> usize {
        self.shape.rank()
    }
}

fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items.into_iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

/// One element of `dtype` holding `value`, as the text inside `dense<…>`.
fn scalar_literal(value: f64, dtype: DType) -> String {
    #[allow(clippy::cast_possible_truncation)] // narrowing a literal to the tensor's own dtype is the point
    match dtype {
        DType::F32 => format!("0x{:08X}", (value as f32).to_bits()),
        DType::F64 => format!("0x{:016X}", value.to_bits()),
        DType::F16 => format!("0x{:04X}", half::f16::from_f64(value).to_bits()),
        DType::BF16 => format!("0x{:04X}", half::bf16::from_f64(value).to_bits()),
        DType::Bool => (if value != 0.0 { "true" } else { "false" }).to_string(),
        _ => format!("{}", value as i64),
    }
}

/// Geometry of a 2-D window (convolution or pooling) over an NCHW tensor.
struct Window {
    kernel: [u64; 2],
    stride: [u64; 2],
    dilation: [u64; 2],
    /// top, bottom, left, right
    pad: [u64; 4],
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
struct WriteOut<'w>(&'w mut dyn Write);

impl TextOut for WriteOut<'_> {
    fn take(&mut self, text: &mut String) -> std::io::Result<()> {
        self.0.write_all(text.as_bytes())?;
        text.clear();
        Ok(())
    }
}

struct Emitter<'g, 'a, 'w> {
    g: &'g ComputeGraph<'a>,
    /// Pending text, written to `out` in pieces of about [`SPILL_BYTES`].
    body: String,
    out: &'w mut dyn TextOut,
    next: usize,
    vals: HashMap<TensorId, Val>,
    node: Option<&'g Node>,
}

impl<'g, 'a> Emitter<'g, 'a, '_> {
    fn fresh(&mut self) -> String {
        self.next += 1;
        format!("%v{}", self.next - 1)
    }

    fn line(&mut self, text: &str) {
        self.body.push_str("    ");
        self.body.push_str(text);
        self.body.push('\n');
    }

    /// Writes the pending text out when enough has accumulated (or always, with `force`).
    fn spill(&mut self, force: bool) -> Result<()> {
        spill(&mut self.body, &mut *self.out, force)
    }

    /// `%v = <rhs>` returning the new value.
    fn assign(&mut self, rhs: &str, shape: Shape, dtype: DType) -> Val {
        let name = self.fresh();
        self.line(&format!("{name} = {rhs}"));
        Val { name, shape, dtype }
    }

    fn err(&self, detail: impl Into<String>) -> HloError {
        let (node, op) = self.node.map_or_else(|| (String::new(), String::new()), |n| (n.id.clone(), n.op.clone()));
        HloError::Unsupported { node, op, detail: detail.into() }
    }

    fn attr_err(&self, attr: &str, detail: impl Into<String>) -> HloError {
        let (node, op) = self.node.map_or_else(|| (String::new(), String::new()), |n| (n.id.clone(), n.op.clone()));
        HloError::BadAttribute { node, op, attr: attr.into(), detail: detail.into() }
    }

    fn attr(&self, name: &str) -> Option<&'g Attr> {
        self.node.and_then(|n| n.attrs.get(name))
    }

    fn attr_int(&self, name: &str, default: i64) -> Result<i64> {
        match self.attr(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(other) => Err(self.attr_err(name, format!("must be an integer, got {other:?}"))),
        }
    }

    fn attr_f64(&self, name: &str, default: f64) -> Result<f64> {
        match self.attr(name) {
            None => Ok(default),
            Some(Attr::Float(v)) => Ok(*v),
            #[allow(clippy::cast_precision_loss)] // an integer literal for a float attribute
            Some(Attr::Int(v)) => Ok(*v as f64),
            Some(other) => Err(self.attr_err(name, format!("must be a number, got {other:?}"))),
        }
    }

    fn attr_bool(&self, name: &str, default: bool) -> Result<bool> {
        match self.attr(name) {
            None => Ok(default),
            Some(Attr::Bool(v)) => Ok(*v),
            Some(other) => Err(self.attr_err(name, format!("must be true or false, got {other:?}"))),
        }
    }

    fn attr_ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.attr(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(other) => Err(self.attr_err(name, format!("must be a list of integers, got {other:?}"))),
        }
    }

    /// Normalises a possibly negative axis for a tensor of `rank`.
    fn axis(&self, name: &str, axis: i64, rank: usize) -> Result<usize> {
        let r = i64::try_from(rank).unwrap_or(i64::MAX);
        let a = if axis < 0 { axis + r } else { axis };
        usize::try_from(a)
            .ok()
            .filter(|&a| a < rank)
            .ok_or_else(|| self.attr_err(name, format!("{axis} is out of range for rank {rank}")))
    }

    fn static_dims(&self, v: &Val) -> Result<Vec<u64>> {
        v.shape.static_dims().ok_or_else(|| self.err(format!("needs a static shape, got [{}]", v.shape)))
    }

    // --- primitives ---------------------------------------------------------------------

    fn unary(&mut self, op: &str, x: &Val) -> Val {
        let t = x.ty();
        self.assign(&format!("stablehlo.{op} {} : {t}", x.name), x.shape.clone(), x.dtype)
    }

    fn binary_same(&mut self, op: &str, a: &Val, b: &Val) -> Val {
        let t = a.ty();
        self.assign(&format!("stablehlo.{op} {}, {} : {t}", a.name, b.name), a.shape.clone(), a.dtype)
    }

    /// A constant of `shape` filled with `value` (static shapes only).
    fn splat(&mut self, value: f64, shape: &Shape, dtype: DType) -> Val {
        let lit = scalar_literal(value, dtype);
        self.assign(&format!("stablehlo.constant dense<{lit}> : {}", ty(shape, dtype)), shape.clone(), dtype)
    }

    /// `value` broadcast to the shape of `like` (which may be dynamic).
    fn fill_like(&mut self, value: f64, like: &Val, dtype: DType) -> Val {
        if like.shape.is_dynamic() {
            let s = self.splat(value, &Shape::scalar(), dtype);
            self.broadcast_to(&s, &[], &like.shape, Some(like))
        } else {
            self.splat(value, &like.shape, dtype)
        }
    }

    /// A 1-D i32 tensor holding the run-time shape of `like`.
    fn shape_tensor(&mut self, like: &Val) -> Val {
        let mut parts = Vec::new();
        for (i, d) in like.shape.0.clone().iter().enumerate() {
            let part = match d {
                Dim::Static(n) => self.splat(u32::try_from(*n).map_or(0.0, f64::from), &Shape::of(&[1]), DType::I32),
                Dim::Dynamic => {
                    let s = self.assign(
                        &format!(
                            "stablehlo.get_dimension_size {}, dim = {i} : ({}) -> tensor<i32>",
                            like.name,
                            like.ty()
                        ),
                        Shape::scalar(),
                        DType::I32,
                    );
                    self.assign(
                        &format!("stablehlo.reshape {} : (tensor<i32>) -> tensor<1xi32>", s.name),
                        Shape::of(&[1]),
                        DType::I32,
                    )
                }
            };
            parts.push(part);
        }
        let rank = parts.len() as u64;
        if parts.len() == 1 {
            return parts.remove(0);
        }
        let names = list(parts.iter().map(|p| p.name.clone()));
        let tys = list(parts.iter().map(Val::ty));
        self.assign(
            &format!("stablehlo.concatenate {names}, dim = 0 : ({tys}) -> tensor<{rank}xi32>"),
            Shape::of(&[rank]),
            DType::I32,
        )
    }

    /// `broadcast_in_dim` of `x` to `shape`, operand dim i going to result dim `dims[i]`. A dynamic
    /// target shape is taken at run time from `like`.
    fn broadcast_to(&mut self, x: &Val, dims: &[usize], shape: &Shape, like: Option<&Val>) -> Val {
        let out = ty(shape, x.dtype);
        if shape.is_dynamic() {
            if let Some(like) = like {
                let st = self.shape_tensor(like);
                let rhs = format!(
                    "stablehlo.dynamic_broadcast_in_dim {}, {}, dims = [{}] : ({}, {}) -> {out}",
                    x.name,
                    st.name,
                    list(dims),
                    x.ty(),
                    st.ty()
                );
                return self.assign(&rhs, shape.clone(), x.dtype);
            }
        }
        let rhs = format!("stablehlo.broadcast_in_dim {}, dims = [{}] : ({}) -> {out}", x.name, list(dims), x.ty());
        self.assign(&rhs, shape.clone(), x.dtype)
    }

    /// NumPy broadcast of `x` to `like`'s shape (right-aligned); `x` itself when shapes agree.
    fn numpy_broadcast(&mut self, x: &Val, like: &Val) -> Result<Val> {
        if x.shape == like.shape {
            return Ok(x.clone());
        }
        let offset = like.rank().checked_sub(x.rank()).ok_or_else(|| self.err("cannot broadcast to a lower rank"))?;
        let dims: Vec<usize> = (offset..like.rank()).collect();
        Ok(self.broadcast_to(x, &dims, &like.shape, Some(like)))
    }

    fn reshape(&mut self, x: &Val, shape: &Shape) -> Result<Val> {
        if shape.is_dynamic() || x.shape.is_dynamic() {
            return Err(self.err("reshape needs static shapes"));
        }
        if shape.element_count() != x.shape.element_count() {
            return Err(self.err(format!("cannot reshape [{}] to [{shape}]: the element counts differ", x.shape)));
        }
        let rhs = format!("stablehlo.reshape {} : ({}) -> {}", x.name, x.ty(), ty(shape, x.dtype));
        Ok(self.assign(&rhs, shape.clone(), x.dtype))
    }

    /// A real `stablehlo.reduce` over `axes` with `body` (add or maximum).
    fn reduce(&mut self, x: &Val, axes: &[usize], body: &str) -> Val {
        let init = match body {
            "maximum" => self.splat(f64::NEG_INFINITY, &Shape::scalar(), x.dtype),
            _ => self.splat(0.0, &Shape::scalar(), x.dtype),
        };
        let kept = Shape(x.shape.0.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, d)| *d).collect());
        let rhs = format!(
            "stablehlo.reduce({} init: {}) applies stablehlo.{body} across dimensions = [{}] : ({}, {}) -> {}",
            x.name,
            init.name,
            list(axes),
            x.ty(),
            init.ty(),
            ty(&kept, x.dtype)
        );
        self.assign(&rhs, kept, x.dtype)
    }

    /// Broadcasts a reduction result back over the reduced `axes` of `like`.
    fn unreduce(&mut self, r: &Val, axes: &[usize], like: &Val) -> Val {
        let dims: Vec<usize> = (0..like.rank()).filter(|i| !axes.contains(i)).collect();
        self.broadcast_to(r, &dims, &like.shape, Some(like))
    }

    fn count_of(&self, x: &Val, axes: &[usize]) -> Result<f64> {
        let mut n = 1u64;
        for &a in axes {
            match x.shape.0[a] {
                Dim::Static(d) => n = n.saturating_mul(d),
                Dim::Dynamic => return Err(self.err("a mean over a dynamic dimension is not supported")),
            }
        }
        #[allow(clippy::cast_precision_loss)] // element counts of reduced axes are small
        Ok(n as f64)
    }

    fn mean(&mut self, x: &Val, axes: &[usize]) -> Result<Val> {
        let n = self.count_of(x, axes)?;
        let s = self.reduce(x, axes, "add");
        let c = self.fill_like(n, &s, s.dtype);
        Ok(self.binary_same("divide", &s, &c))
    }

    fn softmax(&mut self, x: &Val, axis: usize) -> Val {
        let m = self.reduce(x, &[axis], "maximum");
        let mb = self.unreduce(&m, &[axis], x);
        let shifted = self.binary_same("subtract", x, &mb);
        let e = self.unary("exponential", &shifted);
        let s = self.reduce(&e, &[axis], "add");
        let sb = self.unreduce(&s, &[axis], x);
        self.binary_same("divide", &e, &sb)
    }

    fn transpose(&mut self, x: &Val, perm: &[usize]) -> Val {
        let shape = Shape(perm.iter().map(|&p| x.shape.0[p]).collect());
        let rhs = format!(
            "stablehlo.transpose {}, dims = [{}] : ({}) -> {}",
            x.name,
            list(perm),
            x.ty(),
            ty(&shape, x.dtype)
        );
        self.assign(&rhs, shape, x.dtype)
    }

    fn matmul(&mut self, a: &Val, b: &Val, out: &Shape) -> Result<Val> {
        let (ra, rb) = (a.rank(), b.rank());
        let (ad, bd) = (&a.shape.0, &b.shape.0);
        let want = if rb == 2 && ra >= 1 {
            let k_ok =
                matches!((ad[ra - 1], bd[0]), (Dim::Static(x), Dim::Static(y)) if x == y) || ad[ra - 1] == Dim::Dynamic;
            k_ok.then(|| Shape(ad[..ra - 1].iter().copied().chain([bd[1]]).collect()))
        } else if ra == rb && ra >= 3 {
            let k_ok = ad[ra - 1] == bd[rb - 2];
            (k_ok && tapeout_graph::ops::shapes_agree(&Shape(ad[..ra - 2].to_vec()), &Shape(bd[..rb - 2].to_vec())))
                .then(|| Shape(ad[..ra - 1].iter().copied().chain([bd[rb - 1]]).collect()))
        } else {
            None
        };
        match want {
            Some(w) if tapeout_graph::ops::shapes_agree(&w, out) => {}
            Some(w) => {
                return Err(
                    self.err(format!("[{}] x [{}] gives [{w}], but the node declares [{out}]", a.shape, b.shape))
                );
            }
            None if ra == rb || rb == 2 => {
                return Err(
                    self.err(format!("[{}] x [{}]: the contracted (or batch) dimensions differ", a.shape, b.shape))
                );
            }
            None => {}
        }
        let rhs = if rb == 2 && ra >= 1 {
            format!("stablehlo.dot_general {}, {}, contracting_dims = [{}] x [0]", a.name, b.name, ra - 1)
        } else if ra == rb && ra >= 3 {
            let batch = list(0..ra - 2);
            format!(
                "stablehlo.dot_general {}, {}, batching_dims = [{batch}] x [{batch}], contracting_dims = [{}] x [{}]",
                a.name,
                b.name,
                ra - 1,
                rb - 2
            )
        } else {
            return Err(self.err(format!(
                "matmul of ranks {ra} and {rb}: supported are [.., K] x [K, N] and equal-rank batched [B.., M, K] x [B.., K, N]"
            )));
        };
        Ok(self.assign(&format!("{rhs} : ({}, {}) -> {}", a.ty(), b.ty(), ty(out, a.dtype)), out.clone(), a.dtype))
    }

    fn slice(&mut self, x: &Val, ranges: &[(u64, u64, u64)]) -> Val {
        let shape = Shape(ranges.iter().map(|&(s, l, st)| Dim::Static((l - s).div_ceil(st))).collect());
        let spec =
            list(ranges.iter().map(|&(s, l, st)| if st == 1 { format!("{s}:{l}") } else { format!("{s}:{l}:{st}") }));
        let rhs = format!("stablehlo.slice {} [{spec}] : ({}) -> {}", x.name, x.ty(), ty(&shape, x.dtype));
        self.assign(&rhs, shape, x.dtype)
    }

    fn concat(&mut self, parts: &[Val], axis: usize) -> Result<Val> {
        let mut shape = parts[0].shape.clone();
        let mut total = 0u64;
        for p in parts {
            match p.shape.0.get(axis) {
                Some(Dim::Static(n)) => total += n,
                _ => return Err(self.err("concatenation along a dynamic dimension is not supported")),
            }
        }
        shape.0[axis] = Dim::Static(total);
        let rhs = format!(
            "stablehlo.concatenate {}, dim = {axis} : ({}) -> {}",
            list(parts.iter().map(|p| p.name.clone())),
            list(parts.iter().map(Val::ty)),
            ty(&shape, parts[0].dtype)
        );
        Ok(self.assign(&rhs, shape, parts[0].dtype))
    }

    /// `select(pred, x, fill)` where `pred` is `[S, T]` i1 broadcast over `x`'s leading dims.
    fn causal(&mut self, x: &Val) -> Result<Val> {
        let dims = self.static_dims(x)?;
        let r = dims.len();
        if r < 2 {
            return Err(self.err("a causal mask needs scores of rank >= 2 ([.., S, T])"));
        }
        let (s, t) = (dims[r - 2], dims[r - 1]);
        let st = Shape::of(&[s, t]);
        let row = self.assign(&format!("stablehlo.iota dim = 0 : {}", ty(&st, DType::I64)), st.clone(), DType::I64);
        let col = self.assign(&format!("stablehlo.iota dim = 1 : {}", ty(&st, DType::I64)), st.clone(), DType::I64);
        #[allow(clippy::cast_precision_loss)] // sequence lengths are far below 2^53
        let offset = self.splat(t.saturating_sub(s) as f64, &st, DType::I64);
        let shifted = self.binary_same("add", &row, &offset);
        let keep = self.assign(
            &format!(
                "stablehlo.compare GE, {}, {}, SIGNED : ({}, {}) -> {}",
                shifted.name,
                col.name,
                shifted.ty(),
                col.ty(),
                ty(&st, DType::Bool)
            ),
            st,
            DType::Bool,
        );
        let keep = self.broadcast_to(&keep, &[r - 2, r - 1], &x.shape, None);
        let fill = self.fill_like(f64::NEG_INFINITY, x, x.dtype);
        Ok(self.assign(
            &format!("stablehlo.select {}, {}, {} : {}, {}", keep.name, x.name, fill.name, keep.ty(), x.ty()),
            x.shape.clone(),
            x.dtype,
        ))
    }

    // --- nodes --------------------------------------------------------------------------

    fn val(&self, id: TensorId) -> Result<Val> {
        self.vals
            .get(&id)
            .cloned()
            .ok_or_else(|| self.err(format!("operand '{}' has no value yet", self.g.spec(id).name)))
    }

    fn lower(&mut self, node: &'g Node) -> Result<()> {
        self.node = Some(node);
        let ins: Vec<Val> = node.inputs.iter().map(|&i| self.val(i)).collect::<Result<_>>()?;
        let outs: Vec<(Shape, DType)> =
            node.outputs.iter().map(|&o| (self.g.spec(o).shape.clone(), self.g.spec(o).dtype)).collect();
        let arity = |n: usize, m: usize| -> Result<()> {
            if ins.len() == n && outs.len() == m {
                Ok(())
            } else {
                Err(self.err(format!("takes {n} inputs and {m} outputs, got {} and {}", ins.len(), outs.len())))
            }
        };
        let out_shape = outs.first().map(|o| o.0.clone()).unwrap_or_default();
        let result = match node.op.as_str() {
            "add" | "sub" | "mul" | "div" | "pow" | "max" | "min" => {
                arity(2, 1)?;
                let op = match node.op.as_str() {
                    "add" => "add",
                    "sub" => "subtract",
                    "mul" => "multiply",
                    "div" => "divide",
                    "pow" => "power",
                    "max" => "maximum",
                    _ => "minimum",
                };
                let like = if ins[0].shape == out_shape { ins[0].clone() } else { ins[1].clone() };
                let like = if like.shape == out_shape {
                    like
                } else if out_shape.is_dynamic() {
                    return Err(self.err("a dynamic result must have the shape of one operand"));
                } else {
                    Val { name: String::new(), shape: out_shape.clone(), dtype: ins[0].dtype }
                };
                let a = self.numpy_broadcast(&ins[0], &like)?;
                let b = self.numpy_broadcast(&ins[1], &like)?;
                self.binary_same(op, &a, &b)
            }
            "neg" | "abs" | "exp" | "log" | "sqrt" | "rsqrt" | "tanh" | "sin" | "cos" | "sigmoid" => {
                arity(1, 1)?;
                let op = match node.op.as_str() {
                    "neg" => "negate",
                    "exp" => "exponential",
                    "sin" => "sine",
                    "cos" => "cosine",
                    "sigmoid" => "logistic",
                    other => other,
                };
                self.unary(op, &ins[0])
            }
            "relu" => {
                arity(1, 1)?;
                let zero = self.fill_like(0.0, &ins[0], ins[0].dtype);
                self.binary_same("maximum", &ins[0], &zero)
            }
            "silu" => {
                arity(1, 1)?;
                let s = self.unary("logistic", &ins[0]);
                self.binary_same("multiply", &ins[0], &s)
            }
            "gelu" => {
                // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
                arity(1, 1)?;
                let x = &ins[0];
                let x2 = self.binary_same("multiply", x, x);
                let x3 = self.binary_same("multiply", &x2, x);
                let k = self.fill_like(0.044715, x, x.dtype);
                let kx3 = self.binary_same("multiply", &k, &x3);
                let inner = self.binary_same("add", x, &kx3);
                let c = self.fill_like(0.797_884_560_802_865_4, x, x.dtype);
                let arg = self.binary_same("multiply", &c, &inner);
                let t = self.unary("tanh", &arg);
                let one = self.fill_like(1.0, x, x.dtype);
                let onept = self.binary_same("add", &one, &t);
                let half = self.fill_like(0.5, x, x.dtype);
                let hx = self.binary_same("multiply", &half, x);
                self.binary_same("multiply", &hx, &onept)
            }
            "convert" => {
                arity(1, 1)?;
                let (shape, dtype) = outs[0].clone();
                let rhs = format!("stablehlo.convert {} : ({}) -> {}", ins[0].name, ins[0].ty(), ty(&shape, dtype));
                self.assign(&rhs, shape, dtype)
            }
            "broadcast" => {
                arity(1, 1)?;
                let dims = match self.attr_ints("dims")? {
                    Some(d) => d.iter().map(|&a| self.axis("dims", a, out_shape.rank())).collect::<Result<Vec<_>>>()?,
                    None => (out_shape.rank().saturating_sub(ins[0].rank())..out_shape.rank()).collect(),
                };
                if out_shape.is_dynamic() {
                    return Err(
                        self.err("broadcast to a dynamic shape needs a reference operand; use an elementwise op")
                    );
                }
                self.broadcast_to(&ins[0], &dims, &out_shape, None)
            }
            "reshape" => {
                arity(1, 1)?;
                self.reshape(&ins[0], &out_shape)?
            }
            "transpose" => {
                arity(1, 1)?;
                let r = ins[0].rank();
                let perm = match self.attr_ints("perm")? {
                    Some(p) => p.iter().map(|&a| self.axis("perm", a, r)).collect::<Result<Vec<_>>>()?,
                    None => (0..r).rev().collect(),
                };
                let mut sorted = perm.clone();
                sorted.sort_unstable();
                if sorted != (0..r).collect::<Vec<_>>() {
                    return Err(self.attr_err("perm", format!("{perm:?} is not a permutation of 0..{r}")));
                }
                self.transpose(&ins[0], &perm)
            }
            "concat" => {
                if ins.is_empty() || outs.len() != 1 {
                    return Err(self.err("takes one or more inputs and one output"));
                }
                let axis = self.axis("axis", self.attr_int("axis", 0)?, ins[0].rank())?;
                self.concat(&ins, axis)?
            }
            "slice" => {
                arity(1, 1)?;
                let dims = self.static_dims(&ins[0])?;
                let start = self.attr_ints("start")?.ok_or_else(|| self.attr_err("start", "is required"))?;
                let limit = self.attr_ints("limit")?.ok_or_else(|| self.attr_err("limit", "is required"))?;
                let stride = self.attr_ints("stride")?.unwrap_or_else(|| vec![1; dims.len()]);
                if start.len() != dims.len() || limit.len() != dims.len() || stride.len() != dims.len() {
                    return Err(self.attr_err(
                        "start",
                        format!("start, limit and stride need one entry per dimension ({})", dims.len()),
                    ));
                }
                let mut ranges = Vec::new();
                for (i, &d) in dims.iter().enumerate() {
                    let (s, l, st) = (u64::try_from(start[i]), u64::try_from(limit[i]), u64::try_from(stride[i]));
                    match (s, l, st) {
                        (Ok(s), Ok(l), Ok(st)) if s <= l && l <= d && st > 0 => ranges.push((s, l, st)),
                        _ => {
                            return Err(self.attr_err(
                                "start",
                                format!(
                                    "dimension {i}: [{}:{}:{}] does not fit size {d}",
                                    start[i], limit[i], stride[i]
                                ),
                            ));
                        }
                    }
                }
                self.slice(&ins[0], &ranges)
            }
            "gather" => {
                arity(2, 1)?;
                let (table, idx) = (&ins[0], &ins[1]);
                let axis = self.axis("axis", self.attr_int("axis", 0)?, table.rank())?;
                let tdims = self.static_dims(table)?;
                let ri = idx.rank();
                let want: Vec<Dim> = table.shape.0[..axis]
                    .iter()
                    .chain(&idx.shape.0)
                    .chain(&table.shape.0[axis + 1..])
                    .copied()
                    .collect();
                if !tapeout_graph::ops::shapes_agree(&Shape(want.clone()), &out_shape) {
                    return Err(self.err(format!(
                        "gathering [{}] from [{}] along axis {axis} gives [{}], but the node declares [{out_shape}]",
                        idx.shape,
                        table.shape,
                        Shape(want)
                    )));
                }
                let offset_dims: Vec<usize> = (0..axis).chain(axis + ri..table.rank() + ri - 1).collect();
                let sizes: Vec<u64> = tdims.iter().enumerate().map(|(i, &d)| if i == axis { 1 } else { d }).collect();
                let rhs = format!(
                    "\"stablehlo.gather\"({}, {}) {{dimension_numbers = #stablehlo.gather<offset_dims = [{}], collapsed_slice_dims = [{axis}], start_index_map = [{axis}], index_vector_dim = {ri}>, slice_sizes = array<i64: {}>, indices_are_sorted = false}} : ({}, {}) -> {}",
                    table.name,
                    idx.name,
                    list(&offset_dims),
                    list(&sizes),
                    table.ty(),
                    idx.ty(),
                    ty(&out_shape, table.dtype)
                );
                self.assign(&rhs, out_shape.clone(), table.dtype)
            }
            "matmul" => {
                arity(2, 1)?;
                self.matmul(&ins[0], &ins[1], &out_shape)?
            }
            "conv2d" => self.conv2d(&ins, &out_shape)?,
            "max_pool2d" | "avg_pool2d" => {
                arity(1, 1)?;
                self.pool(&ins[0], &out_shape, node.op == "max_pool2d")?
            }
            "reduce_sum" | "reduce_mean" | "reduce_max" => {
                arity(1, 1)?;
                let x = &ins[0];
                let axes = match self.attr_ints("axes")? {
                    Some(a) => a.iter().map(|&v| self.axis("axes", v, x.rank())).collect::<Result<Vec<_>>>()?,
                    None => (0..x.rank()).collect(),
                };
                let r = match node.op.as_str() {
                    "reduce_sum" => self.reduce(x, &axes, "add"),
                    "reduce_max" => self.reduce(x, &axes, "maximum"),
                    _ => self.mean(x, &axes)?,
                };
                if self.attr_bool("keepdims", false)? { self.reshape(&r, &out_shape)? } else { r }
            }
            "softmax" => {
                arity(1, 1)?;
                let axis = self.axis("axis", self.attr_int("axis", -1)?, ins[0].rank())?;
                self.softmax(&ins[0], axis)
            }
            "layer_norm" | "rms_norm" => {
                if !(1..=3).contains(&ins.len()) || (node.op == "rms_norm" && ins.len() > 2) || outs.len() != 1 {
                    return Err(self.err("takes (x, [gamma], [beta]) for layer_norm and (x, [gamma]) for rms_norm"));
                }
                let default_eps = if node.op == "rms_norm" { 1e-6 } else { 1e-5 };
                let eps = self.attr_f64("eps", default_eps)?;
                self.norm(&ins, node.op == "rms_norm", eps)?
            }
            "causal_mask" => {
                arity(1, 1)?;
                self.causal(&ins[0])?
            }
            "sdpa" => self.sdpa(&ins, &out_shape)?,
            "rope" => {
                arity(3, 1)?;
                self.rope(&ins)?
            }
            "iota" => {
                arity(0, 1)?;
                let dim = self.axis("dim", self.attr_int("dim", 0)?, out_shape.rank())?;
                let (shape, dtype) = outs[0].clone();
                self.assign(&format!("stablehlo.iota dim = {dim} : {}", ty(&shape, dtype)), shape, dtype)
            }
            "select" => {
                arity(3, 1)?;
                let (p, a, b) = (&ins[0], &ins[1], &ins[2]);
                if p.dtype != DType::Bool {
                    return Err(self.err(format!("the predicate must be bool (i1), got {}", p.dtype)));
                }
                let rhs = format!("stablehlo.select {}, {}, {} : {}, {}", p.name, a.name, b.name, p.ty(), a.ty());
                self.assign(&rhs, a.shape.clone(), a.dtype)
            }
            "compare" => {
                arity(2, 1)?;
                let dir = match self.attr("direction") {
                    Some(Attr::Str(s)) if ["EQ", "NE", "LT", "LE", "GT", "GE"].contains(&s.as_str()) => s.clone(),
                    _ => return Err(self.attr_err("direction", "must be one of EQ, NE, LT, LE, GT, GE")),
                };
                let (a, b) = (&ins[0], &ins[1]);
                let kind = match a.dtype {
                    d if d.is_float() => "FLOAT",
                    DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool => "UNSIGNED",
                    _ => "SIGNED",
                };
                let rhs = format!(
                    "stablehlo.compare {dir}, {}, {}, {kind} : ({}, {}) -> {}",
                    a.name,
                    b.name,
                    a.ty(),
                    b.ty(),
                    ty(&a.shape, DType::Bool)
                );
                self.assign(&rhs, a.shape.clone(), DType::Bool)
            }
            "clamp" => {
                let x = ins
                    .first()
                    .cloned()
                    .ok_or_else(|| self.err("takes (x, min, max) or (x) with min/max attributes"))?;
                let (lo, hi) = match ins.len() {
                    3 => (ins[1].clone(), ins[2].clone()),
                    1 => {
                        let lo = self.attr_f64("min", f64::NEG_INFINITY)?;
                        let hi = self.attr_f64("max", f64::INFINITY)?;
                        (self.splat(lo, &Shape::scalar(), x.dtype), self.splat(hi, &Shape::scalar(), x.dtype))
                    }
                    _ => return Err(self.err("takes (x, min, max) or (x) with min/max attributes")),
                };
                let rhs = format!(
                    "stablehlo.clamp {}, {}, {} : ({}, {}, {}) -> {}",
                    lo.name,
                    x.name,
                    hi.name,
                    lo.ty(),
                    x.ty(),
                    hi.ty(),
                    x.ty()
                );
                self.assign(&rhs, x.shape.clone(), x.dtype)
            }
            other => {
                return Err(HloError::UnknownOp {
                    node: node.id.clone(),
                    op: other.to_owned(),
                    known: KNOWN_OPS.join(", "),
                });
            }
        };
        let [out] = node.outputs.as_slice() else {
            return Err(self.err(format!("produces one result, the node declares {}", node.outputs.len())));
        };
        let spec = self.g.spec(*out);
        if result.dtype != spec.dtype || !tapeout_graph::ops::shapes_agree(&result.shape, &spec.shape) {
            return Err(self.err(format!(
                "computes {} but the node declares {} for '{}'",
                result.ty(),
                spec.mlir_type(),
                spec.name
            )));
        }
        self.vals.insert(*out, Val { name: result.name, shape: spec.shape.clone(), dtype: spec.dtype });
        Ok(())
    }

    fn window_attr(&self, name: &str, default: [u64; 2]) -> Result<[u64; 2]> {
        match self.attr_ints(name)? {
            None => Ok(default),
            Some(v) => match v.as_slice() {
                [a, b] => match (u64::try_from(*a), u64::try_from(*b)) {
                    (Ok(a), Ok(b)) => Ok([a, b]),
                    _ => Err(self.attr_err(name, "must not be negative")),
                },
                _ => Err(self.attr_err(name, "needs two entries (height, width)")),
            },
        }
    }

    /// `[top, bottom, left, right]` from `padding` given as 2 or 4 entries.
    fn padding(&self) -> Result<[u64; 4]> {
        match self.attr_ints("padding")? {
            None => Ok([0; 4]),
            Some(v) => {
                let v: Vec<u64> = v
                    .iter()
                    .map(|&p| u64::try_from(p))
                    .collect::<Result<_, _>>()
                    .map_err(|_| self.attr_err("padding", "must not be negative"))?;
                match v.as_slice() {
                    [h, w] => Ok([*h, *h, *w, *w]),
                    [t, b, l, r] => Ok([*t, *b, *l, *r]),
                    _ => Err(self.attr_err("padding", "needs 2 (h, w) or 4 (top, bottom, left, right) entries")),
                }
            }
        }
    }

    /// Checks a windowed op's declared `[N, C, H, W]` result against the window arithmetic.
    fn check_window_output(&self, x: &[u64], channels: u64, w: &Window, out: &Shape) -> Result<()> {
        let mut want = vec![x[0], channels];
        for i in 0..2 {
            let span = w.dilation[i].saturating_mul(w.kernel[i].saturating_sub(1)) + 1;
            let padded = x[2 + i] + w.pad[2 * i] + w.pad[2 * i + 1];
            if w.stride[i] == 0 || padded < span {
                return Err(
                    self.err(format!("the {}x{} window does not fit the padded input", w.kernel[0], w.kernel[1]))
                );
            }
            want.push((padded - span) / w.stride[i] + 1);
        }
        let want = Shape::of(&want);
        if &want != out {
            return Err(self.err(format!("the result shape is [{want}] but the node declares [{out}]")));
        }
        Ok(())
    }

    fn conv2d(&mut self, ins: &[Val], out_shape: &Shape) -> Result<Val> {
        if !(2..=3).contains(&ins.len()) {
            return Err(self.err("takes (input NCHW, weight OIHW, [bias O])"));
        }
        let (x, w) = (&ins[0], &ins[1]);
        if x.rank() != 4 || w.rank() != 4 {
            return Err(self.err("input and weight must be rank 4 (NCHW, OIHW)"));
        }
        let stride = self.window_attr("stride", [1, 1])?;
        let dilation = self.window_attr("dilation", [1, 1])?;
        let [t, b, l, r] = self.padding()?;
        let groups = self.attr_int("groups", 1)?;
        let (xd, wd) = (self.static_dims(x)?, self.static_dims(w)?);
        let g = u64::try_from(groups).ok().filter(|&g| g > 0 && xd[1] % g == 0 && wd[0] % g == 0 && wd[1] * g == xd[1]);
        if g.is_none() {
            return Err(self.attr_err(
                "groups",
                format!("{groups} does not fit {} input channels and a [{}] weight", xd[1], w.shape),
            ));
        }
        let window = Window { kernel: [wd[2], wd[3]], stride, dilation, pad: [t, b, l, r] };
        self.check_window_output(&xd, wd[0], &window, out_shape)?;
        let rhs = format!(
            "stablehlo.convolution({}, {}) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {{stride = [{}, {}], pad = [[{t}, {b}], [{l}, {r}]], rhs_dilate = [{}, {}]}} {{batch_group_count = 1 : i64, feature_group_count = {groups} : i64}} : ({}, {}) -> {}",
            x.name,
            w.name,
            stride[0],
            stride[1],
            dilation[0],
            dilation[1],
            x.ty(),
            w.ty(),
            ty(out_shape, x.dtype)
        );
        let y = self.assign(&rhs, out_shape.clone(), x.dtype);
        match ins.get(2) {
            Some(bias) => {
                let bb = self.broadcast_to(bias, &[1], out_shape, Some(&y));
                Ok(self.binary_same("add", &y, &bb))
            }
            None => Ok(y),
        }
    }

    fn pool(&mut self, x: &Val, out_shape: &Shape, max: bool) -> Result<Val> {
        if x.rank() != 4 {
            return Err(self.err("pooling takes an NCHW tensor"));
        }
        let kernel = self.window_attr("kernel", [2, 2])?;
        let stride = self.window_attr("stride", kernel)?;
        let [t, b, l, r] = self.padding()?;
        let xd = self.static_dims(x)?;
        let window = Window { kernel, stride, dilation: [1, 1], pad: [t, b, l, r] };
        self.check_window_output(&xd, xd[1], &window, out_shape)?;
        let init = self.splat(if max { f64::NEG_INFINITY } else { 0.0 }, &Shape::scalar(), x.dtype);
        let op = if max { "maximum" } else { "add" };
        let e = x.dtype.mlir_name();
        let rhs = format!(
            "\"stablehlo.reduce_window\"({}, {}) ({{\n    ^bb0(%a: tensor<{e}>, %b: tensor<{e}>):\n      %r = stablehlo.{op} %a, %b : tensor<{e}>\n      stablehlo.return %r : tensor<{e}>\n    }}) {{window_dimensions = array<i64: 1, 1, {}, {}>, window_strides = array<i64: 1, 1, {}, {}>, padding = dense<[[0, 0], [0, 0], [{t}, {b}], [{l}, {r}]]> : tensor<4x2xi64>}} : ({}, {}) -> {}",
            x.name,
            init.name,
            kernel[0],
            kernel[1],
            stride[0],
            stride[1],
            x.ty(),
            init.ty(),
            ty(out_shape, x.dtype)
        );
        let y = self.assign(&rhs, out_shape.clone(), x.dtype);
        if max {
            return Ok(y);
        }
        // Average over the full window (padding counts as zeros), like count_include_pad.
        #[allow(clippy::cast_precision_loss)] // window sizes are small
        let area = (kernel[0] * kernel[1]) as f64;
        let d = self.fill_like(area, &y, y.dtype);
        Ok(self.binary_same("divide", &y, &d))
    }

    fn norm(&mut self, ins: &[Val], rms: bool, eps: f64) -> Result<Val> {
        let x = &ins[0];
        let axis = x.rank().checked_sub(1).ok_or_else(|| self.err("normalisation needs rank >= 1"))?;
        let centered = if rms {
            x.clone()
        } else {
            let m = self.mean(x, &[axis])?;
            let mb = self.unreduce(&m, &[axis], x);
            self.binary_same("subtract", x, &mb)
        };
        let sq = self.binary_same("multiply", &centered, &centered);
        let var = self.mean(&sq, &[axis])?;
        let e = self.fill_like(eps, &var, var.dtype);
        let ve = self.binary_same("add", &var, &e);
        let inv = self.unary("rsqrt", &ve);
        let invb = self.unreduce(&inv, &[axis], x);
        let mut y = self.binary_same("multiply", &centered, &invb);
        for (i, p) in ins.iter().enumerate().skip(1) {
            let pb = self.numpy_broadcast(p, &y)?;
            y = self.binary_same(if i == 1 { "multiply" } else { "add" }, &y, &pb);
        }
        Ok(y)
    }

    fn sdpa(&mut self, ins: &[Val], out_shape: &Shape) -> Result<Val> {
        if !(3..=4).contains(&ins.len()) {
            return Err(self.err("takes (q, k, v, [additive mask])"));
        }
        let (q, k, v) = (&ins[0], &ins[1], &ins[2]);
        let r = q.rank();
        if r < 2 || k.rank() != r || v.rank() != r {
            return Err(self.err("q, k and v must have one rank >= 2 ([.., S, D], [.., T, D], [.., T, Dv])"));
        }
        let qd = self.static_dims(q)?;
        let kd = self.static_dims(k)?;
        #[allow(clippy::cast_precision_loss)] // head dims are small
        let default_scale = 1.0 / (qd[r - 1] as f64).sqrt();
        let scale = self.attr_f64("scale", default_scale)?;
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 1, r - 2);
        let kt = self.transpose(k, &perm);
        let mut sdims = qd.clone();
        sdims[r - 1] = kd[r - 2];
        let scores = self.matmul(q, &kt, &Shape::of(&sdims))?;
        let sc = self.fill_like(scale, &scores, scores.dtype);
        let mut s = self.binary_same("multiply", &scores, &sc);
        if let Some(mask) = ins.get(3) {
            let mb = self.numpy_broadcast(mask, &s)?;
            s = self.binary_same("add", &s, &mb);
        }
        if self.attr_bool("causal", false)? {
            s = self.causal(&s)?;
        }
        let p = self.softmax(&s, r - 1);
        self.matmul(&p, v, out_shape)
    }

    fn rope(&mut self, ins: &[Val]) -> Result<Val> {
        let (x, cos, sin) = (&ins[0], &ins[1], &ins[2]);
        let dims = self.static_dims(x)?;
        let d = *dims.last().ok_or_else(|| self.err("rope needs rank >= 1"))?;
        if d % 2 != 0 {
            return Err(self.err(format!("rope needs an even last dimension, got {d}")));
        }
        let full: Vec<(u64, u64, u64)> = dims.iter().map(|&n| (0, n, 1)).collect();
        let mut lo = full.clone();
        let mut hi = full;
        let last = dims.len() - 1;
        lo[last] = (0, d / 2, 1);
        hi[last] = (d / 2, d, 1);
        let x1 = self.slice(x, &lo);
        let x2 = self.slice(x, &hi);
        let nx2 = self.unary("negate", &x2);
        let rot = self.concat(&[nx2, x1], last)?;
        let cb = self.numpy_broadcast(cos, x)?;
        let sb = self.numpy_broadcast(sin, x)?;
        let a = self.binary_same("multiply", x, &cb);
        let b = self.binary_same("multiply", &rot, &sb);
        Ok(self.binary_same("add", &a, &b))
    }
}

fn is_external(policy: &MaterializationPolicy, data: &ConstantData<'_>, shape: &Shape) -> Option<String> {
    if shape.rank() == 0 || data.dtype() == DType::Bool {
        return None;
    }
    match policy {
        MaterializationPolicy::InlineAlways => None,
        MaterializationPolicy::ExternalAlways { scope } => Some(scope.clone()),
        MaterializationPolicy::SizeThreshold { bytes, scope } => (data.byte_len() >= *bytes).then(|| scope.clone()),
    }
}

/// Checks whether every element of `data` equals the first (a splat), streaming.
fn splat_element(data: &ConstantData<'_>) -> Result<Option<Vec<u8>>, StreamError> {
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
    let width = usize::try_from(data.dtype().byte_width()).unwrap_or(4);
    let mut p = Probe { width, first: Vec::new(), carry: Vec::new(), uniform: true };
    data.stream(&mut p)?;
    Ok((p.uniform && !p.first.is_empty()).then_some(p.first))
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
    let func_symbol = symbol(&opts.function);
    let mut text = String::new();
    let _ = writeln!(text, "module {} {{", symbol(&opts.module_name));

    // Globals first: decide where every constant goes.
    let mut externals = Vec::new();
    let mut placement = Vec::with_capacity(graph.constants.len());
    for c in &graph.constants {
        let spec = graph.spec(c.tensor);
        match is_external(&opts.policy, &c.data, &spec.shape) {
            Some(scope) => {
                let mut sym = symbol(&c.key);
                if sym == func_symbol {
                    sym = symbol(&format!("{}.global", c.key));
                }
                let _ = writeln!(
                    text,
                    "  util.global private {sym} = #flow.parameter.named<{}::{}> : {}",
                    string_literal(&scope),
                    string_literal(&c.key),
                    spec.mlir_type()
                );
                externals.push(ExternalParameter { scope, key: c.key.clone(), tensor: c.tensor });
                placement.push(Some(sym));
            }
            None => {
                let bytes = c.data.byte_len();
                if bytes > INLINE_CEILING {
                    return Err(HloError::ConstantTooLarge {
                        tensor: spec.name.clone(),
                        bytes,
                        ceiling: INLINE_CEILING,
                    });
                }
                placement.push(None);
            }
        }
    }

    // Argument and result names travel as discardable `tapeout.name` attributes, so a caller can
    // match tensors to positions (IREE ignores them).
    let named = |id: TensorId| {
        format!("{} {{tapeout.name = {}}}", graph.spec(id).mlir_type(), string_literal(&graph.spec(id).name))
    };
    let args = list(graph.inputs.iter().enumerate().map(|(i, &id)| format!("%arg{i}: {}", named(id))));
    let result_decls = list(graph.outputs.iter().map(|&o| named(o)));
    let _ = writeln!(text, "  func.func {func_symbol}({args}) -> ({result_decls}) {{");

    let mut e = Emitter { g: graph, body: text, out, next: 0, vals: HashMap::new(), node: None };
    for (i, &id) in graph.inputs.iter().enumerate() {
        let s = graph.spec(id);
        e.vals.insert(id, Val { name: format!("%arg{i}"), shape: s.shape.clone(), dtype: s.dtype });
    }
    for (c, place) in graph.constants.iter().zip(&placement) {
        let spec = graph.spec(c.tensor);
        let t = spec.mlir_type();
        let v = match place {
            Some(sym) => e.assign(&format!("util.global.load {sym} : {t}"), spec.shape.clone(), spec.dtype),
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
                streamed.map_err(|err| constant_failed(&spec.name, err))?;
                let _ = writeln!(e.body, "\"> : {t}");
                e.spill(false)?;
                Val { name, shape: spec.shape.clone(), dtype: spec.dtype }
            }
        };
        e.vals.insert(c.tensor, v);
    }
    for node in &graph.nodes {
        e.lower(node)?;
        e.spill(false)?;
    }
    e.node = None;

    let results: Vec<Val> = graph.outputs.iter().map(|&o| e.val(o)).collect::<Result<_>>()?;
    let result_types = list(results.iter().map(Val::ty));
    let _ = writeln!(e.body, "    return {} : {result_types}", list(results.iter().map(|r| r.name.clone())));
    e.body.push_str("  }\n}\n");
    e.spill(true)?;
    Ok(externals)
}

fn spill(text: &mut String, out: &mut dyn TextOut, force: bool) -> Result<()> {
    if force || text.len() >= SPILL_BYTES {
        out.take(text).map_err(HloError::Output)?;
    }
    Ok(())
}

/// Streams constant bytes into hex text, writing it out in 1 MiB pieces.
struct HexSink<'s> {
    text: &'s mut String,
    out: &'s mut dyn TextOut,
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
fn constant_failed(tensor: &str, err: StreamError) -> HloError {
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

    #[test]
    fn scalar_literals_are_exact_bit_patterns() {
        assert_eq!(scalar_literal(1.0, DType::F32), "0x3F800000");
        assert_eq!(scalar_literal(f64::NEG_INFINITY, DType::F32), "0xFF800000");
        assert_eq!(scalar_literal(f64::NAN, DType::F32), "0x7FC00000");
        assert_eq!(scalar_literal(-0.0, DType::F32), "0x80000000");
        assert_eq!(scalar_literal(1.0, DType::BF16), "0x3F80");
        assert_eq!(scalar_literal(1.0, DType::F16), "0x3C00");
        assert_eq!(scalar_literal(65520.0, DType::F16), "0x7C00");
        assert_eq!(scalar_literal(5.0, DType::I32), "5");
        assert_eq!(scalar_literal(1.0, DType::Bool), "true");
    }

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
