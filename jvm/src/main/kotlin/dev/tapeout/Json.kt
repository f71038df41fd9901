package dev.tapeout

/** Just enough JSON for the graph tapeout reads and the summaries it returns. */
internal object Json {
    fun quote(s: String): String {
        val sb = StringBuilder(s.length + 2).append('"')
        for (c in s) {
            when {
                c == '"' -> sb.append("\\\"")
                c == '\\' -> sb.append("\\\\")
                c < ' ' -> sb.append(String.format("\\u%04x", c.code))
                else -> sb.append(c)
            }
        }
        return sb.append('"').toString()
    }

    fun value(v: Any?): String = when (v) {
        null -> "null"
        is String -> quote(v)
        is Boolean, is Int, is Long -> v.toString()
        is Float, is Double -> {
            val d = (v as Number).toDouble()
            require(d.isFinite()) { "attribute values must be finite, got $d" }
            // Always with a dot or exponent, so the value stays a float.
            if (d == Math.rint(d) && kotlin.math.abs(d) < 1e15) "${d.toLong()}.0" else d.toString()
        }
        is List<*> -> v.joinToString(",", "[", "]") { value(it) }
        is IntArray -> v.joinToString(",", "[", "]")
        is LongArray -> v.joinToString(",", "[", "]")
        else -> throw IllegalArgumentException("unsupported attribute value $v")
    }

    /** Parses a JSON document into Map / List / String / Double / Long / Boolean / null. */
    fun parse(text: String): Any? = Parser(text).run { value().also { skipWs(); require(pos == text.length) { "trailing JSON" } } }

    private class Parser(val s: String) {
        var pos = 0
        fun skipWs() { while (pos < s.length && s[pos].isWhitespace()) pos++ }
        fun value(): Any? {
            skipWs()
            return when (val c = s[pos]) {
                '{' -> { pos++; val m = LinkedHashMap<String, Any?>(); skipWs()
                    if (s[pos] == '}') { pos++; return m }
                    while (true) { skipWs(); val k = string(); skipWs(); expect(':'); m[k] = value(); skipWs()
                        if (s[pos] == ',') { pos++; continue }; expect('}'); return m } }
                '[' -> { pos++; val l = ArrayList<Any?>(); skipWs()
                    if (s[pos] == ']') { pos++; return l }
                    while (true) { l.add(value()); skipWs(); if (s[pos] == ',') { pos++; continue }; expect(']'); return l } }
                '"' -> string()
                't' -> { pos += 4; true }
                'f' -> { pos += 5; false }
                'n' -> { pos += 4; null }
                else -> { val start = pos; while (pos < s.length && (s[pos].isDigit() || s[pos] in "+-.eE")) pos++
                    val num = s.substring(start, pos); if (start == pos) error("bad JSON at $start: $c")
                    num.toLongOrNull() ?: num.toDouble() }
            }
        }
        fun expect(c: Char) { require(s[pos] == c) { "expected '$c' at $pos" }; pos++ }
        fun string(): String {
            expect('"'); val sb = StringBuilder()
            while (s[pos] != '"') {
                val c = s[pos++]
                if (c != '\\') { sb.append(c); continue }
                when (val e = s[pos++]) {
                    'n' -> sb.append('\n'); 't' -> sb.append('\t'); 'r' -> sb.append('\r'); 'b' -> sb.append('\b'); 'f' -> sb.append('\u000c')
                    'u' -> { sb.append(s.substring(pos, pos + 4).toInt(16).toChar()); pos += 4 }
                    else -> sb.append(e)
                }
            }
            pos++
            return sb.toString()
        }
    }
}

/** A JSON file a reader ([HfConfig], [ModuleSignature]) could not use: not JSON, or a key missing or of another
 *  type. The message names the file and the key (its dotted path, `rope_scaling.factor`). */
class JsonFileException(detail: String) : TapeoutException(detail)

/**
 * A JSON object read from [source] (a file's path, for messages), whose [path] inside the document is `""` at the
 * top and `rope_scaling.` for a nested object: typed getters whose failures name the file and the full key.
 */
internal class JsonObjectView(val fields: Map<*, *>, val source: String, private val path: String = "") {
    fun keyText(key: String) = "'$path$key'"

    private fun describe(v: Any?): String = when (v) {
        null -> "null"
        is String -> "a string (${Json.quote(v)})"
        is Boolean -> "a boolean ($v)"
        is Long, is Double -> "a number ($v)"
        is List<*> -> "a list"
        is Map<*, *> -> "an object"
        else -> v.toString()
    }

    fun wrong(key: String, want: String): Nothing =
        throw JsonFileException("$source: key ${keyText(key)} is ${describe(fields[key])}, not $want")

    fun missing(key: String): Nothing = throw JsonFileException("$source has no key ${keyText(key)}")

    /** The value at [key], or null when absent or JSON `null`. */
    fun raw(key: String): Any? = fields[key]

    fun has(key: String) = fields[key] != null

    fun stringOrNull(key: String): String? = raw(key)?.let { it as? String ?: wrong(key, "a string") }
    fun string(key: String): String = stringOrNull(key) ?: missing(key)

    fun longOrNull(key: String): Long? = when (val v = raw(key)) {
        null -> null
        is Long -> v
        is Double -> if (v == Math.rint(v) && kotlin.math.abs(v) < 9.0e15) v.toLong() else wrong(key, "an integer")
        else -> wrong(key, "an integer")
    }
    fun long(key: String): Long = longOrNull(key) ?: missing(key)

    fun intOrNull(key: String): Int? = longOrNull(key)?.let { if (it in Int.MIN_VALUE..Int.MAX_VALUE) it.toInt() else wrong(key, "a 32-bit integer") }
    fun int(key: String): Int = intOrNull(key) ?: missing(key)

    fun doubleOrNull(key: String): Double? = raw(key)?.let { (it as? Number)?.toDouble() ?: wrong(key, "a number") }
    fun double(key: String): Double = doubleOrNull(key) ?: missing(key)

    fun booleanOrNull(key: String): Boolean? = raw(key)?.let { it as? Boolean ?: wrong(key, "a boolean") }
    fun boolean(key: String): Boolean = booleanOrNull(key) ?: missing(key)

    fun listOrNull(key: String): List<*>? = raw(key)?.let { it as? List<*> ?: wrong(key, "a list") }
    fun list(key: String): List<*> = listOrNull(key) ?: missing(key)

    fun objOrNull(key: String): JsonObjectView? =
        raw(key)?.let { JsonObjectView(it as? Map<*, *> ?: wrong(key, "an object"), source, "$path$key.") }
    fun obj(key: String): JsonObjectView = objOrNull(key) ?: missing(key)

    /** The objects of the list at [key], each named `key[i].` in messages. */
    fun objects(key: String): List<JsonObjectView> = list(key).mapIndexed { i, o ->
        JsonObjectView(o as? Map<*, *> ?: throw JsonFileException("$source: ${keyText(key)}[$i] is ${describe(o)}, not an object"),
            source, "$path$key[$i].")
    }

    companion object {
        /** The JSON object in [file], or a [JsonFileException] naming the file when it cannot be read or is not one. */
        fun read(file: java.io.File, what: String): JsonObjectView {
            val text = try { file.readText() } catch (e: java.io.IOException) {
                throw JsonFileException("cannot read $what ${file.path}: ${e.message}").also { it.initCause(e) }
            }
            return parse(text, file.path, what)
        }

        fun parse(text: String, source: String, what: String): JsonObjectView {
            val v = try { Json.parse(text) } catch (e: IndexOutOfBoundsException) {
                throw JsonFileException("$source is not valid JSON ($what): it ends in the middle of a value").also { it.initCause(e) }
            } catch (e: RuntimeException) {
                throw JsonFileException("$source is not valid JSON ($what): ${e.message ?: e.javaClass.simpleName}").also { it.initCause(e) }
            }
            return JsonObjectView(v as? Map<*, *> ?: throw JsonFileException("$source is not a JSON object ($what)"), source)
        }
    }
}
