package dev.tapeout.transformers

import dev.tapeout.Linear
import dev.tapeout.Module
import dev.tapeout.RMSNorm
import dev.tapeout.Tensor
import dev.tapeout.times

/** `LlamaMLP` (also Mistral's, Qwen2's and Qwen3's): `down_proj(silu(gate_proj(x)) * up_proj(x))`. */
class LlamaMLP(c: CausalLMConfig) : Module() {
    /** `gate_proj`. */
    val gateProj = child("gate_proj", Linear(c.hiddenSize, c.intermediateSize, bias = c.mlpBias))
    /** `up_proj`. */
    val upProj = child("up_proj", Linear(c.hiddenSize, c.intermediateSize, bias = c.mlpBias))
    /** `down_proj`. */
    val downProj = child("down_proj", Linear(c.intermediateSize, c.hiddenSize, bias = c.mlpBias))

    /** The MLP of hidden states `[1, S, hidden]`. */
    operator fun invoke(x: Tensor): Tensor = downProj(x.tape.silu(gateProj(x)) * upProj(x))
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
    val qNorm: Module = child("q_norm", if (gemmaNorm) GemmaRMSNorm(c.headDim, c.rmsNormEps) else RMSNorm(c.headDim, c.rmsNormEps))
    /** `k_norm`. */
    val kNorm: Module = child("k_norm", if (gemmaNorm) GemmaRMSNorm(c.headDim, c.rmsNormEps) else RMSNorm(c.headDim, c.rmsNormEps))

    override fun project(x: Tensor): Triple<Tensor, Tensor, Tensor> {
        val (q, k, v) = super.project(x)
        return Triple(norm(qNorm, q), norm(kNorm, k), v)
    }

    private fun norm(m: Module, x: Tensor): Tensor = when (m) {
        is GemmaRMSNorm -> m(x)
        is RMSNorm -> m(x)
        else -> error("unreachable: q/k norms are RMSNorm or GemmaRMSNorm")
    }
}
