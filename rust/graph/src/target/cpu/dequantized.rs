//! A prefill's product with a weight kept packed, dequantized for it: in row bands, in parts, gated.

use super::{Gate, gated, gated_rows, lcm, one_row_dim};
use crate::dtype::DType;
use crate::ops::OpKind;
use crate::pass::keep_packed::{Builder, Planes, axis, band_view, blocks_shape, flag, ints, slice_along};
use crate::shape::{Dim, Shape};
use crate::trace::{Attrs, Op, TensorId};

/// The most f32 bytes of one weight a `?`-row product dequantizes at a time (an LM head's 131 MB is dequantized in
/// 16 MiB parts, each consumed while it is still in the last-level cache, one after the other).
pub(super) const DEQUANTIZED_BYTES: u64 = 16 << 20;

/// The columns of one row band of a weight dequantized for a `?`-row product: the width of the stored bf16 bands,
/// whose contraction IREE 3.13 compiles well (docs/performance.md#weights-in-iree).
const BAND_COLUMNS: u64 = 32;

/// A part of a weight dequantized for one `?`-row product ([`dequantized_part`]).
enum Dequantized {
    /// `Wᵀ [K, rows]`, padding rows sliced off: a plain `matmul` reads it.
    Transposed(TensorId),
    /// `[len / BAND_COLUMNS, K, BAND_COLUMNS]`, the part's plane rows (padding included) in row bands: a `banded`
    /// `matmul` reads it, and its result is sliced to the real rows.
    Bands(TensorId),
}

/// `y = x @ Wᵀ` for `x` with `?` rows into `y`: the weight dequantized just before the product, or, past
/// [`DEQUANTIZED_BYTES`], part by part ([`row_chunks`]), each part after the previous part's product (the
/// first after `x`) and the parts' products concatenated along the last axis. With `gate`, the planes and `x`'s `K`
/// are read through a [`OpKind::GateRows`] that empties them when `x` has at most the gate's rows (a few-rows form
/// is taken then): the product is then zeros, computed from nothing.
pub(super) fn dequantized_product(b: &mut Builder<'_>, pl: &mut Planes, m: &Op, y: TensorId, gate: Option<Gate>) {
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
    let chunks = row_chunks(pl);
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
        let part = dequantized_part(pl, b, None, &label, *rows, gate, bands);
        product(b, part, (rows.1, n), &label, y);
        return;
    }
    let (mut wait, mut parts) = (x, Vec::with_capacity(chunks.len()));
    for (i, &(first, len)) in chunks.iter().enumerate() {
        let real = len.min(n.saturating_sub(first));
        let name = format!("{label}.{i}");
        let part = dequantized_part(pl, b, Some(wait), &name, (first, len), gate, bands);
        let yi = f32_rows(b, name.clone(), real);
        wait = product(b, part, (len, real), &name, yi);
        parts.push(wait);
    }
    // The emitter joins at most 16 parts per `stablehlo.concatenate` (`Emitter::concat_tree`): a 128 K vocabulary
    // of 4096 is 125 parts, past IREE 3.13's 32 bindings per dispatch.
    b.op_into(OpKind::Concat, axis(-1), &parts, y);
}

/// Rows `start .. start + len` of the planes (a multiple of the rows they are padded to) dequantized for one use
/// only. Its ops are not shared, and they are written just before the product: IREE 3.13 then computes this f32
/// copy about when the product needs it. With `wait`, the planes are read after `wait` is computed
/// ([`OpKind::After`]): a weight dequantized in parts orders each part after the previous part's product, since
/// IREE computed every part at once otherwise (docs/performance.md#weights-in-iree).
/// With `gate` (on `x`, the product's rows), every plane is read through a [`OpKind::GateRows`] that empties
/// its blocks when `x` has at most the gate's `above` rows (a few-rows form is taken then): its `K` is `?`.
///
/// With `bands`, when [`BAND_COLUMNS`] divides `len`, the part is written in row bands (every plane transposed to
/// `[len / T, Kb, B, T]` before the arithmetic, so IREE writes the bands in the dequantizing dispatch itself)
/// for a `banded` matmul: IREE 3.13's f32 product over a `[K, N]` weight whose rows are 4 KiB apart (`N` =
/// 1024) runs at half the speed of the same product over bands (docs/performance.md#weights-in-iree).
/// Otherwise `Wᵀ [K, rows]` (padding rows sliced off).
fn dequantized_part(
    pl: &mut Planes,
    b: &mut Builder<'_>,
    wait: Option<TensorId>,
    label: &str,
    rows: (u64, u64),
    gate: Option<Gate>,
    bands: bool,
) -> Dequantized {
    let (first, len) = rows;
    let (all, dims) = ([pl.kb, pl.b, pl.np], [pl.kb, pl.b, len]);
    let bands = bands && len % BAND_COLUMNS == 0;
    let (kb, bs, np) = (pl.kb, pl.b, pl.np);
    // The block extent of every value after the gate: `?` when gated.
    let kb_dim = if gate.is_some() { Dim::Dynamic } else { Dim::Static(kb) };
    // Codes stored in row bands are read through their `[Kb, B, Np]` view: the shared one, or one of the bands
    // ordered after `wait`.
    let (stored, view) = (pl.quants, if pl.banded && wait.is_none() { Some(pl.codes(b)) } else { None });
    let banded = pl.banded;
    let rows_of = |b: &mut Builder<'_>, plane: TensorId, suffix: &str| {
        let dtype = b.specs[plane.index()].dtype;
        let p = match (wait, view) {
            (Some(w), _) if banded && plane == stored => {
                let shape = b.specs[plane.index()].shape.clone();
                let ordered =
                    b.op_shaped(OpKind::After, Attrs::new(), &[plane, w], format!("{label}.{suffix}"), shape, dtype);
                band_view(b, ordered, all, format!("{label}.{suffix}"))
            }
            (Some(w), _) => b.op(OpKind::After, Attrs::new(), &[plane, w], format!("{label}.{suffix}"), &all, dtype),
            (None, Some(view)) if plane == stored => view,
            (None, _) => plane,
        };
        let p = gated_rows(b, p, (label, suffix), (kb, bs, np), rows, gate);
        if bands { in_bands(b, p, [kb_dim, Dim::Static(bs)], len, format!("{label}.{suffix}_bands")) } else { p }
    };
    let shape = if bands {
        Shape(vec![Dim::Static(len / BAND_COLUMNS), kb_dim, Dim::Static(bs), Dim::Static(BAND_COLUMNS)])
    } else {
        blocks_shape(&dims, gate.is_some())
    };
    let codes = pl.codes_for_use(b, label, &shape, rows_of);
    if !bands {
        let wt_shape = blocks_shape(&[pl.k, len.min(pl.n.saturating_sub(first))], gate.is_some());
        let wt = b.tensor_shaped(format!("{label}.wt"), wt_shape, DType::F32);
        let part =
            |b: &mut Builder<'_>, t: TensorId, suffix: &str| gated_rows(b, t, (label, suffix), (kb, 1, np), rows, gate);
        pl.scaled_t(b, (codes, label), (rows, gate.is_some()), part, wt);
        return Dequantized::Transposed(wt);
    }
    let part = |b: &mut Builder<'_>, t: TensorId, suffix: &str| {
        let t = gated_rows(b, t, (label, suffix), (kb, 1, np), rows, gate);
        in_bands(b, t, [kb_dim, Dim::Static(1)], len, format!("{label}.{suffix}_bands"))
    };
    let v = pl.scaled(b, codes, label, &shape, part);
    let k = if gate.is_some() { Dim::Dynamic } else { Dim::Static(pl.k) };
    let banded = Shape(vec![Dim::Static(len / BAND_COLUMNS), k, Dim::Static(BAND_COLUMNS)]);
    Dequantized::Bands(b.op_shaped(OpKind::Reshape, Attrs::new(), &[v], format!("{label}.wb"), banded, DType::F32))
}

/// The plane rows a `?`-row product dequantizes at a time: `[start, len)` ranges, each a multiple of the rows
/// the planes are padded to and at most [`DEQUANTIZED_BYTES`] of f32 (one range when the whole weight is).
fn row_chunks(pl: &Planes) -> Vec<(u64, u64)> {
    let per = (DEQUANTIZED_BYTES / pl.k.saturating_mul(4).max(1)).max(1);
    // A multiple of the band width as well where a part holds that many rows, so that every part but the
    // last is dequantized in row bands ([`dequantized_part`]).
    let banded = lcm(pl.row_multiple, BAND_COLUMNS);
    let unit = if per >= banded { banded } else { pl.row_multiple };
    let per = (per / unit).max(1).saturating_mul(unit);
    let mut chunks = Vec::new();
    let mut first = 0;
    while first < pl.n {
        let len = per.min(pl.np - first);
        chunks.push((first, len));
        first += len;
    }
    chunks
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
