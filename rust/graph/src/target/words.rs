//! Narrow constants as 32-bit words: a constant narrower than 32 bits, stored as its own bytes in `i32` words
//! ([`ConstantData::Words`]) and decoded in the program by `decode_words`, for a device whose compiler reads
//! narrower storage wrongly or not at all (docs/devices.md): every narrow dtype for Vulkan, the sub-byte planes of
//! packed weights for CUDA and ROCm.

use std::collections::HashMap;

use crate::constant::ConstantData;
use crate::dtype::DType;
use crate::ops::OpKind;
use crate::pass::keep_packed::{Builder, slice_to};
use crate::pass::{Fresh, Program};
use crate::shape::{Dim, Shape};
use crate::trace::{Attr, Attrs, Op, TensorId};

/// The bits of one value of `dtype` when words hold it: the narrow dtypes only.
pub(super) fn narrow_bits(dtype: DType) -> Option<u32> {
    match dtype {
        DType::F16 | DType::BF16 | DType::I16 | DType::U16 => Some(16),
        DType::I8 | DType::U8 => Some(8),
        DType::I4 => Some(4),
        DType::I2 => Some(2),
        _ => None,
    }
}

/// The ops that only move a value's elements, whose result may take the decoded (wider) type of their data
/// operand (input 0) instead of the narrow one: the value is widened once, where it is stored.
fn moves_elements(node: &Op, t: TensorId) -> bool {
    node.inputs.first() == Some(&t)
        && !node.inputs[1..].contains(&t)
        && matches!(node.op, OpKind::Reshape | OpKind::Transpose | OpKind::Slice | OpKind::Gather | OpKind::Broadcast)
}

/// Rewrites every constant whose dtype `held_in_words` picks (a narrow one) as words and a decode, and each of its
/// uses to read the decoded values.
pub(super) fn constants_as_words(program: Program<'_>, held_in_words: fn(DType) -> bool) -> Program<'_> {
    let Program { mut specs, inputs, mut constants, nodes, mut outputs, next_index } = program;
    let mut b = Builder::new(&mut specs, None, Fresh::from(next_index));
    // The tensors now holding decoded (wider) values, with the narrow dtype their spec had.
    let mut widened: HashMap<TensorId, DType> = HashMap::new();
    // The `[rows, cols]` tables whose rows are whole words: a gather of their rows reads the words of those rows.
    let mut tables: HashMap<TensorId, Table> = HashMap::new();
    for c in &mut constants {
        let held = c.data.dtype();
        let Some(bits) = narrow_bits(held).filter(|_| held_in_words(held)) else { continue };
        let spec = b.specs[c.tensor.index()].clone();
        let n = c.data.element_count();
        let words = c.data.byte_len().div_ceil(4);
        let per_word = u64::from(32 / bits);
        let to = if held.is_float() { DType::F32 } else { DType::I32 };
        let words_id = b.tensor(format!("{}.words", spec.name), &[words], DType::I32);
        b.specs[words_id.index()].path.clone_from(&spec.path);
        let mut from = Attrs::new();
        from.insert("from".into(), Attr::Str(held.name().into()));
        let mut v =
            b.op(OpKind::DecodeWords, from, &[words_id], format!("{}.decoded", spec.name), &[words * per_word], to);
        if words * per_word != n {
            v = b.op(OpKind::Slice, slice_to(&[n]), &[v], format!("{}.values", spec.name), &[n], to);
        }
        // The constant's own tensor is now the reshape of the decoded values: in the decoded type.
        b.op_into(OpKind::Reshape, Attrs::new(), &[v], c.tensor);
        if let Some(&[rows, cols]) = spec.shape.static_dims().as_deref() {
            if (cols * u64::from(bits)) % 32 == 0 && words * per_word == n {
                let row_words = cols * u64::from(bits) / 32;
                tables.insert(c.tensor, Table { words: words_id, rows, row_words, held, to, view: None });
            }
        }
        if spec.dtype != to {
            widened.insert(c.tensor, spec.dtype);
            b.specs[c.tensor.index()].dtype = to;
        }
        c.tensor = words_id;
    }
    let constants = constants
        .into_iter()
        .map(|mut c| {
            let held = c.data.dtype();
            if narrow_bits(held).is_some() && held_in_words(held) {
                c.data = ConstantData::Words { of: Box::new(c.data) };
            }
            c
        })
        .collect();
    let prelude = std::mem::take(&mut b.ops);
    let mut out = Vec::with_capacity(prelude.len() + nodes.len());
    out.extend(prelude);
    for mut node in nodes {
        if let Some(table) = rows_gathered(&node, &mut tables) {
            gather_words(&mut b, table, &node, &mut widened);
            out.extend(std::mem::take(&mut b.ops));
            continue;
        }
        let reads: Vec<TensorId> = node.inputs.iter().copied().filter(|t| widened.contains_key(t)).collect();
        for t in reads {
            if node.op == OpKind::Convert {
                continue; // converts the decoded values instead: exact, as the narrow values widen exactly
            }
            if moves_elements(&node, t) {
                // Its result takes the decoded type too.
                let r = node.outputs[0];
                let narrow = b.specs[r.index()].dtype;
                b.specs[r.index()].dtype = b.specs[t.index()].dtype;
                widened.insert(r, narrow);
                continue;
            }
            // Any other use reads the narrow values it was recorded with, converted back (exact).
            let back = narrow_again(&mut b, t, widened[&t]);
            out.extend(std::mem::take(&mut b.ops));
            for i in node.inputs.iter_mut().filter(|i| **i == t) {
                *i = back;
            }
        }
        out.push(node);
    }
    for o in &mut outputs {
        if let Some(&narrow) = widened.get(o) {
            *o = narrow_again(&mut b, *o, narrow);
            out.extend(std::mem::take(&mut b.ops));
        }
    }
    let next_index = b.fresh.next();
    Program { specs, inputs, constants, nodes: out, outputs, next_index }
}

/// A narrow `[rows, cols]` constant whose rows are whole words, for gathers of its rows.
struct Table {
    /// The constant's words, `[rows · row_words]`.
    words: TensorId,
    rows: u64,
    row_words: u64,
    /// The narrow dtype held.
    held: DType,
    /// The decoded dtype.
    to: DType,
    /// The words as `[rows, row_words]`, once a gather has asked for them.
    view: Option<TensorId>,
}

/// The table `node` gathers rows of (axis 0, the table its first operand only), if one of `tables`.
fn rows_gathered<'t>(node: &Op, tables: &'t mut HashMap<TensorId, Table>) -> Option<&'t mut Table> {
    let axis0 = matches!(node.attrs.get("axis"), None | Some(Attr::Int(0 | -2)));
    let table = *node.inputs.first()?;
    if node.op != OpKind::Gather || !axis0 || node.inputs.get(1) == Some(&table) {
        return None;
    }
    tables.get_mut(&table)
}

/// `node`, a gather of rows of `table`, as the gather of those rows' words and their decoding: IREE then reads the
/// rows asked for, not the whole table decoded (an embedding's gather is one row per token of a table of the whole
/// vocabulary). Its result takes the decoded type.
fn gather_words(b: &mut Builder<'_>, table: &mut Table, node: &Op, widened: &mut HashMap<TensorId, DType>) {
    let (ids, r) = (node.inputs[1], node.outputs[0]);
    let was = std::mem::replace(&mut b.origin, node.origin());
    let view = match table.view {
        Some(v) => v,
        None => {
            let name = format!("{}.rows", b.specs[table.words.index()].name);
            let v =
                b.op(OpKind::Reshape, Attrs::new(), &[table.words], name, &[table.rows, table.row_words], DType::I32);
            *table.view.insert(v)
        }
    };
    let spec = b.specs[r.index()].clone();
    let mut dims = spec.shape.0.clone();
    if let Some(last) = dims.last_mut() {
        *last = Dim::Static(table.row_words);
    }
    let mut axis = Attrs::new();
    axis.insert("axis".into(), Attr::Int(0));
    let gw = b.op_shaped(OpKind::Gather, axis, &[view, ids], format!("{}.words", spec.name), Shape(dims), DType::I32);
    let mut from = Attrs::new();
    from.insert("from".into(), Attr::Str(table.held.name().into()));
    b.op_into(OpKind::DecodeWords, from, &[gw], r);
    b.origin = was;
    if spec.dtype != table.to {
        widened.insert(r, spec.dtype);
        b.specs[r.index()].dtype = table.to;
    }
}

/// `t` (decoded) converted back to its narrow dtype.
fn narrow_again(b: &mut Builder<'_>, t: TensorId, narrow: DType) -> TensorId {
    let spec = b.specs[t.index()].clone();
    b.op_shaped(OpKind::Convert, Attrs::new(), &[t], format!("{}.narrow", spec.name), spec.shape, narrow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_narrow_dtypes_are_held_in_words() {
        assert_eq!(narrow_bits(DType::BF16), Some(16));
        assert_eq!(narrow_bits(DType::I4), Some(4));
        assert_eq!(narrow_bits(DType::I2), Some(2));
        for d in [DType::F32, DType::I32, DType::I64, DType::F64, DType::Bool, DType::U32] {
            assert_eq!(narrow_bits(d), None, "{d}");
        }
    }
}
