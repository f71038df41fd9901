//! One node at a time: the dispatch over [`OpKind`] to one lowering per op family, and the lowering of the
//! simple ops.
//!
//! `finalize` has checked every node against the op table (`OpKind::signature` and the type rules in
//! `tapeout_graph::ops`): the arity, the attributes and the declared result spec. A lowering therefore reads
//! its operands by position without counting them again, and refuses only what it cannot lower (`?`
//! dimensions where IREE 3.13 needs static ones, for example).

use tapeout_graph::{Attr, DType, Dim, Op as Node, OpKind, Shape};

use super::builder::{Emitter, Val, list, ty};
use crate::error::Result;

/// The declared result of the node being lowered (every op has one: `Arity::Exactly(1)` outputs).
struct Out<'s> {
    shape: &'s Shape,
    dtype: DType,
}

/// Whether a node's result is still a "bit extend" for IREE 3.13 (see [`Emitter::unfused`]): a convert to a wider
/// element type, or an op lowered to arithmetic and reshaping only whose operands include one.
fn widens(op: OpKind, ins: &[Val], to: DType, from_widened: bool) -> bool {
    let bits = |d: DType| if d == DType::Bool { 1 } else { d.byte_width() * 8 };
    match op {
        OpKind::Convert => ins.first().is_some_and(|x| bits(x.dtype) < bits(to)),
        OpKind::Add
        | OpKind::Sub
        | OpKind::Mul
        | OpKind::Div
        | OpKind::Neg
        | OpKind::Max
        | OpKind::Min
        | OpKind::Relu
        | OpKind::Select
        | OpKind::Clamp
        | OpKind::Broadcast
        | OpKind::Reshape
        | OpKind::Transpose
        | OpKind::Slice
        | OpKind::Concat => from_widened,
        _ => false,
    }
}

impl<'g> Emitter<'g, '_, '_> {
    pub(crate) fn lower(&mut self, node: &'g Node) -> Result<()> {
        self.node = Some(node);
        let [id] = node.outputs.as_slice() else {
            return Err(self.err(format!("produces one result, the node declares {}", node.outputs.len())));
        };
        let spec = self.g.spec(*id);
        let out = Out { shape: &spec.shape, dtype: spec.dtype };
        let ins: Vec<Val> = node.inputs.iter().map(|&i| self.val(i)).collect::<Result<_>>()?;
        if widens(node.op, &ins, out.dtype, node.inputs.iter().any(|i| self.widened.contains(i))) {
            self.widened.insert(*id);
        }
        let result = {
            match node.op {
                OpKind::Add
                | OpKind::Sub
                | OpKind::Mul
                | OpKind::Div
                | OpKind::Pow
                | OpKind::Max
                | OpKind::Min
                | OpKind::And
                | OpKind::Or => self.elementwise_binary(node.op, &ins, &out)?,
                OpKind::Neg
                | OpKind::Abs
                | OpKind::Exp
                | OpKind::Log
                | OpKind::Sqrt
                | OpKind::Rsqrt
                | OpKind::Tanh
                | OpKind::Sin
                | OpKind::Cos
                | OpKind::Sigmoid
                | OpKind::Not => self.elementwise_unary(node.op, &ins[0]),
                OpKind::Relu | OpKind::Silu | OpKind::Gelu => self.activation(node.op, &ins[0])?,
                OpKind::Convert => self.convert_to(&ins[0], out.dtype)?,
                // Codes in row bands pass the barrier as stored and are read as `[Kb, B, Np]` after it: IREE then
                // folds the view into the dispatch after the barrier instead of copying the codes before it.
                // After itself: a value behind a barrier with nothing to wait for (a view of codes in row bands that
                // IREE 3.13 would otherwise compute once at load, as a second copy of the codes).
                OpKind::After if node.inputs[0] == node.inputs[1] => self.opaque(&ins[0]),
                OpKind::After => self.after(&ins[0], &ins[1]),
                OpKind::Broadcast => self.lower_broadcast(&ins[0], ins.get(1), &out)?,
                OpKind::Reshape => self.reshape(&ins[0], out.shape)?,
                OpKind::Transpose => self.lower_transpose(&ins[0])?,
                OpKind::Concat => {
                    let axis = self.axis("axis", self.attr_int("axis", 0)?, ins[0].rank())?;
                    // A `?` extent along the axis is written as insertions ([`Emitter::concat_in_place`]), which
                    // IREE does not clone a widening into; a `stablehlo.concatenate` with `?` extents elsewhere
                    // needs its widened parts made dispatches of their own ([`Emitter::unfused`]).
                    let inserted = out.shape.0.get(axis) == Some(&Dim::Dynamic);
                    let mut parts = Vec::with_capacity(ins.len());
                    for (v, id) in ins.iter().zip(&node.inputs) {
                        let cloned_by_iree =
                            !inserted && out.shape.is_dynamic() && v.shape.is_dynamic() && self.widened.contains(id);
                        parts.push(if cloned_by_iree { self.unfused(v)? } else { v.clone() });
                    }
                    self.concat_tree(parts, axis)?
                }
                OpKind::Slice => self.lower_slice(&ins[0])?,
                OpKind::PadRows => self.pad_rows(&ins[0], out.shape)?,
                OpKind::RoundAs => {
                    let to = tapeout_graph::ops::round_as_dtype(&node.attrs).map_err(|e| self.attr_err("dtype", e))?;
                    self.round_as(&ins[0], to)?
                }
                OpKind::DecodeWords => {
                    let (from, bits, _) =
                        tapeout_graph::ops::decode_words_from(&node.attrs).map_err(|e| self.attr_err("from", e))?;
                    self.decode_words(&ins[0], from, bits)?
                }
                OpKind::GateRows => self.gate_rows(&ins[0], &ins[1], out.shape)?,
                OpKind::PlaceRows => self.place_rows(&ins[0], &ins[1], out.shape)?,
                OpKind::Gather => self.gather(&ins[0], &ins[1], &out)?,
                // `[.., K] x [N / T, K, T]`: a weight computed in the program in row bands (a kept weight
                // dequantized for a prefill's rows, `keep_packed`), contracted as stored bands are.
                OpKind::Matmul if self.attr_bool("banded", false)? => {
                    self.banded_matmul(&ins[0], &ins[1], ins[0].dtype, out.shape)?
                }
                OpKind::Matmul => self.matmul(&ins[0], &ins[1], out.shape)?,
                OpKind::Conv2d => self.conv2d(&ins, out.shape)?,
                OpKind::MaxPool2d | OpKind::AvgPool2d => self.pool(&ins[0], out.shape, node.op == OpKind::MaxPool2d)?,
                OpKind::ReduceSum | OpKind::ReduceMean | OpKind::ReduceMax => self.reduction(node.op, &ins[0], &out)?,
                OpKind::Softmax => {
                    let axis = self.axis("axis", self.attr_int("axis", -1)?, ins[0].rank())?;
                    self.softmax(&ins[0], axis)?
                }
                OpKind::LayerNorm | OpKind::RmsNorm => {
                    let rms = node.op == OpKind::RmsNorm;
                    let eps = self.attr_f64("eps", if rms { 1e-6 } else { 1e-5 })?;
                    self.norm(&ins, rms, eps)?
                }
                OpKind::CausalMask => self.causal(&ins[0])?,
                OpKind::Sdpa => self.sdpa(&ins, out.shape)?,
                OpKind::Rope => self.rope(&ins)?,
                OpKind::DynamicSlice => self.dynamic_slice(&ins[0], &ins[1..], &out)?,
                OpKind::DynamicUpdateSlice => self.dynamic_update_slice(&ins[0], &ins[1], &ins[2..])?,
                OpKind::Argmax => {
                    let axis = self.axis("axis", self.attr_int("axis", -1)?, ins[0].rank())?;
                    self.argmax(&ins[0], axis, out.dtype)?
                }
                OpKind::Iota => self.lower_iota(ins.first(), &out)?,
                OpKind::Select => self.select(&ins, &out)?,
                OpKind::Compare => self.compare(&ins, &out)?,
                OpKind::Clamp => self.clamp(&ins, &out)?,
            }
        };
        if result.dtype != spec.dtype || !tapeout_graph::ops::shapes_agree(&result.shape, &spec.shape) {
            return Err(self.err(format!(
                "computes {} but the node declares {} for '{}'",
                result.ty(),
                spec.mlir_type(),
                spec.label()
            )));
        }
        // The declared type may be more (or less) specific than the computed one (`?` against a static size):
        // every later use reads the declared type, so cast to it.
        let name = if result.shape == spec.shape { result.name } else { self.tensor_cast(&result, &spec.shape).name };
        self.vals.insert(*id, Val { name, shape: spec.shape.clone(), dtype: spec.dtype });
        Ok(())
    }

    /// add, subtract, …: NumPy broadcast of both operands to the result's shape.
    fn elementwise_binary(&mut self, op: OpKind, ins: &[Val], out: &Out<'_>) -> Result<Val> {
        let name = match op {
            OpKind::Add => "add",
            OpKind::Sub => "subtract",
            OpKind::Mul => "multiply",
            OpKind::Div => "divide",
            OpKind::Pow => "power",
            OpKind::Max => "maximum",
            OpKind::And => "and",
            OpKind::Or => "or",
            _ => "minimum",
        };
        let both = self.broadcast_operands(ins, out.shape)?;
        let (a, b) = (&both[0], &both[1]);
        if op == OpKind::Pow && a.dtype.is_float() {
            return self.float_pow(a, b);
        }
        Ok(self.binary_same(name, a, b))
    }

    /// `a ** b` as NumPy computes it. IREE 3.13 lowers `stablehlo.power` as `exp(b · log a)`, which gives NaN
    /// for `0 ** 0` and for a negative base with an integral exponent (`(-2) ** 3`): here the power of `|a|`,
    /// negated for a negative base and an odd integral exponent, NaN for a negative base and a fractional one,
    /// and 1 wherever `b` is 0.
    fn float_pow(&mut self, a: &Val, b: &Val) -> Result<Val> {
        let dtype = a.dtype;
        let magnitude = self.unary("abs", a);
        let r = self.binary_same("power", &magnitude, b);
        let zero = self.fill_like(0.0, a, dtype)?;
        let one = self.fill_like(1.0, a, dtype)?;
        let nan = self.fill_like(f64::NAN, a, dtype)?;
        // Integral and odd without `floor` (IREE 3.13 calls libm's truncf for it, which its embedded ELF lacks):
        // through i32, valid below 2^24 in magnitude; every f32 from there on is an even integer.
        let big_limit = self.fill_like(16_777_216.0, a, dtype)?;
        let b_mag = self.unary("abs", b);
        let big = self.compare_same("GE", &b_mag, &big_limit);
        let as_int = self.convert_to(b, DType::I32)?;
        let back = self.convert_to(&as_int, dtype)?;
        let exact = self.compare_same("EQ", &back, b);
        let integral = self.binary_same("or", &exact, &big);
        let one_i = self.fill_like(1.0, &as_int, DType::I32)?;
        let low_bit = self.binary_same("and", &as_int, &one_i);
        let zero_i = self.fill_like(0.0, &as_int, DType::I32)?;
        let odd_bit = self.compare_same("NE", &low_bit, &zero_i);
        let small = self.unary("not", &big);
        let odd = self.binary_same("and", &odd_bit, &small);
        let negated = self.unary("negate", &r);
        let signed = self.select_same(&odd, &negated, &r);
        let of_negative = self.select_same(&integral, &signed, &nan);
        let negative = self.compare_same("LT", a, &zero);
        let res = self.select_same(&negative, &of_negative, &r);
        let zero_exponent = self.compare_same("EQ", b, &zero);
        Ok(self.select_same(&zero_exponent, &one, &res))
    }

    /// One StableHLO unary op.
    fn elementwise_unary(&mut self, op: OpKind, x: &Val) -> Val {
        let name = match op {
            OpKind::Neg => "negate",
            OpKind::Exp => "exponential",
            OpKind::Sin => "sine",
            OpKind::Cos => "cosine",
            OpKind::Sigmoid => "logistic",
            other => other.name(),
        };
        self.unary(name, x)
    }

    /// relu, silu and gelu (tanh approximation), composed of elementwise ops.
    fn activation(&mut self, op: OpKind, x: &Val) -> Result<Val> {
        Ok(match op {
            OpKind::Relu => {
                let zero = self.fill_like(0.0, x, x.dtype)?;
                self.binary_same("maximum", x, &zero)
            }
            OpKind::Silu => {
                let s = self.unary("logistic", x);
                self.binary_same("multiply", x, &s)
            }
            _ => {
                // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
                let x2 = self.binary_same("multiply", x, x);
                let x3 = self.binary_same("multiply", &x2, x);
                let k = self.fill_like(0.044715, x, x.dtype)?;
                let kx3 = self.binary_same("multiply", &k, &x3);
                let inner = self.binary_same("add", x, &kx3);
                let c = self.fill_like(0.797_884_560_802_865_4, x, x.dtype)?;
                let arg = self.binary_same("multiply", &c, &inner);
                let t = self.unary("tanh", &arg);
                let one = self.fill_like(1.0, x, x.dtype)?;
                let onept = self.binary_same("add", &one, &t);
                let half = self.fill_like(0.5, x, x.dtype)?;
                let hx = self.binary_same("multiply", &half, x);
                self.binary_same("multiply", &hx, &onept)
            }
        })
    }

    /// A broadcast to the declared shape, or with a reference operand `like` to `like`'s run-time shape (every
    /// extent read with `get_dimension_size`, which IREE folds where it is static).
    fn lower_broadcast(&mut self, x: &Val, like: Option<&Val>, out: &Out<'_>) -> Result<Val> {
        let rank = out.shape.rank();
        let dims = match self.attr_ints("dims")? {
            Some(d) => d.iter().map(|&a| self.axis("dims", a, rank)).collect::<Result<Vec<_>>>()?,
            None => (rank.saturating_sub(x.rank())..rank).collect(),
        };
        if let Some(like) = like {
            let st = self.runtime_shape(like);
            return Ok(self.dynamic_broadcast(x, &dims, out.shape, &st));
        }
        // A `?` result without a reference is refused by the type rule (`tapeout_graph::ops`).
        self.broadcast_to(x, &dims, out.shape, None)
    }

    /// `stablehlo.iota` of a static shape, or with a reference operand the 1-D `dynamic_iota` of the run-time
    /// size of its dimension `axis`.
    fn lower_iota(&mut self, like: Option<&Val>, out: &Out<'_>) -> Result<Val> {
        let Some(like) = like else {
            let dim = self.axis("dim", self.attr_int("dim", 0)?, out.shape.rank())?;
            if out.shape.is_dynamic() {
                // The type rule refuses it; never write `stablehlo.iota : tensor<?x..>`, which IREE rejects.
                return Err(
                    self.err(format!("an iota of shape [{}] needs a reference tensor for its length", out.shape))
                );
            }
            let rhs = format!("stablehlo.iota dim = {dim} : {}", ty(out.shape, out.dtype));
            return Ok(self.assign(&rhs, out.shape.clone(), out.dtype));
        };
        let axis = self.axis("axis", self.attr_int("axis", 0)?, like.rank())?;
        let n = self.runtime_dim(like, axis);
        let st = self.shape_of_parts(&[n]);
        let rhs =
            format!("stablehlo.dynamic_iota {}, dim = 0 : ({}) -> {}", st.name, st.ty(), ty(out.shape, out.dtype));
        Ok(self.assign(&rhs, out.shape.clone(), out.dtype))
    }

    fn lower_transpose(&mut self, x: &Val) -> Result<Val> {
        let r = x.rank();
        let perm = match self.attr_ints("perm")? {
            Some(p) => p.iter().map(|&a| self.axis("perm", a, r)).collect::<Result<Vec<_>>>()?,
            None => (0..r).rev().collect(),
        };
        Ok(self.transpose(x, &perm))
    }

    /// A strided slice; a `?` dimension is sliced to the end from a static start and stride (the type rule
    /// refuses anything else), written as `stablehlo.real_dynamic_slice`.
    fn lower_slice(&mut self, x: &Val) -> Result<Val> {
        let ranges = self.slice_attr_ranges(x)?;
        self.slice_ranges(x, &ranges)
    }

    /// The node's slice of `x` as `(start, limit, stride)` per dimension (limit `None` for a `?` one, a limit of -1
    /// read as the whole extent).
    fn slice_attr_ranges(&self, x: &Val) -> Result<Vec<(u64, Option<u64>, u64)>> {
        let rank = x.rank();
        let start = self.attr_ints("start")?.ok_or_else(|| self.attr_err("start", "is required"))?;
        let limit = self.attr_ints("limit")?.ok_or_else(|| self.attr_err("limit", "is required"))?;
        let stride = self.attr_ints("stride")?.unwrap_or_else(|| vec![1; rank]);
        let mut ranges = Vec::with_capacity(rank);
        for i in 0..rank {
            let bound = |v: i64| {
                u64::try_from(v).map_err(|_| {
                    self.attr_err("start", format!("dimension {i}: [{}:{}:{}]", start[i], limit[i], stride[i]))
                })
            };
            let (b, k) = (bound(start[i])?, bound(stride[i])?);
            ranges.push(match x.shape.0[i] {
                Dim::Dynamic => (b, None, k),
                Dim::Static(d) => (b, Some(if limit[i] == -1 { d } else { bound(limit[i])? }), k),
            });
        }
        Ok(ranges)
    }

    /// `np.take(table, idx, axis)`: `stablehlo.gather` for a static table; with `?` dimensions in the table
    /// `stablehlo.torch_index_select` (the same take, which IREE 3.13 lowers with dynamic shapes, where it rejects
    /// `stablehlo.dynamic_gather`).
    fn gather(&mut self, table: &Val, idx: &Val, out: &Out<'_>) -> Result<Val> {
        let axis = self.axis("axis", self.attr_int("axis", 0)?, table.rank())?;
        let ri = idx.rank();
        let Some(tdims) = table.shape.static_dims() else {
            let shape = Shape(
                table.shape.0[..axis].iter().chain(&idx.shape.0).chain(&table.shape.0[axis + 1..]).copied().collect(),
            );
            let rhs = format!(
                "\"stablehlo.torch_index_select\"({}, {}) {{dim = {axis} : i64, batch_dims = 0 : i64}} : ({}, {}) -> {}",
                table.name,
                idx.name,
                table.ty(),
                idx.ty(),
                ty(&shape, table.dtype)
            );
            return Ok(self.assign(&rhs, shape, table.dtype));
        };
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
            ty(out.shape, table.dtype)
        );
        Ok(self.assign(&rhs, out.shape.clone(), table.dtype))
    }

    /// reduce_sum, reduce_mean and reduce_max over `axes` (all by default), `keepdims` optional.
    fn reduction(&mut self, op: OpKind, x: &Val, out: &Out<'_>) -> Result<Val> {
        let axes = match self.attr_ints("axes")? {
            Some(a) => a.iter().map(|&v| self.axis("axes", v, x.rank())).collect::<Result<Vec<_>>>()?,
            None => (0..x.rank()).collect(),
        };
        let r = match op {
            OpKind::ReduceSum if axes == [0] => self.sum_leading(x),
            OpKind::ReduceSum => self.reduce(x, &axes, "add"),
            OpKind::ReduceMax => self.reduce(x, &axes, "maximum"),
            _ => self.mean(x, &axes)?,
        };
        if self.attr_bool("keepdims", false)? { self.keep_dims(&r, x, &axes, out.shape) } else { Ok(r) }
    }

    /// The window's shape is the declared result's (the type rule checked it against `sizes`).
    fn dynamic_slice(&mut self, x: &Val, offsets: &[Val], out: &Out<'_>) -> Result<Val> {
        let sizes = self.attr_ints("sizes")?.ok_or_else(|| self.attr_err("sizes", "is required"))?;
        let rhs = format!(
            "stablehlo.dynamic_slice {}, {}, sizes = [{}] : ({}, {}) -> {}",
            x.name,
            list(offsets.iter().map(|o| o.name.clone())),
            list(&sizes),
            x.ty(),
            list(offsets.iter().map(Val::ty)),
            ty(out.shape, x.dtype)
        );
        Ok(self.assign(&rhs, out.shape.clone(), x.dtype))
    }

    fn dynamic_update_slice(&mut self, x: &Val, u: &Val, offsets: &[Val]) -> Result<Val> {
        if x.shape.is_dynamic() || u.shape.is_dynamic() {
            return Err(self.err(format!(
                "needs static shapes (the tensor is [{}], the update [{}]): IREE 3.13 does not lower it on `?` \
                 dimensions; give the updated tensor (a cache) a static maximum size",
                x.shape, u.shape
            )));
        }
        let rhs = format!(
            "stablehlo.dynamic_update_slice {}, {}, {} : ({}, {}, {}) -> {}",
            x.name,
            u.name,
            list(offsets.iter().map(|o| o.name.clone())),
            x.ty(),
            u.ty(),
            list(offsets.iter().map(Val::ty)),
            x.ty()
        );
        Ok(self.assign(&rhs, x.shape.clone(), x.dtype))
    }

    fn select(&mut self, ins: &[Val], out: &Out<'_>) -> Result<Val> {
        let all = self.broadcast_operands(ins, out.shape)?;
        Ok(self.select_same(&all[0], &all[1], &all[2]))
    }

    fn compare(&mut self, ins: &[Val], out: &Out<'_>) -> Result<Val> {
        let dir = match self.attr("direction") {
            Some(Attr::Str(s)) => s.clone(),
            _ => return Err(self.attr_err("direction", "must be one of EQ, NE, LT, LE, GT, GE")),
        };
        let both = self.broadcast_operands(ins, out.shape)?;
        Ok(self.compare_same(&dir, &both[0], &both[1]))
    }

    /// `(x, min, max)` NumPy-broadcast to the result (a scalar bound stays a scalar, which StableHLO takes), or
    /// `(x)` with `min`/`max` attributes (unbounded by default).
    fn clamp(&mut self, ins: &[Val], out: &Out<'_>) -> Result<Val> {
        let (x, lo, hi) = if let [x, lo, hi] = ins {
            let x = self.broadcast_operands(std::slice::from_ref(x), out.shape)?.remove(0);
            let bound = |e: &mut Self, b: &Val| -> Result<Val> {
                if b.rank() == 0 {
                    Ok(b.clone())
                } else {
                    Ok(e.broadcast_operands(&[b.clone(), x.clone()], out.shape)?.remove(0))
                }
            };
            let (lo, hi) = (bound(self, lo)?, bound(self, hi)?);
            (x, lo, hi)
        } else {
            let x = ins[0].clone();
            let lo = self.attr_f64("min", f64::NEG_INFINITY)?;
            let hi = self.attr_f64("max", f64::INFINITY)?;
            let (lo, hi) = (self.splat(lo, &Shape::scalar(), x.dtype), self.splat(hi, &Shape::scalar(), x.dtype));
            (x, lo, hi)
        };
        let x = &x;
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
        Ok(self.assign(&rhs, x.shape.clone(), x.dtype))
    }
}
