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
 *
 * Each tape is first made a [ComputeGraph] ([toComputeGraph], as a single-function export does), so an invalid
 * function fails naming the line of your code that recorded the node, and [ExportResult.keyCollisions] lists
 * the weights of every function that were given another weight's key; [ExportResult.warnings] the checkpoint tensors
 * no function read and the declared parameters nothing bound ([CheckpointReport]). The module is then the functions as those
 * graphs took them: ops recorded on a tape while this runs are not exported. [options] name the device the module
 * is for ([ExportOptions]: the CPU's forms by default, or the portable lowering every IREE backend compiles).
 */
fun exportModule(
    outputDir: File,
    name: String,
    functions: Map<String, ExecutionTape>,
    packedConstants: PackedConstantHandling = PackedConstantHandling.FAIL,
    halfConstants: HalfConstantHandling = HalfConstantHandling.KEEP,
    policy: MaterializationPolicy = MaterializationPolicy.SizeThreshold(),
    maxArchiveBytes: Long = 0,
    options: ExportOptions = ExportOptions(),
): ExportResult {
    require(functions.isNotEmpty()) { "exportModule needs at least one function" }
    require(maxArchiveBytes >= 0) { "maxArchiveBytes must be 0 (one archive) or a positive size, not $maxArchiveBytes" }
    val graphs = functions.mapValues { (_, tape) ->
        tape.toComputeGraph(packedConstants = packedConstants, halfConstants = halfConstants, options = options)
    }
    val m = ModuleTables(functions.mapValues { (_, tape) -> tape.snapshot() })
    // A node index the native side names is one function's tape: the error names the function.
    return nativeExport(m.functions, m.json(name), m.arrays, nativeOptions(packedConstants, halfConstants, options.target, options.tuning), IntArray(0), outputDir, name,
        policy, maxArchiveBytes).copy(keyCollisions = graphs.values.flatMap { it.keyCollisions },
        warnings = checkpointReportOf(functions.values).warnings)
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
private class ModuleTables(val functions: Map<String, TapeSnapshot>) {
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
        val localNames = functions.values.flatMap { s -> s.tensors.map { s.nameOf(it) } }.toSet()
        for ((fn, s) in functions) {
            val mine = HashMap<Int, String>()
            for (t in s.tensors) {
                val src = source(t.data) ?: continue
                val local = s.nameOf(t)
                val key = (t.path ?: "$fn/$local") to src
                val n = sharedName.getOrPut(key) {
                    var candidate = t.path ?: "$fn.$local"
                    while (candidate in sharedNames || candidate in localNames) candidate += "'"
                    sharedNames.add(candidate)
                    shared.add(t)
                    candidate
                }
                mine[t.id] = n
            }
            weightOf[s.tape] = mine
        }
    }

    private fun nameIn(s: TapeSnapshot, t: Tensor): String = weightOf.getValue(s.tape)[t.id] ?: s.nameOf(t)

    /** Locals of each tape: everything that is not a shared weight. */
    private val locals: List<List<Tensor>> = functions.values.map { s -> s.tensors.filter { it.id !in weightOf.getValue(s.tape) } }

    /** The JVM arrays of the shared weights, then of each function's locals: the positions the JSON's tables give. */
    val arrays = Marshalled(shared + locals.flatten())

    fun json(module: String): String {
        val sb = StringBuilder()
        sb.append("{\"format\":\"tapeout-graph/1\",\"name\":").append(Json.quote(module)).append(",\"tensors\":[")
        shared.forEachIndexed { i, t -> if (i > 0) sb.append(','); appendTensorJson(sb, sharedNameOf(t), t) }
        sb.append("],\"functions\":[")
        functions.entries.forEachIndexed { fi, (fn, s) ->
            if (fi > 0) sb.append(',')
            sb.append("{\"name\":").append(Json.quote(fn)).append(",\"tensors\":[")
            locals[fi].forEachIndexed { i, t -> if (i > 0) sb.append(','); appendTensorJson(sb, s.nameOf(t), t) }
            sb.append("],")
            appendFunctionBody(sb, s.ops, s.outputs) { nameIn(s, it) }
            sb.append('}')
        }
        return sb.append("]}").toString()
    }

    private fun sharedNameOf(t: Tensor): String = weightOf.getValue(t.tape).getValue(t.id)
}
