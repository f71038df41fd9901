package dev.tapeout

import java.io.File

/**
 * Exports several tapes as one module with a public function each (e.g. `prefill` and `decode` of a language
 * model) and one set of parameters: `<outputDir>/<name>.mlir` and its archive(s), as [ComputeGraph.export].
 *
 * A weight that several tapes use (the same array, or the same checkpoint tensor, under the same key) is one
 * `util.global` and one archive entry; one key given different values by two tapes is a
 * [GraphValidationException] naming the key and both functions. Each function's arguments and results carry the
 * names its tape gave them (`tapeout.name`).
 *
 * ```kotlin
 * exportModule(File("build/tapeout"), "tiny_llm", mapOf("prefill" to prefillTape, "decode" to decodeTape))
 * ```
 */
fun exportModule(
    outputDir: File,
    name: String,
    functions: Map<String, ExecutionTape>,
    packedConstants: PackedConstantHandling = PackedConstantHandling.FAIL,
    halfConstants: HalfConstantHandling = HalfConstantHandling.KEEP,
    policy: MaterializationPolicy = MaterializationPolicy.SizeThreshold(),
    maxArchiveBytes: Long = 0,
): ExportResult {
    require(functions.isNotEmpty()) { "exportModule needs at least one function" }
    require(maxArchiveBytes >= 0) { "maxArchiveBytes must be 0 (one archive) or a positive size, not $maxArchiveBytes" }
    val m = ModuleTables(functions)
    val json = NativeBridge.export(m.json(name), m.data, m.kinds, m.encodings, nativeOptions(packedConstants, halfConstants),
        IntArray(0), outputDir.path, name, policy.scopeName, policy.inlineBelow, maxArchiveBytes)
    return exportResult(json)
}

/** A value compared by identity (the same array object), for finding the weights several tapes share. */
private class Same(val o: Any) {
    override fun equals(other: Any?) = other is Same && other.o === o
    override fun hashCode() = System.identityHashCode(o)
}

/**
 * The tapes as one graph with `"functions"`: the weights in one shared table (one entry per key and source),
 * each function's inputs and activations in its own, and the JVM arrays by position in that order.
 */
private class ModuleTables(val functions: Map<String, ExecutionTape>) {
    /** Shared entries, in first-use order: a representative tensor each. */
    val shared = ArrayList<Tensor>()
    private val sharedName = HashMap<Pair<String?, Any>, String>()
    /** Per tape: tensor id -> shared name, for the weights. */
    private val weightOf = HashMap<ExecutionTape, HashMap<Int, String>>()
    private val sharedNames = HashSet<String>()

    private fun source(d: TensorData): Any? = when (d) {
        is FloatArrayTensorData -> Same(d.values)
        is HalfTensorData -> Same(d.bytes)
        is HalfBitsTensorData -> Same(d.bits)
        is PackedTensorData -> Same(d.bytes)
        is DenseBytesTensorData -> Same(d.bytes)
        is FileTensorData -> Triple(File(d.path).absolutePath, d.offset, d.length)
        is MappedTensorData, ShapeOnly -> null
    }

    init {
        val localNames = functions.values.flatMap { tape -> tape.tensors.map { it.name } }.toSet()
        for ((fn, tape) in functions) {
            val mine = HashMap<Int, String>()
            for (t in tape.tensors) {
                val src = source(t.data) ?: continue
                val key = (t.path ?: "$fn/${t.name}") to src
                val n = sharedName.getOrPut(key) {
                    var candidate = t.path ?: "$fn.${t.name}"
                    while (candidate in sharedNames || candidate in localNames) candidate += "'"
                    sharedNames.add(candidate)
                    shared.add(t)
                    candidate
                }
                mine[t.id] = n
            }
            weightOf[tape] = mine
        }
    }

    private fun nameIn(tape: ExecutionTape, t: Tensor): String = weightOf.getValue(tape)[t.id] ?: t.name

    /** Locals of each tape: everything that is not a shared weight. */
    private val locals: List<List<Tensor>> = functions.values.map { tape -> tape.tensors.filter { it.id !in weightOf.getValue(tape) } }

    val data: Array<Any?>
    val kinds: IntArray
    val encodings: Array<String?>

    init {
        val all = shared + locals.flatten()
        data = arrayOfNulls(all.size)
        kinds = IntArray(all.size)
        encodings = arrayOfNulls(all.size)
        all.forEachIndexed { i, t -> lend(t.data, i, data, kinds, encodings) }
    }

    fun json(module: String): String {
        val sb = StringBuilder()
        sb.append("{\"format\":\"tapeout-graph/1\",\"name\":").append(Json.quote(module)).append(",\"tensors\":[")
        shared.forEachIndexed { i, t -> if (i > 0) sb.append(','); appendTensorJson(sb, sharedNameOf(t), t) }
        sb.append("],\"functions\":[")
        functions.entries.forEachIndexed { fi, (fn, tape) ->
            if (fi > 0) sb.append(',')
            sb.append("{\"name\":").append(Json.quote(fn)).append(",\"tensors\":[")
            locals[fi].forEachIndexed { i, t -> if (i > 0) sb.append(','); appendTensorJson(sb, t.name, t) }
            sb.append("],")
            appendFunctionBody(sb, tape.ops, tape.outputs) { nameIn(tape, it) }
            sb.append('}')
        }
        return sb.append("]}").toString()
    }

    private fun sharedNameOf(t: Tensor): String = weightOf.getValue(t.tape).getValue(t.id)
}
