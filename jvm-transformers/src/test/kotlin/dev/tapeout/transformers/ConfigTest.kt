package dev.tapeout.transformers

import dev.tapeout.HfConfig
import dev.tapeout.RopeScaling
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.io.File
import java.io.RandomAccessFile
import java.nio.ByteBuffer
import java.nio.ByteOrder

/** Configs read as transformers reads them, or refused with a [ConfigException] naming the file and the key. */
class ConfigTest {
    private val testdata = File(System.getProperty("tapeout.repo") ?: ".", "jvm-transformers/testdata")

    private fun config(json: String) = CausalLMConfig.parse(HfConfig.parse(json, "t/config.json"))

    private fun llama(extra: String = "", type: String = "llama") = """{"model_type": "$type", "vocab_size": 11,
        |"hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 3, "num_attention_heads": 4,
        |"num_key_value_heads": 2$extra}""".trimMargin()

    private fun refused(json: String, key: String, says: String) {
        val e = assertThrows<ConfigException> { config(json) }
        assertEquals("t/config.json", e.source)
        assertEquals(key, e.key)
        assertTrue(e.message!!.contains(says), e.message)
    }

    @Test
    fun `an unknown rope type is refused, flat or nested`() {
        refused(llama(""", "rope_parameters": {"rope_type": "yarn", "factor": 4.0}"""), "rope_parameters.rope_type", "'yarn' is not implemented")
        refused(llama(""", "rope_scaling": {"type": "dynamic", "factor": 2.0}"""), "rope_scaling.rope_type", "'dynamic'")
        val gemma = gemma3(""""full_attention": {"rope_type": "longrope", "rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}""")
        refused(gemma, "rope_parameters.full_attention.rope_type", "'longrope'")
    }

    @Test
    fun `a field the rope type needs is required, and partial rotary is refused`() {
        refused(llama(""", "rope_parameters": {"rope_type": "linear"}"""), "rope_parameters.factor", "is missing")
        refused(llama(""", "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}"""),
            "rope_parameters.partial_rotary_factor", "part of the head")
    }

    private fun gemma3(rope: String, layers: String = """"sliding_attention", "full_attention", "sliding_attention"""") =
        """{"model_type": "gemma3_text", "vocab_size": 11, "hidden_size": 72, "intermediate_size": 24, "num_hidden_layers": 3,
        |"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "sliding_window": 4, "layer_types": [$layers],
        |"rope_parameters": {$rope}}""".trimMargin()

    @Test
    fun `Gemma 3's rope parameters are read per layer type`() {
        val c = config(gemma3(""""full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
            |"sliding_attention": {"rope_type": "default", "rope_theta": 1e4}""".trimMargin()))
        assertEquals(RopeSpec(1e6, RopeScaling.Linear(8.0)), c.rope[LayerType.FULL])
        assertEquals(RopeSpec(1e4, RopeScaling.None), c.rope[LayerType.SLIDING])
        assertEquals(listOf(LayerType.SLIDING, LayerType.FULL, LayerType.SLIDING), c.layerTypes)
        assertEquals(4, c.slidingWindow)
        refused(gemma3(""""full_attention": {"rope_theta": 1e6}"""), "rope_parameters.sliding_attention", "is missing")
        refused(gemma3(""""full_attention": {"rope_theta": 1e6}, "rope_theta": 5.0"""), "rope_parameters", "mixes layer types")
    }

    @Test
    fun `layer types are checked`() {
        refused(gemma3(""""rope_theta": 1e4""", """"sliding_attention", "chunked_attention", "full_attention""""),
            "layer_types[1]", "'chunked_attention'")
        refused(gemma3(""""rope_theta": 1e4""", """"sliding_attention""""), "layer_types", "1 entries for 3 layers")
        refused(llama(""", "layer_types": ["full_attention", "sliding_attention", "full_attention"]"""), "layer_types", "full attention only")
    }

    @Test
    fun `a key the family cannot honour is refused, not ignored`() {
        refused(llama(""", "sliding_window": 4096"""), "sliding_window", "no sliding window")
        refused(llama(""", "final_logit_softcapping": 30.0"""), "final_logit_softcapping", "no softcap")
        refused(llama(""", "hidden_act": "gelu""""), "hidden_act", "silu only")
        refused(llama(""", "attention_bias": true""", type = "mistral"), "attention_bias", "no attention biases")
        refused(llama(""", "mlp_bias": true""", type = "qwen3"), "mlp_bias", "no MLP biases")
        refused(llama(""", "query_pre_attn_scalar": 8""", type = "qwen2"), "query_pre_attn_scalar", "scales by head_dim")
        refused(llama(""", "num_key_value_heads": 3"""), "num_key_value_heads", "does not divide")
        refused(llama().replace(""""vocab_size": 11,""", ""), "vocab_size", "is missing")
    }

    @Test
    fun `the family comes from model_type, checked against architectures`() {
        refused(llama(type = "gpt2"), "model_type", "'gpt2'")
        refused(llama(type = "gemma3"), "model_type", "text model")
        refused(llama(""", "architectures": ["LlamaForSequenceClassification"]"""), "architectures", "LlamaForCausalLM")
        assertEquals(Family.QWEN3, config(llama(""", "architectures": ["Qwen3ForCausalLM"]""", type = "qwen3")).family)
    }

    @Test
    fun `a window applies where transformers applies it`() {
        // Qwen2 reads sliding_window only with use_sliding_window, and then from max_window_layers on.
        assertNull(config(llama(""", "sliding_window": 8""", type = "qwen2")).slidingWindow)
        val q = config(llama(""", "sliding_window": 8, "use_sliding_window": true, "max_window_layers": 1""", type = "qwen2"))
        assertEquals(listOf(LayerType.FULL, LayerType.SLIDING, LayerType.SLIDING), q.layerTypes)
        assertEquals(List(3) { LayerType.SLIDING }, config(llama(""", "sliding_window": 8""", type = "mistral")).layerTypes)
    }

    /** The `embed_scale` transformers' loaded model held, as make_golden.py recorded it in the goldens' metadata. */
    private fun goldenEmbedScale(dir: String): Double {
        RandomAccessFile(File(testdata, "$dir/golden.safetensors"), "r").use { f ->
            val len = ByteBuffer.wrap(ByteArray(8).also { f.readFully(it) }).order(ByteOrder.LITTLE_ENDIAN).long.toInt()
            val header = String(ByteArray(len).also { f.readFully(it) }, Charsets.UTF_8)
            return Regex(""""embed_scale"\s*:\s*"([^"]+)"""").find(header)!!.groupValues[1].toDouble()
        }
    }

    @Test
    fun `Gemma's embed_scale is sqrt(hidden) in the weights' dtype, as transformers' buffer holds it`() {
        for (dir in listOf("gemma2-f32", "gemma2-bf16", "gemma3-f32", "gemma3-bf16")) {
            val c = CausalLMConfig.read(File(testdata, "$dir/config.json"))
            assertEquals(goldenEmbedScale(dir), c.embedScale!!, 0.0, dir)
        }
        assertEquals(8.5, CausalLMConfig.read(File(testdata, "gemma2-bf16/config.json")).embedScale!!, 0.0)
    }

    @Test
    fun `each testdata checkpoint is read as its family`() {
        val want = mapOf("qwen3-f32" to Family.QWEN3, "phi3-bf16" to Family.PHI3, "mistral-window-f32" to Family.MISTRAL,
            "gemma2-f32" to Family.GEMMA2, "gemma3-bf16" to Family.GEMMA3)
        for ((dir, family) in want) assertEquals(family, CausalLMConfig.read(File(testdata, "$dir/config.json")).family, dir)
        val g2 = CausalLMConfig.read(File(testdata, "gemma2-f32/config.json"))
        assertEquals(5.0, g2.attnLogitSoftcapping)
        assertEquals(3.0, g2.finalLogitSoftcapping)
        assertEquals(Math.pow(32.0, -0.5), g2.attentionScale, 0.0)
    }
}
