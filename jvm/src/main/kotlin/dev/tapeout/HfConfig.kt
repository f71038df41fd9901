package dev.tapeout

import java.io.File

/**
 * A Hugging Face `config.json` (what `transformers` writes beside `model.safetensors`), read with typed getters:
 * a key that is missing, or holds another type than asked for, is a [JsonFileException] naming the file and the key
 * (`rope_scaling.factor` for a nested one).
 *
 * ```kotlin
 * val config = HfConfig.read(File("llama/config.json"))
 * val heads = config.numAttentionHeads
 * val kvHeads = config.numKeyValueHeads               // num_attention_heads when absent, as transformers does
 * val scaling = config.objOrNull("rope_scaling")      // null when absent or null
 * val factor = scaling?.double("factor")
 * ```
 *
 * The getters ending in `OrNull` return null for a key that is absent or JSON `null`; the others fail for it.
 * Integers read as [double] too; a [double] that is a whole number reads as [int] or [long].
 */
class HfConfig private constructor(private val o: JsonObjectView) {
    /** Where the document came from (a file's path), as messages name it. */
    val source: String get() = o.source

    /** The keys of this object, in the file's order. */
    val keys: Set<String> get() = o.fields.keys.map { it.toString() }.toCollection(LinkedHashSet())

    /** Whether [key] is present and not `null`. */
    fun has(key: String): Boolean = o.has(key)

    /** The string at [key]. */
    fun string(key: String): String = o.string(key)
    /** The string at [key], or null. */
    fun stringOrNull(key: String): String? = o.stringOrNull(key)
    /** The integer at [key] (32 bits). */
    fun int(key: String): Int = o.int(key)
    /** The integer at [key] (32 bits), or null. */
    fun intOrNull(key: String): Int? = o.intOrNull(key)
    /** The integer at [key]. */
    fun long(key: String): Long = o.long(key)
    /** The integer at [key], or null. */
    fun longOrNull(key: String): Long? = o.longOrNull(key)
    /** The number at [key]. */
    fun double(key: String): Double = o.double(key)
    /** The number at [key], or null. */
    fun doubleOrNull(key: String): Double? = o.doubleOrNull(key)
    /** The boolean at [key]. */
    fun boolean(key: String): Boolean = o.boolean(key)
    /** The boolean at [key], or null. */
    fun booleanOrNull(key: String): Boolean? = o.booleanOrNull(key)
    /** The nested object at [key] (`rope_scaling`), read the same way. */
    fun obj(key: String): HfConfig = HfConfig(o.obj(key))
    /** The nested object at [key], or null. */
    fun objOrNull(key: String): HfConfig? = o.objOrNull(key)?.let(::HfConfig)
    /** The list of strings at [key] (`architectures`). */
    fun strings(key: String): List<String> = o.list(key).map { it as? String ?: o.wrong(key, "a list of strings") }
    /** The list of integers at [key] (`eos_token_id` as a list), each 32 bits. */
    fun ints(key: String): List<Int> = o.list(key).map { v ->
        (v as? Long)?.takeIf { it in Int.MIN_VALUE..Int.MAX_VALUE }?.toInt() ?: o.wrong(key, "a list of 32-bit integers")
    }
    /** The list of numbers at [key]. */
    fun doubles(key: String): List<Double> = o.list(key).map { (it as? Number)?.toDouble() ?: o.wrong(key, "a list of numbers") }

    /** `model_type` (`llama`, `qwen2`, …), or null. */
    val modelType: String? get() = stringOrNull("model_type")
    /** `hidden_size`. */
    val hiddenSize: Int get() = int("hidden_size")
    /** `intermediate_size`. */
    val intermediateSize: Int get() = int("intermediate_size")
    /** `num_hidden_layers`. */
    val numHiddenLayers: Int get() = int("num_hidden_layers")
    /** `num_attention_heads`. */
    val numAttentionHeads: Int get() = int("num_attention_heads")
    /** `num_key_value_heads`; [numAttentionHeads] when absent (no grouped-query attention), as transformers reads it. */
    val numKeyValueHeads: Int get() = intOrNull("num_key_value_heads") ?: numAttentionHeads
    /** `head_dim`; `hidden_size / num_attention_heads` when absent, as transformers reads it. */
    val headDim: Int get() = intOrNull("head_dim") ?: (hiddenSize / numAttentionHeads)
    /** `vocab_size`. */
    val vocabSize: Int get() = int("vocab_size")
    /** `max_position_embeddings`. */
    val maxPositionEmbeddings: Int get() = int("max_position_embeddings")
    /** `rms_norm_eps`. */
    val rmsNormEps: Double get() = double("rms_norm_eps")
    /**
     * The layer types that nest `rope_parameters` (transformers 5 writes Gemma 3's as
     * `{"full_attention": {…}, "sliding_attention": {…}}`), in the file's order; empty when it is flat or absent.
     */
    val ropeLayerTypes: List<String> get() {
        val p = objOrNull("rope_parameters") ?: return emptyList()
        return p.keys.filter { p.objOrNullQuiet(it) != null }
    }

    /**
     * The RoPE parameters of [layerType] (`rope_theta`, `rope_type`, the scaling's fields): `rope_parameters.<layerType>`
     * when they are nested by layer type, else the one flat `rope_parameters` (or null when absent). A layer type the
     * nested parameters lack is a [JsonFileException].
     */
    fun ropeParameters(layerType: String? = null): HfConfig? {
        val p = objOrNull("rope_parameters") ?: return null
        val nested = ropeLayerTypes
        if (nested.isEmpty()) return p
        if (layerType == null) {
            throw JsonFileException("$source: rope_parameters is nested by layer type (${nested.joinToString()}): " +
                "read each type's with ropeParameters(layerType), ropeTheta(layerType) and rotaryScaling(layerType)")
        }
        return p.objOrNull(layerType) ?: throw JsonFileException("$source: rope_parameters has no '$layerType' " +
            "(it has ${nested.joinToString()})")
    }

    /**
     * `rope_parameters.rope_theta` (transformers 5, of [layerType] when nested by layer type) or `rope_theta` (4.x);
     * 10000 when absent, transformers' default. Parameters nested by layer type, read without one, are a
     * [JsonFileException], never the default.
     */
    fun ropeTheta(layerType: String?): Double = ropeParameters(layerType)?.doubleOrNull("rope_theta") ?: doubleOrNull("rope_theta") ?: 10000.0

    /** [ropeTheta] of a model with one RoPE for every layer. */
    val ropeTheta: Double get() = ropeTheta(null)

    /**
     * The RoPE scaling (`{"rope_type": "llama3", "factor": 8.0, …}`) of [layerType] (when `rope_parameters` nests by
     * layer type): `rope_scaling` (4.x), or `rope_parameters` (transformers 5) when its `rope_type` is not `default`;
     * null when there is none.
     */
    fun ropeScaling(layerType: String?): HfConfig? = objOrNull("rope_scaling")
        ?: ropeParameters(layerType)?.takeIf { (it.stringOrNull("rope_type") ?: "default") != "default" }

    /** [ropeScaling] of a model with one RoPE for every layer. */
    val ropeScaling: HfConfig? get() = ropeScaling(null)

    /**
     * [ropeScaling] as the [RopeScaling] that [rotary] takes: [RopeScaling.None] when there is none or its `rope_type`
     * (or the older `type`) is `default`; [RopeScaling.Linear] for `linear` (`factor`); [RopeScaling.Llama3] for
     * `llama3` (`factor`, `low_freq_factor`, `high_freq_factor`, `original_max_position_embeddings`). A missing field,
     * or a `rope_type` not modelled, is a [JsonFileException] naming the file.
     */
    fun rotaryScaling(layerType: String? = null): RopeScaling {
        val s = ropeScaling(layerType) ?: return RopeScaling.None
        val type = s.stringOrNull("rope_type") ?: s.stringOrNull("type") ?: "default"
        return when (type) {
            "default" -> RopeScaling.None
            "linear" -> RopeScaling.Linear(s.double("factor"))
            "llama3" -> RopeScaling.Llama3(s.double("factor"), s.double("low_freq_factor"), s.double("high_freq_factor"),
                s.int("original_max_position_embeddings"))
            else -> throw JsonFileException("$source: rope_type '$type' is not modelled (default, linear or llama3); " +
                "export this model with its RoPE scaling written out, or add it to RopeScaling")
        }
    }

    /** The object at [key] or null, without failing for another type (how nested RoPE parameters are told apart). */
    private fun objOrNullQuiet(key: String): HfConfig? = runCatching { objOrNull(key) }.getOrNull()

    /** `tie_word_embeddings`; false when absent. */
    val tieWordEmbeddings: Boolean get() = booleanOrNull("tie_word_embeddings") ?: false
    /** `dtype` (transformers 5) or `torch_dtype` (4.x): `float32`, `bfloat16`; or null. */
    val torchDtype: String? get() = stringOrNull("dtype") ?: stringOrNull("torch_dtype")

    override fun toString(): String = "HfConfig($source, ${keys.size} keys)"

    companion object {
        /** Reads the `config.json` at [file] (or the `config.json` in the directory [file]). */
        fun read(file: File): HfConfig =
            HfConfig(JsonObjectView.read(if (file.isDirectory) File(file, "config.json") else file, "a Hugging Face config"))

        /** Reads the `config.json` at [path]. */
        fun read(path: String): HfConfig = read(File(path))

        /** The config in [text]; [source] names it in messages. */
        fun parse(text: String, source: String = "<config.json>"): HfConfig =
            HfConfig(JsonObjectView.parse(text, source, "a Hugging Face config"))
    }
}
