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
use crate::pass::{DeviceForms, Program};

/// The Vulkan target's forms: the portable lowering with narrow constants read as words.
pub(crate) struct VulkanForms;

impl DeviceForms for VulkanForms {
    fn rewrite<'a>(&self, program: Program<'a>) -> crate::Result<Program<'a>> {
        refuse_narrow_arguments(&program)?;
        Ok(constants_as_words(program, |_| true))
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
