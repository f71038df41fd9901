package dev.tapeout.generate

/** Why generation ended. */
enum class StopReason {
    /** [GenerationConfig.maxNewTokens] tokens were generated. */
    MAX_NEW_TOKENS,

    /** A token of [GenerationConfig.stopTokenIds] was generated (it is the last of the tokens). */
    STOP_TOKEN,

    /** The generated text came to contain a [GenerationConfig.stopStrings] entry. */
    STOP_STRING,
}

/** The result of [Generator.generate] on token ids: the prompt, the new tokens (not the prompt's) and why it ended. */
class Generation(
    /** The prompt's ids. */
    val promptIds: IntArray,
    /** The generated ids, in order. */
    val tokens: IntArray,
    /** Why it ended. */
    val stopReason: StopReason,
) {
    override fun toString() = "Generation(${tokens.toList()}, $stopReason)"
}

/** The result of [Generator.generate] on text: the generated text (the prompt's not included) and its tokens. */
class TextGeneration(
    /** The new tokens decoded. */
    val text: String,
    /** The ids and why generation ended. */
    val generation: Generation,
) {
    override fun toString() = "TextGeneration(${text.length} chars, ${generation.tokens.size} tokens, ${generation.stopReason})"
}
