package dev.tapeout.examples

import dev.tapeout.DType
import dev.tapeout.Embedding
import dev.tapeout.ExecutionTape
import dev.tapeout.Linear
import dev.tapeout.ModelProvider
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
 * rotary embeddings, causal self-attention, SwiGLU MLP; the embedding is scaled by √DIM (a scalar constant).
 * Weights are deterministic pseudo-random; the attention q/k/v projections are bf16, and layer 1's down
 * projection is packed Q8_0 (so the default FAIL shows the remedy, and DEQUANTIZE or KEEP export it).
 */
class TinyLlm : ModelProvider {
    companion object {
        const val VOCAB = 64
        const val DIM = 32
        const val HEADS = 2
        const val HEAD_DIM = DIM / HEADS
        const val FFN = 64
        const val LAYERS = 2
        const val SEQ = 8
        const val EPS = 1e-6
        val TOKENS = intArrayOf(3, 14, 15, 9, 26, 5, 35, 8)
    }

    class Attention : Module() {
        val qProj = child("q_proj", Linear(DIM, DIM, bias = false))
        val kProj = child("k_proj", Linear(DIM, DIM, bias = false))
        val vProj = child("v_proj", Linear(DIM, DIM, bias = false))
        val oProj = child("o_proj", Linear(DIM, DIM, bias = false))

        fun forward(x: Tensor, cos: Tensor, sin: Tensor): Tensor {
            val t = x.tape
            fun heads(p: Linear) = p(x).reshape(SEQ, HEADS, HEAD_DIM).transpose(1, 0, 2)
            val q = t.rope(heads(qProj), cos, sin)
            val k = t.rope(heads(kProj), cos, sin)
            val a = t.sdpa(q, k, heads(vProj), causal = true)
            return oProj(a.transpose(1, 0, 2).reshape(SEQ, DIM))
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

        fun forward(h: Tensor, cos: Tensor, sin: Tensor): Tensor {
            val a = h + selfAttn.forward(inputLayernorm(h), cos, sin)
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

        fun forward(tokens: Tensor, cos: Tensor, sin: Tensor): Tensor {
            var h = model.embedTokens(tokens) * sqrt(DIM.toDouble())
            for (layer in model.layers) h = layer.forward(h, cos, sin)
            return lmHead(model.norm(h))
        }
    }

    /** All weights in PyTorch's layouts (`[out, in]`), as the model uses them (bf16 rounded, Q8_0 dequantized). */
    class Weights {
        private val rng = Random(20261130)
        private fun randn(n: Int, scale: Double) = FloatArray(n) { (rng.nextGaussian() * scale).toFloat() }

        val embed = randn(VOCAB * DIM, 0.5)
        val norm = FloatArray(DIM) { 1f + (rng.nextGaussian() * 0.1).toFloat() }
        val layers = List(LAYERS) { Layer(it) }

        inner class Layer(val index: Int) {
            val ln1 = FloatArray(DIM) { 1f + (rng.nextGaussian() * 0.1).toFloat() }
            val ln2 = FloatArray(DIM) { 1f + (rng.nextGaussian() * 0.1).toFloat() }
            val wq = bf16Round(randn(DIM * DIM, 0.3))
            val wk = bf16Round(randn(DIM * DIM, 0.3))
            val wv = bf16Round(randn(DIM * DIM, 0.3))
            val wo = randn(DIM * DIM, 0.3)
            val wg = randn(FFN * DIM, 0.3)
            val wu = randn(FFN * DIM, 0.3)
            /** `[DIM, FFN]` (out × in) Q8_0 codes for layer 1. */
            val wdCodes: ByteArray? = if (index == 1) q8Codes(randn(DIM * FFN, 0.3)) else null
            val wd: FloatArray = wdCodes?.let { q8Values(it) } ?: randn(DIM * FFN, 0.3)
        }
    }

    val weights = Weights()

    /** The module tree with the weights bound to it (borrowed arrays; nothing copied). */
    val module = ForCausalLm().also { m ->
        val w = weights
        m.model.embedTokens.bind("weight", w.embed)
        m.model.norm.bind("weight", w.norm)
        for ((layer, l) in m.model.layers.zip(w.layers)) {
            layer.inputLayernorm.bind("weight", l.ln1)
            layer.postAttentionLayernorm.bind("weight", l.ln2)
            with(layer.selfAttn) {
                qProj.bindHalf("weight", bf16Shorts(l.wq), DType.BF16)
                kProj.bindHalf("weight", bf16Shorts(l.wk), DType.BF16)
                vProj.bindHalf("weight", bf16Shorts(l.wv), DType.BF16)
                oProj.bind("weight", l.wo)
            }
            with(layer.mlp) {
                gateProj.bind("weight", l.wg)
                upProj.bind("weight", l.wu)
                if (l.wdCodes != null) downProj.bindPacked("weight", q8Blocks(l.wdCodes), "Q8_0") else downProj.bind("weight", l.wd)
            }
        }
    }

    override fun buildTape(): ExecutionTape {
        val t = ExecutionTape()
        val tokens = t.input("tokens", SEQ, dtype = DType.I32)
        val (cosT, sinT) = ropeTables()
        val cos = t.weight("model.rope.cos", cosT, SEQ, HEAD_DIM)
        val sin = t.weight("model.rope.sin", sinT, SEQ, HEAD_DIM)
        t.output("logits", module.forward(tokens, cos, sin))
        return t
    }

    /** The same forward pass in float64 Kotlin: the reference the IREE result is compared with. */
    fun referenceLogits(tokens: IntArray = TOKENS): DoubleArray {
        val w = weights
        val (cosT, sinT) = ropeTables()
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

/** cos/sin tables `[SEQ, HEAD_DIM]` for rotate-half RoPE (base 10000). */
fun ropeTables(): Pair<FloatArray, FloatArray> {
    val hd = TinyLlm.HEAD_DIM
    val c = FloatArray(TinyLlm.SEQ * hd)
    val s = FloatArray(TinyLlm.SEQ * hd)
    for (p in 0 until TinyLlm.SEQ) for (i in 0 until hd) {
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
