package dev.tapeout.generate

import dev.tapeout.iree.IreeDType
import dev.tapeout.iree.IreeFunction
import dev.tapeout.iree.IreeModule
import dev.tapeout.iree.IreeParam

/**
 * What a served causal LM's functions declare, read from their signatures (the names tapeout gives arguments and
 * results): `prefill(input_ids [1, ?]) -> logits, present_key_<i>, present_value_<i>` and
 * `decode(input_ids [1, 1], [cache_position [],] past_key_<i>, past_value_<i> …) -> logits, present_…` for
 * i in 0 until [layers]. Decode with `cache_position` is transformers' StaticCache form, whose caches are
 * [staticCacheRows] long; without, the DynamicCache form, whose caches grow by a row a step. Anything else is a
 * [GenerateModuleException] saying what is missing.
 */
class CausalLmSignature private constructor(
    /** The prefill function. */
    val prefill: IreeFunction,
    /** The decode function. */
    val decode: IreeFunction,
    /** The number of layers (key/value cache pairs). */
    val layers: Int,
    /** The rows of a static cache, or `null` for a dynamic one. */
    val staticCacheRows: Int?,
) {
    /** The vocabulary size: the last dimension of prefill's logits, or `null` where it is a `?`. */
    val vocabSize: Int? = prefill.outputs[0].dims.lastOrNull()?.toInt()

    /** The element type of the token ids (i32 or i64). */
    val idType: IreeDType = prefill.inputs[0].dtype!!

    companion object {
        /** Reads `module`'s prefill and decode functions. */
        @JvmStatic
        fun of(module: IreeModule): CausalLmSignature {
            val names = module.functions.map { it.name }
            fun function(name: String) = module.functions.firstOrNull { it.name == name } ?: throw GenerateModuleException(
                "the module has no function '$name' (it has: ${names.joinToString(", ").ifEmpty { "none" }}); generate() needs " +
                    "prefill(input_ids) and decode(input_ids, [cache_position,] past_key_<i>, past_value_<i>): export a causal LM with both",
                name,
            )
            val prefill = function("prefill")
            val decode = function("decode")
            fun bad(f: IreeFunction, what: String): Nothing =
                throw GenerateModuleException("${f.name}: $what; its signature is $f", f.name)

            val ids = prefill.inputs.singleOrNull()?.takeIf { it.name == "input_ids" }
                ?: bad(prefill, "generate() calls prefill with input_ids [1, ?] alone")
            if (ids.dtype != IreeDType.I32 && ids.dtype != IreeDType.I64) bad(prefill, "input_ids is not i32 or i64")
            if (ids.dims.size != 2 || ids.dims[0] != 1L || ids.dims[1] != null) bad(prefill, "input_ids is not [1, ?] (a batch of one, a run-time length)")
            val logits = prefill.outputs.firstOrNull()?.takeIf { it.name == "logits" } ?: bad(prefill, "its first result is not logits")
            if (logits.dtype != IreeDType.F32) bad(prefill, "logits are ${logits.dtype ?: "of an unnamed type"}, not f32: export them in f32")
            val layers = (prefill.outputs.size - 1) / 2
            if (layers == 0 || prefill.outputs.size != 1 + 2 * layers) bad(prefill, "it does not return logits and a present_key_<i>, present_value_<i> pair per layer")
            for (i in 0 until layers) {
                expect(prefill, prefill.outputs[1 + 2 * i], "present_key_$i")
                expect(prefill, prefill.outputs[2 + 2 * i], "present_value_$i")
            }

            val args = decode.inputs.associateBy { it.name }
            val position = args["cache_position"]
            val want = listOf("input_ids") + listOfNotNull(position?.name) + (0 until layers).flatMap { listOf("past_key_$it", "past_value_$it") }
            if (decode.inputs.map { it.name }.sorted() != want.sorted()) {
                bad(decode, "generate() passes ${want.joinToString(", ")} (prefill returns $layers layers' caches)")
            }
            if (args.getValue("input_ids").dtype != ids.dtype) bad(decode, "input_ids is not ${ids.dtype} as prefill's is")
            if (position != null && (position.dims.isNotEmpty() || (position.dtype != IreeDType.I32 && position.dtype != IreeDType.I64))) {
                bad(decode, "cache_position is not an i32 or i64 scalar")
            }
            if (decode.outputs.map { it.name } != prefill.outputs.map { it.name }) {
                bad(decode, "its results are not prefill's (${prefill.outputs.joinToString(", ") { it.name }})")
            }
            val rows = if (position == null) null else {
                args.getValue("past_key_0").dims.getOrNull(2)?.toInt()
                    ?: bad(decode, "it has cache_position (a static cache) but past_key_0's length (dimension 2) is not fixed")
            }
            return CausalLmSignature(prefill, decode, layers, rows)
        }

        private fun expect(f: IreeFunction, p: IreeParam, name: String) {
            if (p.name != name) throw GenerateModuleException("${f.name}: result '${p.name}' where $name was expected; its signature is $f", f.name)
        }
    }
}
