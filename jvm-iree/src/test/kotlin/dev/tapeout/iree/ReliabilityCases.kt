package dev.tapeout.iree

import java.io.File
import java.io.RandomAccessFile
import java.nio.ByteBuffer
import java.nio.channels.FileChannel

/**
 * `ReliabilityCases <case> <args…>`: one case of the serving matrix (docs/reliability.md), run in a JVM of its own
 * by [IreeReliabilityTest] so that a crash fails that case instead of the suite. A case that ends as it must prints
 * `OK <detail>` and exits 0; a leak case prints `RSS_GROWTH_KB <n>` (VmRSS after the loop minus after its warm-up);
 * anything else exits 1 with what happened.
 */
object ReliabilityCases {
    @JvmStatic
    fun main(args: Array<String>) {
        val case = args[0]
        try {
            IreeInstance().use { instance ->
                instance.device("local-task", workers = 2).use { device -> run(case, args.drop(1), device) }
            }
        } catch (e: Throwable) {
            println("FAILED $case: ${e.javaClass.simpleName}: ${e.message}")
            System.exit(1)
        }
    }

    private fun run(case: String, args: List<String>, device: IreeDevice) {
        when (case) {
            "mapped-value-truncated" -> mappedTruncated(device, File(args[0]), File(args[1]), write = false)
            "mapped-read-truncated" -> mappedTruncated(device, File(args[0]), File(args[1]), write = true)
            "read-only-output" -> IreeModule.load(device, File(args[0])).use { m ->
                val y = m.call("main", m.value(FloatArray(4), 4))[0]
                val readOnly = ByteBuffer.allocateDirect(16).asReadOnlyBuffer()
                expect<IreeUsageException>("a read-only buffer as output") { y.readInto(readOnly) }
            }
            // Before: SIGILL in the call. The module's CPU code needs features this CPU lacks: refused at load.
            "cpu-features" -> expect<IreeMissingCpuFeaturesException>("a module for another CPU") {
                IreeModule.load(device, File(args[0])).use { m -> m.call("main", m.value(FloatArray(4), 4)) }
            }
            // Every truncation of a module (IREE's verifier crashed on some damaged ones): a typed exception, or, where
            // only the archive's trailer (the ZIP directory after the module) is cut, a module that still doubles.
            "truncated-vmfb" -> {
                val vmfb = File(args[0]).readBytes()
                var served = 0
                for (n in 0 until vmfb.size) {
                    try {
                        IreeModule.load(device, vmfb.copyOf(n)).use { m ->
                            val got = m.call("main", m.value(floatArrayOf(1f, -2f, 3f, 0.5f), 4)).use { it[0].toFloatArray() }
                            check(got.contentEquals(floatArrayOf(2f, -4f, 6f, 1f))) { "the first $n bytes served ${got.contentToString()}" }
                        }
                        served++
                    } catch (_: IreeNotAModuleException) {
                    }
                }
                println("OK ${vmfb.size} truncations: ${vmfb.size - served} refused, $served (trailer cut) served right")
            }
            // Before: SIGSEGV (a [2^24] + b [1], the module reading b at a's extent); at small sizes wrong numbers.
            "unequal-dims" -> IreeModule.load(device, File(args[0])).use { m ->
                val big = ByteBuffer.allocateDirect(4 shl 24).order(java.nio.ByteOrder.LITTLE_ENDIAN)
                m.value(big, IreeDType.F32, 1L shl 24).use { a ->
                    m.value(floatArrayOf(1f), 1).use { b ->
                        expect<IreeUnequalDimsException>("a [2^24] + b [1]") { m.call("main", a, b) }
                    }
                }
                m.value(floatArrayOf(1f, 2f, 3f), 3).use { a ->
                    m.value(floatArrayOf(10f, 20f), 2).use { b ->
                        expect<IreeUnequalDimsException>("a [3] + b [2]") { m.call("main", a, b) }
                    }
                    m.value(floatArrayOf(10f, 20f, 30f), 3).use { b ->
                        val got = m.call("main", a, b).use { it[0].toFloatArray() }
                        check(got.contentEquals(floatArrayOf(11f, 22f, 33f))) { "a [3] + b [3] gave ${got.contentToString()}" }
                    }
                }
            }
            "leak-results" -> IreeModule.load(device, File(args[0])).use { m ->
                val x = m.value(FloatArray(4) { it.toFloat() }, 4)
                // Every result is left for the cleaner: the loop may not grow without bound.
                leak(args[1].toInt()) { m.call("main", x) }
                println("FORGOTTEN ${IreeCleaner.forgotten.get()}")
            }
            "leak-refused-load" -> {
                val vmfb = File(args[0]).readBytes()
                val garbage = ByteArray(64 shl 10) { (it * 31).toByte() }
                val cut = vmfb.copyOf(vmfb.size * 3 / 4)
                leak(args[1].toInt()) { i ->
                    val bytes = if (i % 2 == 0) garbage else cut
                    expect<IreeNotAModuleException>("refused bytes") { IreeModule.load(device, bytes) }
                }
            }
            "leak-load-close" -> {
                val vmfb = File(args[0]).readBytes()
                leak(args[1].toInt()) { IreeModule.load(device, vmfb).close() }
            }
            "leak-parameter-files" -> {
                val vmfb = File(args[0]).readBytes()
                val files = IreeParameters.set(File(args[1]))
                check(files.size >= 20) { "${files.size} parameter files; the case needs 20 or more" }
                leak(args[2].toInt()) { IreeModule.load(device, vmfb, files).close() }
            }
            else -> throw IllegalArgumentException("no case '$case'")
        }
    }

    /** A value made from (or read into) a mapping of `data` after the file was truncated to nothing. */
    private fun mappedTruncated(device: IreeDevice, vmfb: File, data: File, write: Boolean) {
        data.writeBytes(ByteArray(16))
        RandomAccessFile(data, "rw").use { file ->
            val mode = if (write) FileChannel.MapMode.READ_WRITE else FileChannel.MapMode.READ_ONLY
            val mapped = file.channel.map(mode, 0, 16)
            file.setLength(0)
            IreeModule.load(device, vmfb).use { m ->
                if (write) {
                    val y = m.call("main", m.value(FloatArray(4), 4))[0]
                    expect<IreeUsageException>("reading into a truncated mapping") { y.readInto(mapped) }
                } else {
                    expect<IreeUsageException>("a value from a truncated mapping") { m.value(mapped, IreeDType.F32, 4) }
                }
            }
        }
    }

    /** Runs `step` `n` times after a warm-up of a tenth as many, and prints VmRSS's growth over the `n`. */
    private fun leak(n: Int, step: (Int) -> Unit) {
        repeat(maxOf(1, n / 10)) { step(it) }
        System.gc()
        val before = rssKb()
        repeat(n) { step(it) }
        println("RSS_GROWTH_KB ${rssKb() - before}")
    }

    private fun rssKb(): Long =
        File("/proc/self/status").readLines().first { it.startsWith("VmRSS:") }.split(Regex("\\s+"))[1].toLong()

    private inline fun <reified T : IreeException> expect(what: String, block: () -> Unit) {
        try {
            block()
        } catch (e: IreeException) {
            if (e !is T) throw IllegalStateException("$what: ${e.javaClass.simpleName} instead of ${T::class.simpleName}: ${e.message}")
            println("OK $what: ${e.javaClass.simpleName}: ${e.message}")
            return
        }
        throw IllegalStateException("$what: no exception")
    }
}
