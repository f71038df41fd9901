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

    /**
     * A one-layer stand-in of a causal LM (vocabulary 5, caches `[1, 1, ?, 2]` that grow by a row a step) whose
     * logits are the given constants, and whose decode names its value cache `valueName`.
     */
    private fun fakeLm(prefillLogits: String, decodeLogits: String, valueName: String = "past_value_0"): ByteArray {
        val kv = "tensor<1x1x?x2xf32>"
        val logits = "tensor<1x1x5xf32>"
        val results = "($logits {tapeout.name = \"logits\"}, $kv {tapeout.name = \"present_key_0\"}, $kv {tapeout.name = \"present_value_0\"})"
        val mlir = """
            module @fake {
              func.func @prefill(%ids: tensor<1x?xi32> {tapeout.name = "input_ids"}) -> $results {
                %logits = stablehlo.constant dense<$prefillLogits> : $logits
                %f = stablehlo.convert %ids : (tensor<1x?xi32>) -> tensor<1x?xf32>
                %n = stablehlo.get_dimension_size %ids, dim = 1 : (tensor<1x?xi32>) -> tensor<i32>
                %n1 = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
                %one = stablehlo.constant dense<1> : tensor<1xi32>
                %two = stablehlo.constant dense<2> : tensor<1xi32>
                %shape = stablehlo.concatenate %one, %one, %n1, %two, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
                %k = stablehlo.dynamic_broadcast_in_dim %f, %shape, dims = [0, 2] {known_expanding_dimensions = array<i64>, known_nonexpanding_dimensions = array<i64: 0, 1>} : (tensor<1x?xf32>, tensor<4xi32>) -> $kv
                return %logits, %k, %k : $logits, $kv, $kv
              }
              func.func @decode(%ids: tensor<1x1xi32> {tapeout.name = "input_ids"}, %pk: $kv {tapeout.name = "past_key_0"},
                                %pv: $kv {tapeout.name = "$valueName"}) -> $results {
                %logits = stablehlo.constant dense<$decodeLogits> : $logits
                %row = stablehlo.constant dense<0.0> : tensor<1x1x1x2xf32>
                %k = stablehlo.concatenate %pk, %row, dim = 2 : ($kv, tensor<1x1x1x2xf32>) -> $kv
                %v = stablehlo.concatenate %pv, %row, dim = 2 : ($kv, tensor<1x1x1x2xf32>) -> $kv
                return %logits, %k, %v : $logits, $kv, $kv
              }
            }
        """.trimIndent()
        return IreeCompiler.find(repo).compile(mlir, IreeTarget.cpu("generic"))
    }

    private fun <T> withFake(vmfb: ByteArray, body: (IreeModule) -> T): T = IreeInstance().use { instance ->
        instance.device("local-sync").use { device -> IreeModule.load(device, vmfb).use(body) }
    }

    @Test
    fun `a stand-in LM generates what its logits say, NaN logits and misnamed caches are refused`() {
        val good = "[[[0.0, 1.0, 3.0, 0.0, 0.0]]]"
        val nan = "[[[0.0, 1.0, 0x7FC00000, 0.0, 0.0]]]"
        withFake(fakeLm(good, "[[[0.0, 0.0, 0.0, 0.0, 2.0]]]")) { m ->
            assertEquals(listOf(2, 4, 4, 4), Generator(m).generate(intArrayOf(1, 2, 3), GenerationConfig(4)).tokens.toList())
            // maxNewTokens is a bound, not an allocation: a stop token ends the run long before it.
            val stopped = Generator(m).generate(intArrayOf(1), GenerationConfig(Int.MAX_VALUE, stopTokenIds = setOf(4)))
            assertEquals(listOf(2, 4), stopped.tokens.toList())
            assertEquals(StopReason.STOP_TOKEN, stopped.stopReason)
        }
        withFake(fakeLm(nan, good)) { m ->
            val e = assertThrows<GenerateModuleException> { Generator(m).generate(intArrayOf(1), GenerationConfig(4)) }
            assertEquals("prefill", e.function)
            assertTrue("NaN logit (token 2 of 5)" in e.message!!, e.message)
        }
        withFake(fakeLm(good, nan)) { m ->
            val e = assertThrows<GenerateModuleException> { Generator(m).generate(intArrayOf(1), GenerationConfig(4)) }
            assertEquals("decode", e.function)
            assertTrue("decode step 1" in e.message!!, e.message)
        }
        withFake(fakeLm(good, good, valueName = "past_v_0")) { m ->
            val e = assertThrows<GenerateModuleException> { Generator(m) }
            assertEquals("decode", e.function)
            assertTrue("past_value_0" in e.message!!, e.message)
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
