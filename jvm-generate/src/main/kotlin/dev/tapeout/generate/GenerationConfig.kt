package dev.tapeout.generate

/**
 * What [Generator.generate] does, named and defaulted as transformers' `GenerationConfig`: greedy unless [doSample];
 * when sampling, the logits are divided by [temperature], then [topK] and [topP] filter them (in that order, as
 * transformers' warpers do) and a token is drawn from the renormalized softmax with a generator seeded by [seed], so
 * a run with the same seed draws the same tokens. Generation stops after [maxNewTokens] tokens, at a token of
 * [stopTokenIds] (kept in the output, as transformers keeps its EOS) or once the generated text contains one of
 * [stopStrings] (which needs a [Tokenizer]). Settings that cannot be honoured are a [GenerateArgumentException].
 */
class GenerationConfig @JvmOverloads constructor(
    /** The most tokens to generate; at least 1. */
    val maxNewTokens: Int,
    /** Sample instead of taking the argmax. */
    val doSample: Boolean = false,
    /** The divisor of the logits before sampling; positive. */
    val temperature: Double = 1.0,
    /** Keep the [topK] most likely tokens (those tied with the k-th too); 0 keeps all. */
    val topK: Int = 0,
    /** Keep the most likely tokens whose probabilities sum to at least [topP]; 1.0 keeps all. */
    val topP: Double = 1.0,
    /** The seed of the sampling generator. */
    val seed: Long = 0L,
    /** Token ids that end generation (an EOS). */
    val stopTokenIds: Set<Int> = emptySet(),
    /** Texts that end generation once the generated text contains one. */
    val stopStrings: List<String> = emptyList(),
) {
    init {
        fun bad(argument: String, message: String): Nothing = throw GenerateArgumentException(message, argument)
        if (maxNewTokens < 1) bad("maxNewTokens", "maxNewTokens is $maxNewTokens: ask for at least 1 new token")
        if (!(temperature > 0.0) || temperature.isInfinite()) {
            bad("temperature", "temperature is $temperature: use a positive finite value (or doSample = false for greedy)")
        }
        if (topK < 0) bad("topK", "topK is $topK: use 0 (no top-k filter) or a positive count")
        if (!(topP > 0.0 && topP <= 1.0)) bad("topP", "topP is $topP: use a value in (0, 1] (1.0: no top-p filter)")
        stopStrings.forEachIndexed { i, s -> if (s.isEmpty()) bad("stopStrings", "stopStrings[$i] is empty: an empty text would stop at once") }
    }

    override fun toString() =
        "GenerationConfig(maxNewTokens=$maxNewTokens, doSample=$doSample, temperature=$temperature, topK=$topK, " +
            "topP=$topP, seed=$seed, stopTokenIds=$stopTokenIds, stopStrings=$stopStrings)"
}
