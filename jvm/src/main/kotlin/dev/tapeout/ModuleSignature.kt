package dev.tapeout

import java.io.File

/** One argument or result of an exported function: its [name] (`tapeout.name` in the module), [dtype] (`f32`,
 *  `i32`, `bf16`, …) and [shape], [DYNAMIC] where the dimension is known only at run time (`?`). */
data class SignatureValue(val name: String, val dtype: String, val shape: List<Long>) {
    /** The dtype as a [DType], or null for one the JVM library has no name for. */
    val dtypeOrNull: DType? get() = DType.values().firstOrNull { it.json == dtype }

    override fun toString(): String = "$name: $dtype${shapeText(shape.toLongArray())}"
}

/** One public function of an exported module: its [arguments] and [results] in call order. */
data class FunctionSignature(val name: String, val arguments: List<SignatureValue>, val results: List<SignatureValue>) {
    /** The position of the argument called [argument]; an [IllegalArgumentException] naming the arguments there are. */
    fun argumentIndex(argument: String): Int = arguments.indexOfFirst { it.name == argument }.also {
        require(it >= 0) { "function '$name' has no argument '$argument'; its arguments are ${arguments.map { a -> a.name }}" }
    }

    /** The position of the result called [result]. */
    fun resultIndex(result: String): Int = results.indexOfFirst { it.name == result }.also {
        require(it >= 0) { "function '$name' has no result '$result'; its results are ${results.map { r -> r.name }}" }
    }
}

/**
 * The signature file an export writes beside its module, `<name>.signature.json` (format `tapeout-signature/1`,
 * docs/signature-format.md): every public function's arguments and results in order, with names, dtypes and shapes.
 * Read it to call the module by name instead of parsing MLIR:
 *
 * ```kotlin
 * val sig = ModuleSignature.read(File("build/tapeout/tiny_llm.signature.json"))
 * val prefill = sig.function("prefill")
 * val tokensAt = prefill.argumentIndex("tokens")
 * ```
 */
data class ModuleSignature(val module: String, val functions: List<FunctionSignature>) {
    /** The function called [name]; an [IllegalArgumentException] naming the functions there are. */
    fun function(name: String): FunctionSignature = functions.firstOrNull { it.name == name }
        ?: throw IllegalArgumentException("module '$module' has no function '$name'; it has ${functions.map { it.name }}")

    companion object {
        /** The format this reader understands. */
        const val FORMAT = "tapeout-signature/1"

        /** Reads [file]; a [JsonFileException] names the file and key of anything that is not as the format says. */
        fun read(file: File): ModuleSignature = of(JsonObjectView.read(file, "a tapeout signature file"))

        /** Reads the file at [path]. */
        fun read(path: String): ModuleSignature = read(File(path))

        /** The signature in [text] (a signature file's contents); [source] names it in messages. */
        fun parse(text: String, source: String = "<signature>"): ModuleSignature =
            of(JsonObjectView.parse(text, source, "a tapeout signature file"))

        private fun of(o: JsonObjectView): ModuleSignature {
            val format = o.string("format")
            if (format != FORMAT) {
                throw JsonFileException("${o.source}: format is '$format', not '$FORMAT' (written by another tapeout version?)")
            }
            return ModuleSignature(o.string("module"), o.objects("functions").map { f ->
                FunctionSignature(f.string("name"), values(f, "arguments"), values(f, "results"))
            })
        }

        private fun values(f: JsonObjectView, key: String): List<SignatureValue> = f.objects(key).map { v ->
            val shape = v.list("shape").map { d ->
                when {
                    d == "?" -> DYNAMIC
                    d is Long && d >= 0 -> d
                    else -> throw JsonFileException("${v.source}: ${v.keyText("shape")} holds $d, not a size or \"?\"")
                }
            }
            SignatureValue(v.string("name"), v.string("dtype"), shape)
        }
    }
}
