//! Elementwise ops on values of one shape, and NumPy broadcasting to static and `?` shapes.

use tapeout_graph::{DType, Dim, Shape};

use super::shapes::groups_around;
use super::{Emitter, Val, i64_array, list, scalar_literal, ty};
use crate::error::Result;

impl Emitter<'_, '_, '_> {
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
    pub(super) fn broadcast_shape_tensor(&mut self, xs: &[Val], target: &Shape) -> Result<Val> {
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
}
