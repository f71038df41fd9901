package dev.tapeout

import dev.tapeout.TestSupport.tempDir
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File
import java.io.IOException

/** Every Rust error reaches Kotlin as its own exception class with its message; a panic too, and the JVM lives on. */
class ErrorMappingTest {
    @Test
    fun `graph errors are GraphValidationException naming node and problem`() {
        val tape = ExecutionTape()
        val a = tape.input("a", longArrayOf(2, 3))
        val b = tape.input("b", longArrayOf(4))
        tape.output(tape.record("add", listOf(a, b), longArrayOf(2, 3), DType.F32))
        val e = assertThrows<GraphValidationException> { tape.toComputeGraph() }
        assertTrue(e.message!!.contains("node 0 (add -> '") && e.message!!.contains("do not broadcast"), e.message)
        assertEquals(listOf(0), e.nodes, "the node comes as a field")

        val t2 = ExecutionTape()
        t2.output(t2.record("warp", listOf(t2.input("x", longArrayOf(2))), longArrayOf(2), DType.F32))
        val e2 = assertThrows<GraphValidationException> { t2.toComputeGraph().toStableHlo() }
        assertTrue(e2.message!!.contains("unknown op 'warp'"), e2.message)
    }

    @Test
    fun `a packed weight's error names its tensor and remedy as fields`() {
        val t = ExecutionTape()
        val q = t.packedWeight("model.q.weight", ByteArray(34 * 3), "Q8_0", 4, 24)
        t.output(t.linear(t.input("x", 2, 24), q))
        val e = assertThrows<PackedConstantException> { t.toComputeGraph() }
        assertEquals("model.q.weight", e.tensor)
        assertEquals(Remedy.DEQUANTIZE, e.remedy)
        assertEquals(emptyList<Int>(), e.nodes)
    }

    @Test
    fun `a native reply of the wrong shape names its field instead of failing a cast`() {
        val e = assertThrows<IllegalStateException> { GraphSummary.parse("""{"inputs": [1], "constants": [], "key_collisions": []}""") }
        assertTrue(e.message!!.contains("finalize reply's field 'inputs' is not a list of strings"), e.message)
        val m = assertThrows<IllegalStateException> { GraphSummary.parse("""{"inputs": [], "constants": []}""") }
        assertTrue(m.message!!.contains("field 'key_collisions' is not a list"), m.message)
    }

    @Test
    fun `the native contract's dtype names are the tape's`() {
        assertEquals(NATIVE_DTYPE_NAMES, DType.values().map { it.json })
    }

    @Test
    fun `every remedy has a wording in the Kotlin API and the Gradle task`() {
        for (r in Remedy.values()) {
            assertTrue(kotlinWording(r, 1).startsWith("; "), "$r")
            assertTrue(gradleWording(r, 1).startsWith("; "), "$r")
        }
    }

    @Test
    fun `archive errors are IrpaFormatException`() {
        val junk = File.createTempFile("junk", ".irpa").also { it.writeBytes(ByteArray(4096)) }
        val e = assertThrows<IrpaFormatException> { NativeBridge.archiveEntry(junk.path, "w") }
        assertTrue(e.message!!.contains("IRPA file magic missing"), e.message)
        junk.delete()
    }

    @Test
    fun `file system errors are IOException`() {
        val tape = ExecutionTape()
        val x = tape.input("x", longArrayOf(2))
        tape.output(tape.add(x, tape.weight("w", FloatArray(2), 2)))
        val file = File.createTempFile("not-a-dir", ".txt")
        val e = assertThrows<IOException> { tape.toComputeGraph().export(File(file, "out")) }
        assertTrue(e.message!!.contains(file.name), e.message)
        file.delete()
    }

    @Test
    fun `a native panic is a RuntimeException with its message, and the JVM keeps running`() {
        val e = assertThrows<RuntimeException> { NativeTestHooks.panicForTest("deliberate test panic 42") }
        assertTrue(e.message!!.contains("deliberate test panic 42"), e.message)
        // The library still works afterwards.
        val tape = ExecutionTape()
        tape.output(tape.neg(tape.input("x", longArrayOf(2))))
        assertTrue(tape.toComputeGraph().toStableHlo().contains("stablehlo.negate"))
    }

    @Test
    fun `a wrong array type for a kind is a validation error, not a crash`() {
        val tape = ExecutionTape()
        val x = tape.input("x", longArrayOf(4))
        val w = tape.weight("w", FloatArray(4), 4)
        tape.output(tape.add(x, w))
        val m = Marshalled(tape)
        m.kinds[w.id] = NativeKind.HALF_BYTES // claims a ByteArray
        val e = assertThrows<GraphValidationException> {
            NativeBridge.finalize(tape.toGraphJson("m"), m.data, m.kinds, m.encodings, 0, IntArray(0))
        }
        assertTrue(e.message!!.contains("not the JVM array its kind needs"), e.message)
        val bits = assertThrows<GraphValidationException> {
            NativeBridge.finalize(tape.toGraphJson("m"), m.data, IntArray(m.kinds.size), m.encodings, 64, IntArray(0))
        }
        assertTrue(bits.message!!.contains("unknown option bits 0x40"), bits.message)
        val target = assertThrows<GraphValidationException> { // a target code the native side has no target for
            NativeBridge.finalize(tape.toGraphJson("m"), m.data, IntArray(m.kinds.size), m.encodings,
                7 shl NativeOption.TARGET_SHIFT, IntArray(0))
        }
        assertTrue(target.message!!.contains("no export target has code 7"), target.message)
        val bands = assertThrows<GraphValidationException> { // a layout of kept codes, with nothing kept
            NativeBridge.finalize(tape.toGraphJson("m"), m.data, IntArray(m.kinds.size), m.encodings,
                NativeOption.ROW_BAND_CODES, IntArray(0))
        }
        assertTrue(bands.message!!.contains("ROW_BAND_CODES lays out the codes of weights kept packed, so it needs KEEP_PACKED"),
            bands.message)
        val both = assertThrows<GraphValidationException> { // dequantize and keep at once
            NativeBridge.finalize(tape.toGraphJson("m"), m.data, IntArray(m.kinds.size), m.encodings,
                NativeOption.DEQUANTIZE_PACKED or NativeOption.KEEP_PACKED, IntArray(0))
        }
        assertTrue(both.message!!.contains("unknown option bits 0x5"), both.message)
    }

    @Test
    fun `export writes both files and refuses nothing it was not asked to`() {
        val tape = ExecutionTape()
        val x = tape.input("x", longArrayOf(2))
        tape.output(tape.add(x, tape.weight("w", floatArrayOf(1f, 2f), 2)))
        val dir = tempDir("tapeout-export")
        val r = tape.toComputeGraph().export(dir, "tiny")
        assertTrue(r.mlir.isFile && r.irpa.isFile)
        // An 8-byte weight is below the default 4096-byte threshold: inline in the module (1.0f, 2.0f as
        // little-endian f32 hex), and the archive is a valid IRPA file with no entry (read by the test's own reader).
        val mlir = r.mlir.readText()
        assertTrue(mlir.contains("dense<\"0x0000803F00000040\"> : tensor<2xf32>"), mlir)
        assertTrue(!mlir.contains("#flow.parameter"), mlir)
        assertEquals(0, r.externals)
        assertEquals(emptyList<IrpaReader.Entry>(), IrpaReader.entries(r.irpa))
        dir.deleteRecursively()
    }
}
