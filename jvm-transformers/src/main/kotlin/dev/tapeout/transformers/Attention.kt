package dev.tapeout.transformers

import dev.tapeout.DType
import dev.tapeout.Linear
import dev.tapeout.Module
import dev.tapeout.Rotary
import dev.tapeout.Tensor
import dev.tapeout.matmul
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

/** The run-time length of [x]'s [axis] (a `?` one) as an i32 scalar: the sum of a 1 per position along it. */
fun length(x: Tensor, axis: Int): Tensor {
    val t = x.tape
    return t.reduceSum(t.expand(t.scalar(1.0, DType.I32), t.arange(x, axis)), 0)
}

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
        val a = if (window == null && softcap == null) {
            // Query heads grouped over the KV heads by sdpa itself; causal is bottom-right aligned, so a decode step's
            // one query sees the whole (dynamic) cache.
            if (past?.mask != null) t.sdpa(q, k, v, mask = past.mask, scale = c.attentionScale)
            else t.sdpa(q, k, v, causal = true, scale = c.attentionScale)
        } else {
            eager(q, k, v, ctx.positions, past?.mask, window, softcap)
        }
        val merged = a.transpose(0, 2, 1, 3).reshape(x.shape[0].toInt(), x.shape[1].toInt(), c.numAttentionHeads * c.headDim)
        return oProj(merged) to LayerCache(k, v, pos, past?.mask)
    }

    /**
     * transformers' `eager_attention_forward` with a softcap and/or a sliding window: `repeat_kv`, scores
     * `q·kᵀ·scale`, `tanh(s / cap)·cap`, the causal and window mask (a query at absolute position p sees the key
     * at cache row j when j ≤ p and p − j < window; the cache rows are absolute positions), softmax, `·v`.
     */
    private fun eager(q: Tensor, k: Tensor, v: Tensor, positions: Tensor, staticMask: Tensor?, window: Int?, softcap: Double?): Tensor {
        val t = q.tape
        val groups = c.numAttentionHeads / c.numKeyValueHeads
        val kr = t.repeatKv(k, groups)
        val vr = t.repeatKv(v, groups)
        var s = (q matmul kr.transpose(0, 1, 3, 2)) * c.attentionScale
        if (softcap != null) s = t.tanh(s * (1.0 / softcap)) * softcap
        // [S, 1] query positions against [1, T] key rows.
        val p = positions.reshape(positions.shape[0].toInt(), 1)
        val rows = t.arange(kr, 2)
        val j = rows.reshape(1, rows.shape[0].toInt())
        var blocked = t.convert(t.compare(j, p, "GT"), DType.F32)
        if (window != null) blocked = blocked + t.convert(t.compare(p - j, t.scalar(window.toDouble(), DType.I32), "GE"), DType.F32)
        s = s + blocked * -1e9
        if (staticMask != null) s = s + staticMask
        return t.softmax(s, -1) matmul vr
    }
}
