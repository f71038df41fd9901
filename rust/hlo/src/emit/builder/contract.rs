//! Matrix products: `dot_general`, and the product whose right side's columns are in two dims (`grouped`).

use tapeout_graph::{Dim, Shape};

use super::{Emitter, Val, list, ty};
use crate::error::Result;

impl Emitter<'_, '_, '_> {
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
        let lead_dynamic = lead.iter().filter(|d| **d == Dim::Dynamic).count();
        if dynamic && rb == 2 && ra >= 3 && lead_dynamic > 1 {
            // `[?, ?, K] x [K, N]` (a linear over a run-time batch and length): the same merged 2-D product, split
            // back with each `?` read from `a` (the merged size alone cannot say how it splits).
            let groups = [(0..ra - 1).collect::<Vec<_>>(), vec![ra - 1]];
            let flat = self.reshape_grouped(a, &Shape(vec![Dim::Dynamic, ad[ra - 1]]), &groups);
            let prod = self.matmul(&flat, b, &Shape(vec![Dim::Dynamic, bd[1]]))?;
            return Ok(self.expand_like(&prod, out, &groups, a));
        }
        if dynamic && rb == 2 && ra >= 3 && lead_dynamic == 1 {
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
    pub(super) fn grouped_columns_product(&mut self, a: &Val, b: &Val, out: &Shape) -> Result<Val> {
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
}
