package dev.tapeout.examples

import java.io.File
import kotlin.math.abs
import kotlin.system.exitProcess

/**
 * `Verify <export dir> <module name> <python> <work dir>`: serves the export with IREE's Python runtime
 * (`verify_serving.py`: prefill on [TinyLlm.TOKENS], then 16 greedy decode steps with the KV cache, each step's
 * logits checked against a full-sequence prefill), then compares every position's logits with
 * [TinyLlm.referenceLogits] (float64 Kotlin) of the whole sequence, and the generated tokens with the
 * reference's greedy choices. Prints the errors; exits 1 when they are too large.
 */
object Verify {
    const val STEPS = 16

    @JvmStatic
    fun main(args: Array<String>) {
        val (dir, name, python, workDir) = args
        val script = args.getOrNull(4) ?: File("verify_serving.py").path
        val bin = args.getOrNull(5) ?: ""
        val work = File(workDir).also { it.mkdirs() }
        val out = File(work, "serving.txt")
        val cmd = listOf(python, script, dir, name, work.path, TinyLlm.TOKENS.joinToString(","), STEPS.toString(), out.path) +
            listOfNotNull(bin.ifEmpty { null })
        val p = ProcessBuilder(cmd).inheritIO().start()
        if (p.waitFor() != 0) exitProcess(1)
        val lines = out.readLines().filter { it.isNotBlank() }
        val tokens = lines.first().split(' ').map { it.toInt() }
        val rows = lines.drop(1).map { l -> l.split(' ').map { it.toDouble() } }
        val fed = tokens.dropLast(1).toIntArray()
        val want = TinyLlm().referenceLogits(fed)
        val v = TinyLlm.VOCAB
        var err = 0.0
        var scale = 0.0
        for (s in fed.indices) for (j in 0 until v) {
            err = maxOf(err, abs(rows[s][j] - want[s * v + j]))
            scale = maxOf(scale, abs(want[s * v + j]))
        }
        val refNext = fed.indices.map { s -> (0 until v).maxByOrNull { want[s * v + it] } }
        val generated = tokens.drop(TinyLlm.TOKENS.size)
        val refGenerated = refNext.drop(TinyLlm.TOKENS.size - 1)
        println("verify: ${fed.size} positions (prompt ${TinyLlm.TOKENS.size}, $STEPS decoded): max abs logit error %.2e against the Kotlin reference (|logit| <= %.2f)".format(err, scale))
        println("verify: generated $generated (reference greedy $refGenerated)")
        if (err > 1e-5 || generated != refGenerated) {
            System.err.println("tapeout: error: IREE's serving differs from the Kotlin reference (error $err)")
            exitProcess(1)
        }
    }
}
