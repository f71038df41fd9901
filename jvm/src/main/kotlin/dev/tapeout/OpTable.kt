// Generated from tapeout_graph::OpKind (rust/graph/src/ops/mod.rs) by rust/graph/tests/kotlin_op_table.rs: do not edit.
// Regenerate with: TAPEOUT_REGENERATE=1 cargo test -p tapeout-graph --test kotlin_op_table
package dev.tapeout

/**
 * How many operands or results an op takes, as the native table says: [accepts] a count, and in words
 * the same way the native messages say it (`2`, `1 to 3`, `1 or 3`, `at least 2`).
 */
internal class OpArity private constructor(private val lo: Int, private val hi: Int, private val either: Boolean) {
    /** True when [n] fits. */
    fun accepts(n: Int): Boolean = if (either) n == lo || n == hi else n in lo..hi

    override fun toString(): String = when {
        either -> "$lo or $hi"
        lo == hi -> "$lo"
        hi == Int.MAX_VALUE -> "at least $lo"
        else -> "$lo to $hi"
    }

    companion object {
        fun exactly(n: Int) = OpArity(n, n, false)
        fun atLeast(n: Int) = OpArity(n, Int.MAX_VALUE, false)
        fun between(lo: Int, hi: Int) = OpArity(lo, hi, false)
        fun either(a: Int, b: Int) = OpArity(a, b, true)
    }
}

/**
 * The native op table as the tape records it: each op's name in the graph JSON and how many operands
 * ([inputs]) and results ([outputs]) it takes. Every recording function names its op by one of these;
 * [ExecutionTape.record] checks the operand count against it. The ops only tapeout's passes write are not
 * in it: a tape cannot record them.
 */
internal enum class Op(val opName: String, val inputs: OpArity, val outputs: OpArity) {
    ABS("abs", OpArity.exactly(1), OpArity.exactly(1)),
    ADD("add", OpArity.exactly(2), OpArity.exactly(1)),
    AND("and", OpArity.exactly(2), OpArity.exactly(1)),
    ARGMAX("argmax", OpArity.exactly(1), OpArity.exactly(1)),
    AVG_POOL2D("avg_pool2d", OpArity.exactly(1), OpArity.exactly(1)),
    BROADCAST("broadcast", OpArity.between(1, 2), OpArity.exactly(1)),
    CAUSAL_MASK("causal_mask", OpArity.exactly(1), OpArity.exactly(1)),
    CLAMP("clamp", OpArity.either(1, 3), OpArity.exactly(1)),
    COMPARE("compare", OpArity.exactly(2), OpArity.exactly(1)),
    CONCAT("concat", OpArity.atLeast(1), OpArity.exactly(1)),
    CONV2D("conv2d", OpArity.between(2, 3), OpArity.exactly(1)),
    CONVERT("convert", OpArity.exactly(1), OpArity.exactly(1)),
    COS("cos", OpArity.exactly(1), OpArity.exactly(1)),
    DIV("div", OpArity.exactly(2), OpArity.exactly(1)),
    DYNAMIC_SLICE("dynamic_slice", OpArity.atLeast(2), OpArity.exactly(1)),
    DYNAMIC_UPDATE_SLICE("dynamic_update_slice", OpArity.atLeast(3), OpArity.exactly(1)),
    EXP("exp", OpArity.exactly(1), OpArity.exactly(1)),
    GATHER("gather", OpArity.exactly(2), OpArity.exactly(1)),
    GELU("gelu", OpArity.exactly(1), OpArity.exactly(1)),
    IOTA("iota", OpArity.between(0, 1), OpArity.exactly(1)),
    LAYER_NORM("layer_norm", OpArity.between(1, 3), OpArity.exactly(1)),
    LOG("log", OpArity.exactly(1), OpArity.exactly(1)),
    MATMUL("matmul", OpArity.exactly(2), OpArity.exactly(1)),
    MAX("max", OpArity.exactly(2), OpArity.exactly(1)),
    MAX_POOL2D("max_pool2d", OpArity.exactly(1), OpArity.exactly(1)),
    MIN("min", OpArity.exactly(2), OpArity.exactly(1)),
    MUL("mul", OpArity.exactly(2), OpArity.exactly(1)),
    NEG("neg", OpArity.exactly(1), OpArity.exactly(1)),
    NOT("not", OpArity.exactly(1), OpArity.exactly(1)),
    OR("or", OpArity.exactly(2), OpArity.exactly(1)),
    POW("pow", OpArity.exactly(2), OpArity.exactly(1)),
    REDUCE_MAX("reduce_max", OpArity.exactly(1), OpArity.exactly(1)),
    REDUCE_MEAN("reduce_mean", OpArity.exactly(1), OpArity.exactly(1)),
    REDUCE_SUM("reduce_sum", OpArity.exactly(1), OpArity.exactly(1)),
    RELU("relu", OpArity.exactly(1), OpArity.exactly(1)),
    RESHAPE("reshape", OpArity.exactly(1), OpArity.exactly(1)),
    RMS_NORM("rms_norm", OpArity.between(1, 2), OpArity.exactly(1)),
    ROPE("rope", OpArity.exactly(3), OpArity.exactly(1)),
    RSQRT("rsqrt", OpArity.exactly(1), OpArity.exactly(1)),
    SDPA("sdpa", OpArity.between(3, 4), OpArity.exactly(1)),
    SELECT("select", OpArity.exactly(3), OpArity.exactly(1)),
    SIGMOID("sigmoid", OpArity.exactly(1), OpArity.exactly(1)),
    SILU("silu", OpArity.exactly(1), OpArity.exactly(1)),
    SIN("sin", OpArity.exactly(1), OpArity.exactly(1)),
    SLICE("slice", OpArity.exactly(1), OpArity.exactly(1)),
    SOFTMAX("softmax", OpArity.exactly(1), OpArity.exactly(1)),
    SQRT("sqrt", OpArity.exactly(1), OpArity.exactly(1)),
    SUB("sub", OpArity.exactly(2), OpArity.exactly(1)),
    TANH("tanh", OpArity.exactly(1), OpArity.exactly(1)),
    TRANSPOSE("transpose", OpArity.exactly(1), OpArity.exactly(1)),
    ;

    /** True when [n] operands fit. */
    fun acceptsInputs(n: Int): Boolean = inputs.accepts(n)

    /** The operand counts it takes, in words (`2`, `1 to 3`, `1 or 3`, `at least 2`). */
    val inputsText: String
        get() = inputs.toString()

    companion object {
        private val byName: Map<String, Op> = values().associateBy { it.opName }

        /** The op called [name], or `null` for a name the native table does not have. */
        fun named(name: String): Op? = byName[name]
    }
}
