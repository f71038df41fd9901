package dev.tapeout

/** Int dimensions as Long ones, `-1` as [DYNAMIC]. */
internal fun longs(shape: IntArray): LongArray = LongArray(shape.size) { if (shape[it] == -1) DYNAMIC else shape[it].toLong() }

/** The number of elements of a static [shape]. */
internal fun elementCount(shape: LongArray): Long = shape.fold(1L) { a, d -> a * d }

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
