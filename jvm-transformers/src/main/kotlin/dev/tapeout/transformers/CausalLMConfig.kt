package dev.tapeout.transformers

import dev.tapeout.HfConfig
import dev.tapeout.RopeScaling
import java.io.File
import kotlin.math.sqrt

/** transformers' `layer_types` values: full causal attention, or causal attention within `sliding_window`. */
enum class LayerType(
    /** The name in `layer_types` and as a key of nested `rope_parameters`. */
    val key: String,
) {
    /** `full_attention`. */
    FULL("full_attention"),
    /** `sliding_attention`. */
    SLIDING("sliding_attention"),
}

/**
 * A causal LM's `config.json` read as transformers' config class of its [family] reads it: every key the family's
 * modelling code uses, with that class's defaults where the file leaves a key out (`num_key_value_heads`,
 * `head_dim`, `rms_norm_eps`, `tie_word_embeddings`, …). Sizes the file must state are required. A key or value the
 * family cannot honour is a [ConfigException] naming the file and key, never replaced by a default: a RoPE type
 * not implemented, a sliding window or softcap in a family without one, an activation other than the family's,
 * an unknown layer type. Build one with [read] or [parse].
 */
class CausalLMConfig private constructor(
    /** The config as the core library read it. */
    val hf: HfConfig,
    /** The family (from `model_type`). */
    val family: Family,
    /**
     * RoPE on interleaved pairs `(x[2i], x[2i+1])` instead of transformers' `rotate_half` halves: for a llama GGUF's q/k
     * rows, which llama.cpp's converter permuted; false for `config.json` files.
     */
    val ropeInterleaved: Boolean,
    /**
     * Gemma's norm weights already hold the `1 +` (llama.cpp's converter adds it to every Gemma norm weight), so the
     * norms compute `x * weight`; false for `config.json` files, whose Gemma norms compute `x * (1 + weight)`.
     */
    val normWeightsIncludeOne: Boolean = false,
) {
    /** Whether the norms compute `x * (1 + weight)` (Gemma's, as transformers stores them). */
    val offsetNorms: Boolean get() = family.isGemma && !normWeightsIncludeOne

    /** The file, as messages name it. */
    val source: String = hf.source

    private fun missing(key: String): Nothing = throw ConfigException(source, key, "is missing; a ${family.modelType} config states it")
    private fun size(key: String): Int = (hf.intOrNull(key) ?: missing(key)).also {
        if (it <= 0) throw ConfigException(source, key, "is $it; it must be a positive size")
    }

    /** `vocab_size`. */
    val vocabSize = size("vocab_size")
    /** `hidden_size`. */
    val hiddenSize = size("hidden_size")
    /** `intermediate_size` (the MLP's width). */
    val intermediateSize = size("intermediate_size")
    /** `num_hidden_layers`. */
    val numHiddenLayers = size("num_hidden_layers")
    /** `num_attention_heads` (query heads). */
    val numAttentionHeads = size("num_attention_heads")
    /** `num_key_value_heads` (`num_attention_heads` when absent). */
    val numKeyValueHeads = hf.intOrNull("num_key_value_heads") ?: numAttentionHeads
    /** `head_dim`, else `hidden_size / num_attention_heads`. */
    val headDim = hf.intOrNull("head_dim") ?: (hiddenSize / numAttentionHeads)
    /** `rms_norm_eps` (the family's default when absent: 1e-5 for Phi-3, 1e-6 otherwise). */
    val rmsNormEps = hf.doubleOrNull("rms_norm_eps") ?: if (family == Family.PHI3) 1e-5 else 1e-6
    /** `tie_word_embeddings` (default: true for Gemma, false otherwise). */
    val tieWordEmbeddings = hf.booleanOrNull("tie_word_embeddings") ?: family.isGemma
    /** `dtype` (`torch_dtype` in transformers 4 files): the weights' dtype, which Gemma's `embed_scale` buffer takes. */
    val dtype: String? = hf.torchDtype

    /** Biases on q/k/v: Qwen2 always; Llama, Qwen3 and Gemma with `attention_bias`. */
    val qkvBias: Boolean
    /** A bias on o_proj: Llama, Qwen3 and Gemma with `attention_bias`. */
    val oBias: Boolean
    /** Llama's `mlp_bias`. */
    val mlpBias: Boolean

    /** Each layer's attention (`layer_types`, or the family's default pattern). */
    val layerTypes: List<LayerType>
    /** `sliding_window` for the [LayerType.SLIDING] layers (a query at p sees keys j with p − j < window), or null. */
    val slidingWindow: Int?
    /** The RoPE of each layer type in use (one for all unless `rope_parameters` is nested by layer type). */
    val rope: Map<LayerType, RopeSpec>

    /** Gemma's `attn_logit_softcapping` (`tanh(s / c) · c` on the scores), or null. */
    val attnLogitSoftcapping: Double?
    /** Gemma's `final_logit_softcapping` (on the logits), or null. */
    val finalLogitSoftcapping: Double?
    /** The attention scale: `query_pre_attn_scalar^-0.5` for Gemma, `head_dim^-0.5` otherwise. */
    val attentionScale: Double

    /**
     * Gemma's `embed_scale`: `sqrt(hidden_size)` as the buffer holds it in the model's [dtype] (rounded to bf16 for a
     * bf16 checkpoint: 11.3125 for hidden 128, not 11.3137), or null for the families that do not scale.
     */
    val embedScale: Double?

    init {
        if (numAttentionHeads % numKeyValueHeads != 0) {
            throw ConfigException(source, "num_key_value_heads", "$numKeyValueHeads does not divide num_attention_heads " +
                "($numAttentionHeads); grouped-query attention needs it to")
        }
        if (headDim <= 0 || headDim % 2 != 0) throw ConfigException(source, "head_dim", "is $headDim; RoPE needs an even, positive head size")
        checkActivation()
        val attentionBias = hf.booleanOrNull("attention_bias")
        when (family) {
            Family.LLAMA, Family.QWEN3, Family.GEMMA2, Family.GEMMA3 -> {
                qkvBias = attentionBias ?: false
                oBias = attentionBias ?: false
            }
            else -> {
                if (attentionBias == true) {
                    throw ConfigException(source, "attention_bias", "is true, but ${family.architecture} has no attention " +
                        "biases (only Llama, Qwen3 and Gemma read this key); remove it or set it to false")
                }
                qkvBias = family == Family.QWEN2
                oBias = false
            }
        }
        val mlp = hf.booleanOrNull("mlp_bias")
        if (mlp == true && family != Family.LLAMA) {
            throw ConfigException(source, "mlp_bias", "is true, but ${family.architecture} has no MLP biases; remove it or set it to false")
        }
        mlpBias = mlp ?: false
        slidingWindow = readWindow()
        layerTypes = readLayerTypes()
        if (LayerType.SLIDING in layerTypes && slidingWindow == null) {
            throw ConfigException(source, "sliding_window", "is null, but layer_types has sliding_attention layers; give the window")
        }
        rope = readRope()
        val softcaps = listOf("attn_logit_softcapping", "final_logit_softcapping").map { key ->
            hf.doubleOrNull(key)?.also { v ->
                if (!family.isGemma) throw ConfigException(source, key, "is $v, but ${family.architecture} has no softcap; remove it")
                if (!(v > 0.0 && v.isFinite())) throw ConfigException(source, key, "is $v; a softcap must be positive (or null for none)")
            }
        }
        attnLogitSoftcapping = softcaps[0]
        finalLogitSoftcapping = softcaps[1]
        val scalar = hf.doubleOrNull("query_pre_attn_scalar")
        if (scalar != null && !family.isGemma) {
            throw ConfigException(source, "query_pre_attn_scalar", "is $scalar, but ${family.architecture} scales by head_dim; remove it")
        }
        // Gemma2Config / Gemma3TextConfig default it to 256.
        attentionScale = Math.pow(if (family.isGemma) scalar ?: 256.0 else headDim.toDouble(), -0.5)
        if (family == Family.GEMMA3 && hf.booleanOrNull("use_bidirectional_attention") == true) {
            throw ConfigException(source, "use_bidirectional_attention", "is true (an encoder's attention); only causal attention is modelled")
        }
        embedScale = if (family.isGemma) scaleInDtype(sqrt(hiddenSize.toDouble())) else null
    }

    private fun checkActivation() {
        val (key, want) = if (family.isGemma) "hidden_activation" to "gelu_pytorch_tanh" else "hidden_act" to "silu"
        // Gemma's configs may carry the older `hidden_act` too; transformers' Gemma reads `hidden_activation`.
        val act = hf.stringOrNull(key) ?: want
        if (act != want) throw ConfigException(source, key, "is '$act'; ${family.architecture} is modelled with $want only")
    }

    private fun readWindow(): Int? {
        val window = hf.intOrNull("sliding_window")
        val used = when (family) {
            Family.LLAMA -> null
            Family.QWEN2, Family.QWEN3 -> window.takeIf { hf.booleanOrNull("use_sliding_window") == true }
            else -> window
        }
        if (family == Family.LLAMA && window != null) {
            throw ConfigException(source, "sliding_window", "is $window, but LlamaForCausalLM has no sliding window; " +
                "set it to null, or give the checkpoint its own family (Mistral) if its attention is windowed")
        }
        if (used != null && used <= 0) throw ConfigException(source, "sliding_window", "is $used; a window must be positive")
        return used
    }

    private fun readLayerTypes(): List<LayerType> {
        val n = numHiddenLayers
        val given = if (hf.has("layer_types")) hf.strings("layer_types") else null
        if (given != null) {
            if (family == Family.LLAMA && given.any { it != LayerType.FULL.key }) {
                throw ConfigException(source, "layer_types", "has ${given.toSet()}, but LlamaForCausalLM has full attention only")
            }
            if (given.size != n) throw ConfigException(source, "layer_types", "has ${given.size} entries for $n layers (num_hidden_layers)")
            val types = given.mapIndexed { i, s ->
                LayerType.values().firstOrNull { it.key == s }
                    ?: throw ConfigException(source, "layer_types[$i]", "is '$s'; the layer types modelled are full_attention and sliding_attention")
            }
            if (family == Family.MISTRAL || family == Family.PHI3) {
                // transformers' Mistral and Phi-3 use the window on every layer whatever layer_types says.
                return List(n) { if (slidingWindow != null) LayerType.SLIDING else LayerType.FULL }
            }
            return types
        }
        return List(n) { i ->
            val sliding = when (family) {
                Family.LLAMA -> false
                Family.MISTRAL, Family.PHI3 -> slidingWindow != null
                Family.QWEN2, Family.QWEN3 -> slidingWindow != null && i >= (hf.intOrNull("max_window_layers") ?: 28)
                Family.GEMMA2 -> (i + 1) % 2 != 0
                Family.GEMMA3 -> (i + 1) % (hf.intOrNull("sliding_window_pattern") ?: hf.intOrNull("_sliding_window_pattern") ?: 6) != 0
            }
            if (sliding) LayerType.SLIDING else LayerType.FULL
        }
    }

    private fun readRope(): Map<LayerType, RopeSpec> {
        val used = layerTypes.toSet()
        val params = hf.objOrNull("rope_parameters")
        val topTheta = hf.doubleOrNull("rope_theta") ?: 10000.0
        if (params != null) {
            val nested = params.keys.filter { k -> LayerType.values().any { it.key == k } }
            if (nested.isEmpty()) {
                val spec = RopeReader.spec(source, "rope_parameters", params, topTheta)
                return used.associateWith { spec }
            }
            val other = params.keys - nested.toSet()
            if (other.isNotEmpty()) {
                throw ConfigException(source, "rope_parameters", "mixes layer types ($nested) with flat keys ($other); give one or the other")
            }
            return used.associateWith { type ->
                if (!params.has(type.key)) {
                    throw ConfigException(source, "rope_parameters.${type.key}", "is missing, but layer_types has ${type.key} layers")
                }
                RopeReader.spec(source, "rope_parameters.${type.key}", params.obj(type.key), topTheta)
            }
        }
        // transformers 4 files: rope_theta and rope_scaling; Gemma 3's sliding layers use rope_local_base_freq unscaled.
        val global = RopeReader.spec(source, "rope_scaling", hf.objOrNull("rope_scaling"), topTheta)
        return used.associateWith { type ->
            if (family == Family.GEMMA3 && type == LayerType.SLIDING) RopeSpec(hf.doubleOrNull("rope_local_base_freq") ?: 10000.0, RopeScaling.None)
            else global
        }
    }

    /** [v] rounded to the weights' [dtype] as a torch buffer of that dtype holds it. */
    private fun scaleInDtype(v: Double): Double = when (dtype) {
        null, "float32" -> v.toFloat().toDouble()
        "bfloat16" -> Float.fromBits((v.toFloat().toRawBits() + 0x7FFF + ((v.toFloat().toRawBits() shr 16) and 1)) and 0xFFFF0000.toInt()).toDouble()
        "float16" -> halfRound(v.toFloat()).toDouble()
        else -> throw ConfigException(source, "dtype", "is '$dtype'; Gemma's embed_scale buffer takes the model's dtype, " +
            "and float32, bfloat16 and float16 are the ones modelled")
    }

    override fun toString(): String = "CausalLMConfig($source, ${family.modelType}, $numHiddenLayers layers)"

    companion object {
        /** Reads [file], a transformers `config.json` (or the directory holding it). */
        fun read(file: File): CausalLMConfig = parse(HfConfig.read(file))

        /**
         * The config of [hf], its family from `model_type` (checked against `architectures` when the file has it).
         * A `model_type` or architecture this library does not model is a [ConfigException].
         */
        fun parse(hf: HfConfig, ropeInterleaved: Boolean = false, normWeightsIncludeOne: Boolean = false): CausalLMConfig =
            CausalLMConfig(hf, familyOf(hf), ropeInterleaved, normWeightsIncludeOne)

        /** The [Family] of [hf]: its `model_type`, which its `architectures` (when present) must agree with. */
        fun familyOf(hf: HfConfig): Family {
            val type = hf.modelType ?: throw ConfigException(hf.source, "model_type", "is missing; it says which family the checkpoint is")
            if (type == "gemma3") {
                throw ConfigException(hf.source, "model_type", "is 'gemma3' (Gemma 3 with its vision tower); only the text model " +
                    "(gemma3_text, Gemma3ForCausalLM) is modelled: save its language model on its own")
            }
            val family = Family.ofModelType(type)
                ?: throw ConfigException(hf.source, "model_type", "is '$type'; the families modelled are ${Family.known}")
            if (hf.has("architectures")) {
                val arch = hf.strings("architectures")
                if (arch.isNotEmpty() && arch.none { it == family.architecture }) {
                    throw ConfigException(hf.source, "architectures", "is $arch; a $type checkpoint is read as ${family.architecture} " +
                        "(a causal LM with its head), which the file does not name")
                }
            }
            return family
        }

        /** IEEE half rounding (to nearest even) of a normal [f]: what a float16 buffer holds. */
        private fun halfRound(f: Float): Float {
            val bits = f.toRawBits()
            val rounded = (bits + 0xFFF + ((bits shr 13) and 1)) and 0xFFFFE000.toInt()
            return Float.fromBits(rounded)
        }
    }
}
