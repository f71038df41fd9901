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

use super::words::{constants_as_words, narrow_bits};
use crate::dtype::DType;
use crate::ops::OpKind;
use crate::pass::{DeviceForms, Fresh, Program};
use crate::tensor::TensorSpec;
use crate::trace::{Attr, Attrs, TensorId};

/// The Vulkan target's forms: the portable lowering with narrow constants read as words.
pub(crate) struct VulkanForms;

impl DeviceForms for VulkanForms {
    fn rewrite<'a>(&self, program: Program<'a>) -> crate::Result<Program<'a>> {
        refuse_narrow_arguments(&program)?;
        Ok(half_floats_in_f32(constants_as_words(program, |_| true)))
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
/// Every f16 / bf16 value the program computes held in f32, rounded to its precision where it is made
/// (`round_as`): a `convert` to f16 / bf16 becomes the rounding, any other op computes in f32 and its result is
/// rounded. IREE 3.13's default Vulkan profile has no 16-bit float: it erases `convert` f32 -> f16 (no rounding at
/// all) and stores f16 values between dispatches at 2 bytes each but reads them as 4 (values past the first half
/// read 0); a bf16 value with an odd count crossing dispatches loses its last element (docs/devices.md). Runs after
/// the narrow constants are words, so no 16-bit value is left but what the program computes.
fn half_floats_in_f32(program: Program<'_>) -> Program<'_> {
    let Program { mut specs, inputs, constants, nodes, outputs, next_index } = program;
    let mut fresh = Fresh::from(next_index);
    let mut out = Vec::with_capacity(nodes.len());
    let round = |dtype: DType| {
        let mut a = Attrs::new();
        a.insert("dtype".into(), Attr::Str(dtype.name().into()));
        a
    };
    let f32_of = |specs: &mut Vec<TensorSpec>, t: TensorId, suffix: &str| {
        let s = &specs[t.index()];
        let spec = TensorSpec::new(format!("{}.{suffix}", s.name), s.shape.clone(), DType::F32);
        specs.push(spec);
        TensorId::at(specs.len() - 1)
    };
    for mut node in nodes {
        let halves: Vec<usize> = (0..node.outputs.len())
            .filter(|&i| matches!(specs[node.outputs[i].index()].dtype, DType::F16 | DType::BF16))
            .collect();
        if halves.is_empty() {
            out.push(node);
            continue;
        }
        let origin = node.origin();
        if node.op == OpKind::Convert {
            let (x, t) = (node.inputs[0], node.outputs[0]);
            let to = std::mem::replace(&mut specs[t.index()].dtype, DType::F32);
            let x = if specs[x.index()].dtype == DType::F32 {
                x
            } else {
                let wide = f32_of(&mut specs, x, "f32");
                out.push(fresh.op(origin, OpKind::Convert, Attrs::new(), vec![x], vec![wide]));
                wide
            };
            out.push(fresh.op(origin, OpKind::RoundAs, round(to), vec![x], vec![t]));
            continue;
        }
        let mut rounds = Vec::new();
        for i in halves {
            let t = node.outputs[i];
            let to = std::mem::replace(&mut specs[t.index()].dtype, DType::F32);
            let wide = f32_of(&mut specs, t, "unrounded");
            node.outputs[i] = wide;
            rounds.push(fresh.op(origin, OpKind::RoundAs, round(to), vec![wide], vec![t]));
        }
        out.push(node);
        out.extend(rounds);
    }
    Program { specs, inputs, constants, nodes: out, outputs, next_index: fresh.next() }
}
