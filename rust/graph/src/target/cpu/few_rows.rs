//! A prefill's few rows over codes kept packed: the per-block product of the rows padded to 8, 16 or 32.

use super::dequantized::DEQUANTIZED_BYTES;
use super::{PLANE_BAND_ROWS, gated, rows_attrs};
use crate::dtype::DType;
use crate::ops::OpKind;
use crate::pass::keep_packed::{Builder, Planes, axis, flag, ints, slice_along};
use crate::shape::{Dim, Shape};
use crate::trace::{Attrs, TensorId};

/// The most bytes of per-block partials one column part of a few-rows product computes, for a form whose partials
/// pass [`DEQUANTIZED_BYTES`] ([`few_rows_chunks`]). At 7B widths parts of 4, 8 and 16 MiB ran prefills equally
/// fast; smaller parts compile longer (more dispatches) and larger ones raise peak memory, so 8 MiB sits between
/// (docs/performance.md#weights-in-iree).
const FEW_ROWS_PART_BYTES: u64 = 8 << 20;

/// `x @ Wᵀ` per block for `x` padded to `rows` rows ([`OpKind::PadRows`]), as `[rows, Np or 0]`: every plane read
/// through [`OpKind::GateRows`] that empty it unless `x` has at most `rows` rows and, with `below` (the next
/// smaller form's rows), more than `below`. With `group` (`T`), each plane `[.., Np]` is read as `[.., Np / T, T]`
/// and gated along its groups, every value computed on it is `[.., ?, T]` (the products `[Kb, rows, ?, T]`: IREE
/// keeps the codes' groups whole) and the sum over blocks is read as `[rows, ?]` at the end. Computed in the column
/// parts `chunks` ([`few_rows_chunks`]: one, or past [`DEQUANTIZED_BYTES`] of partials parts of at most
/// [`FEW_ROWS_PART_BYTES`], at 7B widths 6 to 32 of them), the parts concatenated along the columns. Codes without
/// high bits only (Q8_0, the 4-bit formats).
pub(super) fn few_rows_product(
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
/// of the planes every call, gated or not).
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
    // A plane `[.., Np]` (columns along `axis`, its last): its groups, this part's of them, gated. `per`: the
    // columns one index along `axis` holds without groups (32 for codes in row bands, gated along their bands).
    let gate_plane = |b: &mut Builder<'_>, plane: TensorId, (axis, per): (u8, u64), name: String| {
        let spec = &b.specs[plane.index()];
        let (mut shape, dtype) = (spec.shape.clone(), spec.dtype);
        let t = group.unwrap_or(per);
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
    let s = if pl.banded {
        // Codes stored in row bands: this part's bands, gated along the band axis, contracted as stored.
        let g = gate_plane(b, pl.quants, (0, PLANE_BAND_ROWS), format!("{label}.qs{r}"));
        f32_op(b, OpKind::Matmul, flag("banded"), &[xt, g], format!("{label}.qs{r}_s"), &[kb, r, 1])
    } else {
        let g = gate_plane(b, pl.quants, (2, 1), format!("{label}.qs{r}"));
        let f = f32_op(b, OpKind::Convert, Attrs::new(), &[g], format!("{label}.qs{r}_f32"), &[kb, bs, 1]);
        f32_op(b, OpKind::Matmul, grouped_attrs(), &[xt, f], format!("{label}.qs{r}_s"), &[kb, r, 1])
    };
    let a3 = pl.scale_3d(b);
    let a = gate_plane(b, a3, (2, 1), format!("{label}.a{r}"));
    let sa = f32_op(b, OpKind::Mul, Attrs::new(), &[s, a], format!("{label}.sa{r}"), &[kb, r, 1]);
    let mut out = f32_op(b, OpKind::ReduceSum, ints("axes", [0]), &[sa], format!("{label}.y{r}"), &[r, 1]);
    if let Some(c) = pl.offset {
        let c = gate_plane(b, c, (1, 1), format!("{label}.c{r}"));
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

/// The plane rows (`[first, len)` of the planes' `np`) each part of a few-rows product of `rows` rows computes, for
/// planes of `kb` blocks ([`few_rows_product`]): all of them when the per-block partials (`4·kb·rows·np` bytes) take
/// at most [`DEQUANTIZED_BYTES`], otherwise parts of at most [`FEW_ROWS_PART_BYTES`] of partials, each `len` a
/// multiple of `unit` (the planes' row multiple and their column groups; `np` is one). `None` (no such form) when
/// one `unit` alone would pass that (a `K` past 32768 at 32 rows), rather than a form of hundreds of parts.
pub(super) fn few_rows_chunks(kb: u64, np: u64, rows: u32, unit: u64) -> Option<Vec<(u64, u64)>> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
