// Generated from tapeout_graph::OpKind (rust/graph/src/ops.rs) by rust/graph/tests/kotlin_op_table.rs: do not edit.
// Regenerate with: TAPEOUT_REGENERATE=1 cargo test -p tapeout-graph --test kotlin_op_table
package dev.tapeout

/**
 * The native op table as the tape records it: each op's name in the graph JSON and how many operands and
 * results it takes ([minInputs]..[maxInputs], [maxInputs] `Int.MAX_VALUE` for "or more"). Every recording
 * function names its op by one of these; [ExecutionTape.record] checks the operand count against it.
 */
internal enum class Op(val opName: String, val minInputs: Int, val maxInputs: Int, val minOutputs: Int, val maxOutputs: Int) {
    ABS("abs", 1, 1, 1, 1),
    ADD("add", 2, 2, 1, 1),
    ARGMAX("argmax", 1, 1, 1, 1),
    AVG_POOL2D("avg_pool2d", 1, 1, 1, 1),
    BROADCAST("broadcast", 1, 1, 1, 1),
    CAUSAL_MASK("causal_mask", 1, 1, 1, 1),
    CLAMP("clamp", 1, 3, 1, 1),
    COMPARE("compare", 2, 2, 1, 1),
    CONCAT("concat", 1, Int.MAX_VALUE, 1, 1),
    CONV2D("conv2d", 2, 3, 1, 1),
    CONVERT("convert", 1, 1, 1, 1),
    COS("cos", 1, 1, 1, 1),
    DIV("div", 2, 2, 1, 1),
    DYNAMIC_SLICE("dynamic_slice", 2, Int.MAX_VALUE, 1, 1),
    DYNAMIC_UPDATE_SLICE("dynamic_update_slice", 3, Int.MAX_VALUE, 1, 1),
    EXP("exp", 1, 1, 1, 1),
    GATHER("gather", 2, 2, 1, 1),
    GELU("gelu", 1, 1, 1, 1),
    IOTA("iota", 0, 0, 1, 1),
    LAYER_NORM("layer_norm", 1, 3, 1, 1),
    LOG("log", 1, 1, 1, 1),
    MATMUL("matmul", 2, 2, 1, 1),
    MAX("max", 2, 2, 1, 1),
    MAX_POOL2D("max_pool2d", 1, 1, 1, 1),
    MIN("min", 2, 2, 1, 1),
    MUL("mul", 2, 2, 1, 1),
    NEG("neg", 1, 1, 1, 1),
    POW("pow", 2, 2, 1, 1),
    REDUCE_MAX("reduce_max", 1, 1, 1, 1),
    REDUCE_MEAN("reduce_mean", 1, 1, 1, 1),
    REDUCE_SUM("reduce_sum", 1, 1, 1, 1),
    RELU("relu", 1, 1, 1, 1),
    RESHAPE("reshape", 1, 1, 1, 1),
    RMS_NORM("rms_norm", 1, 3, 1, 1),
    ROPE("rope", 3, 3, 1, 1),
    RSQRT("rsqrt", 1, 1, 1, 1),
    SDPA("sdpa", 3, 4, 1, 1),
    SELECT("select", 3, 3, 1, 1),
    SIGMOID("sigmoid", 1, 1, 1, 1),
    SILU("silu", 1, 1, 1, 1),
    SIN("sin", 1, 1, 1, 1),
    SLICE("slice", 1, 1, 1, 1),
    SOFTMAX("softmax", 1, 1, 1, 1),
    SQRT("sqrt", 1, 1, 1, 1),
    SUB("sub", 2, 2, 1, 1),
    TANH("tanh", 1, 1, 1, 1),
    TRANSPOSE("transpose", 1, 1, 1, 1),
    ;

    /** True when [n] operands fit. */
    fun acceptsInputs(n: Int): Boolean = n in minInputs..maxInputs

    /** The operand counts it takes, in words (`2`, `1 to 3`, `at least 2`). */
    val inputsText: String
        get() = when {
            minInputs == maxInputs -> "$minInputs"
            maxInputs == Int.MAX_VALUE -> "at least $minInputs"
            else -> "$minInputs to $maxInputs"
        }

    companion object {
        private val byName: Map<String, Op> = values().associateBy { it.opName }

        /** The op called [name], or `null` for a name the native table does not have. */
        fun named(name: String): Op? = byName[name]
    }
}
