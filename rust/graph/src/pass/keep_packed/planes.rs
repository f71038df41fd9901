//! The values a weight kept packed is computed from: its planes, the shared values derived from them, and the
//! builder that appends the rewrite's tensors and ops.

use crate::dtype::DType;
use crate::ops::OpKind;
use crate::pass::Fresh;
use crate::shape::{Dim, Shape};
use crate::tensor::TensorSpec;
use crate::trace::{Attr, Attrs, Op, TensorId};

/// The largest extent the rewrite writes into an `i64` attribute (slice limits, reshaped dims).
pub(crate) const MAX_DIM: u64 = i64::MAX.unsigned_abs();

/// New tensors and ops, appended as the rewrite goes.
pub(crate) struct Builder<'s> {
    pub(crate) specs: &'s mut Vec<TensorSpec>,
    pub(crate) ops: Vec<Op>,
    /// Per op: whether it derives a value from the planes alone that several uses share (the f32 codes, `A` as
    /// `[Kb, 1, N]`, …). Those stay in the prelude wherever they were first built, so that every use sees them.
    shared: Vec<bool>,
    sharing: bool,
    /// The recorded node the ops built now stand for (see [`Op::origin`]).
    pub(crate) origin: Option<usize>,
    /// Fresh indices for them.
    pub(crate) fresh: Fresh,
}

impl<'s> Builder<'s> {
    /// A builder of new tensors in `specs` and ops with indices from `fresh`, standing for the recorded node
    /// `origin`.
    pub(crate) fn new(specs: &'s mut Vec<TensorSpec>, origin: Option<usize>, fresh: Fresh) -> Self {
        Builder { specs, ops: Vec::new(), shared: Vec::new(), sharing: false, origin, fresh }
    }

    pub(crate) fn tensor(&mut self, name: String, dims: &[u64], dtype: DType) -> TensorId {
        self.tensor_shaped(name, Shape::of(dims), dtype)
    }

    pub(crate) fn tensor_shaped(&mut self, name: String, shape: Shape, dtype: DType) -> TensorId {
        let id = TensorId::at(self.specs.len());
        self.specs.push(TensorSpec::new(name, shape, dtype));
        id
    }

    pub(crate) fn op_into(&mut self, op: OpKind, attrs: Attrs, inputs: &[TensorId], out: TensorId) -> TensorId {
        let op = self.fresh.op(self.origin, op, attrs, inputs.to_vec(), vec![out]);
        self.ops.push(op);
        self.shared.push(self.sharing);
        out
    }

    /// Builds a shared value with `f` (see [`Builder::shared`]).
    pub(crate) fn share<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let was = std::mem::replace(&mut self.sharing, true);
        let t = f(self);
        self.sharing = was;
        t
    }

    /// The ops built since `start` for one use, which replace its node; the shared ones among them stay behind.
    pub(crate) fn take_use(&mut self, start: usize) -> Vec<Op> {
        let (ops, shared) = (self.ops.split_off(start), self.shared.split_off(start));
        let mut seq = Vec::new();
        for (op, s) in ops.into_iter().zip(shared) {
            if s {
                self.ops.push(op);
                self.shared.push(true);
            } else {
                seq.push(op);
            }
        }
        seq
    }

    pub(crate) fn op(
        &mut self,
        op: OpKind,
        attrs: Attrs,
        inputs: &[TensorId],
        name: String,
        dims: &[u64],
        dtype: DType,
    ) -> TensorId {
        let out = self.tensor(name, dims, dtype);
        self.op_into(op, attrs, inputs, out)
    }

    /// [`Builder::op`] with a result shape that may have `?` dimensions.
    pub(crate) fn op_shaped(
        &mut self,
        op: OpKind,
        attrs: Attrs,
        inputs: &[TensorId],
        name: String,
        shape: Shape,
        dtype: DType,
    ) -> TensorId {
        let out = self.tensor_shaped(name, shape, dtype);
        self.op_into(op, attrs, inputs, out)
    }
}

/// An attribute of integers: axes, permutations, or extents the rewrite has checked are at most [`MAX_DIM`].
pub(crate) fn ints(name: &str, v: impl IntoIterator<Item = u64>) -> Attrs {
    let mut a = Attrs::new();
    a.insert(name.into(), Attr::Ints(v.into_iter().map(as_i64).collect()));
    a
}

/// An extent the rewrite has checked is at most [`MAX_DIM`], as the `i64` attributes hold.
#[allow(clippy::expect_used, reason = "an internal invariant: every extent is checked against MAX_DIM first")]
pub(crate) fn as_i64(d: u64) -> i64 {
    i64::try_from(d).expect("keep_packed checks that every extent it writes fits i64")
}

pub(crate) fn axis(a: i64) -> Attrs {
    let mut attrs = Attrs::new();
    attrs.insert("axis".into(), Attr::Int(a));
    attrs
}

/// One kept weight's planes and the shared values derived from them.
pub(crate) struct Planes {
    pub(crate) name: String,
    /// The weight's rows, and the rows its planes hold ([`Split::padded_rows`](crate::planar::Split::padded_rows)).
    pub(crate) n: u64,
    pub(crate) np: u64,
    /// The multiple `np` is of ([`Split::row_multiple`](crate::planar::Split::row_multiple)): a slice of sub-byte
    /// planes starts at one.
    pub(crate) row_multiple: u64,
    /// Whether the codes are stored in row bands (the device pass's choice): `quants` is then `[Np / T, Kb, B, T]`,
    /// which per-block products contract as stored and every other use reads through [`Planes::codes`].
    pub(crate) banded: bool,
    pub(crate) k: u64,
    pub(crate) kb: u64,
    pub(crate) b: u64,
    pub(crate) quants: TensorId,
    /// The high bits of 5/6-bit codes, and the scalar 16 they are weighted by.
    pub(crate) high: Option<(TensorId, TensorId)>,
    pub(crate) high_f32: Option<TensorId>,
    pub(crate) codes_whole: Option<TensorId>,
    /// Codes stored in row bands read as `[Kb, B, Np]` ([`Planes::codes`]), built on first use.
    pub(crate) codes_view: Option<TensorId>,
    /// `A [Kb, N]` f32.
    pub(crate) scale: TensorId,
    /// `C [Kb, N]` f32, when the format has an offset term.
    pub(crate) offset: Option<TensorId>,
    /// The codes as f32 `[Kb, B, N]` and `A` as `[Kb, 1, N]`, built on first use.
    pub(crate) codes_f32: Option<TensorId>,
    pub(crate) scale_3d: Option<TensorId>,
    pub(crate) offset_3d: Option<TensorId>,
}

impl Planes {
    /// The high-bit plane as f32 `[Kb, B, N]`, for formats that have one.
    pub(crate) fn high_f32(&mut self, b: &mut Builder<'_>) -> Option<TensorId> {
        let (h, _) = self.high?;
        if let Some(t) = self.high_f32 {
            return Some(t);
        }
        let dims = [self.kb, self.b, self.np];
        let t =
            b.share(|b| b.op(OpKind::Convert, Attrs::new(), &[h], format!("{}.qh_f32", self.name), &dims, DType::F32));
        Some(*self.high_f32.insert(t))
    }
    /// The whole codes as f32 (`qs + 16·qh` where there is a high plane; the bias is in `C`).
    pub(crate) fn whole_codes(&mut self, b: &mut Builder<'_>) -> TensorId {
        if let Some(t) = self.codes_whole {
            return t;
        }
        let lo = self.codes_f32(b);
        let t = match (self.high_f32(b), self.high) {
            (Some(hf), Some((_, sixteen))) => {
                let dims = [self.kb, self.b, self.np];
                let name = &self.name;
                b.share(|b| {
                    let h16 =
                        b.op(OpKind::Mul, Attrs::new(), &[hf, sixteen], format!("{name}.qh16"), &dims, DType::F32);
                    b.op(OpKind::Add, Attrs::new(), &[lo, h16], format!("{name}.codes"), &dims, DType::F32)
                })
            }
            _ => lo,
        };
        *self.codes_whole.insert(t)
    }
    pub(crate) fn codes_f32(&mut self, b: &mut Builder<'_>) -> TensorId {
        if let Some(t) = self.codes_f32 {
            return t;
        }
        let (q, dims) = (self.codes(b), [self.kb, self.b, self.np]);
        let t =
            b.share(|b| b.op(OpKind::Convert, Attrs::new(), &[q], format!("{}.qs_f32", self.name), &dims, DType::F32));
        *self.codes_f32.insert(t)
    }

    /// The codes as `[Kb, B, Np]`, as every use but a per-block product over the stored bands reads them: the
    /// plane itself, or for codes stored in row bands ([`Planes::banded`]) a view of them, shared, taken behind a
    /// barrier (`after` of the codes and themselves) so that no backend computes the view once, as a second copy
    /// of the codes, rather than in each dispatch that reads it.
    pub(crate) fn codes(&mut self, b: &mut Builder<'_>) -> TensorId {
        if !self.banded {
            return self.quants;
        }
        if let Some(t) = self.codes_view {
            return t;
        }
        let (q, name, dims) = (self.quants, format!("{}.qs", self.name), [self.kb, self.b, self.np]);
        let t = b.share(|b| {
            let dtype = b.specs[q.index()].dtype;
            let shape = b.specs[q.index()].shape.clone();
            let seen = b.op_shaped(OpKind::After, Attrs::new(), &[q, q], format!("{name}_seen"), shape, dtype);
            band_view(b, seen, dims, name)
        });
        *self.codes_view.insert(t)
    }
    pub(crate) fn scale_3d(&mut self, b: &mut Builder<'_>) -> TensorId {
        if let Some(t) = self.scale_3d {
            return t;
        }
        let (a, dims) = (self.scale, [self.kb, 1, self.np]);
        let t = b.share(|b| b.op(OpKind::Reshape, Attrs::new(), &[a], format!("{}.a3", self.name), &dims, DType::F32));
        *self.scale_3d.insert(t)
    }
    pub(crate) fn offset_3d(&mut self, b: &mut Builder<'_>) -> Option<TensorId> {
        let c = self.offset?;
        if let Some(t) = self.offset_3d {
            return Some(t);
        }
        let dims = [self.kb, 1, self.np];
        let t = b.share(|b| b.op(OpKind::Reshape, Attrs::new(), &[c], format!("{}.c3", self.name), &dims, DType::F32));
        Some(*self.offset_3d.insert(t))
    }
    /// The whole weight, dequantized in the program, as `Wᵀ [K, N]` into `out` (the padding rows sliced off).
    pub(crate) fn dequantized_t(&mut self, b: &mut Builder<'_>, out: TensorId) {
        let codes = self.whole_codes(b);
        let name = self.name.clone();
        self.scaled_t(b, (codes, &name), ((0, self.np), false), |_, t, _| t, out);
    }
    /// The codes (f32, of `shape`) times `A`, plus `C` when the format has one, each read through `part` (the
    /// plane rows a use takes, gated, in its layout).
    pub(crate) fn scaled(
        &mut self,
        b: &mut Builder<'_>,
        codes: TensorId,
        label: &str,
        shape: &Shape,
        part: impl Fn(&mut Builder<'_>, TensorId, &str) -> TensorId,
    ) -> TensorId {
        let a = self.scale_3d(b);
        let a = part(b, a, "a");
        let mut v =
            b.op_shaped(OpKind::Mul, Attrs::new(), &[codes, a], format!("{label}.wa"), shape.clone(), DType::F32);
        if let Some(c) = self.offset_3d(b) {
            let c = part(b, c, "c");
            v = b.op_shaped(OpKind::Add, Attrs::new(), &[v, c], format!("{label}.wc"), shape.clone(), DType::F32);
        }
        v
    }

    /// `Wᵀ [K, real rows]` into `out` from the codes of plane rows `start .. start + len` as f32 `[Kb, B, len]`:
    /// scaled, offset, reshaped, and the padding rows among them sliced off. `A` and `C` are read through `part`
    /// (the plane rows the codes hold, in the use's layout); `gated` says that the codes' blocks are `?` (a device
    /// pass's gate), and `K` with them.
    pub(crate) fn scaled_t(
        &mut self,
        b: &mut Builder<'_>,
        (codes, label): (TensorId, &str),
        (rows, gated): ((u64, u64), bool),
        part: impl Fn(&mut Builder<'_>, TensorId, &str) -> TensorId,
        out: TensorId,
    ) {
        let (first, len) = rows;
        let shape = blocks_shape(&[self.kb, self.b, len], gated);
        let v = self.scaled(b, codes, label, &shape, part);
        let real = len.min(self.n.saturating_sub(first));
        if real == len {
            b.op_into(OpKind::Reshape, Attrs::new(), &[v], out);
        } else {
            let padded_shape = blocks_shape(&[self.k, len], gated);
            let padded =
                b.op_shaped(OpKind::Reshape, Attrs::new(), &[v], format!("{label}.tp"), padded_shape, DType::F32);
            let mut at = slice_to(&[self.k, real]);
            // A gated `K` is `?`: its slice runs to the end.
            if let (true, Some(Attr::Ints(limit))) = (gated, at.get_mut("limit")) {
                limit[0] = -1;
            }
            b.op_into(OpKind::Slice, at, &[padded], out);
        }
    }

    /// The codes as f32 of `shape` for one use only (not shared): `qs + 16·qh` where there is a high plane, each
    /// plane read through `read` (the rows, gates and layout the use takes of it).
    pub(crate) fn codes_for_use(
        &mut self,
        b: &mut Builder<'_>,
        label: &str,
        shape: &Shape,
        read: impl Fn(&mut Builder<'_>, TensorId, &str) -> TensorId,
    ) -> TensorId {
        let q = read(b, self.quants, "qs");
        let f32_op = |b: &mut Builder<'_>, op: OpKind, ins: &[TensorId], name: String| {
            b.op_shaped(op, Attrs::new(), ins, name, shape.clone(), DType::F32)
        };
        let mut codes = f32_op(b, OpKind::Convert, &[q], format!("{label}.qs_f32"));
        if let Some((h, sixteen)) = self.high {
            let hq = read(b, h, "qh");
            let hf = f32_op(b, OpKind::Convert, &[hq], format!("{label}.qh_f32"));
            let h16 = f32_op(b, OpKind::Mul, &[hf, sixteen], format!("{label}.qh16"));
            codes = f32_op(b, OpKind::Add, &[codes, h16], format!("{label}.codes"));
        }
        codes
    }

    /// The whole weight as `Wᵀ [K, N]` f32, dequantized for one use (`label`'s) only: its ops are not shared and
    /// are written where the use is, so that IREE computes this copy when the use needs it rather than holding one
    /// per weight from the call's start.
    pub(crate) fn dequantized_for_use(&mut self, b: &mut Builder<'_>, label: &str) -> TensorId {
        let whole = (0, self.np);
        let (stored, view) = (self.quants, self.codes(b));
        let read = move |_: &mut Builder<'_>, t: TensorId, _: &str| if t == stored { view } else { t };
        let codes = self.codes_for_use(b, label, &Shape::of(&[self.kb, self.b, self.np]), read);
        let wt = b.tensor(format!("{label}.wt"), &[self.k, self.n], DType::F32);
        self.scaled_t(b, (codes, label), (whole, false), |_, t, _| t, wt);
        wt
    }
}

/// Codes stored in row bands, `stored` (`[Np / T, Kb, B, T]`), as the `[Kb, B, Np]` (`dims`) the rewrite computes
/// on: a transpose and a reshape, which a backend folds into the dispatch that reads them.
pub(crate) fn band_view(b: &mut Builder<'_>, stored: TensorId, dims: [u64; 3], name: String) -> TensorId {
    let spec = &b.specs[stored.index()];
    let (dtype, shape) = (spec.dtype, spec.shape.clone());
    let [bands, kb, bs, t] = shape.0[..] else { return stored };
    let moved = Shape(vec![kb, bs, bands, t]);
    let moved =
        b.op_shaped(OpKind::Transpose, ints("perm", [1, 2, 0, 3]), &[stored], format!("{name}_moved"), moved, dtype);
    b.op(OpKind::Reshape, Attrs::new(), &[moved], format!("{name}_view"), &dims, dtype)
}

/// A node's one boolean attribute `name`, set (`matmul`'s `grouped` or `banded`, [`OpKind::Matmul`]).
pub(crate) fn flag(name: &str) -> Attrs {
    let mut a = Attrs::new();
    a.insert(name.into(), Attr::Bool(true));
    a
}

/// Plane `t` (`[Kb, B, Np]`: codes, high bits, or `A` or `C` with `B` = 1) as the rows `first .. first + len` a
/// use reads: sliced unless that is all `np` of them.
pub(crate) fn plane_rows(
    b: &mut Builder<'_>,
    t: TensorId,
    (label, suffix): (&str, &str),
    (kb, bs, np): (u64, u64, u64),
    (first, len): (u64, u64),
) -> TensorId {
    let dtype = b.specs[t.index()].dtype;
    if len == np {
        return t;
    }
    let at = slice_range(&[0, 0, first], &[kb, bs, len]);
    b.op(OpKind::Slice, at, &[t], format!("{label}.{suffix}_rows"), &[kb, bs, len], dtype)
}

/// `Shape` of `dims`, with the first dimension `?` when `gated` (a plane's blocks read through a [`OpKind::GateRows`]).
pub(crate) fn blocks_shape(dims: &[u64], gated: bool) -> Shape {
    let mut s = Shape::of(dims);
    if gated {
        s.0[0] = Dim::Dynamic;
    }
    s
}

/// Attributes of a `slice` of extents `dims` from `start` (stride 1).
pub(crate) fn slice_range(start: &[u64], dims: &[u64]) -> Attrs {
    let mut a = ints("start", start.iter().copied());
    a.extend(ints("limit", start.iter().zip(dims).map(|(s, d)| s + d)));
    a
}

/// Attributes of a `slice` of `start .. end` along `axis` of a rank-`rank` tensor, every other dim whole (limit -1:
/// to its end, static or `?`).
pub(crate) fn slice_along(rank: usize, axis: usize, (start, end): (u64, u64)) -> Attrs {
    let mut a = ints("start", (0..rank).map(|i| if i == axis { start } else { 0 }));
    a.insert("limit".into(), Attr::Ints((0..rank).map(|i| if i == axis { as_i64(end) } else { -1 }).collect()));
    a
}

/// Attributes of a `slice` of the leading `dims` of a tensor (start 0, stride 1).
pub(crate) fn slice_to(dims: &[u64]) -> Attrs {
    slice_range(&vec![0; dims.len()], dims)
}
