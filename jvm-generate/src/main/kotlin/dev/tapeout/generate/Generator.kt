package dev.tapeout.generate

import dev.tapeout.iree.IreeDType
import dev.tapeout.iree.IreeModule
import dev.tapeout.iree.IreeValue
import java.util.SplittableRandom

/**
 * Generates from a served causal LM (its [CausalLmSignature]: prefill and decode with a dynamic or a static KV
 * cache). Prefill runs on the prompt, then each decode step on the token chosen last, with the KV cache the previous
 * call returned passed back as it is: it stays on the device and is never read by the JVM (with a static cache, the
 * prompt's keys and values are copied once into caches of the static length, which prefill does not return). Only
 * the last position's logits are read. Every value it makes is closed before it returns or throws.
 *
 * One generation at a time per module: the module serializes its calls anyway. With a [tokenizer] it generates from
 * text too, streaming text and honouring stop strings.
 */
class Generator @JvmOverloads constructor(
    /** The served module. */
    val module: IreeModule,
    /** The tokenizer of its vocabulary, for the text API and stop strings. */
    val tokenizer: Tokenizer? = null,
) {
    /** The module's prefill and decode functions as generate() reads them. */
    val signature: CausalLmSignature = CausalLmSignature.of(module)

    /**
     * Generates from `promptIds`, calling [onToken] with each new id as soon as it is chosen (the stop token too).
     * Stop strings, which need the [tokenizer], are looked for in the new ids' text with special tokens kept.
     * An empty prompt or an id outside the vocabulary is a [GenerateArgumentException]; a prompt the static cache
     * cannot hold with [GenerationConfig.maxNewTokens] more tokens a [GeneratePromptTooLongException].
     */
    @JvmOverloads
    fun generate(promptIds: IntArray, config: GenerationConfig, onToken: (Int) -> Unit = {}): Generation {
        if (config.stopStrings.isNotEmpty()) {
            val tok = tokenizer ?: throw GenerateArgumentException(
                "stopStrings ${config.stopStrings} need a tokenizer to read the generated text: make the Generator with one", "stopStrings")
            val stream = TextStream(tok, skipSpecialTokens = false)
            return run(promptIds, config) { id ->
                onToken(id)
                stream.push(id)
                config.stopStrings.any { it in stream.text }
            }
        }
        return run(promptIds, config) { id -> onToken(id); false }
    }

    /**
     * Generates from `prompt`, encoded by the [tokenizer] (with its special tokens when [addSpecialTokens]), and
     * returns the new tokens' text ([skipSpecialTokens]: without special tokens such as the EOS). [onText] receives
     * the text as it grows, in pieces whose concatenation is the text (a piece is held back while it ends in an
     * incomplete UTF-8 sequence). Stop strings are looked for in that text.
     */
    @JvmOverloads
    fun generate(
        prompt: String,
        config: GenerationConfig,
        addSpecialTokens: Boolean = true,
        skipSpecialTokens: Boolean = true,
        onText: (String) -> Unit = {},
    ): TextGeneration {
        val tok = tokenizer ?: throw GenerateArgumentException("generate(prompt: String) needs a tokenizer: make the Generator with one, or pass token ids", "prompt")
        val ids = tok.encode(prompt, addSpecialTokens)
        if (ids.isEmpty()) {
            throw GenerateArgumentException("the prompt \"$prompt\" encodes to no tokens (addSpecialTokens=$addSpecialTokens): give a non-empty prompt", "prompt")
        }
        val stream = TextStream(tok, skipSpecialTokens)
        val generation = run(ids, config) { id ->
            stream.push(id).let { if (it.isNotEmpty()) onText(it) }
            config.stopStrings.any { it in stream.text }
        }
        stream.flush().let { if (it.isNotEmpty()) onText(it) }
        return TextGeneration(stream.text, generation)
    }

    /** The generation loop: `step` gets each new id and says whether to stop (a stop string). */
    private fun run(prompt: IntArray, config: GenerationConfig, step: (Int) -> Boolean): Generation {
        checkPrompt(prompt, config)
        val random = SplittableRandom(config.seed)
        // Grown as tokens come: maxNewTokens may be a bound far above what a stop token ends at.
        val tokens = ArrayList<Int>()
        var reason = StopReason.MAX_NEW_TOKENS
        var cache: List<IreeValue> = emptyList()
        try {
            val first = ids(prompt, prompt.size.toLong()).use { signature.prefill.call(it) }
            cache = first.subList(1, first.size)
            var logits = first[0].use { lastRow(it, "prefill") }
            if (signature.staticCacheRows != null) cache = placeStatic(cache, signature.staticCacheRows)
            var past = prompt.size
            while (true) {
                val id = if (config.doSample) {
                    Sampling.draw(Sampling.probabilities(logits, config.temperature, config.topK, config.topP), random)
                } else {
                    Sampling.argmax(logits)
                }
                tokens += id
                val stopString = step(id)
                if (id in config.stopTokenIds) reason = StopReason.STOP_TOKEN else if (stopString) reason = StopReason.STOP_STRING
                if (reason != StopReason.MAX_NEW_TOKENS || tokens.size == config.maxNewTokens) break
                val out = decodeStep(id, past, cache)
                cache.forEach { it.close() }
                cache = out.subList(1, out.size)
                logits = out[0].use { lastRow(it, "decode step ${tokens.size}") }
                past++
            }
        } finally {
            cache.forEach { it.close() }
        }
        return Generation(prompt.copyOf(), tokens.toIntArray(), reason)
    }

    private fun checkPrompt(prompt: IntArray, config: GenerationConfig) {
        if (prompt.isEmpty()) throw GenerateArgumentException("the prompt is empty: give at least one token id (e.g. the BOS)", "promptIds")
        val vocab = signature.vocabSize
        for ((i, id) in prompt.withIndex()) {
            if (id < 0 || (vocab != null && id >= vocab)) {
                throw GenerateArgumentException("promptIds[$i] is $id, outside the module's vocabulary of $vocab ids", "promptIds")
            }
        }
        val rows = signature.staticCacheRows ?: return
        val needed = prompt.size + config.maxNewTokens - 1
        if (needed > rows) {
            val most = rows - prompt.size + 1
            throw GeneratePromptTooLongException(
                "a prompt of ${prompt.size} tokens and maxNewTokens ${config.maxNewTokens} need $needed cache rows; the module's static " +
                    "cache has $rows: " + (if (most >= 1) "ask for at most $most new tokens, " else "") +
                    "shorten the prompt, or export with a longer static cache",
                prompt.size, needed, rows,
            )
        }
    }

    /** One decode call on `id` at position `past`; the caller closes the caches it passed. */
    private fun decodeStep(id: Int, past: Int, cache: List<IreeValue>): List<IreeValue> {
        val made = ArrayList<IreeValue>()
        try {
            val byName = HashMap<String, IreeValue>()
            byName["input_ids"] = ids(intArrayOf(id), 1).also { made += it }
            if (signature.staticCacheRows != null) {
                val type = signature.decode.inputs.first { it.name == "cache_position" }.dtype
                byName["cache_position"] = (if (type == IreeDType.I64) module.value(longArrayOf(past.toLong())) else module.value(intArrayOf(past))).also { made += it }
            }
            for (i in 0 until signature.layers) {
                byName["past_key_$i"] = cache[2 * i]
                byName["past_value_$i"] = cache[2 * i + 1]
            }
            return signature.decode.call(*signature.decode.inputs.map { byName.getValue(it.name) }.toTypedArray())
        } finally {
            made.forEach { it.close() }
        }
    }

    private fun ids(ids: IntArray, length: Long): IreeValue =
        if (signature.idType == IreeDType.I64) module.value(LongArray(ids.size) { ids[it].toLong() }, 1, length) else module.value(ids, 1, length)

    /**
     * The last position's logits of `[1, rows, vocab]` (every position's, or the last's with logits_to_keep=1). A NaN
     * is refused: neither argmax nor sampling means anything then.
     */
    private fun lastRow(logits: IreeValue, step: String): FloatArray {
        val vocab = logits.shape.last().toInt()
        val row = logits.toFloatArray().let { it.copyOfRange(it.size - vocab, it.size) }
        val nan = row.indexOfFirst { it.isNaN() }
        if (nan >= 0) {
            throw GenerateModuleException("$step returned a NaN logit (token $nan of $vocab): the module's numbers are broken, check its export", step.substringBefore(' '))
        }
        return row
    }

    /** Prefill's caches `[b, kv, prompt, d]` copied once to the head of `[b, kv, rows, d]` ones; closes the originals. */
    private fun placeStatic(presents: List<IreeValue>, rows: Int): List<IreeValue> {
        val placed = ArrayList<IreeValue>()
        try {
            for (x in presents) {
                val dtype = x.dtype ?: throw GenerateModuleException("prefill returned a cache of an element type tapeout does not name", "prefill")
                val (b, kv, past, d) = x.shape.toList()
                val src = x.toByteArray()
                val run = (past * d * dtype.bytes).toInt()
                val padded = ByteArray((b * kv * rows * d * dtype.bytes).toInt())
                for (r in 0 until (b * kv).toInt()) System.arraycopy(src, r * run, padded, (r * rows * d * dtype.bytes).toInt(), run)
                placed += module.value(padded, dtype, b, kv, rows.toLong(), d)
            }
        } catch (e: Throwable) {
            placed.forEach { it.close() }
            throw e
        } finally {
            presents.forEach { it.close() }
        }
        return placed
    }
}
