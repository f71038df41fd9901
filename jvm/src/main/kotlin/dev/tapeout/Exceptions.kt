package dev.tapeout

/** What the user can do about a [TapeoutException], as data: the Kotlin API words it in its message, the Gradle
 *  task words it as a `tapeout { … }` setting. */
enum class Remedy {
    /** Dequantize packed weights while exporting. */
    DEQUANTIZE,
    /** Make constants of at least [TapeoutException.remedyBytes] bytes external parameters. */
    EXTERNAL_PARAMETER,
    /** Declare the tensors the model returns. */
    DECLARE_OUTPUTS,
}

/** Base class of tapeout's exceptions. [detail] is what happened; [message] adds the remedy in Kotlin's terms. */
open class TapeoutException(
    /** What happened, naming the tensor, node or file, without any front end's wording of the remedy. */
    val detail: String,
    /** What the user can do, when a setting does it. */
    val remedy: Remedy? = null,
    /** For [Remedy.EXTERNAL_PARAMETER]: the size of the constant. */
    val remedyBytes: Long = 0,
) : RuntimeException(detail + kotlinWording(remedy, remedyBytes)) {
    /** The native side's constructor: the remedy by name. */
    constructor(detail: String, remedyName: String?, remedyBytes: Long) :
        this(detail, remedyName?.let { Remedy.valueOf(it) }, remedyBytes)

    /** [detail] with the remedy worded by [wording] (the Gradle task words it as a `tapeout { … }` setting). */
    fun describe(wording: (Remedy, Long) -> String): String = detail + (remedy?.let { wording(it, remedyBytes) } ?: "")
}

internal fun kotlinWording(remedy: Remedy?, bytes: Long): String = when (remedy) {
    Remedy.DEQUANTIZE -> "; to dequantize, pass packedConstants = PackedConstantHandling.DEQUANTIZE to toComputeGraph"
    Remedy.EXTERNAL_PARAMETER ->
        "; export with MaterializationPolicy.ExternalAlways() or MaterializationPolicy.SizeThreshold(bytes = $bytes) or less"
    Remedy.DECLARE_OUTPUTS -> "; mark the tensors the model returns with tape.output(…)"
    null -> ""
}

/** A frozen weight is packed (quantized) and [PackedConstantHandling.FAIL] is in force. The message names the
 *  tensor, the encoding and both remedies (load it dense, or pass [PackedConstantHandling.DEQUANTIZE]). */
class PackedConstantException(detail: String, remedyName: String?, remedyBytes: Long) :
    TapeoutException(detail, remedyName, remedyBytes)

/** A constant is too large to be written inline (one 2 GiB buffer); use an external policy. */
class ConstantTooLargeException(detail: String, remedyName: String?, remedyBytes: Long) :
    TapeoutException(detail, remedyName, remedyBytes)

/** The traced graph is invalid: unknown op, wrong arity, shape or dtype mismatch, cycle, bad attribute. */
class GraphValidationException(detail: String, remedyName: String?, remedyBytes: Long) :
    TapeoutException(detail, remedyName, remedyBytes) {
    /** A validation failure found on the Kotlin side. */
    constructor(detail: String) : this(detail, null, 0)
}

/** A parameter archive is not valid IRPA (or lacks a key). */
class IrpaFormatException(detail: String, remedyName: String?, remedyBytes: Long) :
    TapeoutException(detail, remedyName, remedyBytes)

/** The same exception (class, remedy) with [extra] appended to its detail: how the tape adds source lines. */
internal fun TapeoutException.withDetail(extra: String): TapeoutException {
    val d = detail + extra
    val r = remedy?.name
    return when (this) {
        is PackedConstantException -> PackedConstantException(d, r, remedyBytes)
        is ConstantTooLargeException -> ConstantTooLargeException(d, r, remedyBytes)
        is GraphValidationException -> GraphValidationException(d, r, remedyBytes)
        is IrpaFormatException -> IrpaFormatException(d, r, remedyBytes)
        else -> TapeoutException(d, remedy, remedyBytes)
    }.also { it.initCause(this) }
}
