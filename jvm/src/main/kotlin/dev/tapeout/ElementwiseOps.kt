package dev.tapeout

/**
 * Elementwise ops of an [ExecutionTape]: NumPy-broadcast binary arithmetic, unary functions, comparison,
 * selection, conversion and clamping, plus [iota]. Binary operands must have one dtype ([convert] first);
 * shapes broadcast as in NumPy, checked here so the error names the recording line.
 */
sealed interface ElementwiseOps {
    /** `a + b`, broadcast. */
    fun add(a: Tensor, b: Tensor): Tensor = core.binary(Op.ADD, a, b)

    /** `a - b`, broadcast. */
    fun sub(a: Tensor, b: Tensor): Tensor = core.binary(Op.SUB, a, b)

    /** `a * b` (elementwise), broadcast. */
    fun mul(a: Tensor, b: Tensor): Tensor = core.binary(Op.MUL, a, b)

    /** `a / b`, broadcast. */
    fun div(a: Tensor, b: Tensor): Tensor = core.binary(Op.DIV, a, b)

    /** `a ^ b`, broadcast. */
    fun pow(a: Tensor, b: Tensor): Tensor = core.binary(Op.POW, a, b)

    /** `max(a, b)`, broadcast. */
    fun max(a: Tensor, b: Tensor): Tensor = core.binary(Op.MAX, a, b)

    /** `min(a, b)`, broadcast. */
    fun min(a: Tensor, b: Tensor): Tensor = core.binary(Op.MIN, a, b)

    /** `-x`. */
    fun neg(x: Tensor): Tensor = core.unary(Op.NEG, x)

    /** `|x|`. */
    fun abs(x: Tensor): Tensor = core.unary(Op.ABS, x)

    /** `e^x`. */
    fun exp(x: Tensor): Tensor = core.unary(Op.EXP, x)

    /** `ln x`. */
    fun log(x: Tensor): Tensor = core.unary(Op.LOG, x)

    /** `sqrt x`. */
    fun sqrt(x: Tensor): Tensor = core.unary(Op.SQRT, x)

    /** `1 / sqrt x`. */
    fun rsqrt(x: Tensor): Tensor = core.unary(Op.RSQRT, x)

    /** `tanh x`. */
    fun tanh(x: Tensor): Tensor = core.unary(Op.TANH, x)

    /** `1 / (1 + e^-x)`. */
    fun sigmoid(x: Tensor): Tensor = core.unary(Op.SIGMOID, x)

    /** `max(x, 0)`. */
    fun relu(x: Tensor): Tensor = core.unary(Op.RELU, x)

    /** GELU (tanh approximation). */
    fun gelu(x: Tensor): Tensor = core.unary(Op.GELU, x)

    /** `x · sigmoid(x)`. */
    fun silu(x: Tensor): Tensor = core.unary(Op.SILU, x)

    /** `sin x`. */
    fun sin(x: Tensor): Tensor = core.unary(Op.SIN, x)

    /** `cos x`. */
    fun cos(x: Tensor): Tensor = core.unary(Op.COS, x)

    /** Softmax along [axis] (negative counts from the end). */
    fun softmax(x: Tensor, axis: Int = -1): Tensor {
        val t = core
        t.axis(Op.SOFTMAX, x, axis)
        return t.record(Op.SOFTMAX, listOf(x), x.shape, t.dtypes.one(Op.SOFTMAX, x), mapOf("axis" to axis))
    }

    /** [scores] with the entries above the diagonal masked to -inf. */
    fun causalMask(scores: Tensor): Tensor = core.unary(Op.CAUSAL_MASK, scores)

    /** [x] converted to [to]: the only way an activation changes type (ops never convert implicitly; an f32 op
     *  may read a 16-bit weight, which is exact). */
    fun convert(x: Tensor, to: DType): Tensor = core.record(Op.CONVERT, listOf(x), x.shape, to)

    /** `min(max(x, min), max)`. */
    fun clamp(x: Tensor, min: Double, max: Double): Tensor =
        core.record(Op.CLAMP, listOf(x), x.shape, core.dtypes.one(Op.CLAMP, x), mapOf("min" to min, "max" to max))

    /** `pred ? a : b`, all three broadcast; [pred] is bool. */
    fun select(pred: Tensor, a: Tensor, b: Tensor): Tensor {
        val t = core
        if (pred.dtype != DType.BOOL) t.fail(Op.SELECT, listOf(pred, a, b), "the predicate must be bool, not ${pred.dtype.json}")
        val dtype = t.dtypes.pair(Op.SELECT, a, b)
        val shape = t.broadcastShape(Op.SELECT, pred.shape, t.broadcastShape(Op.SELECT, a.shape, b.shape, listOf(a, b)), listOf(pred, a, b))
        return t.record(Op.SELECT, listOf(pred, a, b), shape, dtype)
    }

    /** Elementwise comparison in [direction] (`EQ NE LT LE GT GE`), broadcast, a bool result. */
    fun compare(a: Tensor, b: Tensor, direction: String): Tensor {
        val t = core
        if (direction !in setOf("EQ", "NE", "LT", "LE", "GT", "GE")) t.fail(Op.COMPARE, listOf(a, b), "direction '$direction' is not one of EQ NE LT LE GT GE")
        t.dtypes.pair(Op.COMPARE, a, b)
        return t.record(Op.COMPARE, listOf(a, b), t.broadcastShape(Op.COMPARE, a.shape, b.shape, listOf(a, b)), DType.BOOL, mapOf("direction" to direction))
    }

    /** `a AND b`, broadcast: logical on bool tensors (masks), bitwise on integer ones; floats are refused. */
    fun and(a: Tensor, b: Tensor): Tensor = core.logical(Op.AND, a, b)

    /** `a OR b`, broadcast: logical on bool tensors, bitwise on integer ones; floats are refused. */
    fun or(a: Tensor, b: Tensor): Tensor = core.logical(Op.OR, a, b)

    /** `NOT x`: logical on a bool tensor, bitwise on an integer one; a float is refused. */
    fun not(x: Tensor): Tensor {
        val t = core
        if (x.dtype.isFloat) t.fail(Op.NOT, listOf(x), "takes a bool (or integer, bitwise) tensor, not ${x.dtype.json}: compare the values first")
        return t.unary(Op.NOT, x)
    }

    /** Indices 0, 1, … along dimension [dim] of the static [shape]. A [DYNAMIC] size is refused: for indices of a
     *  run-time length use [arange] with a tensor that has it. */
    fun iota(shape: LongArray, dim: Int, dtype: DType = DType.I32): Tensor {
        val t = core
        if (shape.any { it < 0 }) {
            t.fail(Op.IOTA, emptyList(), "the shape ${shapeText(shape)} has a DYNAMIC (or negative) size, known only at run time; " +
                "use arange(like, axis) to count along a dimension of a tensor that has it")
        }
        if (dim !in shape.indices) t.fail(Op.IOTA, emptyList(), "dim $dim is out of range for rank ${shape.size}")
        if (dtype == DType.BOOL) t.fail(Op.IOTA, emptyList(), "counts in a number type, not bool")
        return t.record(Op.IOTA, emptyList(), shape, dtype, mapOf("dim" to dim))
    }

    /**
     * The 1-D indices `0 until n` as [dtype], where n is the size of dimension [axis] of [like] (negative counts from
     * the end): read at run time when that dimension is [DYNAMIC], e.g. the positions `0..S-1` of a prefill of any
     * length. Only [like]'s shape is used.
     */
    fun arange(like: Tensor, axis: Int, dtype: DType = DType.I32): Tensor {
        val t = core
        val a = t.axis(Op.IOTA, like, axis)
        if (dtype == DType.BOOL) t.fail(Op.IOTA, listOf(like), "counts in a number type, not bool")
        return t.record(Op.IOTA, listOf(like), longArrayOf(like.shape[a]), dtype, mapOf("axis" to a, "dim" to 0))
    }

    /**
     * The size of dimension [axis] of [x] (negative counts from the end) as an i32 scalar: a constant when the size
     * is static, read at run time when it is [DYNAMIC] (a prompt's length, a KV cache's past length, the last
     * position `length(h, 1) - 1`).
     */
    fun length(x: Tensor, axis: Int): Tensor {
        val t = core
        val a = t.axis(Op.IOTA, x, axis)
        if (x.shape[a] != DYNAMIC) return t.scalar(x.shape[a].toDouble(), DType.I32)
        // The sum of a 1 per position: no op reads a size as a value, and a sum of i32 ones is exact.
        return t.reduceSum(t.expand(t.scalar(1.0, DType.I32), t.arange(x, a)), 0)
    }

    /** [iota] with Int dimensions. */
    fun iota(shape: IntArray, dim: Int, dtype: DType = DType.I32): Tensor = iota(longs(shape), dim, dtype)
}

/** The tape behind an [ElementwiseOps] (its one implementation). */
private val ElementwiseOps.core: ExecutionTape get() = this as ExecutionTape

/** NumPy broadcast of [sa] and [sb] (right-aligned; a dynamic dimension meets any), or a failure naming [operands]. */
internal fun ExecutionTape.broadcastShape(op: Op, sa: LongArray, sb: LongArray, operands: List<Tensor>): LongArray {
    val r = maxOf(sa.size, sb.size)
    return LongArray(r) { i ->
        val x = sa.getOrElse(i - (r - sa.size)) { 1L }
        val y = sb.getOrElse(i - (r - sb.size)) { 1L }
        when {
            x == y -> x
            x == 1L -> y
            y == 1L -> x
            x == DYNAMIC -> y
            y == DYNAMIC -> x
            else -> fail(op, operands, "shapes do not broadcast (dimension $i of the aligned shapes: $x vs $y)")
        }
    }
}

/** [op] of two operands of one dtype, broadcast. */
internal fun ExecutionTape.binary(op: Op, a: Tensor, b: Tensor): Tensor {
    val dtype = dtypes.pair(op, a, b)
    return record(op, listOf(a, b), broadcastShape(op, a.shape, b.shape, listOf(a, b)), dtype)
}

/** [op] (and, or) of two bool or integer operands of one dtype, broadcast. */
internal fun ExecutionTape.logical(op: Op, a: Tensor, b: Tensor): Tensor {
    val float = listOf(a, b).firstOrNull { it.dtype.isFloat }
    if (float != null) fail(op, listOf(a, b), "takes bool (or integer, bitwise) operands, not ${float.dtype.json}: compare the values first")
    return binary(op, a, b)
}

/** [op] of one operand, its shape and (seen) dtype. */
internal fun ExecutionTape.unary(op: Op, x: Tensor): Tensor = record(op, listOf(x), x.shape, dtypes.one(op, x))
