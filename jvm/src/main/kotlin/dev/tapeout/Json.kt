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
