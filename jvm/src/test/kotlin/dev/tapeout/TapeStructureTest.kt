package dev.tapeout

import dev.tapeout.TestSupport.readF32
import dev.tapeout.TestSupport.tempDir
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File

/** How the tape is put together: the op table, call sites, graph snapshots, the one export path, checkpoints. */
class TapeStructureTest {
    private fun nextLine(): Int = Throwable().stackTrace[1].lineNumber + 1

    @Test
    fun `record checks a table op's operand count at the recording line`() {
        val t = ExecutionTape()
        val x = t.input("x", 2)
        val line = nextLine()
        val e = assertThrows<GraphValidationException> { t.record("add", listOf(x), longArrayOf(2), DType.F32) }
        assertTrue(e.detail.startsWith("add at TapeStructureTest.kt:$line"), e.detail)
        assertTrue(e.detail.contains("takes 2 operands"), e.detail)
        assertTrue(t.ops.isEmpty(), "nothing was recorded")
        // An op with a range: within it is recorded, outside it is not.
        t.record("conv2d", listOf(x, x), longArrayOf(2), DType.F32)
        assertThrows<GraphValidationException> { t.record("conv2d", listOf(x), longArrayOf(2), DType.F32) }
        assertEquals(1, t.ops.size)
    }

    @Test
    fun `every source file of the library is skipped when finding the call site`() {
        val main = File(System.getProperty("tapeout.repo"), "jvm/src/main/kotlin/dev/tapeout")
        val files = main.listFiles { f -> f.name.endsWith(".kt") }!!.map { it.name }.toSet()
        assertTrue(files.size > 10, "found the sources in $main: $files")
        assertEquals(files, LIBRARY_FILES, "LIBRARY_FILES in ExecutionTape.kt lists every file of $main")
    }

    @Test
    fun `the library records ops by their OpTable entry, never by a string literal`() {
        val main = File(System.getProperty("tapeout.repo"), "jvm/src/main/kotlin/dev/tapeout")
        val literal = Regex("""(record|binary|unary|pool|reduce|norm)\(\s*"""")
        val found = main.listFiles { f -> f.name.endsWith(".kt") }!!.flatMap { f ->
            f.readLines().withIndex().filter { (_, l) -> !l.trimStart().startsWith("*") && !l.trimStart().startsWith("//") && literal.containsMatchIn(l) }
                .map { (i, l) -> "${f.name}:${i + 1}: ${l.trim()}" }
        }
        assertTrue(found.isEmpty(), "op names as literals (use Op.X): $found")
    }

    @Test
    fun `a graph is the tape as it was at toComputeGraph`() {
        val t = ExecutionTape()
        val x = t.input("x", 2)
        val w = t.weight("w", floatArrayOf(1f, 2f), 2)
        val y = t.add(x, w)
        t.output("y", y)
        val graph = t.toComputeGraph()
        val before = graph.toStableHlo()

        // Recorded afterwards: another op and output, and the first result renamed.
        t.output("z", t.mul(y, w))
        t.output("renamed", y)
        assertEquals(before, graph.toStableHlo(), "the graph does not see what was recorded after it was made")
        val dir = tempDir("tapeout-snapshot")
        val r = graph.export(dir, "snap", MaterializationPolicy.ExternalAlways())
        val text = r.mlir.readText()
        assertTrue(!text.contains("stablehlo.multiply"), text)
        assertTrue(text.contains("\"y\"") && !text.contains("\"z\"") && !text.contains("\"renamed\""), text)
        // A new graph has everything.
        val now = t.toComputeGraph().toStableHlo()
        assertTrue(now.contains("stablehlo.multiply") && now.contains("\"z\""), now)
        dir.deleteRecursively()
    }

    @Test
    fun `the recorded op keeps its operands when the caller's list changes`() {
        val t = ExecutionTape()
        val a = t.input("a", 2)
        val parts = arrayListOf(a, a)
        val c = t.concat(parts)
        parts.add(a)
        assertEquals(2, t.ops.single().inputs.size)
        assertArrayEquals(longArrayOf(4), c.shape)
    }

    private val first = floatArrayOf(1f, 2f)
    private val second = floatArrayOf(3f, 4f)

    /** A function that gives two weights one key (a collision), for one-function and module exports. */
    private fun colliding(): ExecutionTape {
        val t = ExecutionTape()
        val x = t.input("x", 2)
        t.output("y", t.add(t.add(x, t.weight("layer.bias", first, 2)), t.weight("layer.bias", second, 2)))
        return t
    }

    @Test
    fun `key collisions reach the result of both export paths`() {
        val dir = tempDir("tapeout-collide")
        val single = colliding().toComputeGraph().export(dir, "one", MaterializationPolicy.ExternalAlways())
        val module = exportModule(dir, "two", mapOf("f" to colliding(), "g" to colliding()), policy = MaterializationPolicy.ExternalAlways())
        assertEquals(listOf(KeyCollision("t3", "layer.bias", "layer.bias.1")), single.keyCollisions)
        assertEquals(single.keyCollisions + single.keyCollisions, module.keyCollisions, "one per function")
        // The warning names the key, the renamed tensor and its new key (ExportMain prints it for both paths).
        val w = single.keyCollisions.single().warning
        assertTrue(w.contains("'layer.bias'") && w.contains("'t3'") && w.contains("'layer.bias.1'"), w)
        assertArrayEquals(floatArrayOf(3f, 4f), readF32(single.irpa, "layer.bias.1", 0, 2))
        dir.deleteRecursively()
    }

    @Test
    fun `a module export error names the line of the function that recorded the node`() {
        val good = ExecutionTape().also { t -> t.output("y", t.neg(t.input("x", 2))) }
        val bad = ExecutionTape()
        val a = bad.input("a", 2, 3)
        val line = nextLine()
        bad.output(bad.record("add", listOf(a, bad.input("b", 4)), longArrayOf(2, 3), DType.F32))
        val dir = tempDir("tapeout-module-error")
        val e = assertThrows<GraphValidationException> { exportModule(dir, "m", mapOf("prefill" to good, "decode" to bad)) }
        assertTrue(e.detail.contains("node 0 (add) was recorded at TapeStructureTest.kt:$line"), e.detail)
        assertTrue(dir.listFiles()!!.isEmpty(), "nothing written: ${dir.listFiles()!!.toList()}")
        dir.deleteRecursively()
    }

    @Test
    fun `a checkpoint tensor of a dtype the library does not know is an error naming it`() {
        val file = File("/nonexistent/model.safetensors")
        val tensor = mapOf("name" to "q.weight", "dtype" to "i4", "shape" to listOf(4L), "offset" to 8L, "length" to 2L)
        val description = mapOf("format" to "safetensors", "tensors" to listOf(tensor), "metadata" to emptyMap<String, Any?>())
        val e = assertThrows<UnknownDTypeException> { Checkpoint.fromDescription(file, description, "safetensors") }
        assertEquals(Triple(file, "q.weight", "i4"), Triple(e.file, e.tensor, e.dtype))
        // The remedy is the point of the wording.
        assertTrue(e.detail.contains("use the tapeout jar whose native library read the file"), e.detail)
        // A known dtype opens.
        val ok = Checkpoint.fromDescription(file, description + ("tensors" to listOf(tensor + ("dtype" to "bf16"))), null)
        assertEquals(DType.BF16, ok["q.weight"].dtype)
    }

    @Test
    fun `an export writes the weights it was given, where the format says`() {
        val tape = ExecutionTape()
        val x = tape.input("x", longArrayOf(2))
        tape.output(tape.add(tape.mul(x, tape.weight("w", floatArrayOf(1f, 2f), 2)), tape.weight("b", floatArrayOf(-3f, 0.5f), 2)))
        val dir = tempDir("tapeout-export")
        val external = tape.toComputeGraph().export(dir, "ext", MaterializationPolicy.ExternalAlways())
        val entries = IrpaReader.entries(external.irpa)
        assertEquals(listOf("w", "b"), entries.map { it.name })
        assertTrue(entries.all { it.type == 2 && it.length == 8L && it.offset % 64 == 0L }, entries.toString())
        assertArrayEquals(floatArrayOf(1f, 2f), readF32(external.irpa, "w", 0, 2))
        assertArrayEquals(floatArrayOf(-3f, 0.5f), readF32(external.irpa, "b", 0, 2))
        assertEquals(4096L, external.irpa.length(), "padded to 4096")
        // The independent reader agrees with the native one on where each entry is.
        for (e in entries) assertArrayEquals(longArrayOf(e.offset, e.length), NativeBridge.archiveEntry(external.irpa.path, e.name).copyOf(2))
        val text = external.mlir.readText()
        assertTrue(text.contains("#flow.parameter.named<\"model\"::\"w\">") || text.contains("\"model\"::\"w\""), text)

        // Inline: the archive holds no entry and the module the values.
        val inline = tape.toComputeGraph().export(dir, "inl", MaterializationPolicy.InlineAlways)
        assertEquals(emptyList<IrpaReader.Entry>(), IrpaReader.entries(inline.irpa))
        assertEquals(0, inline.externals)
        val module = inline.mlir.readText()
        assertTrue(module.contains("0x0000803F00000040") || module.contains("1.000000e+00, 2.000000e+00"), module)
        dir.deleteRecursively()
    }
}
