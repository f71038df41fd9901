package dev.tapeout.generate

import dev.tapeout.iree.IreeCompiler
import dev.tapeout.iree.IreeInstance
import dev.tapeout.iree.IreeModule
import dev.tapeout.iree.IreeParameters
import dev.tapeout.iree.IreeTarget
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.io.File

/** Mistakes with generate(): each a typed exception that says what to do, and the module still usable after it. */
class GenerateMistakesTest {
    private val repo = File(System.getProperty("tapeout.repo") ?: ".")

    private fun <T> withLlama(body: (IreeModule) -> T): T = IreeInstance().use { instance ->
        instance.device("local-task", workers = 2).use { device ->
            val dir = File(System.getProperty("generate.llamaF32Static"))
            IreeModule.load(device, File(dir, "llama_f32_static.vmfb"), listOf(IreeParameters.archive(File(dir, "llama_f32_static.irpa")))).use(body)
        }
    }

    @Test
    fun `a module without prefill and decode is refused with what it has`() {
        val mlir = """
            module @add {
              func.func @prefill(%x: tensor<4xf32>) -> tensor<4xf32> {
                %0 = stablehlo.add %x, %x : tensor<4xf32>
                return %0 : tensor<4xf32>
              }
            }
        """.trimIndent()
        val vmfb = IreeCompiler.find(repo).compile(mlir, IreeTarget.cpu("generic"))
        IreeInstance().use { instance ->
            instance.device("local-sync").use { device ->
                IreeModule.load(device, vmfb).use { module ->
                    val e = assertThrows<GenerateModuleException> { Generator(module) }
                    assertEquals("decode", e.function)
                    assertTrue("has: prefill" in e.message!!, e.message)
                }
            }
        }
    }

    @Test
    fun `empty prompts, ids outside the vocabulary, stop strings without a tokenizer`() = withLlama { module ->
        val g = Generator(module)
        assertEquals("promptIds", assertThrows<GenerateArgumentException> { g.generate(IntArray(0), GenerationConfig(4)) }.argument)
        val outside = assertThrows<GenerateArgumentException> { g.generate(intArrayOf(3, 97), GenerationConfig(4)) }
        assertTrue("promptIds[1] is 97" in outside.message!!, outside.message)
        assertThrows<GenerateArgumentException> { g.generate(intArrayOf(-1), GenerationConfig(4)) }
        assertEquals("stopStrings", assertThrows<GenerateArgumentException> { g.generate(intArrayOf(3), GenerationConfig(4, stopStrings = listOf("x"))) }.argument)
        assertEquals("prompt", assertThrows<GenerateArgumentException> { g.generate("text", GenerationConfig(4)) }.argument)
        // The module serves on after every refusal.
        assertEquals(4, g.generate(intArrayOf(3), GenerationConfig(4)).tokens.size)
    }

    @Test
    fun `an empty text prompt without special tokens is refused`() = withLlama { module ->
        Tokenizer.open(Goldens.file("generate/tiny97/tokenizer.json")).use { tok ->
            val g = Generator(module, tok)
            val e = assertThrows<GenerateArgumentException> { g.generate("", GenerationConfig(4), addSpecialTokens = false) }
            assertTrue("no tokens" in e.message!!, e.message)
            // With its template the tokenizer gives the BOS alone: a prompt of one token.
            assertEquals(1, g.generate("", GenerationConfig(2)).generation.promptIds.size)
        }
    }

    @Test
    fun `a prompt the static cache cannot hold is refused before any call`() = withLlama { module ->
        val g = Generator(module)
        val long = IntArray(25) { 3 + it }
        val e = assertThrows<GeneratePromptTooLongException> { g.generate(long, GenerationConfig(1)) }
        assertEquals(25, e.promptTokens)
        assertEquals(24, e.cacheRows)
        val tight = assertThrows<GeneratePromptTooLongException> { g.generate(IntArray(20) { 3 + it }, GenerationConfig(6)) }
        assertEquals(25, tight.neededRows)
        assertTrue("at most 5 new tokens" in tight.message!!, tight.message)
        assertEquals(5, g.generate(IntArray(20) { 3 + it }, GenerationConfig(5)).tokens.size)
        assertEquals(1, g.generate(IntArray(24) { 3 + it }, GenerationConfig(1)).tokens.size)
    }
}
