package dev.tapeout

/**
 * The frequency scaling of rotary embeddings, as transformers' `rope_scaling` names it (`rope_type`): [None]
 * (`default`), [Linear] (`linear`), [Llama3] (`llama3`).
 */
sealed class RopeScaling {
    /** transformers' `default`: `inv_freq = 1 / θ^(2i/d)`. */
    object None : RopeScaling() {
        override fun toString(): String = "RopeScaling.None"
    }

    /** transformers' `linear`: every inverse frequency divided by [factor] (positions interpolated). */
    data class Linear(val factor: Double) : RopeScaling()

    /**
     * transformers' `llama3` (Llama 3.1 and later): wavelengths above `originalMaxPositions / lowFreqFactor` are
     * divided by [factor], those below `originalMaxPositions / highFreqFactor` kept, and those between
     * interpolated smoothly.
     */
    data class Llama3(val factor: Double, val lowFreqFactor: Double, val highFreqFactor: Double, val originalMaxPositions: Int) : RopeScaling()
}

/**
 * Rotary tables for [LayerOps.rope]: [cos] and [sin] full width D, in the pair layout of [interleaved] (false:
 * transformers' `cat(freqs, freqs)`; true: each angle twice in a row, GPT-J/GGUF), float32.
 */
class Rotary internal constructor(val cos: Tensor, val sin: Tensor, val interleaved: Boolean)

/**
 * transformers' inverse frequencies for a head dimension [headDim]: `1 / θ^(2i/d)` for `i < d/2`, then [scaling],
 * computed in float32 step by step as transformers computes them (`_compute_default_rope_parameters`,
 * `_compute_linear_scaling_rope_parameters`, `_compute_llama3_parameters`).
 */
fun ropeInverseFrequencies(headDim: Int, theta: Double = 10000.0, scaling: RopeScaling = RopeScaling.None): FloatArray {
    require(headDim > 0 && headDim % 2 == 0) { "the head dimension must be even and positive, not $headDim" }
    require(theta > 0.0 && theta.isFinite()) { "theta must be a positive number, not $theta" }
    val d = headDim.toFloat()
    val base = theta.toFloat()
    val inv = FloatArray(headDim / 2) { i -> 1.0f / Math.pow(base.toDouble(), ((2 * i).toFloat() / d).toDouble()).toFloat() }
    return when (scaling) {
        RopeScaling.None -> inv
        is RopeScaling.Linear -> {
            require(scaling.factor > 0.0) { "RopeScaling.Linear needs a positive factor, not ${scaling.factor}" }
            val f = scaling.factor.toFloat()
            FloatArray(inv.size) { inv[it] / f }
        }
        is RopeScaling.Llama3 -> llama3(inv, scaling)
    }
}

/** transformers' `_compute_llama3_parameters` on [inv], in float32 like its torch tensors. */
private fun llama3(inv: FloatArray, s: RopeScaling.Llama3): FloatArray {
    require(s.factor > 0.0 && s.highFreqFactor > s.lowFreqFactor && s.lowFreqFactor > 0.0 && s.originalMaxPositions > 0) {
        "RopeScaling.Llama3 needs factor > 0, 0 < lowFreqFactor < highFreqFactor and originalMaxPositions > 0, got $s"
    }
    val factor = s.factor.toFloat()
    val low = s.lowFreqFactor.toFloat()
    val old = s.originalMaxPositions.toFloat()
    val lowWavelen = (s.originalMaxPositions / s.lowFreqFactor).toFloat()
    val highWavelen = (s.originalMaxPositions / s.highFreqFactor).toFloat()
    val span = (s.highFreqFactor - s.lowFreqFactor).toFloat()
    val twoPi = (2 * Math.PI).toFloat()
    return FloatArray(inv.size) { i ->
        val wavelen = twoPi / inv[i]
        val scaled = if (wavelen > lowWavelen) inv[i] / factor else inv[i]
        val smooth = (old / wavelen - low) / span
        val smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled
        val medium = !(wavelen < highWavelen) && !(wavelen > lowWavelen)
        if (medium) smoothed else scaled
    }
}

/**
 * Rotary embedding tables computed in the graph from integer [positions] `[S]` or `[B, S]` (S may be `?`): the
 * angles `positions × inv_freq` ([ropeInverseFrequencies], a constant of D floats: no table grows with the
 * context) and their cosines and sines, as transformers' rotary embedding modules compute them. The tables are
 * `[S, D]` for `[S]` positions and `[B, 1, S, D]` for `[B, S]` (transformers' `[B, S, D]` with the head axis that
 * `apply_rotary_pos_emb` unsqueezes), ready for [LayerOps.rope] on `[B, H, S, D]`.
 */
fun ExecutionTape.rotary(positions: Tensor, headDim: Int, theta: Double = 10000.0, scaling: RopeScaling = RopeScaling.None,
                         interleaved: Boolean = false): Rotary {
    if (positions.dtype.isFloat || positions.dtype == DType.BOOL) {
        fail("rotary", listOf(positions), "positions must be integers (I32 or I64), not ${positions.dtype}")
    }
    if (positions.rank != 1 && positions.rank != 2) fail("rotary", listOf(positions), "positions must be [S] or [B, S]")
    // ropeInverseFrequencies checks the head dimension, theta and the scaling: its refusal names this line.
    val inv = try {
        ropeInverseFrequencies(headDim, theta, scaling)
    } catch (e: IllegalArgumentException) {
        fail("rotary", listOf(positions), e.message ?: "bad rotary parameters")
    }
    val half = headDim / 2
    val wide = FloatArray(headDim) { j -> if (interleaved) inv[j / 2] else inv[j % half] }
    val freqs = newTensor(null, longArrayOf(headDim.toLong()), DType.F32, null, FloatArrayTensorData(wide))
    val p = convert(positions, DType.F32)
    val column = if (positions.rank == 1) reshape(p, positions.shape[0], 1L)
    else reshape(p, positions.shape[0], 1L, positions.shape[1], 1L)
    val angles = mul(column, freqs)
    return Rotary(cos(angles), sin(angles), interleaved)
}
