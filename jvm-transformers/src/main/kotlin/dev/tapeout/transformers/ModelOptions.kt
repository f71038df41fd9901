package dev.tapeout.transformers

/**
 * The export options after the model file, each at most once, in any order:
 * - `static=<length>`: decode in HF's StaticCache form (a fixed-length cache written at cache_position) instead of
 *   the DynamicCache form (concat along the `?` past length);
 * - `logits_to_keep=1`: prefill computes the last position's logits only (HF's `logits_to_keep`, as `generate()`
 *   passes it); without it, every position's, as HF's `forward` does by default;
 * - `batch=dynamic`: a run-time batch (`input_ids [?, ?]`, caches `[?, KV, ?, D]`) instead of one row (`batch=1`,
 *   the default). Every row of a call has the same length: there is no padding mask, so prompts of different
 *   lengths cannot share a batch. Only the dynamic cache form takes it (not `static=`).
 */
class ModelOptions(
    /** The StaticCache length, or null for the DynamicCache form. */
    val staticCache: Int? = null,
    /** 0 (every position's logits) or 1 (the last position's). */
    val logitsToKeep: Int = 0,
    /** Whether the batch is a run-time size (`?`) rather than 1. */
    val dynamicBatch: Boolean = false,
) {
    init {
        require(staticCache == null || staticCache > 0) { "staticCache must be a positive length, not $staticCache" }
        require(staticCache == null || !dynamicBatch) { "a run-time batch takes the dynamic cache form only, not staticCache $staticCache" }
        require(logitsToKeep == 0 || logitsToKeep == 1) { "logitsToKeep is 0 (every position) or 1 (the last), not $logitsToKeep" }
    }

    companion object {
        /** The options as a usage line. */
        const val USAGE = "static=<cache length>, logits_to_keep=1 (or 0), batch=dynamic (or 1)"

        /** Parses [args] for [who]'s error messages; an unknown, repeated or malformed option is refused. */
        fun parse(who: String, args: List<String>): ModelOptions {
            val seen = HashMap<String, Int>()
            for (a in args) {
                val key = a.substringBefore('=', "")
                val value = a.substringAfter('=', "")
                val n = value.toIntOrNull()
                if (key != "static" && key != "logits_to_keep" && key != "batch") {
                    throw IllegalArgumentException("$who: unknown option '$a' after the model file; the options are $USAGE")
                }
                if (key in seen) throw IllegalArgumentException("$who: option $key given twice ('$a')")
                seen[key] = when (key) {
                    "static" -> n?.takeIf { it > 0 }
                        ?: throw IllegalArgumentException("$who: static=<cache length> needs a positive number, not '$a'")
                    // -1 stands for `?`: the batch is 1 or a run-time size, never another fixed number (nothing
                    // exported here needs one, and a wrong fixed batch would only fail at run time).
                    "batch" -> when (value) {
                        "dynamic" -> -1
                        "1" -> 1
                        else -> throw IllegalArgumentException("$who: batch is 'dynamic' (a run-time batch) or 1 (the default), not '$a'")
                    }
                    // 0 is HF's default (every position). Its other values (N > 1: the last N positions) would need
                    // prompts of at least N tokens, which a `?` length cannot promise.
                    else -> n?.takeIf { it == 0 || it == 1 } ?: throw IllegalArgumentException(
                        "$who: logits_to_keep is 1 (the last position, what generate() asks for) or 0 (every " +
                            "position, the default), not '$a'",
                    )
                }
            }
            val dynamicBatch = seen["batch"] == -1
            if (dynamicBatch && "static" in seen) {
                throw IllegalArgumentException("$who: batch=dynamic takes the dynamic cache form only; drop static=${seen["static"]} " +
                    "(a static cache of a run-time batch is not exported) or batch=dynamic")
            }
            return ModelOptions(seen["static"], seen["logits_to_keep"] ?: 0, dynamicBatch)
        }
    }
}
