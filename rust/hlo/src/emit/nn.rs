//! Neural-network ops: convolution, pooling, normalization, attention and rotary embedding.

use tapeout_graph::Dim;
use tapeout_graph::Shape;

use tapeout_graph::ops::{self, Window};

use super::builder::{Emitter, Val, ty};
use crate::error::Result;

impl Emitter<'_, '_, '_> {
    /// A window the type rule already accepted (`tapeout_graph::ops`), or the rule's description.
    fn window(&self, w: std::result::Result<Window, String>) -> Result<Window> {
        w.map_err(|detail| self.err(detail))
    }

    pub(crate) fn conv2d(&mut self, ins: &[Val], out_shape: &Shape) -> Result<Val> {
        // Ranks, groups and the result shape: the type rule checked them. Static shapes: the lowering's limit.
        let (x, w) = (&ins[0], &ins[1]);
        let wd = self.static_dims(w)?;
        self.static_dims(x)?;
        let groups = self.attr_int("groups", 1)?;
        let window = self.window(ops::conv2d_window(self.node_attrs(), [wd[2], wd[3]]))?;
        let (stride, dilation, [t, b, l, r]) = (window.stride, window.dilation, window.pad);
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
                let bb = self.broadcast_to(bias, &[1], out_shape, Some(&y))?;
                Ok(self.binary_same("add", &y, &bb))
            }
            None => Ok(y),
        }
    }

    pub(crate) fn pool(&mut self, x: &Val, out_shape: &Shape, max: bool) -> Result<Val> {
        // The rank and the result shape: the type rule checked them. Static shapes: the lowering's limit.
        self.static_dims(x)?;
        let window = self.window(ops::pool_window(self.node_attrs()))?;
        let (kernel, stride, [t, b, l, r]) = (window.kernel, window.stride, window.pad);
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
        let d = self.fill_like(area, &y, y.dtype)?;
        Ok(self.binary_same("divide", &y, &d))
    }

    pub(crate) fn norm(&mut self, ins: &[Val], rms: bool, eps: f64) -> Result<Val> {
        let x = &ins[0];
        let axis = x.rank().checked_sub(1).ok_or_else(|| self.err("normalisation needs rank >= 1"))?;
        let centered = if rms {
            x.clone()
        } else {
            let m = self.mean(x, &[axis])?;
            let mb = self.unreduce(&m, &[axis], x)?;
            self.binary_same("subtract", x, &mb)
        };
        let sq = self.binary_same("multiply", &centered, &centered);
        let var = self.mean(&sq, &[axis])?;
        let e = self.fill_like(eps, &var, var.dtype)?;
        let ve = self.binary_same("add", &var, &e);
        let inv = self.unary("rsqrt", &ve);
        let invb = self.unreduce(&inv, &[axis], x)?;
        let mut y = self.binary_same("multiply", &centered, &invb);
        for (i, p) in ins.iter().enumerate().skip(1) {
            let pb = self.numpy_broadcast(p, &y)?;
            y = self.binary_same(if i == 1 { "multiply" } else { "add" }, &y, &pb);
        }
        Ok(y)
    }

    pub(crate) fn sdpa(&mut self, ins: &[Val], out_shape: &Shape) -> Result<Val> {
        let (q, k, v) = (&ins[0], &ins[1], &ins[2]);
        let r = q.rank(); // at least 2, and the ranks of k and v: the type rule checked them
        let Dim::Static(head) = q.shape.0[r - 1] else {
            return Err(self.err("sdpa needs a static head dimension (the last dimension of q)"));
        };
        #[allow(clippy::cast_precision_loss)] // head dims are small
        let default_scale = 1.0 / (head as f64).sqrt();
        let scale = self.attr_f64("scale", default_scale)?;
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 1, r - 2);
        let kt = self.transpose(k, &perm);
        let mut sdims = q.shape.clone();
        sdims.0[r - 1] = k.shape.0[r - 2];
        let scores = self.matmul(q, &kt, &sdims)?;
        let sc = self.fill_like(scale, &scores, scores.dtype)?;
        let mut s = self.binary_same("multiply", &scores, &sc);
        if let Some(mask) = ins.get(3) {
            let mb = self.numpy_broadcast(mask, &s)?;
            s = self.binary_same("add", &s, &mb);
        }
        if self.attr_bool("causal", false)? {
            s = self.causal(&s)?;
        }
        let p = self.softmax(&s, r - 1)?;
        self.matmul(&p, v, out_shape)
    }

    pub(crate) fn rope(&mut self, ins: &[Val]) -> Result<Val> {
        let (x, cos, sin) = (&ins[0], &ins[1], &ins[2]);
        let Some(&Dim::Static(d)) = x.shape.0.last() else {
            return Err(self.err("rope needs a static last dimension"));
        };
        // Even: the type rule checked it.
        let last = x.rank() - 1;
        let x1 = self.slice_last(x, 0, d / 2)?;
        let x2 = self.slice_last(x, d / 2, d)?;
        let nx2 = self.unary("negate", &x2);
        let rot = self.concat(&[nx2, x1], last)?;
        let cb = self.numpy_broadcast(cos, x)?;
        let sb = self.numpy_broadcast(sin, x)?;
        let a = self.binary_same("multiply", x, &cb);
        let b = self.binary_same("multiply", &rot, &sb);
        Ok(self.binary_same("add", &a, &b))
    }
}
