package dev.tapeout

import java.io.File
import kotlin.system.exitProcess

/**
 * Builds a model's tape: the class the Gradle `tapeout { model = "…" }` setting names implements this. It needs a
 * public no-argument constructor. [buildTape] with `args` receives `tapeout { args … }`; by default it ignores
 * them.
 */
interface ModelProvider {
    fun buildTape(): ExecutionTape

    /** The tape for the given arguments (`tapeout { args 'a', 'b' }`); the default calls [buildTape]. */
    fun buildTape(args: List<String>): ExecutionTape = buildTape()
}

/**
 * A model served as several public functions over one set of weights (a language model's `prefill` and
 * `decode`): the class `tapeout { model = "…" }` names may implement this instead of [ModelProvider]; the export
 * is then [exportModule] of its tapes.
 */
interface ModuleProvider {
    /** One tape per function name; weights the tapes share (same array or checkpoint tensor) are stored once. */
    fun buildTapes(args: List<String>): Map<String, ExecutionTape>
}

/**
 * What the Gradle `exportIrpa` task asks of [ExportMain]: a file of properties (`format = tapeout-export/1`) that
 * the plugin's `ExportExchange.Request` writes. A list is `<name>.count` and `<name>.0` … in order.
 */
internal class ExportRequest(
    val model: String,
    val outputDir: String,
    val moduleName: String,
    val scope: String,
    val inlineBelowBytes: Long,
    val packed: PackedConstantHandling,
    val half: HalfConstantHandling,
    val maxArchiveBytes: Long,
    val args: List<String>,
    /** Where [ExportResponse] goes. */
    val response: File,
    /** The device the module is for (`exportTarget`, `tuning`; absent: the CPU's forms, as before they existed). */
    val options: ExportOptions = ExportOptions(),
) {
    companion object {
        const val FORMAT = "tapeout-export/1"

        /** The request in [file]; an [IllegalArgumentException] names what is missing or malformed. */
        fun read(file: File): ExportRequest {
            val p = java.util.Properties()
            file.inputStream().use { p.load(it) }
            require(p.getProperty("format") == FORMAT) { "$file is not a $FORMAT request (format '${p.getProperty("format")}')" }
            fun field(name: String): String = requireNotNull(p.getProperty(name)) { "$file: '$name' is missing" }
            fun long(name: String): Long = requireNotNull(field(name).toLongOrNull()) { "$file: '$name' is not a number" }
            val args = (0 until long("args.count").toInt()).map { field("args.$it") }
            val target = p.getProperty("exportTarget")?.let { id ->
                requireNotNull(ExportTarget.of(id)) {
                    "$file: exportTarget '$id' is none of ${ExportTarget.entries.joinToString { it.id }}"
                }
            } ?: ExportTarget.LLVM_CPU
            val tuning = when (val t = p.getProperty("tuning")) {
                null, "true" -> true
                "false" -> false
                else -> throw IllegalArgumentException("$file: tuning '$t' is neither true nor false")
            }
            return ExportRequest(field("model"), field("outputDir"), field("moduleName"), field("scope"), long("inlineBelowBytes"),
                PackedConstantHandling.valueOf(field("packedConstants").uppercase()),
                HalfConstantHandling.valueOf(field("halfConstants").uppercase()), long("maxArchiveBytes"), args, File(field("response")),
                ExportOptions(target, tuning))
        }
    }
}

/** What [ExportMain] answers the Gradle task: `status` (`ok` or `failed`), `warning.N`, `output.N` (the files
 *  written) and `error.N` (the lines of the failure's message), read by the plugin's `ExportExchange.Response`. */
internal class ExportResponse(private val file: File) {
    val warnings = ArrayList<String>()

    /** The export succeeded and wrote [r]'s files. */
    fun ok(r: ExportResult) = write("ok", listOf(r.mlir, r.signature) + r.archives + listOfNotNull(r.index), emptyList())

    fun failed(lines: List<String>) = write("failed", emptyList(), lines)

    private fun write(status: String, outputs: List<File>, errors: List<String>) {
        val p = java.util.Properties()
        p.setProperty("format", ExportRequest.FORMAT)
        p.setProperty("status", status)
        fun list(name: String, values: List<String>) {
            p.setProperty("$name.count", values.size.toString())
            values.forEachIndexed { i, v -> p.setProperty("$name.$i", v) }
        }
        list("warning", warnings)
        list("output", outputs.map { it.absolutePath })
        list("error", errors)
        val tmp = File(file.path + ".tmp")
        tmp.outputStream().use { p.store(it, "tapeout export response") }
        if (!tmp.renameTo(file)) throw java.io.IOException("cannot rename $tmp to $file")
    }
}

/**
 * The entry point the Gradle `exportIrpa` task runs in a forked JVM: `ExportMain <request file>` ([ExportRequest]).
 * Prints its progress on stdout; warnings (key collisions, checkpoint tensors never read, parameters never bound) and a failure go to the [ExportResponse] file, a failure
 * with exit code 1: the message, and for an exception thrown by the model its class and the model's own top stack
 * frames. Writes `<output dir>/<module name>.inputs`: the files the tape reads (checkpoints, mapped regions) with
 * their sizes and modification times, so the Gradle task reruns when one changes.
 */
object ExportMain {
    /** Where this run answers; null until the request is read (then a failure goes to stderr). */
    private var response: ExportResponse? = null

    private fun fail(lines: List<String>): Nothing {
        val r = response
        if (r != null) r.failed(lines) else for (l in lines) System.err.println("tapeout: error: $l")
        exitProcess(1)
    }

    /** The model's own frames of [e]: the top of its stack down to the call from this class (at most 8). */
    internal fun modelFrames(e: Throwable): List<String> = e.stackTrace
        .takeWhile { it.className != ExportMain::class.java.name }
        .filter { !it.className.startsWith("java.lang.reflect.") && !it.className.startsWith("jdk.internal.") && !it.className.startsWith("sun.reflect.") && it.className != "java.lang.Class" }
        .take(8)
        .map { "  at $it" }

    /** Creates the model class, or says what it must look like. */
    internal fun instantiate(modelClass: String): Any {
        val cls = try {
            Class.forName(modelClass)
        } catch (e: ClassNotFoundException) {
            fail(listOf("model class $modelClass not found on the runtime classpath (tapeout { model = '$modelClass' })"))
        }
        val simple = cls.simpleName
        if (!ModelProvider::class.java.isAssignableFrom(cls) && !ModuleProvider::class.java.isAssignableFrom(cls)) {
            fail(listOf("$modelClass implements neither dev.tapeout.ModelProvider nor dev.tapeout.ModuleProvider"))
        }
        val isObject = try {
            java.lang.reflect.Modifier.isStatic(cls.getDeclaredField("INSTANCE").modifiers) && cls.getDeclaredField("INSTANCE").type == cls
        } catch (_: NoSuchFieldException) {
            false
        }
        if (isObject) {
            fail(listOf("$modelClass is a Kotlin object; tapeout { model } needs a class with a public no-argument constructor " +
                "(write `class $simple : ModelProvider` instead of `object $simple`)"))
        }
        val ctor = cls.constructors.firstOrNull { it.parameterCount == 0 }
            ?: fail(listOf("$modelClass has no public no-argument constructor; tapeout { model } creates the class with one " +
                "(give every constructor parameter a default value, or add `constructor() : this(…)`)"))
        return try {
            ctor.newInstance()
        } catch (e: java.lang.reflect.InvocationTargetException) {
            throw e.targetException
        }
    }

    @JvmStatic
    fun main(argv: Array<String>) {
        if (argv.size != 1) {
            System.err.println("usage: ExportMain <request file> (written by the Gradle exportIrpa task)")
            exitProcess(2)
        }
        val req = try {
            ExportRequest.read(File(argv[0]))
        } catch (e: Exception) {
            fail(listOf("cannot read the export request: ${e.message ?: e}"))
        }
        val out = ExportResponse(req.response).also { response = it }
        val (modelClass, outDir, name, scope) = listOf(req.model, req.outputDir, req.moduleName, req.scope)
        try {
            val t0 = System.nanoTime()
            println("tapeout: building the model ($modelClass)")
            val built = try {
                when (val p = instantiate(modelClass)) {
                    is ModuleProvider -> p.buildTapes(req.args)
                    else -> mapOf("main" to (p as ModelProvider).buildTape(req.args))
                }
            } catch (e: TapeoutException) {
                throw e
            } catch (e: OutOfMemoryError) {
                throw e
            } catch (e: Throwable) {
                // A failure in the model class's static initialisation (a companion object's vals) arrives wrapped.
                val cause = (e as? ExceptionInInitializerError)?.cause ?: e
                val during = if (cause !== e) " (initializing $modelClass)" else ""
                fail(listOf("the model threw ${cause.javaClass.name}${cause.message?.let { ": $it" } ?: ""}$during") + modelFrames(cause))
            }
            if (built.size != 1 || built.keys.single() != "main") {
                val r = exportFunctions(built, outDir, name, scope, req, t0)
                for (k in r.keyCollisions) out.warnings += k.warning
                out.warnings += r.warnings
                out.ok(r)
                return
            }
            val tape = built.getValue("main")
            val graph = tape.toComputeGraph(packedConstants = req.packed, halfConstants = req.half, options = req.options)
            for (k in graph.keyCollisions) out.warnings += k.warning
            val total = graph.constants.sumOf { it.bytes }
            println("tapeout: ${tape.ops.size} ops, ${graph.inputs.size} inputs, ${graph.constants.size} constants (${total} bytes)")
            val policy = MaterializationPolicy.SizeThreshold(req.inlineBelowBytes, scope)
            println("tapeout: exporting to $outDir/$name.mlir and the parameter archive")
            // Progress from a second thread: the exporting thread makes no JVM calls while an array is pinned.
            val reporter = Thread {
                try {
                    while (true) {
                        Thread.sleep(1000)
                        val all = NativeBridge.progressTotal()
                        if (all > 0) println("tapeout: written ${NativeBridge.progressWritten() shr 20} / ${all shr 20} MiB")
                    }
                } catch (_: InterruptedException) {
                }
            }.apply { isDaemon = true; start() }
            val r = try { graph.export(File(outDir), name, policy, req.maxArchiveBytes) } finally { reporter.interrupt() }
            writeInputs(File(outDir, "$name.inputs"), tape)
            val secs = (System.nanoTime() - t0) / 1e9
            if (r.index == null) {
                println("tapeout: wrote ${r.irpa} (${r.externals} parameters, ${r.irpaBytes} bytes) in %.2f s".format(secs))
            } else {
                for (a in r.archives) println("tapeout: wrote $a (${a.length()} bytes)")
                println("tapeout: wrote ${r.index} (${r.externals} parameters in ${r.archives.size} archives, ${r.irpaBytes} bytes) in %.2f s".format(secs))
            }
            println("tapeout: wrote ${r.mlir} (${r.mlirBytes} bytes) and ${r.signature.name}")
            println("tapeout: IREE loads the parameters with: ${r.parametersFlags.joinToString(" ")}")
            out.warnings += r.warnings
            out.ok(r)
        } catch (e: TapeoutException) {
            fail(listOf(e.describe(::gradleWording)))
        } catch (e: OutOfMemoryError) {
            val heap = Runtime.getRuntime().maxMemory() shr 20
            val setting = System.getProperty("tapeout.maxHeapSize") ?: "${heap}m"
            fail(listOf("the export JVM ran out of heap (tapeout { maxHeapSize = '$setting' }: $heap MiB usable): raise maxHeapSize, " +
                "or keep the weights off the heap (SafeTensors.open / Gguf.open); ${e.message ?: "OutOfMemoryError"}") + modelFrames(e))
        } catch (e: Exception) {
            fail(listOf(e.message ?: e.toString()))
        }
    }

    /** The export of a [ModuleProvider]'s tapes as one module. */
    private fun exportFunctions(tapes: Map<String, ExecutionTape>, outDir: String, name: String, scope: String,
                                req: ExportRequest, t0: Long): ExportResult {
        println("tapeout: functions ${tapes.keys.joinToString()}: ${tapes.values.sumOf { it.ops.size }} ops")
        println("tapeout: exporting to $outDir/$name.mlir and the parameter archive")
        val r = exportModule(File(outDir), name, tapes, req.packed, req.half,
            MaterializationPolicy.SizeThreshold(req.inlineBelowBytes, scope), req.maxArchiveBytes, req.options)
        writeInputs(File(outDir, "$name.inputs"), tapes.values.toList())
        println("tapeout: wrote ${r.irpa} (${r.externals} parameters, ${r.irpaBytes} bytes) in %.2f s".format((System.nanoTime() - t0) / 1e9))
        println("tapeout: wrote ${r.mlir} (${r.mlirBytes} bytes) and ${r.signature.name}")
        println("tapeout: IREE loads the parameters with: ${r.parametersFlags.joinToString(" ")}")
        return r
    }

    /** `<size> <mtime ms> <path>` per file the tape reads, for the Gradle task's up-to-date check. */
    private fun writeInputs(file: File, tape: ExecutionTape) = writeInputs(file, listOf(tape))

    private fun writeInputs(file: File, tapes: List<ExecutionTape>) {
        val paths = tapes.flatMap { it.tensors }.mapNotNull { t ->
            when (val d = t.data) { is FileTensorData -> d.path; is MappedTensorData -> d.path; else -> null }
        }.map { File(it).absoluteFile }.distinct().sorted()
        val tmp = File(file.path + ".tmp")
        tmp.writeText(paths.joinToString("") { "${it.length()} ${it.lastModified()} ${it.path}\n" })
        if (!tmp.renameTo(file)) throw java.io.IOException("cannot rename $tmp to $file")
    }
}

/** A remedy in the terms of the Gradle `tapeout { … }` extension, whose task runs [ExportMain]. */
internal fun gradleWording(remedy: Remedy, bytes: Long): String = when (remedy) {
    Remedy.DEQUANTIZE -> "; to dequantize, set tapeout { packedConstants = 'DEQUANTIZE' }"
    Remedy.EXTERNAL_PARAMETER -> "; set tapeout { inlineBelowBytes = $bytes } or less"
    Remedy.DECLARE_OUTPUTS -> "; mark the tensors the model returns with tape.output(…) in buildTape()"
    Remedy.ALLOW_FILES_OUTSIDE_GRAPH_DIR -> "; move the file into the graph's directory"
    Remedy.BLOCK_ROW_CODES -> "; keep the codes in block rows: set tapeout { packedConstants = 'KEEP' }, not 'KEEP_ROW_BANDS'"
}
