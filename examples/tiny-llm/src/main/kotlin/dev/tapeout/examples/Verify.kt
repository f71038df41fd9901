package dev.tapeout.examples

import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder
import kotlin.math.abs
import kotlin.system.exitProcess

/**
 * `Verify <dir> <module name> <iree bin dir> <work dir>`: compiles `<dir>/<name>.mlir` with iree-compile (the
 * compiled module and the npy files go to `<work dir>`, not the export's directory), runs it with
 * iree-run-module and `--parameters=model=<dir>/<name>.irpa` on [TinyLlm.TOKENS], and compares the logits with
 * [TinyLlm.referenceLogits] (float64 Kotlin). Prints sizes and the max abs error; exits 1 when it is too large.
 */
object Verify {
    private fun run(cmd: List<String>) {
        val p = ProcessBuilder(cmd).redirectErrorStream(true).start()
        val out = p.inputStream.bufferedReader().readText()
        if (p.waitFor() != 0) {
            System.err.println("tapeout: error: ${cmd[0]} failed:\n$out")
            exitProcess(1)
        }
    }

    private fun npyInt32(values: IntArray): ByteArray {
        var header = "{'descr': '<i4', 'fortran_order': False, 'shape': (${values.size},), }"
        while ((10 + header.length + 1) % 64 != 0) header += " "
        header += "\n"
        val buf = ByteBuffer.allocate(10 + header.length + values.size * 4).order(ByteOrder.LITTLE_ENDIAN)
        buf.put(0x93.toByte()).put("NUMPY".toByteArray()).put(1).put(0).putShort(header.length.toShort()).put(header.toByteArray())
        values.forEach { buf.putInt(it) }
        return buf.array()
    }

    private fun npyFloat32(file: File): FloatArray {
        val bytes = file.readBytes()
        val headerLen = (bytes[8].toInt() and 0xFF) or ((bytes[9].toInt() and 0xFF) shl 8)
        val header = String(bytes, 10, headerLen)
        require(header.contains("'<f4'")) { "expected float32 logits, got $header" }
        val fb = ByteBuffer.wrap(bytes, 10 + headerLen, bytes.size - 10 - headerLen).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer()
        return FloatArray(fb.remaining()) { fb.get(it) }
    }

    @JvmStatic
    fun main(args: Array<String>) {
        val (dir, name, bin, workDir) = args.map { it } + List(4 - args.size.coerceAtMost(4)) { "" }
        val d = File(dir)
        val work = if (workDir.isEmpty()) d else File(workDir).also { it.mkdirs() }
        val mlir = File(d, "$name.mlir"); val irpa = File(d, "$name.irpa"); val vmfb = File(work, "$name.vmfb")
        val tool = { t: String -> if (bin.isEmpty()) t else File(bin, t).path }
        println("verify: ${mlir.path} (${mlir.length()} bytes), ${irpa.path} (${irpa.length()} bytes)")
        run(listOf(tool("iree-compile"), mlir.path, "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
            "--iree-llvmcpu-target-cpu=generic", "-o", vmfb.path))
        val tokens = File(work, "tokens.npy").also { it.writeBytes(npyInt32(TinyLlm.TOKENS)) }
        val out = File(work, "logits.npy")
        run(listOf(tool("iree-run-module"), "--device=local-task", "--module=${vmfb.path}", "--function=main",
            "--parameters=model=${irpa.path}", "--input=@${tokens.path}", "--output=@${out.path}"))
        val got = npyFloat32(out)
        val want = TinyLlm().referenceLogits()
        require(got.size == want.size) { "IREE returned ${got.size} logits, expected ${want.size}" }
        val err = got.indices.maxOf { abs(got[it] - want[it]) }
        val scale = want.maxOf { abs(it) }
        fun argmax(v: (Int) -> Double) = (0 until TinyLlm.SEQ).map { s -> (0 until TinyLlm.VOCAB).maxByOrNull { v(s * TinyLlm.VOCAB + it) } }
        val ours = argmax { got[it].toDouble() }; val ref = argmax { want[it] }
        println("verify: IREE ran it: logits ${TinyLlm.SEQ}x${TinyLlm.VOCAB}, max abs error %.2e against the Kotlin reference (|logit| <= %.2f)".format(err, scale))
        println("verify: next-token predictions $ours (reference $ref)")
        if (err > 1e-4 * scale || ours != ref) {
            System.err.println("tapeout: error: IREE's logits differ from the Kotlin reference by $err")
            exitProcess(1)
        }
    }
}
