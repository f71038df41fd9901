//! The one definition of what the Kotlin side and this crate exchange as numbers and names: the data kind codes
//! of `kinds[i]`, the bits of `options`, the remedy names and the dtype names. The Kotlin side reads them from
//! `jvm/src/main/kotlin/dev/tapeout/NativeContract.kt`, which `kotlin()` (test code) renders from the tables here; a test
//! fails when the committed file differs (regenerate it with `TAPEOUT_REGENERATE=1 cargo test -p tapeout-jni`).

#[cfg(test)]
use tapeout::Remedy;
#[cfg(test)]
use tapeout::graph::DType;
use tapeout::graph::Target;

/// What kind of JVM array a tensor's data is (the `kinds[i]` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// No JVM data: shape only, or data described in the graph JSON (mapped files).
    None,
    /// `FloatArray`, borrowed.
    F32,
    /// `ByteArray` of f16/bf16, row-major.
    Half,
    /// `ShortArray` of f16/bf16 bit patterns, row-major (up to 2^31 - 1 elements, 4 GiB).
    HalfShorts,
    /// `ByteArray` of packed blocks (encoding in `encodings[i]`).
    Packed,
    /// `ByteArray` of another dtype.
    Dense,
}

/// Every kind with its code, its Kotlin constant name and what it means (the code is the position).
pub(crate) const KINDS: [(Kind, &str, &str); 6] = [
    (Kind::None, "NONE", "No JVM data: shape only, or data the graph JSON describes (mapped files)."),
    (Kind::F32, "F32", "A `FloatArray`, borrowed."),
    (Kind::Half, "HALF_BYTES", "A `ByteArray` of f16/bf16 values, row-major."),
    (Kind::HalfShorts, "HALF_SHORTS", "A `ShortArray` of f16/bf16 bit patterns, row-major."),
    (Kind::Packed, "PACKED", "A `ByteArray` of packed blocks; the encoding is `encodings[i]`."),
    (Kind::Dense, "DENSE", "A `ByteArray` of another dtype, row-major."),
];

impl Kind {
    /// The kind of code `code`, if it is one.
    pub(crate) fn from_code(code: i32) -> Option<Kind> {
        KINDS.get(usize::try_from(code).ok()?).map(|&(k, _, _)| k)
    }
}

/// One bit of the `options` argument.
pub(crate) struct OptionBit {
    /// The bit's value.
    pub(crate) bit: i32,
    /// Its Kotlin constant name.
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the Kotlin rendering"))]
    pub(crate) name: &'static str,
    /// What it asks for.
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the Kotlin rendering"))]
    pub(crate) doc: &'static str,
}

/// Dequantize packed weights (`PackedConstantHandling::Dequantize`); not with [`KEEP_PACKED`].
pub(crate) const DEQUANTIZE_PACKED: i32 = 1;
/// Widen 16-bit weights to f32 (`HalfConstantHandling::Widen`).
pub(crate) const WIDEN_HALF: i32 = 2;
/// Keep packed weights packed, as planes (`PackedConstantHandling::Keep`); not with [`DEQUANTIZE_PACKED`].
pub(crate) const KEEP_PACKED: i32 = 4;
/// With [`KEEP_PACKED`] only: the codes of Q8_0 / Q4_0 weights in row bands (`PackedCodesLayout::RowBands`).
pub(crate) const ROW_BAND_CODES: i32 = 8;

/// The portable lowering alone, without the target's forms (`Tuning::Off`).
pub(crate) const NO_TUNING: i32 = 16;
/// The export's target is the code ([`TARGETS`]) held in the four bits from this one.
pub(crate) const TARGET_SHIFT: i32 = 8;
/// The bits that hold the target's code.
pub(crate) const TARGET_BITS: i32 = 0xF << TARGET_SHIFT;

/// Every target the `options` argument names, by code (its position), with its Kotlin constant and what it asks
/// for. The Kotlin `ExportTarget` enum is rendered from it.
pub(crate) const TARGETS: [(Target, &str, &str); 5] = [
    (
        Target::LlvmCpu,
        "LLVM_CPU",
        "IREE's CPU backend (the default): the portable lowering plus the CPU's forms and a tuning spec.",
    ),
    (
        Target::Vulkan,
        "VULKAN",
        "IREE's Vulkan backend (`vulkan-spirv`): the portable lowering, narrow constants as 32-bit words.",
    ),
    (Target::Cuda, "CUDA", "IREE's CUDA backend: the portable lowering, sub-byte planes as 32-bit words."),
    (Target::Rocm, "ROCM", "IREE's ROCm backend: the portable lowering, sub-byte planes as 32-bit words."),
    (Target::Portable, "PORTABLE", "No backend in particular: the portable lowering, which every backend compiles."),
];

/// The target whose code `options` holds, if it holds one.
pub(crate) fn target_of(options: i32) -> Option<Target> {
    let code = usize::try_from((options & TARGET_BITS) >> TARGET_SHIFT).ok()?;
    TARGETS.get(code).map(|&(t, _, _)| t)
}

/// Every bit of `options` but the target's; any other bit is refused, and so are [`DEQUANTIZE_PACKED`] and
/// [`KEEP_PACKED`] together, and [`ROW_BAND_CODES`] without [`KEEP_PACKED`].
pub(crate) const OPTIONS: [OptionBit; 5] = [
    OptionBit {
        bit: DEQUANTIZE_PACKED,
        name: "DEQUANTIZE_PACKED",
        doc: "Dequantize packed weights to f32 while exporting (not with KEEP_PACKED).",
    },
    OptionBit { bit: WIDEN_HALF, name: "WIDEN_HALF", doc: "Widen f16/bf16 weights to f32 while exporting." },
    OptionBit {
        bit: KEEP_PACKED,
        name: "KEEP_PACKED",
        doc: "Keep packed weights packed, as planes of codes and scales (not with DEQUANTIZE_PACKED).",
    },
    OptionBit {
        bit: ROW_BAND_CODES,
        name: "ROW_BAND_CODES",
        doc: "With KEEP_PACKED only: the codes of Q8_0 / Q4_0 weights in row bands of 32 rows.",
    },
    OptionBit {
        bit: NO_TUNING,
        name: "NO_TUNING",
        doc: "The portable lowering alone, without the target's own forms (and so without a tuning spec).",
    },
];

#[cfg(test)]
/// What each remedy asks of the user, as the Kotlin enum's documentation says it.
fn remedy_doc(r: Remedy) -> &'static str {
    match r.name() {
        "DEQUANTIZE" => "Dequantize packed weights while exporting.",
        "EXTERNAL_PARAMETER" => "Make constants of at least [TapeoutException.remedyBytes] bytes external parameters.",
        "DECLARE_OUTPUTS" => "Declare the tensors the model returns.",
        "ALLOW_FILES_OUTSIDE_GRAPH_DIR" => "Trust the graph file to read data files outside its own directory.",
        "BLOCK_ROW_CODES" => "Keep the codes of packed weights in block rows (the default layout), not in row bands.",
        _ => "",
    }
}

#[cfg(test)]
/// `NativeContract.kt` as it must be committed.
pub(crate) fn kotlin() -> String {
    let mut out = String::from(
        "// Rendered from rust/jni/src/contract.rs by `TAPEOUT_REGENERATE=1 cargo test -p tapeout-jni`; do not edit.\n\
         // A test on each side fails when this file and the native tables disagree.\n\
         package dev.tapeout\n\n\
         /** The native side's data kind codes (`kinds[i]`): which JVM array holds a tensor's data. */\n\
         internal object NativeKind {\n",
    );
    for (code, (_, name, doc)) in KINDS.iter().enumerate() {
        out += &format!("    /** {doc} */\n    const val {name} = {code}\n");
    }
    out += "}\n\n/** The bits of the native side's `options` argument; no other bit is accepted. */\n\
            internal object NativeOption {\n";
    for o in &OPTIONS {
        out += &format!("    /** {} */\n    const val {} = {}\n", o.doc, o.name, o.bit);
    }
    out += &format!(
        "    /** The export's target ([ExportTarget.code]) is held in the four bits from this one. */\n    \
         const val TARGET_SHIFT = {TARGET_SHIFT}\n"
    );
    out += "}\n\n/** The IREE backend an export is for: which device's forms join the portable lowering. [id] is its name on \
            every front end\n *  (`--target`, Gradle's `ireeTargets`). */\n\
            enum class ExportTarget(val id: String, internal val code: Int) {\n";
    for (code, (t, name, doc)) in TARGETS.iter().enumerate() {
        out += &format!("    /** {doc} */\n    {name}(\"{}\", {code}),\n", t.name());
    }
    out += "    ;\n\n    companion object {\n        /** The target called [id], or null. */\n        \
            fun of(id: String): ExportTarget? = entries.firstOrNull { it.id == id }\n    }\n";
    out += "}\n\n/** What the user can do about a [TapeoutException], as data: the Kotlin API words it in its message, the Gradle\n \
            *  task words it as a `tapeout { … }` setting. */\nenum class Remedy {\n";
    for r in Remedy::ALL {
        out += &format!("    /** {} */\n    {},\n", remedy_doc(r), r.name());
    }
    out += "}\n\n/** The dtype names the native side knows, in its order ([DType.json] spells each one). */\n\
            internal val NATIVE_DTYPE_NAMES: List<String> = listOf(";
    out += &DType::ALL.iter().map(|d| format!("\"{}\"", d.name())).collect::<Vec<_>>().join(", ");
    out += ")\n";
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMITTED: &str =
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../jvm/src/main/kotlin/dev/tapeout/NativeContract.kt");

    #[test]
    fn the_committed_kotlin_contract_is_the_rendered_one() {
        let want = kotlin();
        if std::env::var_os("TAPEOUT_REGENERATE").is_some() {
            std::fs::write(COMMITTED, &want).expect("write NativeContract.kt");
        }
        let have = std::fs::read_to_string(COMMITTED).unwrap_or_default();
        assert!(
            have == want,
            "{COMMITTED} is stale: regenerate it with `TAPEOUT_REGENERATE=1 cargo test -p tapeout-jni` and commit it"
        );
    }

    #[test]
    fn codes_and_bits_are_distinct_and_documented() {
        for (code, (kind, _, _)) in KINDS.iter().enumerate() {
            assert_eq!(Kind::from_code(i32::try_from(code).expect("six kinds")), Some(*kind));
        }
        assert_eq!(Kind::from_code(6), None);
        assert_eq!(Kind::from_code(-1), None);
        for (code, (t, _, _)) in TARGETS.iter().enumerate() {
            let options = i32::try_from(code).expect("five targets") << TARGET_SHIFT;
            assert_eq!(target_of(options), Some(*t));
            assert_eq!(options & !TARGET_BITS, 0, "{t}: its code passes the target's bits");
        }
        assert_eq!(target_of(7 << TARGET_SHIFT), None);
        assert_eq!(TARGETS.map(|(t, _, _)| t), Target::ALL, "a target the contract cannot name");
        let bits: i32 = OPTIONS.iter().map(|o| o.bit).sum();
        assert_eq!(bits & TARGET_BITS, 0, "an option bit among the target's");
        assert_eq!(bits, OPTIONS.iter().fold(0, |acc, o| acc | o.bit), "option bits overlap");
        for r in Remedy::ALL {
            assert!(!remedy_doc(r).is_empty(), "remedy {} has no documentation", r.name());
        }
    }
}
