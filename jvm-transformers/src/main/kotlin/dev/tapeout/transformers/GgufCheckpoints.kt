package dev.tapeout.transformers

import dev.tapeout.Checkpoint
import dev.tapeout.Gguf
import dev.tapeout.HfConfig
import java.io.File

/**
 * llama.cpp GGUF files (what `convert_hf_to_gguf.py` writes, and `llama-quantize` after it: F16, Q8_0, Q4_0, …) read
 * as the same model as a transformers checkpoint of their family, their packed tensors kept packed. Three things
 * differ from a `save_pretrained` directory, and each is read here:
 * - the config is the file's `<arch>.*` metadata ([config]: the keys transformers' GGUF loader maps, e.g.
 *   `llama.embedding_length` → `hidden_size`, `llama.rope.freq_base` → `rope_theta`);
 * - the tensors have llama.cpp's names (`token_embd`, `blk.N.attn_q`, …, `output_norm`, `output`), bound under the
 *   `state_dict()` keys by [Checkpoint.renamed], the bytes staying in the file; no `output.weight` is a tied head;
 * - for `llama` files, llama.cpp's converter permutes the rows of `q_proj` and `k_proj` inside each head (row `2i`
 *   is HF's row `i`, row `2i + 1` HF's row `i + D/2`) so that its RoPE rotates adjacent pairs. This model keeps the
 *   file's rows and rotates interleaved pairs ([CausalLMConfig.ropeInterleaved]): with `P` the row permutation,
 *   interleaved-RoPE(`P·q`) = `P`·rotate_half-RoPE(`q`), the same for k, and `(P·q)·(P·k)` = `q·k` per head, so the
 *   logits are transformers' up to rounding, and the packed weights need no row gather. The converter leaves the
 *   rows of `qwen2`, `qwen3` and `phi3` files as they are (llama.cpp rotates halves for those), so they rotate halves.
 *
 * `general.architecture` `llama`, `qwen2`, `qwen3`, `phi3`, `gemma2` and `gemma3` are read (Qwen3's and Gemma 3's
 * `attn_q_norm`/`attn_k_norm`, Phi-3's fused `attn_qkv` and `ffn_up`, Gemma's sandwich norms, whose weights the
 * converter stored with the `1 +` added: [CausalLMConfig.normWeightsIncludeOne]); another is a [ConfigException]
 * naming it. A Gemma file states what llama.cpp runs: its layer pattern (every second layer of Gemma 2, every sixth
 * of Gemma 3 full), Gemma 3's local RoPE base (`rope.freq_base_swa`), the softcaps, and the attention scale
 * llama.cpp uses in place of `query_pre_attn_scalar`.
 */
object GgufCheckpoints {
    /** llama.cpp's per-layer tensor names (`blk.N.<name>`) → the HF module path under `model.layers.N`. */
    private val LAYER_TENSORS = mapOf(
        "attn_norm" to "input_layernorm",
        "attn_q" to "self_attn.q_proj",
        "attn_k" to "self_attn.k_proj",
        "attn_v" to "self_attn.v_proj",
        "attn_output" to "self_attn.o_proj",
        "ffn_norm" to "post_attention_layernorm",
        "ffn_gate" to "mlp.gate_proj",
        "ffn_up" to "mlp.up_proj",
        "ffn_down" to "mlp.down_proj",
    )
    private val GLOBAL_TENSORS = mapOf("token_embd" to "model.embed_tokens", "output_norm" to "model.norm", "output" to "lm_head")
    private val LAYER_NAME = Regex("""blk\.(\d+)\.(\w+)\.(weight|bias)""")
    private val GLOBAL_NAME = Regex("""(\w+)\.(weight|bias)""")

    /** The model of the GGUF [file], its tensors checked against the model's keys both ways. */
    fun open(file: File): PretrainedCausalLM {
        val gguf = Gguf.open(file)
        val config = config(gguf)
        val model = CausalLM(config)
        val checkpoint = gguf.renamed(stateDictKeys(gguf))
        val unusedHint = if ("rope_freqs.weight" in checkpoint.tensors) " (rope_freqs: Llama 3's RoPE frequency factors, not modelled for GGUF)" else ""
        AutoModelForCausalLM.checkKeys(file, model.checkpointKeys(), listOf(checkpoint), unusedHint)
        return PretrainedCausalLM(model, listOf(checkpoint))
    }

    /** Gemma's sandwich norms: llama.cpp's `ffn_norm` is the pre-feedforward norm there, not the post-attention one. */
    private val GEMMA_TENSORS = mapOf(
        "post_attention_norm" to "post_attention_layernorm",
        "ffn_norm" to "pre_feedforward_layernorm",
        "post_ffw_norm" to "post_feedforward_layernorm",
    )
    private val QK_NORMS = mapOf("attn_q_norm" to "self_attn.q_norm", "attn_k_norm" to "self_attn.k_norm")

    /** Tensors llama.cpp names differently in one architecture: q/k norms, Phi-3's fused projections, Gemma's norms. */
    private val ARCH_TENSORS = mapOf(
        "qwen3" to QK_NORMS,
        "phi3" to mapOf("attn_qkv" to "self_attn.qkv_proj", "ffn_up" to "mlp.gate_up_proj"),
        "gemma2" to GEMMA_TENSORS,
        "gemma3" to GEMMA_TENSORS + QK_NORMS,
    )

    /**
     * The HF `state_dict()` key of llama.cpp's tensor [name] in a file of architecture [arch]
     * (`blk.3.attn_q.weight` → `model.layers.3.self_attn.q_proj.weight`), or null.
     */
    fun stateDictKey(name: String, arch: String? = "llama"): String? {
        LAYER_NAME.matchEntire(name)?.let { m ->
            val (layer, tensor, kind) = m.destructured
            val path = ARCH_TENSORS[arch]?.get(tensor) ?: LAYER_TENSORS[tensor]
            return path?.let { "model.layers.$layer.$it.$kind" }
        }
        return GLOBAL_NAME.matchEntire(name)?.let { m -> GLOBAL_TENSORS[m.groupValues[1]]?.let { "$it.${m.groupValues[2]}" } }
    }

    /** New key → the file's name for every tensor of [gguf] that [stateDictKey] knows; the rest keep their names. */
    fun stateDictKeys(gguf: Checkpoint): Map<String, String> {
        val arch = gguf.metadata["general.architecture"] as? String
        return gguf.tensors.keys.mapNotNull { n -> stateDictKey(n, arch)?.let { it to n } }.toMap()
    }

    /**
     * The [CausalLMConfig] of a GGUF file's `<arch>.*` metadata, written as the `config.json` transformers' GGUF
     * loader makes of it: `embedding_length` → `hidden_size`, `feed_forward_length` → `intermediate_size`,
     * `block_count` → `num_hidden_layers`, `attention.head_count(_kv)` → `num_(key_value_)heads`,
     * `attention.key_length` → `head_dim`, `attention.layer_norm_rms_epsilon` → `rms_norm_eps`, `rope.freq_base` →
     * `rope_theta` (10000 when absent, as llama.cpp), `context_length` → `max_position_embeddings`, `vocab_size`
     * (else the rows of `token_embd`); tied when there is no `output.weight`; q/k/v(/o) biases when the file has
     * `blk.0.attn_q.bias`, MLP biases with `blk.0.ffn_up.bias`; `rope.scaling.type` `linear` as linear scaling.
     * Refused ([ConfigException], naming the file and key): another architecture, a missing size, a RoPE over
     * part of the head, a value head of another width, another RoPE scaling.
     */
    fun config(gguf: Checkpoint): CausalLMConfig {
        val m = gguf.metadata
        val where = gguf.file.path
        val arch = m["general.architecture"] as? String
            ?: throw ConfigException(where, "general.architecture", "is missing or not a string; llama.cpp's converter writes it")
        val family = Family.ofGguf(arch) ?: throw ConfigException(where, "general.architecture", "is '$arch'; the GGUF " +
            "architectures read are ${Family.values().mapNotNull { it.ggufArchitecture }} (convert the transformers checkpoint instead)")
        fun intOrNull(key: String): Int? = when (val v = m["$arch.$key"]) {
            null -> null
            is Long -> v.takeIf { it in 1..Int.MAX_VALUE }?.toInt()
                ?: throw ConfigException(where, "$arch.$key", "is $v, not a positive 32-bit size")
            else -> throw ConfigException(where, "$arch.$key", "is '$v', not an integer")
        }
        fun int(key: String): Int = intOrNull(key)
            ?: throw ConfigException(where, "$arch.$key", "is missing; a $arch GGUF states it (convert_hf_to_gguf.py writes it)")
        fun doubleOrNull(key: String): Double? = when (val v = m["$arch.$key"]) {
            null -> null
            is Number -> v.toDouble()
            else -> throw ConfigException(where, "$arch.$key", "is '$v', not a number")
        }
        val hidden = int("embedding_length")
        val heads = int("attention.head_count")
        val kvHeads = intOrNull("attention.head_count_kv") ?: heads
        val headDim = intOrNull("attention.key_length") ?: (hidden / heads)
        val valueDim = intOrNull("attention.value_length") ?: headDim
        if (valueDim != headDim) throw ConfigException(where, "$arch.attention.value_length", "$valueDim differs from key_length $headDim; not modelled")
        val ropeDims = intOrNull("rope.dimension_count") ?: headDim
        if (ropeDims != headDim) {
            throw ConfigException(where, "$arch.rope.dimension_count", "$ropeDims is not the head dimension $headDim (partial RoPE is not modelled)")
        }
        val vocab = intOrNull("vocab_size") ?: gguf["token_embd.weight"].shape[0].toInt()
        val eps = doubleOrNull("attention.layer_norm_rms_epsilon")
            ?: throw ConfigException(where, "$arch.attention.layer_norm_rms_epsilon", "is missing; an RMSNorm model states it")
        val theta = doubleOrNull("rope.freq_base") ?: 10000.0
        val rope = when (val type = m["$arch.rope.scaling.type"]) {
            null, "none" -> """{"rope_type": "default", "rope_theta": $theta}"""
            "linear" -> """{"rope_type": "linear", "rope_theta": $theta, "factor": ${doubleOrNull("rope.scaling.factor")
                ?: throw ConfigException(where, "$arch.rope.scaling.factor", "is missing, but $arch.rope.scaling.type is linear")}}"""
            else -> throw ConfigException(where, "$arch.rope.scaling.type", "'$type' is not modelled here (none or linear)")
        }
        val names = gguf.tensors.keys
        val layers = int("block_count")
        // Phi-3's converter writes attention.sliding_window 0 for "none"; Gemma's is its local layers' window.
        val window = intOrNullAllowingZero(m, where, "$arch.attention.sliding_window")?.takeIf { it > 0 }
        if (window != null && family != Family.PHI3 && !family.isGemma) {
            throw ConfigException(where, "$arch.attention.sliding_window", "is $window; a sliding window is not read from $arch GGUF files")
        }
        // The keys each family's config has (Qwen2's q/k/v biases are always there, so it has no attention_bias).
        val extra = when (family) {
            Family.LLAMA -> ""","attention_bias": ${"blk.0.attn_q.bias" in names}, "mlp_bias": ${"blk.0.ffn_up.bias" in names}"""
            Family.QWEN3 -> ""","attention_bias": ${"blk.0.attn_q.bias" in names}"""
            Family.GEMMA2, Family.GEMMA3 -> {
                // llama.cpp scales Gemma's scores by head_dim^-0.5, by (hidden / heads)^-0.5 for the 27B sizes
                // (46 layers of Gemma 2, 62 of Gemma 3): query_pre_attn_scalar is not in the file.
                val big = (family == Family.GEMMA2 && layers == 46) || (family == Family.GEMMA3 && layers == 62)
                val caps = listOf("attn_logit_softcapping", "final_logit_softcapping").joinToString("") { key ->
                    doubleOrNull(key)?.let { ""","$key": $it""" } ?: ""
                }
                ""","query_pre_attn_scalar": ${if (big) hidden / heads else headDim}$caps"""
            }
            else -> ""
        }
        // Gemma 3's sliding layers have their own RoPE base (freq_base_swa, llama.cpp's default 10000), unscaled.
        val ropeJson = if (family != Family.GEMMA3) rope
        else """{"full_attention": $rope, "sliding_attention": {"rope_type": "default", "rope_theta": ${doubleOrNull("rope.freq_base_swa") ?: 10000.0}}}"""
        val json = """{"model_type": "${family.modelType}", "vocab_size": $vocab, "hidden_size": $hidden,
            |"intermediate_size": ${int("feed_forward_length")}, "num_hidden_layers": $layers,
            |"num_attention_heads": $heads, "num_key_value_heads": $kvHeads, "head_dim": $headDim, "rms_norm_eps": $eps,
            |"max_position_embeddings": ${intOrNull("context_length") ?: 2048}, "rope_parameters": $ropeJson,
            |"sliding_window": $window, "tie_word_embeddings": ${"output.weight" !in names}$extra}""".trimMargin()
        return CausalLMConfig.parse(HfConfig.parse(json, "$where (its $arch.* metadata)"), ropeInterleaved = family == Family.LLAMA,
            normWeightsIncludeOne = family.isGemma)
    }

    /** A non-negative integer metadata value (a window of 0 means none), or null when absent. */
    private fun intOrNullAllowingZero(m: Map<String, Any?>, where: String, key: String): Int? = when (val v = m[key]) {
        null -> null
        is Long -> v.takeIf { it in 0..Int.MAX_VALUE }?.toInt() ?: throw ConfigException(where, key, "is $v, not a 32-bit size")
        else -> throw ConfigException(where, key, "is '$v', not an integer")
    }
}
