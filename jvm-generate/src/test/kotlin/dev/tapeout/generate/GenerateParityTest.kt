package dev.tapeout.generate

import dev.tapeout.iree.IreeDevice
import dev.tapeout.iree.IreeInstance
import dev.tapeout.iree.IreeModule
import dev.tapeout.iree.IreeParameters
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import java.io.File

/**
 * generate() on examples/hf-llama's f32 Llama, exported and compiled by that example's tasks with a DynamicCache
 * (llamaF32: every position's prefill logits) and with a 24-row StaticCache and logits_to_keep=1 (llamaF32Static),
 * against transformers' generate(do_sample=False) (make_generate_golden.py): token for token, with and without stop
 * tokens, and from text with a 97-token tokenizer of the checkpoint's vocabulary.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class GenerateParityTest {
    private lateinit var instance: IreeInstance
    private lateinit var device: IreeDevice
    private lateinit var dynamic: IreeModule
    private lateinit var static: IreeModule

    @BeforeAll
    fun load() {
        instance = IreeInstance()
        device = instance.device("local-task", workers = 2)
        dynamic = load("generate.llamaF32", "llama_f32")
        static = load("generate.llamaF32Static", "llama_f32_static")
    }

    private fun load(property: String, name: String): IreeModule {
        val dir = File(System.getProperty(property) ?: error("-D$property: the export's directory (jvm-generate/build.gradle sets it)"))
        return IreeModule.load(device, File(dir, "$name.vmfb"), listOf(IreeParameters.archive(File(dir, "$name.irpa"))))
    }

    @AfterAll
    fun close() {
        dynamic.close()
        static.close()
        device.close()
        instance.close()
    }

    @Test
    fun `the signatures are read as exported`() {
        val d = Generator(dynamic).signature
        assertEquals(2, d.layers)
        assertNull(d.staticCacheRows)
        assertEquals(97, d.vocabSize)
        val s = Generator(static).signature
        assertEquals(2, s.layers)
        assertEquals(24, s.staticCacheRows)
    }

    @Test
    fun `greedy generate equals transformers token for token, with both caches`() {
        var runs = 0
        for (c in Goldens.objects(Goldens.json("generate/greedy.json").getAsJsonArray("cases"))) {
            val prompt = Goldens.ints(c.get("prompt"))
            val want = Goldens.ints(c.get("tokens"))
            val max = c.get("max_new_tokens").asInt
            val eos = c.get("eos_token_id").takeIf { !it.isJsonNull }?.asInt
            val config = GenerationConfig(max, stopTokenIds = setOfNotNull(eos))
            for ((form, module) in listOf("dynamic" to dynamic, "static" to static)) {
                if (form == "static" && prompt.size + max - 1 > 24) continue
                val streamed = ArrayList<Int>()
                val got = Generator(module).generate(prompt, config) { streamed += it }
                val what = "$form cache, prompt ${prompt.toList()}, $max new, eos $eos"
                assertArrayEquals(want, got.tokens, what)
                assertEquals(want.toList(), streamed, "$what: streamed")
                val reason = if (eos != null && want.size < max) StopReason.STOP_TOKEN else StopReason.MAX_NEW_TOKENS
                assertEquals(reason, got.stopReason, what)
                runs++
            }
        }
        assertEquals(10, runs)
    }

    @Test
    fun `text in, text out equals transformers with its tokenizer, stop strings included`() {
        var runs = 0
        Tokenizer.open(Goldens.file("generate/tiny97/tokenizer.json")).use { tok ->
            for (c in Goldens.objects(Goldens.json("generate/text.json").getAsJsonArray("cases"))) {
                val prompt = c.get("prompt").asString
                assertArrayEquals(Goldens.ints(c.get("prompt_ids")), tok.encode(prompt), "prompt ids of '$prompt'")
                val stops = c.getAsJsonArray("stop_strings").map { it.asString }
                val eos = c.get("eos_token_id").takeIf { !it.isJsonNull }?.asInt
                val config = GenerationConfig(c.get("max_new_tokens").asInt, stopTokenIds = setOfNotNull(eos), stopStrings = stops)
                val ids = Goldens.ints(c.get("prompt_ids"))
                for (module in listOf(dynamic, static)) {
                    if (module === static && ids.size + config.maxNewTokens - 1 > 24) continue
                    runs++
                    val pieces = ArrayList<String>()
                    val got = Generator(module, tok).generate(prompt, config) { pieces += it }
                    assertArrayEquals(Goldens.ints(c.get("tokens")), got.generation.tokens, "tokens from '$prompt'")
                    assertEquals(c.get("text").asString, got.text, "text from '$prompt'")
                    assertEquals(got.text, pieces.joinToString(""), "streamed text from '$prompt'")
                    if (stops.isNotEmpty()) assertEquals(StopReason.STOP_STRING, got.generation.stopReason)
                    // The token-id API looks for the same stop strings in the new ids' text.
                    val byIds = Generator(module, tok).generate(ids, config)
                    assertArrayEquals(Goldens.ints(c.get("tokens")), byIds.tokens, "token ids from $ids")
                    assertEquals(got.generation.stopReason, byIds.stopReason, "stop reason from $ids")
                }
            }
        }
        assertTrue(runs >= 6, "$runs runs")
    }

    @Test
    fun `sampling is reproducible by seed, top-k 1 is greedy, and seeds differ`() {
        val prompt = intArrayOf(3, 14, 15, 92, 65, 35, 89)
        val generator = Generator(dynamic)
        val greedy = generator.generate(prompt, GenerationConfig(16)).tokens
        val topOne = generator.generate(prompt, GenerationConfig(16, doSample = true, temperature = 1.7, topK = 1, seed = 3)).tokens
        assertArrayEquals(greedy, topOne, "top_k=1 sampling is greedy")
        val runs = (1L..4L).map { seed ->
            val config = GenerationConfig(16, doSample = true, temperature = 1.5, topK = 40, topP = 0.95, seed = seed)
            val first = generator.generate(prompt, config).tokens
            assertArrayEquals(first, generator.generate(prompt, config).tokens, "seed $seed twice")
            assertArrayEquals(first, Generator(static).generate(prompt, config).tokens, "seed $seed on the static export")
            first.toList()
        }
        assertTrue(runs.toSet().size > 1, "four seeds all drew $runs")
        assertFalse(runs.all { it == greedy.toList() }, "sampling at temperature 1.5 never left the greedy path")
    }
}
