//! [`PackedConstantHandling::Keep`](crate::PackedConstantHandling::Keep): a packed weight becomes its planes
//! ([`crate::planar`]) and the ops that use it become ops on the planes, so that IREE reads the integer codes in
//! its matrix products and never materializes the f32 weight for them.
//!
//! For a packed `W [N, K]` (blocks along `K`), with `A` the per-sub-block scale and `C` the offset term:
//! - `matmul(x, transpose(W))` (a linear layer, `x [.., K]` of static shape): `x` as `[Kb, P, B]` sub-blocks,
//!   one batched `matmul` with the converted codes `[Kb, B, N]`, times `A`, summed over the sub-blocks, plus
//!   `Σ_l x · C` when the format has an offset term;
//! - `gather(W, ids)` (an embedding, `ids` of any shape, `?` dims included: a prefill's token ids): the codes,
//!   `A` and `C` gathered by columns, scaled, reshaped to `[K, ids..]` and transposed to `[ids.., K]`;
//! - `matmul(x, transpose(W))` with `?` dimensions in `x` (a prefill's rows, where the per-block partials would
//!   grow with the rows): the whole weight dequantized for that use alone, just before the product (a weight past
//!   16 MiB of f32 in parts, each from planes passed through an [`OpKind::After`] barrier with the previous part's
//!   product, so that IREE does not compute every part at once); written in row bands of 32 (`[N / 32, K, 32]`, a
//!   `banded` matmul) when `x`'s rows merge into one `?` and the rows dequantized at a time are a multiple of 32;
//!   for Q8_0 and 4-bit codes (Q4_0, Q4_1, Q4_K; their rows a multiple of 64) also the per-block products of `x`
//!   padded to 8, 16 and 32 rows (`FEW_ROWS`), each form reading its planes through [`OpKind::GateRows`] that give
//!   the ones not wanted for `x`'s actual rows nothing to do, 4-bit planes in groups of 64 rows, a form whose
//!   partials pass 16 MiB in column parts of the planes (`dynamic_linear_use`);
//! - any other use (including `W` or `transpose(W)` as a graph output): the whole weight dequantized from its
//!   planes in the program, once.
//!
//! The planes hold `Np ≥ N` rows ([`Split::padded_rows`]); every value computed on them is `Np` wide and sliced to
//! `N` where it leaves the rewrite.
//!
//! With `bands` (the export chooses layouts), the codes of a Q8_0 or Q4_0 weight that no use gathers rows of, whose
//! `Np` [`PLANE_BAND_ROWS`] divides, are stored in row bands ([`ConstantData::Plane`]'s `band`): the program still
//! names them `[Kb, B, Np]`, and the emitter contracts the per-block products over the stored bands (a few-rows
//! form's too: its gates and column parts become gates and slices along the band axis, so its 4-bit codes need
//! no groups) and reads every other use through a view of them. The decision depends on the weight and on
//! whether this function gathers its rows: functions that share the weight (a prefill and a decode step) declare
//! it alike unless only some of them gather it, which the export refuses with the remedy (`tapeout`'s shared-key
//! check).
//!
//! Every op the rewrite inserts has a fresh index and stands for the recorded node it replaces (the matmul, the
//! gather), or, for the values derived from the planes before any use, for the weight's first use
//! ([`Op::origin`]): a message about it names what the user recorded.

use std::collections::HashMap;

use super::{Fresh, Program, gathers_rows_of, swaps_two_dims, uses};
use crate::constant::{Constant, ConstantData};
use crate::dtype::DType;
use crate::error::{GraphError, Result};
use crate::ops::OpKind;
use crate::packed::Encoding;
use crate::planar::{Plane, Split};
use crate::shape::{Dim, Shape};
use crate::tensor::{Lent, TensorSpec};
use crate::trace::{Attr, Attrs, Op, TensorId};

static EIGHT: [u8; 4] = 8.0f32.to_le_bytes();
static MINUS_EIGHT: [u8; 4] = (-8.0f32).to_le_bytes();
static SIXTEEN: [u8; 4] = 16.0f32.to_le_bytes();

/// The f32 bytes of a scalar the rewrite uses: the formats' code offsets (8 for Q4_1 and Q4_K, 16 for Q5_1 and
/// Q5_K), their high bits' biases (−8 for 5-bit codes, 8 for 6-bit ones) and the high bits' weight 16, every one
/// checked end to end by the IREE gate. `None` for any other: [`Split::of`] has grown a value this rewrite does
/// not know.
fn scalar_bytes(v: i32) -> Option<&'static [u8; 4]> {
    match v {
        8 => Some(&EIGHT),
        -8 => Some(&MINUS_EIGHT),
        16 => Some(&SIXTEEN),
        _ => None,
    }
}

/// Rows per band of the codes of a Q8_0 or Q4_0 weight stored in row bands ([`ConstantData::Plane`]'s `band`):
/// a decode step's product reads `[Kb, 32, 32]` codes per band, contiguous, which IREE 3.13 gives one workgroup
/// each under the tuning spec (`tapeout_hlo::cpu_tuning_spec`; docs/performance.md, "Codes in row bands, built").
const PLANE_BAND_ROWS: u64 = 32;

/// The largest extent the rewrite writes into an `i64` attribute (slice limits, reshaped dims).
const MAX_DIM: u64 = i64::MAX.unsigned_abs();

/// New tensors and ops, appended as the rewrite goes.
struct Builder<'s> {
    specs: &'s mut Vec<TensorSpec>,
    ops: Vec<Op>,
    /// Per op: whether it derives a value from the planes alone that several uses share (the f32 codes, `A` as
    /// `[Kb, 1, N]`, …). Those stay in the prelude wherever they were first built, so that every use sees them.
    shared: Vec<bool>,
    sharing: bool,
    /// The recorded node the ops built now stand for (see [`Op::origin`]).
    origin: Option<usize>,
    /// Fresh indices for them.
    fresh: Fresh,
}

impl Builder<'_> {
    fn tensor(&mut self, name: String, dims: &[u64], dtype: DType) -> TensorId {
        self.tensor_shaped(name, Shape::of(dims), dtype)
    }

    fn tensor_shaped(&mut self, name: String, shape: Shape, dtype: DType) -> TensorId {
        let id = TensorId::at(self.specs.len());
        self.specs.push(TensorSpec::new(name, shape, dtype));
        id
    }

    fn op_into(&mut self, op: OpKind, attrs: Attrs, inputs: &[TensorId], out: TensorId) -> TensorId {
        let op = self.fresh.op(self.origin, op, attrs, inputs.to_vec(), vec![out]);
        self.ops.push(op);
        self.shared.push(self.sharing);
        out
    }

    /// Builds a shared value with `f` (see [`Builder::shared`]).
    fn share<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        let was = std::mem::replace(&mut self.sharing, true);
        let t = f(self);
        self.sharing = was;
        t
    }

    /// The ops built since `start` for one use, which replace its node; the shared ones among them stay behind.
    fn take_use(&mut self, start: usize) -> Vec<Op> {
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

    fn op(
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
    fn op_shaped(
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
fn ints(name: &str, v: impl IntoIterator<Item = u64>) -> Attrs {
    let mut a = Attrs::new();
    a.insert(name.into(), Attr::Ints(v.into_iter().map(as_i64).collect()));
    a
}

/// An extent the rewrite has checked is at most [`MAX_DIM`], as the `i64` attributes hold.
#[allow(clippy::expect_used, reason = "an internal invariant: every extent is checked against MAX_DIM first")]
fn as_i64(d: u64) -> i64 {
    i64::try_from(d).expect("keep_packed checks that every extent it writes fits i64")
}

fn axis(a: i64) -> Attrs {
    let mut attrs = Attrs::new();
    attrs.insert("axis".into(), Attr::Int(a));
    attrs
}

/// One kept weight's planes and the shared values derived from them.
struct Planes {
    name: String,
    /// The weight's rows, and the rows its planes hold ([`Split::padded_rows`]).
    n: u64,
    np: u64,
    /// The multiple `np` is of ([`Split::row_multiple`]): a slice of sub-byte planes starts at one.
    row_multiple: u64,
    /// Whether the codes are stored in row bands of [`PLANE_BAND_ROWS`] (the emitter gates and slices them along
    /// their band axis, so sub-byte codes need no groups).
    banded: bool,
    k: u64,
    kb: u64,
    b: u64,
    quants: TensorId,
    /// The high bits of 5/6-bit codes, and the scalar 16 they are weighted by.
    high: Option<(TensorId, TensorId)>,
    high_f32: Option<TensorId>,
    codes_whole: Option<TensorId>,
    /// `A [Kb, N]` f32.
    scale: TensorId,
    /// `C [Kb, N]` f32, when the format has an offset term.
    offset: Option<TensorId>,
    /// The codes as f32 `[Kb, B, N]` and `A` as `[Kb, 1, N]`, built on first use.
    codes_f32: Option<TensorId>,
    scale_3d: Option<TensorId>,
    offset_3d: Option<TensorId>,
}

impl Planes {
    /// The high-bit plane as f32 `[Kb, B, N]`, for formats that have one.
    fn high_f32(&mut self, b: &mut Builder<'_>) -> Option<TensorId> {
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
    fn whole_codes(&mut self, b: &mut Builder<'_>) -> TensorId {
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

    fn codes_f32(&mut self, b: &mut Builder<'_>) -> TensorId {
        if let Some(t) = self.codes_f32 {
            return t;
        }
        let (q, dims) = (self.quants, [self.kb, self.b, self.np]);
        let t =
            b.share(|b| b.op(OpKind::Convert, Attrs::new(), &[q], format!("{}.qs_f32", self.name), &dims, DType::F32));
        *self.codes_f32.insert(t)
    }

    fn scale_3d(&mut self, b: &mut Builder<'_>) -> TensorId {
        if let Some(t) = self.scale_3d {
            return t;
        }
        let (a, dims) = (self.scale, [self.kb, 1, self.np]);
        let t = b.share(|b| b.op(OpKind::Reshape, Attrs::new(), &[a], format!("{}.a3", self.name), &dims, DType::F32));
        *self.scale_3d.insert(t)
    }

    fn offset_3d(&mut self, b: &mut Builder<'_>) -> Option<TensorId> {
        let c = self.offset?;
        if let Some(t) = self.offset_3d {
            return Some(t);
        }
        let dims = [self.kb, 1, self.np];
        let t = b.share(|b| b.op(OpKind::Reshape, Attrs::new(), &[c], format!("{}.c3", self.name), &dims, DType::F32));
        Some(*self.offset_3d.insert(t))
    }

    /// The whole weight, dequantized in the program, as `Wᵀ [K, N]` into `out` (the padding rows sliced off).
    fn dequantized_t(&mut self, b: &mut Builder<'_>, out: TensorId) {
        let codes = self.whole_codes(b);
        let name = self.name.clone();
        self.scaled_t(b, codes, &name, (0, self.np), None, out);
    }

    /// Rows `start .. start + len` of the planes (a multiple of the rows they are padded to) dequantized for one use
    /// only. Its ops are not shared, and they are written just before the product: IREE 3.13 then computes this f32
    /// copy about when the product needs it. With `wait`, the planes are read after `wait` is computed
    /// ([`OpKind::After`]): a weight dequantized in parts orders each part after the previous part's product, since
    /// IREE computed every part at once otherwise (docs/performance.md, "A prefill without a barrier per weight").
    /// With `gate` (on `x`, the product's rows), every plane is read through a [`OpKind::GateRows`] that empties
    /// its blocks when `x` has at most the gate's `above` rows (a few-rows form is taken then): its `K` is `?`.
    ///
    /// With `bands`, when [`BAND_COLUMNS`] divides `len`, the part is written in row bands (every plane transposed to
    /// `[len / T, Kb, B, T]` before the arithmetic, so IREE writes the bands in the dequantizing dispatch itself)
    /// for a `banded` matmul: IREE 3.13's f32 product over a `[K, N]` weight whose rows are 4 KiB apart (`N` =
    /// 1024) runs at half the speed of the same product over bands (docs/performance.md, "A prefill's dequantized
    /// weight in row bands"). Otherwise `Wᵀ [K, rows]` (padding rows sliced off).
    fn dequantized_part(
        &mut self,
        b: &mut Builder<'_>,
        wait: Option<TensorId>,
        label: &str,
        rows: (u64, u64),
        gate: Option<Gate>,
        bands: bool,
    ) -> Dequantized {
        let (first, len) = rows;
        let (all, dims) = ([self.kb, self.b, self.np], [self.kb, self.b, len]);
        let bands = bands && len % BAND_COLUMNS == 0;
        let (kb, bs, np) = (self.kb, self.b, self.np);
        // The block extent of every value after the gate: `?` when gated.
        let kb_dim = if gate.is_some() { Dim::Dynamic } else { Dim::Static(kb) };
        let rows_of = |b: &mut Builder<'_>, plane: TensorId, suffix: &str| {
            let dtype = b.specs[plane.index()].dtype;
            let p = match wait {
                Some(w) => b.op(OpKind::After, Attrs::new(), &[plane, w], format!("{label}.{suffix}"), &all, dtype),
                None => plane,
            };
            let p = plane_rows(b, p, (label, suffix), (kb, bs, np), rows, gate);
            if bands { in_bands(b, p, [kb_dim, Dim::Static(bs)], len, format!("{label}.{suffix}_bands")) } else { p }
        };
        let shape = if bands {
            Shape(vec![Dim::Static(len / BAND_COLUMNS), kb_dim, Dim::Static(bs), Dim::Static(BAND_COLUMNS)])
        } else {
            blocks_shape(&dims, gate.is_some())
        };
        let q = rows_of(b, self.quants, "qs");
        let f32_op = |b: &mut Builder<'_>, op: OpKind, ins: &[TensorId], name: String| {
            b.op_shaped(op, Attrs::new(), ins, name, shape.clone(), DType::F32)
        };
        let mut codes = f32_op(b, OpKind::Convert, &[q], format!("{label}.qs_f32"));
        if let Some((h, sixteen)) = self.high {
            let hq = rows_of(b, h, "qh");
            let hf = f32_op(b, OpKind::Convert, &[hq], format!("{label}.qh_f32"));
            let h16 = f32_op(b, OpKind::Mul, &[hf, sixteen], format!("{label}.qh16"));
            codes = f32_op(b, OpKind::Add, &[codes, h16], format!("{label}.codes"));
        }
        if !bands {
            let wt_shape = blocks_shape(&[self.k, len.min(self.n.saturating_sub(first))], gate.is_some());
            let wt = b.tensor_shaped(format!("{label}.wt"), wt_shape, DType::F32);
            self.scaled_t(b, codes, label, rows, gate, wt);
            return Dequantized::Transposed(wt);
        }
        let part = |b: &mut Builder<'_>, t: TensorId, suffix: &str| {
            let t = plane_rows(b, t, (label, suffix), (kb, 1, np), rows, gate);
            in_bands(b, t, [kb_dim, Dim::Static(1)], len, format!("{label}.{suffix}_bands"))
        };
        let v = self.scaled(b, codes, label, &shape, part);
        let k = if gate.is_some() { Dim::Dynamic } else { Dim::Static(self.k) };
        let banded = Shape(vec![Dim::Static(len / BAND_COLUMNS), k, Dim::Static(BAND_COLUMNS)]);
        Dequantized::Bands(b.op_shaped(OpKind::Reshape, Attrs::new(), &[v], format!("{label}.wb"), banded, DType::F32))
    }

    /// The codes (f32, of `shape`) times `A`, plus `C` when the format has one, each read through `part` (the
    /// plane rows a use takes, gated, in its layout).
    fn scaled(
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
    /// scaled, offset, reshaped, and the padding rows among them sliced off. With `gate`, the codes are `[Kb or
    /// 0, B, len]` ([`Planes::dequantized_part`]) and `A` and `C` are gated alike.
    fn scaled_t(
        &mut self,
        b: &mut Builder<'_>,
        codes: TensorId,
        label: &str,
        rows: (u64, u64),
        gate: Option<Gate>,
        out: TensorId,
    ) {
        let (first, len) = rows;
        let (kb, np) = (self.kb, self.np);
        let shape = blocks_shape(&[kb, self.b, len], gate.is_some());
        let part =
            |b: &mut Builder<'_>, t: TensorId, suffix: &str| plane_rows(b, t, (label, suffix), (kb, 1, np), rows, gate);
        let v = self.scaled(b, codes, label, &shape, part);
        let real = len.min(self.n.saturating_sub(first));
        if real == len {
            b.op_into(OpKind::Reshape, Attrs::new(), &[v], out);
        } else {
            let padded_shape = blocks_shape(&[self.k, len], gate.is_some());
            let padded =
                b.op_shaped(OpKind::Reshape, Attrs::new(), &[v], format!("{label}.tp"), padded_shape, DType::F32);
            let mut at = slice_to(&[self.k, real]);
            // A gated `K` is `?`: its slice runs to the end.
            if let (Some(_), Some(Attr::Ints(limit))) = (gate, at.get_mut("limit")) {
                limit[0] = -1;
            }
            b.op_into(OpKind::Slice, at, &[padded], out);
        }
    }

    /// The plane rows a `?`-row product dequantizes at a time: `[start, len)` ranges, each a multiple of the rows
    /// the planes are padded to and at most [`DEQUANTIZED_BYTES`] of f32 (one range when the whole weight is).
    fn row_chunks(&self) -> Vec<(u64, u64)> {
        let per = (DEQUANTIZED_BYTES / self.k.saturating_mul(4).max(1)).max(1);
        // A multiple of the band width as well where a part holds that many rows, so that every part but the
        // last is dequantized in row bands ([`Planes::dequantized_part`]).
        let banded = lcm(self.row_multiple, BAND_COLUMNS);
        let unit = if per >= banded { banded } else { self.row_multiple };
        let per = (per / unit).max(1).saturating_mul(unit);
        let mut chunks = Vec::new();
        let mut first = 0;
        while first < self.n {
            let len = per.min(self.np - first);
            chunks.push((first, len));
            first += len;
        }
        chunks
    }
}

/// The plane rows (`[first, len)` of the planes' `np`) each part of a few-rows product of `rows` rows computes, for
/// planes of `kb` blocks ([`few_rows_product`]): all of them when the per-block partials (`4·kb·rows·np` bytes) take
/// at most [`DEQUANTIZED_BYTES`], otherwise parts of at most [`FEW_ROWS_PART_BYTES`] of partials, each `len` a
/// multiple of `unit` (the planes' row multiple and their column groups; `np` is one). `None` (no such form) when
/// one `unit` alone would pass that (a `K` past 32768 at 32 rows), rather than a form of hundreds of parts.
fn few_rows_chunks(kb: u64, np: u64, rows: u32, unit: u64) -> Option<Vec<(u64, u64)>> {
    let per_plane_row = kb.checked_mul(u64::from(rows))?.checked_mul(4)?;
    if per_plane_row.checked_mul(np)? <= DEQUANTIZED_BYTES {
        return Some(vec![(0, np)]);
    }
    let per = (FEW_ROWS_PART_BYTES / per_plane_row.max(1)) / unit.max(1) * unit;
    if per == 0 {
        return None;
    }
    let mut chunks = Vec::new();
    let mut first = 0;
    while first < np {
        let len = per.min(np - first);
        chunks.push((first, len));
        first += len;
    }
    Some(chunks)
}

/// The least common multiple of two row counts (both at least 1), saturating.
fn lcm(a: u64, b: u64) -> u64 {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    (a / x.max(1)).saturating_mul(b)
}

/// A part of a weight dequantized for one `?`-row product ([`Planes::dequantized_part`]).
enum Dequantized {
    /// `Wᵀ [K, rows]`, padding rows sliced off: a plain `matmul` reads it.
    Transposed(TensorId),
    /// `[len / BAND_COLUMNS, K, BAND_COLUMNS]`, the part's plane rows (padding included) in row bands: a `banded`
    /// `matmul` reads it, and its result is sliced to the real rows.
    Bands(TensorId),
}

/// The columns of one row band of a weight dequantized for a `?`-row product: the width of the stored bf16 bands,
/// whose contraction IREE 3.13 compiles well (docs/performance.md, "One contraction over the stored bands").
const BAND_COLUMNS: u64 = 32;

/// Plane `t` (`[Kb, B, Np]`: codes, high bits, or `A` or `C` with `B` = 1) as the rows `first .. first + len` a
/// use reads (sliced unless that is all `np` of them), through a [`OpKind::GateRows`] on `gate`'s rows (emptying its
/// blocks) when there is one.
fn plane_rows(
    b: &mut Builder<'_>,
    t: TensorId,
    (label, suffix): (&str, &str),
    (kb, bs, np): (u64, u64, u64),
    (first, len): (u64, u64),
    gate: Option<Gate>,
) -> TensorId {
    let dtype = b.specs[t.index()].dtype;
    let t = if len == np {
        t
    } else {
        let at = slice_range(&[0, 0, first], &[kb, bs, len]);
        b.op(OpKind::Slice, at, &[t], format!("{label}.{suffix}_rows"), &[kb, bs, len], dtype)
    };
    match gate {
        Some(g) => gated(b, t, g.x, (false, g.above), 0, format!("{label}.{suffix}_g")),
        None => t,
    }
}

/// `t [D0, D1, len]` (a plane's `len` rows last, a multiple of [`BAND_COLUMNS`]; `lead` its `D0, D1`) in row bands
/// of that many: `[len / T, D0, D1, T]`, a reshape and a transpose.
fn in_bands(b: &mut Builder<'_>, t: TensorId, lead: [Dim; 2], len: u64, name: String) -> TensorId {
    let dtype = b.specs[t.index()].dtype;
    let (bands, cols) = (Dim::Static(len / BAND_COLUMNS), Dim::Static(BAND_COLUMNS));
    let split = Shape(vec![lead[0], lead[1], bands, cols]);
    let split = b.op_shaped(OpKind::Reshape, Attrs::new(), &[t], format!("{name}4"), split, dtype);
    let moved = Shape(vec![bands, lead[0], lead[1], cols]);
    b.op_shaped(OpKind::Transpose, ints("perm", [2, 0, 1, 3]), &[split], name, moved, dtype)
}

/// The most f32 bytes of one weight a `?`-row product dequantizes at a time (an LM head's 131 MB is dequantized in
/// 16 MiB parts, each consumed while it is still in the last-level cache, one after the other).
const DEQUANTIZED_BYTES: u64 = 16 << 20;

/// The most bytes of per-block partials one column part of a few-rows product computes, for a form whose partials
/// pass [`DEQUANTIZED_BYTES`] ([`few_rows_chunks`]). Measured at 7B widths (docs/performance.md, "The
/// few-rows forms at 7B widths"): parts of 4, 8 and 16 MiB ran prefills equally fast; their peak memory was 30, 62
/// and 130 MB above the dequantized weights', their compile 5.9, 3.2 and 2.2 times as long (more dispatches).
const FEW_ROWS_PART_BYTES: u64 = 8 << 20;

/// Attributes of a `slice` of extents `dims` from `start` (stride 1).
fn slice_range(start: &[u64], dims: &[u64]) -> Attrs {
    let mut a = ints("start", start.iter().copied());
    a.extend(ints("limit", start.iter().zip(dims).map(|(s, d)| s + d)));
    a
}

/// Attributes of a `slice` of `start .. end` along `axis` of a rank-`rank` tensor, every other dim whole (limit -1:
/// to its end, static or `?`).
fn slice_along(rank: usize, axis: usize, (start, end): (u64, u64)) -> Attrs {
    let mut a = ints("start", (0..rank).map(|i| if i == axis { start } else { 0 }));
    a.insert("limit".into(), Attr::Ints((0..rank).map(|i| if i == axis { as_i64(end) } else { -1 }).collect()));
    a
}

/// Attributes of a `slice` of the leading `dims` of a tensor (start 0, stride 1).
fn slice_to(dims: &[u64]) -> Attrs {
    slice_range(&vec![0; dims.len()], dims)
}

/// Rewrites every packed constant that is to be dequantized ([`ConstantData::Dequantize`]) and splits into planes;
/// see the module docs.
///
/// # Errors
/// [`GraphError::CannotKeepPacked`] for a weight that cannot be kept packed in its shape;
/// [`GraphError::PassBroke`] when a format's split asks for a scalar the rewrite has no constant for.
pub(crate) fn keep_packed<'a>(program: Program<'a>, bands: bool) -> Result<Program<'a>> {
    let Program { mut specs, inputs, mut constants, mut nodes, outputs, next_index } = program;
    let specs = &mut specs;
    let uses = uses(&nodes);
    let mut fresh = Fresh::from(next_index);
    let mut prelude: Vec<Op> = Vec::new();
    let mut replaced: HashMap<usize, Vec<Op>> = HashMap::new();
    let mut removed: Vec<usize> = Vec::new();
    let mut planes_out: Vec<Constant<'a>> = Vec::new();
    let mut kept_ids = Vec::new();

    for c in constants.iter() {
        let ConstantData::Dequantize { encoding, bytes, .. } = &c.data else { continue };
        let spec = specs[c.tensor.index()].clone();
        let Some(split) = Split::of(encoding) else { continue };
        let dims = spec.shape.static_dims();
        let cannot = |why: String| GraphError::CannotKeepPacked {
            tensor: spec.label().to_owned(),
            encoding: encoding.name().to_owned(),
            detail: why,
        };
        let Some(&[n, k]) = dims.as_deref() else {
            return Err(cannot(format!(
                "it is [{}]; only a rank-2 [rows, cols] weight can be kept packed",
                spec.shape
            )));
        };
        if n > MAX_DIM || k > MAX_DIM {
            return Err(cannot(format!("its [{n}, {k}] has an extent past {MAX_DIM}")));
        }
        if k % split.block_values != 0 {
            return Err(cannot(format!("its rows of {k} values are not whole {}-value blocks", split.block_values)));
        }
        // Every plane holds `np` rows (`n` rounded up to a multiple IREE reads sub-byte codes right at; the extra
        // rows are zero) and the program computes on `np`, slicing the `n` real rows out of its results.
        let np = split
            .padded_rows(n)
            .filter(|&np| np <= MAX_DIM)
            .ok_or_else(|| cannot(format!("its {n} rows cannot be padded")))?;
        kept_ids.push(c.tensor);
        let (kb, ks, bsub) = (k / split.sub_values, k / split.block_values, split.sub_values);
        // The planes' shared values stand for the weight's first use (none when it is only a graph output).
        let first_use = uses.get(&c.tensor).and_then(|u| u.first()).and_then(|&i| nodes[i].origin());
        let mut b = Builder { specs, ops: Vec::new(), shared: Vec::new(), sharing: false, origin: first_use, fresh };
        let name = spec.name.clone();

        // Q8_0's and Q4_0's codes in row bands, when the export chooses layouts and no use gathers rows of the
        // weight (an embedding reads the codes by rows: `[Kb, B, Np]` keeps each row's codes in place for it).
        let gathered = uses.get(&c.tensor).is_some_and(|u| u.iter().any(|&i| gathers_rows_of(&nodes[i], c.tensor)));
        let band = (bands
            && matches!(encoding, Encoding::Q8_0 | Encoding::Q4_0)
            && kb > 0
            && np > 0
            && np % PLANE_BAND_ROWS == 0
            && !gathered)
            .then_some(PLANE_BAND_ROWS);

        // The planes, as constants of their own.
        let mut plane_ids = HashMap::new();
        for p in split.planes(encoding) {
            let pdims: Vec<u64> = match p {
                Plane::Quants | Plane::QuantsHigh => vec![kb, bsub, np],
                // K-quants' `d` and `dmin` are per super-block; every other number is per sub-block.
                Plane::Scale | Plane::SuperMin if split.two_level => vec![ks, np],
                Plane::Scale | Plane::SuperMin | Plane::Min | Plane::SubScales | Plane::SubMins => vec![kb, np],
            };
            let t = b.tensor(format!("{name}.{}", p.suffix()), &pdims, split.dtype(p));
            plane_ids.insert(p, t);
            let data = ConstantData::Plane {
                encoding: encoding.clone(),
                bytes: *bytes,
                dims: [n, k],
                padded_rows: np,
                plane: p,
                band: band.filter(|_| p == Plane::Quants),
            };
            planes_out.push(Constant { tensor: t, key: format!("{}.{}", c.key, p.suffix()), data });
        }
        // One constant per scalar value and weight, however many terms use it (Q5_1 and Q5_K offset their codes
        // by 16 and weight their high bits by 16): keys stay unique.
        let mut scalars: HashMap<i32, TensorId> = HashMap::new();
        let mut scalar = |b: &mut Builder<'_>, planes_out: &mut Vec<Constant<'a>>, v: i32| {
            if let Some(&t) = scalars.get(&v) {
                return Ok(t);
            }
            let Some(bytes) = scalar_bytes(v) else {
                return Err(GraphError::PassBroke {
                    pass: "keep_packed",
                    node: format!("weight '{}'", spec.label()),
                    detail: format!("the {encoding} planes need the scalar {v}, which the rewrite has no constant for"),
                });
            };
            let t = b.tensor(format!("{name}.const{v}"), &[], DType::F32);
            planes_out.push(Constant {
                tensor: t,
                key: format!("{}.const{v}", c.key),
                data: ConstantData::Raw { dtype: DType::F32, bytes: Lent::Slice(bytes) },
            });
            scalars.insert(v, t);
            Ok(t)
        };
        let f32_of = |b: &mut Builder<'_>, p: Plane, dims: &[u64]| {
            b.op(
                OpKind::Convert,
                Attrs::new(),
                &[plane_ids[&p]],
                format!("{name}.{}_f32", p.suffix()),
                dims,
                DType::F32,
            )
        };
        // A [Kb, N] and C [Kb, N].
        let per_super = |b: &mut Builder<'_>, t: TensorId, what: &str| {
            let spread = b.op(
                OpKind::Broadcast,
                ints("dims", [0, 2]),
                &[t],
                format!("{name}.{what}_b"),
                &[ks, kb / ks, np],
                DType::F32,
            );
            b.op(OpKind::Reshape, Attrs::new(), &[spread], format!("{name}.{what}_kb"), &[kb, np], DType::F32)
        };
        let scale = if split.two_level {
            let d = f32_of(&mut b, Plane::Scale, &[ks, np]);
            let d = per_super(&mut b, d, "d");
            let sc = f32_of(&mut b, Plane::SubScales, &[kb, np]);
            b.op(OpKind::Mul, Attrs::new(), &[d, sc], format!("{name}.a"), &[kb, np], DType::F32)
        } else {
            f32_of(&mut b, Plane::Scale, &[kb, np])
        };
        let base_offset = if split.has_offset_term {
            let o = scalar(&mut b, &mut planes_out, split.offset)?;
            let oa = b.op(OpKind::Mul, Attrs::new(), &[scale, o], format!("{name}.oa"), &[kb, np], DType::F32);
            Some(if split.two_level {
                let dmin = f32_of(&mut b, Plane::SuperMin, &[ks, np]);
                let dmin = per_super(&mut b, dmin, "dmin");
                let mn = f32_of(&mut b, Plane::SubMins, &[kb, np]);
                let m = b.op(OpKind::Mul, Attrs::new(), &[dmin, mn], format!("{name}.mk"), &[kb, np], DType::F32);
                b.op(OpKind::Sub, Attrs::new(), &[oa, m], format!("{name}.c"), &[kb, np], DType::F32)
            } else {
                let m = f32_of(&mut b, Plane::Min, &[kb, np]);
                b.op(OpKind::Add, Attrs::new(), &[oa, m], format!("{name}.c"), &[kb, np], DType::F32)
            })
        } else {
            None
        };
        // With a high plane the contracted codes are `qs + 16·qh`; the bias that centres them joins C.
        let (offset, high) = match split.high {
            Some(hb) => {
                let bias = scalar(&mut b, &mut planes_out, hb.bias)?;
                let ba = b.op(OpKind::Mul, Attrs::new(), &[scale, bias], format!("{name}.ba"), &[kb, np], DType::F32);
                let c = match base_offset {
                    Some(c) => b.op(OpKind::Add, Attrs::new(), &[c, ba], format!("{name}.cb"), &[kb, np], DType::F32),
                    None => ba,
                };
                let sixteen = scalar(&mut b, &mut planes_out, 16)?;
                (Some(c), Some((plane_ids[&Plane::QuantsHigh], sixteen)))
            }
            None => (base_offset, None),
        };
        let mut pl = Planes {
            name: name.clone(),
            n,
            np,
            row_multiple: split.row_multiple(),
            banded: band.is_some(),
            k,
            kb,
            b: bsub,
            quants: plane_ids[&Plane::Quants],
            high,
            high_f32: None,
            codes_whole: None,
            scale,
            offset,
            codes_f32: None,
            scale_3d: None,
            offset_3d: None,
        };

        // Each use.
        let mut needs_whole = outputs.contains(&c.tensor);
        // The first recorded node that needs the whole weight, which its dequantization stands for.
        let mut whole_for = None;
        for &i in uses.get(&c.tensor).map(Vec::as_slice).unwrap_or(&[]) {
            let node = &nodes[i];
            if swaps_two_dims(node) && node.outputs.len() == 1 {
                let tt = node.outputs[0];
                removed.push(i);
                let mut tt_whole = outputs.contains(&tt);
                for &j in uses.get(&tt).map(Vec::as_slice).unwrap_or(&[]) {
                    let m = &nodes[j];
                    let Some(how) = linear_of(m, tt, b.specs, k, &replaced, j) else {
                        tt_whole = true;
                        continue;
                    };
                    b.origin = m.origin();
                    let start = b.ops.len();
                    match how {
                        Linear::PerBlock(xd) => linear_use(&mut b, &mut pl, m.inputs[0], &xd, m.outputs[0]),
                        Linear::Dynamic => dynamic_linear_use(&mut b, &mut pl, m),
                    }
                    let seq = b.take_use(start);
                    replaced.insert(j, seq);
                }
                if tt_whole {
                    b.origin = node.origin();
                    pl.dequantized_t(&mut b, tt);
                }
                continue;
            }
            match gather_ids(node, c.tensor, b.specs, &replaced, i) {
                Some(ids) => {
                    b.origin = node.origin();
                    let start = b.ops.len();
                    gather_use(&mut b, &mut pl, node.inputs[1], &ids, node.outputs[0]);
                    let seq = b.take_use(start);
                    replaced.insert(i, seq);
                }
                None => {
                    needs_whole = true;
                    whole_for = whole_for.or(node.origin());
                }
            }
        }
        if needs_whole {
            b.origin = whole_for.or(first_use);
            // W itself, for uses that need every value: dequantized as Wᵀ, then transposed back.
            let wt = b.tensor(format!("{name}.t"), &[k, n], DType::F32);
            pl.dequantized_t(&mut b, wt);
            b.op_into(OpKind::Transpose, ints("perm", [1, 0]), &[wt], c.tensor);
        }
        prelude.append(&mut b.ops);
        fresh = b.fresh;
    }
    let next_index = fresh.next();
    if kept_ids.is_empty() {
        return Ok(Program { specs: std::mem::take(specs), inputs, constants, nodes, outputs, next_index });
    }
    constants.retain(|c| !kept_ids.contains(&c.tensor));
    constants.append(&mut planes_out);
    let old = std::mem::take(&mut nodes);
    nodes.append(&mut prelude);
    for (i, node) in old.into_iter().enumerate() {
        if let Some(seq) = replaced.remove(&i) {
            nodes.extend(seq);
        } else if !removed.contains(&i) {
            nodes.push(node);
        }
    }
    Ok(Program { specs: std::mem::take(specs), inputs, constants, nodes, outputs, next_index })
}

/// How a linear layer `matmul(x, tt)` is rewritten on the planes.
enum Linear {
    /// `x` of these static dims: contracted per block ([`linear_use`]).
    PerBlock(Vec<u64>),
    /// `x [.., K]` with `?` dimensions (a prefill's rows), where the per-block product's partials grow with the rows:
    /// the weight dequantized for it alone ([`dynamic_linear_use`]).
    Dynamic,
}

/// How `m` is rewritten when it is a linear layer `matmul(x, tt)` of an f32 `x [.., K]` not rewritten yet.
fn linear_of(
    m: &Op,
    tt: TensorId,
    specs: &[TensorSpec],
    k: u64,
    replaced: &HashMap<usize, Vec<Op>>,
    j: usize,
) -> Option<Linear> {
    let linear = m.op == OpKind::Matmul && m.inputs.get(1) == Some(&tt) && m.inputs.first() != Some(&tt);
    let x = m.inputs.first().map(|x| &specs[x.index()]).filter(|x| x.dtype == DType::F32)?;
    if !linear || m.outputs.len() != 1 || replaced.contains_key(&j) || x.shape.0.last() != Some(&Dim::Static(k)) {
        return None;
    }
    let Some(xd) = x.shape.static_dims() else { return Some(Linear::Dynamic) };
    // `x` is contracted as `[P, Kb, B]`: `P`, its leading extents' product, is written into a slice's limits.
    let (_, lead) = xd.split_last()?;
    lead.iter().try_fold(1u64, |p, &d| p.checked_mul(d)).filter(|&p| p <= MAX_DIM)?;
    Some(Linear::PerBlock(xd))
}

/// The row counts up to which a `?`-row product of a kept weight takes the per-block product of its rows padded to
/// that many: up to 8 rows padded to 8, 9 to 16 padded to 16, 17 to 32 padded to 32, more the dequantized weight's
/// product. Measured on a 1024 -> 2816 Q8_0 linear (docs/performance.md, "A few rows of a kept weight"): the static
/// per-block product at 8 rows is 3-4x faster than the dequantized weight's product; at 16 rows 2x, level from 24
/// on, where its partials (`4·Kb·rows·N` bytes) reach the dequantized weight's `4·K·N`. Whole prefills of a 156M
/// Llama (docs/performance.md, "Prompts of 9 to 16 tokens"): the 16-row form alone took 35-39 ms at 1-16 tokens,
/// the 8-row one 18-28 ms at 1-8 and the dequantized weights 55-61 ms at 9-16, so both forms are written; a 32-row
/// form likewise made 17-32 tokens 1.3-1.55x (Q4_0) and 1.1-1.35x (Q8_0) faster, longer prompts unchanged.
/// Ascending: each form is gated open above the one before it. A form whose partials pass 16 MiB
/// (`DEQUANTIZED_BYTES`) is computed in column parts (`FEW_ROWS_PART_BYTES`; at 7B widths every form is: 1-32-token
/// prefills 1.5-2.3x faster there, docs/performance.md, "The few-rows forms at 7B widths"). Public for the tuning
/// spec (`tapeout-hlo`), which tiles each form's product by a matcher of its own.
pub const FEW_ROWS: [u32; 3] = [8, 16, 32];

/// A gate on the row count of `x` ([`OpKind::GateRows`]): the gated value is whole when `x` has more than `above`
/// rows (the dequantized weight's product; `above` the largest few-rows form's rows).
#[derive(Clone, Copy)]
struct Gate {
    x: TensorId,
    above: u32,
}

/// `Shape` of `dims`, with the first dimension `?` when `gated` (a plane's blocks read through a [`OpKind::GateRows`]).
fn blocks_shape(dims: &[u64], gated: bool) -> Shape {
    let mut s = Shape::of(dims);
    if gated {
        s.0[0] = Dim::Dynamic;
    }
    s
}

/// Whether the rows of `x [.., K]` (its dims before `K`) are read as one `[?]` and back: one `?` among them and
/// no dim after it but 1s (`[?, K]`, HF's `[1, ?, K]`, `[2, ?, K]`, `[?, 1, K]`). A `[?, 2, K]` would need the `?`
/// split, which the emitter refuses.
fn one_row_dim(x: &Shape) -> bool {
    let lead = &x.0[..x.rank().saturating_sub(1)];
    lead.iter().filter(|d| **d == Dim::Dynamic).count() == 1
        && lead.iter().skip_while(|d| **d != Dim::Dynamic).skip(1).all(|d| *d == Dim::Static(1))
}

/// `t` through a [`OpKind::GateRows`] on `x`'s rows along `axis`: whole when "at most `rows` rows" is `few`.
fn gated(b: &mut Builder<'_>, t: TensorId, x: TensorId, (few, rows): (bool, u32), axis: u8, name: String) -> TensorId {
    let spec = &b.specs[t.index()];
    let (mut shape, dtype) = (spec.shape.clone(), spec.dtype);
    shape.0[usize::from(axis)] = Dim::Dynamic;
    let mut attrs = rows_attrs(rows);
    attrs.insert("few".into(), Attr::Bool(few));
    attrs.insert("axis".into(), Attr::Int(i64::from(axis)));
    b.op_shaped(OpKind::GateRows, attrs, &[t, x], name, shape, dtype)
}

fn rows_attrs(rows: u32) -> Attrs {
    let mut a = Attrs::new();
    a.insert("rows".into(), Attr::Int(i64::from(rows)));
    a
}

/// The columns per group in which a few-rows product reads sub-byte planes ([`few_rows_product`]).
const GROUP_COLUMNS: u64 = 64;

/// `y = x @ Wᵀ` for `x` with `?` rows ([`Linear::Dynamic`]). When `x` has one `?` dimension: the per-block product
/// of `x` padded to each of [`FEW_ROWS`] ([`few_rows_product`], in column parts past [`DEQUANTIZED_BYTES`])
/// and the dequantized weight's product ([`dequantized_product`]), each reading the planes through
/// [`OpKind::GateRows`] that leave every form but the one for `x`'s rows without work (the 8-row form up to 8 rows,
/// the 16-row one 9 to 16, the 32-row one 17 to 32, the dequantized weight more); the few-rows forms' rows placed
/// into the dequantized product's ([`OpKind::PlaceRows`], the largest form first: a form gated shut has no columns,
/// and a placement short of the columns places nothing). No branch: IREE 3.13 would end its stream execution at
/// each `scf.if` (docs/performance.md). Sub-byte codes are gated in groups of [`GROUP_COLUMNS`] columns, so they need rows a
/// multiple of it (codes in row bands are not: the emitter gates their band axis); formats with high bits (Q5_x,
/// Q6_K) are not gated. Otherwise the dequantized weight's product alone.
fn dynamic_linear_use(b: &mut Builder<'_>, pl: &mut Planes, m: &Op) {
    let (x, y) = (m.inputs[0], m.outputs[0]);
    // The padded products' `[rows, N]` are placed into `y` viewed as `[?, N]`.
    let one_dynamic = one_row_dim(&b.specs[x.index()].shape);
    // Gating a sub-byte plane's rows (its packed axis) to a `?` extent makes IREE 3.13 emit masked loads it cannot
    // emulate ("failed to emulate bit width"): `i4` codes (Q4_0, Q4_1, Q4_K) are read as `[.., Np / 64, 64]` and
    // gated along their groups, which needs `Np` a multiple of 64 (always so today: sub-byte planes hold rows
    // padded to 64, `Split::padded_rows`). The `i2` / `i1` high bits of 5- and 6-bit codes still give masked loads
    // so (their products' vector tiles are 4 wide): those formats keep the dequantized form.
    // Codes in row bands are gated along their band axis (the emitter's), never along their packed one: no groups.
    let codes = b.specs[pl.quants.index()].dtype;
    let group = (codes.is_sub_byte() && !pl.banded).then_some(GROUP_COLUMNS);
    let grouped =
        pl.high.is_none() && (!codes.is_sub_byte() || codes == DType::I4) && group.is_none_or(|t| pl.np % t == 0);
    // Each form's column parts: a part starts at a multiple of the planes' rows and of their groups (or bands).
    let band = if pl.banded { PLANE_BAND_ROWS } else { 1 };
    let unit = lcm(lcm(pl.row_multiple, group.unwrap_or(1)), band);
    let tiers: Vec<(u32, Vec<(u64, u64)>)> =
        FEW_ROWS.into_iter().filter_map(|r| few_rows_chunks(pl.kb, pl.np, r, unit).map(|c| (r, c))).collect();
    let Some(&(top, _)) = tiers.last().filter(|_| one_dynamic && grouped) else {
        dequantized_product(b, pl, m, y, None);
        return;
    };
    let label = b.specs[y.index()].name.clone();
    let y_shape = b.specs[y.index()].shape.clone();
    let mut base = b.tensor_shaped(format!("{label}.many"), y_shape.clone(), DType::F32);
    dequantized_product(b, pl, m, base, Some(Gate { x, above: top }));
    for (i, (rows, chunks)) in tiers.iter().enumerate().rev() {
        let (rows, below) = (*rows, i.checked_sub(1).and_then(|j| tiers.get(j)).map(|t| t.0));
        let small = few_rows_product(b, pl, (x, &label), (group, chunks), (below, rows));
        let into = if i == 0 { y } else { b.tensor_shaped(format!("{label}.upto{rows}"), y_shape.clone(), DType::F32) };
        b.op_into(OpKind::PlaceRows, rows_attrs(rows), &[small, base], into);
        base = into;
    }
}

/// `x @ Wᵀ` per block for `x` padded to `rows` rows ([`OpKind::PadRows`]), as `[rows, Np or 0]`: every plane read
/// through [`OpKind::GateRows`] that empty it unless `x` has at most `rows` rows and, with `below` (the next
/// smaller form's rows), more than `below`. With `group` (`T`), each plane `[.., Np]` is read as `[.., Np / T, T]`
/// and gated along its groups, every value computed on it is `[.., ?, T]` (the products `[Kb, rows, ?, T]`: IREE
/// keeps the codes' groups whole) and the sum over blocks is read as `[rows, ?]` at the end. Computed in the column
/// parts `chunks` ([`few_rows_chunks`]: one, or past [`DEQUANTIZED_BYTES`] of partials parts of at most
/// [`FEW_ROWS_PART_BYTES`], at 7B widths 6 to 32 of them), the parts concatenated along the columns. Codes without
/// high bits only (Q8_0, the 4-bit formats).
fn few_rows_product(
    b: &mut Builder<'_>,
    pl: &mut Planes,
    (x, label): (TensorId, &str),
    (group, chunks): (Option<u64>, &[(u64, u64)]),
    (below, rows): (Option<u32>, u32),
) -> TensorId {
    let (kb, bs, r) = (pl.kb, pl.b, u64::from(rows));
    let xp = b.op(OpKind::PadRows, rows_attrs(rows), &[x], format!("{label}.x{r}"), &[r, pl.k], DType::F32);
    let xb = b.op(OpKind::Reshape, Attrs::new(), &[xp], format!("{label}.x{r}b"), &[r, kb, bs], DType::F32);
    let xt =
        b.op(OpKind::Transpose, ints("perm", [1, 0, 2]), &[xb], format!("{label}.x{r}t"), &[kb, r, bs], DType::F32);
    // `Σ_l x` per block (the offset term's), made by the first part and shared by the others.
    let mut xst = None;
    let mut parts = Vec::with_capacity(chunks.len());
    for (i, &cols) in chunks.iter().enumerate() {
        let name = if chunks.len() == 1 { label.to_string() } else { format!("{label}.p{i}") };
        let part = few_rows_part(b, pl, (x, xt, &mut xst), (&name, group), (below, rows), cols);
        parts.push(part);
    }
    match parts.as_slice() {
        [one] => *one,
        _ => {
            let shape = Shape(vec![Dim::Static(r), Dim::Dynamic]);
            b.op_shaped(OpKind::Concat, axis(-1), &parts, format!("{label}.y{r}"), shape, DType::F32)
        }
    }
}

/// One column part (plane rows `first .. first + len`) of [`few_rows_product`], as `[rows, len or 0]`. Each plane
/// is read in its groups first and the part's groups sliced from those: the slice and the gate after it are then
/// on one axis, which IREE 3.13 composes into one read in place (a slice along `Np` before the groups became a copy
/// of the planes every call, gated or not; docs/performance.md, "The few-rows forms at 7B widths").
fn few_rows_part(
    b: &mut Builder<'_>,
    pl: &mut Planes,
    (x, xt, xst): (TensorId, TensorId, &mut Option<TensorId>),
    (label, group): (&str, Option<u64>),
    (below, rows): (Option<u32>, u32),
    (first, len): (u64, u64),
) -> TensorId {
    let (kb, bs, np, r) = (pl.kb, pl.b, pl.np, u64::from(rows));
    // The dims of a value whose last dim stands for the gated columns: `[.., ?]`, or `[.., ?, T]` in groups.
    let cols = |d: &[u64]| {
        let mut s = Shape::of(d);
        if let Some(last) = s.0.last_mut() {
            *last = Dim::Dynamic;
        }
        s.0.extend(group.map(Dim::Static));
        s
    };
    // A plane `[.., Np]` (columns along `axis`, its last): its groups, this part's of them, gated.
    let gate_plane = |b: &mut Builder<'_>, plane: TensorId, axis: u8, name: String| {
        let spec = &b.specs[plane.index()];
        let (mut shape, dtype) = (spec.shape.clone(), spec.dtype);
        let t = group.unwrap_or(1);
        let plane = match group {
            Some(t) => {
                shape.0.pop();
                shape.0.extend([Dim::Static(np / t), Dim::Static(t)]);
                b.op_shaped(OpKind::Reshape, Attrs::new(), &[plane], format!("{name}g"), shape.clone(), dtype)
            }
            None => plane,
        };
        let at = usize::from(axis);
        let plane = if len == np {
            plane
        } else {
            // This part's columns (groups) along `axis`.
            let attrs = slice_along(shape.rank(), at, (first / t, (first + len) / t));
            shape.0[at] = Dim::Static(len / t);
            b.op_shaped(OpKind::Slice, attrs, &[plane], format!("{name}p"), shape, dtype)
        };
        let upto = gated(b, plane, x, (true, rows), axis, name.clone());
        match below {
            Some(below) => gated(b, upto, x, (false, below), axis, format!("{name}_above")),
            None => upto,
        }
    };
    let f32_op = |b: &mut Builder<'_>, op: OpKind, attrs: Attrs, ins: &[TensorId], name: String, d: &[u64]| {
        b.op_shaped(op, attrs, ins, name, cols(d), DType::F32)
    };
    // A product over grouped planes has its right side's columns in two dims (`matmul`'s `grouped`).
    let grouped_attrs = || if group.is_some() { flag("grouped") } else { Attrs::new() };
    // No high-bit plane: `dynamic_linear_use` keeps 5- and 6-bit codes out of this form.
    let g = gate_plane(b, pl.quants, 2, format!("{label}.qs{r}"));
    let f = f32_op(b, OpKind::Convert, Attrs::new(), &[g], format!("{label}.qs{r}_f32"), &[kb, bs, 1]);
    let s = f32_op(b, OpKind::Matmul, grouped_attrs(), &[xt, f], format!("{label}.qs{r}_s"), &[kb, r, 1]);
    let a3 = pl.scale_3d(b);
    let a = gate_plane(b, a3, 2, format!("{label}.a{r}"));
    let sa = f32_op(b, OpKind::Mul, Attrs::new(), &[s, a], format!("{label}.sa{r}"), &[kb, r, 1]);
    let mut out = f32_op(b, OpKind::ReduceSum, ints("axes", [0]), &[sa], format!("{label}.y{r}"), &[r, 1]);
    if let Some(c) = pl.offset {
        let c = gate_plane(b, c, 1, format!("{label}.c{r}"));
        let xst = *xst.get_or_insert_with(|| {
            let xs = b.op(OpKind::ReduceSum, ints("axes", [2]), &[xt], format!("{label}.x{r}s"), &[kb, r], DType::F32);
            b.op(OpKind::Transpose, ints("perm", [1, 0]), &[xs], format!("{label}.x{r}st"), &[r, kb], DType::F32)
        });
        let y1 = f32_op(b, OpKind::Matmul, grouped_attrs(), &[xst, c], format!("{label}.y{r}c"), &[r, 1]);
        out = f32_op(b, OpKind::Add, Attrs::new(), &[out, y1], format!("{label}.y{r}o"), &[r, 1]);
    }
    if group.is_some() {
        let flat = Shape(vec![Dim::Static(r), Dim::Dynamic]);
        out = b.op_shaped(OpKind::Reshape, Attrs::new(), &[out], format!("{label}.y{r}f"), flat, DType::F32);
    }
    out
}

/// `y = x @ Wᵀ` for `x` with `?` rows into `y`: the weight dequantized just before the product, or, past
/// [`DEQUANTIZED_BYTES`], part by part ([`Planes::row_chunks`]), each part after the previous part's product (the
/// first after `x`) and the parts' products concatenated along the last axis. With `gate`, the planes and `x`'s `K`
/// are read through a [`OpKind::GateRows`] that empties them when `x` has at most the gate's rows (a few-rows form
/// is taken then): the product is then zeros, computed from nothing.
fn dequantized_product(b: &mut Builder<'_>, pl: &mut Planes, m: &Op, y: TensorId, gate: Option<Gate>) {
    let (x, n) = (m.inputs[0], pl.n);
    let label = b.specs[y.index()].name.clone();
    // `x`'s `K` gated as the planes' blocks are.
    let last = u8::try_from(b.specs[x.index()].shape.rank().saturating_sub(1)).ok();
    let (gate, xk) = match (gate, last) {
        (Some(g), Some(last)) => (Some(g), gated(b, x, g.x, (false, g.above), last, format!("{label}.xk"))),
        _ => (None, x),
    };
    // Bands when `x`'s rows merge into one `?` and split back: the banded product reads `x` as `[M, K]`.
    let bands = one_row_dim(&b.specs[x.index()].shape);
    let chunks = pl.row_chunks();
    let y_shape = b.specs[y.index()].shape.clone();
    let last = y_shape.rank().saturating_sub(1);
    let f32_rows = |b: &mut Builder<'_>, name: String, rows: u64| {
        let mut shape = y_shape.clone();
        shape.0[last] = Dim::Static(rows);
        b.tensor_shaped(name, shape, DType::F32)
    };
    // The product of `x` with one dequantized part, into `out` (of the part's real rows).
    let product = |b: &mut Builder<'_>, part: Dequantized, (len, real): (u64, u64), name: &str, out: TensorId| {
        match part {
            Dequantized::Transposed(wt) => b.op_into(OpKind::Matmul, m.attrs.clone(), &[xk, wt], out),
            Dequantized::Bands(w) if real == len => b.op_into(OpKind::Matmul, flag("banded"), &[xk, w], out),
            Dequantized::Bands(w) => {
                let padded = f32_rows(b, format!("{name}.padded"), len);
                b.op_into(OpKind::Matmul, flag("banded"), &[xk, w], padded);
                // The real rows of the last dim.
                b.op_into(OpKind::Slice, slice_along(y_shape.rank(), last, (0, real)), &[padded], out)
            }
        }
    };
    if let [rows] = chunks.as_slice() {
        let part = pl.dequantized_part(b, None, &label, *rows, gate, bands);
        product(b, part, (rows.1, n), &label, y);
        return;
    }
    let (mut wait, mut parts) = (x, Vec::with_capacity(chunks.len()));
    for (i, &(first, len)) in chunks.iter().enumerate() {
        let real = len.min(n.saturating_sub(first));
        let name = format!("{label}.{i}");
        let part = pl.dequantized_part(b, Some(wait), &name, (first, len), gate, bands);
        let yi = f32_rows(b, name.clone(), real);
        wait = product(b, part, (len, real), &name, yi);
        parts.push(wait);
    }
    // The emitter joins at most 16 parts per `stablehlo.concatenate` (`Emitter::concat_tree`): a 128 K vocabulary
    // of 4096 is 125 parts, past IREE 3.13's 32 bindings per dispatch.
    b.op_into(OpKind::Concat, axis(-1), &parts, y);
}

/// A node's one boolean attribute `name`, set (`matmul`'s `grouped` or `banded`, [`OpKind::Matmul`]).
fn flag(name: &str) -> Attrs {
    let mut a = Attrs::new();
    a.insert(name.into(), Attr::Bool(true));
    a
}

/// The dims of the ids (static or `?`) when `node` gathers rows of `w` the rewrite gathers from the planes.
fn gather_ids(
    node: &Op,
    w: TensorId,
    specs: &[TensorSpec],
    replaced: &HashMap<usize, Vec<Op>>,
    i: usize,
) -> Option<Vec<Dim>> {
    let gather_rows = gathers_rows_of(node, w);
    let ids = node.inputs.get(1).map(|t| specs[t.index()].shape.0.clone())?;
    (gather_rows && node.outputs.len() == 1 && !replaced.contains_key(&i)).then_some(ids)
}

/// `y = x @ Wᵀ` per sub-block, for `x` of static dims `xd` (last `K`).
fn linear_use(b: &mut Builder<'_>, pl: &mut Planes, x: TensorId, xd: &[u64], y: TensorId) {
    let (kb, bs, n) = (pl.kb, pl.b, pl.np);
    let p: u64 = xd[..xd.len() - 1].iter().product();
    let y_name = b.specs[y.index()].name.clone();
    let xb = b.op(OpKind::Reshape, Attrs::new(), &[x], format!("{y_name}.xb"), &[p, kb, bs], DType::F32);
    let xt = b.op(OpKind::Transpose, ints("perm", [1, 0, 2]), &[xb], format!("{y_name}.xt"), &[kb, p, bs], DType::F32);
    let q = pl.codes_f32(b);
    let mut s = b.op(OpKind::Matmul, Attrs::new(), &[xt, q], format!("{y_name}.s"), &[kb, p, n], DType::F32);
    if let (Some(hf), Some((_, sixteen))) = (pl.high_f32(b), pl.high) {
        // 5/6-bit codes: a second contraction on the high bits (IREE reads the i2 plane directly), weighted 16.
        let sh = b.op(OpKind::Matmul, Attrs::new(), &[xt, hf], format!("{y_name}.sh"), &[kb, p, n], DType::F32);
        let sh16 = b.op(OpKind::Mul, Attrs::new(), &[sh, sixteen], format!("{y_name}.sh16"), &[kb, p, n], DType::F32);
        s = b.op(OpKind::Add, Attrs::new(), &[s, sh16], format!("{y_name}.sq"), &[kb, p, n], DType::F32);
    }
    let a = pl.scale_3d(b);
    let sa = b.op(OpKind::Mul, Attrs::new(), &[s, a], format!("{y_name}.sa"), &[kb, p, n], DType::F32);
    // The result is written straight into `y` when nothing follows: no reshape back to `x`'s leading dims, no slice
    // of the padding rows.
    let flat = xd.len() == 2 && pl.np == pl.n;
    let offset = pl.offset;
    let sum_into = |b: &mut Builder<'_>, last: bool, op: OpKind, attrs: Attrs, ins: &[TensorId], label: &str| {
        if last && flat {
            b.op_into(op, attrs, ins, y)
        } else {
            b.op(op, attrs, ins, format!("{y_name}.{label}"), &[p, n], DType::F32)
        }
    };
    let mut out = sum_into(b, offset.is_none(), OpKind::ReduceSum, ints("axes", [0]), &[sa], "y0");
    if let Some(c) = offset {
        let xs = b.op(OpKind::ReduceSum, ints("axes", [2]), &[xt], format!("{y_name}.xs"), &[kb, p], DType::F32);
        let xst = b.op(OpKind::Transpose, ints("perm", [1, 0]), &[xs], format!("{y_name}.xst"), &[p, kb], DType::F32);
        let y1 = b.op(OpKind::Matmul, Attrs::new(), &[xst, c], format!("{y_name}.y1"), &[p, n], DType::F32);
        out = sum_into(b, true, OpKind::Add, Attrs::new(), &[out, y1], "y");
    }
    if flat {
        return;
    }
    if pl.np != pl.n {
        let sliced = if xd.len() == 2 { y } else { b.tensor(format!("{y_name}.ys"), &[p, pl.n], DType::F32) };
        out = b.op_into(OpKind::Slice, slice_to(&[p, pl.n]), &[out], sliced);
        if xd.len() == 2 {
            return;
        }
    }
    b.op_into(OpKind::Reshape, Attrs::new(), &[out], y);
}

/// `g = W[ids]` (rows), from the planes gathered by columns. The ids may have `?` dimensions (a prefill's token
/// ids): every value is then as wide as the ids, never the whole table.
fn gather_use(b: &mut Builder<'_>, pl: &mut Planes, ids: TensorId, id_dims: &[Dim], g: TensorId) {
    let (kb, bs, k) = (pl.kb, pl.b, pl.k);
    let g_name = b.specs[g.index()].name.clone();
    let with = |head: &[u64]| Shape(head.iter().map(|&d| Dim::Static(d)).chain(id_dims.iter().copied()).collect());
    let gq = b.op_shaped(
        OpKind::Gather,
        axis(2),
        &[pl.quants, ids],
        format!("{g_name}.qs"),
        with(&[kb, bs]),
        b.specs[pl.quants.index()].dtype,
    );
    let mut gqf =
        b.op_shaped(OpKind::Convert, Attrs::new(), &[gq], format!("{g_name}.qs_f32"), with(&[kb, bs]), DType::F32);
    if let Some((h, sixteen)) = pl.high {
        let qh_dtype = b.specs[h.index()].dtype;
        let gh = b.op_shaped(OpKind::Gather, axis(2), &[h, ids], format!("{g_name}.qh"), with(&[kb, bs]), qh_dtype);
        let ghf =
            b.op_shaped(OpKind::Convert, Attrs::new(), &[gh], format!("{g_name}.qh_f32"), with(&[kb, bs]), DType::F32);
        let gh16 = b.op_shaped(
            OpKind::Mul,
            Attrs::new(),
            &[ghf, sixteen],
            format!("{g_name}.qh16"),
            with(&[kb, bs]),
            DType::F32,
        );
        gqf = b.op_shaped(
            OpKind::Add,
            Attrs::new(),
            &[gqf, gh16],
            format!("{g_name}.codes"),
            with(&[kb, bs]),
            DType::F32,
        );
    }
    let ga = b.op_shaped(OpKind::Gather, axis(1), &[pl.scale, ids], format!("{g_name}.a"), with(&[kb]), DType::F32);
    let ga3 = b.op_shaped(OpKind::Reshape, Attrs::new(), &[ga], format!("{g_name}.a3"), with(&[kb, 1]), DType::F32);
    let mut v =
        b.op_shaped(OpKind::Mul, Attrs::new(), &[gqf, ga3], format!("{g_name}.wa"), with(&[kb, bs]), DType::F32);
    if let Some(c) = pl.offset {
        let gc = b.op_shaped(OpKind::Gather, axis(1), &[c, ids], format!("{g_name}.c"), with(&[kb]), DType::F32);
        let gc3 = b.op_shaped(OpKind::Reshape, Attrs::new(), &[gc], format!("{g_name}.c3"), with(&[kb, 1]), DType::F32);
        v = b.op_shaped(OpKind::Add, Attrs::new(), &[v, gc3], format!("{g_name}.wc"), with(&[kb, bs]), DType::F32);
    }
    let cols = b.op_shaped(OpKind::Reshape, Attrs::new(), &[v], format!("{g_name}.cols"), with(&[k]), DType::F32);
    let r = id_dims.len() as u64;
    b.op_into(OpKind::Transpose, ints("perm", (1..=r).chain([0])), &[cols], g);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scalar_a_split_asks_for_has_a_constant() {
        for e in Encoding::DECODABLE {
            let s = Split::of(&e).expect("decodable encodings split");
            let offset = s.has_offset_term.then_some(s.offset);
            let high = s.high.map(|h| h.bias).into_iter().chain(s.high.map(|_| 16));
            for v in offset.into_iter().chain(high) {
                let bytes = scalar_bytes(v).unwrap_or_else(|| panic!("{e}: no constant for {v}"));
                assert_eq!(f64::from(f32::from_le_bytes(*bytes)), f64::from(v), "{e}");
            }
        }
        assert_eq!(scalar_bytes(32), None, "a value no format uses has no constant (no wildcard)");
    }

    #[test]
    fn a_few_rows_form_is_one_product_within_16_mib_and_parts_of_8_past_it() {
        // 1024 -> 2816 (the 156M model's MLP): 11.5 MB of partials at 32 rows, one product.
        assert_eq!(few_rows_chunks(32, 2816, 32, 64), Some(vec![(0, 2816)]));
        // 4096 -> 11008 (7B widths): 45 MB at 8 rows, 180 MB at 32, in parts of at most 8 MiB that tile the planes.
        for (rows, parts) in [(8, 6), (16, 11), (32, 22)] {
            let chunks = few_rows_chunks(128, 11008, rows, 64).expect("a form");
            assert_eq!(chunks.len(), parts, "{rows} rows");
            let mut next = 0;
            for &(first, len) in &chunks {
                assert_eq!(first, next, "{rows} rows: contiguous");
                assert!(first % 64 == 0 && len % 64 == 0 && len > 0, "{rows} rows: whole groups");
                assert!(4 * 128 * u64::from(rows) * len <= FEW_ROWS_PART_BYTES, "{rows} rows: {len} too wide");
                next = first + len;
            }
            assert_eq!(next, 11008, "{rows} rows: every plane row");
        }
        // Q8_0 planes hold any row count (unit 1): the odd rest is a part of its own.
        assert_eq!(few_rows_chunks(8, 16389, 32, 1), Some(vec![(0, 8192), (8192, 8192), (16384, 5)]));
        // A K so wide that one group of 64 rows passes 8 MiB at 32 rows: no such form; and no overflow.
        assert_eq!(few_rows_chunks(1025, 128, 32, 64), None);
        assert_eq!(few_rows_chunks(u64::MAX, 64, 8, 64), None);
    }
}
