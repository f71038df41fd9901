package dev.tapeout

/** Element types, named as in tapeout's graph format. */
enum class DType(val json: String, val byteWidth: Int) {
    F32("f32", 4), F64("f64", 8), F16("f16", 2), BF16("bf16", 2),
    I8("i8", 1), I16("i16", 2), I32("i32", 4), I64("i64", 8), U8("u8", 1), U16("u16", 2), U32("u32", 4), U64("u64", 8),
    BOOL("bool", 1);

    val isFloat: Boolean get() = this == F32 || this == F64 || this == F16 || this == BF16
}

/** Where a tensor's values live. tapeout borrows them; nothing here is copied by an export. */
sealed interface TensorData

/** Dense f32 values on the heap: exported straight from the array, pinned one 64 MiB chunk at a time. */
class FloatArrayTensorData(val values: FloatArray) : TensorData

/** Dense f16 or bf16 values (the tensor's dtype says which), little-endian, 2 bytes each. */
class HalfTensorData(val bytes: ByteArray) : TensorData

/**
 * Dense f16 or bf16 values (the tensor's dtype says which) as their 16-bit patterns, one `Short` each: up to
 * 2^31 − 1 elements (4 GiB), twice what a `ByteArray` can hold, e.g. a 262144 × 7680 bf16 table. Widened to f32
 * chunk by chunk when exported, pinned one 64 MiB chunk at a time; never copied.
 */
class HalfBitsTensorData(val bits: ShortArray) : TensorData

/** Packed GGML blocks (`Q8_0`, `Q4_0`, `Q5_0`, `Q5_1`, `Q4_K`, `Q5_K`, `Q6_K`, or any other name). */
class PackedTensorData(val bytes: ByteArray, val encoding: String) : TensorData

/** Dense little-endian values of any other dtype (integer tables, masks). */
class DenseBytesTensorData(val bytes: ByteArray) : TensorData

/** A file region the program reads at run time: always a graph input. */
class MappedTensorData(val path: String, val offset: Long, val length: Long) : TensorData

/**
 * A frozen weight whose bytes stay in a file (a checkpoint tensor, see [Checkpoint]): the native side
 * memory-maps the file at export and writes the region to the archive; the JVM heap never holds them.
 * [encoding] names packed GGML blocks (logical dtype f32), `null` for dense little-endian values.
 */
class FileTensorData(val path: String, val offset: Long, val length: Long, val encoding: String? = null) : TensorData

/** No values: an activation or a runtime input. */
object ShapeOnly : TensorData

/** A dimension known only at run time. */
const val DYNAMIC: Long = -1L

/**
 * A recorded tensor. [path] is the module path (`model.layers.3.attn.q_proj.weight`), the stable parameter key.
 * [name] is how the graph and the module's `tapeout.name` attributes call it ([ExecutionTape.output] can rename
 * a result). [site] is the line of your code that recorded it (`Model.kt:42`), named in error messages.
 * A tensor knows its [tape], so the operators in `Operators.kt` (`x + y`, `x * 0.5f`, `x matmul w`) need no
 * receiver.
 */
class Tensor internal constructor(
    val id: Int,
    name: String,
    val shape: LongArray,
    val dtype: DType,
    val path: String?,
    val data: TensorData,
    /** The tape that recorded this tensor. */
    val tape: ExecutionTape,
    /** Where your code recorded it (file and line), if the tape captures call sites. */
    val site: StackTraceElement?,
) {
    /** The tensor's name in the graph. */
    var name: String = name
        internal set

    val rank: Int get() = shape.size

    /** `'path'` of a weight or `'name'`, its shape, and the site that recorded it: how error messages name a tensor. */
    val description: String
        get() = buildString {
            append('\'').append(path ?: name).append('\'')
            append(' ').append(shapeText(shape)).append(' ').append(dtype.json)
            site?.let { append(" from ").append(siteText(it)) }
        }

    override fun toString(): String = "Tensor($name, ${shape.joinToString("x", transform = ::dimText)}, $dtype)"
}

/** One dimension as messages and files write it: its size, or `?` for [DYNAMIC]. */
internal fun dimText(d: Long): String = if (d == DYNAMIC) "?" else "$d"

/** A shape as messages write it: `[?, 4]`. */
internal fun shapeText(shape: LongArray): String = shape.joinToString(", ", "[", "]", transform = ::dimText)

internal fun siteText(e: StackTraceElement): String = "${e.fileName ?: e.className}:${e.lineNumber}"
