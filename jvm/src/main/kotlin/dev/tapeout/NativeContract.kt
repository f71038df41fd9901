// Rendered from rust/jni/src/contract.rs by `TAPEOUT_REGENERATE=1 cargo test -p tapeout-jni`; do not edit.
// A test on each side fails when this file and the native tables disagree.
package dev.tapeout

/** The native side's data kind codes (`kinds[i]`): which JVM array holds a tensor's data. */
internal object NativeKind {
    /** No JVM data: shape only, or data the graph JSON describes (mapped files). */
    const val NONE = 0
    /** A `FloatArray`, borrowed. */
    const val F32 = 1
    /** A `ByteArray` of f16/bf16 values, row-major. */
    const val HALF_BYTES = 2
    /** A `ShortArray` of f16/bf16 bit patterns, row-major. */
    const val HALF_SHORTS = 3
    /** A `ByteArray` of packed blocks; the encoding is `encodings[i]`. */
    const val PACKED = 4
    /** A `ByteArray` of another dtype, row-major. */
    const val DENSE = 5
}

/** The bits of the native side's `options` argument; no other bit is accepted. */
internal object NativeOption {
    /** Dequantize packed weights to f32 while exporting (not with KEEP_PACKED). */
    const val DEQUANTIZE_PACKED = 1
    /** Widen f16/bf16 weights to f32 while exporting. */
    const val WIDEN_HALF = 2
    /** Keep packed weights packed, as planes of codes and scales (not with DEQUANTIZE_PACKED). */
    const val KEEP_PACKED = 4
    /** With KEEP_PACKED only: the codes of Q8_0 / Q4_0 weights in row bands of 32 rows. */
    const val ROW_BAND_CODES = 8
    /** The portable lowering alone, without the target's own forms (and so without a tuning spec). */
    const val NO_TUNING = 16
    /** The export's target ([ExportTarget.code]) is held in the four bits from this one. */
    const val TARGET_SHIFT = 8
}

/** The IREE backend an export is for: which device's forms join the portable lowering. [id] is its name on every front end
 *  (`--target`, Gradle's `ireeTargets`). */
enum class ExportTarget(val id: String, internal val code: Int) {
    /** IREE's CPU backend (the default): the portable lowering plus the CPU's forms and a tuning spec. */
    LLVM_CPU("llvm-cpu", 0),
    /** IREE's Vulkan backend (`vulkan-spirv`): the portable lowering, narrow constants as 32-bit words. */
    VULKAN("vulkan", 1),
    /** IREE's CUDA backend: the portable lowering, sub-byte planes as 32-bit words. */
    CUDA("cuda", 2),
    /** IREE's ROCm backend: the portable lowering, sub-byte planes as 32-bit words. */
    ROCM("rocm", 3),
    /** No backend in particular: the portable lowering, which every backend compiles. */
    PORTABLE("portable", 4),
    ;

    companion object {
        /** The target called [id], or null. */
        fun of(id: String): ExportTarget? = entries.firstOrNull { it.id == id }
    }
}

/** What the user can do about a [TapeoutException], as data: the Kotlin API words it in its message, the Gradle
 *  task words it as a `tapeout { … }` setting. */
enum class Remedy {
    /** Dequantize packed weights while exporting. */
    DEQUANTIZE,
    /** Make constants of at least [TapeoutException.remedyBytes] bytes external parameters. */
    EXTERNAL_PARAMETER,
    /** Declare the tensors the model returns. */
    DECLARE_OUTPUTS,
    /** Trust the graph file to read data files outside its own directory. */
    ALLOW_FILES_OUTSIDE_GRAPH_DIR,
    /** Keep the codes of packed weights in block rows (the default layout), not in row bands. */
    BLOCK_ROW_CODES,
}

/** The dtype names the native side knows, in its order ([DType.json] spells each one). */
internal val NATIVE_DTYPE_NAMES: List<String> = listOf("f32", "f64", "f16", "bf16", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool")
