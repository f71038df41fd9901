package dev.tapeout.generate

import com.google.gson.JsonArray
import com.google.gson.JsonElement
import com.google.gson.JsonObject
import com.google.gson.JsonParser
import java.io.File

/** The committed goldens under src/test/resources (written by make_tokenizer_golden.py, make_generate_golden.py). */
object Goldens {
    /** The resource `path` as a file (Gradle copies test resources to a directory). */
    fun file(path: String): File = File(
        (Goldens::class.java.getResource("/$path") ?: error("no test resource $path: run the make_*_golden.py scripts")).toURI(),
    )

    /** The resource `path` parsed as a JSON object. */
    fun json(path: String): JsonObject = JsonParser.parseString(file(path).readText(Charsets.UTF_8)).asJsonObject

    /** A JSON array of integers. */
    fun ints(e: JsonElement): IntArray = e.asJsonArray.let { a -> IntArray(a.size()) { a[it].asInt } }

    /** The objects of a JSON array. */
    fun objects(a: JsonArray): List<JsonObject> = a.map { it.asJsonObject }
}
