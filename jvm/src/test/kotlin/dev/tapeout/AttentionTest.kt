package dev.tapeout

import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/** Grouped-query sdpa, rope's two pair layouts and table widths, repeatKv and rotary: what is accepted, and what is
 *  refused at the recording line (the native validator refuses the same graphs: rust/graph/src/ops/tests.rs). */
class AttentionTest {
    private fun refused(block: (ExecutionTape) -> Unit): String {
        val e = assertThrows<GraphValidationException> { block(ExecutionTape()) }
        val m = e.message ?: ""
        assertTrue(m.contains("AttentionTest.kt:"), "names the recording line: $m")
        return m
    }

    @Test
    fun `grouped-query sdpa records the query heads' shape and emits no repeat of the kv heads`() {
        val t = ExecutionTape()
        val q = t.input("q", longArrayOf(1, 8, DYNAMIC, 16))
        val k = t.input("k", longArrayOf(1, 2, DYNAMIC, 16))
        val v = t.input("v", longArrayOf(1, 2, DYNAMIC, 12))
        val y = t.sdpa(q, k, v, causal = true)
        assertArrayEquals(longArrayOf(1, 8, DYNAMIC, 12), y.shape)
        t.output(y)
        val text = t.toComputeGraph().toStableHlo()
        assertTrue(text.contains("batching_dims = [0, 1] x [0, 1]"), text)
        assertTrue(!text.contains("tensor<1x8x?x16xf32>, tensor<1x8x"), "k is not repeated to 8 heads")
    }

    @Test
    fun `sdpa refuses heads that do not group, differing head dims and a mask of the wrong shape at the user's line`() {
        val m1 = refused { t -> t.sdpa(t.input("q", 1, 6, 4, 8), t.input("k", 1, 4, 4, 8), t.input("v", 1, 4, 4, 8)) }
        assertTrue(m1.startsWith("sdpa at AttentionTest.kt:") && m1.contains("q has 6 heads and k/v 4") && m1.contains("repeatKv"), m1)
        val m2 = refused { t -> t.sdpa(t.input("q", 1, 2, 4, 8), t.input("k", 1, 2, 4, 6), t.input("v", 1, 2, 4, 8)) }
        assertTrue(m2.contains("head dimensions differ (8 vs 6)"), m2)
        val m3 = refused { t -> t.sdpa(t.input("q", 1, 4, 3, 8), t.input("k", 1, 2, 7, 8), t.input("v", 1, 2, 7, 8), t.input("m", 1, 2, 3, 7)) }
        assertTrue(m3.contains("the mask [1, 2, 3, 7] does not broadcast to the scores [1, 4, 3, 7]"), m3)
        val m4 = refused { t -> t.sdpa(t.input("q", longArrayOf(1, DYNAMIC, 4, 8)), t.input("k", 1, 2, 4, 8), t.input("v", 1, 2, 4, 8)) }
        assertTrue(m4.contains("q has ? heads and k/v 2"), m4)
        val m5 = refused { t -> t.sdpa(t.input("q", 1, 2, 4, 8), t.input("k", 1, 2, 5, 8), t.input("v", 1, 2, 4, 8)) }
        assertTrue(m5.contains("different key lengths"), m5)
        val m6 = refused { t -> t.sdpa(t.input("q", 1, 2, 5, 8), t.input("k", 1, 2, 3, 8), t.input("v", 1, 2, 3, 8), causal = true) }
        assertTrue(m6.contains("the first 2 queries would see no key"), m6)
        val m7 = refused { t -> t.sdpa(t.input("q", longArrayOf(1, 2, 3, DYNAMIC)), t.input("k", 1, 2, 3, 8), t.input("v", 1, 2, 3, 8)) }
        assertTrue(m7.contains("? head dimension"), m7)
        // A mask that broadcasts ([S, T] and [B, 1, S, T]) is accepted.
        val t = ExecutionTape()
        val (q, k) = t.input("q", 2, 4, 3, 8) to t.input("k", 2, 2, 7, 8)
        t.output(t.sdpa(q, k, k, t.input("m", 3, 7)), t.sdpa(q, k, k, t.input("m2", 2, 1, 3, 7)))
        assertTrue(t.toComputeGraph().toStableHlo().contains("stablehlo.dot_general"))
    }

    @Test
    fun `sdpa records a softcap and a sliding window and refuses them out of range at the user's line`() {
        val t = ExecutionTape()
        val q = t.input("q", longArrayOf(1, 4, DYNAMIC, 8))
        val k = t.input("k", longArrayOf(1, 2, DYNAMIC, 8))
        val y = t.sdpa(q, k, k, causal = true, softcap = 50.0, slidingWindow = 4096)
        assertEquals(mapOf<String, Any>("causal" to true, "softcap" to 50.0, "window" to 4096), t.ops.last().attrs)
        t.output(y)
        val text = t.toComputeGraph().toStableHlo()
        assertTrue(text.contains("stablehlo.tanh") && text.contains("dense<4096>"), text)
        val m1 = refused { u -> u.sdpa(u.input("q", 1, 2, 4, 8), u.input("k", 1, 2, 4, 8), u.input("v", 1, 2, 4, 8), slidingWindow = 2) }
        assertTrue(m1.startsWith("sdpa at AttentionTest.kt:") && m1.contains("slidingWindow needs causal = true"), m1)
        val m2 = refused { u -> u.sdpa(u.input("q", 1, 2, 4, 8), u.input("k", 1, 2, 4, 8), u.input("v", 1, 2, 4, 8), causal = true, slidingWindow = 0) }
        assertTrue(m2.contains("slidingWindow must be at least 1"), m2)
        val m3 = refused { u -> u.sdpa(u.input("q", 1, 2, 4, 8), u.input("k", 1, 2, 4, 8), u.input("v", 1, 2, 4, 8), softcap = Double.NaN) }
        assertTrue(m3.contains("softcap must be a finite number above 0, not NaN"), m3)
    }

    @Test
    fun `and, or and not combine bool masks, act bitwise on integers and refuse floats`() {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(DYNAMIC, 4))
        val pos = t.arange(x, 0)
        val causal = t.compare(t.reshape(pos, -1, 1), t.arange(x, 1), "GE")
        val mask = !(causal and t.compare(t.arange(x, 1), t.scalar(2.0, DType.I32), "LT")) or causal
        assertArrayEquals(longArrayOf(DYNAMIC, 4), mask.shape)
        assertEquals(DType.BOOL, mask.dtype)
        assertEquals(listOf("and", "not", "or"), t.ops.takeLast(3).map { it.op })
        assertEquals(DType.I32, t.and(pos, pos).dtype)
        t.output("mask", mask)
        val text = t.toComputeGraph().toStableHlo()
        assertTrue(text.contains("stablehlo.and") && text.contains("stablehlo.not") && text.contains("stablehlo.or"), text)
        val m1 = refused { u -> u.and(u.input("a", 2), u.input("b", 2)) }
        assertTrue(m1.startsWith("and at AttentionTest.kt:") && m1.contains("not f32: compare the values first"), m1)
        val m2 = refused { u -> u.not(u.input("a", 2)) }
        assertTrue(m2.startsWith("not at AttentionTest.kt:"), m2)
    }

    @Test
    fun `length is a constant for a static dimension and a run-time count for a dynamic one`() {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(1, DYNAMIC, 8))
        val n = t.length(x, 1)
        assertArrayEquals(LongArray(0), n.shape)
        assertEquals(DType.I32, n.dtype)
        assertEquals("reduce_sum", t.ops.last().op)
        val before = t.ops.size
        val d = t.length(x, -1)
        assertEquals(before, t.ops.size, "a static size records no op")
        assertEquals(DType.I32, d.dtype)
        val m = refused { u -> u.length(u.input("y", 2, 3), 2) }
        assertTrue(m.contains("out of range"), m)
    }

    @Test
    fun `rope takes full and half tables in both pair layouts and refuses other widths`() {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(1, 4, DYNAMIC, 8))
        val full = t.input("c", longArrayOf(DYNAMIC, 8))
        val half = t.input("h", longArrayOf(1, 1, DYNAMIC, 4))
        val ys = listOf(t.rope(x, full, full), t.rope(x, half, half), t.rope(x, full, full, interleaved = true), t.rope(x, half, half, interleaved = true))
        for (y in ys) assertArrayEquals(x.shape, y.shape)
        assertEquals(true, t.ops.last().attrs["interleaved"])
        assertEquals(null, t.ops.first().attrs["interleaved"])
        t.output(*ys.toTypedArray())
        t.toComputeGraph().toStableHlo()
        val m1 = refused { u -> val c = u.input("c", 5, 3); u.rope(u.input("x", 1, 5, 8), c, c) }
        assertTrue(m1.startsWith("rope at AttentionTest.kt:") && m1.contains("width 3 for a head dimension of 8") && m1.contains("[.., S, 4]"), m1)
        val m2 = refused { u -> val c = u.input("c", 5, 7); u.rope(u.input("x", 1, 5, 7), c, c) }
        assertTrue(m2.contains("must be even, not 7"), m2)
        val m3 = refused { u -> val c = u.input("c", 4, 8); u.rope(u.input("x", 1, 5, 8), c, c) }
        assertTrue(m3.contains("cos/sin [4, 8] do not broadcast to x [1, 5, 8]"), m3)
        val m4 = refused { u -> u.rope(u.input("x", 1, 5, 8), u.input("c", 5, 8), u.input("s", 5, 4)) }
        assertTrue(m4.contains("must have one shape"), m4)
    }

    @Test
    fun `repeatKv repeats each head in place and keeps sdpa's result`() {
        val t = ExecutionTape()
        val k = t.input("k", longArrayOf(1, 2, DYNAMIC, 4))
        val r = t.repeatKv(k, 3)
        assertArrayEquals(longArrayOf(1, 6, DYNAMIC, 4), r.shape)
        assertTrue(t.repeatKv(k, 1) === k)
        t.output(r)
        t.toComputeGraph().toStableHlo()
        val m = refused { u -> u.repeatKv(u.input("k", 2, 4, 8), 2) }
        assertTrue(m.contains("[B, KV, T, D]"), m)
    }

    /** Inverse frequencies transcribed from transformers (float32, numpy) for d = 8, θ = 10000 and Llama 3.1's
     *  scaling with original_max_position_embeddings 8 (so that every branch is taken): an independent oracle. */
    @Test
    fun `inverse frequencies follow transformers' default, linear and llama3 formulas`() {
        val default = floatArrayOf(1.0f, 0.1f, 0.01f, 0.001f)
        assertArrayEquals(default, ropeInverseFrequencies(8), 1e-7f)
        assertArrayEquals(FloatArray(4) { default[it] / 4f }, ropeInverseFrequencies(8, scaling = RopeScaling.Linear(4.0)), 1e-8f)
        // wavelen = 2π / inv: 6.28, 62.8, 628, 6283; low_freq_wavelen = 8 / 1 = 8, high = 8 / 4 = 2.
        // 6.28 is between 2 and 8: smooth = (8 / 6.283 - 1) / 3 = 0.09108, inv = (1 - s) / 8 + s = 0.204695;
        // the others are above 8: divided by 8.
        val l3 = ropeInverseFrequencies(8, scaling = RopeScaling.Llama3(8.0, 1.0, 4.0, 8))
        assertArrayEquals(floatArrayOf(0.20469485f, 0.0125f, 0.00125f, 0.00012500001f), l3, 1e-6f)
        assertThrows<IllegalArgumentException> { ropeInverseFrequencies(7) }
    }

    @Test
    fun `rotary computes its tables in the graph from integer positions of a run-time length`() {
        val t = ExecutionTape()
        val pos = t.input("pos", longArrayOf(DYNAMIC), DType.I32)
        val r = t.rotary(pos, 8, theta = 500000.0, scaling = RopeScaling.Llama3(8.0, 1.0, 4.0, 64))
        assertArrayEquals(longArrayOf(DYNAMIC, 8), r.cos.shape)
        val x = t.input("x", longArrayOf(1, 2, DYNAMIC, 8))
        t.output(t.rope(x, r))
        // f32 tables on a bf16 x are converted to x's dtype.
        assertEquals(DType.BF16, t.rope(t.input("xh", longArrayOf(1, 2, DYNAMIC, 8), DType.BF16), r).dtype)
        val b = t.input("bpos", longArrayOf(2, DYNAMIC), DType.I64)
        val rb = t.rotary(b, 8, interleaved = true)
        assertArrayEquals(longArrayOf(2, 1, DYNAMIC, 8), rb.sin.shape)
        assertTrue(rb.interleaved)
        t.output(t.rope(t.input("xb", longArrayOf(2, 3, DYNAMIC, 8)), rb))
        // The only constants are the D inverse frequencies (no table of the context length).
        val constants = t.tensors.filter { it.data is FloatArrayTensorData && it.path == null && it.rank > 0 }
        assertEquals(listOf(8L, 8L), constants.map { it.shape.single() })
        t.toComputeGraph().toStableHlo()
        val m = refused { u -> u.rotary(u.input("p", 4), 8) }
        assertTrue(m.contains("positions must be integers"), m)
        val m2 = refused { u -> u.rotary(u.input("p", longArrayOf(4), DType.I32), 7) }
        assertTrue(m2.contains("even and positive, not 7"), m2)
    }
}
