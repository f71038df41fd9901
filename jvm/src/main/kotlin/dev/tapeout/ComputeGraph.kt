package dev.tapeout

import java.io.File

/** What to do with frozen weights stored as packed (quantized) blocks. */
enum class PackedConstantHandling {
    /** Refuse them with [PackedConstantException] (default): never demote a weight to a function argument. */
    FAIL,
    /** Decode them to f32 while exporting, one chunk of blocks at a time. */
    DEQUANTIZE,
    /** Keep them packed: planes of integer codes and per-block scales (`<key>.qs`, `<key>.d`, …) that the module
     *  contracts per block, so IREE never materializes the f32 weight for a linear layer or an embedding. */
    KEEP,
    /** As [KEEP], with the codes of Q8_0 and Q4_0 weights in row bands of 32 rows (`[N / 32, Kb, 32, 32]`) instead of
     *  block rows (`[Kb, 32, N]`), for every such weight no op gathers rows of: the same numbers, another walk through
     *  memory for IREE's code. Which decodes faster depends on the CPU the module is compiled for: row bands on some
     *  AVX-512 CPUs, block rows on others (docs/performance.md#weights-in-iree). Every product reads the stored bands
     *  (a prefill's too): the codes stay mapped in place, as in block rows. A weight one function of a module gathers
     *  rows of and another only multiplies is refused. A form of the CPU's ([ExportTarget.LLVM_CPU] with tuning on):
     *  refused for any other [ExportOptions]. */
    KEEP_ROW_BANDS,
}

/** The device an export is for, and whether its own forms are written: [target] picks the device pass that joins the
 *  portable lowering (only [ExportTarget.LLVM_CPU] has one today: row bands, a prefill's few-rows forms, a tuning
 *  spec); [tuning] `false` writes the portable lowering alone, whatever the target, with no tuning spec. */
data class ExportOptions(val target: ExportTarget = ExportTarget.LLVM_CPU, val tuning: Boolean = true)

/** What to do with frozen f16/bf16 weights. */
enum class HalfConstantHandling {
    /** Store their own 16-bit bytes (default): the module converts them to f32 where they are used. No conversion
     *  on export, half the archive of [WIDEN], and IREE fuses the convert into the consumer. */
    KEEP,
    /** Widen them to f32 parameters while exporting, one chunk at a time (twice the bytes). */
    WIDEN,
}

/** The native side's option bits ([NativeOption]) for these settings. */
internal fun nativeOptions(
    packed: PackedConstantHandling,
    half: HalfConstantHandling,
    target: ExportTarget = ExportTarget.LLVM_CPU,
    tuning: Boolean = true,
): Int =
    when (packed) {
        PackedConstantHandling.DEQUANTIZE -> NativeOption.DEQUANTIZE_PACKED
        PackedConstantHandling.KEEP -> NativeOption.KEEP_PACKED
        PackedConstantHandling.KEEP_ROW_BANDS -> NativeOption.KEEP_PACKED or NativeOption.ROW_BAND_CODES
        PackedConstantHandling.FAIL -> 0
    } or (if (half == HalfConstantHandling.WIDEN) NativeOption.WIDEN_HALF else 0) or
        (if (tuning) 0 else NativeOption.NO_TUNING) or (target.code shl NativeOption.TARGET_SHIFT)

/** Which constants are written inline in the module and which become external parameters. */
sealed class MaterializationPolicy {
    /** Every constant inline (exact hex); above 2 GiB this is a [ConstantTooLargeException]. */
    object InlineAlways : MaterializationPolicy()

    /** Every (non-scalar) constant external, in [scope]. */
    data class ExternalAlways(val scope: String = "model") : MaterializationPolicy()

    /** External when at least [bytes] bytes. */
    data class SizeThreshold(val bytes: Long = 4096, val scope: String = "model") : MaterializationPolicy()

    internal val scopeName: String get() = when (this) { is ExternalAlways -> scope; is SizeThreshold -> scope; InlineAlways -> "model" }
    internal val inlineBelow: Long get() = when (this) { is ExternalAlways -> 0; is SizeThreshold -> bytes; InlineAlways -> -1 }
}

/** A frozen value of the graph. [kind]: `borrowed_f32`, `kept_16bit` (stored as its own bf16/f16 bytes), `widened`,
 *  `dequantized`, `raw`, `transposed` (written `[in, out]` because the program only uses it transposed), or
 *  `packed_plane` (one plane of a weight kept packed), or `words` (a narrow constant held in 32-bit words for a
 *  device that stores only those: `ExportTarget.VULKAN`). */
data class ConstantInfo(val name: String, val key: String, val bytes: Long, val kind: String)

/** A weight that asked for key [wanted] and got [assigned] because another weight had it. */
data class KeyCollision(val tensor: String, val wanted: String, val assigned: String) {
    /** The warning an export prints for it (the same for one function and for [exportModule]). */
    val warning: String
        get() = "two weights have the key '$wanted'; the second ('$tensor') was renamed '$assigned'. " +
            "Give each weight its own path (a checkpoint loaded by key will not find '$assigned')"
}

/**
 * Runs a native call on this snapshot's graph; a [TapeoutException] it throws comes back naming the lines of your
 * code that recorded the nodes and the tensor it is about ([TapeoutException.nodes]: `node 3` is the fourth op).
 * Names are looked up as the snapshot has them, which is how the native side saw them.
 */
internal fun <T> TapeSnapshot.located(call: () -> T): T = try {
    call()
} catch (e: TapeoutException) {
    val sites = LinkedHashSet<String>()
    val byName = tensors.associateBy { nameOf(it) }
    fun tensorSite(key: String) {
        val t = byName[key] ?: tensors.firstOrNull { it.path == key }
        t?.site?.let { sites += "'${t.path ?: nameOf(t)}' was recorded at ${siteText(it)}" }
    }
    for (n in e.nodes) {
        val op = ops.getOrNull(n) ?: continue
        op.site?.let { sites += "node $n (${op.op}) was recorded at ${siteText(it)}" }
    }
    // The tensor a node error's message names is the node's first result.
    for (n in e.nodes) ops.getOrNull(n)?.outputs?.firstOrNull()?.let { tensorSite(it.path ?: nameOf(it)) }
    e.tensor?.let(::tensorSite)
    if (sites.isEmpty()) throw e
    throw e.withDetail(sites.joinToString("; ", " (", ")"))
}

/**
 * What an export wrote. [archives] holds `<name>.irpa`, or the shards `<name>-0000k-of-0000n.irpa` of a set whose
 * [index] is `<name>.irpa.index.json`; [irpa] is the only (or first) archive and [irpaBytes] their total size.
 * [parametersFlags] are the `--parameters=SCOPE=FILE` flags IREE's tools need to load them all.
 * [pins] counts critical pins of JVM arrays; [copies] how many of them were copies (0 on HotSpot).
 * [keyCollisions] are the weights of every exported function that were given another weight's key.
 * [signature] is `<name>.signature.json` beside the module: read it with [ModuleSignature.read].
 * [warnings] are what the export has to say that is not an error (a checkpoint tensor the model never read, …).
 * [tuningSpec] is `<name>.tuning.mlir` beside the module when it has products IREE's CPU backend computes faster
 * with it (a weight kept packed in 32-value blocks, every format but Q6_K; a bf16 or f16 weight in row bands)
 * (`--iree-codegen-tuning-spec-path`; `IreeCompiler` and Gradle's `compileIree` pass it), else null.
 */
data class ExportResult(
    val mlir: File,
    val irpa: File,
    val mlirBytes: Long,
    val irpaBytes: Long,
    val externals: Int,
    val pins: Long,
    val copies: Long,
    val archives: List<File> = listOf(irpa),
    val index: File? = null,
    val parametersFlags: List<String> = emptyList(),
    val keyCollisions: List<KeyCollision> = emptyList(),
    val signature: File = File(mlir.parentFile, mlir.name.removeSuffix(".mlir") + ".signature.json"),
    val warnings: List<String> = emptyList(),
    val tuningSpec: File? = null,
)

/**
 * A validated graph made from an [ExecutionTape]: runtime [inputs] and frozen [constants] (with their stable
 * parameter keys). Export it with [export] (`.mlir` + `.irpa`) or look at the module with [toStableHlo].
 *
 * The graph is the tape as it was when [toComputeGraph] made it: ops, outputs and names recorded on the tape
 * afterwards are not part of it (make another graph for them). Its constants still borrow the tape's arrays,
 * nothing was copied, so the values an array holds when [export] runs are the values written.
 */
class ComputeGraph internal constructor(
    private val snapshot: TapeSnapshot,
    private val options: Int,
    private val forced: IntArray,
    summary: GraphSummary,
) {
    val inputs: List<String> = summary.inputs
    val constants: List<ConstantInfo> = summary.constants

    /** Weights whose key another weight already had, so they got `<key>.1`, `<key>.2`, …: usually two weights
     *  given one path by mistake. */
    val keyCollisions: List<KeyCollision> = summary.keyCollisions

    /** What the tape made of its checkpoints and its modules' parameters when this graph was made: tensors never
     *  read, parameters nothing bound. [export] puts its warnings in [ExportResult.warnings]. */
    val checkpointReport: CheckpointReport = checkpointReportOf(listOf(snapshot.tape))

    /**
     * Writes `<outputDir>/<name>.mlir` and `<outputDir>/<name>.irpa`. With [maxArchiveBytes] > 0 the parameters
     * are split over archives of at most that many bytes each (`<name>-00001-of-0000K.irpa` plus
     * `<name>.irpa.index.json`); no parameter is split, and one larger than the limit gets a file of its own.
     */
    fun export(
        outputDir: File,
        name: String = "model",
        policy: MaterializationPolicy = MaterializationPolicy.SizeThreshold(),
        maxArchiveBytes: Long = 0,
    ): ExportResult {
        require(maxArchiveBytes >= 0) { "maxArchiveBytes must be 0 (one archive) or a positive size, not $maxArchiveBytes" }
        val a = Marshalled(snapshot.tensors)
        return nativeExport(mapOf(name to snapshot), snapshot.toGraphJson(name), a, options, forced, outputDir, name, policy, maxArchiveBytes)
            .copy(keyCollisions = keyCollisions, warnings = checkpointReport.warnings)
    }

    /** The StableHLO module text. */
    fun toStableHlo(policy: MaterializationPolicy = MaterializationPolicy.SizeThreshold(), name: String = "model"): String {
        val a = Marshalled(snapshot.tensors)
        return snapshot.located {
            NativeBridge.toStableHlo(snapshot.toGraphJson(name), a.data, a.kinds, a.encodings, options,
                forced, name, policy.scopeName, policy.inlineBelow)
        }
    }
}

/**
 * The one export call of both [ComputeGraph.export] and [exportModule]: [json] with its JVM arrays [a] through
 * the native library, a failure naming the lines of the tape that recorded what it names: [snapshots] by function
 * name (the failure says which), or the only one.
 */
internal fun nativeExport(snapshots: Map<String, TapeSnapshot>, json: String, a: Marshalled, options: Int, forced: IntArray, outputDir: File,
                          name: String, policy: MaterializationPolicy, maxArchiveBytes: Long): ExportResult {
    val call = {
        NativeBridge.export(json, a.data, a.kinds, a.encodings, options, forced, outputDir.path, name,
            policy.scopeName, policy.inlineBelow, maxArchiveBytes)
    }
    val result = try {
        call()
    } catch (e: TapeoutException) {
        val snapshot = e.function?.let { snapshots[it] } ?: snapshots.values.singleOrNull() ?: throw e
        snapshot.located { throw e }
    }
    return exportResult(result)
}

/** The JVM arrays of [tensors] (a tape's, or a module's in its table order), by reference, with the kind codes
 *  the native side expects. */
internal class Marshalled(tensors: List<Tensor>) {
    constructor(tape: ExecutionTape) : this(tape.tensors)

    val data: Array<Any?> = arrayOfNulls(tensors.size)
    val kinds = IntArray(tensors.size)
    val encodings: Array<String?> = arrayOfNulls(tensors.size)

    init {
        tensors.forEachIndexed { i, t -> lend(t.data, i, data, kinds, encodings) }
    }
}

/** Puts [d]'s JVM array, if any, at slot [i] with the kind code the native side expects (and its encoding). */
internal fun lend(d: TensorData, i: Int, data: Array<Any?>, kinds: IntArray, encodings: Array<String?>) {
    when (d) {
        is FloatArrayTensorData -> { data[i] = d.values; kinds[i] = NativeKind.F32 }
        is HalfTensorData -> { data[i] = d.bytes; kinds[i] = NativeKind.HALF_BYTES }
        is HalfBitsTensorData -> { data[i] = d.bits; kinds[i] = NativeKind.HALF_SHORTS }
        is PackedTensorData -> { data[i] = d.bytes; kinds[i] = NativeKind.PACKED; encodings[i] = d.encoding }
        is DenseBytesTensorData -> { data[i] = d.bytes; kinds[i] = NativeKind.DENSE }
        is MappedTensorData, is FileTensorData, ShapeOnly -> {}
    }
}

/**
 * Validates the tape and decides, for every tensor no op produces, whether it is a runtime input or a frozen
 * constant: forced inputs and dynamic shapes are inputs; f32 arrays are borrowed; f16/bf16 are kept as stored
 * ([HalfConstantHandling.KEEP]) or widened lazily; packed blocks fail ([PackedConstantHandling.FAIL]) or are
 * dequantized lazily; mapped regions are inputs.
 *
 * With [synthesizeExternalInputs] `false`, a tensor that becomes an input without having been declared with
 * [ExecutionTape.input] is an error instead. [options] name the device the module is for ([ExportOptions]); codes in
 * row bands ([PackedConstantHandling.KEEP_ROW_BANDS]) are a form of the CPU's and refused for any other.
 *
 * The graph is a snapshot of the tape: ops and outputs recorded after this call are not in it.
 */
fun ExecutionTape.toComputeGraph(
    synthesizeExternalInputs: Boolean = true,
    inputTensorIds: Set<Int> = emptySet(),
    packedConstants: PackedConstantHandling = PackedConstantHandling.FAIL,
    halfConstants: HalfConstantHandling = HalfConstantHandling.KEEP,
    options: ExportOptions = ExportOptions(),
): ComputeGraph {
    val snapshot = snapshot()
    val a = Marshalled(snapshot.tensors)
    val forced = inputTensorIds.toIntArray()
    val bits = nativeOptions(packedConstants, halfConstants, options.target, options.tuning)
    val json = snapshot.located { NativeBridge.finalize(snapshot.toGraphJson("model"), a.data, a.kinds, a.encodings, bits, forced) }
    val graph = ComputeGraph(snapshot, bits, forced, GraphSummary.parse(json))
    if (!synthesizeExternalInputs) {
        val declared = snapshot.tensors.filter { it.id in inputIds || it.id in inputTensorIds }.map { snapshot.nameOf(it) }.toSet()
        val synthesized = graph.inputs.filter { it !in declared }
        if (synthesized.isNotEmpty()) {
            throw GraphValidationException("tensors $synthesized would become function arguments but were not declared with input(); " +
                "declare them, give them data, or pass synthesizeExternalInputs = true")
        }
    }
    return graph
}
