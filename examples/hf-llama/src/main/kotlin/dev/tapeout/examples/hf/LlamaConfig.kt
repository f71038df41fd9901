package dev.tapeout.examples.hf

import dev.tapeout.HfConfig
import dev.tapeout.RopeScaling
import java.io.File

/**
 * The fields of a Llama/Qwen2 `config.json` this model reads (through the library's [HfConfig]), with
 * transformers' defaults where the file may leave them out. RoPE comes from `rope_parameters` (what transformers 5
 * writes: `rope_type`, `rope_theta`, the scaling's own fields) or, for files of transformers 4, from `rope_theta`
 * and `rope_scaling`.
 */
class LlamaConfig(
    /** The file as the library read it. */
    val hf: HfConfig,
    /**
     * RoPE on interleaved pairs `(x[2i], x[2i+1])` instead of transformers' `rotate_half` halves: for weights whose
     * q/k rows llama.cpp's converter permuted ([GgufLlama]); false (transformers' layout) for `config.json` files.
     */
    val ropeInterleaved: Boolean = false,
) {
    /** `model_type`: `llama`, `qwen2` or `mistral` (Llama's layers; its sliding window must be off: `null`). */
    val modelType: String = hf.string("model_type")
    /** `vocab_size`. */
    val vocabSize = hf.vocabSize
    /** `hidden_size`. */
    val hiddenSize = hf.hiddenSize
    /** `intermediate_size` (the MLP's width). */
    val intermediateSize = hf.intermediateSize
    /** `num_hidden_layers`. */
    val numHiddenLayers = hf.numHiddenLayers
    /** `num_attention_heads` (query heads). */
    val numAttentionHeads = hf.numAttentionHeads
    /** `num_key_value_heads` (`num_attention_heads` when absent). */
    val numKeyValueHeads = hf.numKeyValueHeads
    /** `head_dim`, else `hidden_size / num_attention_heads`. */
    val headDim = hf.headDim
    /** `rms_norm_eps` (1e-6 when absent). */
    val rmsNormEps = hf.doubleOrNull("rms_norm_eps") ?: 1e-6
    /** `tie_word_embeddings`: `lm_head` uses `embed_tokens`' table. */
    val tieWordEmbeddings = hf.tieWordEmbeddings
    /** q/k/v biases: always in Qwen2; Llama's `attention_bias`. */
    val qkvBias = modelType == "qwen2" || (hf.booleanOrNull("attention_bias") ?: false)
    /** The o_proj bias: Llama's `attention_bias`; never in Qwen2. */
    val oBias = modelType != "qwen2" && (hf.booleanOrNull("attention_bias") ?: false)
    /** Llama's `mlp_bias`. */
    val mlpBias = hf.booleanOrNull("mlp_bias") ?: false

    /** `rope_theta`: in `rope_parameters` (transformers 5), else top level ([HfConfig.ropeTheta]). */
    val ropeTheta: Double = hf.ropeTheta
    /** The RoPE scaling of `rope_parameters` or `rope_scaling` ([HfConfig.rotaryScaling]). */
    val ropeScaling: RopeScaling = hf.rotaryScaling()

    init {
        require(modelType in setOf("llama", "qwen2", "mistral")) { "${hf.source}: model_type '$modelType' is not llama, qwen2 or mistral" }
        // Sliding-window attention (Mistral, Qwen2's use_sliding_window) is not modelled: refused, not ignored.
        val window = if (modelType == "qwen2" && hf.booleanOrNull("use_sliding_window") != true) null else hf.intOrNull("sliding_window")
        require(window == null) { "${hf.source}: sliding_window $window is not modelled here (only full attention); set it to null" }
        require(numAttentionHeads % numKeyValueHeads == 0) {
            "${hf.source}: num_attention_heads ($numAttentionHeads) is not a multiple of num_key_value_heads ($numKeyValueHeads)"
        }
    }

    companion object {
        /** Reads [file], a transformers `config.json`. */
        fun read(file: File) = LlamaConfig(HfConfig.read(file))
    }
}
