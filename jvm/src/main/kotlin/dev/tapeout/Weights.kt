package dev.tapeout

/**
 * The tensors an [ExecutionTape] starts from: runtime inputs, frozen weights (borrowed arrays, checkpoint
 * regions, 16-bit and packed values), mapped file regions and scalar constants. Weights are keyed by the
 * current module path ([ExecutionTape.key]); one key gives one tensor.
 */
sealed interface TapeSources {
    /** A runtime input; use [DYNAMIC] for a dimension known only at run time. */
    fun input(name: String, shape: LongArray, dtype: DType = DType.F32): Tensor = core.newInput(name, shape, dtype)

    /** A runtime input with Int dimensions (`-1`, [DYNAMIC], for one known only at run time). */
    fun input(name: String, vararg shape: Int, dtype: DType = DType.F32): Tensor = input(name, longs(shape), dtype)

    /** A frozen f32 weight that borrows [values] (never copied), keyed [ExecutionTape.key]`(path)`. */
    fun weight(path: String, values: FloatArray, vararg shape: Long): Tensor = core.weightAt(core.key(path), values, shape)

    /** [weight] with Int dimensions. */
    fun weight(path: String, values: FloatArray, vararg shape: Int): Tensor = weight(path, values, *longs(shape))

    /** A frozen weight whose bytes stay in a checkpoint file ([SafeTensors.open], [Gguf.open]), keyed [ExecutionTape.key]`(path)`. */
    fun weight(path: String, tensor: CheckpointTensor): Tensor = core.checkpointWeightAt(core.key(path), tensor)

    /** A frozen bf16 or f16 weight: little-endian 16-bit values, kept as stored (or widened when exported). */
    fun halfWeight(path: String, bytes: ByteArray, dtype: DType, vararg shape: Long): Tensor {
        require(dtype == DType.BF16 || dtype == DType.F16) { "halfWeight takes BF16 or F16, not $dtype" }
        val k = core.key(path)
        return core.keyed(k, core.newTensor(null, shape, dtype, k, HalfTensorData(bytes)))
    }

    /** [halfWeight] of little-endian bytes with Int dimensions. */
    fun halfWeight(path: String, bytes: ByteArray, dtype: DType, vararg shape: Int): Tensor = halfWeight(path, bytes, dtype, *longs(shape))

    /** A frozen bf16 or f16 weight given as 16-bit patterns (`bits[i]` is element i), kept as stored (or widened when exported). */
    fun halfWeight(path: String, bits: ShortArray, dtype: DType, vararg shape: Long): Tensor = core.halfWeightAt(core.key(path), bits, dtype, shape)

    /** [halfWeight] with Int dimensions. */
    fun halfWeight(path: String, bits: ShortArray, dtype: DType, vararg shape: Int): Tensor = halfWeight(path, bits, dtype, *longs(shape))

    /** A frozen packed weight (logical dtype f32), refused, dequantized or kept packed according to [PackedConstantHandling]. */
    fun packedWeight(path: String, bytes: ByteArray, encoding: String, vararg shape: Long): Tensor = core.packedWeightAt(core.key(path), bytes, encoding, shape)

    /** [packedWeight] with Int dimensions. */
    fun packedWeight(path: String, bytes: ByteArray, encoding: String, vararg shape: Int): Tensor = packedWeight(path, bytes, encoding, *longs(shape))

    /** A frozen tensor of another dtype (integer tables, masks), little-endian bytes. */
    fun denseWeight(path: String, bytes: ByteArray, dtype: DType, vararg shape: Long): Tensor {
        val k = core.key(path)
        return core.keyed(k, core.newTensor(null, shape, dtype, k, DenseBytesTensorData(bytes)))
    }

    /** [denseWeight] with Int dimensions. */
    fun denseWeight(path: String, bytes: ByteArray, dtype: DType, vararg shape: Int): Tensor = denseWeight(path, bytes, dtype, *longs(shape))

    /** A file region the program reads at run time (a graph input). */
    fun mapped(name: String, file: String, offset: Long, length: Long, dtype: DType, vararg shape: Long): Tensor =
        core.newTensor(name, shape, dtype, null, MappedTensorData(file, offset, length))

    /** [mapped] with Int dimensions. */
    fun mapped(name: String, file: String, offset: Long, length: Long, dtype: DType, vararg shape: Int): Tensor =
        mapped(name, file, offset, length, dtype, *longs(shape))

    /**
     * A scalar constant of [dtype] (a float type, or an integer type for whole values): written inline in the
     * module, one per value and dtype however often it is used. `x * 0.5f` makes one of `x`'s dtype.
     */
    fun scalar(value: Double, dtype: DType = DType.F32): Tensor = core.scalars.getOrPut(value to dtype) {
        val name = "scalar.${core.scalars.size}"
        if (dtype == DType.F32) core.newTensor(name, LongArray(0), dtype, null, FloatArrayTensorData(floatArrayOf(value.toFloat())))
        else core.newTensor(name, LongArray(0), dtype, null, DenseBytesTensorData(scalarBytes(value, dtype)))
    }
}

/** The tape behind a [TapeSources] (its one implementation). */
private val TapeSources.core: ExecutionTape get() = this as ExecutionTape

/** An f32 weight of key [k] borrowing [values]. */
internal fun ExecutionTape.weightAt(k: String, values: FloatArray, shape: LongArray): Tensor {
    require(elementCount(shape) == values.size.toLong()) { "weight '$k'${at()}: ${values.size} values for shape ${shape.toList()}" }
    return keyed(k, newTensor(null, shape, DType.F32, k, FloatArrayTensorData(values)))
}

/** A weight of key [k] whose bytes stay in [c]'s file. */
internal fun ExecutionTape.checkpointWeightAt(k: String, c: CheckpointTensor): Tensor =
    keyed(k, newTensor(null, c.shape, c.dtype, k, FileTensorData(c.file.path, c.offset, c.length, c.encoding)))

/** A bf16/f16 weight of key [k] given as 16-bit patterns. */
internal fun ExecutionTape.halfWeightAt(k: String, bits: ShortArray, dtype: DType, shape: LongArray): Tensor {
    require(dtype == DType.BF16 || dtype == DType.F16) { "halfWeight takes BF16 or F16, not $dtype" }
    require(elementCount(shape) == bits.size.toLong()) { "weight '$k'${at()}: ${bits.size} values for shape ${shape.toList()}" }
    return keyed(k, newTensor(null, shape, dtype, k, HalfBitsTensorData(bits)))
}

/** A packed weight of key [k]. */
internal fun ExecutionTape.packedWeightAt(k: String, bytes: ByteArray, encoding: String, shape: LongArray): Tensor =
    keyed(k, newTensor(null, shape, DType.F32, k, PackedTensorData(bytes, encoding)))
