package dev.tapeout.transformers

import dev.tapeout.iree.IreeInstance
import dev.tapeout.iree.IreeModule
import dev.tapeout.iree.IreeParameters
import dev.tapeout.iree.IreeValue
import java.io.File
import java.io.RandomAccessFile
import java.nio.ByteBuffer
import java.nio.ByteOrder
import kotlin.math.abs
import kotlin.system.exitProcess

/**
 * `VerifyParity NAME=EXPORT_DIR=TESTDATA_DIR ...`: checks each export's IREE logits against transformers' own (the
 * goldens jvm-transformers/make_golden.py wrote with transformers), served from Kotlin with IREE in process
 * ([dev.tapeout.iree]); examples/hf-llama's verify tasks run it on their exports too. Where the goldens also hold
 * llama.cpp's logits, the difference from them is printed, not checked.
 *
 * For each model: loads `<name>.vmfb` (compileIree) with its archive, runs prefill on the golden prompts (lengths 7
 * and 1: two run-time sizes of the `?` sequence length), then greedy decode from the 7-token prompt with the KV cache
 * the module returns, passed back on the device (each step's cache one position longer: more run-time sizes of the
 * `?` past length; or HF's StaticCache form: a fixed-length cache and `cache_position`), feeding transformers'
 * tokens. Every position's and step's logits must be within [TOL] of transformers' float32 logits, with the same
 * argmax; exits 1 otherwise. Then, where testdata holds generate.json, greedy generate() on the same module
 * ([VerifyGenerate]). An export with `logits_to_keep=1` returns the last position's prefill logits only:
 * those are checked against transformers' last position.
 */
object VerifyParity {
    const val TOL = 1e-4

    @JvmStatic
    fun main(args: Array<String>) = runSpecs(args, ::verify)

    /**
     * Runs [verify] on each `NAME=EXPORT_DIR=TESTDATA_DIR` of [args]: loads `<name>.vmfb` with its archive on one CPU
     * device, hands it over with the testdata directory, closes it, then prints the failures and exits 1 when there
     * is any: the driver of every parity check here.
     */
    internal fun runSpecs(args: Array<String>, verify: (IreeModule, String, File, MutableList<String>) -> Unit) {
        val failures = ArrayList<String>()
        IreeInstance().use { instance ->
            instance.device("local-task", workers = 2).use { device ->
                for (spec in args) {
                    val (name, export, testdata) = spec.split("=")
                    val dir = File(export)
                    IreeModule.load(device, File(dir, "$name.vmfb"), listOf(IreeParameters.archive(File(dir, "$name.irpa"))))
                        .use { module -> verify(module, name, File(testdata), failures) }
                }
            }
        }
        failures.forEach { System.err.println("tapeout: error: $it") }
        if (failures.isNotEmpty()) exitProcess(1)
    }

    /** Max abs difference of [got] from [want] (rows of [vocab]), with a failure where it or an argmax is off. */
    internal fun check(label: String, got: FloatArray, want: FloatArray, vocab: Int, failures: MutableList<String>): Double {
        if (got.size != want.size) {
            failures += "$label: ${got.size} logits, transformers has ${want.size}"
            return Double.POSITIVE_INFINITY
        }
        var err = 0.0
        for (i in got.indices) err = maxOf(err, abs(got[i].toDouble() - want[i]))
        val rows = got.size / vocab
        val same = (0 until rows).all { r -> argmax(got, r, vocab) == argmax(want, r, vocab) }
        println("verify: $label: max abs %.2e vs transformers, same argmax: $same".format(err))
        if (err > TOL || !same) failures += "$label: max abs %.2e (limit %.0e), same argmax $same".format(err, TOL)
        return err
    }

    private fun argmax(v: FloatArray, row: Int, n: Int) = (0 until n).maxByOrNull { v[row * n + it] }

    private fun verify(module: IreeModule, name: String, testdata: File, failures: MutableList<String>) {
        val golden = SafeTensorsFile.read(File(testdata, "golden.safetensors"))
        val prefill = module.function("prefill")
        val decode = module.function("decode")
        val decodeArgs = decode.inputs.associateBy { it.name }
        // HF's DynamicCache (past_key_<i> [1, KV, ?, D], grown by concat) or StaticCache (fixed length, cache_position).
        val static = if ("cache_position" in decodeArgs) decodeArgs.getValue("past_key_0").dims[2] else null
        val vocab = golden.shape("prefill_a_logits").last().toInt()
        var worst = 0.0
        var presents: List<IreeValue> = emptyList()
        for (tag in listOf("a", "b")) {
            val tokens = golden.ints("prefill_${tag}_tokens")
            val ids = module.value(tokens, 1, tokens.size.toLong())
            val out = prefill.call(ids)
            ids.close()
            val logits = out[0].toFloatArray()
            // Every position's logits, or with logits_to_keep=1 ([1, 1, vocab]) the last position's.
            val rows = out[0].shape[1]
            check(rows == tokens.size.toLong() || rows == 1L) { "$name: prefill of ${tokens.size} gave logits ${out[0].shape.toList()}" }
            val last = if (rows == 1L && tokens.size > 1) " (logits_to_keep=1: the last position)" else ""
            val want = golden.floats("prefill_${tag}_logits").let { it.copyOfRange(it.size - (rows * vocab).toInt(), it.size) }
            worst = maxOf(worst, check("$name prefill of ${tokens.size}$last", logits, want, vocab, failures))
            out[0].close()
            // A GGUF's goldens also hold llama.cpp's own logits for prompt a: reported, not checked (its matmuls
            // round the activations to the weights' dot-product types).
            if (tag == "a" && golden.has("llamacpp_prefill_a_logits")) {
                val cpp = golden.floats("llamacpp_prefill_a_logits").let { it.copyOfRange(it.size - logits.size, it.size) }
                val far = logits.indices.maxOf { abs(logits[it].toDouble() - cpp[it]) }
                println("verify: $name prefill of ${tokens.size}: max abs %.2e vs llama.cpp (reported only)".format(far))
            }
            if (tag == "a") presents = out.drop(1) else out.drop(1).forEach { it.close() }
        }
        val layers = presents.size / 2
        var past = presents[0].shape[2]
        if (static != null) {
            // The prompt's keys and values at the head of fixed-length caches.
            presents = presents.map { x ->
                val (b, kv, d) = Triple(x.shape[0], x.shape[1], x.shape[3])
                val src = x.toFloatArray()
                x.close()
                val padded = FloatArray((b * kv * static * d).toInt())
                for (row in 0 until (b * kv).toInt()) {
                    System.arraycopy(src, (row * past * d).toInt(), padded, (row * static * d).toInt(), (past * d).toInt())
                }
                module.value(padded, b, kv, static, d)
            }
        }
        val decodeTokens = golden.ints("decode_tokens")
        val decodeLogits = golden.floats("decode_logits")
        for ((step, tok) in decodeTokens.withIndex()) {
            val byName = HashMap<String, IreeValue>()
            byName["input_ids"] = module.value(intArrayOf(tok), 1, 1)
            if (static != null) byName["cache_position"] = module.value(intArrayOf(past.toInt()))
            for (i in 0 until layers) {
                byName["past_key_$i"] = presents[2 * i]
                byName["past_value_$i"] = presents[2 * i + 1]
            }
            val out = decode.call(*decode.inputs.map { byName.getValue(it.name) }.toTypedArray())
            byName["input_ids"]?.close()
            byName["cache_position"]?.close()
            presents.forEach { it.close() }
            presents = out.drop(1)
            val want = static ?: (past + 1)
            check(presents[0].shape[2] == want) { "$name: the cache is ${presents[0].shape.toList()}, not $want long" }
            val row = decodeLogits.copyOfRange(step * vocab, (step + 1) * vocab)
            worst = maxOf(worst, check("$name decode step $step (past $past)", out[0].toFloatArray(), row, vocab, failures))
            out[0].close()
            past += 1
        }
        presents.forEach { it.close() }
        VerifyGenerate.verify(module, name, testdata, failures)
        println("verify: $name: KV cache " + (if (static != null) "static, $static rows (cache_position)" else "dynamic (concat on ?)"))
        println("verify: $name: worst max abs %.2e over 2 prefills and ${decodeTokens.size} decode steps".format(worst))
    }
}

/** The few safetensors tensors the goldens hold (F32, I32), read whole. */
class SafeTensorsFile private constructor(private val entries: Map<String, Entry>, private val data: ByteBuffer) {
    private class Entry(val dtype: String, val shape: List<Long>, val begin: Int, val end: Int)

    /** Whether the file has a tensor `name`. */
    fun has(name: String): Boolean = name in entries

    /** The shape of tensor `name`. */
    fun shape(name: String): List<Long> = entry(name).shape

    /** Tensor `name` (F32) as floats. */
    fun floats(name: String): FloatArray {
        val e = entry(name, "F32")
        return FloatArray((e.end - e.begin) / 4).also { view(e).asFloatBuffer().get(it) }
    }

    /** Tensor `name` (I32) as ints. */
    fun ints(name: String): IntArray {
        val e = entry(name, "I32")
        return IntArray((e.end - e.begin) / 4).also { view(e).asIntBuffer().get(it) }
    }

    private fun entry(name: String, dtype: String? = null): Entry {
        val e = entries[name] ?: error("no tensor $name in the goldens (they have ${entries.keys.sorted()})")
        check(dtype == null || e.dtype == dtype) { "golden $name is ${e.dtype}, not $dtype" }
        return e
    }

    private fun view(e: Entry): ByteBuffer {
        val b = data.duplicate()
        b.position(e.begin)
        b.limit(e.end)
        return b.slice().order(ByteOrder.LITTLE_ENDIAN)
    }

    companion object {
        /** Reads `file`. */
        fun read(file: File): SafeTensorsFile {
            val bytes = RandomAccessFile(file, "r").use { f -> ByteArray(f.length().toInt()).also { f.readFully(it) } }
            val buf = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN)
            val headerLen = buf.getLong(0).toInt()
            val header = String(bytes, 8, headerLen, Charsets.UTF_8)
            val entry = Regex(""""([^"]+)"\s*:\s*\{\s*"dtype"\s*:\s*"(\w+)"\s*,\s*"shape"\s*:\s*\[([^\]]*)\]\s*,\s*"data_offsets"\s*:\s*\[\s*(\d+)\s*,\s*(\d+)\s*\]""")
            val entries = entry.findAll(header).associate { m ->
                val shape = m.groupValues[3].split(',').map { it.trim() }.filter { it.isNotEmpty() }.map { it.toLong() }
                m.groupValues[1] to Entry(m.groupValues[2], shape, m.groupValues[4].toInt(), m.groupValues[5].toInt())
            }
            val data = ByteBuffer.wrap(bytes, 8 + headerLen, bytes.size - 8 - headerLen).slice()
            return SafeTensorsFile(entries, data)
        }
    }
}
