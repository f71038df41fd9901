package dev.tapeout.transformers

import dev.tapeout.generate.GenerationConfig
import dev.tapeout.generate.Generator
import dev.tapeout.iree.IreeModule
import java.io.File

/**
 * The greedy half of the parity check: [Generator.generate] on a served export, token for token against
 * transformers' `generate(do_sample=False)` from `testdata/<dir>/generate.json` (make_generate_golden.py: a prompt
 * longer than the sliding window, 12 new tokens). Run by [VerifyParity] on the module it already loaded, so no export
 * is compiled twice. A static cache too short for all 12 checks the tokens it can hold (greedy tokens are the same
 * whatever the maximum, so those are the golden's first ones): the export in scripts/test has 16 rows, 8 new tokens.
 */
object VerifyGenerate {
    /** Checks `module` against `testdata/generate.json` where there is one; adds what differs to `failures`. */
    fun verify(module: IreeModule, name: String, testdata: File, failures: MutableList<String>) {
        val file = File(testdata, "generate.json")
        if (!file.isFile) return
        val text = file.readText()
        val prompt = ints(text, "prompt", file)
        val want = ints(text, "tokens", file)
        val generator = Generator(module)
        val rows = generator.signature.staticCacheRows
        // The last new token is chosen from logits, never written to the cache: prompt + new - 1 rows.
        val max = if (rows == null) want.size else minOf(want.size, rows - prompt.size + 1)
        check(max >= 1) { "$name: a static cache of $rows rows cannot hold the ${prompt.size}-token prompt of $file" }
        val streamed = ArrayList<Int>()
        val got = generator.generate(prompt.toIntArray(), GenerationConfig(max)) { streamed += it }.tokens.toList()
        val expected = want.take(max)
        val same = got == expected && streamed == expected
        val degenerate = if (Regex(""""degenerate"\s*:\s*true""").containsMatchIn(text)) " (few distinct tokens: transformers repeats too)" else ""
        println("verify: $name generate: ${got.size} greedy tokens after a ${prompt.size}-token prompt, same as transformers: $same$degenerate")
        if (!same) failures += "$name generate: $got (streamed $streamed), transformers' generate(do_sample=False) gave $expected"
    }

    private fun ints(json: String, key: String, file: File): List<Int> {
        val m = Regex(""""$key"\s*:\s*\[([^\]]*)\]""").find(json) ?: error("$file has no \"$key\" list: rerun make_generate_golden.py")
        return m.groupValues[1].split(',').map { it.trim() }.filter { it.isNotEmpty() }.map { it.toInt() }
    }
}
