package dev.tapeout.transformers

import dev.tapeout.Linear
import dev.tapeout.Tensor
import dev.tapeout.times

/** `Phi3MLP`: `gate_up_proj` (`[2·intermediate, hidden]`) chunked into gate and up, `down_proj(up * silu(gate))`. */
class Phi3MLP(private val c: CausalLMConfig) : FeedForward() {
    /** `gate_up_proj`: the gate's rows, then the up projection's. */
    val gateUpProj = child("gate_up_proj", Linear(c.hiddenSize, 2 * c.intermediateSize, bias = false))
    /** `down_proj`. */
    val downProj = child("down_proj", Linear(c.intermediateSize, c.hiddenSize, bias = false))

    override fun invoke(x: Tensor): Tensor {
        val y = gateUpProj(x)
        val gate = lastAxis(y, 0, c.intermediateSize)
        val up = lastAxis(y, c.intermediateSize, 2 * c.intermediateSize)
        return downProj(up * x.tape.silu(gate))
    }
}

/** `Phi3Attention`: one fused `qkv_proj` whose rows are q's, then k's, then v's; then `o_proj`. */
class Phi3Attention(c: CausalLMConfig, layerType: LayerType) : CausalSelfAttention(c, layerType) {
    private val qRows = c.numAttentionHeads * c.headDim
    private val kvRows = c.numKeyValueHeads * c.headDim

    /** `qkv_proj` (`[(H + 2·KV)·D, hidden]`). */
    val qkvProj = child("qkv_proj", Linear(c.hiddenSize, qRows + 2 * kvRows, bias = false))
    /** `o_proj`. */
    override val oProj = child("o_proj", Linear(qRows, c.hiddenSize, bias = false))

    override fun project(x: Tensor): Triple<Tensor, Tensor, Tensor> {
        val qkv = qkvProj(x)
        return Triple(
            heads(lastAxis(qkv, 0, qRows), x, c.numAttentionHeads),
            heads(lastAxis(qkv, qRows, qRows + kvRows), x, c.numKeyValueHeads),
            heads(lastAxis(qkv, qRows + kvRows, qRows + 2 * kvRows), x, c.numKeyValueHeads),
        )
    }
}

/** `x[..., from:until]`: a static slice of the last axis, the others (a `?` one too) whole. */
internal fun lastAxis(x: Tensor, from: Int, until: Int): Tensor {
    val r = x.rank
    val start = LongArray(r) { if (it == r - 1) from.toLong() else 0L }
    val limit = LongArray(r) { if (it == r - 1) until.toLong() else -1L }
    return x.tape.slice(x, start, limit)
}
