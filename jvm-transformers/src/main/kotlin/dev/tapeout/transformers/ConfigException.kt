package dev.tapeout.transformers

import dev.tapeout.TapeoutException

/**
 * A checkpoint's config (a `config.json`, or a GGUF's `<arch>.*` metadata) has a key or value this library cannot
 * honour: a missing size, a RoPE type it does not implement, a sliding window where the family has none, an
 * architecture it does not model. [source] is the file, [key] the key (`rope_parameters.full_attention.rope_type`
 * for a nested one); the message says what was found and what to do. Nothing is defaulted in its place.
 */
class ConfigException(
    /** The file the config came from (its path). */
    val source: String,
    /** The key, dotted for a nested one. */
    val key: String,
    /** What was wrong and what to do. */
    problem: String,
) : TapeoutException("$source: $key: $problem")
