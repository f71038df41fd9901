package dev.tapeout.transformers

import dev.tapeout.DType
import dev.tapeout.Linear
import dev.tapeout.Module
import dev.tapeout.Rotary
import dev.tapeout.Tensor
import dev.tapeout.minus
import dev.tapeout.plus
import dev.tapeout.reshape
import dev.tapeout.times
import dev.tapeout.transpose

/**
 * The keys and values of one layer, `[1, KV, T, D]`: HF's `DynamicLayer` (T the `?` past length, this step's
 * keys concatenated behind), or with [position] set HF's `StaticLayer` (T the fixed cache length: this step's keys
 * written at `cache_position` [position], a scalar, and the rows after it masked by [mask]).
 */
class LayerCache(
    /** `[1, KV, T, D]` keys. */
    val keys: Tensor,
    /** `[1, KV, T, D]` values. */
    val values: Tensor,
    /** The static cache's write position (a scalar i32), or null for the dynamic form. */
    val position: Tensor? = null,
    /** The static cache's additive mask `[T]` (-1e9 on the rows after [position]), or null. */
    val mask: Tensor? = null,
)

/** What every layer of one forward pass shares: the positions of its queries and the RoPE tables per layer type. */
class ForwardContext(
    /** The absolute positions of this step's tokens, `[S]` i32 (`cache_position`). */
    val positions: Tensor,
    /** The rotary tables of each layer type in use. */
    val rotary: Map<LayerType, Rotary>,
)

/**
 * The self-attention every family shares, as transformers' `*Attention.forward` runs it after its projections:
 * RoPE on q and k, the cache update (`DynamicLayer` concat or `StaticLayer` write), grouped-query attention
 * (causal, within the layer's sliding window, scores softcapped where the config says so) and `o_proj`. A family
 * gives its projections ([project]) and the layer's [layerType].
 */
abstract class CausalSelfAttention(
    /** The model's config. */
    protected val c: CausalLMConfig,
    /** This layer's attention type (its window and its RoPE). */
    val layerType: LayerType,
) : Module() {
    /** `o_proj`, registered by the subclass after its input projections (state_dict order). */
    protected abstract val oProj: Linear

    /**
     * q `[1, H, S, D]`, k and v `[1, KV, S, D]` of hidden states `[1, S, hidden]`, before RoPE: the family's
     * projections (and q/k norms) with transformers' `view(*input_shape, -1, head_dim).transpose(1, 2)`.
     */
    protected abstract fun project(x: Tensor): Triple<Tensor, Tensor, Tensor>

    /** `[1, S, n·D]` → `[1, n, S, D]`; the head count is given, not `-1` (a `-1` next to a `?` is a run-time size). */
    protected fun heads(y: Tensor, x: Tensor, n: Int): Tensor =
        y.reshape(x.shape[0].toInt(), x.shape[1].toInt(), n, c.headDim).transpose(0, 2, 1, 3)

    /** Attention of `[1, S, hidden]` with [past] in front; returns the output and the layer's cache after this step. */
    operator fun invoke(x: Tensor, ctx: ForwardContext, past: LayerCache?): Pair<Tensor, LayerCache> {
        val t = x.tape
        val rotary = ctx.rotary.getValue(layerType)
        val (q0, k0, v0) = project(x)
        val q = t.rope(q0, rotary.cos, rotary.sin, rotary.interleaved)
        var k = t.rope(k0, rotary.cos, rotary.sin, rotary.interleaved)
        var v = v0
        val pos = past?.position
        if (past != null && pos == null) {
            k = t.concat(listOf(past.keys, k), axis = 2)
            v = t.concat(listOf(past.values, v), axis = 2)
        } else if (past != null && pos != null) {
            val zero = t.scalar(0.0, DType.I32)
            k = t.dynamicUpdateSlice(past.keys, k, listOf(zero, zero, pos, zero))
            v = t.dynamicUpdateSlice(past.values, v, listOf(zero, zero, pos, zero))
        }
        val window = if (layerType == LayerType.SLIDING) c.slidingWindow else null
        val softcap = c.attnLogitSoftcapping
        val staticMask = past?.mask
        // Query heads grouped over the KV heads by sdpa itself. The dynamic cache holds positions 0..T-1 and this
        // step's queries are its last S rows, so causal (bottom-right aligned) and the window are sdpa's own; the
        // static cache's rows are not aligned that way, so its mask (rows after cache_position) gets the window added.
        val a = if (staticMask == null) {
            t.sdpa(q, k, v, causal = true, scale = c.attentionScale, softcap = softcap, slidingWindow = window)
        } else {
            val mask = if (window == null) staticMask else staticMask + windowMask(ctx.positions, k, window)
            t.sdpa(q, k, v, mask = mask, scale = c.attentionScale, softcap = softcap)
        }
        val merged = a.transpose(0, 2, 1, 3).reshape(x.shape[0].toInt(), x.shape[1].toInt(), c.numAttentionHeads * c.headDim)
        return oProj(merged) to LayerCache(k, v, pos, past?.mask)
    }

    /**
     * -1e9 where a query at absolute position p (of [positions] `[S]`) must not see cache row j of [keys]
     * `[1, KV, T, D]` because it is [window] or more rows behind (transformers: p − j < window is seen), else 0: `[S, T]`.
     */
    private fun windowMask(positions: Tensor, keys: Tensor, window: Int): Tensor {
        val t = keys.tape
        val p = positions.reshape(positions.shape[0].toInt(), 1)
        val rows = t.arange(keys, 2)
        val j = rows.reshape(1, rows.shape[0].toInt())
        val far = t.compare(p - j, t.scalar(window.toDouble(), DType.I32), "GE")
        return t.convert(far, DType.F32) * -1e9
    }
}
