//! One node at a time: the dispatch over [`OpKind`], and the lowering of the simple ops.

use tapeout_graph::{Attr, DType, Dim, Op as Node, OpKind, Shape};

use super::builder::{Emitter, Val, list, ty};
use crate::error::Result;

impl<'g> Emitter<'g, '_, '_> {
    pub(crate) fn lower(&mut self, node: &'g Node) -> Result<()> {
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
        let result = match node.op {
            OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div | OpKind::Pow | OpKind::Max | OpKind::Min => {
                arity(2, 1)?;
                let op = match node.op {
                    OpKind::Add => "add",
                    OpKind::Sub => "subtract",
                    OpKind::Mul => "multiply",
                    OpKind::Div => "divide",
                    OpKind::Pow => "power",
                    OpKind::Max => "maximum",
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
            OpKind::Neg
            | OpKind::Abs
            | OpKind::Exp
            | OpKind::Log
            | OpKind::Sqrt
            | OpKind::Rsqrt
            | OpKind::Tanh
            | OpKind::Sin
            | OpKind::Cos
            | OpKind::Sigmoid => {
                arity(1, 1)?;
                let op = match node.op {
                    OpKind::Neg => "negate",
                    OpKind::Exp => "exponential",
                    OpKind::Sin => "sine",
                    OpKind::Cos => "cosine",
                    OpKind::Sigmoid => "logistic",
                    other => other.name(),
                };
                self.unary(op, &ins[0])
            }
            OpKind::Relu => {
                arity(1, 1)?;
                let zero = self.fill_like(0.0, &ins[0], ins[0].dtype)?;
                self.binary_same("maximum", &ins[0], &zero)
            }
            OpKind::Silu => {
                arity(1, 1)?;
                let s = self.unary("logistic", &ins[0]);
                self.binary_same("multiply", &ins[0], &s)
            }
            OpKind::Gelu => {
                // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
                arity(1, 1)?;
                let x = &ins[0];
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
            OpKind::Convert => {
                arity(1, 1)?;
                let (shape, dtype) = outs[0].clone();
                let rhs = format!("stablehlo.convert {} : ({}) -> {}", ins[0].name, ins[0].ty(), ty(&shape, dtype));
                self.assign(&rhs, shape, dtype)
            }
            OpKind::Broadcast => {
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
                self.broadcast_to(&ins[0], &dims, &out_shape, None)?
            }
            OpKind::Reshape => {
                arity(1, 1)?;
                self.reshape(&ins[0], &out_shape)?
            }
            OpKind::Transpose => {
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
            OpKind::Concat => {
                if ins.is_empty() || outs.len() != 1 {
                    return Err(self.err("takes one or more inputs and one output"));
                }
                let axis = self.axis("axis", self.attr_int("axis", 0)?, ins[0].rank())?;
                self.concat(&ins, axis)?
            }
            OpKind::Slice => {
                arity(1, 1)?;
                let x = &ins[0];
                let rank = x.rank();
                let start = self.attr_ints("start")?.ok_or_else(|| self.attr_err("start", "is required"))?;
                let limit = self.attr_ints("limit")?.ok_or_else(|| self.attr_err("limit", "is required"))?;
                let stride = self.attr_ints("stride")?.unwrap_or_else(|| vec![1; rank]);
                if start.len() != rank || limit.len() != rank || stride.len() != rank {
                    return Err(self
                        .attr_err("start", format!("start, limit and stride need one entry per dimension ({rank})")));
                }
                let mut ranges = Vec::with_capacity(rank);
                for i in 0..rank {
                    let to_end = |d: u64| if limit[i] == -1 { Ok(d) } else { u64::try_from(limit[i]) };
                    let (s, st) = (u64::try_from(start[i]), u64::try_from(stride[i]));
                    let l = match x.shape.0[i] {
                        Dim::Static(d) => to_end(d),
                        Dim::Dynamic => u64::try_from(limit[i]),
                    };
                    let range = match (x.shape.0[i], s, l, st) {
                        // A `?` dimension is taken whole: start 0, limit -1 (to the end), stride 1.
                        (Dim::Dynamic, _, _, _) if start[i] == 0 && limit[i] == -1 && stride[i] == 1 => None,
                        (Dim::Dynamic, ..) => {
                            return Err(self.attr_err(
                                "start",
                                format!(
                                    "dimension {i} is `?`: it can only be taken whole (start 0, limit -1, stride 1), \
                                     not [{}:{}:{}]",
                                    start[i], limit[i], stride[i]
                                ),
                            ));
                        }
                        (Dim::Static(d), Ok(s), Ok(l), Ok(st)) if s <= l && l <= d && st > 0 => Some((s, l, st)),
                        (Dim::Static(d), ..) => {
                            return Err(self.attr_err(
                                "start",
                                format!(
                                    "dimension {i}: [{}:{}:{}] does not fit size {d}",
                                    start[i], limit[i], stride[i]
                                ),
                            ));
                        }
                    };
                    ranges.push(range);
                }
                self.slice_whole_or(x, &ranges)?
            }
            OpKind::Gather => {
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
            OpKind::Matmul => {
                arity(2, 1)?;
                self.matmul(&ins[0], &ins[1], &out_shape)?
            }
            OpKind::Conv2d => self.conv2d(&ins, &out_shape)?,
            OpKind::MaxPool2d | OpKind::AvgPool2d => {
                arity(1, 1)?;
                self.pool(&ins[0], &out_shape, node.op == OpKind::MaxPool2d)?
            }
            OpKind::ReduceSum | OpKind::ReduceMean | OpKind::ReduceMax => {
                arity(1, 1)?;
                let x = &ins[0];
                let axes = match self.attr_ints("axes")? {
                    Some(a) => a.iter().map(|&v| self.axis("axes", v, x.rank())).collect::<Result<Vec<_>>>()?,
                    None => (0..x.rank()).collect(),
                };
                let r = match node.op {
                    OpKind::ReduceSum => self.reduce(x, &axes, "add"),
                    OpKind::ReduceMax => self.reduce(x, &axes, "maximum"),
                    _ => self.mean(x, &axes)?,
                };
                if self.attr_bool("keepdims", false)? { self.keep_dims(&r, x, &axes, &out_shape)? } else { r }
            }
            OpKind::Softmax => {
                arity(1, 1)?;
                let axis = self.axis("axis", self.attr_int("axis", -1)?, ins[0].rank())?;
                self.softmax(&ins[0], axis)?
            }
            OpKind::LayerNorm | OpKind::RmsNorm => {
                let rms = node.op == OpKind::RmsNorm;
                if !(1..=3).contains(&ins.len()) || (rms && ins.len() > 2) || outs.len() != 1 {
                    return Err(self.err("takes (x, [gamma], [beta]) for layer_norm and (x, [gamma]) for rms_norm"));
                }
                let default_eps = if rms { 1e-6 } else { 1e-5 };
                let eps = self.attr_f64("eps", default_eps)?;
                self.norm(&ins, rms, eps)?
            }
            OpKind::CausalMask => {
                arity(1, 1)?;
                self.causal(&ins[0])?
            }
            OpKind::Sdpa => self.sdpa(&ins, &out_shape)?,
            OpKind::Rope => {
                arity(3, 1)?;
                self.rope(&ins)?
            }
            OpKind::DynamicSlice => {
                let x = &ins[0];
                let offsets = &ins[1..];
                if offsets.len() != x.rank() || outs.len() != 1 {
                    return Err(self.err(format!(
                        "takes the tensor and one offset per dimension ({}), got {} offsets",
                        x.rank(),
                        offsets.len()
                    )));
                }
                let sizes = self.attr_ints("sizes")?.ok_or_else(|| self.attr_err("sizes", "is required"))?;
                if sizes.len() != x.rank() {
                    return Err(self.attr_err("sizes", format!("needs one entry per dimension ({})", x.rank())));
                }
                let mut shape = Vec::with_capacity(sizes.len());
                for (i, &n) in sizes.iter().enumerate() {
                    let fits = |d: &Dim| match d {
                        Dim::Static(d) => u64::try_from(n).is_ok_and(|n| n <= *d),
                        Dim::Dynamic => n >= 0,
                    };
                    if !fits(&x.shape.0[i]) {
                        return Err(self.attr_err("sizes", format!("dimension {i}: {n} does not fit [{}]", x.shape)));
                    }
                    shape.push(u64::try_from(n).unwrap_or(0));
                }
                let shape = Shape::of(&shape);
                self.check_offsets(offsets)?;
                let rhs = format!(
                    "stablehlo.dynamic_slice {}, {}, sizes = [{}] : ({}, {}) -> {}",
                    x.name,
                    list(offsets.iter().map(|o| o.name.clone())),
                    list(&sizes),
                    x.ty(),
                    list(offsets.iter().map(Val::ty)),
                    ty(&shape, x.dtype)
                );
                self.assign(&rhs, shape, x.dtype)
            }
            OpKind::DynamicUpdateSlice => {
                let (x, u) = (&ins[0], &ins[1]);
                let offsets = &ins[2..];
                if offsets.len() != x.rank() || u.rank() != x.rank() || outs.len() != 1 {
                    return Err(self.err(format!(
                        "takes the tensor, an update of its rank ({}) and one offset per dimension, got an update of \
                         rank {} and {} offsets",
                        x.rank(),
                        u.rank(),
                        offsets.len()
                    )));
                }
                if u.dtype != x.dtype {
                    return Err(self.err(format!("the update is {}, the tensor {}", u.dtype, x.dtype)));
                }
                if x.shape.is_dynamic() || u.shape.is_dynamic() {
                    return Err(self.err(format!(
                        "needs static shapes (the tensor is [{}], the update [{}]): IREE 3.13 does not lower it on `?` \
                         dimensions; give the updated tensor (a cache) a static maximum size",
                        x.shape, u.shape
                    )));
                }
                for i in 0..x.rank() {
                    if let (Dim::Static(a), Dim::Static(b)) = (u.shape.0[i], x.shape.0[i]) {
                        if a > b {
                            return Err(self.err(format!(
                                "the update [{}] does not fit the tensor [{}] (dimension {i})",
                                u.shape, x.shape
                            )));
                        }
                    }
                }
                self.check_offsets(offsets)?;
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
                self.assign(&rhs, x.shape.clone(), x.dtype)
            }
            OpKind::Argmax => {
                arity(1, 1)?;
                let x = &ins[0];
                let axis = self.axis("axis", self.attr_int("axis", -1)?, x.rank())?;
                let (_, dtype) = outs[0].clone();
                self.argmax(x, axis, dtype)?
            }
            OpKind::Iota => {
                arity(0, 1)?;
                let dim = self.axis("dim", self.attr_int("dim", 0)?, out_shape.rank())?;
                let (shape, dtype) = outs[0].clone();
                self.assign(&format!("stablehlo.iota dim = {dim} : {}", ty(&shape, dtype)), shape, dtype)
            }
            OpKind::Select => {
                arity(3, 1)?;
                if ins[0].dtype != DType::Bool {
                    return Err(self.err(format!("the predicate must be bool (i1), got {}", ins[0].dtype)));
                }
                let all = self.broadcast_all(&ins[..3])?;
                let (p, a, b) = (&all[0], &all[1], &all[2]);
                let rhs = format!("stablehlo.select {}, {}, {} : {}, {}", p.name, a.name, b.name, p.ty(), a.ty());
                self.assign(&rhs, a.shape.clone(), a.dtype)
            }
            OpKind::Compare => {
                arity(2, 1)?;
                let dir = match self.attr("direction") {
                    Some(Attr::Str(s)) if ["EQ", "NE", "LT", "LE", "GT", "GE"].contains(&s.as_str()) => s.clone(),
                    _ => return Err(self.attr_err("direction", "must be one of EQ, NE, LT, LE, GT, GE")),
                };
                let both = self.broadcast_all(&ins[..2])?;
                let (a, b) = (&both[0], &both[1]);
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
            OpKind::Clamp => {
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
                spec.label()
            )));
        }
        self.vals.insert(*out, Val { name: result.name, shape: spec.shape.clone(), dtype: spec.dtype });
        Ok(())
    }
}
