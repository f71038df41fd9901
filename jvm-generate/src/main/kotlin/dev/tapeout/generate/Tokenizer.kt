package dev.tapeout.generate

import ai.djl.huggingface.tokenizers.HuggingFaceTokenizer
import com.google.gson.JsonElement
import com.google.gson.JsonObject
import com.google.gson.JsonParser
import java.io.File

/**
 * A Hugging Face `tokenizer.json` (any model the `tokenizers` library writes: BPE, WordPiece, Unigram, with their
 * normalizers, pre-tokenizers, post-processors and decoders), run by the `tokenizers` library itself through DJL's
 * binding (`ai.djl.huggingface:tokenizers`, whose jar carries the native library). Encodings and decodings are the
 * library's, so they equal transformers' `PreTrainedTokenizerFast` on the same file (decoding as with
 * `clean_up_tokenization_spaces=False`): no truncation, no padding.
 *
 * It never reaches the network: opening one sets the system properties `OPT_OUT_TRACKING=true` (DJL's call home on
 * EC2) and `RUST_FLAVOR=cpu` (else DJL downloads a CUDA build of the library on a machine with a GPU) where neither
 * the property nor the environment variable of that name is set. Close it to free its native memory.
 */
class Tokenizer private constructor(
    private val hf: HuggingFaceTokenizer,
    /** The `tokenizer.json` read. */
    val file: File,
    /** One more than the highest id of its vocabulary and added tokens. */
    val vocabSize: Int,
    /** Its added tokens marked special (`added_tokens` with `"special": true`), by content. */
    val specialTokens: Map<String, Int>,
    /** `tokenizer_config.json`'s `bos_token`'s id, where that file beside it names one. */
    val bosTokenId: Int?,
    /** `tokenizer_config.json`'s `eos_token`'s id, where that file beside it names one. */
    val eosTokenId: Int?,
) : AutoCloseable {

    @Volatile
    private var closed = false

    /** The ids of `text`; with [addSpecialTokens], the post-processor's template adds its tokens (BOS, CLS, …). */
    fun encode(text: String, addSpecialTokens: Boolean = true): IntArray {
        live("encode")
        return hf.encode(text, addSpecialTokens, false).ids.let { ids -> IntArray(ids.size) { ids[it].toInt() } }
    }

    /** The text of `ids`; [skipSpecialTokens] leaves out the special tokens. An id not in the vocabulary is refused. */
    fun decode(ids: IntArray, skipSpecialTokens: Boolean = false): String {
        live("decode")
        for ((i, id) in ids.withIndex()) {
            if (id < 0 || id >= vocabSize) {
                throw TokenizerException("decode: ids[$i] is $id, outside $file's vocabulary of $vocabSize ids (0 until $vocabSize)", file)
            }
        }
        return hf.decode(LongArray(ids.size) { ids[it].toLong() }, skipSpecialTokens)
    }

    /** Frees the native tokenizer; using it afterwards is a [TokenizerException]. */
    override fun close() {
        closed = true
        hf.close()
    }

    private fun live(what: String) {
        if (closed) throw TokenizerException("$what: the tokenizer of $file is closed; open it again with Tokenizer.open", file)
    }

    override fun toString() = "Tokenizer($file, $vocabSize ids)"

    companion object {
        /**
         * Opens `path`: a `tokenizer.json`, or a directory holding one (a `save_pretrained` directory), whose
         * `tokenizer_config.json`, where present, names [bosTokenId] and [eosTokenId]. A missing or malformed file
         * is a [TokenizerException] naming it.
         */
        @JvmStatic
        fun open(path: File): Tokenizer {
            val file = if (path.isDirectory) File(path, "tokenizer.json") else path
            if (!file.isFile) {
                throw TokenizerException("no tokenizer at $file: pass a tokenizer.json or a directory holding one (save_pretrained writes it)", file)
            }
            val json = try {
                JsonParser.parseString(file.readText(Charsets.UTF_8)).asJsonObject
            } catch (e: RuntimeException) {
                throw TokenizerException("$file is not a JSON object as tokenizer.json is (${e.message}): write it with the tokenizers library's save()", file, e)
            }
            val (vocabSize, special) = vocabulary(json, file)
            stayOffline()
            val hf = try {
                HuggingFaceTokenizer.newInstance(file.toPath(), mapOf("addSpecialTokens" to "true", "truncation" to "false", "padding" to "false"))
            } catch (e: Exception) {
                throw TokenizerException("the tokenizers library refused $file: ${e.message}", file, e)
            }
            val config = File(file.parentFile, "tokenizer_config.json")
            val named = if (config.isFile) configTokens(config, special, hf) else null to null
            return Tokenizer(hf, file, vocabSize, special, named.first, named.second)
        }

        /** The vocabulary's size (one more than its highest id) and the special added tokens. */
        private fun vocabulary(json: JsonObject, file: File): Pair<Int, Map<String, Int>> {
            fun bad(what: String): Nothing = throw TokenizerException("$file: $what", file)
            val model = json.get("model")?.takeIf { it.isJsonObject }?.asJsonObject ?: bad("no \"model\" object")
            val vocab = model.get("vocab") ?: bad("its model has no \"vocab\"")
            // BPE and WordPiece map tokens to ids; Unigram lists [token, score] pairs in id order.
            var size = when {
                vocab.isJsonObject -> (vocab.asJsonObject.entrySet().maxOfOrNull { it.value.asInt } ?: -1) + 1
                vocab.isJsonArray -> vocab.asJsonArray.size()
                else -> bad("its model's \"vocab\" is neither an object nor an array")
            }
            val special = LinkedHashMap<String, Int>()
            for (t in json.get("added_tokens")?.takeIf { it.isJsonArray }?.asJsonArray ?: emptyList<JsonElement>()) {
                val o = t.asJsonObject
                val id = o.get("id").asInt
                size = maxOf(size, id + 1)
                if (o.get("special")?.asBoolean == true) special[o.get("content").asString] = id
            }
            return size to special
        }

        /** bos_token and eos_token of tokenizer_config.json (a string or an AddedToken object) as ids. */
        private fun configTokens(config: File, special: Map<String, Int>, hf: HuggingFaceTokenizer): Pair<Int?, Int?> {
            val json = try {
                JsonParser.parseString(config.readText(Charsets.UTF_8)).asJsonObject
            } catch (e: RuntimeException) {
                hf.close()
                throw TokenizerException("$config is not a JSON object (${e.message}): remove it or write it with save_pretrained", config, e)
            }
            fun id(key: String): Int? {
                val v = json.get(key)?.takeIf { !it.isJsonNull } ?: return null
                val token = if (v.isJsonObject) v.asJsonObject.get("content").asString else v.asString
                return special[token] ?: run {
                    hf.close()
                    throw TokenizerException("$config: $key '$token' is not an added token of the tokenizer.json beside it", config)
                }
            }
            return id("bos_token") to id("eos_token")
        }

        /** DJL reads these as environment variables or system properties: set them only where neither is set. */
        private fun stayOffline() {
            for ((key, value) in listOf("OPT_OUT_TRACKING" to "true", "RUST_FLAVOR" to "cpu")) {
                if (System.getenv(key) == null && System.getProperty(key) == null) System.setProperty(key, value)
            }
        }
    }
}
