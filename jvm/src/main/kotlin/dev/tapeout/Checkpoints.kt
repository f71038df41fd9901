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
    /** The tensor [name]; the error lists the file's most similar names ([similarKeys]). */
    operator fun get(name: String): CheckpointTensor = tensors[name] ?: throw NoSuchElementException(
        "${file.path} has no tensor '$name' (${tensors.size} tensors" +
            similarKeys(name, tensors.keys).let { if (it.isEmpty()) "; none is similar)" else "; the most similar: $it)" })

    /**
     * This checkpoint with some tensors under other keys, for a model whose parameter keys are not the file's names
     * (a llama.cpp GGUF's `token_embd.weight` read as `model.embed_tokens.weight`). [keys] maps each new key to the
     * name it has here (`"model.embed_tokens.weight" to "token_embd.weight"`); a tensor no entry names keeps its own
     * key, so [checkpointReport] still lists it if the model never reads it. The bytes stay where they are (the
     * same file regions), and each [CheckpointTensor.name] stays the file's name, as messages and the report say it.
     * A name this checkpoint does not have is a [NoSuchElementException] listing the most similar ones; a new key
     * that is also the name of a tensor left under its own key, or one tensor given two keys, is an
     * [IllegalArgumentException] (two keys for one region would store it twice).
     */
    fun renamed(keys: Map<String, String>): Checkpoint {
        val renamedFrom = HashMap<String, String>()
        for ((key, name) in keys) {
            get(name)
            renamedFrom.put(name, key)?.let { other ->
                throw IllegalArgumentException("${file.path}: tensor '$name' is given two keys, '$other' and '$key'; give each tensor one key")
            }
        }
        val out = LinkedHashMap<String, CheckpointTensor>()
        for ((name, t) in tensors) {
            val key = renamedFrom[name] ?: name
            if (out.put(key, t) != null) {
                throw IllegalArgumentException("${file.path}: the key '$key' would name two tensors (a new key and a tensor left under its own name); rename that tensor too")
            }
        }
        return Checkpoint(file, format, out, metadata)
    }

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
 * as a missing key. [file], [tensor] (the tensor's name in the file) and [dtype] say which.
 */
class UnknownDTypeException(
    /** The checkpoint file. */
    val file: File,
    tensorName: String,
    /** The dtype the native reader named. */
    val dtype: String,
) : TapeoutException(
    "${file.path}: tensor '$tensorName' has dtype '$dtype', which the Kotlin library does not know (it knows " +
        DType.values().joinToString(", ") { it.json } + "); use the tapeout jar whose native library read the file " +
        "(one version of both), or convert the tensor to one of those dtypes",
    tensor = tensorName,
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

/** Edit distance (insertions, deletions, substitutions) between [a] and [b]. */
internal fun editDistance(a: String, b: String): Int {
    var prev = IntArray(b.length + 1) { it }
    var cur = IntArray(b.length + 1)
    for (i in 1..a.length) {
        cur[0] = i
        for (j in 1..b.length) {
            cur[j] = minOf(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + if (a[i - 1] == b[j - 1]) 0 else 1)
        }
        val t = prev; prev = cur; cur = t
    }
    return prev[b.length]
}

/** The parts of a key (`model.layers.0.self_attn.q_proj.weight` -> model, layers, 0, self, attn, q, proj, weight). */
private fun keyTokens(k: String): List<String> = k.split('.', '_', '-', '/').filter { it.isNotEmpty() }

/**
 * The [limit] keys of [candidates] most like [key]: fewest edits first, then most shared parts (`.`/`_`-separated),
 * keeping only those within half of [key]'s length in edits or sharing at least half its parts. So
 * `model.layers.0.attn.q_proj.weight` suggests `model.layers.0.self_attn.q_proj.weight`, not every `*.weight`.
 */
fun similarKeys(key: String, candidates: Collection<String>, limit: Int = 5): List<String> {
    val mine = keyTokens(key)
    val mineSet = mine.toSet()
    return candidates.asSequence().map { c ->
        val d = editDistance(key, c)
        val shared = keyTokens(c).toSet().count { it in mineSet }
        Triple(c, d, shared)
    }.filter { (c, d, shared) -> d <= maxOf(key.length, c.length) / 2 || 2 * shared >= mine.size }
        .sortedWith(compareBy<Triple<String, Int, Int>> { it.second }.thenByDescending { it.third }.thenBy { it.first })
        .take(limit).map { it.first }.toList()
}

/** The remedy part of "no checkpoint has a tensor '[key]'": the loaded checkpoints' most similar keys, or that none was loaded. */
internal fun suggestKeys(key: String, checkpoints: List<Checkpoint>): String {
    if (checkpoints.isEmpty()) {
        return "; no checkpoint was loaded: call tape.load(SafeTensors.open(file)) (or Gguf.open) before asking for " +
            "parameters, or bind(...) the parameter's values to its module"
    }
    val all = checkpoints.flatMap { it.tensors.keys }
    val near = similarKeys(key, all)
    return if (near.isEmpty()) " (${all.size} tensors, none with a similar name)" else "; the most similar keys: $near"
}

/**
 * What a traced tape made of the checkpoints given to [ExecutionTape.load] and of the parameters its [Module]s
 * declare, as transformers reports after `from_pretrained`:
 * [unusedTensors], checkpoint tensors the model never read (a misspelt or unmodelled layer), and
 * [unboundParameters], parameters a module declared that nothing gave values (no [Module.bind], no checkpoint
 * tensor of that key, never asked for on the tape). [checkpoints] are the files loaded (none: "no checkpoint was
 * loaded").
 */
class CheckpointReport(
    /** The checkpoint files loaded into the tape. */
    val checkpoints: List<File>,
    /** Checkpoint tensor names the tape never read, in file order. */
    val unusedTensors: List<String>,
    /** Keys of declared parameters nothing bound, depth first in module order. */
    val unboundParameters: List<String>,
) {
    /** The warnings an export prints for this report (empty when everything was used and bound). */
    val warnings: List<String>
        get() {
            val w = ArrayList<String>()
            fun some(keys: List<String>) = keys.take(10).joinToString(", ") + if (keys.size > 10) ", … (${keys.size - 10} more)" else ""
            if (unusedTensors.isNotEmpty()) {
                w += "${unusedTensors.size} checkpoint tensor(s) of ${checkpoints.joinToString { it.name }} were never read by the model: " +
                    "${some(unusedTensors)}; check the module paths (the keys are the checkpoint's names), or ignore this if the model " +
                    "leaves them out on purpose"
            }
            if (unboundParameters.isNotEmpty()) {
                val why = if (checkpoints.isEmpty()) "no checkpoint was loaded, and " else ""
                w += "${unboundParameters.size} parameter(s) the model declares have no values (${why}nothing bound them): " +
                    "${some(unboundParameters)}; load a checkpoint that has them (tape.load), bind(...) them, or stop declaring them"
            }
            return w
        }

    override fun toString(): String =
        if (checkpoints.isEmpty() && unboundParameters.isEmpty()) "CheckpointReport(no checkpoint was loaded)"
        else "CheckpointReport(${checkpoints.size} checkpoint(s), ${unusedTensors.size} unused tensor(s), ${unboundParameters.size} unbound parameter(s))"
}

/**
 * The [CheckpointReport] of this tape as it is now: call it after tracing (an export puts its [CheckpointReport.warnings]
 * in [ExportResult.warnings]).
 */
fun ExecutionTape.checkpointReport(): CheckpointReport = checkpointReportOf(listOf(this))

/** One report for the tapes of one module ([exportModule]): a tensor is unused when no tape read it, a parameter
 *  unbound when no tape had it. */
internal fun checkpointReportOf(tapes: Collection<ExecutionTape>): CheckpointReport {
    val read = HashSet<Pair<String, Long>>()
    val keys = HashSet<String>()
    for (t in tapes.flatMap { it.tensors }) {
        t.path?.let { keys += it }
        val d = t.data
        if (d is FileTensorData) read += File(d.path).absolutePath to d.offset
    }
    val checkpoints = tapes.flatMap { it.checkpoints }.distinctBy { it.file.absolutePath }
    val unused = checkpoints.flatMap { c -> c.tensors.values.filter { (it.file.absolutePath to it.offset) !in read }.map { it.name } }
    val available = checkpoints.flatMap { it.tensors.keys }.toSet()
    val roots = tapes.flatMap { tape -> synchronized(tape.modules) { tape.modules.toList() } }.distinct()
    val unbound = roots.flatMap { it.unprovidedKeys() }.filter { it !in keys && it !in available }.distinct()
    return CheckpointReport(checkpoints.map { it.file }, unused, unbound)
}
