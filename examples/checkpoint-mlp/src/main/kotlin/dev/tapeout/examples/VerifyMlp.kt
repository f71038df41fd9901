package dev.tapeout.examples

import dev.tapeout.iree.IreeInstance
import dev.tapeout.iree.IreeModule
import dev.tapeout.iree.IreeParameters
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder
import kotlin.math.abs
import kotlin.system.exitProcess

/**
 * `VerifyMlp <export dir> <checkpoint dir>`: serves `mlp.vmfb` (compileIree) with `mlp.irpa` from Kotlin with IREE in
 * process on the checkpoint's input batch (`x.npy`) and compares the logits with the float64 numpy result
 * make_checkpoint.py wrote (`want.npy`). Exits 1 when they differ by more than 1e-4 of the largest logit.
 */
object VerifyMlp {
    @JvmStatic
    fun main(args: Array<String>) {
        val (export, ckpt) = args.map(::File)
        val text = File(export, "mlp.mlir").readText()
        check(weightTransposes(text).isEmpty()) { "the [out, in] weights are contracted as stored: ${weightTransposes(text)}" }
        val (xShape, x) = npy(File(ckpt, "x.npy"))
        val (_, want) = npy(File(ckpt, "want.npy"))
        val archive = File(export, "mlp.irpa")
        val got = IreeInstance().use { iree ->
            iree.device("local-task", workers = 2).use { device ->
                IreeModule.load(device, File(export, "mlp.vmfb"), listOf(IreeParameters.archive(archive))).use { m ->
                    val input = m.value(FloatArray(x.size) { x[it].toFloat() }, *xShape)
                    val out = m.call("main", input)
                    input.close()
                    out[0].toFloatArray().also { out.forEach { v -> v.close() } }
                }
            }
        }
        check(got.size == want.size) { "IREE returned ${got.size} logits, numpy has ${want.size}" }
        val err = got.indices.maxOf { abs(got[it] - want[it]) }
        val scale = want.maxOf { abs(it) }
        println("verify: $archive (${archive.length()} bytes); IREE's logits (${got.size} values, served from Kotlin), " +
            "max abs error %.2e against numpy float64".format(err))
        if (err > 1e-4 * scale) {
            System.err.println("tapeout: error: IREE's logits differ from numpy by $err")
            exitProcess(1)
        }
    }

    /**
     * The `stablehlo.transpose` lines of [text] that read a parameter (as loaded, or converted): none when every
     * weight is contracted as stored. A linear's weight is stored in row bands and its product transposes only the
     * small `[bands, rows, 32]` result, an activation (docs/graph-format.md, "Weight layout").
     */
    private fun weightTransposes(text: String): List<String> {
        val names = Regex("""(%\w+) = util\.global\.load @""").findAll(text).map { it.groupValues[1] }.toMutableSet()
        for (m in Regex("""(%\w+) = stablehlo\.convert (%\w+)""").findAll(text)) {
            if (m.groupValues[2] in names) names += m.groupValues[1]
        }
        return text.lines().filter { line ->
            names.any { Regex("""stablehlo\.transpose ${Regex.escape(it)}\b""").containsMatchIn(line) }
        }
    }

    /** A little-endian f4 or f8 .npy file (C order): its shape and values. */
    private fun npy(file: File): Pair<LongArray, DoubleArray> {
        val bytes = file.readBytes()
        require(bytes.size > 10 && String(bytes, 1, 5, Charsets.US_ASCII) == "NUMPY") { "$file is not a .npy file" }
        val buf = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
        val (len, at) = if (bytes[6].toInt() == 1) (buf.getShort(8).toInt() and 0xFFFF) to 10 else buf.getInt(8) to 12
        val header = String(bytes, at, len, Charsets.ISO_8859_1)
        val descr = Regex("""'descr':\s*'([^']+)'""").find(header)?.groupValues?.get(1)
        val shape = Regex("""'shape':\s*\(([^)]*)\)""").find(header)!!.groupValues[1]
            .split(',').map { it.trim() }.filter { it.isNotEmpty() }.map { it.toLong() }.toLongArray()
        val data = ByteBuffer.wrap(bytes, at + len, bytes.size - at - len).slice().order(ByteOrder.LITTLE_ENDIAN)
        val values = when (descr) {
            "<f4" -> DoubleArray(data.remaining() / 4) { data.getFloat(4 * it).toDouble() }
            "<f8" -> DoubleArray(data.remaining() / 8) { data.getDouble(8 * it) }
            else -> error("$file: dtype $descr is not f4 or f8")
        }
        return shape to values
    }
}
