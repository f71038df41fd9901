package dev.tapeout.transformers

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.api.io.TempDir
import java.io.File
import java.nio.file.Files

/** [AutoModelForCausalLM.fromPretrained]: the family, the weight files (one, sharded, GGUF) and what it refuses. */
class AutoModelTest {
    private val repo = File(System.getProperty("tapeout.repo") ?: ".")
    private val testdata = File(repo, "jvm-transformers/testdata")

    @Test
    fun `a sharded checkpoint is read from its index, every shard loaded`() {
        val m = AutoModelForCausalLM.fromPretrained(File(testdata, "qwen3-bf16"))
        assertEquals(Family.QWEN3, m.config.family)
        assertEquals(4, m.checkpoints.size)
        assertEquals(m.model.checkpointKeys(), m.checkpoints.flatMap { it.tensors.keys }.toSet())
        assertEquals(setOf("prefill", "decode"), m.tapes().keys)
    }

    @Test
    fun `a GGUF file is read as its general architecture, q and k rotated as interleaved pairs`() {
        val m = AutoModelForCausalLM.fromPretrained(File(repo, "examples/hf-llama/testdata/gguf-q8_0/model.gguf"))
        assertEquals(Family.LLAMA, m.config.family)
        assertTrue(m.config.ropeInterleaved)
        // The converter permutes q/k rows for llama files only: Qwen3's and Phi-3's rotate halves, as transformers does.
        for ((dir, family) in listOf("gguf-qwen3-f16" to Family.QWEN3, "gguf-phi3-f16" to Family.PHI3)) {
            val g = AutoModelForCausalLM.fromPretrained(File(testdata, "$dir/model.gguf"))
            assertEquals(family, g.config.family, dir)
            assertEquals(false, g.config.ropeInterleaved, dir)
        }
        assertEquals(128, AutoModelForCausalLM.fromPretrained(File(testdata, "gguf-qwen3-f16/model.gguf")).config.headDim)
        assertNull(AutoModelForCausalLM.fromPretrained(File(testdata, "gguf-phi3-f16/model.gguf")).config.slidingWindow)
    }

    @Test
    fun `a Gemma GGUF states llama_cpp's layer pattern, local RoPE base and norms with the 1 added`() {
        val c = AutoModelForCausalLM.fromPretrained(File(testdata, "gguf-gemma3-f16/model.gguf")).config
        assertEquals(Family.GEMMA3, c.family)
        assertEquals(List(5) { LayerType.SLIDING } + LayerType.FULL, c.layerTypes)
        assertEquals(RopeSpec(1e6, dev.tapeout.RopeScaling.None), c.rope[LayerType.FULL])
        assertEquals(RopeSpec(1e4, dev.tapeout.RopeScaling.None), c.rope[LayerType.SLIDING])
        assertEquals(false, c.offsetNorms)
        assertEquals(4, c.slidingWindow)
        val g2 = AutoModelForCausalLM.fromPretrained(File(testdata, "gguf-gemma2-f16/model.gguf")).config
        assertEquals(listOf(LayerType.SLIDING, LayerType.FULL), g2.layerTypes)
        assertEquals(50.0, g2.attnLogitSoftcapping)
        assertEquals(30.0, g2.finalLogitSoftcapping)
    }

    @Test
    fun `a directory without config json is refused, naming it`(@TempDir dir: File) {
        val e = assertThrows<CheckpointFilesException> { AutoModelForCausalLM.fromPretrained(dir) }
        assertTrue(e.message!!.contains("has no config.json"), e.message)
    }

    @Test
    fun `weights that do not match the config are refused both ways`(@TempDir dir: File) {
        // phi3-f32's untied head read with a config that says it is tied: lm_head.weight is never read.
        val src = File(testdata, "phi3-f32")
        File(dir, "config.json").writeText(File(src, "config.json").readText().replace("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true"))
        Files.createSymbolicLink(File(dir, "model.safetensors").toPath(), File(src, "model.safetensors").absoluteFile.toPath())
        val e = assertThrows<CheckpointFilesException> { AutoModelForCausalLM.fromPretrained(dir) }
        assertTrue(e.message!!.contains("never read [lm_head.weight]"), e.message)
    }

    @Test
    fun `an index naming a shard outside the checkpoint directory is refused`(@TempDir dir: File) {
        val src = File(testdata, "qwen3-bf16")
        File(src, "config.json").copyTo(File(dir, "config.json"))
        for (shard in src.listFiles()!!.filter { it.name.startsWith("model-") }) {
            Files.createSymbolicLink(File(dir, shard.name).toPath(), shard.absoluteFile.toPath())
        }
        val index = File(src, "model.safetensors.index.json").readText()
        File(dir, "model.safetensors.index.json").writeText(index.replace("\"model-00001-of-00004.safetensors\"", "\"../model-00001-of-00004.safetensors\""))
        val e = assertThrows<CheckpointFilesException> { AutoModelForCausalLM.fromPretrained(dir) }
        assertTrue(e.message!!.contains("weight_map names the shard '../model-00001-of-00004.safetensors', not a file name beside the index"), e.message)
    }

    @Test
    fun `a wrong option is refused, naming it`() {
        val e = assertThrows<IllegalArgumentException> {
            AutoModelForCausalLM().buildTapes(listOf(File(testdata, "phi3-f32").path, "static=0"))
        }
        assertEquals("AutoModelForCausalLM: static=<cache length> needs a positive number, not 'static=0'", e.message)
    }
}
