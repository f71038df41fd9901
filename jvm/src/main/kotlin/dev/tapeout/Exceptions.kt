package dev.tapeout

/** Base class of tapeout's exceptions. */
open class TapeoutException(message: String) : RuntimeException(message)

/** A frozen weight is packed (quantized) and [PackedConstantHandling.FAIL] is in force. The message names the
 *  tensor, the encoding and both remedies (load it dense, or pass [PackedConstantHandling.DEQUANTIZE]). */
class PackedConstantException(message: String) : TapeoutException(message)

/** A constant is too large to be written inline (one 2 GiB buffer); use an external policy. */
class ConstantTooLargeException(message: String) : TapeoutException(message)

/** The traced graph is invalid: unknown op, wrong arity, shape or dtype mismatch, cycle, bad attribute. */
class GraphValidationException(message: String) : TapeoutException(message)

/** A parameter archive is not valid IRPA (or lacks a key). */
class IrpaFormatException(message: String) : TapeoutException(message)
