package dev.tapeout.transformers

/**
 * The causal-LM families this library models, each as transformers names it: its config's `model_type`, its
 * `architectures` class, and llama.cpp's `general.architecture` for its GGUF files (null where this library reads
 * no GGUF of the family).
 */
enum class Family(
    /** `model_type` in `config.json`. */
    val modelType: String,
    /** The `*ForCausalLM` class in `architectures`. */
    val architecture: String,
    /** llama.cpp's `general.architecture`, or null. */
    val ggufArchitecture: String?,
) {
    /** Llama 1–3 (`modeling_llama.py`). */
    LLAMA("llama", "LlamaForCausalLM", "llama"),
    /** Mistral (`modeling_mistral.py`): Llama's layers, a sliding window on every layer when `sliding_window` is set. */
    MISTRAL("mistral", "MistralForCausalLM", null),
    /** Qwen2 (`modeling_qwen2.py`): q/k/v biases. */
    QWEN2("qwen2", "Qwen2ForCausalLM", "qwen2"),
    /** Qwen3 (`modeling_qwen3.py`): an RMSNorm per head on q and k. */
    QWEN3("qwen3", "Qwen3ForCausalLM", "qwen3"),
    /** Phi-3 (`modeling_phi3.py`): fused `qkv_proj` and `gate_up_proj`. */
    PHI3("phi3", "Phi3ForCausalLM", "phi3"),
    /** Gemma 2 (`modeling_gemma2.py`): softcaps, sandwich norms, alternating sliding layers. */
    GEMMA2("gemma2", "Gemma2ForCausalLM", "gemma2"),
    /** Gemma 3, text only (`modeling_gemma3.py`, `Gemma3ForCausalLM`): Gemma 2's layers with q/k norms, RoPE per layer type. */
    GEMMA3("gemma3_text", "Gemma3ForCausalLM", "gemma3"),
    ;

    /** Whether the family is Gemma's (norms `x * (1 + weight)`, a scaled embedding, GELU). */
    val isGemma: Boolean get() = this == GEMMA2 || this == GEMMA3

    companion object {
        /** The family of [modelType], or null. */
        fun ofModelType(modelType: String): Family? = values().firstOrNull { it.modelType == modelType }

        /** The family whose `*ForCausalLM` class is [architecture], or null. */
        fun ofArchitecture(architecture: String): Family? = values().firstOrNull { it.architecture == architecture }

        /** The family of llama.cpp's `general.architecture` [arch], or null. */
        fun ofGguf(arch: String): Family? = values().firstOrNull { it.ggufArchitecture == arch }

        /** Every `model_type` this library reads, for messages. */
        val known: String get() = values().joinToString { it.modelType }
    }
}
