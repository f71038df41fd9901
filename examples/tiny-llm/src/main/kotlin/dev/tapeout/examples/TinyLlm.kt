package dev.tapeout.examples

import dev.tapeout.DType
import dev.tapeout.Embedding
import dev.tapeout.ExecutionTape
import dev.tapeout.Linear
import dev.tapeout.ModuleProvider
import dev.tapeout.Module
import dev.tapeout.ModuleList
import dev.tapeout.RMSNorm
import dev.tapeout.Tensor
import dev.tapeout.plus
import dev.tapeout.reshape
import dev.tapeout.times
import dev.tapeout.transpose
import java.util.Random
import kotlin.math.cos
import kotlin.math.exp
import kotlin.math.pow
import kotlin.math.sin
import kotlin.math.sqrt

/**
 * A two-layer decoder-only transformer written as modules, the way Hugging Face's Llama is: its parameter keys
 * are `LlamaForCausalLM`'s `state_dict()` names, every projection is a [Linear] with its weight in PyTorch's
 * `[out, in]` layout, and the LM head is tied to the token embedding (one parameter, stored once). RMSNorm,
 * rotary embeddings (cos/sin rows gathered by position), causal self-attention, SwiGLU MLP; the embedding is
 * scaled by √DIM (a scalar constant). Weights are deterministic pseudo-random; the attention q/k/v projections
 * are bf16, and layer 1's down projection is packed Q8_0 (so the default FAIL shows the remedy, and DEQUANTIZE
 * or KEEP export it).
 *
 * Served as one module with two functions over one set of weights ([ModuleProvider]):
 * - `prefill(tokens [?], positions [?])` → `logits [?, VOCAB]`, `next [?]` (argmax), and each layer's keys and
 *   values `k<i>`, `v<i>` `[HEADS, ?, HEAD_DIM]` for the cache: a prompt of any length;
 * - `decode(token [1], position [1], pos, k0, v0, k1, v1)` with caches `[HEADS, MAX, HEAD_DIM]` → `logits [1,
 *   VOCAB]`, `next [1]` and the caches with this token's keys and values written at `pos`; attention masks the
 *   cache beyond `pos`.
 */
class TinyLlm : ModuleProvider {
    companion object {
        // The sizes: these defaults, or system properties (`tapeout { systemProperty 'tinyLlm.dim', 1024 }`; the bench
        // exports the same model at a serving size this way).
        val VOCAB: Int = Integer.getInteger("tinyLlm.vocab", 64)
        val DIM: Int = Integer.getInteger("tinyLlm.dim", 32)
        val HEADS: Int = Integer.getInteger("tinyLlm.heads", 2)
        init {
            require(HEADS > 0 && DIM % HEADS == 0) { "tinyLlm.dim ($DIM) must be a multiple of tinyLlm.heads ($HEADS)" }
        }
        val HEAD_DIM: Int = DIM / HEADS
        val FFN: Int = Integer.getInteger("tinyLlm.ffn", 64)
        val LAYERS: Int = Integer.getInteger("tinyLlm.layers", 2)
        /** `tinyLlm.bf16=all`: every matrix and the embedding held as bf16, as in a bf16 checkpoint (default: q/k/v). */
        val ALL_BF16: Boolean = System.getProperty("tinyLlm.bf16") == "all"
        /** The cache length: the longest sequence decode serves. */
        const val MAX = 64
        const val EPS = 1e-6
        val TOKENS = intArrayOf(3, 14, 15, 9, 26, 5, 35, 8)
    }

    class Attention : Module() {
        val qProj = child("q_proj", Linear(DIM, DIM, bias = false))
        val kProj = child("k_proj", Linear(DIM, DIM, bias = false))
        val vProj = child("v_proj", Linear(DIM, DIM, bias = false))
        val oProj = child("o_proj", Linear(DIM, DIM, bias = false))

        /** `[S, DIM]` → `[HEADS, S, HEAD_DIM]` (S static, or `?`: DYNAMIC is -1). */
        private fun heads(p: Linear, x: Tensor) = p(x).reshape(x.shape[0].toInt(), HEADS, HEAD_DIM).transpose(1, 0, 2)

        /** A prompt: causal attention over itself; returns the output and this layer's keys and values. */
        fun prefill(x: Tensor, cos: Tensor, sin: Tensor): Triple<Tensor, Tensor, Tensor> {
            val t = x.tape
            val k = t.rope(heads(kProj, x), cos, sin)
            val v = heads(vProj, x)
            val a = t.sdpa(t.rope(heads(qProj, x), cos, sin), k, v, causal = true)
            return Triple(oProj(a.transpose(1, 0, 2).reshape(-1, DIM)), k, v)
        }

        /** One token at `pos`: its keys and values written into the caches, attention over the cache up to `pos`. */
        fun decode(x: Tensor, cos: Tensor, sin: Tensor, cacheK: Tensor, cacheV: Tensor, pos: Tensor, mask: Tensor): Triple<Tensor, Tensor, Tensor> {
            val t = x.tape
            val zero = t.scalar(0.0, DType.I64)
            val k = t.dynamicUpdateSlice(cacheK, t.rope(heads(kProj, x), cos, sin), listOf(zero, pos, zero))
            val v = t.dynamicUpdateSlice(cacheV, heads(vProj, x), listOf(zero, pos, zero))
            val a = t.sdpa(t.rope(heads(qProj, x), cos, sin), k, v, mask = mask)
            return Triple(oProj(a.transpose(1, 0, 2).reshape(1, DIM)), k, v)
        }
    }

    class Mlp : Module() {
        val gateProj = child("gate_proj", Linear(DIM, FFN, bias = false))
        val upProj = child("up_proj", Linear(DIM, FFN, bias = false))
        val downProj = child("down_proj", Linear(FFN, DIM, bias = false))

        operator fun invoke(x: Tensor): Tensor = downProj(x.tape.silu(gateProj(x)) * upProj(x))
    }

    class DecoderLayer : Module() {
        val selfAttn = child("self_attn", Attention())
        val mlp = child("mlp", Mlp())
        val inputLayernorm = child("input_layernorm", RMSNorm(DIM, EPS))
        val postAttentionLayernorm = child("post_attention_layernorm", RMSNorm(DIM, EPS))

        /** The rest of the layer once attention has run: residual, MLP, residual. */
        fun finish(h: Tensor, attention: Tensor): Tensor {
            val a = h + attention
            return a + mlp(postAttentionLayernorm(a))
        }
    }

    class Decoder : Module() {
        val embedTokens = child("embed_tokens", Embedding(VOCAB, DIM))
        val layers = child("layers", ModuleList(List(LAYERS) { DecoderLayer() }))
        val norm = child("norm", RMSNorm(DIM, EPS))
    }

    /** The root: `model.*` and the tied `lm_head`. */
    class ForCausalLm : Module() {
        val model = child("model", Decoder())
        val lmHead = child("lm_head", Linear(DIM, VOCAB, bias = false)).tieTo(model.embedTokens)

        fun embed(tokens: Tensor) = model.embedTokens(tokens) * sqrt(DIM.toDouble())
        fun head(h: Tensor) = lmHead(model.norm(h))
    }

    /** All weights in PyTorch's layouts (`[out, in]`), as the model uses them (bf16 rounded, Q8_0 dequantized). */
    class Weights {
        private val rng = Random(20261130)
        private fun randn(n: Int, scale: Double) = FloatArray(n) { (rng.nextGaussian() * scale).toFloat() }

        /** As the model holds it: f32, or bf16-rounded with [ALL_BF16]. */
        private fun held(v: FloatArray) = if (ALL_BF16) bf16Round(v) else v

        val embed = held(randn(VOCAB * DIM, 0.5))
        val norm = FloatArray(DIM) { 1f + (rng.nextGaussian() * 0.1).toFloat() }
        val layers = List(LAYERS) { Layer(it) }

        inner class Layer(val index: Int) {
            val ln1 = FloatArray(DIM) { 1f + (rng.nextGaussian() * 0.1).toFloat() }
            val ln2 = FloatArray(DIM) { 1f + (rng.nextGaussian() * 0.1).toFloat() }
            val wq = bf16Round(randn(DIM * DIM, 0.3))
            val wk = bf16Round(randn(DIM * DIM, 0.3))
            val wv = bf16Round(randn(DIM * DIM, 0.3))
            val wo = held(randn(DIM * DIM, 0.3))
            val wg = held(randn(FFN * DIM, 0.3))
            val wu = held(randn(FFN * DIM, 0.3))
            /** `[DIM, FFN]` (out × in) Q8_0 codes for layer 1. */
            val wdCodes: ByteArray? = if (index == 1) q8Codes(randn(DIM * FFN, 0.3)) else null
            val wd: FloatArray = wdCodes?.let { q8Values(it) } ?: held(randn(DIM * FFN, 0.3))
        }
    }

    val weights = Weights()

    /** The module tree with the weights bound to it (borrowed arrays; nothing copied). */
    val module = ForCausalLm().also { m ->
        val w = weights
        fun Module.bindHeld(values: FloatArray) = if (ALL_BF16) bindHalf("weight", bf16Shorts(values), DType.BF16) else bind("weight", values)
        m.model.embedTokens.bindHeld(w.embed)
        m.model.norm.bind("weight", w.norm)
        for ((layer, l) in m.model.layers.zip(w.layers)) {
            layer.inputLayernorm.bind("weight", l.ln1)
            layer.postAttentionLayernorm.bind("weight", l.ln2)
            with(layer.selfAttn) {
                qProj.bindHalf("weight", bf16Shorts(l.wq), DType.BF16)
                kProj.bindHalf("weight", bf16Shorts(l.wk), DType.BF16)
                vProj.bindHalf("weight", bf16Shorts(l.wv), DType.BF16)
                oProj.bindHeld(l.wo)
            }
            with(layer.mlp) {
                gateProj.bindHeld(l.wg)
                upProj.bindHeld(l.wu)
                if (l.wdCodes != null) downProj.bindPacked("weight", q8Blocks(l.wdCodes), "Q8_0") else downProj.bindHeld(l.wd)
            }
        }
    }

    /** cos/sin tables `[MAX, HEAD_DIM]`, one array each for both functions (so the weight is shared). */
    private val rope = ropeTables(MAX)

    private fun ropeRows(t: ExecutionTape, positions: Tensor): Pair<Tensor, Tensor> =
        t.gather(t.weight("model.rope.cos", rope.first, MAX, HEAD_DIM), positions) to
            t.gather(t.weight("model.rope.sin", rope.second, MAX, HEAD_DIM), positions)

    /** The prompt: any length. */
    fun prefillTape(): ExecutionTape {
        val t = ExecutionTape()
        val tokens = t.input("tokens", -1, dtype = DType.I32)
        val (cos, sin) = ropeRows(t, t.input("positions", -1, dtype = DType.I32))
        var h = module.embed(tokens)
        val caches = ArrayList<Pair<Tensor, Tensor>>()
        for (layer in module.model.layers) {
            val (a, k, v) = layer.selfAttn.prefill(layer.inputLayernorm(h), cos, sin)
            caches += k to v
            h = layer.finish(h, a)
        }
        val logits = module.head(h)
        t.output("logits", logits)
        t.output("next", t.argmax(logits))
        caches.forEachIndexed { i, (k, v) -> t.output("k$i", k); t.output("v$i", v) }
        return t
    }

    /** One token at position `pos`, attending to the caches. */
    fun decodeTape(): ExecutionTape {
        val t = ExecutionTape()
        val token = t.input("token", 1, dtype = DType.I32)
        val (cos, sin) = ropeRows(t, t.input("position", 1, dtype = DType.I32))
        val pos = t.input("pos", LongArray(0), DType.I64)
        val caches = (0 until LAYERS).map { i ->
            t.input("cache_k$i", HEADS, MAX, HEAD_DIM) to t.input("cache_v$i", HEADS, MAX, HEAD_DIM)
        }
        // -1e9 on the cache rows after pos: softmax gives them weight 0.
        val later = t.compare(t.iota(intArrayOf(1, MAX), 1, DType.I64), t.broadcast(pos, 1, MAX), "GT")
        val mask = t.convert(later, DType.F32) * -1e9
        var h = module.embed(token)
        val updated = ArrayList<Pair<Tensor, Tensor>>()
        for ((layer, cache) in module.model.layers.zip(caches)) {
            val (a, k, v) = layer.selfAttn.decode(layer.inputLayernorm(h), cos, sin, cache.first, cache.second, pos, mask)
            updated += k to v
            h = layer.finish(h, a)
        }
        val logits = module.head(h)
        t.output("logits", logits)
        t.output("next", t.argmax(logits))
        updated.forEachIndexed { i, (k, v) -> t.output("k$i", k); t.output("v$i", v) }
        return t
    }

    override fun buildTapes(args: List<String>): Map<String, ExecutionTape> =
        mapOf("prefill" to prefillTape(), "decode" to decodeTape())

    /** The same forward pass in float64 Kotlin: the reference the IREE result is compared with. */
    fun referenceLogits(tokens: IntArray = TOKENS): DoubleArray {
        val w = weights
        val SEQ = tokens.size
        val (cosT, sinT) = ropeTables(SEQ)
        val scale = sqrt(DIM.toDouble())
        var h = Array(SEQ) { s -> DoubleArray(DIM) { w.embed[tokens[s] * DIM + it] * scale } }
        fun rms(x: Array<DoubleArray>, g: FloatArray) = Array(SEQ) { s ->
            val inv = 1 / sqrt(x[s].sumOf { it * it } / DIM + EPS)
            DoubleArray(DIM) { x[s][it] * inv * g[it] }
        }
        /** `x @ mᵀ` for `m` `[n, k]` (PyTorch's layout). */
        fun linear(x: Array<DoubleArray>, m: FloatArray, k: Int, n: Int) = Array(x.size) { s ->
            DoubleArray(n) { j -> var acc = 0.0; for (i in 0 until k) acc += x[s][i] * m[j * k + i]; acc }
        }
        for (l in w.layers) {
            val x = rms(h, l.ln1)
            val q = linear(x, l.wq, DIM, DIM); val k = linear(x, l.wk, DIM, DIM); val v = linear(x, l.wv, DIM, DIM)
            fun rope(m: Array<DoubleArray>) = Array(SEQ) { s -> DoubleArray(DIM) { c ->
                val hd = c / HEAD_DIM; val i = c % HEAD_DIM; val half = HEAD_DIM / 2
                val rot = if (i < half) -m[s][hd * HEAD_DIM + i + half] else m[s][hd * HEAD_DIM + i - half]
                m[s][c] * cosT[s * HEAD_DIM + i] + rot * sinT[s * HEAD_DIM + i]
            } }
            val qr = rope(q); val kr = rope(k)
            val att = Array(SEQ) { DoubleArray(DIM) }
            for (hd in 0 until HEADS) for (s in 0 until SEQ) {
                val scores = DoubleArray(s + 1) { t2 -> var d = 0.0; for (i in 0 until HEAD_DIM) d += qr[s][hd * HEAD_DIM + i] * kr[t2][hd * HEAD_DIM + i]; d / sqrt(HEAD_DIM.toDouble()) }
                val mx = scores.max(); val e = scores.map { exp(it - mx) }; val z = e.sum()
                for (i in 0 until HEAD_DIM) att[s][hd * HEAD_DIM + i] = e.indices.sumOf { e[it] / z * v[it][hd * HEAD_DIM + i] }
            }
            val o = linear(att, l.wo, DIM, DIM)
            h = Array(SEQ) { s -> DoubleArray(DIM) { h[s][it] + o[s][it] } }
            val x2 = rms(h, l.ln2)
            val g = linear(x2, l.wg, DIM, FFN); val u = linear(x2, l.wu, DIM, FFN)
            val act = Array(SEQ) { s -> DoubleArray(FFN) { g[s][it] / (1 + exp(-g[s][it])) * u[s][it] } }
            val down = linear(act, l.wd, FFN, DIM)
            h = Array(SEQ) { s -> DoubleArray(DIM) { h[s][it] + down[s][it] } }
        }
        val x = rms(h, w.norm)
        return DoubleArray(SEQ * VOCAB) { idx -> val s = idx / VOCAB; val vv = idx % VOCAB
            var acc = 0.0; for (i in 0 until DIM) acc += x[s][i] * w.embed[vv * DIM + i]; acc }
    }
}

/** cos/sin tables `[n, HEAD_DIM]` for rotate-half RoPE (base 10000), position p in row p. */
fun ropeTables(n: Int): Pair<FloatArray, FloatArray> {
    val hd = TinyLlm.HEAD_DIM
    val c = FloatArray(n * hd)
    val s = FloatArray(n * hd)
    for (p in 0 until n) for (i in 0 until hd) {
        val angle = p / 10000.0.pow((2 * (i % (hd / 2))).toDouble() / hd)
        c[p * hd + i] = cos(angle).toFloat(); s[p * hd + i] = sin(angle).toFloat()
    }
    return c to s
}

/** Rounds to bf16 (nearest even) and back, so the model and the reference use the same values. */
fun bf16Round(v: FloatArray) = FloatArray(v.size) { Float.fromBits(bf16Bits(v[it]) shl 16) }
private fun bf16Bits(x: Float): Int { val b = x.toRawBits(); return (b + 0x7FFF + ((b ushr 16) and 1)) ushr 16 }
fun bf16Bytes(v: FloatArray) = ByteArray(v.size * 2) { i -> (bf16Bits(v[i / 2]) shr (8 * (i % 2))).toByte() }
fun bf16Shorts(v: FloatArray) = ShortArray(v.size) { bf16Bits(v[it]).toShort() }

/** Q8_0 with the fixed scale 1/64 (exact in f16: 0x2400): codes, their values, and the 34-byte blocks. */
fun q8Codes(v: FloatArray) = ByteArray(v.size) { (v[it] * 64).toDouble().let { x -> Math.rint(x).coerceIn(-127.0, 127.0).toInt().toByte() } }
fun q8Values(codes: ByteArray) = FloatArray(codes.size) { codes[it] / 64f }
fun q8Blocks(codes: ByteArray): ByteArray {
    val out = ByteArray(codes.size / 32 * 34)
    for (b in 0 until codes.size / 32) {
        out[b * 34] = 0x00; out[b * 34 + 1] = 0x24
        System.arraycopy(codes, b * 32, out, b * 34 + 2, 32)
    }
    return out
}
