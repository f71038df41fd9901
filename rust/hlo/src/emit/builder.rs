//! The emitter's state, its SSA values, and the StableHLO primitives every lowering builds on.

use std::collections::{HashMap, HashSet};

use tapeout_graph::{Attr, Attrs, ComputeGraph, DType, Dim, Op as Node, Shape, TensorId};

use super::{TextOut, spill};
use crate::error::{HloError, Result};

/// An SSA value with its type.
#[derive(Debug, Clone)]
pub(crate) struct Val {
    pub(crate) name: String,
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
}

/// The most parts [`Emitter::concat_tree`] concatenates in one op.
const CONCAT_FAN_IN: usize = 16;

/// A product over `?` rows of 16-bit weights in row bands reads its rows from a buffer of a multiple of this many
/// (zero rows appended): IREE 3.13 computes such a product in tiles of 4 or 8 rows, the last one masked, and a
/// masked load whose rows lie past the end of the rows' buffer made the whole product 4-8x slower on an AMD Zen 5
/// (1 or 33 rows of a 2816-wide product; docs/performance.md, "Rows past the end of a buffer").
const BAND_ROW_MULTIPLE: u64 = 8;

/// The signless integer of an unsigned one's width (`ui8` -> `i8`), `None` for every other dtype. `arith` ops and
/// IREE 3.13's `util.global` of a parameter take signless integers only; StableHLO ops take either.
pub(crate) const fn signless(dtype: DType) -> Option<DType> {
    match dtype {
        DType::U8 => Some(DType::I8),
        DType::U16 => Some(DType::I16),
        DType::U32 => Some(DType::I32),
        DType::U64 => Some(DType::I64),
        _ => None,
    }
}

pub(crate) fn ty(shape: &Shape, dtype: DType) -> String {
    shape.mlir_type(dtype)
}

impl Val {
    pub(crate) fn ty(&self) -> String {
        ty(&self.shape, self.dtype)
    }
    pub(crate) fn rank(&self) -> usize {
        self.shape.rank()
    }
}

/// The dimensions `0..rank` grouped around the ones `kept`: each group holds exactly one kept dimension, the
/// others before the first kept one join its group and every other joins the group before it. Empty when no
/// dimension is kept.
fn groups_around(rank: usize, kept: impl Fn(usize) -> bool) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut leading = Vec::new();
    for i in 0..rank {
        if kept(i) {
            let mut g = std::mem::take(&mut leading);
            g.push(i);
            groups.push(g);
        } else if let Some(last) = groups.last_mut() {
            last.push(i);
        } else {
            leading.push(i);
        }
    }
    groups
}

/// The dimensions of `shape` grouped around those that are not a static 1 ([`groups_around`]), with those
/// dimensions as the squeezed shape. None when `shape` has no dimension other than static 1s.
fn squeeze_groups(shape: &Shape) -> Option<(Vec<Vec<usize>>, Shape)> {
    let kept = |i: usize| shape.0[i] != Dim::Static(1);
    let groups = groups_around(shape.rank(), kept);
    let squeezed = Shape((0..shape.rank()).filter(|&i| kept(i)).map(|i| shape.0[i]).collect());
    if groups.is_empty() { None } else { Some((groups, squeezed)) }
}

/// The dimensions of `many` grouped under each dimension of `few` for a reshape that splits (or, read the
/// other way, merges) whole dimensions: consecutive groups whose static sizes multiply to the `few` size, a `?`
/// of `few` owning exactly one `?` of `many`. Trailing 1s join the last group. `None` when no such grouping exists.
fn group_dims(few: &[Dim], many: &[Dim], collapsing: bool) -> Option<Vec<Vec<usize>>> {
    let mut groups = Vec::with_capacity(few.len());
    let mut j = 0;
    let statics =
        |dims: &[Dim]| dims.iter().try_fold(1u64, |p, d| if let Dim::Static(n) = d { p.checked_mul(*n) } else { None });
    for (i, d) in few.iter().enumerate() {
        let mut g = Vec::new();
        match d {
            Dim::Static(n) => {
                let mut p = 1u64;
                while p < *n || (g.is_empty() && *n == 1) {
                    match many.get(j)? {
                        Dim::Static(m) => p = p.checked_mul(*m)?,
                        Dim::Dynamic => return None,
                    }
                    g.push(j);
                    j += 1;
                }
                if p != *n {
                    return None;
                }
            }
            Dim::Dynamic => {
                loop {
                    let m = many.get(j)?;
                    g.push(j);
                    j += 1;
                    if *m == Dim::Dynamic {
                        break;
                    }
                }
                // Collapsing, static dims after the `?` merge into it while the rest of `many` holds more than the
                // rest of `few` (both static): `[?, 32, N]` into `[?, N]`. Not when expanding: `[?, N]` into
                // `[?, 32, N]` would split a `?` by 32 at run time, which no size check guards.
                if let Some(rest) = statics(&few[i + 1..]).filter(|_| collapsing) {
                    while let (Some(Dim::Static(_)), Some(more)) = (many.get(j), statics(&many[j..])) {
                        if more <= rest {
                            break;
                        }
                        g.push(j);
                        j += 1;
                    }
                }
            }
        }
        groups.push(g);
    }
    while j < many.len() {
        if many[j] != Dim::Static(1) {
            return None;
        }
        groups.last_mut()?.push(j);
        j += 1;
    }
    Some(groups)
}

/// `: a, b` for `array<i64: a, b>`; empty for an empty array (`array<i64>`).
fn i64_array(v: &[usize]) -> String {
    if v.is_empty() { String::new() } else { format!(": {}", list(v)) }
}

pub(crate) fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items.into_iter().map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

/// One element of `dtype` holding `value`, as the text inside `dense<…>`.
pub(crate) fn scalar_literal(value: f64, dtype: DType) -> String {
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

pub(crate) struct Emitter<'g, 'a, 'w> {
    pub(crate) g: &'g ComputeGraph<'a>,
    /// Pending text, written to `out` in pieces of about [`SPILL_BYTES`].
    pub(crate) body: String,
    pub(crate) out: &'w mut dyn TextOut,
    pub(crate) next: usize,
    pub(crate) vals: HashMap<TensorId, Val>,
    /// Values stored in row bands, as stored, which matmuls read ([`Emitter::banded_matmul`]): a linear's weight
    /// (`[N / T, K, T]`, no other value), and the codes of a weight kept packed (`[Np / T, Kb, B, T]`), the gates
    /// and column parts a few-rows form takes of them (`[?, Kb, B, T]`, `[parts, Kb, B, T]`) and their float
    /// conversions, which every other use reads through the `[Kb, B, Np]` view (gated, sliced) in `vals`.
    pub(crate) banded: HashMap<TensorId, Val>,
    /// Tensors computed from a narrower element type by ops IREE 3.13 counts as a "bit extend" (a widening
    /// convert, then only arithmetic and reshaping): see [`Emitter::unfused`].
    pub(crate) widened: HashSet<TensorId>,
    pub(crate) node: Option<&'g Node>,
}

impl<'g, 'a> Emitter<'g, 'a, '_> {
    pub(crate) fn fresh(&mut self) -> String {
        self.next += 1;
        format!("%v{}", self.next - 1)
    }

    pub(crate) fn line(&mut self, text: &str) {
        self.body.push_str("    ");
        self.body.push_str(text);
        self.body.push('\n');
    }

    /// Writes the pending text out when enough has accumulated (or always, with `force`).
    pub(crate) fn spill(&mut self, force: bool) -> Result<()> {
        spill(&mut self.body, &mut *self.out, force)
    }

    /// `%v = <rhs>` returning the new value.
    pub(crate) fn assign(&mut self, rhs: &str, shape: Shape, dtype: DType) -> Val {
        let name = self.fresh();
        self.line(&format!("{name} = {rhs}"));
        Val { name, shape, dtype }
    }

    /// The node being lowered, as messages name it, and its op.
    fn current(&self) -> (String, &'static str) {
        self.node.map_or_else(|| ("the module".to_owned(), ""), |n| (self.g.describe(n), n.op.name()))
    }

    pub(crate) fn err(&self, detail: impl Into<String>) -> HloError {
        let (node, op) = self.current();
        HloError::Unsupported { node, op, detail: detail.into() }
    }

    pub(crate) fn attr_err(&self, attr: &str, detail: impl Into<String>) -> HloError {
        let (node, op) = self.current();
        HloError::BadAttribute { node, op, attr: attr.into(), detail: detail.into() }
    }

    /// The attributes of the node being lowered.
    pub(crate) fn node_attrs(&self) -> &'g Attrs {
        static NONE: Attrs = Attrs::new();
        self.node.map_or(&NONE, |n| &n.attrs)
    }

    pub(crate) fn attr(&self, name: &str) -> Option<&'g Attr> {
        self.node.and_then(|n| n.attrs.get(name))
    }

    pub(crate) fn attr_int(&self, name: &str, default: i64) -> Result<i64> {
        match self.attr(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(other) => Err(self.attr_err(name, format!("must be an integer, got {other:?}"))),
        }
    }

    pub(crate) fn attr_f64(&self, name: &str, default: f64) -> Result<f64> {
        match self.attr(name) {
            None => Ok(default),
            Some(Attr::Float(v)) => Ok(*v),
            #[allow(clippy::cast_precision_loss)] // an integer literal for a float attribute
            Some(Attr::Int(v)) => Ok(*v as f64),
            Some(other) => Err(self.attr_err(name, format!("must be a number, got {other:?}"))),
        }
    }

    pub(crate) fn attr_bool(&self, name: &str, default: bool) -> Result<bool> {
        match self.attr(name) {
            None => Ok(default),
            Some(Attr::Bool(v)) => Ok(*v),
            Some(other) => Err(self.attr_err(name, format!("must be true or false, got {other:?}"))),
        }
    }

    pub(crate) fn attr_ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.attr(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(other) => Err(self.attr_err(name, format!("must be a list of integers, got {other:?}"))),
        }
    }

    /// Normalises a possibly negative axis for a tensor of `rank`.
    pub(crate) fn axis(&self, name: &str, axis: i64, rank: usize) -> Result<usize> {
        let back = usize::try_from(axis.unsigned_abs()).ok();
        let a = if axis < 0 { back.and_then(|b| rank.checked_sub(b)) } else { back };
        a.filter(|&a| a < rank).ok_or_else(|| self.attr_err(name, format!("{axis} is out of range for rank {rank}")))
    }

    pub(crate) fn static_dims(&self, v: &Val) -> Result<Vec<u64>> {
        v.shape.static_dims().ok_or_else(|| {
            self.err(format!(
                "needs a static shape, got [{}]: this op has no `?` lowering; give its input static sizes (a \
                 `?` dimension cannot reach it)",
                v.shape
            ))
        })
    }

    // --- primitives ---------------------------------------------------------------------

    pub(crate) fn unary(&mut self, op: &str, x: &Val) -> Val {
        let t = x.ty();
        self.assign(&format!("stablehlo.{op} {} : {t}", x.name), x.shape.clone(), x.dtype)
    }

    /// `x` converted to `dtype`, same shape: `stablehlo.convert`, except that a conversion to bf16 from f32, an
    /// integer or bool is rounded by [`Emitter::round_f32_to_bf16`].
    pub(crate) fn convert_to(&mut self, x: &Val, dtype: DType) -> Result<Val> {
        if dtype == DType::BF16 && !matches!(x.dtype, DType::BF16 | DType::F64 | DType::F16) {
            let f = if x.dtype == DType::F32 { x.clone() } else { self.plain_convert(x, DType::F32) };
            return self.round_f32_to_bf16(&f);
        }
        Ok(self.plain_convert(x, dtype))
    }

    /// `x` unchanged, bit for bit, through ops IREE cannot clone into a consumer's dispatch. IREE 3.13 clones a
    /// "bit extend" (an elementwise chain from a narrower element type without a `math` op: `convert(bf16 ->
    /// f32)`, `convert(i32 -> i64)`, a dequantization) into each consumer; cloned into a `concatenate` with `?`
    /// dimensions it is materialized on the stack at the `?` size, and iree-compile refuses the module
    /// (`exceeded stack allocation limit`: an f16 value widened and joined along a static axis with `?` rows; a
    /// `?` axis, such as a KV cache's, is written as insertions, [`Emitter::concat_in_place`], which IREE does
    /// not clone into). A float `abs` (a `math` op) makes the chain an
    /// ordinary dispatch: 16- and 32-bit floats take it on their bits with the sign bit put back (exact, NaN
    /// too); integers and f64 (which IREE demotes to f32, so its bits cannot be reinterpreted) subtract
    /// `min(|x as f32|, 0)`, a zero no folder can see. Bool values are returned as they are.
    pub(crate) fn unfused(&mut self, x: &Val) -> Result<Val> {
        let bits = match x.dtype {
            DType::F16 | DType::BF16 => DType::U16,
            DType::F32 => DType::U32,
            DType::Bool => return Ok(x.clone()),
            _ => {
                let f = if x.dtype.is_float() { x.clone() } else { self.plain_convert(x, DType::F32) };
                let magnitude = self.unary("abs", &f);
                let zero = self.fill_like(0.0, &f, f.dtype)?;
                let hidden_zero = self.binary_same("minimum", &magnitude, &zero);
                let hidden_zero = self.plain_convert(&hidden_zero, x.dtype);
                return Ok(self.binary_same("subtract", x, &hidden_zero));
            }
        };
        let magnitude = self.unary("abs", x);
        let magnitude_bits = self.bitcast(&magnitude, bits);
        let x_bits = self.bitcast(x, bits);
        // |x| differs from x in the sign bit alone: xor isolates it, or puts it back.
        let sign_bit = self.binary_same("xor", &x_bits, &magnitude_bits);
        let both = self.binary_same("or", &sign_bit, &magnitude_bits);
        Ok(self.bitcast(&both, x.dtype))
    }

    /// `a` through a `stablehlo.optimization_barrier` with `b`: the same value, which IREE cannot compute (or
    /// schedule what reads it) before `b` is.
    pub(crate) fn after(&mut self, a: &Val, b: &Val) -> Val {
        let name = self.fresh();
        self.line(&format!(
            "{name}:2 = stablehlo.optimization_barrier {}, {} : {}, {}",
            a.name,
            b.name,
            a.ty(),
            b.ty()
        ));
        Val { name: format!("{name}#0"), shape: a.shape.clone(), dtype: a.dtype }
    }

    /// `a` through a `stablehlo.optimization_barrier` of its own: the same value, which IREE does not treat as a
    /// constant expression (it computes nothing from it at load).
    pub(crate) fn opaque(&mut self, a: &Val) -> Val {
        let name = self.fresh();
        self.line(&format!("{name} = stablehlo.optimization_barrier {} : {}", a.name, a.ty()));
        Val { name, shape: a.shape.clone(), dtype: a.dtype }
    }

    /// `x`, or the signless integers of its bits when its elements are unsigned and dimension `i` is `?`: the
    /// value whose extent a `get_dimension_size` / `tensor.dim` reads. IREE 3.13 cannot lower either on a `?`
    /// unsigned tensor ("failed to legalize operation 'tensor.dim'"); a bitcast has the same extents.
    fn measurable(&mut self, x: &Val, i: usize) -> Val {
        match (signless(x.dtype), x.shape.0.get(i)) {
            (Some(bits), Some(Dim::Dynamic)) => self.bitcast(x, bits),
            _ => x.clone(),
        }
    }

    /// `x` retyped to `shape`, the same extents more or less specific (`tensor.cast`); an unsigned `x` is cast as
    /// the signless integers of its bits (IREE 3.13 cannot lower a `tensor.cast` of a ui16 tensor).
    pub(crate) fn tensor_cast(&mut self, x: &Val, shape: &Shape) -> Val {
        if let Some(bits) = signless(x.dtype) {
            let signless = self.bitcast(x, bits);
            let cast = self.tensor_cast(&signless, shape);
            return self.bitcast(&cast, x.dtype);
        }
        let rhs = format!("tensor.cast {} : {} to {}", x.name, x.ty(), ty(shape, x.dtype));
        self.assign(&rhs, shape.clone(), x.dtype)
    }

    /// `stablehlo.bitcast_convert` of `x` to `dtype`, an element type of the same width: its bits, retyped.
    pub(crate) fn bitcast(&mut self, x: &Val, dtype: DType) -> Val {
        let rhs = format!("stablehlo.bitcast_convert {} : ({}) -> {}", x.name, x.ty(), ty(&x.shape, dtype));
        self.assign(&rhs, x.shape.clone(), dtype)
    }

    /// `stablehlo.convert` of `x` to `dtype`, same shape.
    fn plain_convert(&mut self, x: &Val, dtype: DType) -> Val {
        let rhs = format!("stablehlo.convert {} : ({}) -> {}", x.name, x.ty(), ty(&x.shape, dtype));
        self.assign(&rhs, x.shape.clone(), dtype)
    }

    /// f32 `x` rounded to bf16 (to nearest, ties to even; a NaN stays a quiet NaN of the same sign) in integer
    /// arithmetic on its bits. IREE 3.13 folds `convert(f32 -> bf16)` of an integer-to-float conversion (an
    /// `iota`, an `argmax`, a `convert` from an integer) into one integer-to-bf16 conversion, which its CPU
    /// backend compiles into a call to compiler-rt's `__truncsfbf2` that the embedded executable cannot link; an
    /// integer source also goes through f32 here (rounded twice above 2^24, as the graph format's reference does).
    pub(crate) fn round_f32_to_bf16(&mut self, x: &Val) -> Result<Val> {
        let u = DType::U32;
        let bits = self.bitcast(x, u);
        let sixteen = self.fill_like(16.0, x, u)?;
        let one = self.fill_like(1.0, x, u)?;
        let half_ulp = self.fill_like(f64::from(0x7FFF_u32), x, u)?;
        let quiet = self.fill_like(f64::from(0x0040_u32), x, u)?;
        let high = self.binary_same("shift_right_logical", &bits, &sixteen);
        let lsb = self.binary_same("and", &high, &one);
        let bias = self.binary_same("add", &lsb, &half_ulp);
        let biased = self.binary_same("add", &bits, &bias);
        let rounded = self.binary_same("shift_right_logical", &biased, &sixteen);
        let nan_bits = self.binary_same("or", &high, &quiet);
        let is_nan = self.compare_same("NE", x, x);
        let chosen = self.select_same(&is_nan, &nan_bits, &rounded);
        let narrow = self.plain_convert(&chosen, DType::U16);
        Ok(self.bitcast(&narrow, DType::BF16))
    }

    pub(crate) fn binary_same(&mut self, op: &str, a: &Val, b: &Val) -> Val {
        let t = a.ty();
        self.assign(&format!("stablehlo.{op} {}, {} : {t}", a.name, b.name), a.shape.clone(), a.dtype)
    }

    /// `stablehlo.compare dir` of two values of one shape and dtype, compared as that dtype is (FLOAT,
    /// UNSIGNED or SIGNED); the result is a bool tensor of that shape.
    pub(crate) fn compare_same(&mut self, dir: &str, a: &Val, b: &Val) -> Val {
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

    /// `stablehlo.select p, a, b` of values of one shape.
    pub(crate) fn select_same(&mut self, p: &Val, a: &Val, b: &Val) -> Val {
        let rhs = format!("stablehlo.select {}, {}, {} : {}, {}", p.name, a.name, b.name, p.ty(), a.ty());
        self.assign(&rhs, a.shape.clone(), a.dtype)
    }

    /// A constant of `shape` filled with `value` (static shapes only).
    pub(crate) fn splat(&mut self, value: f64, shape: &Shape, dtype: DType) -> Val {
        let lit = scalar_literal(value, dtype);
        self.assign(&format!("stablehlo.constant dense<{lit}> : {}", ty(shape, dtype)), shape.clone(), dtype)
    }

    /// `value` broadcast to the shape of `like` (which may be dynamic).
    pub(crate) fn fill_like(&mut self, value: f64, like: &Val, dtype: DType) -> Result<Val> {
        if like.shape.is_dynamic() {
            let s = self.splat(value, &Shape::scalar(), dtype);
            self.broadcast_to(&s, &[], &like.shape, Some(like))
        } else {
            Ok(self.splat(value, &like.shape, dtype))
        }
    }

    /// A 1-D i32 tensor holding the run-time shape of `like`. A static dimension above `i32::MAX` cannot be
    /// part of it: an error naming the dimension, never a wrapped or zero extent.
    pub(crate) fn shape_tensor(&mut self, like: &Val) -> Result<Val> {
        let parts = (0..like.rank()).map(|i| self.dim_part(like, i)).collect::<Result<Vec<_>>>()?;
        Ok(self.concat_parts(parts))
    }

    /// Dimension `i` of `x` as a `tensor<1xi32>`: a constant when it is static, `get_dimension_size` when `?`.
    pub(crate) fn dim_part(&mut self, x: &Val, i: usize) -> Result<Val> {
        match x.shape.0.get(i) {
            Some(Dim::Static(n)) => self.i32_part(*n, i, &x.shape),
            Some(Dim::Dynamic) => {
                let s = self.dim_size(x, i)?;
                Ok(self.assign(
                    &format!("stablehlo.reshape {} : (tensor<i32>) -> tensor<1xi32>", s.name),
                    Shape::of(&[1]),
                    DType::I32,
                ))
            }
            None => Err(self.err(format!("no dimension {i} in [{}]", x.shape))),
        }
    }

    /// A `tensor<1xi32>` constant `n` (dimension `i` of `of`), or an error when it is above `i32::MAX`.
    pub(crate) fn i32_part(&mut self, n: u64, i: usize, of: &Shape) -> Result<Val> {
        let v = i32::try_from(n).map_err(|_| {
            self.err(format!(
                "dimension {i} of [{of}] is {n}, above the i32 extent a shape with dynamic dimensions can hold at run \
                 time"
            ))
        })?;
        Ok(self.splat(f64::from(v), &Shape::of(&[1]), DType::I32))
    }

    /// One `tensor<Nxi32>` shape from `tensor<1xi32>` parts, one per dimension.
    pub(crate) fn concat_parts(&mut self, mut parts: Vec<Val>) -> Val {
        match parts.len() {
            0 => self.assign("stablehlo.constant dense<> : tensor<0xi32>", Shape::of(&[0]), DType::I32),
            1 => parts.remove(0),
            n => {
                let rhs = format!(
                    "stablehlo.concatenate {}, dim = 0 : ({}) -> tensor<{n}xi32>",
                    list(parts.iter().map(|p| p.name.clone())),
                    list(parts.iter().map(Val::ty))
                );
                self.assign(&rhs, Shape::of(&[n as u64]), DType::I32)
            }
        }
    }

    /// `broadcast_in_dim` of `x` to `shape`, operand dim i going to result dim `dims[i]`. A dynamic
    /// target shape is taken at run time from `like`.
    pub(crate) fn broadcast_to(&mut self, x: &Val, dims: &[usize], shape: &Shape, like: Option<&Val>) -> Result<Val> {
        let out = ty(shape, x.dtype);
        if shape.is_dynamic() || x.shape.is_dynamic() {
            let st = match like {
                Some(like) => self.shape_tensor(like)?,
                // A static target: its extents are constants.
                None if !shape.is_dynamic() => {
                    self.shape_tensor(&Val { name: String::new(), shape: shape.clone(), dtype: x.dtype })?
                }
                None => {
                    return Err(self.err(format!(
                        "broadcast of [{}] to [{shape}] needs a reference tensor for the `?` dimensions",
                        x.shape
                    )));
                }
            };
            return Ok(self.dynamic_broadcast(x, dims, shape, &st));
        }
        let rhs = format!("stablehlo.broadcast_in_dim {}, dims = [{}] : ({}) -> {out}", x.name, list(dims), x.ty());
        Ok(self.assign(&rhs, shape.clone(), x.dtype))
    }

    /// NumPy broadcast of `x` to `like`'s shape (right-aligned); `x` itself when shapes agree.
    pub(crate) fn numpy_broadcast(&mut self, x: &Val, like: &Val) -> Result<Val> {
        if x.shape == like.shape {
            return Ok(x.clone());
        }
        let offset = like.rank().checked_sub(x.rank()).ok_or_else(|| self.err("cannot broadcast to a lower rank"))?;
        let dims: Vec<usize> = (offset..like.rank()).collect();
        self.broadcast_to(x, &dims, &like.shape, Some(like))
    }

    /// `get_dimension_size` of dimension `i` of `x`, static or not (IREE folds a static one): the extent read
    /// from the operand itself, for ops whose result takes its shape from a reference tensor (`expand`, `arange`).
    pub(crate) fn runtime_dim(&mut self, x: &Val, i: usize) -> Val {
        let x = &self.measurable(x, i);
        self.assign(
            &format!("stablehlo.get_dimension_size {}, dim = {i} : ({}) -> tensor<i32>", x.name, x.ty()),
            Shape::scalar(),
            DType::I32,
        )
    }

    /// The run-time shape of `x` (`tensor<Nxi32>`), every dimension read with [`Emitter::runtime_dim`].
    pub(crate) fn runtime_shape(&mut self, x: &Val) -> Val {
        let parts: Vec<Val> = (0..x.rank()).map(|i| self.runtime_dim(x, i)).collect();
        self.shape_of_parts(&parts)
    }

    /// The run-time size of dimension `i` of `x` as a `tensor<i32>` (a constant when it is static).
    pub(crate) fn dim_size(&mut self, x: &Val, i: usize) -> Result<Val> {
        match x.shape.0.get(i) {
            Some(Dim::Static(n)) => {
                let n = i32::try_from(*n).map_err(|_| {
                    self.err(format!("dimension {i} of [{}] is {n}, above the i32 extent of a run-time shape", x.shape))
                })?;
                Ok(self.splat(f64::from(n), &Shape::scalar(), DType::I32))
            }
            Some(Dim::Dynamic) => {
                let x = &self.measurable(x, i);
                Ok(self.assign(
                    &format!("stablehlo.get_dimension_size {}, dim = {i} : ({}) -> tensor<i32>", x.name, x.ty()),
                    Shape::scalar(),
                    DType::I32,
                ))
            }
            None => Err(self.err(format!("no dimension {i} in [{}]", x.shape))),
        }
    }

    /// A `tensor<Nxi32>` shape from one `tensor<i32>` per dimension.
    pub(crate) fn shape_of_parts(&mut self, parts: &[Val]) -> Val {
        let ones: Vec<Val> = parts
            .iter()
            .map(|p| {
                self.assign(
                    &format!("stablehlo.reshape {} : (tensor<i32>) -> tensor<1xi32>", p.name),
                    Shape::of(&[1]),
                    DType::I32,
                )
            })
            .collect();
        self.concat_parts(ones)
    }

    /// Every operand NumPy-broadcast (right-aligned) to `target`, the node's result shape, for the elementwise
    /// ops (StableHLO wants equal shapes). With `?` dimensions (in an operand or in `target`) the run-time result
    /// shape is built dimension by dimension: a static extent as a constant, a `?` from `get_dimension_size` of an
    /// operand that has `?` there, then `stablehlo.dynamic_broadcast_in_dim` with every operand dimension declared
    /// expanding (a static 1 growing) or non-expanding (the rest), as IREE 3.13 needs. A `?` against a static n is
    /// taken to be n at run time, and two `?` are taken to be equal (graph-format.md says so).
    pub(crate) fn broadcast_operands(&mut self, xs: &[Val], target: &Shape) -> Result<Vec<Val>> {
        let rank = target.rank();
        for x in xs {
            if x.rank() > rank {
                return Err(self.err(format!("cannot broadcast [{}] to the lower rank [{target}]", x.shape)));
            }
        }
        let dynamic = target.is_dynamic() || xs.iter().any(|x| x.shape.is_dynamic());
        let mut shape_tensor: Option<Val> = None;
        let mut out = Vec::with_capacity(xs.len());
        for x in xs {
            if &x.shape == target {
                out.push(x.clone());
                continue;
            }
            let offset = rank - x.rank();
            let dims: Vec<usize> = (offset..rank).collect();
            if !dynamic {
                out.push(self.broadcast_to(x, &dims, target, None)?);
                continue;
            }
            let st = match &shape_tensor {
                Some(st) => st.clone(),
                None => {
                    let st = self.broadcast_shape_tensor(xs, target)?;
                    shape_tensor = Some(st.clone());
                    st
                }
            };
            out.push(self.dynamic_broadcast(x, &dims, target, &st));
        }
        Ok(out)
    }

    /// The run-time shape (`tensor<Nxi32>`) of the broadcast of `xs` to `target`: each static dimension a
    /// constant, each `?` the size of an operand's `?` dimension aligned with it (right-aligned). The same text
    /// [`Emitter::shape_tensor`] writes for one operand.
    fn broadcast_shape_tensor(&mut self, xs: &[Val], target: &Shape) -> Result<Val> {
        let rank = target.rank();
        let mut parts = Vec::with_capacity(rank);
        for (i, d) in target.0.iter().enumerate() {
            let aligned = |x: &Val| (i + x.rank()).checked_sub(rank).map(|j| (j, x.shape.0[j]));
            let owner = xs.iter().find_map(|x| match aligned(x) {
                Some((j, Dim::Dynamic)) if *d == Dim::Dynamic => Some((x.clone(), j)),
                _ => None,
            });
            let part = match (d, owner) {
                (_, Some((x, j))) => self.dim_part(&x, j)?,
                (Dim::Static(n), None) => self.i32_part(*n, i, target)?,
                (Dim::Dynamic, None) => {
                    // Declared `?` where every operand is static: the operands' extent (not 1 if any).
                    let n = xs
                        .iter()
                        .filter_map(|x| match aligned(x) {
                            Some((_, Dim::Static(n))) if n != 1 => Some(n),
                            _ => None,
                        })
                        .next()
                        .unwrap_or(1);
                    self.i32_part(n, i, target)?
                }
            };
            parts.push(part);
        }
        Ok(self.concat_parts(parts))
    }

    /// `stablehlo.dynamic_broadcast_in_dim` of `x` to `shape` (run-time extents in `st`), operand dimension i
    /// going to result dimension `dims[i]`: a static 1 meeting another extent is expanding, every other operand
    /// dimension non-expanding (equal, or a `?` assumed equal to what it meets). IREE 3.13 lowers the op only
    /// when every operand dimension is classified one way or the other.
    ///
    /// An expanding (unit) dimension is first squeezed out of the operand (a static reshape, or
    /// `tensor.collapse_shape` when the operand has `?` dimensions), so the broadcast has no expanding dimension:
    /// IREE 3.13 merges a broadcast of a broadcast into one that has lost the `known_*` attributes, and then
    /// cannot lower it when a dimension expands.
    pub(crate) fn dynamic_broadcast(&mut self, x: &Val, dims: &[usize], shape: &Shape, st: &Val) -> Val {
        let identity = x.rank() == shape.rank()
            && dims.iter().enumerate().all(|(i, &d)| i == d)
            && x.shape.0.iter().zip(&shape.0).all(|(a, b)| a == b || *a != Dim::Static(1));
        if identity {
            // Nothing expands (a `?` is taken to be the size it meets): no broadcast, at most a cast of the type.
            // IREE 3.13 merges a chain of dynamic broadcasts into one without the known_* dims it then needs.
            if x.shape == *shape {
                return x.clone();
            }
            return self.tensor_cast(x, shape);
        }
        let (mut expanding, mut same) = (Vec::new(), Vec::new());
        for (i, &d) in dims.iter().enumerate() {
            match (x.shape.0.get(i), shape.0.get(d)) {
                (Some(Dim::Static(1)), Some(b)) if *b != Dim::Static(1) => expanding.push(i),
                _ => same.push(i),
            }
        }
        if !expanding.is_empty() {
            let kept_shape = Shape(same.iter().map(|&i| x.shape.0[i]).collect());
            let squeezed = if x.shape.is_dynamic() {
                // Each kept dimension grouped with the unit dimensions around it (a `?` never expands, so one
                // is kept).
                let groups = groups_around(x.rank(), |j| !expanding.contains(&j));
                self.reshape_grouped(x, &kept_shape, &groups)
            } else {
                let rhs = format!("stablehlo.reshape {} : ({}) -> {}", x.name, x.ty(), ty(&kept_shape, x.dtype));
                self.assign(&rhs, kept_shape, x.dtype)
            };
            let kept_dims: Vec<usize> = same.iter().map(|&i| dims[i]).collect();
            return self.dynamic_broadcast(&squeezed, &kept_dims, shape, st);
        }
        let rhs = format!(
            "stablehlo.dynamic_broadcast_in_dim {}, {}, dims = [{}] {{known_expanding_dimensions = array<i64{}>, \
             known_nonexpanding_dimensions = array<i64{}>}} : ({}, {}) -> {}",
            x.name,
            st.name,
            list(dims),
            i64_array(&expanding),
            i64_array(&same),
            x.ty(),
            st.ty(),
            ty(shape, x.dtype)
        );
        self.assign(&rhs, shape.clone(), x.dtype)
    }

    /// `x` reshaped to `shape`. With `?` dimensions the reshape must split or merge whole dimensions (each `?`
    /// on one side in a group with exactly one `?` on the other), written as `tensor.expand_shape` /
    /// `tensor.collapse_shape`: IREE 3.13 does not lower `stablehlo.dynamic_reshape` at all. Anything else is
    /// an error naming the shapes, never MLIR IREE rejects.
    pub(crate) fn reshape(&mut self, x: &Val, shape: &Shape) -> Result<Val> {
        if !shape.is_dynamic() && !x.shape.is_dynamic() {
            if shape.element_count() != x.shape.element_count() {
                return Err(self.err(format!("cannot reshape [{}] to [{shape}]: the element counts differ", x.shape)));
            }
            let rhs = format!("stablehlo.reshape {} : ({}) -> {}", x.name, x.ty(), ty(shape, x.dtype));
            return Ok(self.assign(&rhs, shape.clone(), x.dtype));
        }
        let unsupported = || {
            self.err(format!(
                "cannot reshape [{}] to [{shape}] with `?` dimensions: a dynamic reshape must split or merge whole \
                 dimensions, each `?` grouped with exactly one `?` of the other shape (IREE 3.13 lowers only those)",
                x.shape
            ))
        };
        let expand = shape.0.len() >= x.shape.0.len();
        let (few, many) = if expand { (&x.shape.0, &shape.0) } else { (&shape.0, &x.shape.0) };
        let groups = group_dims(few, many, !expand).ok_or_else(unsupported)?;
        Ok(self.reshape_grouped(x, shape, &groups))
    }

    /// `tensor.expand_shape` / `tensor.collapse_shape` of `x` to `shape`, dimension `i` of the shorter shape
    /// being the dimensions `groups[i]` of the longer one (each group holding at most one `?`).
    fn reshape_grouped(&mut self, x: &Val, shape: &Shape, groups: &[Vec<usize>]) -> Val {
        let expand = shape.0.len() >= x.shape.0.len();
        let assoc = format!("[{}]", list(groups.iter().map(|g| format!("[{}]", list(g.clone())))));
        if !expand {
            let rhs = format!("tensor.collapse_shape {} {assoc} : {} into {}", x.name, x.ty(), ty(shape, x.dtype));
            return self.assign(&rhs, shape.clone(), x.dtype);
        }
        // expand_shape names every output size: static ones as numbers, a `?` as the input size divided by the
        // static sizes of its group.
        let mut sizes = Vec::with_capacity(shape.0.len());
        for (i, g) in groups.iter().enumerate() {
            let statics: u64 =
                g.iter().filter_map(|&j| if let Dim::Static(n) = shape.0[j] { Some(n) } else { None }).product();
            for &j in g {
                match shape.0[j] {
                    Dim::Static(n) => sizes.push(n.to_string()),
                    Dim::Dynamic => {
                        let d = self.dim_index(x, i);
                        let size = if statics > 1 {
                            let c = self.fresh();
                            self.line(&format!("{c} = arith.constant {statics} : index"));
                            let q = self.fresh();
                            self.line(&format!("{q} = arith.divui {d}, {c} : index"));
                            q
                        } else {
                            d
                        };
                        sizes.push(size);
                    }
                }
            }
        }
        let rhs = format!(
            "tensor.expand_shape {} {assoc} output_shape [{}] : {} into {}",
            x.name,
            list(&sizes),
            x.ty(),
            ty(shape, x.dtype)
        );
        self.assign(&rhs, shape.clone(), x.dtype)
    }

    /// The reduction `r` of `x` over `axes` with those axes put back as size 1 (`keepdims`): a broadcast, which
    /// IREE lowers for dynamic shapes where it does not lower a dynamic reshape.
    pub(crate) fn keep_dims(&mut self, r: &Val, x: &Val, axes: &[usize], shape: &Shape) -> Result<Val> {
        if !shape.is_dynamic() {
            return self.reshape(r, shape);
        }
        let mut parts = Vec::with_capacity(x.rank());
        for i in 0..x.rank() {
            parts.push(if axes.contains(&i) {
                self.splat(1.0, &Shape::scalar(), DType::I32)
            } else {
                self.dim_size(x, i)?
            });
        }
        let st = self.shape_of_parts(&parts);
        let dims: Vec<usize> = (0..x.rank()).filter(|i| !axes.contains(i)).collect();
        Ok(self.dynamic_broadcast(r, &dims, shape, &st))
    }

    /// The sum of `x` over its leading axis. For a static f32 `x` of rank 2 or more, with a leading extent of 2 or
    /// more, a `dot_general` of a splat of ones `[R]` with `x`, contracting that axis; else a `stablehlo.reduce`.
    /// Measured with IREE 3.13 on the llvm-cpu target (docs/performance.md, "The packed product's sum over
    /// blocks"): a `stablehlo.reduce` over the outer axis of `[R, .., N]` is compiled to a reduction vectorized
    /// across the strided axis (130 µs for `[32, 2816]`, 1.1 ms for `[32, 7, 2816]`), the contraction with ones to
    /// a `vecmat` that reads `x` row by row (6 µs and 34 µs). A packed weight's product summed over its blocks is
    /// such a sum. Other dtypes keep the `reduce`: only f32 was measured, and a 16-bit `dot_general` may accumulate
    /// in 16 bits.
    pub(crate) fn sum_leading(&mut self, x: &Val) -> Val {
        match x.shape.0.first() {
            Some(&Dim::Static(r)) if r >= 2 && x.rank() >= 2 && !x.shape.is_dynamic() && x.dtype == DType::F32 => {
                let ones = self.splat(1.0, &Shape(vec![Dim::Static(r)]), x.dtype);
                let out = Shape(x.shape.0[1..].to_vec());
                let rhs = format!(
                    "stablehlo.dot_general {}, {}, contracting_dims = [0] x [0] : ({}, {}) -> {}",
                    ones.name,
                    x.name,
                    ones.ty(),
                    x.ty(),
                    ty(&out, x.dtype)
                );
                self.assign(&rhs, out, x.dtype)
            }
            // With `?` dims after the leading one (a per-block product of a prefill's few rows, its columns gated
            // by `gate_rows`): the same contraction with ones, written as a `linalg.generic` over the trailing dims
            // merged into one (IREE 3.13 rejects that `dot_general`'s `?` result; its `reduce` over the leading
            // axis is about 5x slower: docs/performance.md, "A few rows of a kept weight").
            Some(&Dim::Static(r))
                if r >= 2
                    && x.rank() >= 2
                    && x.dtype == DType::F32
                    && x.shape.0[1..].iter().filter(|d| **d == Dim::Dynamic).count() == 1
                    && !x.shape.0[1..].contains(&Dim::Static(0)) =>
            {
                let rest = Shape(x.shape.0[1..].to_vec());
                let j = if rest.is_dynamic() {
                    Dim::Dynamic
                } else {
                    Dim::Static(rest.0.iter().map(|d| if let Dim::Static(n) = d { *n } else { 1 }).product())
                };
                let flat_shape = Shape(vec![Dim::Static(r), j]);
                let flat = self.reshape_grouped(x, &flat_shape, &[vec![0], (1..x.rank()).collect()]);
                let ones = self.splat(1.0, &Shape(vec![Dim::Static(r)]), x.dtype);
                let sum_shape = Shape(vec![j]);
                let init = self.zeros(&sum_shape, x.dtype, (&flat, 1));
                let out_ty = ty(&sum_shape, x.dtype);
                let (o, v, acc, p, total) = (self.fresh(), self.fresh(), self.fresh(), self.fresh(), self.fresh());
                let rhs = format!(
                    "linalg.generic {{indexing_maps = [affine_map<(j, b) -> (b)>, affine_map<(j, b) -> (b, j)>, \
                     affine_map<(j, b) -> (j)>], iterator_types = [\"parallel\", \"reduction\"]}} ins({}, {} : {}, {}) \
                     outs({} : {out_ty}) {{\n    ^bb0({o}: f32, {v}: f32, {acc}: f32):\n      {p} = arith.mulf {o}, {v} : \
                     f32\n      {total} = arith.addf {acc}, {p} : f32\n      linalg.yield {total} : f32\n    }} -> {out_ty}",
                    ones.name,
                    flat.name,
                    ones.ty(),
                    flat.ty(),
                    init.name,
                );
                let sum = self.assign(&rhs, sum_shape, x.dtype);
                if rest.rank() == 1 { sum } else { self.reshape_grouped(&sum, &rest, &[(0..rest.rank()).collect()]) }
            }
            _ => self.reduce(x, &[0], "add"),
        }
    }

    /// A real `stablehlo.reduce` over `axes` with `body` (add or maximum).
    pub(crate) fn reduce(&mut self, x: &Val, axes: &[usize], body: &str) -> Val {
        if x.shape.is_dynamic() && x.shape.0.contains(&Dim::Static(1)) {
            // IREE 3.13 sizes a stack buffer from the `?` of a reduction whose operand also has unit dims
            // ("stack allocation size overflows 64 bits", [7, 1, 3, ?, ?] over [0, 3, 4]; [1, ?] over 1): the
            // unit dims dropped first (`tensor.collapse_shape`), the reduction, then those kept put back.
            if let Some((groups, squeezed)) = squeeze_groups(&x.shape) {
                // A reduced unit dimension reduces nothing: only the group's own dimension counts.
                let new_axes: Vec<usize> = groups
                    .iter()
                    .enumerate()
                    .filter(|(_, g)| g.iter().any(|i| axes.contains(i) && x.shape.0[*i] != Dim::Static(1)))
                    .map(|(j, _)| j)
                    .collect();
                if !new_axes.is_empty() {
                    let flat = self.reshape_grouped(x, &squeezed, &groups);
                    let r = self.reduce(&flat, &new_axes, body);
                    let kept = Shape(
                        x.shape.0.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, d)| *d).collect(),
                    );
                    if r.shape == kept {
                        return r;
                    }
                    return match squeeze_groups(&kept) {
                        Some((g, _)) => self.reshape_grouped(&r, &kept, &g),
                        None => {
                            // Only unit dims kept: a static reshape of the (then static) result.
                            let rhs = format!("stablehlo.reshape {} : ({}) -> {}", r.name, r.ty(), ty(&kept, r.dtype));
                            self.assign(&rhs, kept, r.dtype)
                        }
                    };
                }
            }
        }
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
    pub(crate) fn unreduce(&mut self, r: &Val, axes: &[usize], like: &Val) -> Result<Val> {
        let dims: Vec<usize> = (0..like.rank()).filter(|i| !axes.contains(i)).collect();
        self.broadcast_to(r, &dims, &like.shape, Some(like))
    }

    /// The mean of `x` over `axes`: the sum divided by the number of elements reduced, counted at run time
    /// when an axis is `?`.
    pub(crate) fn mean(&mut self, x: &Val, axes: &[usize]) -> Result<Val> {
        let s = self.reduce(x, axes, "add");
        let mut n = 1u64;
        let mut dynamic = Vec::new();
        for &a in axes {
            match x.shape.0[a] {
                Dim::Static(d) => n = n.saturating_mul(d),
                Dim::Dynamic => dynamic.push(a),
            }
        }
        #[allow(clippy::cast_precision_loss)] // element counts of reduced axes are small
        let c = if dynamic.is_empty() {
            self.fill_like(n as f64, &s, s.dtype)?
        } else {
            let mut count = self.dim_size(x, dynamic[0])?;
            for &a in &dynamic[1..] {
                let d = self.dim_size(x, a)?;
                count = self.binary_same("multiply", &count, &d);
            }
            let count = self.convert_to(&count, s.dtype)?;
            let statics = self.splat(n as f64, &Shape::scalar(), s.dtype);
            let count = self.binary_same("multiply", &count, &statics);
            self.broadcast_to(&count, &[], &s.shape, Some(&s))?
        };
        Ok(self.binary_same("divide", &s, &c))
    }

    pub(crate) fn softmax(&mut self, x: &Val, axis: usize) -> Result<Val> {
        let m = self.reduce(x, &[axis], "maximum");
        let mb = self.unreduce(&m, &[axis], x)?;
        let shifted = self.binary_same("subtract", x, &mb);
        let e = self.unary("exponential", &shifted);
        let s = self.reduce(&e, &[axis], "add");
        let sb = self.unreduce(&s, &[axis], x)?;
        Ok(self.binary_same("divide", &e, &sb))
    }

    pub(crate) fn transpose(&mut self, x: &Val, perm: &[usize]) -> Val {
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

    pub(crate) fn matmul(&mut self, a: &Val, b: &Val, out: &Shape) -> Result<Val> {
        // The shapes multiply to `out`: the type rule (`tapeout_graph::ops::matmul`) checked it.
        let (ra, rb) = (a.rank(), b.rank());
        let (ad, bd) = (&a.shape.0, &b.shape.0);
        // Either special case below applies whenever a `?` dimension is involved (in an operand or in the result):
        // IREE 3.13 folds the unit dimension of such a `dot_general` into a `stablehlo.dynamic_reshape`, which it
        // then refuses to lower.
        let dynamic = a.shape.is_dynamic() || b.shape.is_dynamic() || out.is_dynamic();
        let batched = ra == rb && ra >= 3;
        let k_is_one = ra >= 2 && ad[ra - 1] == Dim::Static(1) && bd[rb - 2] == Dim::Static(1);
        if dynamic && k_is_one && (rb == 2 || batched) {
            // `[.., M, 1] x [.., 1, N]`: an outer product, which is the NumPy-broadcast product of the two.
            let both = self.broadcast_operands(&[a.clone(), b.clone()], out)?;
            return Ok(self.binary_same("multiply", &both[0], &both[1]));
        }
        if dynamic && bd[rb - 1] == Dim::Static(1) && (rb == 2 || batched) {
            // `[.., K] x [.., K, 1]`: the sum over K of the product with the column laid along K (`[K]`, or a
            // transpose `[B.., 1, K]` when batched), its unit dimension put back by a broadcast (which IREE lowers).
            let row = if rb == 2 {
                self.reshape(b, &Shape(vec![bd[0]]))?
            } else {
                let mut perm: Vec<usize> = (0..rb).collect();
                perm.swap(rb - 2, rb - 1);
                self.transpose(b, &perm)
            };
            let both = self.broadcast_operands(&[a.clone(), row], &a.shape)?;
            let product = self.binary_same("multiply", &both[0], &both[1]);
            let sum = self.reduce(&product, &[ra - 1], "add");
            return self.keep_dims(&sum, &product, &[ra - 1], out);
        }
        let unit = |d: &[Dim]| d.iter().all(|d| *d == Dim::Static(1));
        if dynamic && batched && unit(&ad[..ra - 2]) && unit(&bd[..rb - 2]) {
            // `[1.., M, K] x [1.., K, N]` with a `?` (HF's batch of one): IREE 3.13 folds the unit batch dims of
            // that `dot_general` into a reshape with a `?` result, which it rejects. The batch dims dropped
            // (`tensor.collapse_shape`), the 2-D product, then the batch dims put back.
            let groups = [(0..ra - 1).collect::<Vec<_>>(), vec![ra - 1]];
            let a2 = self.reshape_grouped(a, &Shape(vec![ad[ra - 2], ad[ra - 1]]), &groups);
            let b2 = self.reshape_grouped(b, &Shape(vec![bd[rb - 2], bd[rb - 1]]), &groups);
            let o2 = Shape(vec![out.0[ra - 2], out.0[ra - 1]]);
            let p = self.matmul(&a2, &b2, &o2)?;
            return Ok(self.reshape_grouped(&p, out, &groups));
        }
        let lead = &ad[..ra.saturating_sub(1)];
        if dynamic && rb == 2 && ra >= 2 && lead.iter().all(|d| *d == Dim::Static(1)) {
            // `[1.., K] x [K, N]` with a `?` K or N (one row): IREE 3.13 turns any `dot_general` of that row, even
            // as a vector `[K]`, into a `stablehlo.reshape` with a `?` result, which it then rejects. The product
            // as the sum over K of the row laid along K (`[K, 1]`) times `b`, the unit dims put back.
            let groups = [(0..ra).collect::<Vec<_>>()];
            let k = ad[ra - 1];
            let row = self.reshape_grouped(a, &Shape(vec![k]), &groups);
            let col = self.reshape_grouped(&row, &Shape(vec![k, Dim::Static(1)]), &[vec![0, 1]]);
            let both = self.broadcast_operands(&[col, b.clone()], &b.shape)?;
            let product = self.binary_same("multiply", &both[0], &both[1]);
            let sum = self.reduce(&product, &[0], "add");
            return Ok(self.reshape_grouped(&sum, out, &groups));
        }
        if dynamic && rb == 2 && ra >= 3 && lead.iter().filter(|d| **d == Dim::Dynamic).count() == 1 {
            // `[L.., K] x [K, N]` with one `?` among the leading dims (a linear over HF's `[1, S, K]`): IREE 3.13
            // folds the other leading dims of that `dot_general` into a `stablehlo.dynamic_reshape` it rejects. The
            // leading dims merged into one (`tensor.collapse_shape`), a 2-D product, then split back again.
            let groups = [(0..ra - 1).collect::<Vec<_>>(), vec![ra - 1]];
            let flat = self.reshape_grouped(a, &Shape(vec![Dim::Dynamic, ad[ra - 1]]), &groups);
            let prod = self.matmul(&flat, b, &Shape(vec![Dim::Dynamic, bd[1]]))?;
            return Ok(self.reshape_grouped(&prod, out, &groups));
        }
        let rhs = if rb == 2 && ra >= 1 {
            format!("stablehlo.dot_general {}, {}, contracting_dims = [{}] x [0]", a.name, b.name, ra - 1)
        } else if rb == ra + 1 && ra == 2 {
            return self.grouped_columns_product(a, b, out);
        } else if ra >= 3 && (rb == ra || rb == ra + 1) {
            // `[B.., M, K] x [B.., K, N]`, or `[B.., K, N, T]` (the right side's columns in two dims): `K` follows
            // the batch dims on the right either way.
            let batch = list(0..ra - 2);
            format!(
                "stablehlo.dot_general {}, {}, batching_dims = [{batch}] x [{batch}], contracting_dims = [{}] x [{}]",
                a.name,
                b.name,
                ra - 1,
                ra - 2
            )
        } else {
            return Err(self.err(format!(
                "matmul of ranks {ra} and {rb}: supported are [.., K] x [K, N], equal-rank batched [B.., M, K] x \
                 [B.., K, N] and [B.., M, K] x [B.., K, N, T]"
            )));
        };
        Ok(self.assign(&format!("{rhs} : ({}, {}) -> {}", a.ty(), b.ty(), ty(out, a.dtype)), out.clone(), a.dtype))
    }

    /// `a [M, K] x b [K, N, T]` (the right side's columns in two dimensions) as a `linalg.generic` over (row,
    /// column group, column, k): IREE 3.13 folds that `dot_general` into a `stablehlo.dynamic_reshape` of `b` it
    /// rejects when `N` is `?` (the offset term of a few-rows product over codes gated in groups, `keep_packed`).
    fn grouped_columns_product(&mut self, a: &Val, b: &Val, out: &Shape) -> Result<Val> {
        let dynamic: Vec<usize> = (0..out.rank()).filter(|&i| out.0[i] == Dim::Dynamic).collect();
        let like = match dynamic.as_slice() {
            [] | [0] => (a, 0),
            [i] => (b, *i),
            _ => {
                return Err(self.err(format!(
                    "[{}] x [{}] with more than one `?` in the result [{out}]: give all but one of them a size",
                    a.shape, b.shape
                )));
            }
        };
        let c = a.dtype.mlir_name();
        if !a.dtype.is_float() {
            return Err(self.err(format!("[{}] x [{}] of {c}: only float values are multiplied so", a.shape, b.shape)));
        }
        let init = self.zeros(out, a.dtype, like);
        let out_ty = ty(out, a.dtype);
        let (x, w, acc, p, sum) = (self.fresh(), self.fresh(), self.fresh(), self.fresh(), self.fresh());
        let rhs = format!(
            "linalg.generic {{indexing_maps = [affine_map<(m, n, t, k) -> (m, k)>, affine_map<(m, n, t, k) -> (k, n, t)>, \
             affine_map<(m, n, t, k) -> (m, n, t)>], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"reduction\"]}} \
             ins({}, {} : {}, {}) outs({} : {out_ty}) {{\n    ^bb0({x}: {c}, {w}: {c}, {acc}: {c}):\n      \
             {p} = arith.mulf {x}, {w} : {c}\n      {sum} = arith.addf {acc}, {p} : {c}\n      linalg.yield {sum} : {c}\n    }} -> {out_ty}",
            a.name,
            b.name,
            a.ty(),
            b.ty(),
            init.name,
        );
        Ok(self.assign(&rhs, out.clone(), a.dtype))
    }

    /// `a [L.., K] x W [K, N]` for a weight in row bands, `stored` being `[N / T, K, T]`: as the archive holds it
    /// ([`tapeout_graph::ConstantData::row_tile`]), or as a program computes it (`matmul` with `banded = true`: a
    /// kept weight dequantized for a prefill, where `K` may be `?` on both sides). The rows of `a` merged into one
    /// `M` (`?` in a prefill), one contraction `[M, K] x [N / T, K, T] -> [M, N / T, T]` over the bands (a 16-bit
    /// weight widened element by element inside it), and the result read as `[M, N]`. Written as a `linalg.generic`
    /// (iteration space band, row, column, k): StableHLO's `dot_general` has no form of it that IREE 3.13 keeps
    /// (without a batch dimension it transposes the weight into a copy; with the bands as a batch dimension it
    /// needs the rows broadcast to every band, a dispatch writing `bands x M x K` values). IREE compiles this one
    /// into a single dispatch that reads each band's `K x T` values as one contiguous run and never copies the
    /// weight (measured: docs/performance.md, "One contraction over the stored bands").
    pub(crate) fn banded_matmul(&mut self, a: &Val, stored: &Val, compute: DType, out: &Shape) -> Result<Val> {
        if stored.rank() == 4 {
            return self.banded_block_matmul(a, stored, compute, out);
        }
        let [Dim::Static(bands), k, Dim::Static(t)] = stored.shape.0[..] else {
            return Err(self.err(format!("a weight in row bands is [N / T, K, T], not [{}]", stored.shape)));
        };
        // `K` is `?` on both sides when the product is gated to no work (`keep_packed`'s dequantized bands).
        let ra = a.rank();
        if ra == 0 || a.shape.0[ra - 1] != k {
            return Err(self.err(format!("matmul of [{}] with a weight of {bands} bands [{}]", a.shape, stored.shape)));
        }
        let lead = &a.shape.0[..ra - 1];
        let m = if lead.contains(&Dim::Dynamic) {
            Dim::Dynamic
        } else {
            Dim::Static(lead.iter().map(|d| if let Dim::Static(n) = d { *n } else { 1 }).product())
        };
        let flat_shape = Shape(vec![m, k]);
        let flat = if a.shape == flat_shape { a.clone() } else { self.reshape(a, &flat_shape)? };
        let n = bands.checked_mul(t).ok_or_else(|| self.err(format!("{bands} bands of {t} columns overflow u64")))?;
        // 16-bit bands only: the kept weights' dequantized f32 bands measured no faster so (33-97 rows).
        let sixteen_bit = matches!(stored.dtype, DType::BF16 | DType::F16);
        let per_band = if m == Dim::Dynamic && sixteen_bit && compute.is_float() && flat.dtype.is_float() {
            let (rows, count) = self.rows_to_multiple(&flat, BAND_ROW_MULTIPLE);
            let padded = self.band_contraction(&rows, stored, compute)?;
            let shape = Shape(vec![Dim::Dynamic, Dim::Static(bands), Dim::Static(t)]);
            let rhs = format!(
                "tensor.extract_slice {}[0, 0, 0] [{count}, {bands}, {t}] [1, 1, 1] : {} to {}",
                padded.name,
                padded.ty(),
                ty(&shape, compute)
            );
            self.assign(&rhs, shape, compute)
        } else {
            self.band_contraction(&flat, stored, compute)?
        };
        let merged = self.reshape(&per_band, &Shape(vec![m, Dim::Static(n)]))?;
        if merged.shape == *out { Ok(merged) } else { self.reshape(&merged, out) }
    }

    /// The per-block product of a weight kept packed whose codes are stored in row bands (`[Np / T, Kb, B, T]`,
    /// [`tapeout_graph::ConstantData::row_tile`]): `a [Kb, M, B]` (the rows' values block by block) times the codes
    /// as `[Kb, B, Np]`, giving `[Kb, M, Np]`, one `linalg.generic` over the stored codes (iteration space block,
    /// row, band, column, k; each code converted to `compute` inside it). Each band's `Kb x B x T` codes are one
    /// contiguous run: the tuning spec gives one-row products a workgroup per band (`crate::cpu_tuning_spec`;
    /// faster than the block-row layout on some CPUs, slower on others: docs/performance.md, "Codes in row bands,
    /// built").
    fn banded_block_matmul(&mut self, a: &Val, stored: &Val, compute: DType, out: &Shape) -> Result<Val> {
        let [bands, Dim::Static(kb), Dim::Static(b), Dim::Static(t)] = stored.shape.0[..] else {
            return Err(self.err(format!("codes in row bands are [Np / T, Kb, B, T], not [{}]", stored.shape)));
        };
        let [Dim::Static(akb), m, Dim::Static(ab)] = a.shape.0[..] else {
            return Err(self.err(format!("a per-block product's rows are [Kb, M, B], not [{}]", a.shape)));
        };
        if (akb, ab) != (kb, b) {
            return Err(self.err(format!("rows [{}] times codes of [{kb}, {b}] per band", a.shape)));
        }
        // `?` bands: a few-rows form's codes, gated along the band axis (`Emitter::lower`).
        let n = match bands {
            Dim::Static(bands) => Dim::Static(
                bands.checked_mul(t).ok_or_else(|| self.err(format!("{bands} bands of {t} rows overflow u64")))?,
            ),
            Dim::Dynamic => Dim::Dynamic,
        };
        let (c, s) = (compute.mlir_name(), stored.dtype.mlir_name());
        let widen = match (compute.is_float(), stored.dtype) {
            (true, DType::I4 | DType::I8 | DType::I16 | DType::I32) => "arith.sitofp",
            _ => {
                return Err(self.err(format!(
                    "the per-block product of {c} rows with {s} codes stored in row bands: only signed integer codes \
                     and float rows are contracted there; export the codes in block rows (`--packed-codes \
                     block-rows`, the default)"
                )));
            }
        };
        let shape = Shape(vec![Dim::Static(kb), m, bands, Dim::Static(t)]);
        let out_ty = ty(&shape, compute);
        let mut extents = Vec::new();
        if m == Dim::Dynamic {
            extents.push(self.dim_index(a, 1));
        }
        if bands == Dim::Dynamic {
            extents.push(self.dim_index(stored, 0));
        }
        let init = self.zeros_of(&shape, compute, &extents);
        // Block arguments and body values are named from the emitter's counter (see `band_contraction`).
        let (x, w, acc, wide, p, sum) =
            (self.fresh(), self.fresh(), self.fresh(), self.fresh(), self.fresh(), self.fresh());
        let rhs = format!(
            "linalg.generic {{indexing_maps = [affine_map<(b, m, p, t, k) -> (b, m, k)>, affine_map<(b, m, p, t, k) -> (p, b, k, t)>, \
             affine_map<(b, m, p, t, k) -> (b, m, p, t)>], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\", \"reduction\"]}} \
             ins({}, {} : {}, {}) outs({} : {out_ty}) {{\n    ^bb0({x}: {c}, {w}: {s}, {acc}: {c}):\n      {wide} = {widen} {w} : {s} to {c}\n      \
             {p} = arith.mulf {x}, {wide} : {c}\n      {sum} = arith.addf {acc}, {p} : {c}\n      linalg.yield {sum} : {c}\n    }} -> {out_ty}",
            a.name,
            stored.name,
            a.ty(),
            stored.ty(),
            init.name,
        );
        let per_band = self.assign(&rhs, shape, compute);
        let merged = self.reshape(&per_band, &Shape(vec![Dim::Static(kb), m, n]))?;
        if merged.shape == *out { Ok(merged) } else { self.reshape(&merged, out) }
    }

    /// Codes stored in row bands (`[Np / T, Kb, B, T]`) read as the `[Kb, B, Np]` the program names them by: a
    /// transpose and a reshape, which IREE folds into the dispatch that reads them.
    pub(crate) fn band_view(&mut self, stored: &Val) -> Result<Val> {
        let [Dim::Static(bands), Dim::Static(kb), Dim::Static(b), Dim::Static(t)] = stored.shape.0[..] else {
            return Err(self.err(format!("codes in row bands are [Np / T, Kb, B, T], not [{}]", stored.shape)));
        };
        let rows = bands.checked_mul(t).ok_or_else(|| self.err(format!("{bands} bands of {t} rows overflow u64")))?;
        let moved = self.transpose(stored, &[1, 2, 0, 3]);
        self.reshape(&moved, &Shape::of(&[kb, b, rows]))
    }

    /// A `shape` tensor of `compute` zeros (`tensor.empty` then `linalg.fill`), the accumulator of a
    /// `linalg.generic` contraction; its one `?` extent, if any, is dimension `dim` of `like`.
    pub(crate) fn zeros(&mut self, shape: &Shape, compute: DType, (like, dim): (&Val, usize)) -> Val {
        let extents = if shape.is_dynamic() { vec![self.dim_index(like, dim)] } else { Vec::new() };
        self.zeros_of(shape, compute, &extents)
    }

    /// A `shape` tensor of `compute` zeros whose `?` extents are `extents` (`index` values, in order).
    fn zeros_of(&mut self, shape: &Shape, compute: DType, extents: &[String]) -> Val {
        let (c, out_ty) = (compute.mlir_name(), ty(shape, compute));
        let empty = self.assign(&format!("tensor.empty({}) : {out_ty}", list(extents)), shape.clone(), compute);
        let zero = self.fresh();
        let zero_text = if compute.is_float() { "0.000000e+00" } else { "0" };
        self.line(&format!("{zero} = arith.constant {zero_text} : {c}"));
        self.assign(
            &format!("linalg.fill ins({zero} : {c}) outs({} : {out_ty}) -> {out_ty}", empty.name),
            shape.clone(),
            compute,
        )
    }

    /// `flat [?, K]` with zero rows appended up to a multiple of `multiple` rows (a copy: IREE 3.13 writes
    /// `flat`'s producer into the first rows of the result, or copies them there), and `flat`'s row count as an
    /// `index` value. The zero rows are what a masked tile past `flat`'s last row reads ([`BAND_ROW_MULTIPLE`]).
    fn rows_to_multiple(&mut self, flat: &Val, multiple: u64) -> (Val, String) {
        let count = self.dim_index(flat, 0);
        let (less, mult) = (self.index_value(&(multiple - 1).to_string()), self.index_value(&multiple.to_string()));
        let (up, whole, rounded, extra) = (self.fresh(), self.fresh(), self.fresh(), self.fresh());
        self.line(&format!("{up} = arith.addi {count}, {less} : index"));
        self.line(&format!("{whole} = arith.divui {up}, {mult} : index"));
        self.line(&format!("{rounded} = arith.muli {whole}, {mult} : index"));
        self.line(&format!("{extra} = arith.subi {rounded}, {count} : index"));
        let shape = Shape(vec![Dim::Dynamic, flat.shape.0[1]]);
        let mut extents = vec![extra];
        if flat.shape.0[1] == Dim::Dynamic {
            extents.push(self.dim_index(flat, 1));
        }
        let zeros = self.zeros_of(&shape, flat.dtype, &extents);
        (self.concat_in_place(&[flat.clone(), zeros], 0, shape), count)
    }

    /// Why a banded product of `compute` rows and `stored` bands cannot be written, and what to do.
    fn band_types_err(&self, stored: &str, compute: &str) -> HloError {
        if stored == compute {
            return self.err(format!(
                "a {stored} weight stored in row bands cannot be multiplied ({stored} has no multiply-add): export \
                 with the weights laid out as held (`--layout as-held`)"
            ));
        }
        self.err(format!(
            "a {stored} weight stored in row bands multiplies {compute} rows, and the product reads the weight in the \
             rows' type: give the rows the weight's type or a wider float type, or export with the weights laid out \
             as held (`--layout as-held`)"
        ))
    }

    /// `[M, K]` rows (of `compute` values) times a `[B, K, T]` band set as stored: `[M, B, T]`, each sum over `k`
    /// in `compute` (the stored value widened to it first when narrower).
    fn band_contraction(&mut self, flat: &Val, stored: &Val, compute: DType) -> Result<Val> {
        let [Dim::Static(bands), _, Dim::Static(t)] = stored.shape.0[..] else {
            return Err(self.err(format!("a weight in row bands is [N / T, K, T], not [{}]", stored.shape)));
        };
        // `arith` takes signless integers only: unsigned rows and bands are contracted as the signless integers of
        // their bits (wrapping multiply-add gives the same bits) and the result read back as unsigned.
        if let Some(bits) = signless(compute).filter(|_| stored.dtype == compute) {
            let (rows, bands) = (self.bitcast(flat, bits), self.bitcast(stored, bits));
            let product = self.band_contraction(&rows, &bands, bits)?;
            return Ok(self.bitcast(&product, compute));
        }
        let (c, s) = (compute.mlir_name(), stored.dtype.mlir_name());
        // The body's ops: the stored value made a `compute` value, then multiply-add.
        let (widen, mul, add) = if compute.is_float() && stored.dtype.is_float() {
            let widen = match stored.dtype.byte_width().cmp(&compute.byte_width()) {
                std::cmp::Ordering::Less => Some("arith.extf"),
                std::cmp::Ordering::Equal if stored.dtype == compute => None,
                _ => return Err(self.band_types_err(s, c)),
            };
            (widen, "arith.mulf", "arith.addf")
        } else if stored.dtype == compute && matches!(compute, DType::I8 | DType::I16 | DType::I32 | DType::I64) {
            (None, "arith.muli", "arith.addi")
        } else {
            return Err(self.band_types_err(s, c));
        };
        let m = flat.shape.0[0];
        let shape = Shape(vec![m, Dim::Static(bands), Dim::Static(t)]);
        let out_ty = ty(&shape, compute);
        let init = self.zeros(&shape, compute, (flat, 0));
        // Block arguments and body values are named from the emitter's counter: a region of a `linalg.generic`
        // sees the names around it, so they must not repeat any.
        let (x, w, acc) = (self.fresh(), self.fresh(), self.fresh());
        let (wide, w_val) = match widen {
            Some(op) => {
                let v = self.fresh();
                (format!("      {v} = {op} {w} : {s} to {c}\n"), v)
            }
            None => (String::new(), w.clone()),
        };
        let (p, sum) = (self.fresh(), self.fresh());
        let rhs = format!(
            "linalg.generic {{indexing_maps = [affine_map<(b, m, t, k) -> (m, k)>, affine_map<(b, m, t, k) -> (b, k, t)>, \
             affine_map<(b, m, t, k) -> (m, b, t)>], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"reduction\"]}} \
             ins({}, {} : {}, {}) outs({} : {out_ty}) {{\n    ^bb0({x}: {c}, {w}: {s}, {acc}: {c}):\n{wide}      \
             {p} = {mul} {x}, {w_val} : {c}\n      {sum} = {add} {acc}, {p} : {c}\n      linalg.yield {sum} : {c}\n    }} -> {out_ty}",
            flat.name,
            stored.name,
            flat.ty(),
            stored.ty(),
            init.name,
        );
        Ok(self.assign(&rhs, shape, compute))
    }

    pub(crate) fn slice(&mut self, x: &Val, ranges: &[(u64, u64, u64)]) -> Val {
        let shape = Shape(ranges.iter().map(|&(s, l, st)| Dim::Static((l - s).div_ceil(st))).collect());
        let spec =
            list(ranges.iter().map(|&(s, l, st)| if st == 1 { format!("{s}:{l}") } else { format!("{s}:{l}:{st}") }));
        let rhs = format!("stablehlo.slice {} [{spec}] : ({}) -> {}", x.name, x.ty(), ty(&shape, x.dtype));
        self.assign(&rhs, shape, x.dtype)
    }

    /// The parts joined along `axis`: `stablehlo.concatenate` where the result's extent there is static; with a `?`
    /// extent there (HF's KV cache `cat(past, new)`), each part inserted at its offset
    /// ([`Emitter::concat_in_place`]).
    pub(crate) fn concat(&mut self, parts: &[Val], axis: usize) -> Result<Val> {
        let mut shape = parts[0].shape.clone();
        let mut total = Some(0u64);
        for p in parts {
            total = match (total, p.shape.0.get(axis)) {
                (Some(t), Some(Dim::Static(n))) => t.checked_add(*n),
                (_, Some(_)) => None,
                (_, None) => return Err(self.err(format!("operand [{}] has no axis {axis}", p.shape))),
            };
        }
        shape.0[axis] = total.map_or(Dim::Dynamic, Dim::Static);
        if total.is_none() {
            // `tensor` ops take signless integers only in IREE 3.13: unsigned parts are joined as their bits.
            if let Some(bits) = signless(parts[0].dtype) {
                let signless: Vec<Val> = parts.iter().map(|p| self.bitcast(p, bits)).collect();
                let joined = self.concat_in_place(&signless, axis, shape);
                return Ok(self.bitcast(&joined, parts[0].dtype));
            }
            return Ok(self.concat_in_place(parts, axis, shape));
        }
        let rhs = format!(
            "stablehlo.concatenate {}, dim = {axis} : ({}) -> {}",
            list(parts.iter().map(|p| p.name.clone())),
            list(parts.iter().map(Val::ty)),
            ty(&shape, parts[0].dtype)
        );
        Ok(self.assign(&rhs, shape, parts[0].dtype))
    }

    /// A concatenation whose extent along `axis` is `?` (`shape`, checked by [`Emitter::concat`]), written as
    /// each part inserted into an empty result at its offset (`tensor.insert_slice`). IREE 3.13 lowers a
    /// `stablehlo.concatenate` with a `?` extent into one dispatch that computes every element's source with
    /// divisions and a branch: for HF's KV cache `cat(past, new)` at 1024 positions that was 15 of the 24 ms of
    /// dispatch time of a 156M Llama's decode step (docs/performance.md, "A `?` concatenation as copies"). Each
    /// insertion of a whole part becomes a copy of its bytes.
    fn concat_in_place(&mut self, parts: &[Val], axis: usize, shape: Shape) -> Val {
        let rank = shape.rank();
        // Every part's extents as MLIR writes them in a slice: a number, or its `tensor.dim`.
        let mut extents: Vec<Vec<String>> = Vec::with_capacity(parts.len());
        for p in parts {
            let mut e = Vec::with_capacity(rank);
            for (i, d) in p.shape.0.iter().enumerate() {
                e.push(match d {
                    Dim::Static(n) => n.to_string(),
                    Dim::Dynamic => self.dim_index(p, i),
                });
            }
            extents.push(e);
        }
        // The result's `?` extents: the parts' sum along `axis`, the first part's elsewhere.
        let mut offsets = Vec::with_capacity(parts.len());
        let mut at = "0".to_owned();
        for e in &extents {
            offsets.push(at.clone());
            at = if at == "0" {
                e[axis].clone()
            } else {
                let (a, b) = (self.index_value(&at), self.index_value(&e[axis]));
                let sum = self.fresh();
                self.line(&format!("{sum} = arith.addi {a}, {b} : index"));
                sum
            };
        }
        let dynamic: Vec<String> = (0..rank)
            .filter(|&i| shape.0[i] == Dim::Dynamic)
            .map(|i| if i == axis { self.index_value(&at) } else { self.index_value(&extents[0][i]) })
            .collect();
        let out_ty = ty(&shape, parts[0].dtype);
        let mut acc =
            self.assign(&format!("tensor.empty({}) : {out_ty}", list(&dynamic)), shape.clone(), parts[0].dtype);
        let ones = list(std::iter::repeat_n("1", rank));
        for ((p, e), off) in parts.iter().zip(&extents).zip(&offsets) {
            let at = list((0..rank).map(|i| if i == axis { off.clone() } else { "0".to_owned() }));
            let rhs = format!(
                "tensor.insert_slice {} into {}[{at}] [{}] [{ones}] : {} into {out_ty}",
                p.name,
                acc.name,
                list(e),
                p.ty()
            );
            acc = self.assign(&rhs, shape.clone(), parts[0].dtype);
        }
        acc
    }

    /// Dimension `i` of `x` as an `index` value (`tensor.dim`).
    pub(crate) fn dim_index(&mut self, x: &Val, i: usize) -> String {
        let x = &self.measurable(x, i);
        let idx = self.fresh();
        self.line(&format!("{idx} = arith.constant {i} : index"));
        let d = self.fresh();
        self.line(&format!("{d} = tensor.dim {}, {idx} : {}", x.name, x.ty()));
        d
    }

    /// An extent written as a number or an SSA name, as an `index` value.
    fn index_value(&mut self, extent: &str) -> String {
        if extent.starts_with('%') {
            return extent.to_owned();
        }
        let c = self.fresh();
        self.line(&format!("{c} = arith.constant {extent} : index"));
        c
    }

    /// [`Emitter::concat`] of any number of parts, at most [`CONCAT_FAN_IN`] at a time: IREE 3.13 may write a
    /// concatenation as one dispatch with a binding per part, and refuses one of more than 32 bindings at run time.
    /// Parts with a `?` extent along `axis` are inserted one by one, with no limit, into one result.
    pub(crate) fn concat_tree(&mut self, mut parts: Vec<Val>, axis: usize) -> Result<Val> {
        if parts.iter().any(|p| p.shape.0.get(axis) == Some(&Dim::Dynamic)) {
            return self.concat(&parts, axis);
        }
        while parts.len() > CONCAT_FAN_IN {
            let mut next = Vec::with_capacity(parts.len().div_ceil(CONCAT_FAN_IN));
            for chunk in parts.chunks(CONCAT_FAN_IN) {
                next.push(if chunk.len() == 1 { chunk[0].clone() } else { self.concat(chunk, axis)? });
            }
            parts = next;
        }
        self.concat(&parts, axis)
    }

    /// `select(pred, x, fill)` where `pred` is `[S, T]` i1 broadcast over `x`'s leading dims.
    pub(crate) fn causal(&mut self, x: &Val) -> Result<Val> {
        let r = x.rank(); // at least 2: the type rule checked it
        let st = Shape(vec![x.shape.0[r - 2], x.shape.0[r - 1]]);
        let (row, col, offset) = if let Some(&[s, t]) = st.static_dims().as_deref() {
            let row = self.assign(&format!("stablehlo.iota dim = 0 : {}", ty(&st, DType::I64)), st.clone(), DType::I64);
            let col = self.assign(&format!("stablehlo.iota dim = 1 : {}", ty(&st, DType::I64)), st.clone(), DType::I64);
            // T - S, negative when there are more queries than keys (bottom-right aligned, as the `?` path).
            #[allow(clippy::cast_precision_loss)] // sequence lengths are far below 2^53
            let offset = self.splat(t as f64 - s as f64, &st, DType::I64);
            (row, col, offset)
        } else {
            // Query and key lengths known at run time: iotas of the run-time [S, T], offset T - S.
            let s = self.dim_size(x, r - 2)?;
            let t = self.dim_size(x, r - 1)?;
            let shape = self.shape_of_parts(&[s.clone(), t.clone()]);
            let iota = |e: &mut Self, dim: usize| {
                e.assign(
                    &format!(
                        "stablehlo.dynamic_iota {}, dim = {dim} : ({}) -> {}",
                        shape.name,
                        shape.ty(),
                        ty(&st, DType::I64)
                    ),
                    st.clone(),
                    DType::I64,
                )
            };
            let row = iota(self, 0);
            let col = iota(self, 1);
            let diff = self.binary_same("subtract", &t, &s);
            let diff = self.assign(
                &format!("stablehlo.convert {} : (tensor<i32>) -> tensor<i64>", diff.name),
                Shape::scalar(),
                DType::I64,
            );
            let offset = self.broadcast_to(&diff, &[], &st, Some(&row))?;
            (row, col, offset)
        };
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
        let keep = self.broadcast_to(&keep, &[r - 2, r - 1], &x.shape, Some(x))?;
        let fill = self.fill_like(f64::NEG_INFINITY, x, x.dtype)?;
        Ok(self.assign(
            &format!("stablehlo.select {}, {}, {} : {}, {}", keep.name, x.name, fill.name, keep.ty(), x.ty()),
            x.shape.clone(),
            x.dtype,
        ))
    }

    /// `x[..., lo:hi]` along its last (static) dimension, the other dimensions whole, static or `?`.
    pub(crate) fn slice_last(&mut self, x: &Val, lo: u64, hi: u64) -> Result<Val> {
        let last = x.rank() - 1;
        let ranges: Vec<Option<(u64, u64, u64)>> = (0..x.rank()).map(|i| (i == last).then_some((lo, hi, 1))).collect();
        self.slice_whole_or(x, &ranges)
    }

    /// A slice where `None` takes a dimension whole (static or `?`) and `Some((start, limit, stride))` a range of
    /// a static one: `stablehlo.slice` for static shapes, `stablehlo.real_dynamic_slice` otherwise.
    pub(crate) fn slice_whole_or(&mut self, x: &Val, ranges: &[Option<(u64, u64, u64)>]) -> Result<Val> {
        let full: Vec<(u64, Option<u64>, u64)> = ranges
            .iter()
            .enumerate()
            .map(|(i, r)| match (*r, x.shape.0[i]) {
                (Some((lo, hi, st)), _) => (lo, Some(hi), st),
                (None, Dim::Static(n)) => (0, Some(n), 1),
                (None, Dim::Dynamic) => (0, None, 1),
            })
            .collect();
        self.slice_ranges(x, &full)
    }

    /// A strided slice, each dimension `(start, limit, stride)` where a `None` limit is the run-time end of a `?`
    /// dimension (its result dimension is `?`): `stablehlo.slice` when everything is static, else
    /// `stablehlo.real_dynamic_slice` with the limits read by `get_dimension_size` (IREE 3.13 lowers it).
    pub(crate) fn slice_ranges(&mut self, x: &Val, ranges: &[(u64, Option<u64>, u64)]) -> Result<Val> {
        if !x.shape.is_dynamic() {
            let mut full = Vec::with_capacity(ranges.len());
            for &(lo, hi, st) in ranges {
                let hi = hi.ok_or_else(|| self.err("a slice of a static dimension needs its limit"))?;
                full.push((lo, hi, st));
            }
            return Ok(self.slice(x, &full));
        }
        let mut shape = x.shape.clone();
        let as_i32 = |e: &Self, v: u64| i32::try_from(v).map_err(|_| e.err(format!("slice bound {v} is above i32")));
        let (mut starts, mut limits, mut strides) = (Vec::new(), Vec::new(), Vec::new());
        for (i, &(lo, hi, st)) in ranges.iter().enumerate() {
            let (lo32, st32) = (as_i32(self, lo)?, as_i32(self, st)?);
            starts.push(self.splat(f64::from(lo32), &Shape::scalar(), DType::I32));
            limits.push(match hi {
                Some(hi) => {
                    shape.0[i] = Dim::Static(hi.saturating_sub(lo).div_ceil(st.max(1)));
                    let hi = as_i32(self, hi)?;
                    self.splat(f64::from(hi), &Shape::scalar(), DType::I32)
                }
                None => {
                    shape.0[i] = Dim::Dynamic;
                    self.dim_size(x, i)?
                }
            });
            strides.push(self.splat(f64::from(st32), &Shape::scalar(), DType::I32));
        }
        let (start, limit, stride) =
            (self.shape_of_parts(&starts), self.shape_of_parts(&limits), self.shape_of_parts(&strides));
        let rhs = format!(
            "stablehlo.real_dynamic_slice {}, {}, {}, {} : ({}, {}, {}, {}) -> {}",
            x.name,
            start.name,
            limit.name,
            stride.name,
            x.ty(),
            start.ty(),
            limit.ty(),
            stride.ty(),
            ty(&shape, x.dtype)
        );
        Ok(self.assign(&rhs, shape, x.dtype))
    }

    /// The index of the largest element of `x` along `axis` (the first on ties; NaN counts as largest), as
    /// `dtype`: one `stablehlo.reduce` over (value, index) pairs. The type rule checked that `x` is a float tensor
    /// and `dtype` an i32 or i64.
    pub(crate) fn argmax(&mut self, x: &Val, axis: usize, dtype: DType) -> Result<Val> {
        let idx_ty = ty(&x.shape, dtype);
        let iota = if x.shape.is_dynamic() {
            let st = self.shape_tensor(x)?;
            self.assign(
                &format!("stablehlo.dynamic_iota {}, dim = {axis} : ({}) -> {idx_ty}", st.name, st.ty()),
                x.shape.clone(),
                dtype,
            )
        } else {
            self.assign(&format!("stablehlo.iota dim = {axis} : {idx_ty}"), x.shape.clone(), dtype)
        };
        let init_v = self.splat(f64::NEG_INFINITY, &Shape::scalar(), x.dtype);
        let init_i = self.splat(0.0, &Shape::scalar(), dtype);
        let kept = Shape(x.shape.0.iter().enumerate().filter(|&(i, _)| i != axis).map(|(_, d)| *d).collect());
        let (sv, si) = (ty(&Shape::scalar(), x.dtype), ty(&Shape::scalar(), dtype));
        let kind = "FLOAT";
        let r = self.fresh();
        let (a, b, c, d) = (self.fresh(), self.fresh(), self.fresh(), self.fresh());
        let (gt, eq, lt, nan, tie, pick, v, i) = (
            self.fresh(),
            self.fresh(),
            self.fresh(),
            self.fresh(),
            self.fresh(),
            self.fresh(),
            self.fresh(),
            self.fresh(),
        );
        let kept_v = ty(&kept, x.dtype);
        let kept_i = ty(&kept, dtype);
        self.line(&format!(
            "{r}:2 = stablehlo.reduce({} init: {}), ({} init: {}) across dimensions = [{axis}] : ({}, {idx_ty}, {sv}, {si}) -> ({kept_v}, {kept_i})",
            x.name,
            init_v.name,
            iota.name,
            init_i.name,
            x.ty()
        ));
        self.line(&format!("  reducer({a}: {sv}, {c}: {sv}) ({b}: {si}, {d}: {si}) {{"));
        self.line(&format!("  {gt} = stablehlo.compare GT, {a}, {c}, {kind} : ({sv}, {sv}) -> tensor<i1>"));
        self.line(&format!("  {eq} = stablehlo.compare EQ, {a}, {c}, {kind} : ({sv}, {sv}) -> tensor<i1>"));
        self.line(&format!("  {lt} = stablehlo.compare LT, {b}, {d}, SIGNED : ({si}, {si}) -> tensor<i1>"));
        // NaN is the largest value, as in NumPy: a != a.
        self.line(&format!("  {nan} = stablehlo.compare NE, {a}, {a}, {kind} : ({sv}, {sv}) -> tensor<i1>"));
        self.line(&format!("  {tie} = stablehlo.and {eq}, {lt} : tensor<i1>"));
        let p1 = self.fresh();
        self.line(&format!("  {p1} = stablehlo.or {gt}, {tie} : tensor<i1>"));
        self.line(&format!("  {pick} = stablehlo.or {p1}, {nan} : tensor<i1>"));
        self.line(&format!("  {v} = stablehlo.select {pick}, {a}, {c} : tensor<i1>, {sv}"));
        self.line(&format!("  {i} = stablehlo.select {pick}, {b}, {d} : tensor<i1>, {si}"));
        self.line(&format!("  stablehlo.return {v}, {i} : {sv}, {si}"));
        self.line("}");
        Ok(Val { name: format!("{r}#1"), shape: kept, dtype })
    }

    pub(crate) fn val(&self, id: TensorId) -> Result<Val> {
        self.vals
            .get(&id)
            .cloned()
            .ok_or_else(|| self.err(format!("operand '{}' has no value yet", self.g.spec(id).label())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_dim_absorbs_the_statics_after_it_only_when_collapsing() {
        let (d, s) = (Dim::Dynamic, Dim::Static);
        // `[?, 32, 4]` into `[?, 4]`: the `?` takes the 32.
        assert_eq!(group_dims(&[d, s(4)], &[d, s(32), s(4)], true), Some(vec![vec![0, 1], vec![2]]));
        // `[?, 4]` into `[?, 32, 4]` would split the `?` by 32 unchecked: refused, as before.
        assert_eq!(group_dims(&[d, s(4)], &[d, s(32), s(4)], false), None);
        assert_eq!(group_dims(&[d], &[d, s(32)], false), None);
        // Reshapes that matched before group as before, either way.
        for collapsing in [true, false] {
            assert_eq!(group_dims(&[d, s(6)], &[d, s(2), s(3)], collapsing), Some(vec![vec![0], vec![1, 2]]));
            assert_eq!(group_dims(&[d, s(5)], &[d, s(1), s(5)], collapsing), Some(vec![vec![0], vec![1, 2]]));
            assert_eq!(group_dims(&[d], &[d, s(1)], collapsing), Some(vec![vec![0, 1]]));
        }
    }

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
}
