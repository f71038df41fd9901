package dev.tapeout.examples.hf

import dev.tapeout.Checkpoint
import dev.tapeout.ExecutionTape
import dev.tapeout.Gguf
import dev.tapeout.HfConfig
import dev.tapeout.ModuleProvider
import java.io.File

/**
 * A llama.cpp GGUF file of a Llama model (what `convert_hf_to_gguf.py` writes, and `llama-quantize` after it: F16,
 * Q8_0, Q4_0, …) exported by the same Kotlin model as a transformers checkpoint ([HfLlama]'s [LlamaForCausalLM],
 * not a copy of it), its packed tensors kept packed (Gradle: `packedConstants = 'KEEP'`) and its f16 ones as f16
 * (`halfConstants = 'KEEP'`). Three things differ from a `save_pretrained` directory, and each is read here:
 * - the config is the file's `llama.*` metadata ([config]: the keys transformers' GGUF loader maps to its
 *   `LlamaConfig`, e.g. `llama.embedding_length` → `hidden_size`, `llama.rope.freq_base` → `rope_theta`);
 * - the tensors have llama.cpp's names (`token_embd`, `blk.N.attn_q`, …, `output_norm`, `output`): [stateDictKeys]
 *   maps them to the module's `state_dict()` keys and [Checkpoint.renamed] binds them under those keys, the bytes
 *   staying in the file; no `output.weight` is a tied LM head, as llama.cpp reads it;
 * - llama.cpp's converter permutes the rows of `q_proj` and `k_proj` inside each head (row `2i` is HF's row `i`,
 *   row `2i + 1` HF's row `i + D/2`) so that its RoPE rotates adjacent pairs. transformers' loader permutes them
 *   back and rotates halves (`rotate_half`); this model keeps the file's rows and rotates interleaved pairs
 *   ([LlamaConfig.ropeInterleaved], [dev.tapeout.rotary]'s `interleaved` tables, pair `i` at angle `pos·inv_freq[i]`
 *   either way). That is the same function: with `P` the row permutation, interleaved-RoPE(`P·q`) =
 *   `P`·rotate_half-RoPE(`q`), the same for k, and the scores `(P·q)·(P·k)` equal `q·k` per head (v and o_proj are
 *   not permuted), so the logits are transformers' own up to float rounding. The weights stay the file's bytes:
 *   un-permuting them instead would be a row gather on q_proj/k_proj in the graph, which is not a use the packed
 *   rewrite contracts per block (it would dequantize those weights whole), or on q and k at every step.
 *
 * Functions as [HfLlama]'s (DynamicCache form): `prefill(input_ids [1, ?])`, `decode(input_ids [1, 1], past_key_<i>,
 * past_value_<i> [1, KV, ?, D] …)`, or with `static=<N>` (Gradle: `-PhfLlama.staticCache=N`) HF's `StaticCache`
 * form, as [HfLlama]'s; `logits_to_keep=1` (`-PhfLlama.logitsToKeep=1`) as [HfLlama]'s.
 *
 * `args`: the GGUF file, optionally then `static=<cache length>` and/or `logits_to_keep=1` ([ModelOptions]).
 */
class GgufLlama : ModuleProvider {
    override fun buildTapes(args: List<String>): Map<String, ExecutionTape> {
        require(args.isNotEmpty()) { "GgufLlama takes the GGUF file (tapeout { args '…' }), optionally then ${ModelOptions.USAGE}" }
        val options = ModelOptions.parse("GgufLlama", args.drop(1))
        val gguf = Gguf.open(File(args[0]))
        val config = config(gguf)
        val model = LlamaForCausalLM(config)
        val checkpoint = gguf.renamed(stateDictKeys(gguf))
        // The module's keys are the renamed file's, both ways: a tensor this model has no place for is refused, not
        // left out (a bias, llama.cpp's rope_freqs of Llama 3's scaled RoPE, another architecture's extra tensors).
        val keys = model.stateDictKeys().filterNot { config.tieWordEmbeddings && it == "lm_head.weight" }.toSet()
        val missing = keys - checkpoint.tensors.keys
        val unused = checkpoint.tensors.keys - keys
        require(missing.isEmpty() && unused.isEmpty()) {
            "${gguf.file.path}: the model's keys and the GGUF's (renamed to transformers' names) differ: missing $missing, " +
                "never read $unused" + if ("rope_freqs.weight" in unused) " (rope_freqs: Llama 3's RoPE frequency factors, not modelled for GGUF)" else ""
        }
        return model.tapes(checkpoint, options)
    }

    companion object {
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

        /** The HF `state_dict()` key of llama.cpp's tensor [name] (`blk.3.attn_q.weight` → `model.layers.3.self_attn.q_proj.weight`), or null. */
        fun stateDictKey(name: String): String? {
            LAYER_NAME.matchEntire(name)?.let { m ->
                val (layer, tensor, kind) = m.destructured
                return LAYER_TENSORS[tensor]?.let { "model.layers.$layer.$it.$kind" }
            }
            return GLOBAL_NAME.matchEntire(name)?.let { m -> GLOBAL_TENSORS[m.groupValues[1]]?.let { "$it.${m.groupValues[2]}" } }
        }

        /** New key → the file's name for every tensor of [gguf] that [stateDictKey] knows; the rest keep their names. */
        fun stateDictKeys(gguf: Checkpoint): Map<String, String> =
            gguf.tensors.keys.mapNotNull { n -> stateDictKey(n)?.let { it to n } }.toMap()

        /**
         * The [LlamaConfig] of a GGUF file's `llama.*` metadata, written as the `config.json` transformers' GGUF
         * loader makes of it: `embedding_length` → `hidden_size`, `feed_forward_length` → `intermediate_size`,
         * `block_count` → `num_hidden_layers`, `attention.head_count(_kv)` → `num_(key_value_)heads`,
         * `attention.key_length` → `head_dim`, `attention.layer_norm_rms_epsilon` → `rms_norm_eps`,
         * `rope.freq_base` → `rope_theta` (10000 when absent, as llama.cpp), `context_length` →
         * `max_position_embeddings`, `vocab_size` (else the rows of `token_embd`); tied when there is no
         * `output.weight`; q/k/v(/o) biases when the file has `blk.0.attn_q.bias`, MLP biases with `blk.0.ffn_up.bias`;
         * `rope.scaling.type` `linear` as RoPE's linear scaling. Refused, naming the file and the key: another
         * `general.architecture`, a missing size, a RoPE over part of the head (`rope.dimension_count` < head_dim),
         * a value head of another width, another RoPE scaling.
         */
        fun config(gguf: Checkpoint): LlamaConfig {
            val m = gguf.metadata
            val where = gguf.file.path
            val arch = m["general.architecture"]
            require(arch == "llama") { "$where: general.architecture is '$arch', not llama; GgufLlama reads llama.cpp's Llama files" }
            fun intOrNull(key: String): Int? = when (val v = m["llama.$key"]) {
                null -> null
                is Long -> v.takeIf { it in 1..Int.MAX_VALUE }?.toInt()
                    ?: throw IllegalArgumentException("$where: llama.$key is $v, not a positive 32-bit size")
                else -> throw IllegalArgumentException("$where: llama.$key is '$v', not an integer")
            }
            fun int(key: String): Int = intOrNull(key) ?: throw IllegalArgumentException(
                "$where: its metadata has no llama.$key, which a llama GGUF states (convert_hf_to_gguf.py writes it)")
            fun doubleOrNull(key: String): Double? = when (val v = m["llama.$key"]) {
                null -> null
                is Number -> v.toDouble()
                else -> throw IllegalArgumentException("$where: llama.$key is '$v', not a number")
            }
            val hidden = int("embedding_length")
            val heads = int("attention.head_count")
            val kvHeads = intOrNull("attention.head_count_kv") ?: heads
            val headDim = intOrNull("attention.key_length") ?: (hidden / heads)
            val valueDim = intOrNull("attention.value_length") ?: headDim
            require(valueDim == headDim) { "$where: llama.attention.value_length $valueDim differs from key_length $headDim; not modelled" }
            val ropeDims = intOrNull("rope.dimension_count") ?: headDim
            require(ropeDims == headDim) { "$where: llama.rope.dimension_count $ropeDims is not the head dimension $headDim (partial RoPE is not modelled)" }
            val vocab = intOrNull("vocab_size") ?: gguf["token_embd.weight"].shape[0].toInt()
            val eps = doubleOrNull("attention.layer_norm_rms_epsilon")
                ?: throw IllegalArgumentException("$where: its metadata has no llama.attention.layer_norm_rms_epsilon (an RMSNorm model states it)")
            val theta = doubleOrNull("rope.freq_base") ?: 10000.0
            val rope = when (val type = m["llama.rope.scaling.type"]) {
                null, "none" -> """{"rope_type": "default", "rope_theta": $theta}"""
                "linear" -> """{"rope_type": "linear", "rope_theta": $theta, "factor": ${doubleOrNull("rope.scaling.factor")
                    ?: throw IllegalArgumentException("$where: llama.rope.scaling.type is linear but there is no llama.rope.scaling.factor")}}"""
                else -> throw IllegalArgumentException("$where: llama.rope.scaling.type '$type' is not modelled here (none or linear)")
            }
            val names = gguf.tensors.keys
            val json = """{"model_type": "llama", "vocab_size": $vocab, "hidden_size": $hidden,
                |"intermediate_size": ${int("feed_forward_length")}, "num_hidden_layers": ${int("block_count")},
                |"num_attention_heads": $heads, "num_key_value_heads": $kvHeads, "head_dim": $headDim, "rms_norm_eps": $eps,
                |"max_position_embeddings": ${intOrNull("context_length") ?: 2048}, "rope_parameters": $rope,
                |"tie_word_embeddings": ${"output.weight" !in names}, "attention_bias": ${"blk.0.attn_q.bias" in names},
                |"mlp_bias": ${"blk.0.ffn_up.bias" in names}}""".trimMargin()
            return LlamaConfig(HfConfig.parse(json, "$where (its llama.* metadata)"), ropeInterleaved = true)
        }
    }
}
