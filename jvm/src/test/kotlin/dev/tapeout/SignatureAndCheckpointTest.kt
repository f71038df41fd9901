package dev.tapeout

import dev.tapeout.ModelApiTest.Companion.writeSafetensors
import dev.tapeout.TestSupport.tempDir
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File

class SignatureAndCheckpointTest {
    @Test
    fun `arguments keep the order the tape declared them, and the signature file says so`() {
        val t = ExecutionTape()
        // Declared tokens, positions, mask; the model reads mask first, then positions, then tokens.
        val tokens = t.input("tokens", DYNAMIC.toInt(), 4)
        val positions = t.input("positions", DYNAMIC.toInt(), 4, dtype = DType.I32)
        val mask = t.input("mask", DYNAMIC.toInt(), 4)
        val a = t.neg(mask)
        val b = a + t.convert(positions, DType.F32)
        t.output("y", b + tokens)
        val graph = t.toComputeGraph()
        assertEquals(listOf("tokens", "positions", "mask"), graph.inputs)
        val dir = tempDir("tapeout-sig")
        val r = graph.export(dir, "sig")
        assertEquals(File(dir, "sig.signature.json").absolutePath, r.signature.absolutePath)
        val sig = ModuleSignature.read(r.signature)
        assertEquals("sig", sig.module)
        val main = sig.function("main")
        assertEquals(listOf(SignatureValue("tokens", "f32", listOf(DYNAMIC, 4L)), SignatureValue("positions", "i32", listOf(DYNAMIC, 4L)),
            SignatureValue("mask", "f32", listOf(DYNAMIC, 4L))), main.arguments)
        assertEquals(listOf(SignatureValue("y", "f32", listOf(DYNAMIC, 4L))), main.results)
        assertEquals(1, main.argumentIndex("positions"))
        assertEquals(DType.I32, main.arguments[1].dtypeOrNull)
        // The module agrees: tokens is %arg0.
        val text = r.mlir.readText()
        assertTrue(text.indexOf("tapeout.name = \"tokens\"") < text.indexOf("tapeout.name = \"positions\""), text)
        val e = assertThrows<IllegalArgumentException> { main.argumentIndex("ids") }
        assertTrue(e.message!!.contains("no argument 'ids'") && e.message!!.contains("[tokens, positions, mask]"), e.message)
        assertTrue(dir.list()!!.none { it.contains(".tmp") }, dir.list()!!.toList().toString())
        dir.deleteRecursively()
    }

    @Test
    fun `a module of several functions has one signature entry each`() {
        fun tape(seq: Int): ExecutionTape {
            val t = ExecutionTape()
            val ids = t.input("tokens", seq, dtype = DType.I32)
            val pos = t.input("positions", seq, dtype = DType.I32)
            t.output("out", t.convert(pos, DType.F32) + t.convert(ids, DType.F32))
            return t
        }
        val dir = tempDir("tapeout-sig-module")
        val r = exportModule(dir, "lm", mapOf("prefill" to tape(6), "decode" to tape(1)))
        val sig = ModuleSignature.read(r.signature)
        assertEquals(listOf("prefill", "decode"), sig.functions.map { it.name })
        assertEquals(listOf("tokens", "positions"), sig.function("decode").arguments.map { it.name })
        assertEquals(listOf(1L), sig.function("decode").arguments[0].shape)
        dir.deleteRecursively()
    }

    @Test
    fun `a bad signature file is refused naming the file and the key`() {
        val e = assertThrows<JsonFileException> {
            ModuleSignature.parse("""{"format":"tapeout-signature/1","module":"m","functions":[{"name":"main","arguments":[{"name":"x","dtype":"f32","shape":[2,"x"]}],"results":[]}]}""", "m.signature.json")
        }
        assertTrue(e.message!!.contains("m.signature.json") && e.message!!.contains("'functions[0].arguments[0].shape'"), e.message)
        val f = assertThrows<JsonFileException> { ModuleSignature.parse("""{"format":"other/2"}""", "m.signature.json") }
        assertTrue(f.message!!.contains("'other/2'"), f.message)
    }

    @Test
    fun `a Hugging Face config reads with typed getters and nested objects`() {
        val dir = tempDir("tapeout-config")
        val file = File(dir, "config.json")
        file.writeText("""
            {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 256,
             "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
             "max_position_embeddings": 2048, "eos_token_id": [1, 2], "attention_bias": false,
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}}
        """.trimIndent())
        val c = HfConfig.read(file)
        assertEquals("llama", c.modelType)
        assertEquals(64, c.hiddenSize); assertEquals(8, c.numAttentionHeads); assertEquals(2, c.numKeyValueHeads)
        assertEquals(8, c.headDim, "hidden_size / num_attention_heads when head_dim is absent")
        assertEquals(1e-5, c.rmsNormEps); assertEquals(500000.0, c.ropeTheta); assertFalse(c.tieWordEmbeddings)
        assertEquals(listOf("LlamaForCausalLM"), c.strings("architectures")); assertEquals(listOf(1, 2), c.ints("eos_token_id"))
        val s = c.ropeScaling!!
        assertEquals("llama3", s.string("rope_type")); assertEquals(8.0, s.double("factor"))
        assertEquals(1.0, s.double("low_freq_factor"), "an integer reads as a number"); assertEquals(8192, s.int("original_max_position_embeddings"))
        assertEquals(c.hiddenSize, HfConfig.read(dir).hiddenSize, "a directory reads its config.json")

        val missing = assertThrows<JsonFileException> { s.double("beta") }
        assertTrue(missing.message!!.contains(file.path) && missing.message!!.contains("'rope_scaling.beta'"), missing.message)
        val wrong = assertThrows<JsonFileException> { c.int("torch_dtype") }
        assertTrue(wrong.message!!.contains("'torch_dtype' is a string (\"bfloat16\"), not an integer"), wrong.message)
        assertEquals(10000.0, HfConfig.parse("""{"rope_scaling": null}""").ropeTheta)
        assertNull(HfConfig.parse("""{"rope_scaling": null}""").ropeScaling)
        // transformers 5 writes RoPE under `rope_parameters` (theta included) and `dtype` for `torch_dtype`.
        val v5 = HfConfig.parse("""{"dtype": "bfloat16", "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}}""")
        assertEquals(1e6, v5.ropeTheta); assertNull(v5.ropeScaling, "rope_type default is no scaling"); assertEquals("bfloat16", v5.torchDtype)
        val v5llama3 = HfConfig.parse("""{"rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0}}""")
        assertEquals(500000.0, v5llama3.ropeTheta); assertEquals(8.0, v5llama3.ropeScaling!!.double("factor"))
        assertEquals(RopeScaling.Llama3(8.0, 1.0, 4.0, 8192), c.rotaryScaling(), "transformers 4: rope_scaling")
        assertEquals(RopeScaling.None, v5.rotaryScaling())
        assertEquals(RopeScaling.None, HfConfig.parse("{}").rotaryScaling())
        val v5l3 = HfConfig.parse("""{"rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}""")
        assertEquals(RopeScaling.Llama3(8.0, 1.0, 4.0, 8192), v5l3.rotaryScaling(), "transformers 5: rope_parameters")
        assertEquals(RopeScaling.Linear(2.0), HfConfig.parse("""{"rope_theta": 1e4, "rope_scaling": {"type": "linear", "factor": 2}}""").rotaryScaling())
        // Gemma 3 nests them by layer type: read per type, and refused without one (never the 10000 default).
        val gemma3 = HfConfig.parse("""{"rope_parameters": {"full_attention": {"rope_theta": 1000000.0, "rope_type": "linear",
            "factor": 8.0}, "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}}""")
        assertEquals(listOf("full_attention", "sliding_attention"), gemma3.ropeLayerTypes)
        assertEquals(1e6, gemma3.ropeTheta("full_attention")); assertEquals(1e4, gemma3.ropeTheta("sliding_attention"))
        assertEquals(RopeScaling.Linear(8.0), gemma3.rotaryScaling("full_attention"))
        assertEquals(RopeScaling.None, gemma3.rotaryScaling("sliding_attention"))
        for (read in listOf<() -> Any?>({ gemma3.ropeTheta }, { gemma3.ropeScaling }, { gemma3.rotaryScaling() })) {
            val nested = assertThrows<JsonFileException> { read() }
            assertTrue(nested.message!!.contains("nested by layer type (full_attention, sliding_attention)"), nested.message)
        }
        val unknown = assertThrows<JsonFileException> { gemma3.ropeTheta("chunked_attention") }
        assertTrue(unknown.message!!.contains("no 'chunked_attention'"), unknown.message)
        assertEquals(emptyList<String>(), v5.ropeLayerTypes)
        val noLow = assertThrows<JsonFileException> { v5llama3.rotaryScaling() }
        assertTrue(noLow.message!!.contains("'rope_parameters.low_freq_factor'"), noLow.message)
        val yarn = assertThrows<JsonFileException> { HfConfig.parse("""{"rope_scaling": {"rope_type": "yarn", "factor": 4}}""", "y.json").rotaryScaling() }
        assertTrue(yarn.message!!.contains("y.json: rope_type 'yarn' is not modelled"), yarn.message)
        val bad = assertThrows<JsonFileException> { HfConfig.parse("""{"a": [1, 2""", "cfg.json") }
        assertTrue(bad.message!!.contains("cfg.json is not valid JSON"), bad.message)
        dir.deleteRecursively()
    }

    class Net : Module() {
        val fc = child("fc", Linear(4, 3))
        val extra = child("extra", Linear(4, 4, bias = false))
        operator fun invoke(x: Tensor) = fc(x)
    }

    /** A tied LM head: `head.weight` is `emb.weight`, so nothing needs to bind it. */
    class TiedNet : Module() {
        val emb = child("emb", Embedding(8, 4))
        val head = child("head", Linear(4, 8, bias = false).tieTo(emb))
    }

    @Test
    fun `an input, a weight or a result given as an output keeps its own name and the result gets the new one`() {
        val t = ExecutionTape()
        val x = t.input("x", 2, 3)
        val w = t.weight("w", FloatArray(6) { it.toFloat() }, 2, 3)
        val weightName = w.name
        val y = t.output("y", x)
        assertEquals("x", x.name)
        val z = t.output("z", x + w)
        t.output("z_again", z)
        t.output("w_out", w)
        assertEquals(weightName, w.name)
        assertEquals("w", w.path)
        assertEquals(listOf("y", "z", "z_again", "w_out"), t.outputs.map { it.name })
        assertTrue(y !== x)
        val e = assertThrows<GraphValidationException> { t.output("x", x) }
        assertTrue(e.message!!.contains("already this tensor's own"), e.message)
        val dir = tempDir("tapeout-sig-pass-through")
        val r = t.toComputeGraph().export(dir, "pass")
        val main = ModuleSignature.read(r.signature).function("main")
        assertEquals(listOf("x"), main.arguments.map { it.name })
        assertEquals(listOf("y", "z", "z_again", "w_out"), main.results.map { it.name })
        dir.deleteRecursively()
    }

    @Test
    fun `after tracing, unread checkpoint tensors and unbound parameters are warned about`() {
        val dir = tempDir("tapeout-ckpt-report")
        val file = File(dir, "m.safetensors")
        writeSafetensors(file, mapOf("fc.weight" to FloatArray(12), "fc.bias" to FloatArray(3), "head.weight" to FloatArray(8)),
            mapOf("fc.weight" to longArrayOf(3, 4), "fc.bias" to longArrayOf(3), "head.weight" to longArrayOf(2, 4)), emptyMap())
        val t = ExecutionTape().also { it.load(SafeTensors.open(file)) }
        t.output("y", Net()(t.input("x", 2, 4)))
        val report = t.checkpointReport()
        assertEquals(listOf("head.weight"), report.unusedTensors)
        assertEquals(listOf("extra.weight"), report.unboundParameters)
        val r = t.toComputeGraph().export(dir, "net")
        assertEquals(2, r.warnings.size, r.warnings.toString())
        assertTrue(r.warnings[0].contains("never read") && r.warnings[0].contains("head.weight"), r.warnings[0])
        assertTrue(r.warnings[1].contains("extra.weight") && r.warnings[1].contains("no values"), r.warnings[1])

        // Everything read and bound: no warning.
        val clean = ExecutionTape()
        val fc = Linear(4, 3).also { it.bind("weight", FloatArray(12)).bind("bias", FloatArray(3)) }
        clean.output("y", fc(clean.input("x", 2, 4)))
        assertTrue(clean.checkpointReport().warnings.isEmpty())
        assertEquals("CheckpointReport(no checkpoint was loaded)", clean.checkpointReport().toString())

        // Declared, unbound, and no checkpoint at all.
        val none = ExecutionTape()
        val net = Net()
        net.fc.bind("weight", FloatArray(12)).bind("bias", FloatArray(3))
        none.output("y", net(none.input("x", 2, 4)))
        assertTrue(none.checkpointReport().warnings.single().contains("no checkpoint was loaded"), none.checkpointReport().warnings.toString())

        // A tied parameter takes its values from the one it is tied to: not unbound.
        val tied = ExecutionTape()
        val tn = TiedNet().also { it.emb.bind("weight", FloatArray(32)) }
        tied.output("y", tn.head(tn.emb(tied.input("ids", 2, dtype = DType.I32))))
        assertEquals(emptyList<String>(), tied.checkpointReport().unboundParameters)
        dir.deleteRecursively()
    }

    @Test
    fun `a missing key suggests the most similar names, not every name with its ending`() {
        val keys = listOf("model.norm.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.self_attn.k_proj.weight", "lm_head.weight", "model.layers.1.self_attn.q_proj.weight")
        val near = similarKeys("model.layers.0.attn.q_proj.weight", keys)
        assertEquals("model.layers.0.self_attn.q_proj.weight", near.first(), near.toString())
        assertFalse("model.norm.weight" in near.take(3), near.toString())
        assertEquals(listOf("model.layers.0.self_attn.q_proj.weight"), similarKeys("layers.0.self_attn.q_proj.weight", keys, limit = 1))
        assertTrue(similarKeys("completely.different", keys).isEmpty())

        val t = ExecutionTape()
        val e = assertThrows<GraphValidationException> { t.param("fc.weight") }
        assertTrue(e.message!!.contains("no checkpoint was loaded"), e.message)
        val dir = tempDir("tapeout-ckpt-near")
        val file = File(dir, "m.safetensors")
        writeSafetensors(file, keys.associateWith { FloatArray(1) }, keys.associateWith { longArrayOf(1) }, emptyMap())
        t.load(SafeTensors.open(file))
        val e2 = assertThrows<GraphValidationException> { t.param("model.layers.0.attn.q_proj.weight") }
        assertTrue(e2.message!!.contains("the most similar keys: [model.layers.0.self_attn.q_proj.weight"), e2.message)
        val e3 = assertThrows<NoSuchElementException> { SafeTensors.open(file)["model.layers.0.attn.q_proj.weight"] }
        assertTrue(e3.message!!.contains("the most similar: [model.layers.0.self_attn.q_proj.weight"), e3.message)
        dir.deleteRecursively()
    }
}
