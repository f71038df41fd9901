package dev.tapeout.examples

import dev.tapeout.DType
import dev.tapeout.ExecutionTape
import dev.tapeout.ModelProvider
import dev.tapeout.Tensor
import java.util.Random
import kotlin.math.cos
import kotlin.math.exp
import kotlin.math.pow
import kotlin.math.sin
import kotlin.math.sqrt

/**
 * A two-layer decoder-only transformer written with tapeout's tracing API: tied token embedding (the gather and
 * the output projection share one weight), RMSNorm, rotary embeddings, causal self-attention, SwiGLU MLP.
 * Weights are deterministic pseudo-random; the attention projections are stored BF16, and layer 1's down
 * projection is packed Q8_0 (so the default FAIL shows the remedy and DEQUANTIZE exports).
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

    /** All weights, as the model uses them (BF16 rounded, Q8_0 dequantized) for the reference evaluator. */
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
            val wg = randn(DIM * FFN, 0.3)
            val wu = randn(DIM * FFN, 0.3)
            /** `[FFN, DIM]` row-major for layer 0; `[DIM, FFN]` (GGML out × in) Q8_0 for layer 1. */
            val wdCodes: ByteArray? = if (index == 1) q8Codes(randn(DIM * FFN, 0.3)) else null
            val wd: FloatArray = wdCodes?.let { q8Values(it) } ?: randn(FFN * DIM, 0.3)
        }
    }

    val weights = Weights()

    override fun buildTape(): ExecutionTape {
        val w = weights
        val t = ExecutionTape()
        val tokens = t.input("tokens", longArrayOf(SEQ.toLong()), DType.I32)
        val embed = t.weight("model.embed_tokens.weight", w.embed, VOCAB.toLong(), DIM.toLong())
        val (cosT, sinT) = ropeTables()
        val cos = t.weight("model.rope.cos", cosT, SEQ.toLong(), HEAD_DIM.toLong())
        val sin = t.weight("model.rope.sin", sinT, SEQ.toLong(), HEAD_DIM.toLong())
        var h = t.gather(embed, tokens)
        for (l in w.layers) {
            val p = "model.layers.${l.index}"
            val x = t.rmsNorm(h, t.weight("$p.input_layernorm.weight", l.ln1, DIM.toLong()), EPS)
            fun heads(name: String, values: FloatArray): Tensor {
                val wt = t.halfWeight("$p.self_attn.$name.weight", bf16Bytes(values), DType.BF16, DIM.toLong(), DIM.toLong())
                val m = t.reshape(t.matmul(x, wt), SEQ.toLong(), HEADS.toLong(), HEAD_DIM.toLong())
                return t.transpose(m, 1, 0, 2)
            }
            val q = t.rope(heads("q_proj", l.wq), cos, sin)
            val k = t.rope(heads("k_proj", l.wk), cos, sin)
            val v = heads("v_proj", l.wv)
            val a = t.reshape(t.transpose(t.sdpa(q, k, v, causal = true), 1, 0, 2), SEQ.toLong(), DIM.toLong())
            h = t.add(h, t.matmul(a, t.weight("$p.self_attn.o_proj.weight", l.wo, DIM.toLong(), DIM.toLong())))
            val x2 = t.rmsNorm(h, t.weight("$p.post_attention_layernorm.weight", l.ln2, DIM.toLong()), EPS)
            val gate = t.silu(t.matmul(x2, t.weight("$p.mlp.gate_proj.weight", l.wg, DIM.toLong(), FFN.toLong())))
            val up = t.matmul(x2, t.weight("$p.mlp.up_proj.weight", l.wu, DIM.toLong(), FFN.toLong()))
            val down = if (l.wdCodes != null) {
                t.transpose(t.packedWeight("$p.mlp.down_proj.weight", q8Blocks(l.wdCodes), "Q8_0", DIM.toLong(), FFN.toLong()))
            } else {
                t.weight("$p.mlp.down_proj.weight", l.wd, FFN.toLong(), DIM.toLong())
            }
            h = t.add(h, t.matmul(t.mul(gate, up), down))
        }
        val x = t.rmsNorm(h, t.weight("model.norm.weight", w.norm, DIM.toLong()), EPS)
        t.output(t.record("matmul", listOf(x, t.transpose(embed)), longArrayOf(SEQ.toLong(), VOCAB.toLong()), DType.F32, name = "logits"))
        return t
    }

    /** The same forward pass in float64 Kotlin: the reference the IREE result is compared with. */
    fun referenceLogits(tokens: IntArray = TOKENS): DoubleArray {
        val w = weights
        val (cosT, sinT) = ropeTables()
        var h = Array(SEQ) { s -> DoubleArray(DIM) { w.embed[tokens[s] * DIM + it].toDouble() } }
        fun rms(x: Array<DoubleArray>, g: FloatArray) = Array(SEQ) { s ->
            val inv = 1 / sqrt(x[s].sumOf { it * it } / DIM + EPS)
            DoubleArray(DIM) { x[s][it] * inv * g[it] }
        }
        fun mm(x: Array<DoubleArray>, m: FloatArray, k: Int, n: Int) = Array(x.size) { s ->
            DoubleArray(n) { j -> var acc = 0.0; for (i in 0 until k) acc += x[s][i] * m[i * n + j]; acc }
        }
        for (l in w.layers) {
            val x = rms(h, l.ln1)
            val q = mm(x, l.wq, DIM, DIM); val k = mm(x, l.wk, DIM, DIM); val v = mm(x, l.wv, DIM, DIM)
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
            val o = mm(att, l.wo, DIM, DIM)
            h = Array(SEQ) { s -> DoubleArray(DIM) { h[s][it] + o[s][it] } }
            val x2 = rms(h, l.ln2)
            val g = mm(x2, l.wg, DIM, FFN); val u = mm(x2, l.wu, DIM, FFN)
            val act = Array(SEQ) { s -> DoubleArray(FFN) { g[s][it] / (1 + exp(-g[s][it])) * u[s][it] } }
            val down = if (l.wdCodes != null) {
                Array(SEQ) { s -> DoubleArray(DIM) { j -> var acc = 0.0; for (i in 0 until FFN) acc += act[s][i] * l.wd[j * FFN + i]; acc } }
            } else mm(act, l.wd, FFN, DIM)
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
