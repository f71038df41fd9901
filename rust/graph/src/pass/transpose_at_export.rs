//! [`WeightLayout::ChosenForUse`](crate::WeightLayout::ChosenForUse): weights written in the layout their use wants.

use std::collections::HashSet;

use super::{DeviceForms, Fresh, Program, gathers_rows_of, swaps_two_dims, uses};
use crate::constant::ConstantData;
use crate::ops::OpKind;
use crate::shape::Shape;
use crate::tensor::{Lent, TensorSpec};
use crate::trace::{Attr, Attrs, Op, TensorId};

/// A rank-2 `[rows, cols]` constant, not a graph output, that the program only contracts on its last dimension is
/// written transposed ([`ConstantData::Transposed`]) under its own key, and the program uses it as stored:
/// - its one use is a 2-D transpose (a PyTorch-layout `[out, in]` linear): the transpose's result becomes the
///   constant and the transpose node leaves;
/// - its uses are one such transpose and gathers of its rows (a tied embedding and LM head): the same, and each
///   gather reads columns of the stored `[cols, rows]` table (`gather` along axis 1, then a transpose of the
///   small gathered activation, an op inserted for the gather's node). For a decode step, IREE 3.13 keeps a
///   transposed copy of the table as held, about twice the archive in resident memory; stored transposed, no copy
///   (docs/performance.md#weights-in-iree).
///
/// A weight whose only uses are then the right operand of matmuls (a linear) is written in the row bands the
/// device pass asks for ([`DeviceForms::weight_row_tile`]: `[rows / tile, cols, tile]`,
/// [`ConstantData::row_tile`]): its tensor is then the bands as stored, and each of those matmuls a `banded` one,
/// which the emitter contracts as stored, in one contraction over the bands (when every one of them can read
/// bands: otherwise the weight is written as a plain transpose).
///
/// Constants whose values cannot be streamed transposed within the tile budget stay as held.
pub(crate) fn transpose_at_export<'a>(program: Program<'a>, forms: &dyn DeviceForms) -> Program<'a> {
    let Program { mut specs, inputs, mut constants, mut nodes, outputs, next_index } = program;
    let mut fresh = Fresh::from(next_index);
    let uses = uses(&nodes);
    let mut removed = HashSet::new();
    let mut inserted: Vec<(usize, Op)> = Vec::new(); // (after node, op)
    for c in &mut constants {
        let Some(used_by) = uses.get(&c.tensor) else { continue };
        let Some(&[rows, cols]) = specs[c.tensor.index()].shape.static_dims().as_deref() else { continue };
        if outputs.contains(&c.tensor) || !c.data.transposable(rows, cols) {
            continue;
        }
        let (swaps, others): (Vec<usize>, Vec<usize>) = used_by.iter().partition(|&&i| swaps_two_dims(&nodes[i]));
        let [swap] = swaps.as_slice() else { continue };
        let [out] = nodes[*swap].outputs.as_slice() else { continue };
        let out = *out;
        // Each other use gathers rows into one result of a rank: its spec, and the permutation that turns the
        // gathered columns back into it.
        let gathers_rows = |i: usize| {
            let n = &nodes[i];
            let [gathered] = n.outputs.as_slice() else { return None };
            let rank = i64::try_from(specs[gathered.index()].shape.rank()).ok().filter(|&r| r > 0)?;
            gathers_rows_of(n, c.tensor).then(|| (i, *gathered, (1..rank).chain([0]).collect::<Vec<i64>>()))
        };
        let Some(gathers) = others.iter().map(|&i| gathers_rows(i)).collect::<Option<Vec<_>>>() else { continue };
        let gathers_none = gathers.is_empty();
        // Gathers of rows become gathers of columns of the stored table, then a transpose of what they gathered.
        for (i, gathered, perm) in gathers {
            let spec = specs[gathered.index()].clone();
            let columns = TensorId::at(specs.len());
            let mut dims = spec.shape.0.clone();
            dims.rotate_right(1); // [ids.., width] -> [width, ids..]
            specs.push(TensorSpec::new(format!("{}_columns", spec.name), Shape(dims), spec.dtype));
            let node = &mut nodes[i];
            node.inputs[0] = out;
            node.attrs.insert("axis".into(), Attr::Int(1));
            node.outputs[0] = columns;
            let mut attrs = Attrs::new();
            attrs.insert("perm".into(), Attr::Ints(perm));
            let origin = node.origin();
            inserted.push((i, fresh.op(origin, OpKind::Transpose, attrs, vec![columns], vec![gathered])));
        }
        // Only ever the right operand of matmuls (a linear, not also a gathered table): written in row bands.
        let only_matmuls = gathers_none
            && !outputs.contains(&out)
            && uses.get(&out).is_some_and(|u| {
                u.iter().all(|&i| {
                    let n = &nodes[i];
                    n.op == OpKind::Matmul && n.inputs.len() == 2 && n.inputs[1] == out && n.inputs[0] != out
                })
            });
        let mut tile = if only_matmuls { forms.weight_row_tile(rows) } else { rows };
        if tile < rows {
            // The program names the bands as stored, `[rows / tile, cols, tile]`, and each matmul reads them as a
            // `banded` product: the emitter lowers what the program says, with no layout of its own to remember.
            let bands = Shape::of(&[rows / tile, cols, tile]);
            let readers = uses.get(&out).map(Vec::as_slice).unwrap_or(&[]);
            let fits = |i: &usize| {
                let n = &nodes[*i];
                crate::ops::banded_matmul(&specs[n.inputs[0].index()].shape, &bands)
                    .is_ok_and(|y| y == specs[n.outputs[0].index()].shape)
            };
            if readers.iter().all(fits) {
                specs[out.index()].shape = bands;
                for &i in readers {
                    nodes[i].attrs.insert("banded".into(), Attr::Bool(true));
                }
            } else {
                tile = rows;
            }
        }
        c.tensor = out;
        let held = std::mem::replace(&mut c.data, ConstantData::F32(Lent::Slice(&[])));
        c.data = ConstantData::Transposed { of: Box::new(held), rows, cols, tile };
        removed.insert(*swap);
    }
    let old = std::mem::take(&mut nodes);
    for (i, node) in old.into_iter().enumerate() {
        if !removed.contains(&i) {
            nodes.push(node);
        }
        nodes.extend(inserted.iter().filter(|(after, _)| *after == i).map(|(_, op)| op.clone()));
    }
    Program { specs, inputs, constants, nodes, outputs, next_index: fresh.next() }
}
