package dev.tapeout.generate

/** Every error of dev.tapeout.generate: what happened, to which file, function or argument, and what to do. */
open class GenerateException(message: String, cause: Throwable? = null) : RuntimeException(message, cause)

/** A tokenizer file that cannot be read or understood, or ids it does not have. */
class TokenizerException(
    message: String,
    /** The tokenizer file concerned, where there is one. */
    val file: java.io.File?,
    cause: Throwable? = null,
) : GenerateException(message, cause)

/**
 * A module without the functions generate() runs: `prefill(input_ids) -> logits, present_key_<i>, present_value_<i>`
 * and `decode(input_ids, [cache_position,] past_key_<i>, past_value_<i>) -> logits, present_…`.
 */
class GenerateModuleException(
    message: String,
    /** The function at fault (`prefill` or `decode`). */
    val function: String,
) : GenerateException(message)

/** An argument of generate() it cannot honour: an empty prompt, an id outside the vocabulary, a bad setting. */
class GenerateArgumentException(
    message: String,
    /** The argument's name. */
    val argument: String,
) : GenerateException(message)

/** A prompt (with the tokens asked for) longer than the module's static KV cache holds. */
class GeneratePromptTooLongException(
    message: String,
    /** The prompt's length in tokens. */
    val promptTokens: Int,
    /** The cache rows the prompt and the new tokens need. */
    val neededRows: Int,
    /** The rows the module's static cache has. */
    val cacheRows: Int,
) : GenerateException(message)
