package dev.tapeout.transformers

import dev.tapeout.iree.IreeModule
import dev.tapeout.iree.IreeValue
import java.io.File

/**
 * `VerifyBatch NAME=EXPORT_DIR=TESTDATA_DIR ...`: checks an export with a run-time batch (`batch=dynamic`) against
 * transformers' batched logits (`batch_golden.safetensors`, written by `make_golden.py --batch`), served from Kotlin
 * with IREE in process. One compiled module runs every batch size of the goldens (2 rows of 6 tokens, 3 rows of 5):
 * prefill of the whole batch, then greedy decode steps of all rows with the caches the module returns, kept on the
 * device, feeding transformers' tokens. Every row's and position's logits must be within [VerifyParity.TOL] of
 * transformers' float32 logits with the same argmax; exits 1 otherwise. An export with `logits_to_keep=1` returns
 * each row's last prefill position only: those are checked against transformers' last positions.
 */
object VerifyBatch {
    @JvmStatic
    fun main(args: Array<String>) = VerifyParity.runSpecs(args, ::verify)

    private fun verify(module: IreeModule, name: String, testdata: File, failures: MutableList<String>) {
        val golden = SafeTensorsFile.read(File(testdata, "batch_golden.safetensors"))
        val prefill = module.function("prefill")
        val decode = module.function("decode")
        val batches = listOf(2, 3).filter { golden.has("batch${it}_tokens") }
        check(batches.size == 2) { "$name: ${testdata.path}/batch_golden.safetensors has batches $batches, not 2 and 3" }
        var worst = 0.0
        for (n in batches) {
            val shape = golden.shape("batch${n}_tokens")
            val length = shape[1]
            val vocab = golden.shape("batch${n}_prefill_logits").last().toInt()
            val ids = module.value(golden.ints("batch${n}_tokens"), n.toLong(), length)
            val out = prefill.call(ids)
            ids.close()
            // Every position's logits, or with logits_to_keep=1 ([n, 1, vocab]) each row's last position's.
            val rows = out[0].shape[1]
            check(out[0].shape.toList() == listOf(n.toLong(), rows, vocab.toLong()) && (rows == length || rows == 1L)) {
                "$name: prefill of $n x $length gave logits ${out[0].shape.toList()}"
            }
            val all = golden.floats("batch${n}_prefill_logits")
            val want = if (rows == length) all else FloatArray(n * vocab) { all[((it / vocab + 1) * length - 1).toInt() * vocab + it % vocab] }
            val last = if (rows == length) "" else " (logits_to_keep=1: the last position)"
            worst = maxOf(worst, VerifyParity.check("$name batch $n prefill of $length$last", out[0].toFloatArray(), want, vocab, failures))
            out[0].close()
            var presents: List<IreeValue> = out.drop(1)
            val tokens = golden.ints("batch${n}_decode_tokens")
            val logits = golden.floats("batch${n}_decode_logits")
            val steps = tokens.size / n
            for (step in 0 until steps) {
                val byName = HashMap<String, IreeValue>()
                byName["input_ids"] = module.value(tokens.copyOfRange(step * n, (step + 1) * n), n.toLong(), 1)
                for (i in 0 until presents.size / 2) {
                    byName["past_key_$i"] = presents[2 * i]
                    byName["past_value_$i"] = presents[2 * i + 1]
                }
                val res = decode.call(*decode.inputs.map { byName.getValue(it.name) }.toTypedArray())
                byName.getValue("input_ids").close()
                presents.forEach { it.close() }
                presents = res.drop(1)
                val cache = listOf(n.toLong(), presents[0].shape[1], length + step + 1, presents[0].shape[3])
                check(presents[0].shape.toList() == cache) { "$name: the cache is ${presents[0].shape.toList()}, not $cache" }
                val want = logits.copyOfRange(step * n * vocab, (step + 1) * n * vocab)
                worst = maxOf(worst, VerifyParity.check("$name batch $n decode step $step (past ${length + step})", res[0].toFloatArray(), want, vocab, failures))
                res[0].close()
            }
            presents.forEach { it.close() }
        }
        println("verify: $name: batches $batches from one module, worst max abs %.2e".format(worst))
    }
}
