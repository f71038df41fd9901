package dev.tapeout.examples

import dev.tapeout.iree.IreeInstance
import dev.tapeout.iree.IreeModule
import dev.tapeout.iree.IreeParameters
import dev.tapeout.iree.IreeValue
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder

/**
 * `ServeBench <vmfb> <irpa> <inputs dir> <repeats> <workers>` (tests/bench/jvm_serving.py runs it): one decode step
 * called from Kotlin, `repeats` times on the same device-resident arguments (`<inputs dir>/<argument name>.npy`,
 * uploaded once), each call reading the logits back to the host. Prints one JSON line: the median step time, the
 * first logits, and this process's memory (/proc/self/status) at JVM start, while serving (the module loaded,
 * every parameter read) and after closing everything.
 */
object ServeBench {
    @JvmStatic
    fun main(args: Array<String>) {
        val start = status()
        val (vmfb, irpa, inputsDir) = args
        val repeats = args[3].toInt()
        val workers = args[4].toInt()
        val times = DoubleArray(repeats)
        var head = FloatArray(0)
        var serving = emptyMap<String, Long>()
        IreeInstance().use { instance ->
            instance.device("local-task", workers = workers).use { device ->
                // The benchmark waits under SCHED_BATCH, as serve_bench does (IreeDevice.batchWaits: off by default).
                device.batchWaits = true
                IreeModule.load(device, File(vmfb), listOf(IreeParameters.archive(File(irpa)))).use { module ->
                    val decode = module.function("decode")
                    val inputs = decode.inputs.map { p -> readNpy(module, File(inputsDir, "${p.name}.npy")) }
                    fun step(): FloatArray {
                        return decode.call(*inputs.toTypedArray()).use { out -> out[0].toFloatArray() }
                    }
                    repeat(5) { step() }
                    for (i in 0 until repeats) {
                        val t0 = System.nanoTime()
                        step()
                        times[i] = (System.nanoTime() - t0) / 1e6
                    }
                    head = step().copyOfRange(0, 4)
                    serving = status() // module loaded, every parameter touched
                    inputs.forEach { it.close() }
                }
            }
        }
        val end = status()
        times.sort()
        val median = if (repeats % 2 == 1) times[repeats / 2] else (times[repeats / 2 - 1] + times[repeats / 2]) / 2
        val memory = listOf(
            "jvm_start_rss" to start.getValue("VmRSS"),
            "peak_rss" to end.getValue("VmHWM"),
            "rss_serving" to serving.getValue("VmRSS"),
            "rss_anon" to serving.getValue("RssAnon"),
            "rss_file" to serving.getValue("RssFile"),
            "rss_after_close" to end.getValue("VmRSS"),
            "jvm_start_rss_anon" to start.getValue("RssAnon"),
        ).joinToString(", ") { (k, v) -> "\"$k\": $v" }
        println("{\"step_ms\": $median, \"logits_head\": [${head.joinToString(", ")}], \"memory\": {$memory}}")
    }

    /** The memory lines of /proc/self/status, in bytes. */
    private fun status(): Map<String, Long> =
        File("/proc/self/status").readLines().mapNotNull { line ->
            val m = Regex("""^(\w+):\s+(\d+) kB""").find(line) ?: return@mapNotNull null
            m.groupValues[1] to m.groupValues[2].toLong() * 1024
        }.toMap()

    /** A .npy file (little-endian f4 / i4 / i8, C order) as a value on the module's device. */
    fun readNpy(module: IreeModule, file: File): IreeValue {
        val bytes = file.readBytes()
        require(bytes.size > 10 && bytes[0] == 0x93.toByte() && String(bytes, 1, 5, Charsets.US_ASCII) == "NUMPY") { "$file is not a .npy file" }
        val major = bytes[6].toInt()
        val buf = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
        val (headerLen, dataAt) = if (major == 1) buf.getShort(8).toInt() and 0xFFFF to 10 else buf.getInt(8) to 12
        val header = String(bytes, dataAt, headerLen, Charsets.ISO_8859_1)
        val descr = Regex("""'descr':\s*'([^']+)'""").find(header)?.groupValues?.get(1) ?: error("$file: no descr")
        require(!header.contains("'fortran_order': True")) { "$file is in Fortran order" }
        val shape = Regex("""'shape':\s*\(([^)]*)\)""").find(header)?.groupValues?.get(1)
            ?.split(',')?.map { it.trim() }?.filter { it.isNotEmpty() }?.map { it.toLong() } ?: error("$file: no shape")
        val data = ByteBuffer.wrap(bytes, dataAt + headerLen, bytes.size - dataAt - headerLen).slice().order(ByteOrder.LITTLE_ENDIAN)
        val dims = shape.toLongArray()
        return when (descr) {
            "<f4" -> module.value(FloatArray(data.remaining() / 4).also { data.asFloatBuffer().get(it) }, *dims)
            "<i4" -> module.value(IntArray(data.remaining() / 4).also { data.asIntBuffer().get(it) }, *dims)
            "<i8" -> module.value(LongArray(data.remaining() / 8).also { data.asLongBuffer().get(it) }, *dims)
            else -> error("$file: dtype $descr is not one ServeBench reads")
        }
    }
}
