package dev.tapeout

import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/**
 * `?` dimensions the way Hugging Face model code uses them (issue 27): what records and exports, and what is refused
 * at the line of the model that recorded it, with what to do instead. IREE compiles and runs the same forms in
 * tests/iree/test_dynamic.py.
 */
class DynamicShapesTest {
    private fun nextLine(): Int = Throwable().stackTrace[1].lineNumber + 1

    private val here = "DynamicShapesTest.kt"

    @Test
    fun `elementwise ops broadcast a dynamic dimension against 1, a static size and another dynamic one`() {
        val t = ExecutionTape()
        val p = t.input("p", longArrayOf(DYNAMIC, 1))
        val f = t.input("f", 16)
        val angles = t.mul(p, f)
        assertArrayEquals(longArrayOf(DYNAMIC, 16), angles.shape)
        val row = t.input("row", longArrayOf(1, DYNAMIC))
        assertArrayEquals(longArrayOf(DYNAMIC, DYNAMIC), t.sub(p, row).shape)
        assertArrayEquals(longArrayOf(4, 16), t.add(t.input("q", longArrayOf(DYNAMIC, 16)), t.input("r", 4, 1)).shape)
        val keep = t.compare(p, row, "GE")
        assertArrayEquals(longArrayOf(DYNAMIC, DYNAMIC), t.select(keep, p, t.input("z")).shape)
        t.output("angles", angles)
        val text = t.toComputeGraph().toStableHlo()
        assertTrue(text.contains("stablehlo.dynamic_broadcast_in_dim") && text.contains("tensor.collapse_shape"), text)
        // No broadcast expands a dimension: a unit dimension is squeezed first (IREE 3.13 merges broadcast chains).
        assertTrue(!Regex("known_expanding_dimensions = array<i64: ").containsMatchIn(text), text)
        assertTrue(!text.contains("dynamic_reshape"), text)
    }

    @Test
    fun `expand broadcasts to the run-time shape of a reference tensor`() {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(2, DYNAMIC, 16))
        val b = t.input("b", 16)
        val e = t.expand(b, x)
        assertArrayEquals(longArrayOf(2, DYNAMIC, 16), e.shape)
        assertEquals(listOf(b, x), t.ops.last().inputs, "the reference is the second operand")
        t.output("e", e)
        val text = t.toComputeGraph().toStableHlo()
        assertTrue(Regex("""get_dimension_size %arg\d, dim = 1 : \(tensor<2x\?x16xf32>\)""").containsMatchIn(text) && text.contains("dynamic_broadcast_in_dim"), text)
        val line = nextLine()
        val bad = assertThrows<GraphValidationException> { t.expand(t.input("c", 8), x) }
        assertTrue(bad.detail.startsWith("broadcast at $here:$line") && bad.detail.contains("cannot broadcast"), bad.detail)
    }

    @Test
    fun `broadcast to a DYNAMIC size is refused at the recording line, pointing to expand`() {
        val t = ExecutionTape()
        val b = t.input("b", 16)
        val line = nextLine()
        val e = assertThrows<GraphValidationException> { t.broadcast(b, DYNAMIC, 16) }
        assertTrue(e.detail.startsWith("broadcast at $here:$line"), e.detail)
        assertTrue(e.detail.contains("expand(x, like)"), e.detail)
        val line2 = nextLine()
        val e2 = assertThrows<GraphValidationException> { t.broadcast(t.input("c", 3), 2, 4) }
        assertTrue(e2.detail.startsWith("broadcast at $here:$line2") && e2.detail.contains("dimension 0 (3) cannot broadcast"), e2.detail)
        assertArrayEquals(longArrayOf(2, 16), t.broadcast(b, 2, 16).shape)
    }

    @Test
    fun `arange counts along a dynamic dimension and iota of a DYNAMIC length is refused`() {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(1, DYNAMIC, 8))
        val pos = t.arange(x, 1)
        assertArrayEquals(longArrayOf(DYNAMIC), pos.shape)
        assertEquals(DType.I32, pos.dtype)
        assertEquals(mapOf<String, Any>("axis" to 1, "dim" to 0), t.ops.last().attrs)
        assertArrayEquals(longArrayOf(8), t.arange(x, -1, DType.I64).shape)
        t.output("pos", pos)
        val text = t.toComputeGraph().toStableHlo()
        assertTrue(text.contains("stablehlo.dynamic_iota") && text.contains("-> tensor<?xi32>"), text)
        for (len in listOf(DYNAMIC, -3L)) {
            val line = nextLine()
            val e = assertThrows<GraphValidationException> { t.iota(longArrayOf(len), 0) }
            assertTrue(e.detail.startsWith("iota at $here:$line"), e.detail)
            assertTrue(e.detail.contains("arange(like, axis)"), e.detail)
        }
    }

    @Test
    fun `slice with limit -1 runs to the end, on static and dynamic dimensions`() {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(DYNAMIC, 64))
        val tail = t.slice(x, longArrayOf(0, 32), longArrayOf(-1, -1))
        assertArrayEquals(longArrayOf(DYNAMIC, 32), tail.shape)
        val skip = t.slice(x, longArrayOf(1, 0), longArrayOf(-1, -1), longArrayOf(2, 3))
        assertArrayEquals(longArrayOf(DYNAMIC, 22), skip.shape)
        t.output("tail", tail)
        t.output("skip", skip)
        val text = t.toComputeGraph().toStableHlo()
        assertTrue(text.contains("stablehlo.real_dynamic_slice"), text)
        val line = nextLine()
        val e = assertThrows<GraphValidationException> { t.slice(x, longArrayOf(0, 0), longArrayOf(4, -1)) }
        assertTrue(e.detail.startsWith("slice at $here:$line") && e.detail.contains("dynamicSlice"), e.detail)
        val line2 = nextLine()
        val e2 = assertThrows<GraphValidationException> { t.slice(x, longArrayOf(0, 60), longArrayOf(-1, 70)) }
        assertTrue(e2.detail.startsWith("slice at $here:$line2") && e2.detail.contains("does not fit"), e2.detail)
    }

    @Test
    fun `gather, concat along a dynamic axis and matmul with dynamic dimensions record and export`() {
        val t = ExecutionTape()
        val cache = t.input("cache", longArrayOf(2, DYNAMIC, 32))
        val ids = t.input("ids", longArrayOf(DYNAMIC), DType.I32)
        val rows = t.gather(cache, ids, 0)
        assertArrayEquals(longArrayOf(DYNAMIC, DYNAMIC, 32), rows.shape)
        val grown = t.concat(listOf(cache, t.input("new", 2, 1, 32)), axis = 1)
        assertArrayEquals(longArrayOf(2, DYNAMIC, 32), grown.shape)
        val p = t.input("p", longArrayOf(DYNAMIC, 1))
        val angles = t.matmul(p, t.input("f", 1, 16))
        assertArrayEquals(longArrayOf(DYNAMIC, 16), angles.shape)
        t.output("rows", rows)
        t.output("grown", grown)
        t.output("angles", angles)
        val text = t.toComputeGraph().toStableHlo()
        assertTrue(text.contains("stablehlo.torch_index_select"), text)
        // Along a `?` axis: each part inserted at its offset into one result (IREE runs those as copies).
        assertEquals(2, Regex("""tensor\.insert_slice .* into tensor<2x\?x32xf32>""").findAll(text).count(), text)
        assertTrue(!text.contains("dynamic_reshape") && !text.contains("dynamic_gather"), text)
    }

    @Test
    fun `reshape infers one -1 on a static tensor as PyTorch's view does, and keeps it dynamic on a dynamic one`() {
        val t = ExecutionTape()
        val x = t.input("x", 1, 2, 12)
        assertArrayEquals(longArrayOf(1, 2, 3, 4), t.reshape(x, 1, 2, -1, 4).shape)
        assertArrayEquals(longArrayOf(24), t.reshape(x, -1).shape)
        val d = t.input("d", longArrayOf(1, DYNAMIC, 12))
        assertArrayEquals(longArrayOf(1, DYNAMIC, 3, 4), t.reshape(d, 1, -1, 3, 4).shape)
        val line = nextLine()
        val two = assertThrows<GraphValidationException> { t.reshape(x, -1, -1, 4) }
        assertTrue(two.message!!.contains("only one dimension") && two.message!!.contains("$here:$line"), two.message)
        val uneven = assertThrows<GraphValidationException> { t.reshape(x, 5, -1) }
        assertTrue(uneven.message!!.contains("cannot be inferred"), uneven.message)
    }

    @Test
    fun `a dynamic case refused at export names the line that recorded it and what to do`() {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(DYNAMIC, 2, 3))
        val line = nextLine()
        val y = t.reshape(x, DYNAMIC, 3, 2)
        t.output("y", y)
        val e = assertThrows<TapeoutException> { t.toComputeGraph().toStableHlo() }
        assertTrue(e.detail.contains("reshape") && e.detail.contains("split or merge whole dimensions"), e.detail)
        assertTrue(e.detail.contains("was recorded at $here:$line"), e.detail)
    }

    @Test
    fun `an export refusal in one function of a module names that function and the line that recorded the node`() {
        val prefill = ExecutionTape().also { t -> t.output("y", t.add(t.input("x", longArrayOf(DYNAMIC, 6)), t.scalar(1.0))) }
        val decode = ExecutionTape()
        val x = decode.input("x", longArrayOf(DYNAMIC, 2, 3))
        decode.output("z", decode.add(x, decode.scalar(2.0)))
        val line = nextLine()
        decode.output("y", decode.reshape(x, DYNAMIC, 3, 2))
        val out = kotlin.io.path.createTempDirectory("module-error").toFile()
        val e = assertThrows<TapeoutException> { exportModule(out, "m", mapOf("prefill" to prefill, "decode" to decode)) }
        assertEquals("decode", e.function, e.detail)
        assertTrue(e.detail.startsWith("function 'decode': ") && e.detail.contains("split or merge whole dimensions"), e.detail)
        assertTrue(e.detail.contains("node 1 (reshape) was recorded at $here:$line"), e.detail)
        out.deleteRecursively()
    }

    @Test
    fun `a native rule's refusal of a dynamic shape names the line that recorded it`() {
        val t = ExecutionTape()
        val b = t.input("b", 4)
        // The low-level record() skips the Kotlin checks: the native type rule refuses the `?` broadcast.
        val line = nextLine()
        val y = t.record("broadcast", listOf(b), longArrayOf(DYNAMIC, 4), DType.F32)
        t.output("y", y)
        val e = assertThrows<TapeoutException> { t.toComputeGraph().toStableHlo() }
        assertTrue(e.detail.contains("reference tensor") && e.detail.contains("expand(x, like)"), e.detail)
        assertTrue(e.detail.contains("was recorded at $here:$line"), e.detail)
    }
}
