package dev.tapeout.examples.hf

import dev.tapeout.Checkpoint
import dev.tapeout.DType
import dev.tapeout.Embedding
import dev.tapeout.ExecutionTape
import dev.tapeout.Linear
import dev.tapeout.Module
import dev.tapeout.ModuleList
import dev.tapeout.ModuleProvider
import dev.tapeout.RMSNorm
import dev.tapeout.Rotary
import dev.tapeout.SafeTensors
import dev.tapeout.Tensor
import dev.tapeout.minus
import dev.tapeout.plus
import dev.tapeout.reshape
import dev.tapeout.rotary
import dev.tapeout.times
import dev.tapeout.transpose
import kotlin.math.pow
import java.io.File

/**
 * A Llama- or Qwen2-family checkpoint as `transformers` writes it (`save_pretrained`: `config.json` +
 * `model.safetensors`), modelled the way `modeling_llama.py` / `modeling_qwen2.py` write it: [LlamaForCausalLM] →
 * [LlamaModel] (`embed_tokens`, `layers.<i>`, `norm`) → [LlamaDecoderLayer] (`input_layernorm`, `self_attn`,
 * `post_attention_layernorm`, `mlp`), parameter keys = `state_dict()` names, so `SafeTensors.open` binds them by
 * key. Qwen2 is the same code with q/k/v biases ([LlamaConfig.qkvBias]) and, in the small sizes, a tied LM head.
 *
 * Everything transformers computes at run time is in the graph:
 * - positions: HF's `cache_position = arange(past_seen, past_seen + S)`, from the tape ([ExecutionTape.arange] of
 *   the input ids, plus the past length counted from the cache's `?` dimension);
 * - RoPE: `LlamaRotaryEmbedding` (`inv_freq = 1/θ^(2i/d)`, Llama-3 scaling from `rope_parameters`) through
 *   [ExecutionTape.rotary] and HF's `rotate_half` form through [ExecutionTape.rope];
 * - grouped-query attention: [ExecutionTape.sdpa] with 2 KV heads for 8 query heads (no `repeat_kv` materialized),
 *   causal bottom-right aligned, so one call serves the prompt and a decode step over the cache;
 * - the KV cache: HF's `DynamicCache` — `present = cat(past, new)` along a `?` past length ([ExecutionTape.concat]).
 *
 * Functions (batch 1, as HF's `[B, S]` with B = 1):
 * - `prefill(input_ids [1, ?] i32)` → `logits [1, ?, vocab]`, `present_key_<i>`, `present_value_<i>` `[1, KV, ?, D]`;
 * - `decode(input_ids [1, 1] i32, past_key_<i>, past_value_<i> [1, KV, ?, D] …)` → `logits [1, 1, vocab]` and the
 *   caches one position longer;
 * - with `static=<N>` (Gradle: `-PhfLlama.staticCache=N`) decode is HF's `StaticCache` form instead:
 *   `decode(input_ids [1, 1], cache_position [] i32, past_key_<i>, past_value_<i> [1, KV, N, D] …)`;
 * - with `logits_to_keep=1` (Gradle: `-PhfLlama.logitsToKeep=1`) prefill returns `logits [1, 1, vocab]`, the last
 *   position's only: HF's `logits_to_keep=1`, which `generate()` passes to prefill. The LM head then runs on one
 *   row instead of every position's.
 *
 * Compute is f32; a bf16 checkpoint's weights stay bf16 in the archive and are widened where they are used (the
 * tape's default `compute = F32`), which is what transformers' `model.float()` computes.
 *
 * `args`: the checkpoint directory (holding `config.json` and `model.safetensors`), optionally then `static=<N>`
 * and/or `logits_to_keep=1` ([ModelOptions]).
 */
class HfLlama : ModuleProvider {
    override fun buildTapes(args: List<String>): Map<String, ExecutionTape> {
        val dir = File(args.firstOrNull() ?: error("HfLlama takes the checkpoint directory (tapeout { args '…' }), optionally then ${ModelOptions.USAGE}"))
        val options = ModelOptions.parse("HfLlama", args.drop(1))
        val config = LlamaConfig.read(File(dir, "config.json"))
        val model = LlamaForCausalLM(config)
        val checkpoint = SafeTensors.open(File(dir, "model.safetensors"))
        // The module's keys are the checkpoint's names, both ways (save_pretrained leaves a tied lm_head out).
        val keys = model.stateDictKeys().filterNot { config.tieWordEmbeddings && it == "lm_head.weight" }.toSet()
        val missing = keys - checkpoint.tensors.keys
        val unused = checkpoint.tensors.keys - keys
        require(missing.isEmpty() && unused.isEmpty()) {
            "${checkpoint.file.path}: the model's keys and the checkpoint's differ: missing $missing, never read $unused"
        }
        return model.tapes(checkpoint, options)
    }
}

/**
 * The options after the checkpoint (or GGUF file) argument, each at most once, in any order:
 * - `static=<length>`: decode in HF's StaticCache form (a fixed-length cache written at cache_position) instead of
 *   the DynamicCache form (concat along the `?` past length);
 * - `logits_to_keep=1`: prefill computes the last position's logits only (HF's `logits_to_keep`, as `generate()`
 *   passes it); without it, every position's, as HF's `forward` does by default.
 */
class ModelOptions(
    /** The StaticCache length, or null for the DynamicCache form. */
    val staticCache: Int?,
    /** 0 (every position's logits) or 1 (the last position's). */
    val logitsToKeep: Int,
) {
    companion object {
        /** The options as a usage line. */
        const val USAGE = "static=<cache length> and/or logits_to_keep=1 (or 0)"

        /** Parses [args] for [who]'s error messages; an unknown, repeated or malformed option is refused. */
        fun parse(who: String, args: List<String>): ModelOptions {
            val seen = HashMap<String, Int>()
            for (a in args) {
                val key = a.substringBefore('=', "")
                val n = a.substringAfter('=', "").toIntOrNull()
                if (key != "static" && key != "logits_to_keep") {
                    throw IllegalArgumentException("$who: unknown option '$a' after the model file; the options are $USAGE")
                }
                if (key in seen) throw IllegalArgumentException("$who: option $key given twice ('$a')")
                seen[key] = when (key) {
                    "static" -> n?.takeIf { it > 0 }
                        ?: throw IllegalArgumentException("$who: static=<cache length> needs a positive number, not '$a'")
                    // 0 is HF's default (every position). Its other values (N > 1: the last N positions) would need
                    // prompts of at least N tokens, which a `?` length cannot promise.
                    else -> n?.takeIf { it == 0 || it == 1 } ?: throw IllegalArgumentException(
                        "$who: logits_to_keep is 1 (the last position, what generate() asks for) or 0 (every " +
                            "position, the default), not '$a'",
                    )
                }
            }
            return ModelOptions(seen["static"], seen["logits_to_keep"] ?: 0)
        }
    }
}

/** The run-time length of [x]'s [axis] (a `?` one) as an i32 scalar: the sum of a 1 per position along it. */
internal fun length(x: Tensor, axis: Int): Tensor {
    val t = x.tape
    return t.reduceSum(t.expand(t.scalar(1.0, DType.I32), t.arange(x, axis)), 0)
}

/** `LlamaMLP`: `down_proj(silu(gate_proj(x)) * up_proj(x))`. */
class LlamaMLP(c: LlamaConfig) : Module() {
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
 * The keys and values of one layer, `[1, KV, T, D]`: HF's `DynamicLayer` (T the `?` past length, this step's
 * keys concatenated behind), or with [position] set HF's `StaticLayer` (T the fixed cache length: this step's keys
 * written at `cache_position` [position], a scalar, and the rows after it masked by [mask]).
 */
class LayerCache(val keys: Tensor, val values: Tensor, val position: Tensor? = null, val mask: Tensor? = null)

/** `LlamaAttention` / `Qwen2Attention`: q/k/v/o projections, RoPE on q and k, GQA attention over the cache. */
class LlamaAttention(private val c: LlamaConfig) : Module() {
    /** `q_proj` (`[heads·D, hidden]`, biased in Qwen2). */
    val qProj = child("q_proj", Linear(c.hiddenSize, c.numAttentionHeads * c.headDim, bias = c.qkvBias))
    /** `k_proj` (`[KV·D, hidden]`). */
    val kProj = child("k_proj", Linear(c.hiddenSize, c.numKeyValueHeads * c.headDim, bias = c.qkvBias))
    /** `v_proj` (`[KV·D, hidden]`). */
    val vProj = child("v_proj", Linear(c.hiddenSize, c.numKeyValueHeads * c.headDim, bias = c.qkvBias))
    /** `o_proj`. */
    val oProj = child("o_proj", Linear(c.numAttentionHeads * c.headDim, c.hiddenSize, bias = c.oBias))

    /**
     * `proj(x).view(*input_shape, -1, head_dim).transpose(1, 2)`: `[1, S, hidden]` → `[1, heads, S, head_dim]`,
     * S taken from x as HF's `input_shape` is (a size, or `?`). The head count is given, not `-1`: on a tensor
     * with a `?` dimension tapeout's `-1` is a run-time size, not "infer".
     */
    private fun heads(p: Linear, x: Tensor, n: Int) = p(x).reshape(x.shape[0].toInt(), x.shape[1].toInt(), n, c.headDim).transpose(0, 2, 1, 3)

    /**
     * Attention of `[1, S, hidden]` at the positions of [rotary]; [past] (HF's `past_key_values` layer) is
     * concatenated in front of this step's keys and values (`DynamicLayer.update`). Returns the output and the
     * layer's cache after this step.
     */
    operator fun invoke(x: Tensor, rotary: Rotary, past: LayerCache?): Pair<Tensor, LayerCache> {
        val t = x.tape
        val q = t.rope(heads(qProj, x, c.numAttentionHeads), rotary.cos, rotary.sin, rotary.interleaved)
        var k = t.rope(heads(kProj, x, c.numKeyValueHeads), rotary.cos, rotary.sin, rotary.interleaved)
        var v = heads(vProj, x, c.numKeyValueHeads)
        val pos = past?.position
        if (past != null && pos == null) {
            k = t.concat(listOf(past.keys, k), axis = 2)
            v = t.concat(listOf(past.values, v), axis = 2)
        } else if (past != null && pos != null) {
            val zero = t.scalar(0.0, DType.I32)
            k = t.dynamicUpdateSlice(past.keys, k, listOf(zero, zero, pos, zero))
            v = t.dynamicUpdateSlice(past.values, v, listOf(zero, zero, pos, zero))
        }
        // 8 query heads over 2 KV heads: sdpa groups them itself, nothing repeated (HF: repeat_kv, then SDPA with
        // is_causal; causal is bottom-right aligned, so the one query of a decode step sees the whole cache).
        val scale = c.headDim.toDouble().pow(-0.5)
        val a = if (past?.mask != null) t.sdpa(q, k, v, mask = past.mask, scale = scale) else t.sdpa(q, k, v, causal = true, scale = scale)
        val merged = a.transpose(0, 2, 1, 3).reshape(x.shape[0].toInt(), x.shape[1].toInt(), c.numAttentionHeads * c.headDim)
        return oProj(merged) to LayerCache(k, v, pos, past?.mask)
    }
}

/** `LlamaDecoderLayer`: pre-norm attention and MLP, each with a residual. */
class LlamaDecoderLayer(c: LlamaConfig) : Module() {
    /** `self_attn`. */
    val selfAttn = child("self_attn", LlamaAttention(c))
    /** `mlp`. */
    val mlp = child("mlp", LlamaMLP(c))
    /** `input_layernorm`. */
    val inputLayernorm = child("input_layernorm", RMSNorm(c.hiddenSize, c.rmsNormEps))
    /** `post_attention_layernorm`. */
    val postAttentionLayernorm = child("post_attention_layernorm", RMSNorm(c.hiddenSize, c.rmsNormEps))

    /** One layer over `[1, S, hidden]`. */
    operator fun invoke(h: Tensor, rotary: Rotary, past: LayerCache?): Pair<Tensor, LayerCache> {
        val (a, cache) = selfAttn(inputLayernorm(h), rotary, past)
        val r = h + a
        return r + mlp(postAttentionLayernorm(r)) to cache
    }
}

/**
 * `LlamaModel`: the embedding, the layers, the final norm; positions and RoPE computed here, as HF does (on
 * interleaved pairs when [LlamaConfig.ropeInterleaved]: a GGUF's permuted q/k rows).
 */
class LlamaModel(private val c: LlamaConfig) : Module() {
    /** `embed_tokens`. */
    val embedTokens = child("embed_tokens", Embedding(c.vocabSize, c.hiddenSize))
    /** `layers.<i>`. */
    val layers = child("layers", ModuleList(List(c.numHiddenLayers) { LlamaDecoderLayer(c) }))
    /** `norm`, the final RMSNorm. */
    val norm = child("norm", RMSNorm(c.hiddenSize, c.rmsNormEps))


    /**
     * Hidden states `[1, S, hidden]` of [inputIds] `[1, S]` after the final norm, with each layer's cache.
     * `cache_position = arange(past_seen, past_seen + S)`: `past_seen` counted from the `?` length of [past].
     */
    operator fun invoke(inputIds: Tensor, past: List<LayerCache>?): Pair<Tensor, List<LayerCache>> {
        val t = inputIds.tape
        var positions = t.arange(inputIds, 1)
        val cachePosition = past?.get(0)?.position
        if (cachePosition != null) {
            positions = positions + cachePosition
        } else if (past != null) {
            positions = positions + length(past[0].keys, 2)
        }
        val rotary = t.rotary(positions.reshape(1, positions.shape[0].toInt()), c.headDim, c.ropeTheta, c.ropeScaling, c.ropeInterleaved)
        var h = embedTokens(inputIds)
        val caches = ArrayList<LayerCache>()
        for ((i, layer) in layers.withIndex()) {
            val (out, cache) = layer(h, rotary, past?.get(i))
            h = out
            caches += cache
        }
        return norm(h) to caches
    }
}

/** `LlamaForCausalLM` / `Qwen2ForCausalLM`: the model and `lm_head` (tied to `embed_tokens` when the config says so). */
class LlamaForCausalLM(
    /** The checkpoint's config. */
    val config: LlamaConfig,
) : Module() {
    /** `model`. */
    val model = child("model", LlamaModel(config))
    /** `lm_head`. */
    val lmHead = child("lm_head", Linear(config.hiddenSize, config.vocabSize, bias = false)).also {
        if (config.tieWordEmbeddings) it.tieTo(model.embedTokens)
    }

    private fun outputs(t: ExecutionTape, inputIds: Tensor, past: List<LayerCache>?, lastOnly: Boolean = false) {
        val (h, caches) = model(inputIds, past)
        t.output("logits", lmHead(if (lastOnly) lastPosition(h) else h))
        caches.forEachIndexed { i, c -> t.output("present_key_$i", c.keys); t.output("present_value_$i", c.values) }
    }

    /**
     * `hidden_states[:, -1:, :]` of `[1, S, hidden]` (S a `?` length of at least 1): a static `[1, 1, hidden]`, so
     * the LM head after it is a one-row product, as in a decode step.
     */
    private fun lastPosition(h: Tensor): Tensor {
        val zero = h.tape.scalar(0.0, DType.I32)
        return h.tape.dynamicSlice(h, listOf(zero, length(h, 1) - 1, zero), 1, 1, config.hiddenSize)
    }

    /** The `prefill` and `decode` tapes of [options]. */
    fun tapes(checkpoint: Checkpoint, options: ModelOptions): Map<String, ExecutionTape> {
        val static = options.staticCache
        val decode = if (static != null) decodeStaticTape(checkpoint, static) else decodeTape(checkpoint)
        return mapOf("prefill" to prefillTape(checkpoint, options.logitsToKeep), "decode" to decode)
    }

    /**
     * A prompt of any length: `input_ids [1, ?]`; logits of every position (`logits [1, ?, vocab]`), or with
     * [logitsToKeep] 1 of the last (`[1, 1, vocab]`).
     */
    fun prefillTape(checkpoint: Checkpoint, logitsToKeep: Int = 0): ExecutionTape {
        require(logitsToKeep == 0 || logitsToKeep == 1) { "logitsToKeep is 0 (every position) or 1 (the last), not $logitsToKeep" }
        val t = ExecutionTape()
        t.load(checkpoint)
        outputs(t, t.input("input_ids", 1, -1, dtype = DType.I32), null, lastOnly = logitsToKeep == 1)
        return t
    }

    /** One token after a cache of any length: `input_ids [1, 1]`, `past_key_<i>`/`past_value_<i>` `[1, KV, ?, D]`. */
    fun decodeTape(checkpoint: Checkpoint): ExecutionTape {
        val t = ExecutionTape()
        t.load(checkpoint)
        val ids = t.input("input_ids", 1, 1, dtype = DType.I32)
        val kv = config.numKeyValueHeads
        val past = List(config.numHiddenLayers) { i ->
            LayerCache(t.input("past_key_$i", 1, kv, -1, config.headDim), t.input("past_value_$i", 1, kv, -1, config.headDim))
        }
        outputs(t, ids, past)
        return t
    }

    /**
     * HF's `StaticCache`: one token at `cache_position` (a scalar i32, as HF passes it) into caches of a fixed
     * length [maxCache] (`past_key_<i>`/`past_value_<i>` `[1, KV, maxCache, D]`), written there with
     * dynamic_update_slice; the rows after it are masked (their scores get -1e9, weight 0 after softmax).
     */
    fun decodeStaticTape(checkpoint: Checkpoint, maxCache: Int): ExecutionTape {
        val t = ExecutionTape()
        t.load(checkpoint)
        val ids = t.input("input_ids", 1, 1, dtype = DType.I32)
        val position = t.input("cache_position", LongArray(0), DType.I32)
        val kv = config.numKeyValueHeads
        val caches = List(config.numHiddenLayers) { i ->
            t.input("past_key_$i", 1, kv, maxCache, config.headDim) to t.input("past_value_$i", 1, kv, maxCache, config.headDim)
        }
        val rows = t.arange(caches[0].first, 2)
        val later = t.compare(rows, t.expand(position, rows), "GT")
        val mask = t.convert(later, DType.F32) * -1e9
        outputs(t, ids, caches.map { (k, v) -> LayerCache(k, v, position, mask) })
        return t
    }
}
