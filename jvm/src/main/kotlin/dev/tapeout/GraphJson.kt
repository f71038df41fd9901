package dev.tapeout

/**
 * An [ExecutionTape] as it was at one moment: its tensors (with the names they had), ops and outputs. A
 * [ComputeGraph] keeps one, so recording on the tape afterwards (more ops, another output, a renamed result)
 * does not change what the graph exports.
 */
internal class TapeSnapshot(
    /** The tape, for its call sites and error messages. */
    val tape: ExecutionTape,
    val tensors: List<Tensor>,
    /** `tensors[i]`'s name at the time. */
    private val names: List<String>,
    val ops: List<TapeOp>,
    val outputs: List<Tensor>,
) {
    /** The name [t] had at the time. */
    fun nameOf(t: Tensor): String = names[t.id]

    /** The snapshot as tapeout's graph JSON (`tapeout-graph/1`); JVM data travels separately, by reference. */
    fun toGraphJson(name: String): String {
        val sb = StringBuilder()
        sb.append("{\"format\":\"tapeout-graph/1\",\"name\":").append(Json.quote(name)).append(",\"tensors\":[")
        tensors.forEachIndexed { i, t -> if (i > 0) sb.append(','); appendTensorJson(sb, names[i], t) }
        sb.append("],")
        appendFunctionBody(sb, ops, outputs, ::nameOf)
        return sb.append('}').toString()
    }
}

/** One tensor of the graph JSON, called [name]: dtype, shape, path, and the file region of file-backed data. */
internal fun appendTensorJson(sb: StringBuilder, name: String, t: Tensor) {
    sb.append("{\"name\":").append(Json.quote(name)).append(",\"dtype\":\"").append(t.dtype.json).append("\",\"shape\":[")
    t.shape.forEachIndexed { j, d -> if (j > 0) sb.append(','); sb.append(if (d == DYNAMIC) "\"?\"" else d.toString()) }
    sb.append(']')
    if (t.path != null) sb.append(",\"path\":").append(Json.quote(t.path))
    when (val d = t.data) {
        is MappedTensorData ->
            sb.append(",\"data\":{\"file\":").append(Json.quote(d.path)).append(",\"offset\":").append(d.offset).append(",\"mapped\":true}")
        is FileTensorData -> {
            sb.append(",\"data\":{\"file\":").append(Json.quote(d.path)).append(",\"offset\":").append(d.offset)
            if (d.encoding != null) sb.append(",\"encoding\":").append(Json.quote(d.encoding))
            sb.append('}')
        }
        else -> {}
    }
    sb.append('}')
}

/** `"nodes":[…],"outputs":[…]` of the graph JSON, tensors named by [nameOf]. */
internal fun appendFunctionBody(sb: StringBuilder, ops: List<TapeOp>, outputs: List<Tensor>, nameOf: (Tensor) -> String) {
    sb.append("\"nodes\":[")
    ops.forEachIndexed { i, op ->
        if (i > 0) sb.append(',')
        sb.append("{\"op\":").append(Json.quote(op.op)).append(",\"inputs\":[")
        sb.append(op.inputs.joinToString(",") { Json.quote(nameOf(it)) }).append("],\"outputs\":[")
        sb.append(op.outputs.joinToString(",") { Json.quote(nameOf(it)) }).append("],\"attrs\":{")
        sb.append(op.attrs.entries.joinToString(",") { (k, v) -> Json.quote(k) + ":" + Json.value(v) }).append("}}")
    }
    sb.append("],\"outputs\":[").append(outputs.joinToString(",") { Json.quote(nameOf(it)) }).append(']')
}
