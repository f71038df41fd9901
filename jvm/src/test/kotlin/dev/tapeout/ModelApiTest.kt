package dev.tapeout

import dev.tapeout.TestSupport.readBytes
import dev.tapeout.TestSupport.readF32
import dev.tapeout.TestSupport.tempDir
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.ByteArrayOutputStream
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder

/** A Llama-shaped module tree, named as Hugging Face's `LlamaForCausalLM` names its modules. */
private class TinyDecoder(val vocab: Int, val dim: Int, val ffn: Int, layers: Int) : Module() {
    class Attention(dim: Int) : Module() {
        val qProj = child("q_proj", Linear(dim, dim, bias = false))
        val kProj = child("k_proj", Linear(dim, dim, bias = false))
        val vProj = child("v_proj", Linear(dim, dim, bias = false))
        val oProj = child("o_proj", Linear(dim, dim, bias = false))
    }

    class Mlp(dim: Int, ffn: Int) : Module() {
        val gateProj = child("gate_proj", Linear(dim, ffn, bias = false))
        val upProj = child("up_proj", Linear(dim, ffn, bias = false))
        val downProj = child("down_proj", Linear(ffn, dim, bias = false))
        operator fun invoke(x: Tensor): Tensor = downProj(x.tape.silu(gateProj(x)) * upProj(x))
    }

    class Layer(dim: Int, ffn: Int) : Module() {
        val selfAttn = child("self_attn", Attention(dim))
        val mlp = child("mlp", Mlp(dim, ffn))
        val inputLayernorm = child("input_layernorm", RMSNorm(dim))
        val postAttentionLayernorm = child("post_attention_layernorm", RMSNorm(dim))
    }

    class Model(vocab: Int, dim: Int, ffn: Int, layers: Int) : Module() {
        val embedTokens = child("embed_tokens", Embedding(vocab, dim))
        val layers = child("layers", ModuleList(List(layers) { Layer(dim, ffn) }))
        val norm = child("norm", RMSNorm(dim))
    }

    val model = child("model", Model(vocab, dim, ffn, layers))
    val lmHead = child("lm_head", Linear(dim, vocab, bias = false)).tieTo(model.embedTokens)

    /** A forward pass without attention (the keys are the point): embed, each layer's v/o projections and MLP, head. */
    fun forward(ids: Tensor): Tensor {
        var h = model.embedTokens(ids)
        for (l in model.layers) {
            val x = l.inputLayernorm(h)
            h = h + l.selfAttn.oProj(l.selfAttn.vProj(x))
            h = h + l.mlp(l.postAttentionLayernorm(h))
        }
        return lmHead(model.norm(h))
    }
}

/** The Kotlin API for real models: modules and keys, layouts, operators, names, dtypes, checkpoints, error sites. */
class ModelApiTest {
    /** The line after the one that calls it. */
    private fun nextLine(): Int = Throwable().stackTrace[1].lineNumber + 1

    @Test
    fun `each operator records the same graph as the explicit call`() {
        fun build(operators: Boolean): String {
            val t = ExecutionTape(captureSites = false)
            val x = t.input("x", 2, 4)
            val y = t.input("y", 2, 4)
            val w = t.weight("w", FloatArray(16) { it * 0.1f }, 4, 4)
            val r = if (operators) {
                listOf(x + y, x - y, x * y, x / y, -x, x * 0.5f, 2 * x, x matmul w, x + 1, 1 - x, x / 4, w.T, x.reshape(8), x.to(DType.BF16))
            } else {
                listOf(t.add(x, y), t.sub(x, y), t.mul(x, y), t.div(x, y), t.neg(x), t.mul(x, t.scalar(0.5)), t.mul(t.scalar(2.0), x),
                    t.matmul(x, w), t.add(x, t.scalar(1.0)), t.sub(t.scalar(1.0), x), t.div(x, t.scalar(4.0)), t.transpose(w),
                    t.reshape(x, 8L), t.convert(x, DType.BF16))
            }
            t.output(*r.toTypedArray())
            return t.toGraphJson("m")
        }
        val explicit = build(false)
        assertEquals(explicit, build(true))
        assertTrue(explicit.contains("\"op\":\"mul\"") && explicit.contains("scalar.0"), explicit)
    }

    @Test
    fun `a scalar is an inline constant of the tensor's dtype`() {
        val t = ExecutionTape()
        val x = t.input("x", 3, dtype = DType.BF16)
        t.output("y", x * 0.5f + x)
        val text = t.toComputeGraph().toStableHlo(MaterializationPolicy.ExternalAlways())
        assertTrue(text.contains("stablehlo.constant dense<\"0x003F\"> : tensor<bf16>"), text)
        assertTrue("util.global" !in text, "a scalar is never a parameter: $text")
    }

    @Test
    fun `module keys are the names PyTorch's state_dict gives the same tree`() {
        val m = TinyDecoder(vocab = 16, dim = 8, ffn = 12, layers = 2)
        val layer = { i: Int ->
            listOf("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                "mlp.down_proj", "input_layernorm", "post_attention_layernorm").map { "model.layers.$i.$it.weight" }
        }
        // What `LlamaForCausalLM(config).state_dict().keys()` lists for this config (tied: lm_head.weight is listed too).
        val expected = listOf("model.embed_tokens.weight") + layer(0) + layer(1) + listOf("model.norm.weight", "lm_head.weight")
        assertEquals(expected, m.stateDictKeys())
        assertEquals("model.layers.1.self_attn", m.model.layers[1].selfAttn.path)
    }

    @Test
    fun `a module tree reads its parameters from a checkpoint by key, the tied head one entry`() {
        val m = TinyDecoder(vocab = 16, dim = 8, ffn = 12, layers = 2)
        val values = LinkedHashMap<String, FloatArray>()
        val shapes = LinkedHashMap<String, LongArray>()
        var seed = 1
        fun add(key: String, vararg shape: Long) {
            shapes[key] = shape
            values[key] = FloatArray(shape.fold(1L) { a, d -> a * d }.toInt()) { ((seed++ * 7919) % 1000) / 1000f - 0.5f }
        }
        add("model.embed_tokens.weight", 16, 8)
        for (i in 0 until 2) {
            for (p in listOf("q", "k", "v", "o")) add("model.layers.$i.self_attn.${p}_proj.weight", 8, 8)
            add("model.layers.$i.mlp.gate_proj.weight", 12, 8); add("model.layers.$i.mlp.up_proj.weight", 12, 8)
            add("model.layers.$i.mlp.down_proj.weight", 8, 12)
            add("model.layers.$i.input_layernorm.weight", 8); add("model.layers.$i.post_attention_layernorm.weight", 8)
        }
        add("model.norm.weight", 8)
        val dir = tempDir("tapeout-ckpt")
        val file = File(dir, "model.safetensors")
        writeSafetensors(file, values, shapes, mapOf("format" to "pt"))

        val ckpt = SafeTensors.open(file)
        assertEquals("pt", ckpt.metadata["format"])
        assertEquals(values.keys.toList(), ckpt.tensors.keys.toList())
        val t = ExecutionTape()
        t.load(ckpt)
        t.output("logits", m.forward(t.input("ids", 5, dtype = DType.I32)))
        val graph = t.toComputeGraph()
        // Every weight a constant under its state_dict key; the head reads the embedding: no lm_head entry.
        assertEquals(values.keys - setOf("model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
            "model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight"), graph.constants.map { it.key }.toSet())
        assertEquals(listOf("ids"), graph.inputs)
        val r = graph.export(dir, "tiny", MaterializationPolicy.ExternalAlways())
        assertEquals(0L, r.pins, "no JVM array was lent: the weights came from the file")
        val text = r.mlir.readText()
        assertTrue(text.contains("tapeout.name = \"logits\""), "the result is named")
        // Linear weights [out, in] are stored [in, out]: the module contracts them as stored, with no transpose
        // of a weight (the only transposes are of the small gathered activations of the tied table).
        val down = readF32(r.irpa, "model.layers.1.mlp.down_proj.weight", 0, 8)
        val held = values.getValue("model.layers.1.mlp.down_proj.weight")
        assertArrayEquals(FloatArray(8) { held[it * 12] }, down, "column 0 of down_proj [8, 12] is row 0 of the entry")
        assertEquals(1, Regex("stablehlo.transpose").findAll(text).count(), text)
        dir.deleteRecursively()
    }

    @Test
    fun `linear contracts an out-in weight with no transpose in the module (snapshot)`() {
        val t = ExecutionTape()
        val x = t.input("x", 2, 4)
        val w = t.weight("fc.weight", FloatArray(3 * 4) { it.toFloat() }, 3, 4)
        val b = t.weight("fc.bias", FloatArray(3) { 0.5f }, 3)
        t.output("y", t.linear(x, w, b))
        val text = t.toComputeGraph().toStableHlo(MaterializationPolicy.ExternalAlways(), name = "linear")
        assertTrue("stablehlo.transpose" !in text, text)
        assertSnapshot("linear.mlir", text)
        assertEquals("transposed", t.toComputeGraph().constants.first { it.key == "fc.weight" }.kind)
    }

    @Test
    fun `scopes prefix weight keys`() {
        val t = ExecutionTape()
        val x = t.input("x", 2, 4)
        val y = t.scope("model") {
            scope("layers.3") {
                assertEquals("model.layers.3", currentScope)
                linear(x, weight("q_proj.weight", FloatArray(16), 4, 4))
            }
        }
        t.output(y)
        assertEquals(listOf("model.layers.3.q_proj.weight"), t.toComputeGraph().constants.map { it.key })
    }

    @Test
    fun `shape errors name the op, the tensors and the model's line`() {
        val t = ExecutionTape()
        val x = t.input("x", 2, 64)
        val w = t.weight("model.fc.weight", FloatArray(10 * 64), 10, 64)
        val line = nextLine()
        val e = assertThrows<GraphValidationException> { t.matmul(x, w) }
        val msg = e.message!!
        for (needle in listOf("matmul at ModelApiTest.kt:$line", "'x' [2, 64]", "'model.fc.weight' [10, 64]", "use linear(x, w)")) {
            assertTrue(msg.contains(needle), "$needle missing from: $msg")
        }
        val line2 = nextLine()
        val e2 = assertThrows<GraphValidationException> { x + t.input("z", 3) }
        assertTrue(e2.message!!.contains("add at ModelApiTest.kt:$line2") && e2.message!!.contains("do not broadcast"), e2.message)
    }

    @Test
    fun `errors found at finalize and export name the line that recorded the node or weight`() {
        val t = ExecutionTape()
        val a = t.input("a", 2, 3)
        val line = nextLine()
        t.output(t.record("add", listOf(a, t.input("b", 4)), longArrayOf(2, 3), DType.F32))
        val e = assertThrows<GraphValidationException> { t.toComputeGraph() }
        assertTrue(e.message!!.contains("node 0 (add) was recorded at ModelApiTest.kt:$line"), e.message)

        val t2 = ExecutionTape()
        val wline = nextLine()
        val q = t2.packedWeight("model.q.weight", ByteArray(34 * 3), "Q8_0", 4, 24)
        t2.output(t2.linear(t2.input("x", 2, 24), q))
        val e2 = assertThrows<PackedConstantException> { t2.toComputeGraph() }
        assertTrue(e2.message!!.contains("'model.q.weight' was recorded at ModelApiTest.kt:$wline"), e2.message)
        assertEquals(Remedy.DEQUANTIZE, e2.remedy, "the remedy survives")
    }

    @Test
    fun `an output name must be free`() {
        val t = ExecutionTape()
        val x = t.input("x", 2)
        t.output("y", -x)
        val e = assertThrows<GraphValidationException> { t.output("x", x * 2) }
        assertTrue(e.message!!.contains("the name 'x' is already 'x'"), e.message)
    }

    @Test
    fun `bf16 activations with bf16 weights compute in bf16`() {
        val t = ExecutionTape()
        val x = t.input("x", 2, 4, dtype = DType.BF16)
        val w = t.halfWeight("fc.weight", ShortArray(12) { bf16Bits(it * 0.25f) }, DType.BF16, 3, 4)
        val y = t.linear(x, w) * 2
        assertEquals(DType.BF16, y.dtype)
        t.output("y", y)
        val g = t.toComputeGraph()
        assertEquals("transposed", g.constants.single { it.key == "fc.weight" }.kind)
        val text = g.toStableHlo(MaterializationPolicy.ExternalAlways())
        assertTrue(text.contains("tensor<4x3xbf16>") && "stablehlo.convert" !in text, text)
        assertTrue(Regex("stablehlo.dot_general .*-> tensor<2x3xbf16>").containsMatchIn(text), text)

        // The default f32 tape: the same weight read by an f32 op is converted in the module.
        val t2 = ExecutionTape()
        val y2 = t2.linear(t2.input("x", 2, 4), t2.halfWeight("fc.weight", ShortArray(12), DType.BF16, 3, 4))
        assertEquals(DType.F32, y2.dtype)
        t2.output(y2)
        assertTrue(t2.toComputeGraph().toStableHlo(MaterializationPolicy.ExternalAlways()).contains("stablehlo.convert"))

        // One weight, one type: seen as bf16 by one op and f32 by another is refused, naming the weight.
        val t3 = ExecutionTape()
        val w3 = t3.halfWeight("w", ShortArray(4), DType.BF16, 4)
        t3.input("a", 4, dtype = DType.BF16) + w3
        val e = assertThrows<GraphValidationException> { t3.input("b", 4) + w3 }
        assertTrue(e.message!!.contains("already used as bf16") && e.message!!.contains("'w'"), e.message)
    }

    @Test
    fun `GGUF tensors arrive packed, with the file's metadata`() {
        val dir = tempDir("tapeout-gguf")
        val file = File(dir, "m.gguf")
        // Q8_0 [4 rows, 32]: scale 0.5 (f16 0x3800), codes i - 16; and an f32 bias [4].
        val block = ByteArray(34).also { it[0] = 0x00; it[1] = 0x38; for (i in 0 until 32) it[2 + i] = (i - 16).toByte() }
        writeGguf(file, mapOf("general.architecture" to "tiny", "tiny.block_count" to 2),
            listOf(GgufEntry("blk.0.w", longArrayOf(4, 32), 8, ByteArray(34 * 4) { block[it % 34] }),
                GgufEntry("blk.0.b", longArrayOf(4), 0, f32Bytes(FloatArray(4) { it.toFloat() }))))
        val g = Gguf.open(file)
        assertEquals("tiny", g.metadata["general.architecture"])
        assertEquals(2L, g.metadata["tiny.block_count"])
        assertEquals("Q8_0", g["blk.0.w"].encoding)
        assertArrayEquals(longArrayOf(4, 32), g["blk.0.w"].shape)
        val e = assertThrows<IllegalArgumentException> { SafeTensors.open(file) }
        assertTrue(e.message!!.contains("is a gguf file"), e.message)

        val t = ExecutionTape()
        t.output(t.linear(t.input("x", 2, 32), t.weight("w", g["blk.0.w"]), t.weight("b", g["blk.0.b"])))
        assertThrows<PackedConstantException> { t.toComputeGraph() }
        val r = t.toComputeGraph(packedConstants = PackedConstantHandling.DEQUANTIZE).export(dir, "q", MaterializationPolicy.ExternalAlways())
        assertEquals(0L, r.pins)
        // Stored transposed [32, 4]: element (k, n) is W[n, k] = (k - 16) * 0.5.
        assertArrayEquals(FloatArray(8) { ((it / 4) - 16) * 0.5f }, readF32(r.irpa, "w", 0, 8))
        assertArrayEquals(f32Bytes(FloatArray(4) { it.toFloat() }), readBytes(r.irpa, "b", 0, 16))
        // KEEP: the file's blocks become planes (codes and scales), read from the mapping.
        val kept = t.toComputeGraph(packedConstants = PackedConstantHandling.KEEP)
        assertEquals(setOf("w.qs", "w.d", "b"), kept.constants.map { it.key }.toSet())
        assertEquals(0L, kept.export(dir, "k", MaterializationPolicy.ExternalAlways()).pins)
        dir.deleteRecursively()
    }

    @Test
    fun `a renamed checkpoint gives a module keyed by other names the file's tensors`() {
        val dir = tempDir("tapeout-gguf-renamed")
        val file = File(dir, "m.gguf")
        val table = FloatArray(12) { it * 0.25f - 1f }
        val gamma = floatArrayOf(0.5f, 2f, -1f)
        writeGguf(file, mapOf("general.architecture" to "tiny"),
            listOf(GgufEntry("token_embd.weight", longArrayOf(4, 3), 0, f32Bytes(table)),
                GgufEntry("output_norm.weight", longArrayOf(3), 0, f32Bytes(gamma)),
                GgufEntry("rope_freqs.weight", longArrayOf(2), 0, f32Bytes(FloatArray(2)))))
        class Net : Module() {
            val embed = child("embed_tokens", Embedding(4, 3))
            val norm = child("norm", RMSNorm(3))
        }
        val g = Gguf.open(file)
        val keys = mapOf("embed_tokens.weight" to "token_embd.weight", "norm.weight" to "output_norm.weight")
        val r = g.renamed(keys)
        assertEquals(listOf("embed_tokens.weight", "norm.weight", "rope_freqs.weight"), r.tensors.keys.toList())
        // Same regions of the same file; each tensor keeps the file's name.
        assertEquals(g["token_embd.weight"].offset, r["embed_tokens.weight"].offset)
        assertEquals("output_norm.weight", r["norm.weight"].name)
        assertEquals(g.metadata, r.metadata)

        val net = Net()
        val t = ExecutionTape().also { it.load(r) }
        t.output("y", net.norm(net.embed(t.input("ids", 2, dtype = DType.I32))))
        val report = t.checkpointReport()
        assertEquals(listOf("rope_freqs.weight"), report.unusedTensors)
        assertEquals(emptyList<String>(), report.unboundParameters)
        val out = t.toComputeGraph().export(dir, "m", MaterializationPolicy.ExternalAlways())
        // The archive holds the file's values under the module's keys.
        assertArrayEquals(table, readF32(out.irpa, "embed_tokens.weight", 0, 12))
        assertArrayEquals(gamma, readF32(out.irpa, "norm.weight", 0, 3))

        val missing = assertThrows<NoSuchElementException> { g.renamed(mapOf("norm.weight" to "output_nrom.weight")) }
        assertTrue(missing.message!!.contains("no tensor 'output_nrom.weight'") && missing.message!!.contains("output_norm.weight"), missing.message)
        val twice = assertThrows<IllegalArgumentException> { g.renamed(mapOf("a" to "token_embd.weight", "b" to "token_embd.weight")) }
        assertTrue(twice.message!!.contains("'token_embd.weight' is given two keys"), twice.message)
        val clash = assertThrows<IllegalArgumentException> { g.renamed(mapOf("rope_freqs.weight" to "output_norm.weight")) }
        assertTrue(clash.message!!.contains("'rope_freqs.weight' would name two tensors"), clash.message)
        dir.deleteRecursively()
    }

    @Test
    fun `a checkpoint that does not fit the module says which key and shape`() {
        val dir = tempDir("tapeout-ckpt-bad")
        val file = File(dir, "m.safetensors")
        writeSafetensors(file, mapOf("fc.weight" to FloatArray(12)), mapOf("fc.weight" to longArrayOf(4, 3)), emptyMap())
        class Net : Module() { val fc = child("fc", Linear(4, 3)) }
        val t = ExecutionTape().also { it.load(SafeTensors.open(file)) }
        val line = nextLine()
        val e = assertThrows<GraphValidationException> { Net().fc(t.input("x", 2, 4)) }
        val msg = e.message!!
        assertTrue(msg.contains("'fc.weight' [4, 3] f32") && msg.contains("expects shape [3, 4]") && msg.contains("ModelApiTest.kt:$line"), msg)
        val e2 = assertThrows<GraphValidationException> { t.param("fc.bias") }
        assertTrue(e2.message!!.contains("no checkpoint given to load() has a tensor 'fc.bias'"), e2.message)
        dir.deleteRecursively()
    }

    @Test
    fun `several tapes export as one module whose functions share the weights`() {
        val emb = FloatArray(10 * 4) { it * 0.1f }
        val w = FloatArray(8 * 4) { it * 0.01f }
        fun tape(seq: Int): ExecutionTape {
            val t = ExecutionTape()
            val ids = t.input("tokens", seq, dtype = DType.I32)
            val h = t.embedding(t.weight("model.embed.weight", emb, 10, 4), ids)
            t.output("logits", t.linear(h, t.weight("model.proj.weight", w, 8, 4)))
            return t
        }
        val dir = tempDir("tapeout-module")
        val r = exportModule(dir, "lm", mapOf("prefill" to tape(6), "decode" to tape(1)), policy = MaterializationPolicy.ExternalAlways())
        val text = r.mlir.readText()
        assertTrue(text.contains("func.func @prefill(") && text.contains("func.func @decode("), text)
        assertEquals(2, Regex("util.global private").findAll(text).count(), "one global per shared weight: $text")
        assertEquals(2, r.externals)
        assertArrayEquals(FloatArray(4) { w[it * 4] }, readF32(r.irpa, "model.proj.weight", 0, 4), "stored [in, out]")

        // One key, two different arrays: refused, naming the key and the functions.
        val other = ExecutionTape().also { t ->
            t.output(t.linear(t.input("x", 1, 4), t.weight("model.proj.weight", FloatArray(32), 8, 4)))
        }
        val e = assertThrows<GraphValidationException> { exportModule(dir, "bad", mapOf("prefill" to tape(6), "decode" to other)) }
        assertTrue(e.message!!.contains("parameter 'model.proj.weight' is one value in function 'prefill' and another in function 'decode'"), e.message)
        dir.deleteRecursively()
    }

    @Test
    fun `KEEP_ROW_BANDS refuses a weight one function gathers and another only multiplies, and KEEP takes it`() {
        // A tied Q8_0 table [32 rows, 32]: `embed` gathers its rows, `head` only multiplies by it. Bands would store
        // it one way for one function and another way for the other.
        val block = ByteArray(34).also { it[1] = 0x38; for (i in 0 until 32) it[2 + i] = (i - 16).toByte() }
        val table = ByteArray(34 * 32) { block[it % 34] }
        fun embed() = ExecutionTape().also { t ->
            t.output("h", t.embedding(t.packedWeight("model.embed.weight", table, "Q8_0", 32, 32), t.input("ids", 3, dtype = DType.I32)))
        }
        fun head() = ExecutionTape().also { t ->
            t.output("logits", t.linear(t.input("h", 1, 32), t.packedWeight("model.embed.weight", table, "Q8_0", 32, 32)))
        }
        val dir = tempDir("tapeout-bands-mix")
        val e = assertThrows<GraphValidationException> {
            exportModule(dir, "mix", mapOf("embed" to embed(), "head" to head()), packedConstants = PackedConstantHandling.KEEP_ROW_BANDS)
        }
        assertTrue(e.message!!.contains("the codes 'model.embed.weight.qs' are in row bands in function 'head' and in block rows " +
            "in function 'embed'"), e.message)
        assertEquals(Remedy.BLOCK_ROW_CODES, e.remedy)
        assertEquals("model.embed.weight.qs", e.tensor)
        assertTrue(e.message!!.endsWith("; keep the codes in block rows: pass packedConstants = PackedConstantHandling.KEEP, " +
            "not KEEP_ROW_BANDS"), e.message)
        val kept = exportModule(dir, "mix", mapOf("embed" to embed(), "head" to head()), packedConstants = PackedConstantHandling.KEEP)
        assertTrue(kept.mlir.readText().contains("func.func @head("))
        dir.deleteRecursively()
    }

    companion object {
        fun f32Bytes(v: FloatArray): ByteArray =
            ByteBuffer.allocate(v.size * 4).order(ByteOrder.LITTLE_ENDIAN).also { b -> v.forEach { b.putFloat(it) } }.array()

        /** A safetensors file (header JSON, then the tensors in order), written by hand. */
        fun writeSafetensors(file: File, values: Map<String, FloatArray>, shapes: Map<String, LongArray>, metadata: Map<String, String>) {
            var offset = 0L
            val entries = values.map { (k, v) ->
                val e = "${Json.quote(k)}:{\"dtype\":\"F32\",\"shape\":${shapes.getValue(k).joinToString(",", "[", "]")},\"data_offsets\":[$offset,${offset + v.size * 4}]}"
                offset += v.size * 4
                e
            }
            val meta = "\"__metadata__\":{" + metadata.entries.joinToString(",") { "${Json.quote(it.key)}:${Json.quote(it.value)}" } + "}"
            var header = "{" + (entries + meta).joinToString(",") + "}"
            while (header.length % 8 != 0) header += " "
            file.outputStream().buffered().use { out ->
                out.write(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(header.length.toLong()).array())
                out.write(header.toByteArray())
                values.values.forEach { out.write(f32Bytes(it)) }
            }
        }

        class GgufEntry(val name: String, val shape: LongArray, val ggmlType: Int, val bytes: ByteArray)

        /** A GGUF v3 file: string and u32 metadata, tensors aligned to 32 bytes. */
        fun writeGguf(file: File, metadata: Map<String, Any>, tensors: List<GgufEntry>) {
            val out = ByteArrayOutputStream()
            fun u32(v: Int) = out.write(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(v).array())
            fun u64(v: Long) = out.write(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(v).array())
            fun str(s: String) { val b = s.toByteArray(); u64(b.size.toLong()); out.write(b) }
            out.write("GGUF".toByteArray()); u32(3); u64(tensors.size.toLong()); u64(metadata.size.toLong())
            for ((k, v) in metadata) {
                str(k)
                when (v) {
                    is String -> { u32(8); str(v) }
                    is Int -> { u32(4); u32(v) }
                    else -> error("unsupported metadata $v")
                }
            }
            var offset = 0L
            for (t in tensors) {
                str(t.name); u32(t.shape.size); t.shape.reversed().forEach { u64(it) }; u32(t.ggmlType); u64(offset)
                offset += (t.bytes.size + 31) / 32 * 32
            }
            while (out.size() % 32 != 0) out.write(0)
            for (t in tensors) {
                out.write(t.bytes)
                while (out.size() % 32 != 0) out.write(0)
            }
            file.writeBytes(out.toByteArray())
        }

        /** Compares [text] with `jvm/src/test/snapshots/<name>`; `-Dtapeout.updateSnapshots=true` rewrites it for review. */
        fun assertSnapshot(name: String, text: String) {
            val file = File(System.getProperty("tapeout.repo"), "jvm/src/test/snapshots/$name")
            if (System.getProperty("tapeout.updateSnapshots") == "true" || System.getenv("TAPEOUT_UPDATE_SNAPSHOTS") == "1") {
                file.parentFile.mkdirs()
                file.writeText(text)
            }
            assertTrue(file.isFile, "no snapshot ${file.path}; run with TAPEOUT_UPDATE_SNAPSHOTS=1 and review it")
            assertEquals(file.readText(), text, "snapshot ${file.path} differs")
        }
    }
}
