//! The device an export is for ([`Target`]) and whether that device's own forms are written ([`Tuning`]).
//!
//! Every target starts from one portable lowering: each weight form (f32, 16-bit kept, packed kept and contracted
//! per block, dequantized) in its plainest StableHLO, with no layout, tile hint or scheduling op chosen for one
//! kind of device. A target whose code generation is faster with other forms adds them in a pass of its own beside
//! that lowering (`target::cpu` for `llvm-cpu`, a private module here), and [`Tuning::Off`] leaves them out.

mod cpu;
mod gpu;
mod vulkan;
mod words;

pub use cpu::FEW_ROWS;

use crate::pass::{DeviceForms, Portable};

/// The device pass for `forms`: the CPU's (with its codes in row bands when `code_bands`), or none. Each device's
/// pass is a private module here, so the portable rewrites reach it only through [`DeviceForms`].
pub(crate) fn device_forms(forms: Forms, code_bands: bool) -> Box<dyn DeviceForms> {
    match forms {
        Forms::Cpu => Box::new(cpu::CpuForms { code_bands }),
        Forms::Vulkan => Box::new(vulkan::VulkanForms),
        Forms::Gpu => Box::new(gpu::GpuForms),
        Forms::Portable => Box::new(Portable),
    }
}

/// The IREE backend a module is exported for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Target {
    /// IREE's CPU backend (`llvm-cpu`), the default: the portable lowering plus the CPU forms (row bands, the
    /// few-rows forms of a prefill, weights dequantized in parts) and a tuning spec.
    #[default]
    LlvmCpu,
    /// IREE's Vulkan backend (`vulkan-spirv`): the portable lowering with narrow constants as 32-bit words.
    Vulkan,
    /// IREE's CUDA backend (`cuda`): the portable lowering with sub-byte planes as 32-bit words.
    Cuda,
    /// IREE's ROCm backend (`rocm`): the portable lowering with sub-byte planes as 32-bit words.
    Rocm,
    /// No device in particular: the portable lowering, which every IREE backend compiles.
    Portable,
}

impl Target {
    /// Every target, in the order the front ends list them.
    pub const ALL: [Target; 5] = [Target::LlvmCpu, Target::Vulkan, Target::Cuda, Target::Rocm, Target::Portable];

    /// The target's name on every front end (`--target`, the Kotlin `ExportTarget`, Gradle's `ireeTargets`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Target::LlvmCpu => "llvm-cpu",
            Target::Vulkan => "vulkan",
            Target::Cuda => "cuda",
            Target::Rocm => "rocm",
            Target::Portable => "portable",
        }
    }

    /// The target called `name`: one of [`Target::name`]'s, or IREE's own backend name (`vulkan-spirv`).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Target> {
        match name {
            "vulkan-spirv" => Some(Target::Vulkan),
            _ => Target::ALL.into_iter().find(|t| t.name() == name),
        }
    }

    /// IREE's name for the backend (`--iree-hal-target-backends`); `None` for [`Target::Portable`], which any
    /// backend compiles.
    #[must_use]
    pub fn iree_backend(self) -> Option<&'static str> {
        match self {
            Target::LlvmCpu => Some("llvm-cpu"),
            Target::Vulkan => Some("vulkan-spirv"),
            Target::Cuda => Some("cuda"),
            Target::Rocm => Some("rocm"),
            Target::Portable => None,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether the target's own forms are written on top of the portable lowering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Tuning {
    /// The target's forms where it has any (the default; every target but `portable`).
    #[default]
    On,
    /// The portable lowering alone, whatever the target: the reference every tuned form is checked against.
    Off,
}

/// The forms a finalized graph holds: which of the target's passes ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Forms {
    /// The portable lowering alone.
    #[default]
    Portable,
    /// The portable lowering with the CPU pass's forms (`llvm-cpu`, [`Tuning::On`]): its products are the ones the
    /// CPU tuning spec tiles.
    Cpu,
    /// The portable lowering with narrow constants stored as 32-bit words and decoded in the program (`vulkan`,
    /// [`Tuning::On`]): what IREE's default Vulkan profile, which stores only 32-bit values, reads exactly.
    Vulkan,
    /// The portable lowering with the sub-byte planes of packed weights stored as 32-bit words (`cuda`, `rocm`,
    /// [`Tuning::On`]): IREE 3.13's CUDA and ROCm code cannot gather from i4 / i2 tensors.
    Gpu,
}

impl Forms {
    /// The forms an export for `target` with `tuning` writes.
    #[must_use]
    pub fn of(target: Target, tuning: Tuning) -> Forms {
        match (target, tuning) {
            (Target::LlvmCpu, Tuning::On) => Forms::Cpu,
            (Target::Vulkan, Tuning::On) => Forms::Vulkan,
            (Target::Cuda | Target::Rocm, Tuning::On) => Forms::Gpu,
            _ => Forms::Portable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_is_found_by_its_name_and_has_its_forms_unless_portable() {
        for t in Target::ALL {
            assert_eq!(Target::from_name(t.name()), Some(t));
            assert_eq!(Forms::of(t, Tuning::Off), Forms::Portable, "{t}");
        }
        assert_eq!(Target::from_name("vulkan-spirv"), Some(Target::Vulkan));
        assert_eq!(Target::from_name("LLVM-CPU"), None, "names are exact");
        assert_eq!(Target::from_name("metal"), None);
        assert_eq!(Forms::of(Target::LlvmCpu, Tuning::On), Forms::Cpu);
        assert_eq!(Forms::of(Target::Vulkan, Tuning::On), Forms::Vulkan);
        assert_eq!(Forms::of(Target::Cuda, Tuning::On), Forms::Gpu);
        assert_eq!(Forms::of(Target::Rocm, Tuning::On), Forms::Gpu);
        assert_eq!(Target::Portable.iree_backend(), None);
    }
}
