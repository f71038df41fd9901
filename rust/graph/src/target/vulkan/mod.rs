//! The Vulkan pass: every constant narrower than 32 bits (a 16-bit weight kept as stored, the i8 / i4 / i2 codes
//! and f16 scales of a weight kept packed) is stored as its own bytes in whole 32-bit words and decoded in the
//! program (`decode_words`), so that IREE's SPIR-V code reads and computes only 32-bit values.
//!
//! IREE 3.13's default Vulkan profile stores only 32-bit values. It emulates narrower ones by reading whole words:
//! a `tensor<3x5xbf16>` (30 bytes) read its last element past the end of its 30-byte binding, which a robust
//! driver (lavapipe) returns as 0; i4 planes and inline 16-bit constants were refused outright (`failed to
//! legalize operation 'vector.bitcast'`, `'spirv.Bitcast' op mismatch in result type bitwidth`). Words sidestep
//! every one of those paths: the archive holds the same bytes (padded by at most three zero bytes), and the
//! decode is exact integer arithmetic (docs/devices.md).

use std::collections::HashMap;

use crate::constant::ConstantData;
use crate::dtype::DType;
use crate::ops::OpKind;
use crate::pass::keep_packed::{Builder, slice_to};
use crate::pass::{DeviceForms, Fresh, Program};
use crate::trace::{Attr, Attrs, Op, TensorId};

/// The Vulkan target's forms: the portable lowering with narrow constants read as words.
pub(crate) struct VulkanForms;

impl DeviceForms for VulkanForms {
    fn rewrite<'a>(&self, program: Program<'a>) -> crate::Result<Program<'a>> {
        refuse_narrow_arguments(&program)?;
        Ok(narrow_constants_as_words(program))
    }
}

/// Refuses a function argument narrower than 32 bits (bool included), or a narrow result other than bool: the
/// caller's buffer itself is what IREE's default Vulkan profile misreads (lavapipe: a `[3]` bool argument read as
/// all false, a `[3, 5]` u16 one's last value wrong: the last word is partly past the buffer), and no form of the
/// program can change the caller's buffer. Bool results were written right in every case tried.
fn refuse_narrow_arguments(program: &Program<'_>) -> crate::Result<()> {
    let args = program.inputs.iter().map(|t| ("argument", t));
    for (kind, t) in args.chain(program.outputs.iter().map(|t| ("result", t))) {
        let spec = &program.specs[t.index()];
        if narrow_bits(spec.dtype).is_some() || (spec.dtype == DType::Bool && kind == "argument") {
            let wide = if spec.dtype.is_float() { "f32" } else { "i32" };
            return Err(crate::GraphError::Target {
                target: "vulkan".into(),
                what: format!("{kind} '{}'", spec.name),
                dtype: spec.dtype.name().into(),
                remedy: format!(
                    "record it as {wide} (convert it inside the model), or export for another target \
                     (--target llvm-cpu / cuda / rocm)"
                ),
            });
        }
    }
    Ok(())
}

/// The bits of one value of `dtype` when words hold it: the narrow dtypes only.
fn narrow_bits(dtype: DType) -> Option<u32> {
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

/// Rewrites every narrow constant as words and a decode, and each of its uses to read the decoded values.
fn narrow_constants_as_words(program: Program<'_>) -> Program<'_> {
    let Program { mut specs, inputs, mut constants, nodes, mut outputs, next_index } = program;
    let mut b = Builder::new(&mut specs, None, Fresh::from(next_index));
    // The tensors now holding decoded (wider) values, with the narrow dtype their spec had.
    let mut widened: HashMap<TensorId, DType> = HashMap::new();
    for c in &mut constants {
        let held = c.data.dtype();
        let Some(bits) = narrow_bits(held) else { continue };
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
        if spec.dtype != to {
            widened.insert(c.tensor, spec.dtype);
            b.specs[c.tensor.index()].dtype = to;
        }
        c.tensor = words_id;
    }
    let constants = constants
        .into_iter()
        .map(|mut c| {
            if narrow_bits(c.data.dtype()).is_some() {
                c.data = ConstantData::Words { of: Box::new(c.data) };
            }
            c
        })
        .collect();
    let prelude = std::mem::take(&mut b.ops);
    let mut out = Vec::with_capacity(prelude.len() + nodes.len());
    out.extend(prelude);
    for mut node in nodes {
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
