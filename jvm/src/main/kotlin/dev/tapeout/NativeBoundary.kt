package dev.tapeout

import java.io.File

/**
 * One JSON object the native side returned, read field by field with its type checked: a field that is missing or
 * of another type is an [IllegalStateException] naming the reply and the field (a bug of one side of the JNI
 * boundary, never of the user's model), instead of a [ClassCastException] from an unchecked cast.
 */
internal class NativeReply private constructor(private val fields: Map<*, *>, private val what: String) {
    private fun wrong(key: String, want: String): Nothing =
        throw IllegalStateException("the native $what reply's field '$key' is not $want: ${fields[key]}")

    fun string(key: String): String = fields[key] as? String ?: wrong(key, "a string")

    fun stringOrNull(key: String): String? = if (fields[key] == null) null else string(key)

    fun long(key: String): Long = fields[key] as? Long ?: wrong(key, "an integer")

    fun strings(key: String): List<String> = list(key).map { it as? String ?: wrong(key, "a list of strings") }

    fun longs(key: String): List<Long> = list(key).map { it as? Long ?: wrong(key, "a list of integers") }

    fun objects(key: String): List<NativeReply> =
        list(key).map { o -> (o as? Map<*, *>)?.let { NativeReply(it, what) } ?: wrong(key, "a list of objects") }

    private fun list(key: String): List<*> = fields[key] as? List<*> ?: wrong(key, "a list")

    companion object {
        /** The reply [json] of the native call [what] (`finalize`, `export`): one JSON object. */
        fun parse(json: String, what: String): NativeReply =
            NativeReply(Json.parse(json) as? Map<*, *> ?: throw IllegalStateException("the native $what reply is not a JSON object"), what)
    }
}

/** What `NativeBridge.finalize` (and `export`) say about the graph: its inputs, constants and key collisions. */
internal class GraphSummary(val inputs: List<String>, val constants: List<ConstantInfo>, val keyCollisions: List<KeyCollision>) {
    companion object {
        fun of(r: NativeReply) = GraphSummary(
            r.strings("inputs"),
            r.objects("constants").map { ConstantInfo(it.string("name"), it.string("key"), it.long("bytes"), it.string("kind")) },
            r.objects("key_collisions").map { KeyCollision(it.string("tensor"), it.string("wanted"), it.string("assigned")) },
        )

        fun parse(json: String) = of(NativeReply.parse(json, "finalize"))
    }
}

/** What `NativeBridge.export` returns, as an [ExportResult]. */
internal fun exportResult(json: String): ExportResult {
    val r = NativeReply.parse(json, "export")
    val archives = r.strings("archives").map(::File)
    check(archives.isNotEmpty()) { "the native export reply names no archive" }
    return ExportResult(File(r.string("mlir")), archives.first(), r.long("mlir_bytes"), r.longs("archive_bytes").sum(),
        Math.toIntExact(r.long("externals")), r.long("pins"), r.long("copies"), archives, r.stringOrNull("index")?.let(::File),
        r.strings("parameters_flags"), signature = File(r.string("signature")),
        tuningSpec = r.stringOrNull("tuning_spec")?.let(::File))
}
