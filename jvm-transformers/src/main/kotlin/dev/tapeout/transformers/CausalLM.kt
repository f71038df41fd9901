package dev.tapeout.transformers

import dev.tapeout.Checkpoint
import dev.tapeout.DYNAMIC
import dev.tapeout.DType
import dev.tapeout.ExecutionTape
import dev.tapeout.Linear
import dev.tapeout.Module
import dev.tapeout.Tensor
import dev.tapeout.minus
import dev.tapeout.reshape
import dev.tapeout.times

/**
 * `<Family>ForCausalLM`: `model` ([DecoderModel]) and `lm_head` (tied to `embed_tokens` when the config says so),
 * logits softcapped where Gemma's `final_logit_softcapping` says. Its parameter keys are transformers'
 * `state_dict()` names, so a checkpoint binds by key. [tapes] builds the exported functions:
 * - `prefill(input_ids [1, ?] i32)` → `logits [1, ?, vocab]` (or `[1, 1, vocab]` with `logits_to_keep=1`),
 *   `present_key_<i>`, `present_value_<i>` `[1, KV, ?, D]`;
 * - `decode(input_ids [1, 1] i32, past_key_<i>, past_value_<i> [1, KV, ?, D] …)` → `logits [1, 1, vocab]` and the
 *   caches one position longer (HF's `DynamicCache`), or with a static cache of N rows
 *   `decode(input_ids [1, 1], cache_position [] i32, past_key_<i>, past_value_<i> [1, KV, N, D] …)` (HF's `StaticCache`).
 *
 * With a run-time batch ([ModelOptions.dynamicBatch]) every leading 1 above is `?` (dynamic cache form only): B rows
 * of one length each call, as transformers runs a batch without an `attention_mask`; there is no padding mask, so
 * rows of different lengths must be served in separate calls.
 *
 * Compute is f32; a bf16 checkpoint's weights stay bf16 in the archive and are widened where they are used, which
 * is what transformers' `model.float()` computes.
 */
class CausalLM(
    /** The checkpoint's config. */
    val config: CausalLMConfig,
) : Module() {
    /** `model`. */
    val model = child("model", DecoderModel(config))
    /** `lm_head`. */
    val lmHead = child("lm_head", Linear(config.hiddenSize, config.vocabSize, bias = false)).also {
        if (config.tieWordEmbeddings) it.tieTo(model.embedTokens)
    }

    /** The `state_dict()` keys a checkpoint must hold: every parameter key, less a tied `lm_head.weight`. */
    fun checkpointKeys(): Set<String> = stateDictKeys().filterNot { config.tieWordEmbeddings && it == "lm_head.weight" }.toSet()

    private fun outputs(t: ExecutionTape, inputIds: Tensor, past: List<LayerCache>?, lastOnly: Boolean = false) {
        val (h, caches) = model(inputIds, past)
        var logits = lmHead(if (lastOnly) lastPosition(h) else h)
        config.finalLogitSoftcapping?.let { cap -> logits = t.tanh(logits * (1.0 / cap)) * cap }
        t.output("logits", logits)
        caches.forEachIndexed { i, c -> t.output("present_key_$i", c.keys); t.output("present_value_$i", c.values) }
    }

    /**
     * `hidden_states[:, -1:, :]` of `[B, S, hidden]` (S ≥ 1, a `?` length): `[B, 1, hidden]`. A `?` batch cannot be
     * a dynamic_slice's static size, so it gathers position S − 1 along the sequence instead.
     */
    private fun lastPosition(h: Tensor): Tensor {
        val t = h.tape
        val last = t.length(h, 1) - 1
        if (h.shape[0] == DYNAMIC) return t.gather(h, last.reshape(1), axis = 1)
        val zero = t.scalar(0.0, DType.I32)
        return t.dynamicSlice(h, listOf(zero, last, zero), 1, 1, config.hiddenSize)
    }

    /** The `prefill` and `decode` tapes of [options], reading parameters from [checkpoints] (a sharded checkpoint's files). */
    fun tapes(checkpoints: List<Checkpoint>, options: ModelOptions): Map<String, ExecutionTape> {
        val static = options.staticCache
        val batch = if (options.dynamicBatch) DYNAMIC.toInt() else 1
        val decode = if (static != null) decodeStaticTape(checkpoints, static) else decodeTape(checkpoints, batch)
        return mapOf("prefill" to prefillTape(checkpoints, options.logitsToKeep, batch), "decode" to decode)
    }

    private fun tape(checkpoints: List<Checkpoint>) = ExecutionTape().also { t -> checkpoints.forEach { t.load(it) } }

    /**
     * A prompt of any length: `input_ids [batch, ?]` ([batch] 1, or [DYNAMIC] for a run-time batch of equal-length
     * rows); every position's logits, or with [logitsToKeep] 1 the last's.
     */
    fun prefillTape(checkpoints: List<Checkpoint>, logitsToKeep: Int = 0, batch: Int = 1): ExecutionTape {
        require(logitsToKeep == 0 || logitsToKeep == 1) { "logitsToKeep is 0 (every position) or 1 (the last), not $logitsToKeep" }
        requireBatch(batch)
        val t = tape(checkpoints)
        outputs(t, t.input("input_ids", batch, -1, dtype = DType.I32), null, lastOnly = logitsToKeep == 1)
        return t
    }

    /**
     * One token per row after a cache of any length: `input_ids [batch, 1]`, `past_key_<i>`/`past_value_<i>`
     * `[batch, KV, ?, D]` ([batch] 1, or [DYNAMIC] for a run-time batch).
     */
    fun decodeTape(checkpoints: List<Checkpoint>, batch: Int = 1): ExecutionTape {
        requireBatch(batch)
        val t = tape(checkpoints)
        val ids = t.input("input_ids", batch, 1, dtype = DType.I32)
        val kv = config.numKeyValueHeads
        val past = List(config.numHiddenLayers) { i ->
            LayerCache(t.input("past_key_$i", batch, kv, -1, config.headDim), t.input("past_value_$i", batch, kv, -1, config.headDim))
        }
        outputs(t, ids, past)
        return t
    }

    private fun requireBatch(batch: Int) =
        require(batch == 1 || batch.toLong() == DYNAMIC) { "batch is 1 or DYNAMIC (a run-time batch), not $batch" }

    /**
     * HF's `StaticCache`: one token at `cache_position` (a scalar i32, as HF passes it) into caches of [maxCache]
     * rows, written there with dynamic_update_slice; the rows after it are masked (scores -1e9, weight 0).
     */
    fun decodeStaticTape(checkpoints: List<Checkpoint>, maxCache: Int): ExecutionTape {
        val t = tape(checkpoints)
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
