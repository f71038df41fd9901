package dev.tapeout.transformers

import dev.tapeout.Linear
import dev.tapeout.Module
import dev.tapeout.Tensor
import dev.tapeout.times

/** A decoder layer's feed-forward block (`mlp`): hidden states `[1, S, hidden]` in and out. */
abstract class FeedForward : Module() {
    /** The block over [x]. */
    abstract operator fun invoke(x: Tensor): Tensor
}

/** `LlamaMLP` (also Mistral's, Qwen2's and Qwen3's): `down_proj(silu(gate_proj(x)) * up_proj(x))`. */
class LlamaMLP(c: CausalLMConfig) : FeedForward() {
    /** `gate_proj`. */
    val gateProj = child("gate_proj", Linear(c.hiddenSize, c.intermediateSize, bias = c.mlpBias))
    /** `up_proj`. */
    val upProj = child("up_proj", Linear(c.hiddenSize, c.intermediateSize, bias = c.mlpBias))
    /** `down_proj`. */
    val downProj = child("down_proj", Linear(c.intermediateSize, c.hiddenSize, bias = c.mlpBias))

    override fun invoke(x: Tensor): Tensor = downProj(x.tape.silu(gateProj(x)) * upProj(x))
}

/**
 * `LlamaAttention` (Mistral's and Qwen2's too: Qwen2 with q/k/v biases, Mistral with its window on every layer):
 * separate `q_proj`, `k_proj`, `v_proj`, then `o_proj`.
 */
open class LlamaAttention(c: CausalLMConfig, layerType: LayerType) : CausalSelfAttention(c, layerType) {
    /** `q_proj` (`[heads·D, hidden]`). */
    val qProj = child("q_proj", Linear(c.hiddenSize, c.numAttentionHeads * c.headDim, bias = c.qkvBias))
    /** `k_proj` (`[KV·D, hidden]`). */
    val kProj = child("k_proj", Linear(c.hiddenSize, c.numKeyValueHeads * c.headDim, bias = c.qkvBias))
    /** `v_proj` (`[KV·D, hidden]`). */
    val vProj = child("v_proj", Linear(c.hiddenSize, c.numKeyValueHeads * c.headDim, bias = c.qkvBias))
    /** `o_proj`. */
    override val oProj = child("o_proj", Linear(c.numAttentionHeads * c.headDim, c.hiddenSize, bias = c.oBias))

    override fun project(x: Tensor): Triple<Tensor, Tensor, Tensor> =
        Triple(heads(qProj(x), x, c.numAttentionHeads), heads(kProj(x), x, c.numKeyValueHeads), heads(vProj(x), x, c.numKeyValueHeads))
}

/**
 * `Qwen3Attention` (and Gemma 3's): [LlamaAttention]'s projections with an RMSNorm over each head's D values of q
 * and k (`q_norm`, `k_norm`, weight `[D]`) before RoPE. [gemmaNorm]: Gemma 3's `x * (1 + weight)` norm.
 */
class QkNormAttention(c: CausalLMConfig, layerType: LayerType, gemmaNorm: Boolean) : LlamaAttention(c, layerType) {
    /** `q_norm`. */
    val qNorm: Norm = child("q_norm", Norm.of(c.headDim, c.rmsNormEps, gemmaNorm))
    /** `k_norm`. */
    val kNorm: Norm = child("k_norm", Norm.of(c.headDim, c.rmsNormEps, gemmaNorm))

    override fun project(x: Tensor): Triple<Tensor, Tensor, Tensor> {
        val (q, k, v) = super.project(x)
        return Triple(qNorm(q), kNorm(k), v)
    }
}
