package dev.tapeout.transformers

import dev.tapeout.HfConfig
import dev.tapeout.RopeScaling

/** One rotary embedding as a config states it: `rope_theta` and the frequency scaling of `rope_type`. */
data class RopeSpec(
    /** `rope_theta`. */
    val theta: Double,
    /** The scaling of `rope_type` (`default`: [RopeScaling.None]). */
    val scaling: RopeScaling,
)

/** Reads `rope_parameters` / `rope_scaling` objects, naming the file and the dotted key of whatever it refuses. */
internal object RopeReader {
    /** The RoPE types [dev.tapeout.rotary] computes exactly as transformers does. */
    private const val KNOWN = "default, linear or llama3"

    /**
     * The [RopeSpec] of one flat RoPE object [p] at [path] (`rope_parameters`, `rope_parameters.sliding_attention`,
     * or `rope_scaling` of a transformers 4 file), [theta] when the object has no `rope_theta`. A
     * `partial_rotary_factor` other than 1 (RoPE over part of the head) is refused: not modelled.
     */
    fun spec(source: String, path: String, p: HfConfig?, theta: Double): RopeSpec {
        if (p == null) return RopeSpec(theta, RopeScaling.None)
        val type = p.stringOrNull("rope_type") ?: p.stringOrNull("type") ?: "default"
        val th = p.doubleOrNull("rope_theta") ?: theta
        if (!(th > 0.0 && th.isFinite())) throw ConfigException(source, "$path.rope_theta", "is $th; RoPE needs a positive base")
        val partial = p.doubleOrNull("partial_rotary_factor")
        if (partial != null && partial != 1.0) {
            throw ConfigException(source, "$path.partial_rotary_factor", "is $partial: RoPE over part of the head is not modelled (1.0 only)")
        }
        fun num(key: String): Double = p.doubleOrNull(key)
            ?: throw ConfigException(source, "$path.$key", "is missing; rope_type '$type' needs it")
        val scaling = when (type) {
            "default" -> RopeScaling.None
            "linear" -> RopeScaling.Linear(num("factor"))
            "llama3" -> RopeScaling.Llama3(num("factor"), num("low_freq_factor"), num("high_freq_factor"),
                num("original_max_position_embeddings").toInt())
            else -> throw ConfigException(source, "$path.rope_type", "'$type' is not implemented ($KNOWN); " +
                "this library computes no other RoPE, so the model cannot be exported exactly")
        }
        return RopeSpec(th, scaling)
    }
}
