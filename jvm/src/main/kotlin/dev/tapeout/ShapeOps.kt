package dev.tapeout

/**
 * Shape and indexing ops of an [ExecutionTape]: reshape, broadcast, transpose, concatenation, static and dynamic
 * slices, and gathers. Result shapes are inferred and checked here, so an error names the recording line.
 */
sealed interface ShapeOps {
    /**
     * The same elements in [shape]. As PyTorch's `view`, one `-1` ([DYNAMIC]) entry is inferred from the others
     * when [x] has a static shape; on a tensor with `?` dimensions it stays `?` (a run-time size).
     */
    fun reshape(x: Tensor, vararg shape: Long): Tensor {
        val t = core
        val known = shape.filter { it != DYNAMIC }.fold(1L) { a, d -> a * d }
        val unknown = shape.count { it == DYNAMIC }
        var target = shape
        if (x.shape.none { it == DYNAMIC }) {
            val count = elementCount(x.shape)
            if (unknown > 1) t.fail(Op.RESHAPE, listOf(x), "only one dimension of ${shapeText(shape)} can be -1 (inferred)")
            if (unknown == 1) {
                if (known == 0L || count % known != 0L) {
                    t.fail(Op.RESHAPE, listOf(x), "$count elements cannot be reshaped to ${shapeText(shape)}: the -1 dimension cannot be inferred")
                }
                target = LongArray(shape.size) { if (shape[it] == DYNAMIC) count / known else shape[it] }
            } else if (known != count) {
                t.fail(Op.RESHAPE, listOf(x), "$count elements cannot be reshaped to ${shapeText(shape)} ($known)")
            }
        }
        return t.record(Op.RESHAPE, listOf(x), target, t.dtypes.one(Op.RESHAPE, x))
    }

    /** [reshape] with Int dimensions. */
    fun reshape(x: Tensor, vararg shape: Int): Tensor = reshape(x, *longs(shape))

    /** [x] broadcast (NumPy, right-aligned) to the static [shape]. A [DYNAMIC] entry is refused: a `?` size is only
     *  known at run time, from a tensor, so broadcast to a tensor's shape with [expand]. */
    fun broadcast(x: Tensor, vararg shape: Long): Tensor {
        val t = core
        if (shape.any { it < 0 }) {
            t.fail(Op.BROADCAST, listOf(x), "the shape ${shapeText(shape)} has a DYNAMIC (or negative) size, known only at run time; " +
                "use expand(x, like) to broadcast to the shape of a tensor that has it")
        }
        t.checkBroadcastsTo(Op.BROADCAST, x, shape, listOf(x))
        return t.record(Op.BROADCAST, listOf(x), shape, t.dtypes.one(Op.BROADCAST, x))
    }

    /**
     * [x] broadcast (NumPy, right-aligned) to the shape of [like], which may have [DYNAMIC] dimensions: each is
     * read from [like] at run time (PyTorch's `x.expand_as(like)`). A dimension of [x] is 1 (it is repeated), equal
     * to [like]'s, or DYNAMIC (then taken to equal [like]'s at run time). Only [like]'s shape is used.
     */
    fun expand(x: Tensor, like: Tensor): Tensor {
        val t = core
        t.checkBroadcastsTo(Op.BROADCAST, x, like.shape, listOf(x, like))
        return t.record(Op.BROADCAST, listOf(x, like), like.shape, t.dtypes.one(Op.BROADCAST, x))
    }

    /** [broadcast] with Int dimensions. */
    fun broadcast(x: Tensor, vararg shape: Int): Tensor = broadcast(x, *longs(shape))

    /** [x] with its dimensions permuted by [perm] (reversed without one). */
    fun transpose(x: Tensor, vararg perm: Int): Tensor {
        val t = core
        val p = if (perm.isEmpty()) IntArray(x.rank) { x.rank - 1 - it } else perm
        if (p.size != x.rank || p.sorted() != (0 until x.rank).toList()) t.fail(Op.TRANSPOSE, listOf(x), "perm ${p.toList()} is not a permutation of 0..${x.rank - 1}")
        return t.record(Op.TRANSPOSE, listOf(x), LongArray(x.rank) { x.shape[p[it]] }, t.dtypes.one(Op.TRANSPOSE, x), mapOf("perm" to p.toList()))
    }

    /** [parts] joined along [axis]. */
    fun concat(parts: List<Tensor>, axis: Int = 0): Tensor {
        val t = core
        if (parts.isEmpty()) t.fail(Op.CONCAT, parts, "needs at least one tensor")
        val a = t.axis(Op.CONCAT, parts[0], axis)
        val dtype = t.dtypes.one(Op.CONCAT, parts[0])
        for (p in parts.drop(1)) t.dtypes.pair(Op.CONCAT, parts[0], p)
        for (p in parts) if (p.rank != parts[0].rank) t.fail(Op.CONCAT, parts, "ranks differ")
        val shape = parts[0].shape.copyOf()
        shape[a] = if (parts.any { it.shape[a] == DYNAMIC }) DYNAMIC else parts.sumOf { it.shape[a] }
        return t.record(Op.CONCAT, parts, shape, dtype, mapOf("axis" to a))
    }

    /**
     * The elements `start[i] until limit[i]` step `stride[i]` of each dimension; a limit of -1 is "to the end".
     * On a [DYNAMIC] dimension the limit must be -1 (the result is DYNAMIC too; start and stride are static, and
     * the run-time size must be at least start).
     */
    fun slice(x: Tensor, start: LongArray, limit: LongArray, stride: LongArray = LongArray(x.rank) { 1 }): Tensor {
        val t = core
        if (start.size != x.rank || limit.size != x.rank || stride.size != x.rank) t.fail(Op.SLICE, listOf(x), "start, limit and stride need one entry per dimension (${x.rank})")
        val shape = LongArray(x.rank) { i ->
            val (b, e, k, d) = listOf(start[i], limit[i], stride[i], x.shape[i])
            val bounds = "[$b:$e:$k] of dimension $i (size ${dimText(d)})"
            if (b < 0 || k <= 0 || e < -1) t.fail(Op.SLICE, listOf(x), "$bounds: start must be >= 0, stride > 0, and limit >= 0 or -1 (to the end)")
            when {
                d == DYNAMIC && e == -1L -> DYNAMIC
                d == DYNAMIC -> t.fail(Op.SLICE, listOf(x), "$bounds: a DYNAMIC dimension can only be sliced to the end (limit -1); " +
                    "for a window of static size at a run-time offset use dynamicSlice")
                else -> {
                    val end = if (e == -1L) d else e
                    if (b > end || end > d) t.fail(Op.SLICE, listOf(x), "$bounds does not fit")
                    (end - b + k - 1) / k
                }
            }
        }
        return t.record(Op.SLICE, listOf(x), shape, t.dtypes.one(Op.SLICE, x), mapOf("start" to start.toList(), "limit" to limit.toList(), "stride" to stride.toList()))
    }

    /** [slice] with Int bounds. */
    fun slice(x: Tensor, start: IntArray, limit: IntArray, stride: IntArray = IntArray(x.rank) { 1 }): Tensor =
        slice(x, longs(start), longs(limit), longs(stride))

    /** `table[indices]` along [axis] (an embedding lookup for axis 0). */
    fun gather(table: Tensor, indices: Tensor, axis: Int = 0): Tensor {
        val t = core
        val a = t.axis(Op.GATHER, table, axis)
        if (indices.dtype.isFloat || indices.dtype == DType.BOOL) t.fail(Op.GATHER, listOf(table, indices), "indices must be integers, not ${indices.dtype.json}")
        val shape = table.shape.sliceArray(0 until a) + indices.shape + table.shape.sliceArray(a + 1 until table.rank)
        return t.record(Op.GATHER, listOf(table, indices), shape, t.dtypes.one(Op.GATHER, table), mapOf("axis" to a))
    }

    /** A window of static [sizes] of [x] at run-time [offsets] (one integer scalar per dimension, i32 or i64;
     *  clamped so the window fits), e.g. the rows of a cache up to a position. */
    fun dynamicSlice(x: Tensor, offsets: List<Tensor>, vararg sizes: Int): Tensor {
        val t = core
        t.checkOffsets(Op.DYNAMIC_SLICE, x, offsets)
        if (sizes.size != x.rank) t.fail(Op.DYNAMIC_SLICE, listOf(x) + offsets, "sizes need one entry per dimension (${x.rank})")
        for (i in sizes.indices) if (sizes[i] < 0 || (x.shape[i] != DYNAMIC && sizes[i] > x.shape[i])) {
            t.fail(Op.DYNAMIC_SLICE, listOf(x) + offsets, "size ${sizes[i]} of dimension $i does not fit")
        }
        return t.record(Op.DYNAMIC_SLICE, listOf(x) + offsets, longs(sizes), t.dtypes.one(Op.DYNAMIC_SLICE, x), mapOf("sizes" to sizes.toList()))
    }

    /** [x] with [update] written at run-time [offsets] (one integer scalar per dimension; clamped so it fits):
     *  a KV-cache write. [x] and [update] need static shapes (IREE 3.13 does not lower the op on `?` dims). */
    fun dynamicUpdateSlice(x: Tensor, update: Tensor, offsets: List<Tensor>): Tensor {
        val t = core
        val op = Op.DYNAMIC_UPDATE_SLICE
        t.checkOffsets(op, x, offsets)
        val ins = listOf(x, update) + offsets
        if (update.rank != x.rank) t.fail(op, ins, "the update needs the tensor's rank (${x.rank})")
        if (x.shape.any { it == DYNAMIC } || update.shape.any { it == DYNAMIC }) {
            t.fail(op, ins, "needs static shapes (IREE 3.13 does not lower it on ? dimensions); give the cache a static maximum size")
        }
        for (i in 0 until x.rank) if (update.shape[i] > x.shape[i]) t.fail(op, ins, "the update does not fit (dimension $i)")
        return t.record(op, ins, x.shape, t.dtypes.pair(op, x, update))
    }
}

/** The tape behind a [ShapeOps] (its one implementation). */
private val ShapeOps.core: ExecutionTape get() = this as ExecutionTape

/** Axis [a] of [x] (negative counts from the end), or a failure. */
internal fun ExecutionTape.axis(op: Op, x: Tensor, a: Int): Int {
    val r = if (a < 0) a + x.rank else a
    if (r !in 0 until x.rank) fail(op, listOf(x), "axis $a is out of range for rank ${x.rank}")
    return r
}

/** A dimension of size [a] broadcasts to one of size [b]: it is 1, equal, or either is [DYNAMIC] (taken to fit). */
private fun dimBroadcastsTo(a: Long, b: Long): Boolean = a == 1L || a == b || a == DYNAMIC || b == DYNAMIC

/** [from] broadcasts (NumPy, right-aligned) to [to] without changing it ([dimBroadcastsTo] for each dimension). */
internal fun broadcastsTo(from: LongArray, to: LongArray): Boolean =
    from.size <= to.size && from.indices.all { dimBroadcastsTo(from[it], to[to.size - from.size + it]) }

/** [x] broadcasts (NumPy, right-aligned) to [shape] ([broadcastsTo]), or a failure naming the dimension. */
internal fun ExecutionTape.checkBroadcastsTo(op: Op, x: Tensor, shape: LongArray, operands: List<Tensor>) {
    if (x.rank > shape.size) fail(op, operands, "cannot broadcast to the lower rank ${shape.size} (${shapeText(shape)})")
    val off = shape.size - x.rank
    for (i in 0 until x.rank) {
        val (a, b) = x.shape[i] to shape[off + i]
        if (!dimBroadcastsTo(a, b)) fail(op, operands, "dimension $i ($a) cannot broadcast to dimension ${off + i} ($b) of ${shapeText(shape)}")
    }
}

/** One integer scalar offset per dimension of [x], all i32 or all i64. */
private fun ExecutionTape.checkOffsets(op: Op, x: Tensor, offsets: List<Tensor>) {
    if (offsets.size != x.rank) fail(op, listOf(x) + offsets, "needs one offset per dimension (${x.rank}), got ${offsets.size}")
    for (o in offsets) if (o.rank != 0 || (o.dtype != DType.I32 && o.dtype != DType.I64) || o.dtype != offsets[0].dtype) {
        fail(op, listOf(x) + offsets, "offsets must be i32 or i64 scalars of one type; ${o.description} is not")
    }
}
