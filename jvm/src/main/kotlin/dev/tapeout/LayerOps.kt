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

    /**
     * Rotary position embedding of [x] `[.., S, D]` (D even). Each pair `(a, b)` of x becomes
     * `(a·cos − b·sin, b·cos + a·sin)`; the pairs are `(x[i], x[i + D/2])` (transformers' `rotate_half`, the
     * default) or, with [interleaved], `(x[2i], x[2i + 1])` (GPT-J, GGUF/llama.cpp). [cos] and [sin] have one shape,
     * broadcastable to x: full tables `[.., S, D]` (each element's angle in its place, as transformers'
     * `cat(freqs, freqs)`: `x·cos + rotate(x)·sin`) or half tables `[.., S, D/2]` (one angle per pair). Another
     * width is refused here, naming this line. [rotary] computes the tables from positions in the graph.
     */
    fun rope(x: Tensor, cos: Tensor, sin: Tensor, interleaved: Boolean = false): Tensor {
        val t = core
        val ins = listOf(x, cos, sin)
        t.dtypes.pair(Op.ROPE, x, cos); t.dtypes.pair(Op.ROPE, x, sin)
        if (x.rank < 1) t.fail(Op.ROPE, ins, "x must be [.., S, D], not a scalar")
        val d = x.shape.last()
        if (d == DYNAMIC) t.fail(Op.ROPE, ins, "the rotated (last) dimension of x must be static")
        if (d % 2 != 0L) t.fail(Op.ROPE, ins, "the rotated (last) dimension of x must be even, not $d")
        if (!cos.shape.contentEquals(sin.shape)) t.fail(Op.ROPE, ins, "cos ${shapeText(cos.shape)} and sin ${shapeText(sin.shape)} must have one shape")
        val w = cos.shape.lastOrNull()
        if (w != d && w != d / 2 && w != 1L) {
            t.fail(Op.ROPE, ins, "cos/sin of width ${w?.let(::dimText)} for a head dimension of $d: " +
                "use full tables [.., S, $d] or half tables [.., S, ${d / 2}]")
        }
        if (cos.rank > x.rank) t.fail(Op.ROPE, ins, "cos/sin ${shapeText(cos.shape)} have a higher rank than x ${shapeText(x.shape)}")
        // The shape the tables must broadcast to: x's, with the table width (full or half) last.
        val like = x.shape.copyOf().also { it[it.size - 1] = if (w == d / 2) d / 2 else d }
        if (!broadcastsTo(cos.shape, like)) {
            t.fail(Op.ROPE, ins, "cos/sin ${shapeText(cos.shape)} do not broadcast to x ${shapeText(x.shape)} (tables [.., S, D] or [.., S, D/2])")
        }
        val attrs = if (interleaved) mapOf<String, Any>("interleaved" to true) else emptyMap()
        return t.record(Op.ROPE, ins, x.shape, t.dtypes.one(Op.ROPE, x), attrs)
    }

    /** [rope] with tables from [rotary] (its pair layout, converted to x's dtype when they differ). */
    fun rope(x: Tensor, rotary: Rotary): Tensor {
        val t = core
        val (c, s) = if (rotary.cos.dtype == x.dtype) rotary.cos to rotary.sin
        else t.convert(rotary.cos, x.dtype) to t.convert(rotary.sin, x.dtype)
        return rope(x, c, s, rotary.interleaved)
    }

    /**
     * Scaled dot-product attention `softmax(q·kᵀ·scale + mask)·v`: q `[.., H, S, D]`, k `[.., KV, T, D]`,
     * v `[.., KV, T, Dv]`, the result `[.., H, S, Dv]`. With fewer key/value heads than query heads (grouped-query
     * attention, H a multiple of KV; the dimension before S is the head dimension) query head h reads key/value
     * head h / (H / KV), as transformers' `repeat_kv` arranges it, but the heads are never copied: the module
     * reads each key/value head once for its group. [mask] is added to the scores and broadcasts to
     * `[.., H, S, T]`. [causal] is bottom-right aligned: query i sees keys j ≤ i + T − S (with a KV cache the S
     * new queries are the last S positions). [scale] defaults to 1/√D. [softcap] caps the scaled scores as Gemma 2
     * does, `softcap · tanh(scores / softcap)`, before the mask. [slidingWindow] W (with [causal]) lets query i see
     * only the W latest keys up to its own position, `i + T − S − W < j`: transformers' sliding-window attention
     * (Mistral, Gemma 2 and 3's local layers). Shapes are checked here, naming this line.
     */
    fun sdpa(
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor? = null,
        causal: Boolean = false,
        scale: Double? = null,
        softcap: Double? = null,
        slidingWindow: Int? = null,
    ): Tensor {
        val t = core
        val ins = listOfNotNull(q, k, v, mask)
        val r = q.rank
        if (r < 2 || k.rank != r || v.rank != r) t.fail(Op.SDPA, ins, "q, k and v need one rank of at least 2 ([.., S, D], [.., T, D], [.., T, Dv])")
        fun agree(a: Long, b: Long) = a == b || a == DYNAMIC || b == DYNAMIC
        if (!agree(q.shape[r - 1], k.shape[r - 1])) t.fail(Op.SDPA, ins, "q and k head dimensions differ (${q.shape[r - 1]} vs ${k.shape[r - 1]})")
        if (!agree(k.shape[r - 2], v.shape[r - 2])) t.fail(Op.SDPA, ins, "k and v have different key lengths (dimension ${r - 2})")
        if (r >= 3) {
            val (h, kv) = q.shape[r - 3] to k.shape[r - 3]
            if (!agree(kv, v.shape[r - 3])) t.fail(Op.SDPA, ins, "k and v have different head counts (dimension ${r - 3})")
            if (h != kv) when {
                h == DYNAMIC || kv == DYNAMIC ->
                    t.fail(Op.SDPA, ins, "q has ${dimText(h)} heads and k/v ${dimText(kv)}: give both a static head count (or both the same `?`) so the query heads can be grouped")
                kv <= 0L || h % kv != 0L ->
                    t.fail(Op.SDPA, ins, "q has $h heads and k/v $kv: grouped-query attention needs the query heads to be a multiple of the key/value heads; repeat them with repeatKv or fix the head counts")
            }
            for (i in 0 until r - 3) if (!agree(q.shape[i], k.shape[i]) || !agree(q.shape[i], v.shape[i])) {
                t.fail(Op.SDPA, ins, "q, k and v differ in dimension $i")
            }
        }
        if (softcap != null && !(softcap.isFinite() && softcap > 0)) t.fail(Op.SDPA, ins, "softcap must be a finite number above 0, not $softcap")
        if (slidingWindow != null && slidingWindow < 1) t.fail(Op.SDPA, ins, "slidingWindow must be at least 1 (the keys a query sees), not $slidingWindow")
        if (slidingWindow != null && !causal) {
            t.fail(Op.SDPA, ins, "slidingWindow needs causal = true: the window ends at each query's own position")
        }
        if (q.shape[r - 1] == DYNAMIC) t.fail(Op.SDPA, ins, "q has a ? head dimension (the last): sdpa needs it static (it sets the default scale and the product's shape); give the head size")
        val (sq, tk) = q.shape[r - 2] to k.shape[r - 2]
        if (causal && sq != DYNAMIC && tk != DYNAMIC && sq > tk) {
            t.fail(Op.SDPA, ins, "causal attention of $sq queries over $tk keys: causal is bottom-right aligned (query i sees keys j <= i + T - S), so the first ${sq - tk} queries would see no key; give at least as many keys as queries")
        }
        val dtype = t.dtypes.pair(Op.SDPA, q, k).also { t.dtypes.pair(Op.SDPA, q, v) }
        if (mask != null) {
            t.dtypes.pair(Op.SDPA, q, mask)
            val scores = q.shape.copyOf().also { it[r - 1] = k.shape[r - 2] }
            if (!broadcastsTo(mask.shape, scores)) t.fail(Op.SDPA, ins, "the mask ${shapeText(mask.shape)} does not broadcast to the scores ${shapeText(scores)} ([.., H, S, T])")
        }
        val shape = q.shape.copyOf().also { it[it.size - 1] = v.shape.last() }
        val attrs = mutableMapOf<String, Any>("causal" to causal)
        if (scale != null) attrs["scale"] = scale
        if (softcap != null) attrs["softcap"] = softcap
        if (slidingWindow != null) attrs["window"] = slidingWindow
        return t.record(Op.SDPA, ins, shape, dtype, attrs)
    }

    /**
     * transformers' `repeat_kv`: [x] `[B, KV, T, D]` to `[B, KV·groups, T, D]`, each head repeated [groups] times in
     * place (heads `kv·groups .. kv·groups + groups − 1` are copies of head kv). [sdpa] does not need it (it groups
     * query heads itself, without the copies); it is for models that use the repeated tensors otherwise.
     */
    fun repeatKv(x: Tensor, groups: Int): Tensor {
        val t = core
        if (x.rank != 4) t.fail("repeatKv", listOf(x), "x must be [B, KV, T, D], not rank ${x.rank}")
        if (groups < 1) t.fail("repeatKv", listOf(x), "groups must be at least 1, not $groups")
        if (groups == 1) return x
        val (b, kv, tt, d) = x.shape.toList()
        if (kv == DYNAMIC) t.fail("repeatKv", listOf(x), "the head dimension (1) must be static to repeat it")
        // [B, KV, 1, T, D] -> concat of `groups` copies on the new axis -> [B, KV·groups, T, D].
        val one = t.reshape(x, b, kv, 1L, tt, d)
        val copies = t.concat(List(groups) { one }, axis = 2)
        return t.reshape(copies, b, kv * groups, tt, d)
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
