package dev.tapeout

/** One recorded operation. [site] is the line of your code that recorded it, if the tape captures call sites. */
class TapeOp internal constructor(
    val op: String,
    val inputs: List<Tensor>,
    val outputs: List<Tensor>,
    val attrs: Map<String, Any>,
    val site: StackTraceElement? = null,
)

/**
 * Records what a model does: tensors (inputs, weights that borrow your arrays or stay in checkpoint files,
 * activations) and the ops between them. Each op function infers its result's shape and dtype, records the op,
 * and returns the result, so a model is written as ordinary Kotlin: `val h = relu(x matmul w + b)` (operators:
 * `Operators.kt`) or `tape.relu(tape.add(tape.matmul(x, w), b))`. Mark the results with [output].
 *
 * Parameter keys come from the module path: inside [scope]`("model.layers.3") { … }`, `weight("q.weight", …)`
 * is keyed `model.layers.3.q.weight`, as PyTorch's `state_dict()` names it ([Module] does this for you).
 *
 * [compute] is the float type of solitary uses of 16-bit weights: with the default `F32`, an op whose only float
 * operand is a bf16/f16 weight (a gather, a transpose) computes in f32; with `BF16`/`F16`, in that type. A
 * 16-bit weight combined with an activation takes the activation's type when it is its own (a bf16 weight with a
 * bf16 activation computes in bf16) and f32 otherwise; one weight is seen in one type for the whole tape.
 * [captureSites] records the line of your code behind each op (one stack walk per op), which errors name.
 */
class ExecutionTape(val compute: DType = DType.F32, val captureSites: Boolean = true) {
    init {
        require(compute.isFloat) { "compute must be a float type, not $compute" }
    }

    private val tensorList = ArrayList<Tensor>()
    private val opList = ArrayList<TapeOp>()
    private val outputList = ArrayList<Tensor>()
    private val declaredInputs = LinkedHashSet<Int>()
    private val names = HashMap<String, Tensor>()
    private val scopes = ArrayList<String>()
    private val checkpoints = ArrayList<Checkpoint>()
    private val byKey = HashMap<String, Tensor>()
    private val views = HashMap<Int, DType>()
    private val transposed = HashMap<Int, Tensor>()
    private val scalars = HashMap<Pair<Double, DType>, Tensor>()

    val tensors: List<Tensor> get() = tensorList
    val ops: List<TapeOp> get() = opList
    val outputs: List<Tensor> get() = outputList

    /** Tensors created with [input]. */
    val inputIds: Set<Int> get() = declaredInputs

    private fun newTensor(name: String?, shape: LongArray, dtype: DType, path: String?, data: TensorData): Tensor {
        val id = tensorList.size
        var n = name ?: "t$id"
        // Generated names step aside for names the user chose.
        if (name == null) while (names.containsKey(n)) n = "t$id.${names.size}"
        if (names.containsKey(n)) {
            throw GraphValidationException("tensor name '$n' is used twice (first ${names.getValue(n).description}); " +
                "give each input and output its own name")
        }
        val t = Tensor(id, n, shape, dtype, path, data, this, callSite())
        tensorList.add(t)
        names[n] = t
        return t
    }

    /** The first stack frame outside the tapeout library: the line of the model that is being recorded. */
    private fun callSite(): StackTraceElement? {
        if (!captureSites) return null
        return Throwable().stackTrace.firstOrNull { !isLibraryFrame(it) }
    }

    /** ` at File.kt:LINE` of the calling model code, or nothing. */
    private fun at(): String = callSite()?.let { " at ${siteText(it)}" } ?: ""

    /** Throws a [GraphValidationException] naming the op, the site that records it, and its operands. */
    internal fun fail(op: String, operands: List<Tensor>, detail: String): Nothing {
        val at = callSite()?.let { " at ${siteText(it)}" } ?: ""
        val what = if (operands.isEmpty()) "" else " of " + operands.joinToString(", ") { it.description }
        throw GraphValidationException("$op$at$what: $detail")
    }

    // --- scopes and keys ------------------------------------------------------------------------

    /** The module path of the innermost [scope] (`""` outside any). */
    val currentScope: String get() = scopes.lastOrNull() ?: ""

    /** The parameter key of [name] in the current scope: `model.layers.3.` + [name]. */
    fun key(name: String): String = if (scopes.isEmpty()) name else "$currentScope.$name"

    /**
     * Runs [block] with [name] appended to the module path (`scope("model") { scope("layers.0") { … } }` is
     * `model.layers.0`): weight paths and [param] names inside are relative to it.
     */
    fun <T> scope(name: String, block: ExecutionTape.() -> T): T {
        require(name.isNotEmpty() && !name.startsWith('.') && !name.endsWith('.')) { "scope name '$name' must be a non-empty dotted path" }
        scopes.add(key(name))
        try {
            return block()
        } finally {
            scopes.removeAt(scopes.size - 1)
        }
    }

    /** Makes [checkpoint]'s tensors available to [param] by their names (its keys). */
    fun load(checkpoint: Checkpoint) {
        checkpoints.add(checkpoint)
    }

    /**
     * The parameter [name] of the current scope (key [key]`(name)`), from a checkpoint given to [load]. Asking
     * twice for one key gives the same tensor: one parameter, one archive entry (a tied embedding and LM head).
     * [shape], when given, is checked against the stored shape.
     */
    fun param(name: String, vararg shape: Int): Tensor = paramAt(key(name), longs(shape).takeIf { shape.isNotEmpty() })

    /** [param] by full key; [shape] checked when given. */
    internal fun paramAt(k: String, shape: LongArray?): Tensor {
        val t = byKey[k] ?: run {
            val found = checkpoints.firstNotNullOfOrNull { it.tensors[k] }
                ?: fail("param", emptyList(), "no checkpoint given to load() has a tensor '$k'" + nearKeys(k))
            checkpointWeightAt(k, found)
        }
        if (shape != null && !t.shape.contentEquals(shape)) {
            fail("param", listOf(t), "the module expects shape ${shapeText(shape)}")
        }
        return t
    }

    /** The tensor already keyed [k] on this tape, else [make]'s. */
    internal fun keyedOrMake(k: String, make: () -> Tensor): Tensor = byKey[k] ?: make()

    private fun nearKeys(k: String): String {
        val all = checkpoints.flatMap { it.tensors.keys }
        val tail = k.substringAfterLast('.')
        val near = all.filter { it.endsWith(".$tail") || it == tail }.take(5)
        return if (near.isEmpty()) " (${all.size} tensors; none ends in '.$tail')" else "; keys with that ending: $near"
    }

    private fun keyed(path: String, t: Tensor): Tensor {
        byKey.putIfAbsent(path, t)
        return t
    }

    // --- inputs and weights ---------------------------------------------------------------------

    /** A runtime input; use [DYNAMIC] for a dimension known only at run time. */
    fun input(name: String, shape: LongArray, dtype: DType = DType.F32): Tensor =
        newTensor(name, shape, dtype, null, ShapeOnly).also { declaredInputs.add(it.id) }

    /** A runtime input with Int dimensions (`-1`, [DYNAMIC], for one known only at run time). */
    fun input(name: String, vararg shape: Int, dtype: DType = DType.F32): Tensor = input(name, longs(shape), dtype)

    private fun count(shape: LongArray) = shape.fold(1L) { a, d -> a * d }

    /** A frozen f32 weight that borrows [values] (never copied), keyed [key]`(path)`. */
    fun weight(path: String, values: FloatArray, vararg shape: Long): Tensor = weightAt(key(path), values, shape)

    internal fun weightAt(k: String, values: FloatArray, shape: LongArray): Tensor {
        require(count(shape) == values.size.toLong()) { "weight '$k'${at()}: ${values.size} values for shape ${shape.toList()}" }
        return keyed(k, newTensor(null, shape, DType.F32, k, FloatArrayTensorData(values)))
    }

    /** [weight] with Int dimensions. */
    fun weight(path: String, values: FloatArray, vararg shape: Int): Tensor = weight(path, values, *longs(shape))

    /** A frozen weight whose bytes stay in a checkpoint file ([SafeTensors.open], [Gguf.open]), keyed [key]`(path)`. */
    fun weight(path: String, tensor: CheckpointTensor): Tensor = checkpointWeightAt(key(path), tensor)

    private fun checkpointWeightAt(k: String, c: CheckpointTensor): Tensor =
        keyed(k, newTensor(null, c.shape, c.dtype, k, FileTensorData(c.file.path, c.offset, c.length, c.encoding)))

    /** A frozen bf16 or f16 weight: little-endian 16-bit values, kept as stored (or widened when exported). */
    fun halfWeight(path: String, bytes: ByteArray, dtype: DType, vararg shape: Long): Tensor {
        require(dtype == DType.BF16 || dtype == DType.F16) { "halfWeight takes BF16 or F16, not $dtype" }
        val k = key(path)
        return keyed(k, newTensor(null, shape, dtype, k, HalfTensorData(bytes)))
    }

    /** [halfWeight] of little-endian bytes with Int dimensions. */
    fun halfWeight(path: String, bytes: ByteArray, dtype: DType, vararg shape: Int): Tensor = halfWeight(path, bytes, dtype, *longs(shape))

    /** A frozen bf16 or f16 weight given as 16-bit patterns (`bits[i]` is element i), kept as stored (or widened when exported). */
    fun halfWeight(path: String, bits: ShortArray, dtype: DType, vararg shape: Long): Tensor = halfWeightAt(key(path), bits, dtype, shape)

    internal fun halfWeightAt(k: String, bits: ShortArray, dtype: DType, shape: LongArray): Tensor {
        require(dtype == DType.BF16 || dtype == DType.F16) { "halfWeight takes BF16 or F16, not $dtype" }
        require(count(shape) == bits.size.toLong()) { "weight '$k'${at()}: ${bits.size} values for shape ${shape.toList()}" }
        return keyed(k, newTensor(null, shape, dtype, k, HalfBitsTensorData(bits)))
    }

    /** [halfWeight] with Int dimensions. */
    fun halfWeight(path: String, bits: ShortArray, dtype: DType, vararg shape: Int): Tensor = halfWeight(path, bits, dtype, *longs(shape))

    /** A frozen packed weight (logical dtype f32), refused, dequantized or kept packed according to [PackedConstantHandling]. */
    fun packedWeight(path: String, bytes: ByteArray, encoding: String, vararg shape: Long): Tensor = packedWeightAt(key(path), bytes, encoding, shape)

    internal fun packedWeightAt(k: String, bytes: ByteArray, encoding: String, shape: LongArray): Tensor =
        keyed(k, newTensor(null, shape, DType.F32, k, PackedTensorData(bytes, encoding)))

    /** [packedWeight] with Int dimensions. */
    fun packedWeight(path: String, bytes: ByteArray, encoding: String, vararg shape: Int): Tensor = packedWeight(path, bytes, encoding, *longs(shape))

    /** A frozen tensor of another dtype (integer tables, masks), little-endian bytes. */
    fun denseWeight(path: String, bytes: ByteArray, dtype: DType, vararg shape: Long): Tensor {
        val k = key(path)
        return keyed(k, newTensor(null, shape, dtype, k, DenseBytesTensorData(bytes)))
    }

    /** [denseWeight] with Int dimensions. */
    fun denseWeight(path: String, bytes: ByteArray, dtype: DType, vararg shape: Int): Tensor = denseWeight(path, bytes, dtype, *longs(shape))

    /** A file region the program reads at run time (a graph input). */
    fun mapped(name: String, file: String, offset: Long, length: Long, dtype: DType, vararg shape: Long): Tensor =
        newTensor(name, shape, dtype, null, MappedTensorData(file, offset, length))

    /** [mapped] with Int dimensions. */
    fun mapped(name: String, file: String, offset: Long, length: Long, dtype: DType, vararg shape: Int): Tensor =
        mapped(name, file, offset, length, dtype, *longs(shape))

    /**
     * A scalar constant of [dtype] (a float type, or an integer type for whole values): written inline in the
     * module, one per value and dtype however often it is used. `x * 0.5f` makes one of `x`'s dtype.
     */
    fun scalar(value: Double, dtype: DType = DType.F32): Tensor = scalars.getOrPut(value to dtype) {
        val name = "scalar.${scalars.size}"
        if (dtype == DType.F32) newTensor(name, LongArray(0), dtype, null, FloatArrayTensorData(floatArrayOf(value.toFloat())))
        else newTensor(name, LongArray(0), dtype, null, DenseBytesTensorData(scalarBytes(value, dtype)))
    }

    /** Marks the model's results, in order. */
    fun output(vararg results: Tensor) {
        outputList.addAll(results)
    }

    /** Marks [result] as the next result, named [name] (its `tapeout.name` in the module, and its name in the graph). */
    fun output(name: String, result: Tensor): Tensor {
        if (result.tape !== this) fail("output", listOf(result), "the tensor belongs to another tape")
        val other = names[name]
        if (other != null && other !== result) fail("output", listOf(result), "the name '$name' is already ${other.description}")
        names.remove(result.name)
        result.name = name
        names[name] = result
        outputList.add(result)
        return result
    }

    /** Records [op] with explicitly given result shape and dtype (for ops the tracing API does not cover). */
    fun record(op: String, inputs: List<Tensor>, shape: LongArray, dtype: DType, attrs: Map<String, Any> = emptyMap(), name: String? = null): Tensor {
        for (t in inputs) if (t.tape !== this) fail(op, inputs, "${t.description} belongs to another tape")
        val out = newTensor(name, shape, dtype, null, ShapeOnly)
        opList.add(TapeOp(op, inputs, listOf(out), attrs, out.site))
        return out
    }

    // --- dtypes ------------------------------------------------------------------------------------

    /** A bf16/f16 weight, which ops may see as f32 or as its own type. */
    private fun Tensor.isHalfWeight(): Boolean = when (val d = data) {
        is HalfTensorData, is HalfBitsTensorData -> true
        is FileTensorData -> d.encoding == null && (dtype == DType.BF16 || dtype == DType.F16)
        else -> false
    }

    /**
     * The type ops see [t] as: its own, except for a 16-bit weight, which is seen as [partner] when that is its
     * own type, as f32 next to another float, and as [compute] (if its own type, else f32) alone. One weight keeps
     * one view for the whole tape, as the native side gives it one.
     */
    private fun seen(t: Tensor, partner: DType?, op: String): DType {
        if (!t.isHalfWeight()) return t.dtype
        val fixed = views[t.id]
        val want = when {
            partner == null || !partner.isFloat -> fixed ?: if (compute == t.dtype) t.dtype else DType.F32
            partner == t.dtype -> t.dtype
            else -> DType.F32
        }
        if (fixed != null && fixed != want) {
            fail(op, listOf(t), "this ${t.dtype.json} weight is already used as ${fixed.json} elsewhere in the tape and cannot be seen as " +
                "${want.json} here; convert it explicitly (convert(w, DType.${want.name}))")
        }
        views[t.id] = want
        return want
    }

    /** The types of two operands that must agree. */
    private fun pair(op: String, a: Tensor, b: Tensor): DType {
        val ha = a.isHalfWeight()
        val hb = b.isHalfWeight()
        val ta: DType
        val tb: DType
        when {
            ha && !hb -> { tb = b.dtype; ta = seen(a, tb, op) }
            hb && !ha -> { ta = a.dtype; tb = seen(b, ta, op) }
            ha -> { ta = seen(a, null, op); tb = seen(b, ta, op) }
            else -> { ta = a.dtype; tb = b.dtype }
        }
        if (ta != tb) fail(op, listOf(a, b), "dtypes ${ta.json} and ${tb.json} differ; insert convert(…)")
        return ta
    }

    private fun one(op: String, x: Tensor): DType = seen(x, null, op)

    // --- elementwise --------------------------------------------------------------------------------

    private fun broadcastShape(op: String, a: Tensor, b: Tensor): LongArray = broadcastShape(op, a.shape, b.shape, listOf(a, b))

    private fun broadcastShape(op: String, sa: LongArray, sb: LongArray, operands: List<Tensor>): LongArray {
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

    private fun binary(op: String, a: Tensor, b: Tensor): Tensor {
        val dtype = pair(op, a, b)
        return record(op, listOf(a, b), broadcastShape(op, a, b), dtype)
    }

    fun add(a: Tensor, b: Tensor) = binary("add", a, b)
    fun sub(a: Tensor, b: Tensor) = binary("sub", a, b)
    fun mul(a: Tensor, b: Tensor) = binary("mul", a, b)
    fun div(a: Tensor, b: Tensor) = binary("div", a, b)
    fun pow(a: Tensor, b: Tensor) = binary("pow", a, b)
    fun max(a: Tensor, b: Tensor) = binary("max", a, b)
    fun min(a: Tensor, b: Tensor) = binary("min", a, b)

    private fun unary(op: String, x: Tensor) = record(op, listOf(x), x.shape, one(op, x))
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
    fun softmax(x: Tensor, axis: Int = -1): Tensor {
        axis("softmax", x, axis)
        return record("softmax", listOf(x), x.shape, one("softmax", x), mapOf("axis" to axis))
    }
    fun causalMask(scores: Tensor) = unary("causal_mask", scores)

    /** [x] converted to [to]: the only way an activation changes type (ops never convert implicitly; an f32 op
     *  may read a 16-bit weight, which is exact). */
    fun convert(x: Tensor, to: DType) = record("convert", listOf(x), x.shape, to)
    fun clamp(x: Tensor, min: Double, max: Double) = record("clamp", listOf(x), x.shape, one("clamp", x), mapOf("min" to min, "max" to max))
    fun select(pred: Tensor, a: Tensor, b: Tensor): Tensor {
        if (pred.dtype != DType.BOOL) fail("select", listOf(pred, a, b), "the predicate must be bool, not ${pred.dtype.json}")
        val dtype = pair("select", a, b)
        val shape = broadcastShape("select", pred.shape, broadcastShape("select", a, b), listOf(pred, a, b))
        return record("select", listOf(pred, a, b), shape, dtype)
    }
    fun compare(a: Tensor, b: Tensor, direction: String): Tensor {
        if (direction !in setOf("EQ", "NE", "LT", "LE", "GT", "GE")) fail("compare", listOf(a, b), "direction '$direction' is not one of EQ NE LT LE GT GE")
        pair("compare", a, b)
        return record("compare", listOf(a, b), broadcastShape("compare", a, b), DType.BOOL, mapOf("direction" to direction))
    }
    fun iota(shape: LongArray, dim: Int, dtype: DType = DType.I32) = record("iota", emptyList(), shape, dtype, mapOf("dim" to dim))
    /** [iota] with Int dimensions. */
    fun iota(shape: IntArray, dim: Int, dtype: DType = DType.I32) = iota(longs(shape), dim, dtype)

    // --- shapes ---------------------------------------------------------------------------------------

    private fun axis(op: String, x: Tensor, a: Int): Int {
        val r = if (a < 0) a + x.rank else a
        if (r !in 0 until x.rank) fail(op, listOf(x), "axis $a is out of range for rank ${x.rank}")
        return r
    }

    fun reshape(x: Tensor, vararg shape: Long): Tensor {
        val known = shape.filter { it != DYNAMIC }.fold(1L) { a, d -> a * d }
        if (x.shape.none { it == DYNAMIC } && shape.none { it == DYNAMIC } && known != count(x.shape)) {
            fail("reshape", listOf(x), "${count(x.shape)} elements cannot be reshaped to ${shapeText(shape)} ($known)")
        }
        return record("reshape", listOf(x), shape, one("reshape", x))
    }
    /** [reshape] with Int dimensions. */
    fun reshape(x: Tensor, vararg shape: Int) = reshape(x, *longs(shape))
    fun broadcast(x: Tensor, vararg shape: Long) = record("broadcast", listOf(x), shape, one("broadcast", x))
    /** [broadcast] with Int dimensions. */
    fun broadcast(x: Tensor, vararg shape: Int) = broadcast(x, *longs(shape))

    fun transpose(x: Tensor, vararg perm: Int): Tensor {
        val p = if (perm.isEmpty()) IntArray(x.rank) { x.rank - 1 - it } else perm
        if (p.size != x.rank || p.sorted() != (0 until x.rank).toList()) fail("transpose", listOf(x), "perm ${p.toList()} is not a permutation of 0..${x.rank - 1}")
        return record("transpose", listOf(x), LongArray(x.rank) { x.shape[p[it]] }, one("transpose", x), mapOf("perm" to p.toList()))
    }

    fun concat(parts: List<Tensor>, axis: Int = 0): Tensor {
        if (parts.isEmpty()) fail("concat", parts, "needs at least one tensor")
        val a = axis("concat", parts[0], axis)
        val dtype = one("concat", parts[0])
        for (p in parts.drop(1)) pair("concat", parts[0], p)
        for (p in parts) if (p.rank != parts[0].rank) fail("concat", parts, "ranks differ")
        val shape = parts[0].shape.copyOf()
        shape[a] = if (parts.any { it.shape[a] == DYNAMIC }) DYNAMIC else parts.sumOf { it.shape[a] }
        return record("concat", parts, shape, dtype, mapOf("axis" to a))
    }

    fun slice(x: Tensor, start: LongArray, limit: LongArray, stride: LongArray = LongArray(x.rank) { 1 }): Tensor {
        if (start.size != x.rank || limit.size != x.rank || stride.size != x.rank) fail("slice", listOf(x), "start, limit and stride need one entry per dimension (${x.rank})")
        val shape = LongArray(x.rank) { (limit[it] - start[it] + stride[it] - 1) / stride[it] }
        return record("slice", listOf(x), shape, one("slice", x), mapOf("start" to start.toList(), "limit" to limit.toList(), "stride" to stride.toList()))
    }

    /** [slice] with Int bounds. */
    fun slice(x: Tensor, start: IntArray, limit: IntArray, stride: IntArray = IntArray(x.rank) { 1 }) =
        slice(x, longs(start), longs(limit), longs(stride))

    /** `table[indices]` along [axis] (an embedding lookup for axis 0). */
    fun gather(table: Tensor, indices: Tensor, axis: Int = 0): Tensor {
        val a = axis("gather", table, axis)
        if (indices.dtype.isFloat || indices.dtype == DType.BOOL) fail("gather", listOf(table, indices), "indices must be integers, not ${indices.dtype.json}")
        val shape = table.shape.sliceArray(0 until a) + indices.shape + table.shape.sliceArray(a + 1 until table.rank)
        return record("gather", listOf(table, indices), shape, one("gather", table), mapOf("axis" to a))
    }

    /** A window of static [sizes] of [x] at run-time [offsets] (one integer scalar per dimension, i32 or i64;
     *  clamped so the window fits), e.g. the rows of a cache up to a position. */
    fun dynamicSlice(x: Tensor, offsets: List<Tensor>, vararg sizes: Int): Tensor {
        checkOffsets("dynamic_slice", x, offsets)
        if (sizes.size != x.rank) fail("dynamic_slice", listOf(x) + offsets, "sizes need one entry per dimension (${x.rank})")
        for (i in sizes.indices) if (sizes[i] < 0 || (x.shape[i] != DYNAMIC && sizes[i] > x.shape[i])) {
            fail("dynamic_slice", listOf(x) + offsets, "size ${sizes[i]} of dimension $i does not fit")
        }
        return record("dynamic_slice", listOf(x) + offsets, longs(sizes), one("dynamic_slice", x), mapOf("sizes" to sizes.toList()))
    }

    /** [x] with [update] written at run-time [offsets] (one integer scalar per dimension; clamped so it fits):
     *  a KV-cache write. [x] and [update] need static shapes (IREE 3.13 does not lower the op on `?` dims). */
    fun dynamicUpdateSlice(x: Tensor, update: Tensor, offsets: List<Tensor>): Tensor {
        checkOffsets("dynamic_update_slice", x, offsets)
        val ins = listOf(x, update) + offsets
        if (update.rank != x.rank) fail("dynamic_update_slice", ins, "the update needs the tensor's rank (${x.rank})")
        if (x.shape.any { it == DYNAMIC } || update.shape.any { it == DYNAMIC }) {
            fail("dynamic_update_slice", ins, "needs static shapes (IREE 3.13 does not lower it on ? dimensions); give the cache a static maximum size")
        }
        for (i in 0 until x.rank) if (update.shape[i] > x.shape[i]) fail("dynamic_update_slice", ins, "the update does not fit (dimension $i)")
        return record("dynamic_update_slice", ins, x.shape, pair("dynamic_update_slice", x, update))
    }

    private fun checkOffsets(op: String, x: Tensor, offsets: List<Tensor>) {
        if (offsets.size != x.rank) fail(op, listOf(x) + offsets, "needs one offset per dimension (${x.rank}), got ${offsets.size}")
        for (o in offsets) if (o.rank != 0 || (o.dtype != DType.I32 && o.dtype != DType.I64) || o.dtype != offsets[0].dtype) {
            fail(op, listOf(x) + offsets, "offsets must be i32 or i64 scalars of one type; ${o.description} is not")
        }
    }

    /** The index of the largest element of float [x] along [axis] (the first on ties), as [dtype] (I32 or I64):
     *  greedy sampling of logits. */
    fun argmax(x: Tensor, axis: Int = -1, dtype: DType = DType.I32): Tensor {
        val a = axis("argmax", x, axis)
        if (!seen(x, null, "argmax").isFloat) fail("argmax", listOf(x), "takes a float tensor; convert it first")
        if (dtype != DType.I32 && dtype != DType.I64) fail("argmax", listOf(x), "the result must be I32 or I64, not $dtype")
        return record("argmax", listOf(x), x.shape.filterIndexed { i, _ -> i != a }.toLongArray(), dtype, mapOf("axis" to a))
    }

    /** `[.., K] x [K, N]`, or batched `[B.., M, K] x [B.., K, N]`. For a PyTorch `[out, in]` weight use [linear]. */
    fun matmul(a: Tensor, b: Tensor): Tensor {
        if (a.rank < 1 || b.rank < 2) fail("matmul", listOf(a, b), "needs a [.., K] left operand and a [K, N] (or batched) right one")
        if (b.rank > 2 && b.rank != a.rank) fail("matmul", listOf(a, b), "a batched right operand needs the left one's rank (${a.rank})")
        val k = a.shape.last()
        val kb = b.shape[b.rank - 2]
        if (k != kb && k != DYNAMIC && kb != DYNAMIC) {
            val hint = if (b.rank == 2 && b.shape[1] == k) "; this looks like a PyTorch [out, in] weight: use linear(x, w)" else ""
            fail("matmul", listOf(a, b), "dimension ${a.rank - 1} of the left ($k) does not match dimension ${b.rank - 2} of the right ($kb)$hint")
        }
        val shape = a.shape.copyOf().also { it[it.size - 1] = b.shape[b.rank - 1] }
        return record("matmul", listOf(a, b), shape, pair("matmul", a, b))
    }

    /**
     * PyTorch's `nn.Linear`: `x @ weightᵀ + bias` with [weight] in its `[out, in]` layout and [bias] `[out]`.
     * The module contracts the weight on its dimension 1 with no transpose: the export writes a frozen weight
     * transposed, tile by tile ([ComputeGraph.export]). One weight used by several linears is transposed once.
     */
    fun linear(x: Tensor, weight: Tensor, bias: Tensor? = null): Tensor {
        if (weight.rank != 2) fail("linear", listOfNotNull(x, weight, bias), "the weight must be [out, in], not rank ${weight.rank}")
        val (out, inF) = weight.shape[0] to weight.shape[1]
        if (x.rank < 1 || (x.shape.last() != inF && x.shape.last() != DYNAMIC)) {
            val hint = if (x.rank >= 1 && x.shape.last() == out) "; the weight looks like [in, out]: use matmul(x, w)" else ""
            fail("linear", listOfNotNull(x, weight, bias), "the input's last dimension (${x.shape.lastOrNull()}) is not the weight's in_features ($inF)$hint")
        }
        if (bias != null && !(bias.rank == 1 && (bias.shape[0] == out || bias.shape[0] == DYNAMIC))) {
            fail("linear", listOfNotNull(x, weight, bias), "the bias must be [$out]")
        }
        val dtype = if (weight.isHalfWeight()) seen(weight, x.dtype, "linear") else weight.dtype
        val wt = transposed.getOrPut(weight.id) { record("transpose", listOf(weight), longArrayOf(inF, out), dtype, mapOf("perm" to listOf(1, 0))) }
        val y = matmul(x, wt)
        return if (bias == null) y else add(y, bias)
    }

    /** PyTorch's `nn.Embedding`: rows of [table] `[num, dim]` for integer [ids]. */
    fun embedding(table: Tensor, ids: Tensor): Tensor {
        if (table.rank != 2) fail("embedding", listOf(table, ids), "the table must be [num_embeddings, embedding_dim]")
        return gather(table, ids, 0)
    }

    private fun window(size: Long, k: Long, s: Long, d: Long, p0: Long, p1: Long) = (size + p0 + p1 - (d * (k - 1) + 1)) / s + 1

    /** NCHW input, OIHW weight; [padding] is (top, bottom, left, right). */
    fun conv2d(x: Tensor, w: Tensor, bias: Tensor? = null, stride: IntArray = intArrayOf(1, 1), padding: IntArray = intArrayOf(0, 0, 0, 0),
               dilation: IntArray = intArrayOf(1, 1), groups: Int = 1): Tensor {
        val ins = listOfNotNull(x, w, bias)
        if (x.rank != 4 || w.rank != 4) fail("conv2d", ins, "needs an NCHW input and an OIHW weight")
        if (x.shape[1] != DYNAMIC && x.shape[1] != w.shape[1] * groups) {
            fail("conv2d", ins, "the input has ${x.shape[1]} channels; the weight wants ${w.shape[1]} × $groups groups")
        }
        val h = window(x.shape[2], w.shape[2], stride[0].toLong(), dilation[0].toLong(), padding[0].toLong(), padding[1].toLong())
        val wd = window(x.shape[3], w.shape[3], stride[1].toLong(), dilation[1].toLong(), padding[2].toLong(), padding[3].toLong())
        val dtype = pair("conv2d", x, w)
        return record("conv2d", ins, longArrayOf(x.shape[0], w.shape[0], h, wd), dtype,
            mapOf("stride" to stride.toList(), "padding" to padding.toList(), "dilation" to dilation.toList(), "groups" to groups))
    }

    private fun pool(op: String, x: Tensor, kernel: IntArray, stride: IntArray, padding: IntArray): Tensor {
        if (x.rank != 4) fail(op, listOf(x), "needs an NCHW input")
        val h = window(x.shape[2], kernel[0].toLong(), stride[0].toLong(), 1, padding[0].toLong(), padding[1].toLong())
        val w = window(x.shape[3], kernel[1].toLong(), stride[1].toLong(), 1, padding[2].toLong(), padding[3].toLong())
        return record(op, listOf(x), longArrayOf(x.shape[0], x.shape[1], h, w), one(op, x),
            mapOf("kernel" to kernel.toList(), "stride" to stride.toList(), "padding" to padding.toList()))
    }

    fun maxPool2d(x: Tensor, kernel: IntArray, stride: IntArray = kernel, padding: IntArray = intArrayOf(0, 0, 0, 0)) = pool("max_pool2d", x, kernel, stride, padding)
    fun avgPool2d(x: Tensor, kernel: IntArray, stride: IntArray = kernel, padding: IntArray = intArrayOf(0, 0, 0, 0)) = pool("avg_pool2d", x, kernel, stride, padding)

    private fun reduce(op: String, x: Tensor, axes: IntArray, keepDims: Boolean): Tensor {
        val ax = (if (axes.isEmpty()) IntArray(x.rank) { it } else axes).map { axis(op, x, it) }.toSet()
        val shape = if (keepDims) LongArray(x.rank) { if (it in ax) 1L else x.shape[it] }
        else x.shape.filterIndexed { i, _ -> i !in ax }.toLongArray()
        return record(op, listOf(x), shape, one(op, x), mapOf("axes" to ax.sorted(), "keepdims" to keepDims))
    }

    fun reduceSum(x: Tensor, vararg axes: Int, keepDims: Boolean = false) = reduce("reduce_sum", x, axes, keepDims)
    fun reduceMean(x: Tensor, vararg axes: Int, keepDims: Boolean = false) = reduce("reduce_mean", x, axes, keepDims)
    fun reduceMax(x: Tensor, vararg axes: Int, keepDims: Boolean = false) = reduce("reduce_max", x, axes, keepDims)

    private fun norm(op: String, x: Tensor, params: List<Tensor>, eps: Double): Tensor {
        val dtype = one(op, x)
        for (p in params) pair(op, x, p)
        for (p in params) if (p.rank != 1 || (p.shape[0] != x.shape.last() && x.shape.last() != DYNAMIC)) {
            fail(op, listOf(x) + params, "${p.description} must be [${x.shape.last()}], the input's last dimension")
        }
        return record(op, listOf(x) + params, x.shape, dtype, mapOf("eps" to eps))
    }

    fun layerNorm(x: Tensor, gamma: Tensor? = null, beta: Tensor? = null, eps: Double = 1e-5) = norm("layer_norm", x, listOfNotNull(gamma, beta), eps)

    fun rmsNorm(x: Tensor, gamma: Tensor? = null, eps: Double = 1e-6) = norm("rms_norm", x, listOfNotNull(gamma), eps)

    /** Rotary position embedding: `x·cos + rotate_half(x)·sin`, cos/sin broadcastable to `x` `[.., S, D]`. */
    fun rope(x: Tensor, cos: Tensor, sin: Tensor): Tensor {
        pair("rope", x, cos); pair("rope", x, sin)
        return record("rope", listOf(x, cos, sin), x.shape, one("rope", x))
    }

    /** Scaled dot-product attention: q `[.., S, D]`, k `[.., T, D]`, v `[.., T, Dv]`. */
    fun sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor? = null, causal: Boolean = false, scale: Double? = null): Tensor {
        val ins = listOfNotNull(q, k, v, mask)
        if (q.rank < 2 || k.rank != q.rank || v.rank != q.rank) fail("sdpa", ins, "q, k and v need one rank of at least 2")
        if (q.shape.last() != k.shape.last() && q.shape.last() != DYNAMIC && k.shape.last() != DYNAMIC) fail("sdpa", ins, "q and k head dimensions differ")
        val dtype = pair("sdpa", q, k).also { pair("sdpa", q, v) }
        val shape = q.shape.copyOf().also { it[it.size - 1] = v.shape.last() }
        val attrs = mutableMapOf<String, Any>("causal" to causal)
        if (scale != null) attrs["scale"] = scale
        return record("sdpa", ins, shape, dtype, attrs)
    }

    // --- serialisation ------------------------------------------------------------------------------

    /** The tape as tapeout's graph JSON (`tapeout-graph/1`); JVM data travels separately, by reference. */
    internal fun toGraphJson(name: String): String {
        val sb = StringBuilder()
        sb.append("{\"format\":\"tapeout-graph/1\",\"name\":").append(Json.quote(name)).append(",\"tensors\":[")
        tensorList.forEachIndexed { i, t -> if (i > 0) sb.append(','); appendTensorJson(sb, t.name, t) }
        sb.append("],")
        appendFunctionBody(sb, opList, outputList) { it.name }
        return sb.append('}').toString()
    }
}

/** One tensor of the graph JSON, called [name]: dtype, shape, path, and the file region of file-backed data. */
internal fun appendTensorJson(sb: StringBuilder, name: String, t: Tensor) {
    sb.append("{\"name\":").append(Json.quote(name)).append(",\"dtype\":\"").append(t.dtype.json).append("\",\"shape\":[")
    t.shape.forEachIndexed { j, d -> if (j > 0) sb.append(','); sb.append(if (d == DYNAMIC) "\"?\"" else d.toString()) }
    sb.append(']')
    if (t.path != null) sb.append(",\"path\":").append(Json.quote(t.path))
    when (val d = t.data) {
        is MappedTensorData ->
            sb.append(",\"data\":{\"file\":").append(Json.quote(d.path)).append(",\"offset\":").append(d.offset).append(",\"mapped\":true}")
        is FileTensorData -> {
            sb.append(",\"data\":{\"file\":").append(Json.quote(d.path)).append(",\"offset\":").append(d.offset)
            if (d.encoding != null) sb.append(",\"encoding\":").append(Json.quote(d.encoding))
            sb.append('}')
        }
        else -> {}
    }
    sb.append('}')
}

/** `"nodes":[…],"outputs":[…]` of the graph JSON, tensors named by [nameOf]. */
internal fun appendFunctionBody(sb: StringBuilder, ops: List<TapeOp>, outputs: List<Tensor>, nameOf: (Tensor) -> String) {
    sb.append("\"nodes\":[")
    ops.forEachIndexed { i, op ->
        if (i > 0) sb.append(',')
        sb.append("{\"op\":").append(Json.quote(op.op)).append(",\"inputs\":[")
        sb.append(op.inputs.joinToString(",") { Json.quote(nameOf(it)) }).append("],\"outputs\":[")
        sb.append(op.outputs.joinToString(",") { Json.quote(nameOf(it)) }).append("],\"attrs\":{")
        sb.append(op.attrs.entries.joinToString(",") { (k, v) -> Json.quote(k) + ":" + Json.value(v) }).append("}}")
    }
    sb.append("],\"outputs\":[").append(outputs.joinToString(",") { Json.quote(nameOf(it)) }).append(']')
}

private val LIBRARY_FILES =
    setOf("ExecutionTape.kt", "Operators.kt", "Modules.kt", "Checkpoints.kt", "Tensors.kt", "ComputeGraph.kt", "ModuleExport.kt")

/** A frame of the tapeout library itself (or of the JDK and Kotlin runtime), which a call site skips. */
internal fun isLibraryFrame(e: StackTraceElement): Boolean {
    val c = e.className
    if (c.startsWith("java.") || c.startsWith("jdk.") || c.startsWith("kotlin.") || c.startsWith("sun.")) return true
    return c.startsWith("dev.tapeout.") && c.lastIndexOf('.') == "dev.tapeout".length && e.fileName in LIBRARY_FILES
}

internal fun longs(shape: IntArray): LongArray = LongArray(shape.size) { if (shape[it] == -1) DYNAMIC else shape[it].toLong() }

/** The little-endian bytes of one scalar of [dtype]. */
internal fun scalarBytes(value: Double, dtype: DType): ByteArray {
    val bits: Long = when (dtype) {
        DType.F64 -> java.lang.Double.doubleToRawLongBits(value)
        DType.F32 -> java.lang.Float.floatToRawIntBits(value.toFloat()).toLong()
        DType.BF16 -> bf16Bits(value.toFloat()).toLong()
        DType.F16 -> f16Bits(value.toFloat()).toLong()
        DType.BOOL -> if (value != 0.0) 1 else 0
        else -> {
            require(value == Math.rint(value)) { "a scalar of $dtype must be a whole number, not $value" }
            value.toLong()
        }
    }
    return ByteArray(dtype.byteWidth) { (bits ushr (8 * it)).toByte() }
}

/** bf16 bits of [f], rounded to nearest even (NaN stays NaN). */
fun bf16Bits(f: Float): Short {
    val x = java.lang.Float.floatToRawIntBits(f)
    if (f.isNaN()) return ((x ushr 16) or 0x40).toShort()
    return ((x + 0x7FFF + ((x ushr 16) and 1)) ushr 16).toShort()
}

/** f16 bits of [f], rounded to nearest even, with subnormals, infinities and NaN. */
fun f16Bits(f: Float): Short {
    val x = java.lang.Float.floatToRawIntBits(f)
    val sign = (x ushr 16) and 0x8000
    val exp = (x ushr 23) and 0xFF
    val man = x and 0x7FFFFF
    if (exp == 0xFF) return (sign or 0x7C00 or (if (man != 0) 0x200 else 0)).toShort()
    val e = exp - 127 + 15
    if (e >= 0x1F) return (sign or 0x7C00).toShort()
    if (e <= 0) {
        if (e < -10) return sign.toShort()
        val m = man or 0x800000
        val shift = 14 - e
        val half = 1 shl (shift - 1)
        var r = m ushr shift
        val rest = m and ((1 shl shift) - 1)
        if (rest > half || (rest == half && (r and 1) == 1)) r++
        return (sign or r).toShort()
    }
    var r = (e shl 10) or (man ushr 13)
    val rest = man and 0x1FFF
    if (rest > 0x1000 || (rest == 0x1000 && (r and 1) == 1)) r++
    return (sign or r).toShort()
}
