package dev.tapeout

/** Base class of tapeout's exceptions. [detail] is what happened; [message] adds the remedy in Kotlin's terms. */
open class TapeoutException(
    /** What happened, naming the tensor, node or file, without any front end's wording of the remedy. */
    val detail: String,
    /** What the user can do, when a setting does it. */
    val remedy: Remedy? = null,
    /** For [Remedy.EXTERNAL_PARAMETER]: the size of the constant. */
    val remedyBytes: Long = 0,
    /** The recorded nodes (tape op indices) the error is about, in the order the message names them. */
    val nodes: List<Int> = emptyList(),
    /** The tensor (module path or name) the error is about, when it is about one. */
    val tensor: String? = null,
    /** The module function whose tape [nodes] index, when the export had several ([exportModule]). */
    val function: String? = null,
) : RuntimeException(detail + kotlinWording(remedy, remedyBytes)) {
    /** The native side's constructor: the remedy by name, the fields as the native error has them. */
    constructor(detail: String, remedyName: String?, remedyBytes: Long, nodes: LongArray?, tensor: String?, function: String?) :
        this(detail, remedyName?.let { Remedy.valueOf(it) }, remedyBytes, nodes.indices(), tensor, function)

    /** A failure with the remedy by name and no node or tensor. */
    constructor(detail: String, remedyName: String?, remedyBytes: Long) : this(detail, remedyName, remedyBytes, null, null, null)

    /** [detail] with the remedy worded by [wording] (the Gradle task words it as a `tapeout { … }` setting). */
    fun describe(wording: (Remedy, Long) -> String): String = detail + (remedy?.let { wording(it, remedyBytes) } ?: "")
}

internal fun kotlinWording(remedy: Remedy?, bytes: Long): String = when (remedy) {
    Remedy.DEQUANTIZE -> "; to dequantize, pass packedConstants = PackedConstantHandling.DEQUANTIZE to toComputeGraph"
    Remedy.EXTERNAL_PARAMETER ->
        "; export with MaterializationPolicy.ExternalAlways() or MaterializationPolicy.SizeThreshold(bytes = $bytes) or less"
    Remedy.DECLARE_OUTPUTS -> "; mark the tensors the model returns with tape.output(…)"
    Remedy.ALLOW_FILES_OUTSIDE_GRAPH_DIR -> "; move the file into the graph's directory"
    Remedy.BLOCK_ROW_CODES ->
        "; keep the codes in block rows: pass packedConstants = PackedConstantHandling.KEEP, not KEEP_ROW_BANDS"
    null -> ""
}

/** Node indices from the native side: tape op indices, which are Ints. */
private fun LongArray?.indices(): List<Int> = this?.map { Math.toIntExact(it) } ?: emptyList()

/** A frozen weight is packed (quantized) and [PackedConstantHandling.FAIL] is in force. The message names the
 *  tensor, the encoding and both remedies (load it dense, or pass [PackedConstantHandling.DEQUANTIZE]). */
class PackedConstantException(detail: String, remedyName: String?, remedyBytes: Long, nodes: LongArray?, tensor: String?, function: String?) :
    TapeoutException(detail, remedyName, remedyBytes, nodes, tensor, function)

/** A constant is too large to be written inline (one 2 GiB buffer); use an external policy. */
class ConstantTooLargeException(detail: String, remedyName: String?, remedyBytes: Long, nodes: LongArray?, tensor: String?, function: String?) :
    TapeoutException(detail, remedyName, remedyBytes, nodes, tensor, function)

/** The traced graph is invalid: unknown op, wrong arity, shape or dtype mismatch, cycle, bad attribute. */
class GraphValidationException(detail: String, remedyName: String?, remedyBytes: Long, nodes: LongArray?, tensor: String?, function: String?) :
    TapeoutException(detail, remedyName, remedyBytes, nodes, tensor, function) {
    /** A validation failure found on the Kotlin side. */
    constructor(detail: String) : this(detail, null, 0, null, null, null)
}

/** A parameter archive is not valid IRPA (or lacks a key). */
class IrpaFormatException(detail: String, remedyName: String?, remedyBytes: Long, nodes: LongArray?, tensor: String?, function: String?) :
    TapeoutException(detail, remedyName, remedyBytes, nodes, tensor, function)

/** The same exception (class, remedy) with [extra] appended to its detail: how the tape adds source lines. */
internal fun TapeoutException.withDetail(extra: String): TapeoutException {
    val d = detail + extra
    val r = remedy?.name
    val n = nodes.map { it.toLong() }.toLongArray()
    return when (this) {
        is PackedConstantException -> PackedConstantException(d, r, remedyBytes, n, tensor, function)
        is ConstantTooLargeException -> ConstantTooLargeException(d, r, remedyBytes, n, tensor, function)
        is GraphValidationException -> GraphValidationException(d, r, remedyBytes, n, tensor, function)
        is IrpaFormatException -> IrpaFormatException(d, r, remedyBytes, n, tensor, function)
        else -> TapeoutException(d, remedy, remedyBytes, nodes, tensor, function)
    }.also { it.initCause(this) }
}
