package dev.tapeout.transformers

import dev.tapeout.DType
import dev.tapeout.Linear
import dev.tapeout.Tensor
import dev.tapeout.plus
import dev.tapeout.times

/**
 * `Gemma2RMSNorm` / `Gemma3RMSNorm`: `norm(x) * (1 + weight)`, the weight stored as an offset from 1. The `1 +`
 * is taken in f32 (transformers: `1.0 + self.weight.float()`), never in a bf16 weight's own type.
 */
class GemmaRMSNorm(
    /** The normalized (last) dimension. */
    val dim: Int,
    /** `eps`. */
    val eps: Double,
) : Norm() {
    init {
        declare("weight", dim)
    }

    override fun invoke(x: Tensor): Tensor {
        val t = x.tape
        val w = param(t, "weight")
        val wide = if (w.dtype == DType.F32) w else t.convert(w, DType.F32)
        return t.rmsNorm(x, wide + 1.0, eps)
    }
}

/** `Gemma2MLP` / `Gemma3MLP`: `down_proj(gelu_tanh(gate_proj(x)) * up_proj(x))`. */
class GemmaMLP(c: CausalLMConfig) : FeedForward() {
    /** `gate_proj`. */
    val gateProj = child("gate_proj", Linear(c.hiddenSize, c.intermediateSize, bias = false))
    /** `up_proj`. */
    val upProj = child("up_proj", Linear(c.hiddenSize, c.intermediateSize, bias = false))
    /** `down_proj`. */
    val downProj = child("down_proj", Linear(c.intermediateSize, c.hiddenSize, bias = false))

    /** GELU with the tanh approximation: `gelu_pytorch_tanh`. */
    override fun invoke(x: Tensor): Tensor = downProj(x.tape.gelu(gateProj(x)) * upProj(x))
}
