package dev.tapeout.examples

import dev.tapeout.iree.IreeDevice
import dev.tapeout.iree.IreeInstance
import dev.tapeout.iree.IreeModule
import dev.tapeout.iree.IreeParameters
import dev.tapeout.iree.IreeValue
import java.io.File
import kotlin.math.abs
import kotlin.system.exitProcess

/**
 * Serves the exported tiny LLM from Kotlin with IREE in process ([dev.tapeout.iree]): [TinyLlmServer] runs prefill on
 * the prompt, then greedy decode steps with the KV cache kept on the device between steps.
 */
class TinyLlmServer(private val module: IreeModule) {
    private val v = TinyLlm.VOCAB
    private val prefillFn = module.function("prefill")
    private val decodeFn = module.function("decode")

    /** What prefill returns, on the host: logits `[S, VOCAB]`, the argmax of each row, each layer's keys and values `[HEADS, S, HEAD_DIM]`. */
    class Prefill(val logits: FloatArray, val next: IntArray, val caches: List<FloatArray>)

    /** prefill on `tokens`. */
    fun prefill(tokens: IntArray): Prefill {
        val inputs = mapOf(
            "tokens" to module.value(tokens, tokens.size.toLong()),
            "positions" to module.value(IntArray(tokens.size) { it }, tokens.size.toLong()),
        )
        val out = call(prefillFn, inputs)
        try {
            return Prefill(out.getValue("logits").toFloatArray(), out.getValue("next").toIntArray(),
                (0 until TinyLlm.LAYERS).flatMap { i -> listOf(out.getValue("k$i").toFloatArray(), out.getValue("v$i").toFloatArray()) })
        } finally {
            out.values.forEach { it.close() }
        }
    }

    /** A generation: the tokens (prompt, then one per step) and the logits of every position fed. */
    class Generation(val tokens: List<Int>, val logits: List<FloatArray>)

    /** prefill on `prompt`, then `steps` greedy decode steps; the caches never leave the device between steps. */
    fun generate(prompt: IntArray, steps: Int): Generation {
        val first = prefill(prompt)
        val (h, max, d) = Triple(TinyLlm.HEADS, TinyLlm.MAX, TinyLlm.HEAD_DIM)
        // The prompt's keys and values at the head of fixed-size caches.
        var caches: List<IreeValue> = first.caches.map { kv ->
            val padded = FloatArray(h * max * d)
            for (head in 0 until h) System.arraycopy(kv, head * prompt.size * d, padded, head * max * d, prompt.size * d)
            module.value(padded, h.toLong(), max.toLong(), d.toLong())
        }
        val tokens = prompt.toMutableList().also { it += first.next.last() }
        val rows = (0 until prompt.size).map { s -> first.logits.copyOfRange(s * v, (s + 1) * v) }.toMutableList()
        try {
            repeat(steps) {
                val p = tokens.size - 1
                val inputs = HashMap<String, IreeValue>()
                inputs["token"] = module.value(intArrayOf(tokens.last()), 1)
                inputs["position"] = module.value(intArrayOf(p), 1)
                inputs["pos"] = module.value(longArrayOf(p.toLong()))
                for (i in 0 until TinyLlm.LAYERS) {
                    inputs["cache_k$i"] = caches[2 * i]
                    inputs["cache_v$i"] = caches[2 * i + 1]
                }
                val out = call(decodeFn, inputs)
                listOf("token", "position", "pos").forEach { inputs.getValue(it).close() }
                caches.forEach { it.close() }
                caches = (0 until TinyLlm.LAYERS).flatMap { i -> listOf(out.getValue("k$i"), out.getValue("v$i")) }
                rows += out.getValue("logits").toFloatArray()
                tokens += out.getValue("next").toIntArray()[0]
                out.getValue("logits").close()
                out.getValue("next").close()
            }
        } finally {
            caches.forEach { it.close() }
        }
        return Generation(tokens, rows)
    }

    /** Calls `fn` with its arguments by name; its results by name. */
    private fun call(fn: dev.tapeout.iree.IreeFunction, byName: Map<String, IreeValue>): Map<String, IreeValue> {
        val args = fn.inputs.map { p -> byName[p.name] ?: error("${fn.name} takes ${p.name}, which the server does not make") }
        val results = fn.call(*args.toTypedArray())
        return fn.outputs.map { it.name }.zip(results).toMap()
    }
}

/**
 * `Verify <export dir> <module name>`: serves `<name>.vmfb` with `<name>.irpa` from Kotlin ([TinyLlmServer]: prefill
 * on [TinyLlm.TOKENS], then [STEPS] greedy decode steps with the KV cache on the device), checks every decode step's
 * logits against a full-sequence prefill of the tokens so far, then every position's logits against
 * [TinyLlm.referenceLogits] (float64 Kotlin) and the generated tokens against the reference's greedy choices.
 * Prints the errors; exits 1 when they are too large. No Python.
 */
object Verify {
    const val STEPS = 16

    @JvmStatic
    fun main(args: Array<String>) {
        val (dir, name) = args
        val ok = IreeInstance().use { instance ->
            instance.device("local-task", workers = 2).use { device -> verify(device, File(dir), name) }
        }
        if (!ok) exitProcess(1)
    }

    /** Serves and checks the export in `dir`; whether every check held. */
    fun verify(device: IreeDevice, dir: File, name: String): Boolean {
        val module = IreeModule.load(device, File(dir, "$name.vmfb"), listOf(IreeParameters.archive(File(dir, "$name.irpa"))))
        return module.use {
            val server = TinyLlmServer(module)
            val gen = server.generate(TinyLlm.TOKENS, STEPS)
            val fed = gen.tokens.dropLast(1).toIntArray()
            val v = TinyLlm.VOCAB
            // Decode with the cache against one prefill of the whole sequence.
            val full = server.prefill(fed)
            var cacheErr = 0.0
            for (s in fed.indices) for (j in 0 until v) cacheErr = maxOf(cacheErr, abs((gen.logits[s][j] - full.logits[s * v + j]).toDouble()))
            val sameGreedy = full.next.drop(TinyLlm.TOKENS.size - 1) == gen.tokens.drop(TinyLlm.TOKENS.size)
            println("verify: IREE (in process, from Kotlin) prefill of ${TinyLlm.TOKENS.size} tokens, then $STEPS decode steps with the KV cache: tokens ${gen.tokens}")
            println("verify: decode vs full-sequence prefill of ${fed.size} tokens: max abs logit difference %.2e, same greedy tokens: $sameGreedy".format(cacheErr))
            // Every position against the float64 Kotlin reference.
            val want = TinyLlm().referenceLogits(fed)
            var err = 0.0
            var scale = 0.0
            for (s in fed.indices) for (j in 0 until v) {
                err = maxOf(err, abs(gen.logits[s][j] - want[s * v + j]))
                scale = maxOf(scale, abs(want[s * v + j]))
            }
            val refNext = fed.indices.map { s -> (0 until v).maxByOrNull { want[s * v + it] } }
            val generated = gen.tokens.drop(TinyLlm.TOKENS.size)
            val refGenerated = refNext.drop(TinyLlm.TOKENS.size - 1)
            println("verify: ${fed.size} positions (prompt ${TinyLlm.TOKENS.size}, $STEPS decoded): max abs logit error %.2e against the Kotlin reference (|logit| <= %.2f)".format(err, scale))
            println("verify: generated $generated (reference greedy $refGenerated)")
            val ok = cacheErr <= 1e-5 && sameGreedy && err <= 1e-5 && generated == refGenerated
            if (!ok) System.err.println("tapeout: error: IREE's serving differs (cache $cacheErr, reference $err)")
            ok
        }
    }
}
