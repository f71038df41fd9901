// Rendered from rust/iree-jni/src/contract.rs by `TAPEOUT_REGENERATE=1 cargo test -p tapeout-iree-jni`; do not
// edit. A test fails when this file and the native tables disagree.
package dev.tapeout.iree

/** Element types of values, as tapeout's modules use them: [bytes] per element, [mlir] its MLIR spelling. */
enum class IreeDType(internal val code: Int, val bytes: Int, val mlir: String) {
    /** 32-bit float (`FloatArray`). */
    F32(0, 4, "f32"),
    /** 16-bit float, as its bits (`ShortArray`). */
    F16(1, 2, "f16"),
    /** bfloat16, as its bits (`ShortArray`). */
    BF16(2, 2, "bf16"),
    /** 64-bit float (raw bytes or a direct `ByteBuffer`). */
    F64(3, 8, "f64"),
    /** 8-bit integer (`ByteArray`). */
    I8(4, 1, "i8"),
    /** 16-bit integer (`ShortArray`). */
    I16(5, 2, "i16"),
    /** 32-bit integer (`IntArray`). */
    I32(6, 4, "i32"),
    /** 64-bit integer (`LongArray`). */
    I64(7, 8, "i64"),
    /** Unsigned 8-bit integer (`ByteArray`). */
    U8(8, 1, "ui8"),
    /** Boolean, one byte each (`ByteArray` of 0/1). */
    BOOL(9, 1, "i1"),
    ;

    override fun toString() = mlir

    internal companion object {
        fun of(code: Long): IreeDType? = entries.firstOrNull { it.code.toLong() == code }
    }
}

/** IREE's status codes (`iree_status_code_t`); [raw] is IREE's number. */
enum class IreeStatusCode(val raw: Int) {
    /** `IREE_STATUS_CANCELLED`. */
    CANCELLED(1),
    /** `IREE_STATUS_UNKNOWN`, also any code this runtime does not know. */
    UNKNOWN(2),
    /** `IREE_STATUS_INVALID_ARGUMENT`. */
    INVALID_ARGUMENT(3),
    /** `IREE_STATUS_DEADLINE_EXCEEDED`. */
    DEADLINE_EXCEEDED(4),
    /** `IREE_STATUS_NOT_FOUND`. */
    NOT_FOUND(5),
    /** `IREE_STATUS_ALREADY_EXISTS`. */
    ALREADY_EXISTS(6),
    /** `IREE_STATUS_PERMISSION_DENIED`. */
    PERMISSION_DENIED(7),
    /** `IREE_STATUS_RESOURCE_EXHAUSTED`. */
    RESOURCE_EXHAUSTED(8),
    /** `IREE_STATUS_FAILED_PRECONDITION`. */
    FAILED_PRECONDITION(9),
    /** `IREE_STATUS_ABORTED`. */
    ABORTED(10),
    /** `IREE_STATUS_OUT_OF_RANGE`. */
    OUT_OF_RANGE(11),
    /** `IREE_STATUS_UNIMPLEMENTED`. */
    UNIMPLEMENTED(12),
    /** `IREE_STATUS_INTERNAL`. */
    INTERNAL(13),
    /** `IREE_STATUS_UNAVAILABLE`. */
    UNAVAILABLE(14),
    /** `IREE_STATUS_DATA_LOSS`. */
    DATA_LOSS(15),
    /** `IREE_STATUS_UNAUTHENTICATED`. */
    UNAUTHENTICATED(16),
    /** `IREE_STATUS_DEFERRED`. */
    DEFERRED(17),
    /** `IREE_STATUS_INCOMPATIBLE`. */
    INCOMPATIBLE(18),
    ;

    internal companion object {
        fun of(raw: Long): IreeStatusCode = entries.firstOrNull { it.raw.toLong() == raw } ?: UNKNOWN
    }
}

/** Anything that goes wrong serving a module; the subclasses carry what it is about. The JVM keeps running. */
open class IreeException(message: String) : RuntimeException(message)

/** IREE refused an operation: [code] is IREE's status, [during] what tapeout was doing. */
class IreeRuntimeException(
    message: String,
    /** IREE's status code. */
    val code: IreeStatusCode,
    /** What tapeout was doing. */
    val during: String,
) : IreeException(message)

/** A driver this runtime has could not make a device here: its system library (the Vulkan loader, `libvulkan.so.1`) or a device it drives is missing. The message names what to install (for Vulkan: a loader and a driver, e.g. Debian's `libvulkan1` and `mesa-vulkan-drivers`) or says to serve on `local-task`. */
class IreeDeviceUnavailableException(
    message: String,
    /** The driver asked for (`vulkan`: the URI's scheme). */
    val driver: String,
    /** The device URI as given. */
    val uri: String,
    /** IREE's status (`NOT_FOUND`, `UNAVAILABLE`, ...). */
    val code: IreeStatusCode,
) : IreeException(message)

/** The bytes given as a compiled module are not an IREE module (.vmfb), or not a whole one. */
class IreeNotAModuleException(
    message: String,
) : IreeException(message)

/** The module was compiled for another device than [device] (e.g. for Vulkan, loaded on local-task). */
open class IreeWrongTargetException(
    message: String,
    /** The device it was loaded on. */
    val device: String,
) : IreeException(message)

/** The module's CPU code uses instructions this machine's CPU lacks ([missing]): calling it would crash the process (SIGILL), so it is refused at load. Recompile with `--iree-llvmcpu-target-cpu=host` on this machine, or a lower `--iree-llvmcpu-target-cpu` (`generic` runs on any x86-64). */
class IreeMissingCpuFeaturesException(
    message: String,
    /** The device it was loaded on. */
    device: String,
    /** LLVM's name of the CPU the module was compiled for. */
    val cpu: String,
    /** LLVM's names of the features this CPU lacks. */
    val missing: List<String>,
    /** Features of the module's target this runtime cannot test for. */
    val unchecked: List<String>,
) : IreeWrongTargetException(message, device)

/** The module needs parameter [key] (`<scope>::*` when no file was given under its scope) that no file holds. */
class IreeMissingParameterException(
    message: String,
    /** The key, with its scope. */
    val key: String,
) : IreeException(message)

/** A parameter file that cannot be served: absent, truncated, not an archive, entries outside the file, or a key another file of its scope holds with other bytes. */
class IreeParameterFileException(
    message: String,
    /** The file. */
    val file: java.io.File,
) : IreeException(message)

/** Two parameter files under one scope hold key [key] with different contents: which one IREE would use is not left to the order of the list. Give each key once per scope. */
class IreeConflictingParameterException(
    message: String,
    /** The scope both files were given under. */
    val scope: String,
    /** The key. */
    val key: String,
    /** The file listed first. */
    val first: java.io.File,
    /** The other file. */
    val second: java.io.File,
) : IreeException(message)

/** The module has no function [name]; it has [available]. */
class IreeNoSuchFunctionException(
    message: String,
    /** The name asked for. */
    val name: String,
    /** The functions it has. */
    val available: List<String>,
) : IreeException(message)

/** A call to [function] with [given] arguments; it takes [expected]. */
class IreeArityException(
    message: String,
    /** The function called. */
    val function: String,
    /** How many arguments it takes. */
    val expected: Int,
    /** How many it was given. */
    val given: Int,
) : IreeException(message)

/** [function]'s argument [index] ([argument]) is not what the function takes: it takes [expected], given [given]. */
open class IreeArgumentException(
    message: String,
    /** The function called. */
    val function: String,
    /** The argument's position. */
    val index: Int,
    /** The argument's name (`tapeout.name`). */
    val argument: String,
    /** What the function takes (`f32`; a shape like `[?, 6]`, `?` where dynamic). */
    val expected: String,
    /** What it was given. */
    val given: String,
) : IreeException(message)

/** An argument of the wrong element type ([expected] and [given] are `f32`, `i64`, ...). */
class IreeDTypeException(
    message: String,
    /** The function called. */
    function: String,
    /** The argument's position. */
    index: Int,
    /** The argument's name (`tapeout.name`). */
    argument: String,
    /** What the function takes (`f32`; a shape like `[?, 6]`, `?` where dynamic). */
    expected: String,
    /** What it was given. */
    given: String,
) : IreeArgumentException(message, function, index, argument, expected, given)

/** An argument of the wrong shape ([expected] with `?` where dynamic, e.g. `[?, 6]`; [given] e.g. `[2, 4]`). */
class IreeShapeException(
    message: String,
    /** The function called. */
    function: String,
    /** The argument's position. */
    index: Int,
    /** The argument's name (`tapeout.name`). */
    argument: String,
    /** What the function takes (`f32`; a shape like `[?, 6]`, `?` where dynamic). */
    expected: String,
    /** What it was given. */
    given: String,
) : IreeArgumentException(message, function, index, argument, expected, given)

/** Two `?` dimensions of a call's arguments that the function's graph requires equal (the module's `tapeout.dims`, the signature's `dims`) were given different extents: the module would read one tensor at the other's extent, out of bounds. Pass tensors whose extents agree there. */
class IreeUnequalDimsException(
    message: String,
    /** The function called. */
    val function: String,
    /** The first argument's name. */
    val firstArgument: String,
    /** Its dimension. */
    val firstAxis: Int,
    /** Its extent. */
    val firstExtent: Long,
    /** The argument whose dimension differs. */
    val secondArgument: String,
    /** Its dimension. */
    val secondAxis: Int,
    /** Its extent. */
    val secondExtent: Long,
) : IreeException(message)

/** Host data of [given] bytes for a value of [expected] bytes (or a shape whose size no 64-bit count holds). */
class IreeSizeException(
    message: String,
    /** Bytes the value needs. */
    val expected: Long,
    /** Bytes given. */
    val given: Long,
) : IreeException(message)

/** A file that could not be read (or a mapped buffer whose file shrank under it). */
class IreeIoException(
    message: String,
    /** The file. */
    val file: java.io.File,
) : IreeException(message)

/** A value passed to a module that did not make it: values stay with the module (and device) that made them; make it again with this module's `value`. */
class IreeForeignValueException(
    message: String,
    /** Which argument. */
    val what: String,
) : IreeException(message)

/** The API was used in a way it cannot serve (a closed handle, a negative dimension, a buffer that is not direct or not writable); the message says which. */
class IreeUsageException(
    message: String,
) : IreeException(message)

/** A failure inside tapeout's native layer that is a bug (a JNI call failed, a native panic): please report it with the message. The JVM keeps running. */
class IreeInternalException(
    message: String,
) : IreeException(message)

/** The typed exception of a native failure (see rust/iree-jni/src/contract.rs for the encoding). */
internal fun nativeException(kind: Int, message: String, texts: Array<String>, numbers: LongArray): IreeException {
    var t = 0
    var n = 0
    fun text() = texts[t++]
    fun number() = numbers[n++]
    fun list() = List(number().toInt()) { text() }
    return when (kind) {
        0 -> IreeRuntimeException(message, IreeStatusCode.of(number()), text())
        1 -> IreeDeviceUnavailableException(message, text(), text(), IreeStatusCode.of(number()))
        2 -> IreeNotAModuleException(message)
        3 -> IreeWrongTargetException(message, text())
        4 -> IreeMissingCpuFeaturesException(message, text(), text(), list(), list())
        5 -> IreeMissingParameterException(message, text())
        6 -> IreeParameterFileException(message, java.io.File(text()))
        7 -> IreeConflictingParameterException(message, text(), text(), java.io.File(text()), java.io.File(text()))
        8 -> IreeNoSuchFunctionException(message, text(), list())
        9 -> IreeArityException(message, text(), number().toInt(), number().toInt())
        10 -> IreeDTypeException(message, text(), number().toInt(), text(), text(), text())
        11 -> IreeShapeException(message, text(), number().toInt(), text(), text(), text())
        12 -> IreeUnequalDimsException(message, text(), text(), number().toInt(), number(), text(), number().toInt(), number())
        13 -> IreeSizeException(message, number(), number())
        14 -> IreeIoException(message, java.io.File(text()))
        15 -> IreeForeignValueException(message, text())
        16 -> IreeUsageException(message)
        17 -> IreeInternalException(message)
        else -> IreeInternalException("$message (native failure kind $kind)")
    }
}
