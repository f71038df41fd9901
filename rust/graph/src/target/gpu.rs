//! The CUDA and ROCm pass: the sub-byte planes of a weight kept packed (i4 codes, i2 high bits) are stored as
//! 32-bit words and decoded in the program. IREE 3.13's CUDA and ROCm code generation refuses a gather from an i4
//! or i2 tensor (`failed to legalize operation 'vector.gather'`, `failed to emulate bit width`: an embedding or a
//! tied head kept packed); 16-bit and 8-bit values are native there and stay as they are (docs/devices.md).

use super::words::constants_as_words;
use crate::pass::{DeviceForms, Program};

/// The CUDA / ROCm forms: the portable lowering with sub-byte planes read as words.
pub(crate) struct GpuForms;

impl DeviceForms for GpuForms {
    fn rewrite<'a>(&self, program: Program<'a>) -> crate::Result<Program<'a>> {
        Ok(constants_as_words(program, |d| d.sub_byte_bits().is_some()))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_sub_byte_dtypes_are_words_for_cuda_and_rocm() {
        use crate::dtype::DType;
        let picked: Vec<DType> = [DType::I4, DType::I2, DType::I8, DType::F16, DType::BF16]
            .into_iter()
            .filter(|d| d.sub_byte_bits().is_some())
            .collect();
        assert_eq!(picked, [DType::I4, DType::I2]);
    }
}
