package dev.tapeout.transformers

import dev.tapeout.Checkpoint
import dev.tapeout.ExecutionTape
import dev.tapeout.Gguf
import dev.tapeout.HfConfig
import dev.tapeout.ModuleProvider
import dev.tapeout.SafeTensors
import java.io.File

/**
 * A causal LM with its weights, ready to trace: [model] (its keys the checkpoint's) and the open weight files it
 * reads ([checkpoints]: one, or a sharded checkpoint's shards). [tapes] gives the exported functions.
 */
class PretrainedCausalLM(
    /** The model, built from the checkpoint's config. */
    val model: CausalLM,
    /** The weight files, their tensors under the model's keys. */
    val checkpoints: List<Checkpoint>,
) {
    /** The config. */
    val config: CausalLMConfig get() = model.config

    /** `prefill` and `decode` ([CausalLM.tapes]) in the form of [options]. */
    fun tapes(options: ModelOptions = ModelOptions()): Map<String, ExecutionTape> = model.tapes(checkpoints, options)
}

/**
 * transformers' `AutoModelForCausalLM` for tapeout: picks the family of a checkpoint and builds its model. As a
 * Gradle model (`tapeout { model = 'dev.tapeout.transformers.AutoModelForCausalLM'; args '<checkpoint>' }`) it
 * exports `prefill` and `decode` ([CausalLM]); `args` are the checkpoint, then optionally [ModelOptions]
 * (`static=<N>`, `logits_to_keep=1`). From Kotlin: `AutoModelForCausalLM.fromPretrained(File(dir)).tapes()`.
 *
 * The checkpoint is a `save_pretrained` directory (`config.json` with `model.safetensors`, or a sharded
 * `model.safetensors.index.json` and its shards), the family from `model_type` (checked against `architectures`);
 * or a llama.cpp GGUF file, the family from `general.architecture`, its config from the `<arch>.*` metadata and its
 * tensors renamed from llama.cpp's names ([GgufCheckpoints]).
 */
class AutoModelForCausalLM : ModuleProvider {
    override fun buildTapes(args: List<String>): Map<String, ExecutionTape> {
        val path = args.firstOrNull() ?: throw IllegalArgumentException(
            "$WHO takes the checkpoint (a save_pretrained directory or a .gguf file: tapeout { args '…' }), optionally then ${ModelOptions.USAGE}")
        val options = ModelOptions.parse(WHO, args.drop(1))
        return fromPretrained(File(path)).tapes(options)
    }

    companion object {
        private const val WHO = "AutoModelForCausalLM"

        /**
         * The model of [path]: a `save_pretrained` directory (or its `config.json`), or a GGUF file. Its weights are
         * checked against the model's keys both ways (a tensor missing, or one the model would never read, is a
         * [CheckpointFilesException]); a config the family cannot honour is a [ConfigException].
         */
        fun fromPretrained(path: File): PretrainedCausalLM {
            if (path.isFile && path.name.endsWith(".gguf")) return GgufCheckpoints.open(path)
            val dir = if (path.isFile && path.name == "config.json") path.absoluteFile.parentFile else path
            if (!dir.isDirectory) {
                throw CheckpointFilesException(path, "is neither a checkpoint directory (config.json + model.safetensors) nor a .gguf file")
            }
            val configFile = File(dir, "config.json")
            if (!configFile.isFile) throw CheckpointFilesException(dir, "has no config.json; save the model with save_pretrained (or give a .gguf file)")
            val config = CausalLMConfig.parse(HfConfig.read(configFile))
            val model = CausalLM(config)
            val checkpoints = weights(dir)
            checkKeys(dir, model.checkpointKeys(), checkpoints, "")
            return PretrainedCausalLM(model, checkpoints)
        }

        /** `model.safetensors`, or the shards `model.safetensors.index.json` maps the keys to (each key in its shard). */
        private fun weights(dir: File): List<Checkpoint> {
            val single = File(dir, "model.safetensors")
            val index = File(dir, "model.safetensors.index.json")
            if (single.isFile) return listOf(SafeTensors.open(single))
            if (!index.isFile) {
                throw CheckpointFilesException(dir, "has neither model.safetensors nor model.safetensors.index.json " +
                    "(a pytorch_model.bin checkpoint is not read: save it with safe_serialization=True)")
            }
            val map = HfConfig.read(index).obj("weight_map")
            val byFile = map.keys.groupBy { map.string(it) }
            return byFile.map { (name, keys) ->
                // save_pretrained names shards beside the index; a path elsewhere is not the checkpoint's own file.
                if (name.isEmpty() || name.contains('/') || name.contains('\\') || name == "." || name == "..") {
                    throw CheckpointFilesException(index, "weight_map names the shard '$name', not a file name beside the index")
                }
                val shard = File(dir, name)
                if (!shard.isFile) throw CheckpointFilesException(index, "weight_map names the shard $name, which is not in ${dir.path}")
                val c = SafeTensors.open(shard)
                val absent = keys.filter { it !in c.tensors }
                if (absent.isNotEmpty()) throw CheckpointFilesException(shard, "has no tensors ${absent.take(5)}, which the index puts there")
                c
            }
        }

        /** Both ways: every key the model reads is in a file, every tensor of the files is read. */
        internal fun checkKeys(path: File, keys: Set<String>, checkpoints: List<Checkpoint>, hint: String) {
            val have = checkpoints.flatMap { it.tensors.keys }.toSet()
            val missing = keys - have
            val unused = have - keys
            if (missing.isNotEmpty() || unused.isNotEmpty()) {
                throw CheckpointFilesException(path, "the model's keys and the checkpoint's differ: missing ${missing.sorted().take(10)}, " +
                    "never read ${unused.sorted().take(10)}$hint; is config.json the weights' own (sizes, tie_word_embeddings, attention_bias)?")
            }
        }
    }
}
