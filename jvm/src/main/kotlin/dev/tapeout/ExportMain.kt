package dev.tapeout

import java.io.File
import kotlin.system.exitProcess

/** Builds a model's tape: the class the Gradle `tapeout { model = "…" }` setting names implements this. */
interface ModelProvider {
    fun buildTape(): ExecutionTape
}

/**
 * The entry point the Gradle `exportIrpa` task runs in a forked JVM:
 * `ExportMain <model class> <output dir> <module name> <scope> <inline below bytes> <FAIL|DEQUANTIZE|KEEP> [KEEP|WIDEN]
 * [max archive bytes]` (0: one archive).
 * Prints what it does on stdout; a failure is one line `tapeout: error: <message>` on stderr and exit code 1.
 */
object ExportMain {
    @JvmStatic
    fun main(args: Array<String>) {
        if (args.size !in 6..8) {
            System.err.println("usage: ExportMain <model class> <output dir> <module name> <scope> <inline below bytes> <FAIL|DEQUANTIZE|KEEP> [KEEP|WIDEN] [max archive bytes]")
            exitProcess(2)
        }
        val (modelClass, outDir, name, scope) = args
        try {
            val provider = Class.forName(modelClass).getDeclaredConstructor().newInstance() as? ModelProvider
                ?: throw TapeoutException("$modelClass does not implement dev.tapeout.ModelProvider")
            val packed = PackedConstantHandling.valueOf(args[5].uppercase())
            val half = HalfConstantHandling.valueOf(args.getOrElse(6) { "KEEP" }.uppercase())
            val maxArchiveBytes = args.getOrElse(7) { "0" }.toLong()
            val t0 = System.nanoTime()
            val tape = provider.buildTape()
            val graph = tape.toComputeGraph(packedConstants = packed, halfConstants = half)
            val total = graph.constants.sumOf { it.bytes }
            println("tapeout: ${tape.ops.size} ops, ${graph.inputs.size} inputs, ${graph.constants.size} constants (${total} bytes)")
            val policy = MaterializationPolicy.SizeThreshold(args[4].toLong(), scope)
            // Progress from a second thread: the exporting thread makes no JVM calls while an array is pinned.
            val reporter = Thread {
                try {
                    while (true) {
                        Thread.sleep(1000)
                        val total = NativeBridge.progressTotal()
                        if (total > 0) println("tapeout: written ${NativeBridge.progressWritten() shr 20} / ${total shr 20} MiB")
                    }
                } catch (_: InterruptedException) {
                }
            }.apply { isDaemon = true; start() }
            val r = try { graph.export(File(outDir), name, policy, maxArchiveBytes) } finally { reporter.interrupt() }
            val secs = (System.nanoTime() - t0) / 1e9
            if (r.index == null) {
                println("tapeout: wrote ${r.irpa} (${r.externals} parameters, ${r.irpaBytes} bytes) in %.2f s".format(secs))
            } else {
                for (a in r.archives) println("tapeout: wrote $a (${a.length()} bytes)")
                println("tapeout: wrote ${r.index} (${r.externals} parameters in ${r.archives.size} archives, ${r.irpaBytes} bytes) in %.2f s".format(secs))
            }
            println("tapeout: wrote ${r.mlir} (${r.mlirBytes} bytes)")
            println("tapeout: IREE loads the parameters with: ${r.parametersFlags.joinToString(" ")}")
        } catch (e: TapeoutException) {
            System.err.println("tapeout: error: ${e.describe(::gradleWording)}")
            exitProcess(1)
        } catch (e: ClassNotFoundException) {
            System.err.println("tapeout: error: model class $modelClass not found on the runtime classpath")
            exitProcess(1)
        } catch (e: Exception) {
            System.err.println("tapeout: error: ${e.message ?: e.toString()}")
            exitProcess(1)
        }
    }
}

/** A remedy in the terms of the Gradle `tapeout { … }` extension, whose task runs [ExportMain]. */
internal fun gradleWording(remedy: Remedy, bytes: Long): String = when (remedy) {
    Remedy.DEQUANTIZE -> "; to dequantize, set tapeout { packedConstants = 'DEQUANTIZE' }"
    Remedy.EXTERNAL_PARAMETER -> "; set tapeout { inlineBelowBytes = $bytes } or less"
    Remedy.DECLARE_OUTPUTS -> "; mark the tensors the model returns with tape.output(…) in buildTape()"
}
