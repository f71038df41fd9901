package dev.tapeout

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/** Every tracing function: the shapes Kotlin infers must be the ones the native emitter computes. */
class TracingApiTest {
    /** A tape that calls every tracing function of [ExecutionTape] at least once. */
    private fun wholeOpSet(): ExecutionTape {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(2, 8))
        val w = t.weight("model.w", FloatArray(8 * 8) { it * 0.01f }, 8, 8)
        val b = t.weight("model.b", FloatArray(8) { 0.1f }, 8)
        var h = t.add(t.matmul(x, w), b)
        for (f in listOf(t::relu, t::gelu, t::silu, t::sigmoid, t::tanh, t::sin, t::cos, t::exp, t::abs, t::neg)) h = f(h)
        h = t.sqrt(t.add(t.abs(h), b))
        h = t.log(t.add(t.rsqrt(h), b))
        h = t.div(t.mul(t.sub(h, b), h), t.add(t.abs(h), b))
        h = t.min(t.max(h, b), t.pow(t.abs(h), b))
        h = t.clamp(t.softmax(h), -1.0, 1.0)
        h = t.layerNorm(t.rmsNorm(h, b), b, b)
        val r = t.reshape(h, 2, 2, 4)
        val tr = t.transpose(r, 1, 0, 2)
        val c = t.concat(listOf(tr, tr), axis = 2)
        val s = t.slice(c, longArrayOf(0, 0, 0), longArrayOf(2, 2, 8), longArrayOf(1, 1, 2))
        val red = t.reduceMean(t.reduceSum(s, 2, keepDims = true), 0)
        val mx = t.reduceMax(h)
        val bc = t.broadcast(b, 3, 8)
        val ids = t.input("ids", longArrayOf(3), DType.I32)
        val g = t.gather(w, ids)
        val cos = t.weight("rope.cos", FloatArray(2 * 4) { 1f }, 2, 4)
        val sin = t.weight("rope.sin", FloatArray(2 * 4), 2, 4)
        val q = t.rope(r, cos, sin)
        val att = t.sdpa(q, q, q, causal = true)
        val masked = t.causalMask(t.matmul(q, t.transpose(q, 0, 2, 1)))
        val img = t.input("img", longArrayOf(1, 2, 6, 6))
        val k = t.weight("conv.w", FloatArray(4 * 1 * 3 * 3) { 0.1f }, 4, 1, 3, 3)
        val conv = t.conv2d(img, k, null, stride = intArrayOf(2, 2), padding = intArrayOf(1, 1, 1, 1), groups = 2)
        val mp = t.maxPool2d(conv, intArrayOf(2, 2))
        val ap = t.avgPool2d(img, intArrayOf(3, 3))
        val io = t.iota(longArrayOf(3, 8), 1)
        val counted = t.expand(t.convert(t.arange(g, 1), DType.F32), g)
        val gt = t.compare(g, bc, "GT")
        val sel = t.select(t.or(t.and(gt, t.not(gt)), gt), counted, t.convert(io, DType.F32))
        val pos = t.input("pos", LongArray(0), DType.I32)
        val window = t.dynamicSlice(h, listOf(pos, pos), 1, 8)
        val cache = t.dynamicUpdateSlice(h, window, listOf(pos, pos))
        val best = t.argmax(cache)
        t.output(h, red, mx, att, masked, mp, ap, sel, window, best)
        return t
    }

    @Test
    fun `the whole op set traces and emits`() {
        val text = wholeOpSet().toComputeGraph().toStableHlo()
        for (op in listOf("stablehlo.convolution", "stablehlo.reduce_window", "stablehlo.gather", "stablehlo.dot_general",
                          "stablehlo.logistic", "stablehlo.iota", "stablehlo.select", "stablehlo.clamp", "stablehlo.reduce(")) {
            assertTrue(text.contains(op), "$op missing")
        }
        assertTrue(!text.contains("custom_call"))
    }

    @Test
    fun `every op the tracing API records is in the native op table`() {
        val native = NativeBridge.knownOps().split(", ").toSet()
        val recorded = wholeOpSet().ops.map { it.op }.toSet()
        assertTrue(native.containsAll(recorded), "recorded ops missing from the native table: ${recorded - native}")
        // Every public tracing function is exercised above (so a new one fails here until it is added there).
        // Leaves make tensors without an op; linear, embedding, repeatKv and length record other ops (ModelApiTest and
        // AttentionTest check them).
        val leaves = setOf("input", "weight", "halfWeight", "packedWeight", "denseWeight", "mapped", "record", "scalar", "param",
            "output", "linear", "embedding", "expand", "arange", "repeatKv", "length")
        // expand and arange record broadcast and iota with a reference operand: check that form is exercised.
        val ops = wholeOpSet().ops
        assertTrue(ops.any { it.op == "broadcast" && it.inputs.size == 2 }, "expand is exercised")
        assertTrue(ops.any { it.op == "iota" && it.inputs.size == 1 }, "arange is exercised")
        // The op families are interfaces ExecutionTape implements (ElementwiseOps, ShapeOps, LayerOps, TapeSources).
        val tracing = ExecutionTape::class.java.methods
            .filter { it.returnType == Tensor::class.java && it.declaringClass.isAssignableFrom(ExecutionTape::class.java) }
            .filter { it.declaringClass.name.startsWith("dev.tapeout.") && !it.name.contains('$') }
            .map { it.name.substringBefore('$') }
            .filter { it !in leaves }
            .toSet()
        val snake = { name: String -> name.replace(Regex("([a-z0-9])([A-Z])"), "$1_$2").lowercase() }
        val missing = tracing.filter { snake(it) !in recorded }
        assertTrue(missing.isEmpty(), "tracing functions not exercised by wholeOpSet(): $missing")
        assertTrue(tracing.size >= 40, "the reflection finds the op families: $tracing")
    }

    @Test
    fun `the tracing API records only names of the op table, with operand counts the table accepts`() {
        for (op in wholeOpSet().ops) {
            val entry = Op.named(op.op)
            assertTrue(entry != null, "'${op.op}' is not in OpTable.kt")
            assertTrue(entry!!.acceptsInputs(op.inputs.size), "'${op.op}' recorded with ${op.inputs.size} operands; the table says ${entry.inputsText}")
            assertTrue(entry.outputs.accepts(op.outputs.size), "'${op.op}' recorded with ${op.outputs.size} results")
        }
    }

    @Test
    fun `OpTable kt is the op table of the native library the tests load`() {
        // rust/graph/tests/kotlin_op_table.rs checks the file against the Rust source; this checks the build.
        assertEquals(NativeBridge.knownOps().split(", ").toSet(), Op.values().map { it.opName }.toSet())
    }
}
