package dev.tapeout.iree

import dev.tapeout.DYNAMIC
import dev.tapeout.ExecutionTape
import dev.tapeout.MaterializationPolicy
import dev.tapeout.toComputeGraph
import java.io.File
import kotlin.system.exitProcess

/**
 * `MemoryProof <work dir>` (`gradle :jvm-iree:memoryProof`, in scripts/test): are parameters file-backed when a
 * Kotlin process serves them? Exports `y = x Wᵀ` with a 4096 × 4096 f32 weight (a 64 MiB archive entry) with the core
 * library, compiles it, then reads /proc/self/status RssFile and RssAnon before and after loading the module with its
 * archive and calling it (the matmul reads every page of the weight). Prints the figures; fails when anonymous
 * memory grew by half the archive or more (the parameters were copied), when file-backed memory did not grow by at
 * least half of it (the call did not read the mapping), or when the result is wrong. Not a timed test.
 */
object MemoryProof {
    private const val N = 4096

    private fun status(field: String): Long =
        File("/proc/self/status").readLines().first { it.startsWith("$field:") }.split(Regex("\\s+"))[1].toLong() * 1024

    /** Weight element (o, i): exact in f32. */
    private fun w(o: Int, i: Int): Float = ((o * 31 + i * 7) % 1021 - 510) / 64f

    @JvmStatic
    fun main(args: Array<String>) {
        val work = File(args[0]).also { it.deleteRecursively(); it.mkdirs() }
        try {
            val exported = run {
                val t = ExecutionTape()
                val weight = FloatArray(N * N) { w(it / N, it % N) }
                t.output("y", t.linear(t.input("x", longArrayOf(DYNAMIC, N.toLong())), t.weight("big.weight", weight, N, N)))
                t.toComputeGraph().export(work, "big", MaterializationPolicy.ExternalAlways())
            }
            val vmfb = IreeCompiler.find(File(System.getProperty("tapeout.repo") ?: ".")).compile(exported.mlir, IreeTarget.cpu("generic"))
            check(exported.irpaBytes >= 64L shl 20) { "the archive is ${exported.irpaBytes} bytes, not >= 64 MiB" }
            System.gc()
            IreeInstance().use { instance ->
                instance.device("local-task", 2).use { device ->
                    val (file0, anon0) = status("RssFile") to status("RssAnon")
                    IreeModule.load(device, vmfb, listOf(IreeParameters.archive(exported.irpa))).use { module ->
                        val (file1, anon1) = status("RssFile") to status("RssAnon")
                        // Rows e_3 and e_4095: y = x Wᵀ picks column i of W, W[o][i] for every o.
                        val x = FloatArray(2 * N).also { it[3] = 1f; it[N + N - 1] = 1f }
                        val y = module.value(x, 2, N.toLong()).use { v -> module.call("main", v).single().use { it.toFloatArray() } }
                        val (file2, anon2) = status("RssFile") to status("RssAnon")
                        for (o in 0 until N) {
                            check(y[o] == w(o, 3) && y[N + o] == w(o, N - 1)) { "y[$o] = ${y[o]}, ${y[N + o]}; want ${w(o, 3)}, ${w(o, N - 1)}" }
                        }
                        val mib = { b: Long -> "%.1f MiB".format(b / 1048576.0) }
                        println("memory-proof: archive ${mib(exported.irpaBytes)} (${exported.irpa.name}); " +
                            "before load RssFile ${mib(file0)} RssAnon ${mib(anon0)}; after load RssFile ${mib(file1)} RssAnon ${mib(anon1)}; " +
                            "after call RssFile ${mib(file2)} RssAnon ${mib(anon2)}")
                        println("memory-proof: growth from before load to after call: RssFile +${mib(file2 - file0)}, RssAnon +${mib(anon2 - anon0)}")
                        check(anon2 - anon0 < exported.irpaBytes / 2) {
                            "RssAnon grew by ${mib(anon2 - anon0)} for a ${mib(exported.irpaBytes)} archive: the parameters were copied"
                        }
                        check(file2 - file0 >= exported.irpaBytes / 2) {
                            "RssFile grew by only ${mib(file2 - file0)}: the call did not read the weight from the mapped archive"
                        }
                    }
                }
            }
        } catch (e: Throwable) {
            System.err.println("memory-proof: FAILED: $e")
            exitProcess(1)
        } finally {
            work.deleteRecursively()
        }
    }
}
