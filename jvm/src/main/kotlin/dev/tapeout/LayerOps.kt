package dev.tapeout

/**
 * Neural-network ops of an [ExecutionTape]: matrix products (and PyTorch's `Linear` and `Embedding`), 2-D
 * convolution and pooling, reductions and argmax, normalizations, rotary embeddings and attention. Result shapes
 * (windows with stride, padding and dilation; batched products) are inferred and checked here, so an error names
 * the recording line; the native side checks them again when the graph is made.
 */
sealed interface LayerOps {
    /** `[.., K] x [K, N]`, or batched `[B.., M, K] x [B.., K, N]`. For a PyTorch `[out, in]` weight use [linear]. */
    fun matmul(a: Tensor, b: Tensor): Tensor {
        val t = core
        if (a.rank < 1 || b.rank < 2) t.fail(Op.MATMUL, listOf(a, b), "needs a [.., K] left operand and a [K, N] (or batched) right one")
        if (b.rank > 2 && b.rank != a.rank) t.fail(Op.MATMUL, listOf(a, b), "a batched right operand needs the left one's rank (${a.rank})")
        val k = a.shape.last()
        val kb = b.shape[b.rank - 2]
        if (k != kb && k != DYNAMIC && kb != DYNAMIC) {
            val hint = if (b.rank == 2 && b.shape[1] == k) "; this looks like a PyTorch [out, in] weight: use linear(x, w)" else ""
            t.fail(Op.MATMUL, listOf(a, b), "dimension ${a.rank - 1} of the left ($k) does not match dimension ${b.rank - 2} of the right ($kb)$hint")
        }
        val shape = a.shape.copyOf().also { it[it.size - 1] = b.shape[b.rank - 1] }
        return t.record(Op.MATMUL, listOf(a, b), shape, t.dtypes.pair(Op.MATMUL, a, b))
    }

    /**
     * PyTorch's `nn.Linear`: `x @ weightᵀ + bias` with [weight] in its `[out, in]` layout and [bias] `[out]`.
     * The module contracts the weight on its dimension 1 with no transpose: the export writes a frozen weight
     * transposed, tile by tile ([ComputeGraph.export]). One weight used by several linears is transposed once.
     */
    fun linear(x: Tensor, weight: Tensor, bias: Tensor? = null): Tensor {
        val t = core
        if (weight.rank != 2) t.fail("linear", listOfNotNull(x, weight, bias), "the weight must be [out, in], not rank ${weight.rank}")
        val (out, inF) = weight.shape[0] to weight.shape[1]
        if (x.rank < 1 || (x.shape.last() != inF && x.shape.last() != DYNAMIC)) {
            val hint = if (x.rank >= 1 && x.shape.last() == out) "; the weight looks like [in, out]: use matmul(x, w)" else ""
            t.fail("linear", listOfNotNull(x, weight, bias), "the input's last dimension (${x.shape.lastOrNull()}) is not the weight's in_features ($inF)$hint")
        }
        if (bias != null && !(bias.rank == 1 && (bias.shape[0] == out || bias.shape[0] == DYNAMIC))) {
            t.fail("linear", listOfNotNull(x, weight, bias), "the bias must be [$out]")
        }
        val dtype = if (weight.isHalfWeight()) t.dtypes.seen(weight, x.dtype, "linear") else weight.dtype
        val wt = t.transposed.getOrPut(weight.id) {
            t.record(Op.TRANSPOSE, listOf(weight), longArrayOf(inF, out), dtype, mapOf("perm" to listOf(1, 0)))
        }
        val y = matmul(x, wt)
        return if (bias == null) y else t.add(y, bias)
    }

    /** PyTorch's `nn.Embedding`: rows of [table] `[num, dim]` for integer [ids]. */
    fun embedding(table: Tensor, ids: Tensor): Tensor {
        val t = core
        if (table.rank != 2) t.fail("embedding", listOf(table, ids), "the table must be [num_embeddings, embedding_dim]")
        return t.gather(table, ids, 0)
    }

    /** NCHW input, OIHW weight; [padding] is (top, bottom, left, right). */
    fun conv2d(x: Tensor, w: Tensor, bias: Tensor? = null, stride: IntArray = intArrayOf(1, 1), padding: IntArray = intArrayOf(0, 0, 0, 0),
               dilation: IntArray = intArrayOf(1, 1), groups: Int = 1): Tensor {
        val t = core
        val ins = listOfNotNull(x, w, bias)
        if (x.rank != 4 || w.rank != 4) t.fail(Op.CONV2D, ins, "needs an NCHW input and an OIHW weight")
        if (x.shape[1] != DYNAMIC && x.shape[1] != w.shape[1] * groups) {
            t.fail(Op.CONV2D, ins, "the input has ${x.shape[1]} channels; the weight wants ${w.shape[1]} × $groups groups")
        }
        val h = windowOutput(x.shape[2], w.shape[2], stride[0].toLong(), dilation[0].toLong(), padding[0].toLong(), padding[1].toLong())
        val wd = windowOutput(x.shape[3], w.shape[3], stride[1].toLong(), dilation[1].toLong(), padding[2].toLong(), padding[3].toLong())
        val dtype = t.dtypes.pair(Op.CONV2D, x, w)
        return t.record(Op.CONV2D, ins, longArrayOf(x.shape[0], w.shape[0], h, wd), dtype,
            mapOf("stride" to stride.toList(), "padding" to padding.toList(), "dilation" to dilation.toList(), "groups" to groups))
    }

    /** 2-D max pooling of NCHW [x]; [padding] is (top, bottom, left, right). */
    fun maxPool2d(x: Tensor, kernel: IntArray, stride: IntArray = kernel, padding: IntArray = intArrayOf(0, 0, 0, 0)): Tensor =
        core.pool(Op.MAX_POOL2D, x, kernel, stride, padding)

    /** 2-D average pooling of NCHW [x]; [padding] is (top, bottom, left, right). */
    fun avgPool2d(x: Tensor, kernel: IntArray, stride: IntArray = kernel, padding: IntArray = intArrayOf(0, 0, 0, 0)): Tensor =
        core.pool(Op.AVG_POOL2D, x, kernel, stride, padding)

    /** The sum over [axes] (all without any). */
    fun reduceSum(x: Tensor, vararg axes: Int, keepDims: Boolean = false): Tensor = core.reduce(Op.REDUCE_SUM, x, axes, keepDims)

    /** The mean over [axes] (all without any). */
    fun reduceMean(x: Tensor, vararg axes: Int, keepDims: Boolean = false): Tensor = core.reduce(Op.REDUCE_MEAN, x, axes, keepDims)

    /** The maximum over [axes] (all without any). */
    fun reduceMax(x: Tensor, vararg axes: Int, keepDims: Boolean = false): Tensor = core.reduce(Op.REDUCE_MAX, x, axes, keepDims)

    /** The index of the largest element of float [x] along [axis] (the first on ties), as [dtype] (I32 or I64):
     *  greedy sampling of logits. */
    fun argmax(x: Tensor, axis: Int = -1, dtype: DType = DType.I32): Tensor {
        val t = core
        val a = t.axis(Op.ARGMAX, x, axis)
        if (!t.dtypes.seen(x, null, Op.ARGMAX).isFloat) t.fail(Op.ARGMAX, listOf(x), "takes a float tensor; convert it first")
        if (dtype != DType.I32 && dtype != DType.I64) t.fail(Op.ARGMAX, listOf(x), "the result must be I32 or I64, not $dtype")
        return t.record(Op.ARGMAX, listOf(x), x.shape.filterIndexed { i, _ -> i != a }.toLongArray(), dtype, mapOf("axis" to a))
    }

    /** Layer normalization over the last dimension, with optional [gamma] and [beta] of that size. */
    fun layerNorm(x: Tensor, gamma: Tensor? = null, beta: Tensor? = null, eps: Double = 1e-5): Tensor =
        core.norm(Op.LAYER_NORM, x, listOfNotNull(gamma, beta), eps)

    /** RMS normalization over the last dimension, with an optional [gamma] of that size. */
    fun rmsNorm(x: Tensor, gamma: Tensor? = null, eps: Double = 1e-6): Tensor = core.norm(Op.RMS_NORM, x, listOfNotNull(gamma), eps)

    /** Rotary position embedding: `x·cos + rotate_half(x)·sin`, cos/sin broadcastable to `x` `[.., S, D]`. */
    fun rope(x: Tensor, cos: Tensor, sin: Tensor): Tensor {
        val t = core
        t.dtypes.pair(Op.ROPE, x, cos); t.dtypes.pair(Op.ROPE, x, sin)
        return t.record(Op.ROPE, listOf(x, cos, sin), x.shape, t.dtypes.one(Op.ROPE, x))
    }

    /** Scaled dot-product attention: q `[.., S, D]`, k `[.., T, D]`, v `[.., T, Dv]`. */
    fun sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor? = null, causal: Boolean = false, scale: Double? = null): Tensor {
        val t = core
        val ins = listOfNotNull(q, k, v, mask)
        if (q.rank < 2 || k.rank != q.rank || v.rank != q.rank) t.fail(Op.SDPA, ins, "q, k and v need one rank of at least 2")
        if (q.shape.last() != k.shape.last() && q.shape.last() != DYNAMIC && k.shape.last() != DYNAMIC) t.fail(Op.SDPA, ins, "q and k head dimensions differ")
        val dtype = t.dtypes.pair(Op.SDPA, q, k).also { t.dtypes.pair(Op.SDPA, q, v) }
        val shape = q.shape.copyOf().also { it[it.size - 1] = v.shape.last() }
        val attrs = mutableMapOf<String, Any>("causal" to causal)
        if (scale != null) attrs["scale"] = scale
        return t.record(Op.SDPA, ins, shape, dtype, attrs)
    }
}

/** The tape behind a [LayerOps] (its one implementation). */
private val LayerOps.core: ExecutionTape get() = this as ExecutionTape

/** The output extent of a window of [k] taps (dilation [d], stride [s]) over [size] padded by [p0] and [p1]. */
internal fun windowOutput(size: Long, k: Long, s: Long, d: Long, p0: Long, p1: Long): Long = (size + p0 + p1 - (d * (k - 1) + 1)) / s + 1

private fun ExecutionTape.pool(op: Op, x: Tensor, kernel: IntArray, stride: IntArray, padding: IntArray): Tensor {
    if (x.rank != 4) fail(op, listOf(x), "needs an NCHW input")
    val h = windowOutput(x.shape[2], kernel[0].toLong(), stride[0].toLong(), 1, padding[0].toLong(), padding[1].toLong())
    val w = windowOutput(x.shape[3], kernel[1].toLong(), stride[1].toLong(), 1, padding[2].toLong(), padding[3].toLong())
    return record(op, listOf(x), longArrayOf(x.shape[0], x.shape[1], h, w), dtypes.one(op, x),
        mapOf("kernel" to kernel.toList(), "stride" to stride.toList(), "padding" to padding.toList()))
}

private fun ExecutionTape.reduce(op: Op, x: Tensor, axes: IntArray, keepDims: Boolean): Tensor {
    val ax = (if (axes.isEmpty()) IntArray(x.rank) { it } else axes).map { axis(op, x, it) }.toSet()
    val shape = if (keepDims) LongArray(x.rank) { if (it in ax) 1L else x.shape[it] }
    else x.shape.filterIndexed { i, _ -> i !in ax }.toLongArray()
    return record(op, listOf(x), shape, dtypes.one(op, x), mapOf("axes" to ax.sorted(), "keepdims" to keepDims))
}

private fun ExecutionTape.norm(op: Op, x: Tensor, params: List<Tensor>, eps: Double): Tensor {
    val dtype = dtypes.one(op, x)
    for (p in params) dtypes.pair(op, x, p)
    for (p in params) if (p.rank != 1 || (p.shape[0] != x.shape.last() && x.shape.last() != DYNAMIC)) {
        fail(op, listOf(x) + params, "${p.description} must be [${x.shape.last()}], the input's last dimension")
    }
    return record(op, listOf(x) + params, x.shape, dtype, mapOf("eps" to eps))
}
