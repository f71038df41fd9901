package dev.tapeout.examples.gemma

import dev.tapeout.DType
import dev.tapeout.ExecutionTape
import dev.tapeout.ModelProvider
import dev.tapeout.Tensor
import java.util.stream.IntStream
import kotlin.math.cos
import kotlin.math.exp
import kotlin.math.pow
import kotlin.math.sin
import kotlin.math.sqrt
import kotlin.math.tanh

/**
 * Dimensions of a Gemma 3n text decoder. [E2B] is Gemma 3n E2B's (≈ 4.46 B parameters: a 262144 × 2048 tied
 * embedding, a 262144 × 7680 per-layer embedding table, 30 layers); [TINY] is the same architecture small enough
 * for a test.
 */
class Config(
    val name: String, val vocab: Int, val hidden: Int, val layers: Int, val ffn: Int, val heads: Int, val kvHeads: Int,
    val headDim: Int, val perLayer: Int, val laurel: Int, val altup: Int, val tokens: IntArray,
) {
    companion object {
        val E2B = Config("e2b", 262144, 2048, 30, 8192, 8, 2, 256, 256, 64, 4, intArrayOf(2, 1000, 123456, 262143))
        val TINY = Config("tiny", 512, 64, 2, 128, 4, 2, 16, 8, 8, 4, intArrayOf(2, 17, 300, 511))
        /** [TINY] with every dimension a matrix is contracted or gathered along a multiple of 256 (Q4_K's block). */
        val TINY256 = Config("tiny256", 512, 256, 2, 512, 4, 2, 64, 256, 8, 4, intArrayOf(2, 17, 300, 511))
        /** [E2B] with GPT-2's odd vocabulary (50257 tokens): the tied table's packed planes have an odd row count. */
        val E2B_ODD = Config("e2b-odd", 50257, 2048, 30, 8192, 8, 2, 256, 256, 64, 4, intArrayOf(2, 1000, 12345, 50256))
        /** [TINY256] with an odd (prime) vocabulary, the last token among the inputs. */
        val TINY256_ODD = Config("tiny256-odd", 509, 256, 2, 512, 4, 2, 64, 256, 8, 4, intArrayOf(2, 17, 300, 508))

        fun named(name: String) = when (name) {
            "e2b" -> E2B
            "e2b-odd" -> E2B_ODD
            "tiny" -> TINY
            "tiny256" -> TINY256
            "tiny256-odd" -> TINY256_ODD
            else -> throw IllegalArgumentException("unknown config '$name' (e2b, e2b-odd, tiny, tiny256 or tiny256-odd)")
        }
    }

    val seq: Int get() = tokens.size
}

/**
 * Deterministic synthetic values, a pure function of (key, element index), so that a checker in another
 * language can recompute any element (tests/bench/gemma_scale.py does). Matrices are bf16 with a random sign and
 * a magnitude in `[2^e, 2^(e+1))`, `e = -ceil(log2(fan_in) / 2)`; vectors are f32 near 1.
 */
object Synth {
    /** FNV-1a 64 of the key's UTF-8 bytes. */
    fun seed(key: String): Long {
        var h = -0x340d631b7bdddcdbL // 0xcbf29ce484222325
        for (b in key.toByteArray()) h = (h xor (b.toLong() and 0xFF)) * 0x100000001b3L
        return h
    }

    fun mix(i: Long, seed: Long): Long {
        var z = i * -0x61c8864680b583ebL + seed // 0x9E3779B97F4A7C15
        z = (z xor (z ushr 30)) * -0x40a7b892e31b1a47L // 0xBF58476D1CE4E5B9
        return z xor (z ushr 27)
    }

    fun exponent(fanIn: Int): Int = -((32 - Integer.numberOfLeadingZeros(fanIn - 1)) + 1) / 2

    fun bf16(i: Long, seed: Long, e: Int): Short {
        val z = mix(i, seed)
        return (((z ushr 63).toInt() shl 15) or ((127 + e) shl 7) or ((z ushr 32).toInt() and 0x7F)).toShort()
    }

    fun near1(i: Long, seed: Long): Float = 1f + (((mix(i, seed) ushr 32).toInt() and 0x7F) - 64) / 512f

    /** Fills with both cores: the large tables take most of the model's build time. */
    fun matrix(key: String, n: Int, fanIn: Int): ShortArray {
        val s = seed(key); val e = exponent(fanIn)
        val out = ShortArray(n)
        val chunk = 1 shl 22
        IntStream.range(0, (n + chunk - 1) / chunk).parallel().forEach { c ->
            val end = minOf(n, (c + 1) * chunk)
            for (i in c * chunk until end) out[i] = bf16(i.toLong(), s, e)
        }
        return out
    }

    fun vector(key: String, n: Int): FloatArray { val s = seed(key); return FloatArray(n) { near1(it.toLong(), s) } }

    /**
     * Q4_K blocks for a `[rows, cols]` weight (blocks along `cols`), a pure function of (key, block index): `d = dmin =
     * 2^(e+1) / 60` (f16), sub-block scales 4..7 and mins `⌊7.5·scale⌋`, so values `d·sc·q − d·m` are spread evenly
     * in about `±2^(e+1) / 2` around zero; random 4-bit codes.
     */
    fun q4k(key: String, rows: Int, cols: Int, fanIn: Int): ByteArray {
        val blocks = rows.toLong() * cols / 256
        val out = ByteArray(Math.toIntExact(blocks * 144))
        val s = seed(key) xor 0x51_4b_5f_34L // "Q4K_"
        val d = toF16(Math.scalb(2f, exponent(fanIn)) / 60f)
        val chunk = 1 shl 14
        IntStream.range(0, ((blocks + chunk - 1) / chunk).toInt()).parallel().forEach { c ->
            val end = minOf(blocks, (c + 1L) * chunk)
            for (b in c.toLong() * chunk until end) {
                val at = Math.toIntExact(b * 144)
                val z = mix(b, s)
                out[at] = d.toByte(); out[at + 1] = (d.toInt() shr 8).toByte()
                out[at + 2] = d.toByte(); out[at + 3] = (d.toInt() shr 8).toByte()
                val sc = IntArray(8) { 4 + ((z ushr (2 * it)).toInt() and 3) }
                val mn = IntArray(8) { sc[it] * 15 / 2 }
                for (j in 0 until 4) {
                    out[at + 4 + j] = ((sc[j] and 63) or ((sc[j + 4] shr 4) shl 6)).toByte()
                    out[at + 8 + j] = ((mn[j] and 63) or ((mn[j + 4] shr 4) shl 6)).toByte()
                    out[at + 12 + j] = ((sc[j + 4] and 0xF) or ((mn[j + 4] and 0xF) shl 4)).toByte()
                }
                for (w in 0 until 16) {
                    val q = mix(b * 16 + w, s + 1)
                    for (k in 0 until 8) out[at + 16 + w * 8 + k] = (q ushr (8 * k)).toByte()
                }
            }
        }
        return out
    }

    /** A normal f32 in f16's normal range, rounded to nearest (the scales above; JDK 17 has no Float.floatToFloat16). */
    fun toF16(v: Float): Short {
        val bits = java.lang.Float.floatToIntBits(v)
        val exp = ((bits ushr 23) and 0xFF) - 127 + 15
        require(exp in 1..30) { "$v is outside f16's normal range" }
        val rounded = ((exp shl 10) or ((bits ushr 13) and 0x3FF)) + ((bits ushr 12) and 1)
        return (((bits ushr 16) and 0x8000) or rounded).toShort()
    }

    /** f16 bits to f32, exactly (normals, subnormals, zero; the generator makes no Inf/NaN). */
    fun fromF16(h: Int): Float {
        val sign = if (h and 0x8000 != 0) -1f else 1f
        val exp = (h ushr 10) and 0x1F; val mant = h and 0x3FF
        return sign * if (exp == 0) Math.scalb(mant.toFloat(), -24) else Math.scalb((1024 + mant).toFloat(), exp - 25)
    }

    /** Row `r` (`cols` values) of Q4_K blocks, decoded as gguf does (`d·sc`, `dmin·m` in f32, then `d1·q − m1`). */
    fun q4kRow(blocks: ByteArray, r: Int, cols: Int): DoubleArray {
        val out = DoubleArray(cols)
        val f16 = { at: Int -> fromF16((blocks[at].toInt() and 0xFF) or ((blocks[at + 1].toInt() and 0xFF) shl 8)) }
        for (blk in 0 until cols / 256) {
            val at = Math.toIntExact((r.toLong() * cols / 256 + blk) * 144)
            val d = f16(at); val dmin = f16(at + 2)
            val sb = IntArray(12) { blocks[at + 4 + it].toInt() and 0xFF }
            for (g in 0 until 4) {
                for (h in 0 until 2) {
                    val j = 2 * g + h
                    val sc = if (j < 4) sb[j] and 63 else (sb[j + 4] and 0xF) or ((sb[j - 4] shr 6) shl 4)
                    val m = if (j < 4) sb[j + 4] and 63 else (sb[j + 4] shr 4) or ((sb[j] shr 6) shl 4)
                    val d1 = d * sc; val m1 = dmin * m
                    for (l in 0 until 32) {
                        val byte = blocks[at + 16 + 32 * g + l].toInt() and 0xFF
                        val q = if (h == 0) byte and 0xF else byte shr 4
                        out[blk * 256 + 64 * g + 32 * h + l] = (d1 * q - m1).toDouble()
                    }
                }
            }
        }
        return out
    }
}

/**
 * One weight: its shape (`[in, out]` for a matrix) and its values, bf16 bits, f32, or Q4_K blocks: of the matrix
 * transposed, `[out, in]` (a linear layer in PyTorch's and GGML's layout), or of a gathered table as it is.
 */
class Param(val shape: LongArray, val bits: ShortArray?, val floats: FloatArray?, val q4k: ByteArray? = null, val table: Boolean = false) {
    val bytes: Long get() = q4k?.size?.toLong() ?: bits?.size?.toLong()?.times(2) ?: (floats!!.size.toLong() * 4)
}

/**
 * A synthetic model with Gemma 3n's text-decoder tensor shapes and keys, written with tapeout's tracing API.
 * The forward pass is simplified but uses every weight: token and per-layer embeddings (with the per-layer model
 * projection), AltUp projections, per layer RMSNorms, GQA attention with q/k norms and RoPE, LAuReL, a GELU MLP,
 * the per-layer input gate and projection and the AltUp router, and tied logits. [reference] computes the same
 * pass in float64 from the same arrays.
 */
class GemmaScale(
    val cfg: Config = Config.named(System.getProperty("gemma.config", "tiny")),
    /** `bf16` (default), or `q4k`: every matrix contracted or gathered along a multiple of 256 as Q4_K blocks. */
    val weights: String = System.getProperty("gemma.weights", "bf16"),
) : ModelProvider {
    /** The bf16 exponent `e` of each matrix (values in `±[2^e, 2^(e+1))`). */
    val exponents = HashMap<String, Int>()

    /** Every weight by key, largest first (so the JVM finds contiguous room for the big tables early). */
    val params: Map<String, Param> = buildParams()

    private fun buildParams(): Map<String, Param> {
        val c = cfg
        val specs = ArrayList<Triple<String, LongArray, Int>>() // key, shape, fan-in (0: f32 vector)
        fun m(key: String, rows: Int, cols: Int, fanIn: Int = rows) = specs.add(Triple(key, longArrayOf(rows.toLong(), cols.toLong()), fanIn))
        fun v(key: String, n: Int) = specs.add(Triple(key, longArrayOf(n.toLong()), 0))
        m("model.embed_tokens_per_layer.weight", c.vocab, c.layers * c.perLayer, c.hidden)
        m("model.embed_tokens.weight", c.vocab, c.hidden, c.hidden)
        m("model.per_layer_model_projection.weight", c.hidden, c.layers * c.perLayer)
        v("model.per_layer_projection_norm.weight", c.perLayer)
        for (i in 0 until c.altup - 1) m("model.altup_projections.$i.weight", c.hidden, c.hidden)
        for (i in 0 until c.altup - 1) m("model.altup_unembed_projections.$i.weight", c.hidden, c.hidden)
        v("model.norm.weight", c.hidden)
        val q = c.heads * c.headDim; val kv = c.kvHeads * c.headDim
        for (l in 0 until c.layers) {
            val p = "model.layers.$l"
            v("$p.input_layernorm.weight", c.hidden)
            m("$p.self_attn.q_proj.weight", c.hidden, q)
            m("$p.self_attn.k_proj.weight", c.hidden, kv)
            m("$p.self_attn.v_proj.weight", c.hidden, kv)
            v("$p.self_attn.q_norm.weight", c.headDim)
            v("$p.self_attn.k_norm.weight", c.headDim)
            m("$p.self_attn.o_proj.weight", q, c.hidden)
            v("$p.post_attention_layernorm.weight", c.hidden)
            m("$p.laurel.linear_left.weight", c.hidden, c.laurel)
            m("$p.laurel.linear_right.weight", c.laurel, c.hidden)
            v("$p.laurel.post_laurel_norm.weight", c.hidden)
            v("$p.pre_feedforward_layernorm.weight", c.hidden)
            m("$p.mlp.gate_proj.weight", c.hidden, c.ffn)
            m("$p.mlp.up_proj.weight", c.hidden, c.ffn)
            m("$p.mlp.down_proj.weight", c.ffn, c.hidden)
            v("$p.post_feedforward_layernorm.weight", c.hidden)
            m("$p.per_layer_input_gate.weight", c.hidden, c.perLayer)
            m("$p.per_layer_projection.weight", c.perLayer, c.hidden)
            v("$p.post_per_layer_input_norm.weight", c.hidden)
            m("$p.altup.modality_router.weight", c.hidden, c.altup)
            v("$p.altup.router_norm.weight", c.hidden)
            m("$p.altup.correction_coefs.weight", c.altup, c.altup)
            m("$p.altup.prediction_coefs.weight", c.altup, c.altup * c.altup)
            v("$p.altup.correct_output_scale.weight", c.hidden)
        }
        val out = LinkedHashMap<String, Param>()
        val tables = setOf("model.embed_tokens_per_layer.weight", "model.embed_tokens.weight")
        for ((key, shape, fanIn) in specs) {
            val n = Math.toIntExact(shape.fold(1L) { a, d -> a * d })
            if (fanIn != 0) exponents[key] = Synth.exponent(fanIn)
            val (rows, cols) = shape[0].toInt() to (shape.getOrNull(1)?.toInt() ?: 1)
            val table = key in tables
            // Blocks run along what the program contracts or gathers: a table's columns, a matrix's input dim.
            val along = if (table) cols else rows
            out[key] = when {
                fanIn == 0 -> Param(shape, null, Synth.vector(key, n))
                weights == "q4k" && along % 256 == 0 ->
                    if (table) Param(shape, null, null, Synth.q4k(key, rows, cols, fanIn), table = true)
                    else Param(shape, null, null, Synth.q4k(key, cols, rows, fanIn))
                else -> Param(shape, Synth.matrix(key, n, fanIn), null)
            }
        }
        return out
    }

    /** Bytes of weights on the heap. */
    val heapBytes: Long get() = params.values.sumOf { it.bytes }

    /** Parameters (elements). */
    val parameterCount: Long get() = params.values.sumOf { p -> p.shape.fold(1L) { a, d -> a * d } }

    /** RoPE tables `[seq, headDim]` (rotate-half, base 10000), f32. */
    private val rope: Pair<FloatArray, FloatArray> by lazy {
        val hd = cfg.headDim
        val cs = FloatArray(cfg.seq * hd); val sn = FloatArray(cfg.seq * hd)
        for (p in 0 until cfg.seq) for (i in 0 until hd) {
            val angle = p / 10000.0.pow((2 * (i % (hd / 2))).toDouble() / hd)
            cs[p * hd + i] = cos(angle).toFloat(); sn[p * hd + i] = sin(angle).toFloat()
        }
        cs to sn
    }

    override fun buildTape(): ExecutionTape {
        val c = cfg
        val t = ExecutionTape()
        val s = c.seq.toLong(); val hidden = c.hidden.toLong(); val hd = c.headDim.toLong()
        val tensors = HashMap<String, Tensor>()
        fun w(key: String): Tensor = tensors.getOrPut(key) {
            val p = params.getValue(key)
            when {
                p.q4k != null && p.table -> t.packedWeight(key, p.q4k, "Q4_K", *p.shape)
                // A linear layer held [out, in], as checkpoints hold it: x · Wᵀ.
                p.q4k != null -> t.transpose(t.packedWeight(key, p.q4k, "Q4_K", p.shape[1], p.shape[0]))
                p.bits != null -> t.halfWeight(key, p.bits, DType.BF16, *p.shape)
                else -> t.weight(key, p.floats!!, *p.shape)
            }
        }
        fun rms(x: Tensor, key: String? = null) = t.rmsNorm(x, key?.let { w(it) }, EPS)
        val cosT = t.weight("model.rope.cos", rope.first, s, hd)
        val sinT = t.weight("model.rope.sin", rope.second, s, hd)

        val tokens = t.input("tokens", longArrayOf(s), DType.I32)
        val embed = w("model.embed_tokens.weight")
        var h = t.gather(embed, tokens)
        val lp = longArrayOf(s, c.layers.toLong(), c.perLayer.toLong())
        val pleRows = t.reshape(t.gather(w("model.embed_tokens_per_layer.weight"), tokens), *lp)
        val proj = t.reshape(t.matmul(h, w("model.per_layer_model_projection.weight")), *lp)
        val perLayer = t.add(rms(proj, "model.per_layer_projection_norm.weight"), pleRows)
        for (i in 0 until c.altup - 1) h = t.add(h, t.matmul(rms(h), w("model.altup_projections.$i.weight")))

        val rep = (c.heads / c.kvHeads).toLong()
        for (l in 0 until c.layers) {
            val p = "model.layers.$l"
            val x = rms(h, "$p.input_layernorm.weight")
            fun heads(name: String, n: Int, norm: String?): Tensor {
                var m = t.reshape(t.matmul(x, w("$p.self_attn.$name.weight")), s, n.toLong(), hd)
                if (norm != null) m = rms(m, "$p.self_attn.$norm.weight")
                if (n < c.heads) { // grouped-query attention: each kv head serves `rep` query heads
                    val kvh = n.toLong()
                    m = t.reshape(t.broadcast(t.reshape(m, s, kvh, 1, hd), s, kvh, rep, hd), s, kvh * rep, hd)
                }
                return t.transpose(m, 1, 0, 2)
            }
            val q = t.rope(heads("q_proj", c.heads, "q_norm"), cosT, sinT)
            val k = t.rope(heads("k_proj", c.kvHeads, "k_norm"), cosT, sinT)
            val v = heads("v_proj", c.kvHeads, null)
            val a = t.reshape(t.transpose(t.sdpa(q, k, v, causal = true), 1, 0, 2), s, c.heads * hd)
            h = t.add(h, rms(t.matmul(a, w("$p.self_attn.o_proj.weight")), "$p.post_attention_layernorm.weight"))
            val laurel = t.matmul(t.matmul(x, w("$p.laurel.linear_left.weight")), w("$p.laurel.linear_right.weight"))
            h = t.add(h, rms(laurel, "$p.laurel.post_laurel_norm.weight"))
            val x2 = rms(h, "$p.pre_feedforward_layernorm.weight")
            val act = t.mul(t.gelu(t.matmul(x2, w("$p.mlp.gate_proj.weight"))), t.matmul(x2, w("$p.mlp.up_proj.weight")))
            h = t.add(h, rms(t.matmul(act, w("$p.mlp.down_proj.weight")), "$p.post_feedforward_layernorm.weight"))
            val mine = t.reshape(t.slice(perLayer, longArrayOf(0, l.toLong(), 0), longArrayOf(s, l + 1L, c.perLayer.toLong())), s, c.perLayer.toLong())
            val gated = t.mul(t.gelu(t.matmul(h, w("$p.per_layer_input_gate.weight"))), mine)
            h = t.add(h, rms(t.matmul(gated, w("$p.per_layer_projection.weight")), "$p.post_per_layer_input_norm.weight"))
            val router = t.tanh(t.matmul(rms(h, "$p.altup.router_norm.weight"), w("$p.altup.modality_router.weight")))
            val g = t.add(t.reduceMean(t.matmul(router, w("$p.altup.correction_coefs.weight")), -1, keepDims = true),
                t.reduceMean(t.matmul(router, w("$p.altup.prediction_coefs.weight")), -1, keepDims = true))
            h = t.add(t.mul(h, w("$p.altup.correct_output_scale.weight")), g)
        }
        var x = rms(h, "model.norm.weight")
        for (i in 0 until c.altup - 1) x = t.add(x, t.matmul(rms(x), w("model.altup_unembed_projections.$i.weight")))
        x = rms(x, "model.norm.weight")
        t.output(t.record("matmul", listOf(x, t.transpose(embed)), longArrayOf(s, c.vocab.toLong()), DType.F32, name = "logits"))
        return t
    }

    // --- the float64 reference ------------------------------------------------------------------------

    private fun f(bits: Short): Double = Float.fromBits((bits.toInt() and 0xFFFF) shl 16).toDouble()

    /** `x [S, K] · W [K, N]` for a bf16 weight; both cores, each over its own columns. */
    private fun mm(x: Array<DoubleArray>, key: String): Array<DoubleArray> {
        val p = params.getValue(key); val k = p.shape[0].toInt(); val n = p.shape[1].toInt()
        require(x[0].size == k) { "$key: ${x[0].size} vs $k" }
        val out = Array(x.size) { DoubleArray(n) }
        if (p.q4k != null) { // [out, in] blocks: output column j is row j of the blocks
            IntStream.range(0, n).parallel().forEach { j ->
                val wj = Synth.q4kRow(p.q4k, j, k)
                for (s in x.indices) { var acc = 0.0; for (i in 0 until k) acc += x[s][i] * wj[i]; out[s][j] = acc }
            }
            return out
        }
        val bits = p.bits!!
        val block = 256
        IntStream.range(0, (n + block - 1) / block).parallel().forEach { b ->
            val j0 = b * block; val j1 = minOf(n, j0 + block)
            for (i in 0 until k) {
                val row = i.toLong() * n
                for (j in j0 until j1) {
                    val wij = f(bits[(row + j).toInt()])
                    for (s in x.indices) out[s][j] += x[s][i] * wij
                }
            }
        }
        return out
    }

    /** RMSNorm over the last `dim` values of each row. */
    private fun rms(x: Array<DoubleArray>, key: String?, dim: Int = x[0].size): Array<DoubleArray> {
        val g = key?.let { params.getValue(it).floats!! }
        return Array(x.size) { s ->
            val out = DoubleArray(x[s].size)
            for (v0 in 0 until x[s].size step dim) {
                var ss = 0.0
                for (i in 0 until dim) ss += x[s][v0 + i] * x[s][v0 + i]
                val inv = 1 / sqrt(ss / dim + EPS)
                for (i in 0 until dim) out[v0 + i] = x[s][v0 + i] * inv * (g?.get(i)?.toDouble() ?: 1.0)
            }
            out
        }
    }

    private fun gelu(x: Double) = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    private fun add(a: Array<DoubleArray>, b: Array<DoubleArray>) = Array(a.size) { s -> DoubleArray(a[s].size) { a[s][it] + b[s][it] } }
    private fun row(key: String, r: Int): DoubleArray {
        val p = params.getValue(key); val n = p.shape[1].toInt()
        if (p.q4k != null) return Synth.q4kRow(p.q4k, r, n)
        val bits = p.bits!!
        return DoubleArray(n) { f(bits[(r.toLong() * n + it).toInt()]) }
    }

    /** The same forward pass in float64: logits `[seq, vocab]`, row-major. */
    fun reference(): DoubleArray {
        val c = cfg; val sq = c.seq; val hd = c.headDim
        val (cosT, sinT) = rope
        var h = Array(sq) { row("model.embed_tokens.weight", c.tokens[it]) }
        val proj = rms(mm(h, "model.per_layer_model_projection.weight"), "model.per_layer_projection_norm.weight", c.perLayer)
        val perLayer = add(proj, Array(sq) { row("model.embed_tokens_per_layer.weight", c.tokens[it]) })
        for (i in 0 until c.altup - 1) h = add(h, mm(rms(h, null), "model.altup_projections.$i.weight"))
        val rep = c.heads / c.kvHeads
        for (l in 0 until c.layers) {
            val p = "model.layers.$l"
            val x = rms(h, "$p.input_layernorm.weight")
            fun ropeOf(m: Array<DoubleArray>, n: Int) = Array(sq) { s -> DoubleArray(n * hd) { ci ->
                val head = ci / hd; val i = ci % hd; val half = hd / 2
                val rot = if (i < half) -m[s][head * hd + i + half] else m[s][head * hd + i - half]
                m[s][ci] * cosT[s * hd + i] + rot * sinT[s * hd + i]
            } }
            val q = ropeOf(rms(mm(x, "$p.self_attn.q_proj.weight"), "$p.self_attn.q_norm.weight", hd), c.heads)
            val k = ropeOf(rms(mm(x, "$p.self_attn.k_proj.weight"), "$p.self_attn.k_norm.weight", hd), c.kvHeads)
            val v = mm(x, "$p.self_attn.v_proj.weight")
            val att = Array(sq) { DoubleArray(c.heads * hd) }
            for (head in 0 until c.heads) {
                val kvh = head / rep
                for (s in 0 until sq) {
                    val scores = DoubleArray(s + 1) { t2 ->
                        var d = 0.0
                        for (i in 0 until hd) d += q[s][head * hd + i] * k[t2][kvh * hd + i]
                        d / sqrt(hd.toDouble())
                    }
                    val mx = scores.max(); val e = scores.map { exp(it - mx) }; val z = e.sum()
                    for (i in 0 until hd) att[s][head * hd + i] = e.indices.sumOf { e[it] / z * v[it][kvh * hd + i] }
                }
            }
            h = add(h, rms(mm(att, "$p.self_attn.o_proj.weight"), "$p.post_attention_layernorm.weight"))
            h = add(h, rms(mm(mm(x, "$p.laurel.linear_left.weight"), "$p.laurel.linear_right.weight"), "$p.laurel.post_laurel_norm.weight"))
            val x2 = rms(h, "$p.pre_feedforward_layernorm.weight")
            val gate = mm(x2, "$p.mlp.gate_proj.weight"); val up = mm(x2, "$p.mlp.up_proj.weight")
            val act = Array(sq) { s -> DoubleArray(c.ffn) { gelu(gate[s][it]) * up[s][it] } }
            h = add(h, rms(mm(act, "$p.mlp.down_proj.weight"), "$p.post_feedforward_layernorm.weight"))
            val g1 = mm(h, "$p.per_layer_input_gate.weight")
            val gated = Array(sq) { s -> DoubleArray(c.perLayer) { gelu(g1[s][it]) * perLayer[s][l * c.perLayer + it] } }
            h = add(h, rms(mm(gated, "$p.per_layer_projection.weight"), "$p.post_per_layer_input_norm.weight"))
            val router = mm(rms(h, "$p.altup.router_norm.weight"), "$p.altup.modality_router.weight").map { r -> DoubleArray(r.size) { tanh(r[it]) } }.toTypedArray()
            val corr = mm(router, "$p.altup.correction_coefs.weight"); val pred = mm(router, "$p.altup.prediction_coefs.weight")
            val scale = params.getValue("$p.altup.correct_output_scale.weight").floats!!
            h = Array(sq) { s ->
                val g = corr[s].average() + pred[s].average()
                DoubleArray(c.hidden) { h[s][it] * scale[it] + g }
            }
        }
        var x = rms(h, "model.norm.weight")
        for (i in 0 until c.altup - 1) x = add(x, mm(rms(x, null), "model.altup_unembed_projections.$i.weight"))
        x = rms(x, "model.norm.weight")
        // Tied logits: x · embedᵀ, where the embedding is [vocab, hidden] row-major.
        val out = DoubleArray(sq * c.vocab)
        IntStream.range(0, c.vocab).parallel().forEach { vv ->
            val e = row("model.embed_tokens.weight", vv)
            for (s in 0 until sq) {
                var acc = 0.0
                for (i in 0 until c.hidden) acc += x[s][i] * e[i]
                out[s * c.vocab + vv] = acc
            }
        }
        return out
    }

    companion object {
        const val EPS = 1e-6
    }
}
