package dev.tapeout.transformers

import dev.tapeout.Module
import dev.tapeout.Tensor

/**
 * An RMSNorm over the last dimension with `weight [dim]`: transformers' `LlamaRMSNorm` (`x * weight`, [Plain]) or
 * Gemma's (`x * (1 + weight)`, [GemmaRMSNorm]), one type so that a layer holds either.
 */
abstract class Norm : Module() {
    /** The norm of [x]. */
    abstract operator fun invoke(x: Tensor): Tensor

    /** `LlamaRMSNorm`: what the core [dev.tapeout.RMSNorm] computes, under the same `weight` key. */
    class Plain(
        /** The normalized (last) dimension. */
        val dim: Int,
        /** `eps`. */
        val eps: Double,
    ) : Norm() {
        init {
            declare("weight", dim)
        }

        override fun invoke(x: Tensor): Tensor = x.tape.rmsNorm(x, param(x.tape, "weight"), eps)
    }

    companion object {
        /** Gemma's norm when [gemma], else Llama's. */
        fun of(dim: Int, eps: Double, gemma: Boolean): Norm = if (gemma) GemmaRMSNorm(dim, eps) else Plain(dim, eps)
    }
}
