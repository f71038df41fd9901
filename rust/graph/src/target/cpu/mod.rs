//! The CPU pass: the forms IREE's `llvm-cpu` backend computes faster than the portable lowering's, written for
//! [`Forms::Cpu`](crate::Forms::Cpu) only. Each is a choice among equal results, checked against the portable form
//! by the IREE gate (tests/iree/test_portable.py):
//! - the codes of a Q8_0 or Q4_0 weight kept packed stored in row bands of [`PLANE_BAND_ROWS`] (with
//!   [`PackedCodesLayout::RowBands`](crate::PackedCodesLayout::RowBands));
//! - a linear's f32 or 16-bit weight written in row bands of [`ROW_TILES`] (`transpose_at_export`);
//! - a product of `?` rows over a weight kept packed: the per-block products of the rows padded to each of
//!   [`FEW_ROWS`] ([`few_rows`]), gated so that only the one for the actual rows has work, and past 32 rows the
//!   weight dequantized in row bands and in parts ([`dequantized`]).
//!
//! The tuning spec (`tapeout_hlo::cpu_tuning_spec`) tiles these forms' products; a module without them compiles
//! and runs without it.

mod dequantized;
mod few_rows;

use crate::dtype::DType;
use crate::ops::OpKind;
use crate::packed::Encoding;
use crate::pass::DeviceForms;
use crate::pass::keep_packed::{Builder, Planes};
use crate::shape::{Dim, Shape};
use crate::trace::{Attr, Attrs, Op, TensorId};
use dequantized::dequantized_product;
use few_rows::{few_rows_chunks, few_rows_product};

/// The CPU pass's forms. `code_bands`: the codes of Q8_0 and Q4_0 weights in row bands
/// ([`PackedCodesLayout::RowBands`](crate::PackedCodesLayout::RowBands), with the layout chosen for use).
pub(crate) struct CpuForms {
    pub(crate) code_bands: bool,
}

impl DeviceForms for CpuForms {
    fn code_bands(&self, encoding: &Encoding, kb: u64, np: u64) -> Option<u64> {
        (self.code_bands
            && matches!(encoding, Encoding::Q8_0 | Encoding::Q4_0)
            && kb > 0
            && np > 0
            && np % PLANE_BAND_ROWS == 0)
            .then_some(PLANE_BAND_ROWS)
    }

    fn dynamic_linear(&self, b: &mut Builder<'_>, pl: &mut Planes, m: &Op) -> bool {
        dynamic_linear_use(b, pl, m);
        true
    }

    fn weight_row_tile(&self, rows: u64) -> u64 {
        ROW_TILES.into_iter().find(|&t| rows % t == 0 && rows > t).unwrap_or(rows)
    }
}

/// Source rows per band of a linear's weight written in row bands ([`ConstantData::Transposed`]): 32 where they
/// divide the rows, else the largest of 16 and 8 that does, else all rows (a plain transpose). With IREE 3.13 on
/// the llvm-cpu target, a decode step's matrix-vector product over `[rows / 32, cols, 32]` bf16 bands, one
/// contraction over the stored bands, reads the weight several times faster than the same product over
/// `[cols, rows]`, with no copy of the weight (docs/performance.md#weights-in-iree).
///
/// [`ConstantData::Transposed`]: crate::ConstantData::Transposed
pub(crate) const ROW_TILES: [u64; 3] = [32, 16, 8];

/// Rows per band of the codes of a Q8_0 or Q4_0 weight stored in row bands ([`ConstantData::Plane`](crate::ConstantData::Plane)'s `band`):
/// a decode step's product reads `[Kb, 32, 32]` codes per band, contiguous, which IREE 3.13 gives one workgroup
/// each under the tuning spec (`tapeout_hlo::cpu_tuning_spec`; docs/performance.md#weights-in-iree).
pub(super) const PLANE_BAND_ROWS: u64 = 32;

/// The row counts up to which a `?`-row product of a kept weight takes the per-block product of its rows padded to
/// that many: up to 8 rows padded to 8, 9 to 16 padded to 16, 17 to 32 padded to 32, more the dequantized weight's
/// product. On one linear the static per-block product of a few rows beats the dequantized weight's product at 8
/// and 16 rows and draws level from about 24, where its partials (`4·Kb·rows·N` bytes) reach the dequantized
/// weight's `4·K·N`; in whole prefills the 32-row form still gains. The 16-row form is slower than the 8-row one at
/// 1 to 8 rows, so each range has a form of its own (docs/performance.md#weights-in-iree).
/// Ascending: each form is gated open above the one before it. A form whose partials pass 16 MiB
/// (`DEQUANTIZED_BYTES`) is computed in column parts (`FEW_ROWS_PART_BYTES`; at 7B widths every form is). Public
/// for the tuning spec (`tapeout-hlo`), which tiles each form's product by a matcher of its own.
pub const FEW_ROWS: [u32; 3] = [8, 16, 32];

/// A gate on the row count of `x` ([`OpKind::GateRows`]): the gated value is whole when `x` has more than `above`
/// rows (the dequantized weight's product; `above` the largest few-rows form's rows).
#[derive(Clone, Copy)]
pub(super) struct Gate {
    pub(super) x: TensorId,
    pub(super) above: u32,
}

/// Whether the rows of `x [.., K]` (its dims before `K`) are read as one `[?]` and back: one `?` among them and
/// no dim after it but 1s (`[?, K]`, HF's `[1, ?, K]`, `[2, ?, K]`, `[?, 1, K]`). A `[?, 2, K]` would need the `?`
/// split, which the emitter refuses.
pub(super) fn one_row_dim(x: &Shape) -> bool {
    let lead = &x.0[..x.rank().saturating_sub(1)];
    lead.iter().filter(|d| **d == Dim::Dynamic).count() == 1
        && lead.iter().skip_while(|d| **d != Dim::Dynamic).skip(1).all(|d| *d == Dim::Static(1))
}

/// `t` through a [`OpKind::GateRows`] on `x`'s rows along `axis`: whole when "at most `rows` rows" is `few`.
pub(super) fn gated(
    b: &mut Builder<'_>,
    t: TensorId,
    x: TensorId,
    (few, rows): (bool, u32),
    axis: u8,
    name: String,
) -> TensorId {
    let spec = &b.specs[t.index()];
    let (mut shape, dtype) = (spec.shape.clone(), spec.dtype);
    shape.0[usize::from(axis)] = Dim::Dynamic;
    let mut attrs = rows_attrs(rows);
    attrs.insert("few".into(), Attr::Bool(few));
    attrs.insert("axis".into(), Attr::Int(i64::from(axis)));
    b.op_shaped(OpKind::GateRows, attrs, &[t, x], name, shape, dtype)
}

pub(super) fn rows_attrs(rows: u32) -> Attrs {
    let mut a = Attrs::new();
    a.insert("rows".into(), Attr::Int(i64::from(rows)));
    a
}

/// The columns per group in which a few-rows product reads sub-byte planes ([`few_rows_product`]).
pub(super) const GROUP_COLUMNS: u64 = 64;

/// `y = x @ Wᵀ` for `x` with `?` rows (`Linear::Dynamic` of the portable rewrite). When `x` has one `?` dimension: the per-block product
/// of `x` padded to each of [`FEW_ROWS`] ([`few_rows_product`], in column parts past [`DEQUANTIZED_BYTES`](dequantized::DEQUANTIZED_BYTES))
/// and the dequantized weight's product ([`dequantized_product`]), each reading the planes through
/// [`OpKind::GateRows`] that leave every form but the one for `x`'s rows without work (the 8-row form up to 8 rows,
/// the 16-row one 9 to 16, the 32-row one 17 to 32, the dequantized weight more); the few-rows forms' rows placed
/// into the dequantized product's ([`OpKind::PlaceRows`], the largest form first: a form gated shut has no columns,
/// and a placement short of the columns places nothing). No branch: IREE 3.13 would end its stream execution at
/// each `scf.if` (docs/performance.md#weights-in-iree). Sub-byte codes are gated in groups of [`GROUP_COLUMNS`]
/// columns, so they need rows a multiple of it (codes in row bands are not: the emitter gates their band axis);
/// formats with high bits (Q5_x, Q6_K) are not gated. Otherwise the dequantized weight's product alone.
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

/// [`plane_rows`](crate::pass::keep_packed::plane_rows) through a [`OpKind::GateRows`] on `gate`'s rows (emptying its
/// blocks) when there is one.
pub(super) fn gated_rows(
    b: &mut Builder<'_>,
    t: TensorId,
    (label, suffix): (&str, &str),
    dims: (u64, u64, u64),
    rows: (u64, u64),
    gate: Option<Gate>,
) -> TensorId {
    let t = crate::pass::keep_packed::plane_rows(b, t, (label, suffix), dims, rows);
    match gate {
        Some(g) => gated(b, t, g.x, (false, g.above), 0, format!("{label}.{suffix}_g")),
        None => t,
    }
}

/// The least common multiple of two row counts (both at least 1), saturating.
pub(super) fn lcm(a: u64, b: u64) -> u64 {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    (a / x.max(1)).saturating_mul(b)
}
