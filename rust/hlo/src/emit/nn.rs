//! Neural-network ops: convolution, pooling, normalization, attention and rotary embedding.

use tapeout_graph::Dim;
use tapeout_graph::Shape;

use tapeout_graph::ops::{self, Window};

use super::builder::{Emitter, Val, ty};
use crate::error::Result;

/// sdpa's soft-cap attribute.
const SOFTCAP: &str = "softcap";

impl Emitter<'_, '_, '_> {
    /// A window the type rule already accepted (`tapeout_graph::ops`), or the rule's description.
    fn window(&self, w: std::result::Result<Window, String>) -> Result<Window> {
        w.map_err(|detail| self.err(detail))
    }

    pub(crate) fn conv2d(&mut self, ins: &[Val], out_shape: &Shape) -> Result<Val> {
        // Ranks, groups and the result shape: the type rule checked them. Static shapes: the lowering's limit.
        let (x, w) = (&ins[0], &ins[1]);
        let (xd, wd) = (self.static_dims(x)?, self.static_dims(w)?);
        let groups = self.attr_int("groups", 1)?;
        let window = self.window(ops::conv2d_window(self.node_attrs(), [wd[2], wd[3]]))?;
        let y = match u64::try_from(groups) {
            // IREE 3.13's SPIR-V code computes some grouped convolutions wrongly (lavapipe: a result of the bias
            // alone, docs/devices.md): for Vulkan each group is a convolution of its own, joined along channels.
            Ok(g) if g > 1 && self.g.forms() == tapeout_graph::Forms::Vulkan => {
                let (cin, cout) = (xd[1] / g, wd[0] / g);
                let mut parts = Vec::new();
                for i in 0..g {
                    let xs = self.slice(x, &[(0, xd[0], 1), (i * cin, (i + 1) * cin, 1), (0, xd[2], 1), (0, xd[3], 1)]);
                    let ws =
                        self.slice(w, &[(i * cout, (i + 1) * cout, 1), (0, wd[1], 1), (0, wd[2], 1), (0, wd[3], 1)]);
                    let mut part = out_shape.clone();
                    part.0[1] = Dim::Static(cout);
                    parts.push(self.convolution(&xs, &ws, 1, &window, &part));
                }
                self.concat(&parts, 1)?
            }
            _ => self.convolution(x, w, groups, &window, out_shape),
        };
        match ins.get(2) {
            Some(bias) => {
                let bb = self.broadcast_to(bias, &[1], out_shape, Some(&y))?;
                Ok(self.binary_same("add", &y, &bb))
            }
            None => Ok(y),
        }
    }

    /// `stablehlo.convolution` of NCHW `x` and OIHW `w` over `window`, in `groups` feature groups.
    fn convolution(&mut self, x: &Val, w: &Val, groups: i64, window: &Window, out_shape: &Shape) -> Val {
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
        self.assign(&rhs, out_shape.clone(), x.dtype)
    }

    pub(crate) fn pool(&mut self, x: &Val, out_shape: &Shape, max: bool) -> Result<Val> {
        // The rank and the result shape: the type rule checked them. Static shapes: the lowering's limit.
        self.static_dims(x)?;
        let window = self.window(ops::pool_window(self.node_attrs()))?;
        let (kernel, stride, [t, b, l, r]) = (window.kernel, window.stride, window.pad);
        let mut init = self.splat(if max { f64::NEG_INFINITY } else { 0.0 }, &Shape::scalar(), x.dtype);
        if self.g.forms() == tapeout_graph::Forms::Gpu {
            // IREE 3.13's CUDA code fails to bufferize two reduce_windows with one init constant (it shares the
            // constant's fill between their dispatches): each one's init is the one before behind a barrier, a value
            // no folder can merge (a barrier on the constant itself each time is merged; docs/devices.md).
            if let Some(prev) = self.pool_inits.get(&(x.dtype, max)).cloned() {
                init = self.opaque(&prev);
            }
            self.pool_inits.insert((x.dtype, max), init.clone());
        }
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

    /// Scaled dot-product attention. With fewer key/value heads than query heads (grouped-query attention, the
    /// head dimension being the one before S), q `[.., H, S, D]` is viewed as `[.., KV, G, S, D]` and both
    /// products batch over `[.., KV]`: each key/value head is read by its G query heads, never copied G times.
    /// The scores are soft-capped (`softcap`), then masked: the additive mask, then causal with an optional sliding
    /// `window`.
    pub(crate) fn sdpa(&mut self, ins: &[Val], out_shape: &Shape) -> Result<Val> {
        let (q, k, v) = (&ins[0], &ins[1], &ins[2]);
        let r = q.rank(); // at least 2, and the ranks of k and v: the type rule checked them
        let Dim::Static(head) = q.shape.0[r - 1] else {
            return Err(self.err("sdpa needs a static head dimension (the last dimension of q)"));
        };
        #[allow(clippy::cast_precision_loss)] // head dims are small
        let default_scale = 1.0 / (head as f64).sqrt();
        let scale = self.attr_f64("scale", default_scale)?;
        let groups = if r >= 3 {
            ops::query_groups(q.shape.0[r - 3], k.shape.0[r - 3]).map_err(|detail| self.err(detail))?
        } else {
            1
        };
        let mut sdims = q.shape.clone();
        sdims.0[r - 1] = k.shape.0[r - 2];
        let scores = if groups == 1 {
            let mut perm: Vec<usize> = (0..r).collect();
            perm.swap(r - 1, r - 2);
            let kt = self.transpose(k, &perm);
            self.matmul(q, &kt, &sdims)?
        } else {
            // [.., KV, G, S, D] x [.., KV, T, D] -> [.., KV, G, S, T], batched over [.., KV].
            let q5 = self.reshape(q, &grouped(&q.shape, r - 3, groups))?;
            let s5 = self.grouped_dot(&q5, k, r - 1, &grouped(&sdims, r - 3, groups))?;
            self.reshape(&s5, &sdims)?
        };
        let sc = self.fill_like(scale, &scores, scores.dtype)?;
        let mut s = self.binary_same("multiply", &scores, &sc);
        if self.attr(SOFTCAP).is_some() {
            // Gemma 2's `cap · tanh(scores / cap)`, after the scale and before the mask, as transformers does.
            let cap = self.attr_f64(SOFTCAP, 1.0)?;
            let c = self.fill_like(cap, &s, s.dtype)?;
            let inner = self.binary_same("divide", &s, &c);
            let t = self.unary("tanh", &inner);
            s = self.binary_same("multiply", &t, &c);
        }
        if let Some(mask) = ins.get(3) {
            let mb = self.numpy_broadcast(mask, &s)?;
            s = self.binary_same("add", &s, &mb);
        }
        if self.attr_bool("causal", false)? {
            let window = match self.attr("window") {
                None => None,
                Some(_) => Some(
                    u64::try_from(self.attr_int("window", 0)?)
                        .ok()
                        .filter(|&w| w >= 1)
                        .ok_or_else(|| self.err("sdpa's window must be at least 1"))?,
                ),
            };
            s = self.causal_window(&s, window)?;
        }
        let p = self.softmax(&s, r - 1)?;
        if groups == 1 {
            return self.matmul(&p, v, out_shape);
        }
        // [.., KV, G, S, T] x [.., KV, T, Dv] -> [.., KV, G, S, Dv].
        let p5 = self.reshape(&p, &grouped(&p.shape, r - 3, groups))?;
        let o5 = self.grouped_dot(&p5, v, r - 2, &grouped(out_shape, r - 3, groups))?;
        self.reshape(&o5, out_shape)
    }

    /// `a [.., KV, G, S, X]` contracted on its last dimension with dimension `contract` of `b [.., KV, ..]`,
    /// batched over `b`'s dimensions before its last two: a `dot_general` with the group and sequence dimensions
    /// of `a` as free dimensions.
    fn grouped_dot(&mut self, a: &Val, b: &Val, contract: usize, out: &Shape) -> Result<Val> {
        let batch = super::builder::list(0..b.rank() - 2);
        let rhs = format!(
            "stablehlo.dot_general {}, {}, batching_dims = [{batch}] x [{batch}], contracting_dims = [{}] x \
             [{contract}] : ({}, {}) -> {}",
            a.name,
            b.name,
            a.rank() - 1,
            a.ty(),
            b.ty(),
            ty(out, a.dtype)
        );
        Ok(self.assign(&rhs, out.clone(), a.dtype))
    }

    /// Rotary position embedding of x `[.., S, D]`. Pairs are `(x[i], x[i + D/2])` (rotate_half, the default)
    /// or `(x[2i], x[2i + 1])` (`interleaved`, GPT-J and GGUF); each pair `(a, b)` becomes
    /// `(a·cos - b·sin, b·cos + a·sin)`. Full tables (width D) hold the angle of each element's pair in that
    /// element's place: `x·cos + rotate(x)·sin`; half tables (width D/2) hold one angle per pair.
    pub(crate) fn rope(&mut self, ins: &[Val]) -> Result<Val> {
        let (x, cos, sin) = (&ins[0], &ins[1], &ins[2]);
        let d = x.shape.0.last().copied().unwrap_or(Dim::Dynamic);
        let w = cos.shape.0.last().copied().unwrap_or(Dim::Dynamic);
        let table = ops::rope_table_width(d, w).map_err(|detail| self.err(detail))?;
        let Dim::Static(d) = d else {
            return Err(self.err("rope needs a static last dimension"));
        };
        let interleaved = self.attr_bool("interleaved", false)?;
        let (first, second) = if interleaved { self.split_pairs(x, d)? } else { self.split_halves(x, d)? };
        match table {
            ops::RopeTable::Full => {
                // rotate(x) puts -b where a was and a where b was.
                let nb = self.unary("negate", &second);
                let rot = if interleaved { self.join_pairs(&nb, &first, x)? } else { self.join_halves(&nb, &first)? };
                let cb = self.numpy_broadcast(cos, x)?;
                let sb = self.numpy_broadcast(sin, x)?;
                let a = self.binary_same("multiply", x, &cb);
                let b = self.binary_same("multiply", &rot, &sb);
                Ok(self.binary_same("add", &a, &b))
            }
            ops::RopeTable::Half => {
                let cb = self.numpy_broadcast(cos, &first)?;
                let sb = self.numpy_broadcast(sin, &first)?;
                let (ac, bs) = (self.binary_same("multiply", &first, &cb), self.binary_same("multiply", &second, &sb));
                let (bc, as_) = (self.binary_same("multiply", &second, &cb), self.binary_same("multiply", &first, &sb));
                let new_a = self.binary_same("subtract", &ac, &bs);
                let new_b = self.binary_same("add", &bc, &as_);
                if interleaved { self.join_pairs(&new_a, &new_b, x) } else { self.join_halves(&new_a, &new_b) }
            }
        }
    }

    /// `(x[.., :D/2], x[.., D/2:])`.
    fn split_halves(&mut self, x: &Val, d: u64) -> Result<(Val, Val)> {
        Ok((self.slice_last(x, 0, d / 2)?, self.slice_last(x, d / 2, d)?))
    }

    /// The halves back side by side: `[.., D/2]` twice to `[.., D]`.
    fn join_halves(&mut self, a: &Val, b: &Val) -> Result<Val> {
        self.concat(&[a.clone(), b.clone()], a.rank() - 1)
    }

    /// `(x[.., 0::2], x[.., 1::2])`: x viewed as `[.., D/2, 2]` and split on the pair dimension.
    fn split_pairs(&mut self, x: &Val, d: u64) -> Result<(Val, Val)> {
        let mut pairs = x.shape.clone();
        let last = pairs.0.len() - 1;
        pairs.0[last] = Dim::Static(d / 2);
        let half = pairs.clone();
        pairs.0.push(Dim::Static(2));
        let xp = self.reshape(x, &pairs)?;
        let part = |e: &mut Self, i: u64| {
            let ranges: Vec<Option<(u64, u64, u64)>> =
                (0..pairs.rank()).map(|j| (j == last + 1).then_some((i, i + 1, 1))).collect();
            let one = e.slice_whole_or(&xp, &ranges)?;
            e.reshape(&one, &half)
        };
        let even = part(self, 0)?;
        let odd = part(self, 1)?;
        Ok((even, odd))
    }

    /// The even and odd elements back in their places: two `[.., D/2]` to `[.., D]` like `x`.
    fn join_pairs(&mut self, even: &Val, odd: &Val, x: &Val) -> Result<Val> {
        let mut one = even.shape.clone();
        one.0.push(Dim::Static(1));
        let e = self.reshape(even, &one)?;
        let o = self.reshape(odd, &one)?;
        let both = self.concat(&[e, o], one.rank() - 1)?;
        self.reshape(&both, &x.shape)
    }
}

/// `shape` with its dimension `axis` (H, static: the type rule's grouping) split into `[H / groups, groups]`.
fn grouped(shape: &Shape, axis: usize, groups: u64) -> Shape {
    let mut dims = shape.0.clone();
    if let Dim::Static(h) = dims[axis] {
        dims[axis] = Dim::Static(h / groups);
    }
    dims.insert(axis + 1, Dim::Static(groups));
    Shape(dims)
}
