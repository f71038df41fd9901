package dev.tapeout

/** One recorded operation. */
class TapeOp internal constructor(
    val op: String,
    val inputs: List<Tensor>,
    val outputs: List<Tensor>,
    val attrs: Map<String, Any>,
)

/**
 * Records what a model does: tensors (inputs, weights that borrow your arrays, activations) and the ops between
 * them. Each op function infers its result's shape and dtype, records the op, and returns the result, so a model
 * is written as ordinary Kotlin: `val h = tape.relu(tape.matmul(x, w))`. Mark the results with [output].
 */
class ExecutionTape {
    private val tensorList = ArrayList<Tensor>()
    private val opList = ArrayList<TapeOp>()
    private val outputList = ArrayList<Tensor>()
    private val declaredInputs = LinkedHashSet<Int>()

    val tensors: List<Tensor> get() = tensorList
    val ops: List<TapeOp> get() = opList
    val outputs: List<Tensor> get() = outputList

    /** Tensors created with [input]. */
    val inputIds: Set<Int> get() = declaredInputs

    private fun newTensor(name: String?, shape: LongArray, dtype: DType, path: String?, data: TensorData): Tensor {
        val t = Tensor(tensorList.size, name ?: "t${tensorList.size}", shape, dtype, path, data)
        tensorList.add(t)
        return t
    }

    // --- inputs and weights ---------------------------------------------------------------------

    /** A runtime input; use [DYNAMIC] for a dimension known only at run time. */
    fun input(name: String, shape: LongArray, dtype: DType = DType.F32): Tensor =
        newTensor(name, shape, dtype, null, ShapeOnly).also { declaredInputs.add(it.id) }

    /** A frozen f32 weight that borrows [values] (never copied). */
    fun weight(path: String, values: FloatArray, vararg shape: Long): Tensor {
        require(shape.fold(1L) { a, d -> a * d } == values.size.toLong()) { "weight '$path': ${values.size} values for shape ${shape.toList()}" }
        return newTensor(null, shape, DType.F32, path, FloatArrayTensorData(values))
    }

    /** A frozen bf16 or f16 weight: little-endian 16-bit values, widened to f32 chunk by chunk when exported. */
    fun halfWeight(path: String, bytes: ByteArray, dtype: DType, vararg shape: Long): Tensor {
        require(dtype == DType.BF16 || dtype == DType.F16) { "halfWeight takes BF16 or F16, not $dtype" }
        return newTensor(null, shape, dtype, path, HalfTensorData(bytes))
    }

    /** A frozen bf16 or f16 weight given as 16-bit patterns (`bits[i]` is element i), widened to f32 chunk by chunk when exported. */
    fun halfWeight(path: String, bits: ShortArray, dtype: DType, vararg shape: Long): Tensor {
        require(dtype == DType.BF16 || dtype == DType.F16) { "halfWeight takes BF16 or F16, not $dtype" }
        require(shape.fold(1L) { a, d -> a * d } == bits.size.toLong()) { "weight '$path': ${bits.size} values for shape ${shape.toList()}" }
        return newTensor(null, shape, dtype, path, HalfBitsTensorData(bits))
    }

    /** A frozen packed weight (logical dtype f32), refused or dequantized according to [PackedConstantHandling]. */
    fun packedWeight(path: String, bytes: ByteArray, encoding: String, vararg shape: Long): Tensor =
        newTensor(null, shape, DType.F32, path, PackedTensorData(bytes, encoding))

    /** A frozen tensor of another dtype (integer tables, masks), little-endian bytes. */
    fun denseWeight(path: String, bytes: ByteArray, dtype: DType, vararg shape: Long): Tensor =
        newTensor(null, shape, dtype, path, DenseBytesTensorData(bytes))

    /** A file region the program reads at run time (a graph input). */
    fun mapped(name: String, file: String, offset: Long, length: Long, dtype: DType, vararg shape: Long): Tensor =
        newTensor(name, shape, dtype, null, MappedTensorData(file, offset, length))

    /** Marks the model's results, in order. */
    fun output(vararg results: Tensor) {
        outputList.addAll(results)
    }

    /** Records [op] with explicitly given result shape and dtype (for ops the tracing API does not cover). */
    fun record(op: String, inputs: List<Tensor>, shape: LongArray, dtype: DType, attrs: Map<String, Any> = emptyMap(), name: String? = null): Tensor {
        val out = newTensor(name, shape, dtype, null, ShapeOnly)
        opList.add(TapeOp(op, inputs, listOf(out), attrs))
        return out
    }

    // --- elementwise --------------------------------------------------------------------------------

    /**
     * The element type ops see: a frozen bf16/f16 weight is widened to f32 when exported, so the ops that use it
     * compute in f32 (the tensor keeps its stored dtype).
     */
    private val Tensor.valueType: DType
        get() = if (data is HalfTensorData || data is HalfBitsTensorData) DType.F32 else dtype

    private fun broadcastShape(a: LongArray, b: LongArray): LongArray {
        val r = maxOf(a.size, b.size)
        return LongArray(r) { i ->
            val x = a.getOrElse(i - (r - a.size)) { 1L }
            val y = b.getOrElse(i - (r - b.size)) { 1L }
            when {
                x == y -> x
                x == 1L -> y
                y == 1L -> x
                x == DYNAMIC -> y
                y == DYNAMIC -> x
                else -> throw GraphValidationException("shapes ${a.toList()} and ${b.toList()} do not broadcast")
            }
        }
    }

    private fun binary(op: String, a: Tensor, b: Tensor): Tensor {
        if (a.valueType != b.valueType) throw GraphValidationException("$op: dtypes ${a.valueType} and ${b.valueType} differ; insert convert")
        return record(op, listOf(a, b), broadcastShape(a.shape, b.shape), a.valueType)
    }

    fun add(a: Tensor, b: Tensor) = binary("add", a, b)
    fun sub(a: Tensor, b: Tensor) = binary("sub", a, b)
    fun mul(a: Tensor, b: Tensor) = binary("mul", a, b)
    fun div(a: Tensor, b: Tensor) = binary("div", a, b)
    fun pow(a: Tensor, b: Tensor) = binary("pow", a, b)
    fun max(a: Tensor, b: Tensor) = binary("max", a, b)
    fun min(a: Tensor, b: Tensor) = binary("min", a, b)

    private fun unary(op: String, x: Tensor) = record(op, listOf(x), x.shape, x.valueType)
    fun neg(x: Tensor) = unary("neg", x)
    fun abs(x: Tensor) = unary("abs", x)
    fun exp(x: Tensor) = unary("exp", x)
    fun log(x: Tensor) = unary("log", x)
    fun sqrt(x: Tensor) = unary("sqrt", x)
    fun rsqrt(x: Tensor) = unary("rsqrt", x)
    fun tanh(x: Tensor) = unary("tanh", x)
    fun sigmoid(x: Tensor) = unary("sigmoid", x)
    fun relu(x: Tensor) = unary("relu", x)
    fun gelu(x: Tensor) = unary("gelu", x)
    fun silu(x: Tensor) = unary("silu", x)
    fun sin(x: Tensor) = unary("sin", x)
    fun cos(x: Tensor) = unary("cos", x)
    fun softmax(x: Tensor, axis: Int = -1) = record("softmax", listOf(x), x.shape, x.valueType, mapOf("axis" to axis))
    fun causalMask(scores: Tensor) = unary("causal_mask", scores)
    fun convert(x: Tensor, to: DType) = record("convert", listOf(x), x.shape, to)
    fun clamp(x: Tensor, min: Double, max: Double) = record("clamp", listOf(x), x.shape, x.valueType, mapOf("min" to min, "max" to max))
    fun select(pred: Tensor, a: Tensor, b: Tensor) = record("select", listOf(pred, a, b), a.shape, a.valueType)
    fun compare(a: Tensor, b: Tensor, direction: String) =
        record("compare", listOf(a, b), broadcastShape(a.shape, b.shape), DType.BOOL, mapOf("direction" to direction))
    fun iota(shape: LongArray, dim: Int, dtype: DType = DType.I32) = record("iota", emptyList(), shape, dtype, mapOf("dim" to dim))

    // --- shapes ---------------------------------------------------------------------------------------

    private fun axis(a: Int, rank: Int): Int {
        val r = if (a < 0) a + rank else a
        if (r !in 0 until rank) throw GraphValidationException("axis $a is out of range for rank $rank")
        return r
    }

    fun reshape(x: Tensor, vararg shape: Long) = record("reshape", listOf(x), shape, x.valueType)
    fun broadcast(x: Tensor, vararg shape: Long) = record("broadcast", listOf(x), shape, x.valueType)

    fun transpose(x: Tensor, vararg perm: Int): Tensor {
        val p = if (perm.isEmpty()) IntArray(x.rank) { x.rank - 1 - it } else perm
        return record("transpose", listOf(x), LongArray(x.rank) { x.shape[p[it]] }, x.valueType, mapOf("perm" to p.toList()))
    }

    fun concat(parts: List<Tensor>, axis: Int = 0): Tensor {
        val a = axis(axis, parts[0].rank)
        val shape = parts[0].shape.copyOf()
        shape[a] = parts.sumOf { it.shape[a] }
        return record("concat", parts, shape, parts[0].valueType, mapOf("axis" to a))
    }

    fun slice(x: Tensor, start: LongArray, limit: LongArray, stride: LongArray = LongArray(x.rank) { 1 }): Tensor {
        val shape = LongArray(x.rank) { (limit[it] - start[it] + stride[it] - 1) / stride[it] }
        return record("slice", listOf(x), shape, x.valueType, mapOf("start" to start.toList(), "limit" to limit.toList(), "stride" to stride.toList()))
    }

    /** `table[indices]` along [axis] (an embedding lookup for axis 0). */
    fun gather(table: Tensor, indices: Tensor, axis: Int = 0): Tensor {
        val a = axis(axis, table.rank)
        val shape = table.shape.sliceArray(0 until a) + indices.shape + table.shape.sliceArray(a + 1 until table.rank)
        return record("gather", listOf(table, indices), shape, table.valueType, mapOf("axis" to a))
    }

    /** `[.., K] x [K, N]`, or batched `[B.., M, K] x [B.., K, N]`. */
    fun matmul(a: Tensor, b: Tensor): Tensor {
        val shape = if (b.rank == 2) a.shape.copyOf().also { it[it.size - 1] = b.shape[1] }
        else a.shape.copyOf().also { it[it.size - 1] = b.shape[b.rank - 1] }
        if (a.shape.last() != b.shape[b.rank - 2] && a.shape.last() != DYNAMIC) {
            throw GraphValidationException("matmul: ${a.shape.toList()} x ${b.shape.toList()} do not contract")
        }
        return record("matmul", listOf(a, b), shape, a.valueType)
    }

    private fun window(size: Long, k: Long, s: Long, d: Long, p0: Long, p1: Long) = (size + p0 + p1 - (d * (k - 1) + 1)) / s + 1

    /** NCHW input, OIHW weight; [padding] is (top, bottom, left, right). */
    fun conv2d(x: Tensor, w: Tensor, bias: Tensor? = null, stride: IntArray = intArrayOf(1, 1), padding: IntArray = intArrayOf(0, 0, 0, 0),
               dilation: IntArray = intArrayOf(1, 1), groups: Int = 1): Tensor {
        val h = window(x.shape[2], w.shape[2], stride[0].toLong(), dilation[0].toLong(), padding[0].toLong(), padding[1].toLong())
        val wd = window(x.shape[3], w.shape[3], stride[1].toLong(), dilation[1].toLong(), padding[2].toLong(), padding[3].toLong())
        val ins = listOfNotNull(x, w, bias)
        return record("conv2d", ins, longArrayOf(x.shape[0], w.shape[0], h, wd), x.valueType,
            mapOf("stride" to stride.toList(), "padding" to padding.toList(), "dilation" to dilation.toList(), "groups" to groups))
    }

    private fun pool(op: String, x: Tensor, kernel: IntArray, stride: IntArray, padding: IntArray): Tensor {
        val h = window(x.shape[2], kernel[0].toLong(), stride[0].toLong(), 1, padding[0].toLong(), padding[1].toLong())
        val w = window(x.shape[3], kernel[1].toLong(), stride[1].toLong(), 1, padding[2].toLong(), padding[3].toLong())
        return record(op, listOf(x), longArrayOf(x.shape[0], x.shape[1], h, w), x.valueType,
            mapOf("kernel" to kernel.toList(), "stride" to stride.toList(), "padding" to padding.toList()))
    }

    fun maxPool2d(x: Tensor, kernel: IntArray, stride: IntArray = kernel, padding: IntArray = intArrayOf(0, 0, 0, 0)) = pool("max_pool2d", x, kernel, stride, padding)
    fun avgPool2d(x: Tensor, kernel: IntArray, stride: IntArray = kernel, padding: IntArray = intArrayOf(0, 0, 0, 0)) = pool("avg_pool2d", x, kernel, stride, padding)

    private fun reduce(op: String, x: Tensor, axes: IntArray, keepDims: Boolean): Tensor {
        val ax = (if (axes.isEmpty()) IntArray(x.rank) { it } else axes).map { axis(it, x.rank) }.toSet()
        val shape = if (keepDims) LongArray(x.rank) { if (it in ax) 1L else x.shape[it] }
        else x.shape.filterIndexed { i, _ -> i !in ax }.toLongArray()
        return record(op, listOf(x), shape, x.valueType, mapOf("axes" to ax.sorted(), "keepdims" to keepDims))
    }

    fun reduceSum(x: Tensor, vararg axes: Int, keepDims: Boolean = false) = reduce("reduce_sum", x, axes, keepDims)
    fun reduceMean(x: Tensor, vararg axes: Int, keepDims: Boolean = false) = reduce("reduce_mean", x, axes, keepDims)
    fun reduceMax(x: Tensor, vararg axes: Int, keepDims: Boolean = false) = reduce("reduce_max", x, axes, keepDims)

    fun layerNorm(x: Tensor, gamma: Tensor? = null, beta: Tensor? = null, eps: Double = 1e-5) =
        record("layer_norm", listOfNotNull(x, gamma, beta), x.shape, x.valueType, mapOf("eps" to eps))

    fun rmsNorm(x: Tensor, gamma: Tensor? = null, eps: Double = 1e-6) =
        record("rms_norm", listOfNotNull(x, gamma), x.shape, x.valueType, mapOf("eps" to eps))

    /** Rotary position embedding: `x·cos + rotate_half(x)·sin`, cos/sin broadcastable to `x` `[.., S, D]`. */
    fun rope(x: Tensor, cos: Tensor, sin: Tensor) = record("rope", listOf(x, cos, sin), x.shape, x.valueType)

    /** Scaled dot-product attention: q `[.., S, D]`, k `[.., T, D]`, v `[.., T, Dv]`. */
    fun sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor? = null, causal: Boolean = false, scale: Double? = null): Tensor {
        val shape = q.shape.copyOf().also { it[it.size - 1] = v.shape.last() }
        val attrs = mutableMapOf<String, Any>("causal" to causal)
        if (scale != null) attrs["scale"] = scale
        return record("sdpa", listOfNotNull(q, k, v, mask), shape, q.valueType, attrs)
    }

    // --- serialisation ------------------------------------------------------------------------------

    /** The tape as tapeout's graph JSON (`tapeout-graph/1`); JVM data travels separately, by reference. */
    internal fun toGraphJson(name: String): String {
        val sb = StringBuilder()
        sb.append("{\"format\":\"tapeout-graph/1\",\"name\":").append(Json.quote(name)).append(",\"tensors\":[")
        tensorList.forEachIndexed { i, t ->
            if (i > 0) sb.append(',')
            sb.append("{\"name\":").append(Json.quote(t.name)).append(",\"dtype\":\"").append(t.dtype.json).append("\",\"shape\":[")
            t.shape.forEachIndexed { j, d -> if (j > 0) sb.append(','); sb.append(if (d == DYNAMIC) "\"?\"" else d.toString()) }
            sb.append(']')
            if (t.path != null) sb.append(",\"path\":").append(Json.quote(t.path))
            val data = t.data
            if (data is MappedTensorData) {
                sb.append(",\"data\":{\"file\":").append(Json.quote(data.path)).append(",\"offset\":").append(data.offset).append(",\"mapped\":true}")
            }
            sb.append('}')
        }
        sb.append("],\"nodes\":[")
        opList.forEachIndexed { i, op ->
            if (i > 0) sb.append(',')
            sb.append("{\"op\":").append(Json.quote(op.op)).append(",\"inputs\":[")
            sb.append(op.inputs.joinToString(",") { Json.quote(it.name) }).append("],\"outputs\":[")
            sb.append(op.outputs.joinToString(",") { Json.quote(it.name) }).append("],\"attrs\":{")
            sb.append(op.attrs.entries.joinToString(",") { (k, v) -> Json.quote(k) + ":" + Json.value(v) }).append("}}")
        }
        sb.append("],\"outputs\":[").append(outputList.joinToString(",") { Json.quote(it.name) }).append("]}")
        return sb.toString()
    }
}
