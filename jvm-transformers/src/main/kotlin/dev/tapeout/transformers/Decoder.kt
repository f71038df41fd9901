package dev.tapeout.transformers

import dev.tapeout.Embedding
import dev.tapeout.Module
import dev.tapeout.ModuleList
import dev.tapeout.Tensor
import dev.tapeout.plus
import dev.tapeout.reshape
import dev.tapeout.rotary
import dev.tapeout.times

/** One decoder layer of any family: hidden states `[1, S, hidden]` in, out, with the layer's cache. */
abstract class DecoderLayer : Module() {
    /** The layer over [h] with [past] (null in prefill). */
    abstract operator fun invoke(h: Tensor, ctx: ForwardContext, past: LayerCache?): Pair<Tensor, LayerCache>
}

/**
 * `LlamaDecoderLayer` (and Mistral's, Qwen2's, Qwen3's, Phi-3's): pre-norm attention and MLP, each with a
 * residual. The family picks the attention and the MLP.
 */
class PreNormDecoderLayer(c: CausalLMConfig, layerType: LayerType) : DecoderLayer() {
    /** `self_attn`. */
    val selfAttn: CausalSelfAttention = child("self_attn", when (c.family) {
        Family.PHI3 -> Phi3Attention(c, layerType)
        Family.QWEN3 -> QkNormAttention(c, layerType, gemmaNorm = false)
        else -> LlamaAttention(c, layerType)
    })
    /** `mlp`. */
    val mlp: FeedForward = child("mlp", if (c.family == Family.PHI3) Phi3MLP(c) else LlamaMLP(c))
    /** `input_layernorm`. */
    val inputLayernorm = child("input_layernorm", Norm.Plain(c.hiddenSize, c.rmsNormEps))
    /** `post_attention_layernorm`. */
    val postAttentionLayernorm = child("post_attention_layernorm", Norm.Plain(c.hiddenSize, c.rmsNormEps))

    override fun invoke(h: Tensor, ctx: ForwardContext, past: LayerCache?): Pair<Tensor, LayerCache> {
        val (a, cache) = selfAttn(inputLayernorm(h), ctx, past)
        val r = h + a
        return r + mlp(postAttentionLayernorm(r)) to cache
    }
}

/**
 * `Gemma2DecoderLayer` / `Gemma3DecoderLayer`: sandwich norms (`x * (1 + weight)`, or `x * weight` for a GGUF's),
 * `r + post_attention_layernorm(attn(input_layernorm(h)))`, then `r + post_feedforward_layernorm(mlp(
 * pre_feedforward_layernorm(r)))`; Gemma 3's attention normalizes q and k.
 */
class GemmaDecoderLayer(c: CausalLMConfig, layerType: LayerType) : DecoderLayer() {
    /** `self_attn`. */
    val selfAttn: CausalSelfAttention = child("self_attn",
        if (c.family == Family.GEMMA3) QkNormAttention(c, layerType, gemmaNorm = c.offsetNorms) else LlamaAttention(c, layerType))
    /** `mlp`. */
    val mlp = child("mlp", GemmaMLP(c))
    /** `input_layernorm`. */
    val inputLayernorm = child("input_layernorm", Norm.of(c.hiddenSize, c.rmsNormEps, c.offsetNorms))
    /** `post_attention_layernorm`. */
    val postAttentionLayernorm = child("post_attention_layernorm", Norm.of(c.hiddenSize, c.rmsNormEps, c.offsetNorms))
    /** `pre_feedforward_layernorm`. */
    val preFeedforwardLayernorm = child("pre_feedforward_layernorm", Norm.of(c.hiddenSize, c.rmsNormEps, c.offsetNorms))
    /** `post_feedforward_layernorm`. */
    val postFeedforwardLayernorm = child("post_feedforward_layernorm", Norm.of(c.hiddenSize, c.rmsNormEps, c.offsetNorms))

    override fun invoke(h: Tensor, ctx: ForwardContext, past: LayerCache?): Pair<Tensor, LayerCache> {
        val (a, cache) = selfAttn(inputLayernorm(h), ctx, past)
        val r = h + postAttentionLayernorm(a)
        return r + postFeedforwardLayernorm(mlp(preFeedforwardLayernorm(r))) to cache
    }
}

/**
 * `LlamaModel` and its kin: `embed_tokens` (times Gemma's `embed_scale`), `layers.<i>`, the final `norm`; the
 * positions (`cache_position`) and the RoPE tables of each layer type computed here, as transformers does.
 */
class DecoderModel(private val c: CausalLMConfig) : Module() {
    /** `embed_tokens`. */
    val embedTokens = child("embed_tokens", Embedding(c.vocabSize, c.hiddenSize))
    /** `layers.<i>`. */
    val layers = child("layers", ModuleList(List(c.numHiddenLayers) { i ->
        if (c.family.isGemma) GemmaDecoderLayer(c, c.layerTypes[i]) else PreNormDecoderLayer(c, c.layerTypes[i])
    }))
    /** `norm`, the final norm. */
    val norm: Norm = child("norm", Norm.of(c.hiddenSize, c.rmsNormEps, c.offsetNorms))

    /**
     * Hidden states `[1, S, hidden]` of [inputIds] `[1, S]` after the final norm, with each layer's cache.
     * `cache_position = arange(past_seen, past_seen + S)`: `past_seen` is the static cache's position, or the `?`
     * length of the dynamic [past].
     */
    operator fun invoke(inputIds: Tensor, past: List<LayerCache>?): Pair<Tensor, List<LayerCache>> {
        val t = inputIds.tape
        var positions = t.arange(inputIds, 1)
        val cachePosition = past?.get(0)?.position
        if (cachePosition != null) positions = positions + cachePosition
        else if (past != null) positions = positions + t.length(past[0].keys, 2)
        val rows = positions.reshape(1, positions.shape[0].toInt())
        val rotary = c.rope.mapValues { (_, r) -> t.rotary(rows, c.headDim, r.theta, r.scaling, c.ropeInterleaved) }
        val ctx = ForwardContext(positions, rotary)
        var h = embedTokens(inputIds)
        c.embedScale?.let { h = h * it }
        val caches = ArrayList<LayerCache>()
        for ((i, layer) in layers.withIndex()) {
            val (out, cache) = layer(h, ctx, past?.get(i))
            h = out
            caches += cache
        }
        return norm(h) to caches
    }
}
