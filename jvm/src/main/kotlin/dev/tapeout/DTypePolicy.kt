package dev.tapeout

/**
 * How the ops of one tape see 16-bit (bf16/f16) weights: as their own type next to an activation of that type,
 * as f32 next to another float, and alone as the tape's [ExecutionTape.compute] type (if it is theirs, else
 * f32). One weight keeps one view for the whole tape, as the native side gives it one.
 */
internal class DTypePolicy(private val tape: ExecutionTape) {
    private val views = HashMap<Int, DType>()

    /** The type ops see [t] as, next to an operand of type [partner] (`null`: alone). */
    fun seen(t: Tensor, partner: DType?, op: Op): DType = seen(t, partner, op.opName)

    /** [seen] for a function that is not one op of the table (`linear`), named [op] in the error. */
    fun seen(t: Tensor, partner: DType?, op: String): DType {
        if (!t.isHalfWeight()) return t.dtype
        val fixed = views[t.id]
        val want = when {
            partner == null || !partner.isFloat -> fixed ?: if (tape.compute == t.dtype) t.dtype else DType.F32
            partner == t.dtype -> t.dtype
            else -> DType.F32
        }
        if (fixed != null && fixed != want) {
            tape.fail(op, listOf(t), "this ${t.dtype.json} weight is already used as ${fixed.json} elsewhere in the tape and cannot be seen as " +
                "${want.json} here; convert it explicitly (convert(w, DType.${want.name}))")
        }
        views[t.id] = want
        return want
    }

    /** The one type of two operands that must agree. */
    fun pair(op: Op, a: Tensor, b: Tensor): DType {
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
        if (ta != tb) tape.fail(op, listOf(a, b), "dtypes ${ta.json} and ${tb.json} differ; insert convert(…)")
        return ta
    }

    /** The type of [x] alone. */
    fun one(op: Op, x: Tensor): DType = seen(x, null, op)
}

/** A bf16/f16 weight, which ops may see as f32 or as its own type. */
internal fun Tensor.isHalfWeight(): Boolean = when (val d = data) {
    is HalfTensorData, is HalfBitsTensorData -> true
    is FileTensorData -> d.encoding == null && (dtype == DType.BF16 || dtype == DType.F16)
    else -> false
}
