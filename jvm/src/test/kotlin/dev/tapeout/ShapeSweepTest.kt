package dev.tapeout

import dev.tapeout.TestSupport.tempDir
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File

/**
 * Kotlin infers every result shape at the recording line (so a mistake names that line); the native side checks
 * the graph again when it is made and lowered. Each case here records one op of a family over odd sizes (1, 5, 7),
 * broadcasting, windows with stride, padding and dilation, and batched products, checks the shape Kotlin
 * inferred against the expected one, and exports the graph through the native library, whose `finalize` and
 * lowering refuse a result shape that is not the op's.
 */
class ShapeSweepTest {
    private class Case(val label: String, val expect: LongArray, val build: (ExecutionTape) -> Tensor)

    private val cases = ArrayList<Case>()

    private fun case(label: String, vararg expect: Long, build: (ExecutionTape) -> Tensor) {
        cases += Case(label, expect, build)
    }

    private fun w(t: ExecutionTape, path: String, vararg shape: Long): Tensor =
        t.weight(path, FloatArray(shape.fold(1L) { a, d -> a * d }.toInt()) { (it % 7) * 0.25f - 0.5f }, *shape)

    private fun runAll(family: String) {
        val dir = tempDir("tapeout-sweep-$family")
        val failures = ArrayList<String>()
        cases.forEachIndexed { i, c ->
            val t = ExecutionTape()
            val y = try { c.build(t) } catch (e: TapeoutException) { failures += "${c.label}: Kotlin refused it: ${e.message}"; return@forEachIndexed }
            if (!y.shape.contentEquals(c.expect)) {
                failures += "${c.label}: Kotlin inferred ${shapeText(y.shape)}, expected ${shapeText(c.expect)}"
                return@forEachIndexed
            }
            t.output("y", y)
            try {
                val r = t.toComputeGraph().export(File(dir, "$i"), "case", MaterializationPolicy.ExternalAlways())
                assertTrue(r.mlir.isFile)
            } catch (e: TapeoutException) {
                failures += "${c.label}: the native side refused Kotlin's ${shapeText(y.shape)}: ${e.message}"
            }
        }
        dir.deleteRecursively()
        assertTrue(failures.isEmpty(), "$family:\n" + failures.joinToString("\n"))
        assertTrue(cases.size >= 8, "$family has cases")
    }

    @Test
    fun `elementwise ops broadcast as NumPy does`() {
        val pairs = listOf(
            longArrayOf(1) to longArrayOf(5), longArrayOf(5, 1) to longArrayOf(1, 7), longArrayOf(7) to longArrayOf(5, 7),
            longArrayOf(1, 5, 1) to longArrayOf(7, 1, 1), longArrayOf(5, 7) to longArrayOf(5, 7), LongArray(0) to longArrayOf(5),
            longArrayOf(1, 1) to longArrayOf(7),
        )
        val expect = listOf(longArrayOf(5), longArrayOf(5, 7), longArrayOf(5, 7), longArrayOf(7, 5, 1), longArrayOf(5, 7), longArrayOf(5), longArrayOf(1, 7))
        for ((i, p) in pairs.withIndex()) {
            val (sa, sb) = p
            for (op in listOf("add", "sub", "mul", "div", "pow", "max", "min")) {
                case("$op ${shapeText(sa)} ${shapeText(sb)}", *expect[i]) { t ->
                    val a = t.input("a", sa)
                    val b = w(t, "b", *sb)
                    when (op) {
                        "add" -> t.add(a, b); "sub" -> t.sub(a, b); "mul" -> t.mul(a, b); "div" -> t.div(a, b)
                        "pow" -> t.pow(a, b); "max" -> t.max(a, b); else -> t.min(a, b)
                    }
                }
            }
            case("compare ${shapeText(sa)} ${shapeText(sb)}", *expect[i]) { t -> t.compare(t.input("a", sa), t.input("b", sb), "LT") }
            case("select ${shapeText(sa)} ${shapeText(sb)}", *expect[i]) { t ->
                val a = t.input("a", sa)
                t.select(t.compare(a, a, "GE"), a, t.input("b", sb))
            }
        }
        for (s in listOf(longArrayOf(1), longArrayOf(5, 7), longArrayOf(1, 5, 7))) {
            case("unary ${shapeText(s)}", *s) { t ->
                var h = t.input("x", s)
                for (f in listOf(t::neg, t::abs, t::exp, t::log, t::sqrt, t::rsqrt, t::tanh, t::sigmoid, t::relu, t::gelu, t::silu, t::sin, t::cos)) h = f(h)
                t.convert(t.convert(t.clamp(t.softmax(t.softmax(h, 0)), 0.0, 1.0), DType.BF16), DType.F32)
            }
        }
        case("causal_mask [1, 5, 5]", 1, 5, 5) { t -> t.causalMask(t.input("s", 1, 5, 5)) }
        case("causal_mask [5, 7]", 5, 7) { t -> t.causalMask(t.input("s", 5, 7)) }
        case("iota [5, 7] dim 1", 5, 7) { t -> t.convert(t.iota(intArrayOf(5, 7), 1), DType.F32) }
        runAll("elementwise")
    }

    @Test
    fun `shape ops keep or move the elements`() {
        case("reshape [5, 7] -> [7, 5]", 7, 5) { t -> t.reshape(t.input("x", 5, 7), 7, 5) }
        case("reshape [5, 7] -> [35]", 35) { t -> t.reshape(t.input("x", 5, 7), 35) }
        case("reshape [1, 5, 7] -> [1, 35, 1]", 1, 35, 1) { t -> t.reshape(t.input("x", 1, 5, 7), 1, 35, 1) }
        case("transpose [1, 5, 7] (2, 0, 1)", 7, 1, 5) { t -> t.transpose(t.input("x", 1, 5, 7), 2, 0, 1) }
        case("transpose [5, 7] reversed", 7, 5) { t -> t.transpose(t.input("x", 5, 7)) }
        case("transpose [1, 5, 7] reversed", 7, 5, 1) { t -> t.transpose(t.input("x", 1, 5, 7)) }
        case("broadcast [1, 7] -> [5, 7]", 5, 7) { t -> t.broadcast(t.input("x", 1, 7), 5, 7) }
        case("broadcast [7] -> [1, 5, 7]", 1, 5, 7) { t -> t.broadcast(t.input("x", 7), 1, 5, 7) }
        case("concat [5, 1] [5, 7] axis 1", 5, 8) { t -> t.concat(listOf(t.input("a", 5, 1), t.input("b", 5, 7)), axis = 1) }
        case("concat 3 x [1, 5] axis 0", 3, 5) { t -> t.concat(listOf(t.input("a", 1, 5), t.input("b", 1, 5), t.input("c", 1, 5))) }
        case("concat [7] alone", 7) { t -> t.concat(listOf(t.input("a", 7))) }
        case("slice [7] 1..7 step 2", 3) { t -> t.slice(t.input("x", 7), intArrayOf(1), intArrayOf(7), intArrayOf(2)) }
        case("slice [5, 7] 0..5 step 5, 2..7 step 3", 1, 2) { t -> t.slice(t.input("x", 5, 7), intArrayOf(0, 2), intArrayOf(5, 7), intArrayOf(5, 3)) }
        case("slice [1, 5, 7] whole", 1, 5, 7) { t -> t.slice(t.input("x", 1, 5, 7), intArrayOf(0, 0, 0), intArrayOf(1, 5, 7)) }
        case("gather [7, 5] by [1]", 1, 5) { t -> t.gather(w(t, "e", 7, 5), t.input("ids", 1, dtype = DType.I32)) }
        case("gather [7, 5] by [5, 1] axis 0", 5, 1, 5) { t -> t.gather(w(t, "e", 7, 5), t.input("ids", 5, 1, dtype = DType.I32)) }
        case("gather [7, 5] by [1] axis 1", 7, 1) { t -> t.gather(w(t, "e", 7, 5), t.input("ids", 1, dtype = DType.I64), axis = 1) }
        case("dynamic_slice [5, 7] -> [1, 7]", 1, 7) { t ->
            val p = t.input("p", LongArray(0), DType.I32)
            t.dynamicSlice(t.input("x", 5, 7), listOf(p, p), 1, 7)
        }
        case("dynamic_slice [1, 5, 7] -> [1, 5, 1]", 1, 5, 1) { t ->
            val p = t.input("p", LongArray(0), DType.I64)
            t.dynamicSlice(t.input("x", 1, 5, 7), listOf(p, p, p), 1, 5, 1)
        }
        case("dynamic_update_slice [5, 7] <- [1, 7]", 5, 7) { t ->
            val p = t.input("p", LongArray(0), DType.I32)
            t.dynamicUpdateSlice(t.input("x", 5, 7), t.input("u", 1, 7), listOf(p, p))
        }
        case("dynamic_update_slice [1, 7, 5] <- [1, 1, 5]", 1, 7, 5) { t ->
            val p = t.input("p", LongArray(0), DType.I64)
            t.dynamicUpdateSlice(t.input("x", 1, 7, 5), t.input("u", 1, 1, 5), listOf(p, p, p))
        }
        runAll("shape")
    }

    @Test
    fun `products, windows, reductions and layers`() {
        case("matmul [5, 7] x [7, 1]", 5, 1) { t -> t.matmul(t.input("a", 5, 7), w(t, "b", 7, 1)) }
        case("matmul [1, 7] x [7, 5]", 1, 5) { t -> t.matmul(t.input("a", 1, 7), w(t, "b", 7, 5)) }
        case("matmul [3, 5, 7] x [7, 1]", 3, 5, 1) { t -> t.matmul(t.input("a", 3, 5, 7), w(t, "b", 7, 1)) }
        case("matmul [2, 5, 7] x [2, 7, 3] batched", 2, 5, 3) { t -> t.matmul(t.input("a", 2, 5, 7), t.input("b", 2, 7, 3)) }
        case("matmul [1, 1, 5, 7] x [1, 1, 7, 5] batched", 1, 1, 5, 5) { t -> t.matmul(t.input("a", 1, 1, 5, 7), t.input("b", 1, 1, 7, 5)) }
        case("linear [5, 7] by [1, 7] + bias", 5, 1) { t -> t.linear(t.input("x", 5, 7), w(t, "l.weight", 1, 7), w(t, "l.bias", 1)) }
        case("linear [1, 5, 7] by [5, 7]", 1, 5, 5) { t -> t.linear(t.input("x", 1, 5, 7), w(t, "l.weight", 5, 7)) }
        case("embedding [7, 5] by [5]", 5, 5) { t -> t.embedding(w(t, "e", 7, 5), t.input("ids", 5, dtype = DType.I32)) }
        case("conv2d 7x7 k3 s2 p1", 1, 5, 4, 4) { t ->
            t.conv2d(t.input("x", 1, 1, 7, 7), w(t, "k", 5, 1, 3, 3), stride = intArrayOf(2, 2), padding = intArrayOf(1, 1, 1, 1))
        }
        case("conv2d 5x7 k3 d2 bias", 1, 7, 1, 3) { t ->
            t.conv2d(t.input("x", 1, 5, 5, 7), w(t, "k", 7, 5, 3, 3), w(t, "kb", 7), dilation = intArrayOf(2, 2))
        }
        case("conv2d groups 5, k1 asymmetric padding", 5, 5, 8, 7) { t ->
            t.conv2d(t.input("x", 5, 5, 7, 5), w(t, "k", 5, 1, 1, 1), padding = intArrayOf(1, 0, 1, 1), groups = 5)
        }
        case("conv2d 7x5 k(1, 5) stride (1, 5)", 1, 1, 7, 1) { t ->
            t.conv2d(t.input("x", 1, 1, 7, 5), w(t, "k", 1, 1, 1, 5), stride = intArrayOf(1, 5))
        }
        case("max_pool2d 7x7 k3 s2", 1, 5, 3, 3) { t -> t.maxPool2d(t.input("x", 1, 5, 7, 7), intArrayOf(3, 3), intArrayOf(2, 2)) }
        case("max_pool2d 5x7 k2 s1 p(1, 0, 1, 1)", 1, 1, 5, 8) { t ->
            t.maxPool2d(t.input("x", 1, 1, 5, 7), intArrayOf(2, 2), intArrayOf(1, 1), intArrayOf(1, 0, 1, 1))
        }
        case("avg_pool2d 7x5 k(7, 5)", 5, 1, 1, 1) { t -> t.avgPool2d(t.input("x", 5, 1, 7, 5), intArrayOf(7, 5)) }
        case("avg_pool2d 7x7 k3 s3 p1", 1, 1, 3, 3) { t ->
            t.avgPool2d(t.input("x", 1, 1, 7, 7), intArrayOf(3, 3), intArrayOf(3, 3), intArrayOf(1, 1, 1, 1))
        }
        case("reduce_sum [5, 7] axis 1", 5) { t -> t.reduceSum(t.input("x", 5, 7), 1) }
        case("reduce_mean [1, 5, 7] axes 0 2 keepdims", 1, 5, 1) { t -> t.reduceMean(t.input("x", 1, 5, 7), 0, 2, keepDims = true) }
        case("reduce_max [5, 7] all", *LongArray(0)) { t -> t.reduceMax(t.input("x", 5, 7)) }
        case("reduce_sum [1, 5, 7] axis -1", 1, 5) { t -> t.reduceSum(t.input("x", 1, 5, 7), -1) }
        case("argmax [5, 7]", 5) { t -> t.convert(t.argmax(t.input("x", 5, 7)), DType.F32) }
        case("argmax [1, 5, 7] axis 1 i64", 1, 7) { t -> t.convert(t.argmax(t.input("x", 1, 5, 7), 1, DType.I64), DType.F32) }
        case("layer_norm [5, 7]", 5, 7) { t -> t.layerNorm(t.input("x", 5, 7), w(t, "g", 7), w(t, "b", 7)) }
        case("layer_norm [1, 5, 7] no params", 1, 5, 7) { t -> t.layerNorm(t.input("x", 1, 5, 7)) }
        case("rms_norm [5, 7] gamma", 5, 7) { t -> t.rmsNorm(t.input("x", 5, 7), w(t, "g", 7)) }
        case("rms_norm [1, 1, 5] no gamma", 1, 1, 5) { t -> t.rmsNorm(t.input("x", 1, 1, 5)) }
        case("rope [5, 7, 4] by [7, 4]", 5, 7, 4) { t -> t.rope(t.input("x", 5, 7, 4), w(t, "cos", 7, 4), w(t, "sin", 7, 4)) }
        case("rope [1, 5, 2] by [5, 2]", 1, 5, 2) { t -> t.rope(t.input("x", 1, 5, 2), w(t, "cos", 5, 2), w(t, "sin", 5, 2)) }
        case("sdpa [1, 5, 7] kv [1, 7, 7] v 3", 1, 5, 3) { t -> t.sdpa(t.input("q", 1, 5, 7), t.input("k", 1, 7, 7), t.input("v", 1, 7, 3)) }
        case("sdpa [5, 1, 7] causal", 5, 1, 7) { t -> val q = t.input("q", 5, 1, 7); t.sdpa(q, q, q, causal = true) }
        case("sdpa [1, 5, 7] with mask [5, 5]", 1, 5, 7) { t ->
            val q = t.input("q", 1, 5, 7)
            t.sdpa(q, q, q, mask = t.input("m", 5, 5), scale = 0.5)
        }
        runAll("layers")
    }

    @Test
    fun `a shape Kotlin cannot infer is refused at the recording line, before the native side`() {
        val t = ExecutionTape()
        val e = assertThrows<GraphValidationException> { t.add(t.input("a", 5, 7), t.input("b", 7, 5)) }
        assertTrue(e.detail.startsWith("add at ShapeSweepTest.kt:"), e.detail)
        assertArrayEquals(longArrayOf(5, 7), t.tensors[0].shape)
    }
}
