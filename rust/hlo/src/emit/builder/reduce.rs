//! Reductions and the ops built on them: sums, means, softmax, the causal mask, argmax.

use tapeout_graph::{DType, Dim, Shape};

use super::shapes::squeeze_groups;
use super::{Emitter, Val, list, ty};
use crate::error::Result;

impl Emitter<'_, '_, '_> {
    /// The sum of `x` over its leading axis. For a static f32 `x` of rank 2 or more, with a leading extent of 2 or
    /// more, a `dot_general` of a splat of ones `[R]` with `x`, contracting that axis; else a `stablehlo.reduce`.
    /// With IREE 3.13 on the llvm-cpu target, a `stablehlo.reduce` over the outer axis of `[R, .., N]` is compiled
    /// to a reduction vectorized across the strided axis. The contraction with ones becomes a `vecmat` that reads
    /// `x` row by row, over 20 times faster (docs/performance.md#weights-in-iree). A packed weight's product summed
    /// over its blocks is such a sum. Other dtypes keep the `reduce`: only f32 was measured, and a 16-bit
    /// `dot_general` may accumulate in 16 bits.
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
            // axis is several times slower: docs/performance.md#weights-in-iree).
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

    /// The causal mask of scores `x [.., S, T]` (bottom-right aligned: query i sees keys j ≤ i + T − S), -inf
    /// elsewhere: `select(pred, x, fill)` where `pred` is `[S, T]` i1 broadcast over `x`'s leading dims.
    pub(crate) fn causal(&mut self, x: &Val) -> Result<Val> {
        self.causal_window(x, None)
    }

    /// [`Self::causal`], and with a `window` W also -inf for keys W or more positions before the query's own
    /// (query i sees keys j with i + T − S − W < j ≤ i + T − S): transformers' sliding-window attention.
    pub(crate) fn causal_window(&mut self, x: &Val, window: Option<u64>) -> Result<Val> {
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
        let mut keep = self.compare_same("GE", &shifted, &col);
        if let Some(w) = window {
            // The query's position minus the key's stays below W.
            let distance = self.binary_same("subtract", &shifted, &col);
            #[allow(clippy::cast_precision_loss)] // a window is a sequence length, far below 2^53
            let limit = self.fill_like(w as f64, &distance, DType::I64)?;
            let near = self.compare_same("LT", &distance, &limit);
            keep = self.binary_same("and", &keep, &near);
        }
        let keep = self.broadcast_to(&keep, &[r - 2, r - 1], &x.shape, Some(x))?;
        let fill = self.fill_like(f64::NEG_INFINITY, x, x.dtype)?;
        Ok(self.assign(
            &format!("stablehlo.select {}, {}, {} : {}, {}", keep.name, x.name, fill.name, keep.ty(), x.ty()),
            x.shape.clone(),
            x.dtype,
        ))
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
}
