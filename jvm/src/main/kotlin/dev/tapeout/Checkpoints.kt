package dev.tapeout

import java.io.File

/**
 * One tensor of a [Checkpoint]: where its bytes are in the file. Used like an array weight
 * (`tape.weight("model.fc.weight", ckpt["fc.weight"])`, or [ExecutionTape.param] after [ExecutionTape.load]),
 * but the bytes stay in the file: the tape records the region, the native side memory-maps it at export, and the
 * JVM heap never holds them. A packed GGUF tensor ([encoding] set, logical [dtype] f32) is a packed weight
 * ([PackedConstantHandling] FAIL, DEQUANTIZE or KEEP applies).
 */
class CheckpointTensor internal constructor(
    /** Its name in the file. */
    val name: String,
    /** Row-major shape. */
    val shape: LongArray,
    /** Element type (f32 for packed blocks). */
    val dtype: DType,
    /** The file. */
    val file: File,
    /** Absolute offset of its bytes in [file]. */
    val offset: Long,
    /** Byte length. */
    val length: Long,
    /** The GGML block encoding (`Q4_K`, …) of a packed tensor, `null` for dense values. */
    val encoding: String?,
) {
    override fun toString(): String = "CheckpointTensor($name, ${shapeText(shape)}, ${encoding ?: dtype.json}, ${file.name}@$offset)"
}

/**
 * An open weight file ([SafeTensors.open], [Gguf.open]): its tensors by name and its metadata. Opening reads
 * and validates the header only (the native reader: offsets, sizes and overlaps checked); no tensor bytes are
 * read into the JVM.
 */
class Checkpoint internal constructor(
    /** The file. */
    val file: File,
    /** `safetensors` or `gguf`. */
    val format: String,
    /** Tensors by name, in file order. */
    val tensors: Map<String, CheckpointTensor>,
    /**
     * The file's metadata: safetensors `__metadata__` (strings), or GGUF key/values (Long, Double, Boolean,
     * String; an array as a map with `array_len` and `elem_type`, its contents not read).
     */
    val metadata: Map<String, Any?>,
) {
    /** The tensor [name]; the error lists tensors with the same ending. */
    operator fun get(name: String): CheckpointTensor = tensors[name] ?: throw NoSuchElementException(
        "${file.path} has no tensor '$name' (${tensors.size} tensors" +
            tensors.keys.filter { it.endsWith(name.substringAfterLast('.')) }.take(5).let { if (it.isEmpty()) ")" else "; e.g. $it)" })

    internal companion object {
        fun open(file: File, expect: String?): Checkpoint = fromDescription(file, Json.parse(NativeBridge.describeWeights(file.path)) as Map<*, *>, expect)

        /** The checkpoint the native reader described as [m] (`describeWeights`' JSON). */
        fun fromDescription(file: File, m: Map<*, *>, expect: String?): Checkpoint {
            val format = m["format"] as String
            if (expect != null && format != expect) {
                throw IllegalArgumentException("${file.path} is a $format file, not $expect; open it with ${if (format == "gguf") "Gguf" else "SafeTensors"}.open")
            }
            val tensors = LinkedHashMap<String, CheckpointTensor>()
            for (t in m["tensors"] as List<*>) {
                t as Map<*, *>
                val name = t["name"] as String
                val dtypeName = t["dtype"] as String
                val dtype = DType.values().firstOrNull { it.json == dtypeName } ?: throw UnknownDTypeException(file, name, dtypeName)
                val shape = (t["shape"] as List<*>).map { (it as Number).toLong() }.toLongArray()
                tensors[name] = CheckpointTensor(name, shape, dtype, file.absoluteFile, (t["offset"] as Number).toLong(),
                    (t["length"] as Number).toLong(), t["encoding"] as String?)
            }
            @Suppress("UNCHECKED_CAST")
            return Checkpoint(file.absoluteFile, format, tensors, m["metadata"] as Map<String, Any?>)
        }
    }
}

/**
 * The native reader described a checkpoint tensor with a dtype this Kotlin library has no [DType] for: the jar's
 * native library and its Kotlin classes are from different tapeout versions (every dtype the readers accept has a
 * [DType] otherwise). Opening the checkpoint fails instead of leaving the tensor out, which would surface later
 * as a missing key. [file], [tensor] and [dtype] say which.
 */
class UnknownDTypeException(
    /** The checkpoint file. */
    val file: File,
    /** The tensor's name in the file. */
    val tensor: String,
    /** The dtype the native reader named. */
    val dtype: String,
) : TapeoutException(
    "${file.path}: tensor '$tensor' has dtype '$dtype', which the Kotlin library does not know (it knows " +
        DType.values().joinToString(", ") { it.json } + "); use the tapeout jar whose native library read the file " +
        "(one version of both), or convert the tensor to one of those dtypes",
)

/** safetensors files (Hugging Face checkpoints). */
object SafeTensors {
    /** Opens [file]: its tensors by name, bytes left in the file. */
    fun open(file: File): Checkpoint = Checkpoint.open(file, "safetensors")
}

/** GGUF files (llama.cpp checkpoints, packed quantized tensors included). */
object Gguf {
    /** Opens [file]: its tensors by name, bytes left in the file. */
    fun open(file: File): Checkpoint = Checkpoint.open(file, "gguf")
}
