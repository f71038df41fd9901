package dev.tapeout

import dev.tapeout.TestSupport.procStatus
import dev.tapeout.TestSupport.readF32
import dev.tapeout.TestSupport.tempDir
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder

/** The reference implementation's extraction contract, through the Kotlin API and JNI. */
class ExtractionContractTest {
    private fun linear(w: (ExecutionTape) -> Tensor, rows: Long = 4): Pair<ExecutionTape, Tensor> {
        val tape = ExecutionTape()
        val x = tape.input("x", longArrayOf(2, rows))
        val wt = w(tape)
        tape.output(tape.matmul(x, wt))
        return tape to wt
    }

    @Test
    fun `an f32 constant is the live array, pinned without a copy`() {
        val n = 64 shl 20 // 64 Mi floats = 256 MiB
        val values = FloatArray(n) { (it % 4093).toFloat() }
        val (tape, w) = linear({ it.weight("model.embed.weight", values, 4, (n / 4).toLong()) })
        val pin = NativeTestHooks.pinInfo(values)
        assertEquals(0L, pin[0], "GetPrimitiveArrayCritical returned a copy")
        assertEquals(n.toLong(), pin[1])

        val graph = tape.toComputeGraph()
        assertEquals(listOf(ConstantInfo(w.name, "model.embed.weight", n * 4L, "borrowed_f32")), graph.constants)
        val dir = tempDir("tapeout-alias")
        val rssBefore = procStatus("VmRSS")
        val hwmBefore = procStatus("VmHWM")
        val r = graph.export(dir, "linear", MaterializationPolicy.ExternalAlways())
        val grew = procStatus("VmHWM") - maxOf(hwmBefore, rssBefore)
        assertEquals(0L, r.copies, "no pin was a copy")
        assertTrue(r.pins >= 4, "re-pinned per 64 MiB chunk: ${r.pins} pins")
        assertTrue(grew < 64L shl 20, "peak RSS grew by $grew bytes while exporting a 256 MiB array")
        assertArrayEquals(values.copyOfRange(n - 8, n), readF32(r.irpa, "model.embed.weight", n - 8L, 8))
        dir.deleteRecursively()
    }

    @Test
    fun `a PyTorch-layout weight is written transposed through short pins, one band each`() {
        // w [out = 2048, in = 8192] f32, 64 MiB; y = x @ wᵀ. A linear's weight: the archive holds wᵀ in row bands of
        // 32 output rows, [2048 / 32, 8192, 32] (element [b, c, t] = w[b·32 + t, c]; docs/graph-format.md).
        val (rows, cols) = 2048 to 8192
        val values = FloatArray(rows * cols) { (it % 65521).toFloat() }
        val tape = ExecutionTape()
        val x = tape.input("x", longArrayOf(1, cols.toLong()))
        val w = tape.weight("model.fc.weight", values, rows.toLong(), cols.toLong())
        tape.output(tape.matmul(x, tape.transpose(w)))
        val graph = tape.toComputeGraph()
        assertEquals(listOf("transposed"), graph.constants.map { it.kind })
        val dir = tempDir("tapeout-transposed")
        val hwmBefore = maxOf(procStatus("VmHWM"), procStatus("VmRSS"))
        val r = graph.export(dir, "fc", MaterializationPolicy.ExternalAlways())
        val grew = procStatus("VmHWM") - hwmBefore
        assertEquals(0L, r.copies, "no pin was a copy")
        // Each band of 32 rows (1 MiB) is one strided copy under its own short pin, never one pin for the whole
        // transpose.
        val band = 32
        assertEquals((rows / band).toLong(), r.pins, "one pin per band")
        assertTrue(grew < 96L shl 20, "peak RSS grew by $grew bytes transposing a 64 MiB array")
        for ((c, r0) in listOf(0 to 0, 8191 to 2040, 4000 to 1000, 17 to 32)) {
            val at = ((r0 / band).toLong() * cols + c) * band + r0 % band
            val got = readF32(r.irpa, "model.fc.weight", at, 8)
            assertArrayEquals(FloatArray(8) { values[(r0 + it) * cols + c] }, got, "row $c of wᵀ from $r0")
        }
        // The weight is contracted as stored: no transpose reads it, one contraction over its bands does.
        val text = r.mlir.readText()
        val weight = Regex("""(%\w+) = util\.global\.load @""").findAll(text).map { it.groupValues[1] }.toSet()
        assertEquals(1, weight.size, text)
        assertTrue(weight.none { Regex("""stablehlo\.transpose ${Regex.escape(it)}\b""").containsMatchIn(text) }, text)
        assertTrue(Regex("""linalg\.generic .* ins\(%\w+, ${Regex.escape(weight.single())} : tensor<1x\d+xf32>, tensor<\d+x\d+x32xf32>\)""")
            .containsMatchIn(text), "one contraction reads the stored bands: $text")
        dir.deleteRecursively()
    }

    @Test
    fun `a packed weight fails with the tensor, the encoding and the remedy`() {
        val (tape, w) = linear({ it.packedWeight("model.q.weight", ByteArray(34 * 3), "Q8_0", 4, 24) })
        val e = assertThrows<PackedConstantException> { tape.toComputeGraph() }
        val msg = e.message ?: ""
        for (needle in listOf("'model.q.weight'", "Q8_0", "packedConstants = PackedConstantHandling.DEQUANTIZE", "load this weight dense")) {
            assertTrue(msg.contains(needle), "$needle missing from: $msg")
        }
        // The remedy travels as data; the message speaks Kotlin, not the CLI or Rust.
        assertEquals(Remedy.DEQUANTIZE, e.remedy)
        assertTrue("--packed" !in msg && "::" !in msg, msg)
        assertTrue("'${w.name}'" !in msg, "the tensor is named by its module path, not the tape's generated name: $msg")
    }

    @Test
    fun `DEQUANTIZE yields the logical element count as f32 values`() {
        // Q8_0: 2-byte f16 scale (0.5 = 0x3800) then 32 signed codes; 4 rows of 32 = 4 blocks.
        val block = ByteArray(34).also { it[0] = 0x00; it[1] = 0x38; for (i in 0 until 32) it[2 + i] = (i - 16).toByte() }
        val bytes = ByteArray(34 * 4) { block[it % 34] }
        val (tape, _) = linear({ it.packedWeight("model.q.weight", bytes, "Q8_0", 4, 32) })
        val graph = tape.toComputeGraph(packedConstants = PackedConstantHandling.DEQUANTIZE)
        assertEquals("dequantized", graph.constants.single().kind)
        assertEquals(4L * 32 * 4, graph.constants.single().bytes)
        val dir = tempDir("tapeout-deq")
        val r = graph.export(dir, "deq", MaterializationPolicy.ExternalAlways())
        val got = readF32(r.irpa, "model.q.weight", 0, 128)
        assertArrayEquals(FloatArray(128) { ((it % 32) - 16) * 0.5f }, got)
        dir.deleteRecursively()
    }

    @Test
    fun `KEEP stores packed blocks as planes of codes and scales, laid out for the program`() {
        // Q8_0: scale 0.5 (f16 0x3800), codes i - 16; W [4 rows, 32] used as x @ Wᵀ.
        val block = ByteArray(34).also { it[0] = 0x00; it[1] = 0x38; for (i in 0 until 32) it[2 + i] = (i - 16).toByte() }
        val tape = ExecutionTape()
        val x = tape.input("x", longArrayOf(2, 32))
        val w = tape.packedWeight("model.q.weight", ByteArray(34 * 4) { block[it % 34] }, "Q8_0", 4, 32)
        tape.output(tape.matmul(x, tape.transpose(w)))
        val graph = tape.toComputeGraph(packedConstants = PackedConstantHandling.KEEP)
        assertEquals(listOf("model.q.weight.qs" to "packed_plane", "model.q.weight.d" to "packed_plane"),
            graph.constants.map { it.key to it.kind })
        val dir = tempDir("tapeout-keep")
        val r = graph.export(dir, "keep", MaterializationPolicy.ExternalAlways())
        // qs is [1, 32, 4] i8: element (l, n) is the code of W[n, l]; d is [1, 4] f16.
        val qs = TestSupport.readBytes(r.irpa, "model.q.weight.qs", 0, 128)
        assertArrayEquals(ByteArray(128) { (it / 4 - 16).toByte() }, qs)
        assertArrayEquals(ByteArray(8) { if (it % 2 == 1) 0x38 else 0 }, TestSupport.readBytes(r.irpa, "model.q.weight.d", 0, 8))
        val text = r.mlir.readText()
        assertTrue(text.contains("tensor<1x32x4xi8>") && text.contains("batching_dims = [0] x [0]"), text)
        dir.deleteRecursively()
    }

    @Test
    fun `KEEP_ROW_BANDS stores the codes in bands of 32 rows, the scales as KEEP does`() {
        // Q8_0 W [64 rows, 64]: two blocks a row, scale 0.5 (f16 0x3800), code of W[n, k] = (n * 3 + k) % 101 - 50.
        val code = { n: Int, k: Int -> (n * 3 + k) % 101 - 50 }
        val bytes = ByteArray(64 * 2 * 34)
        for (n in 0 until 64) for (b in 0 until 2) {
            val at = (n * 2 + b) * 34
            bytes[at + 1] = 0x38
            for (l in 0 until 32) bytes[at + 2 + l] = code(n, b * 32 + l).toByte()
        }
        val export = { handling: PackedConstantHandling, dir: File ->
            val tape = ExecutionTape()
            val x = tape.input("x", longArrayOf(2, 64))
            tape.output(tape.matmul(x, tape.transpose(tape.packedWeight("model.q.weight", bytes, "Q8_0", 64, 64))))
            tape.toComputeGraph(packedConstants = handling).export(dir, "m", MaterializationPolicy.ExternalAlways())
        }
        val (rowsDir, bandsDir) = tempDir("tapeout-rows") to tempDir("tapeout-bands")
        val rows = export(PackedConstantHandling.KEEP, rowsDir)
        val bands = export(PackedConstantHandling.KEEP_ROW_BANDS, bandsDir)
        // Block rows [Kb 2, 32, N 64]: (b, l, n) at b * 2048 + l * 64 + n. Row bands [N / 32 = 2, Kb 2, 32, 32]:
        // (band, b, l, j) at band * 2048 + b * 1024 + l * 32 + j, for row n = band * 32 + j.
        val rowQs = TestSupport.readBytes(rows.irpa, "model.q.weight.qs", 0, 4096)
        val bandQs = TestSupport.readBytes(bands.irpa, "model.q.weight.qs", 0, 4096)
        for (n in 0 until 64) for (k in 0 until 64) {
            val (b, l) = k / 32 to k % 32
            assertEquals(code(n, k).toByte(), rowQs[b * 2048 + l * 64 + n], "block rows W[$n, $k]")
            assertEquals(code(n, k).toByte(), bandQs[(n / 32) * 2048 + b * 1024 + l * 32 + n % 32], "row bands W[$n, $k]")
        }
        assertArrayEquals(TestSupport.readBytes(rows.irpa, "model.q.weight.d", 0, 256),
            TestSupport.readBytes(bands.irpa, "model.q.weight.d", 0, 256))
        assertTrue(bands.mlir.readText().contains("tensor<2x2x32x32xi8>"), "the module names the stored bands")
        rowsDir.deleteRecursively()
        bandsDir.deleteRecursively()
    }

    @Test
    fun `ExportOptions pick the device - the CPU's forms and spec by default, the portable lowering for any other`() {
        // Q8_0 W [64 rows, 64] used by `?` rows: the CPU pass writes its few-rows forms (gated, ordered) and a tuning
        // spec; every other target, and tuning off, the portable lowering: one product over the weight dequantized
        // (for Vulkan with its codes held in 32-bit words).
        val bytes = ByteArray(64 * 2 * 34) { if (it % 34 == 1) 0x38 else (it % 7).toByte() }
        val export = { options: ExportOptions, handling: PackedConstantHandling, dir: File ->
            val tape = ExecutionTape()
            val x = tape.input("x", longArrayOf(DYNAMIC, 64))
            tape.output(tape.matmul(x, tape.transpose(tape.packedWeight("model.q.weight", bytes, "Q8_0", 64, 64))))
            tape.toComputeGraph(packedConstants = handling, options = options).export(dir, "m", MaterializationPolicy.ExternalAlways())
        }
        val cpuDir = tempDir("tapeout-cpu")
        val cpu = export(ExportOptions(), PackedConstantHandling.KEEP, cpuDir)
        assertTrue(cpu.tuningSpec != null && cpu.mlir.readText().contains("tensor<8x64xf32>"), "no few-rows form")
        for (options in listOf(ExportOptions(ExportTarget.PORTABLE), ExportOptions(ExportTarget.VULKAN),
                ExportOptions(ExportTarget.LLVM_CPU, tuning = false))) {
            val dir = tempDir("tapeout-portable")
            val r = export(options, PackedConstantHandling.KEEP, dir)
            val text = r.mlir.readText()
            assertEquals(null, r.tuningSpec, "$options")
            assertTrue(!text.contains("tensor<8x64xf32>") && !text.contains("optimization_barrier"), "$options: $text")
            if (options.target == ExportTarget.VULKAN && options.tuning) {
                // Vulkan's one form of its own: the i8 codes' bytes as 32-bit words, decoded in the module.
                assertTrue(text.contains("tensor<1024xi32>") && text.contains("stablehlo.shift_left"), "$options: $text")
            } else {
                assertTrue(text.contains("tensor<2x32x64xi8>"), "$options: the codes kept packed in block rows")
            }
            val e = assertThrows(TapeoutException::class.java) { export(options, PackedConstantHandling.KEEP_ROW_BANDS, dir) }
            assertTrue(e.message!!.contains("llvm-cpu"), e.message)
            dir.deleteRecursively()
        }
        assertEquals(ExportTarget.VULKAN, ExportTarget.of("vulkan"))
        assertEquals(null, ExportTarget.of("metal"))
        cpuDir.deleteRecursively()
    }

    @Test
    fun `BF16 weights are kept as stored by default, converted in the module`() {
        val bits = intArrayOf(0x3F80, 0xC020, 0x7F80, 0x8000, 0x0001, 0x4049, 0xFF80, 0x3E00)
        val bytes = TestSupport.le16(bits)
        val (tape, _) = linear({ it.halfWeight("model.n.weight", bytes, DType.BF16, 4, 2) })
        val graph = tape.toComputeGraph()
        assertEquals(ConstantInfo("t1", "model.n.weight", 16, "kept_16bit"), graph.constants.single().copy(name = "t1"))
        val dir = tempDir("tapeout-bf16-kept")
        val r = graph.export(dir, "bf16", MaterializationPolicy.ExternalAlways())
        assertArrayEquals(bytes, TestSupport.readBytes(r.irpa, "model.n.weight", 0, 16), "the archive holds the bf16 bytes as given")
        val text = r.mlir.readText()
        assertTrue(text.contains("#flow.parameter.named<\"model\"::\"model.n.weight\"> : tensor<4x2xbf16>"), text)
        assertTrue(text.contains("stablehlo.convert") && text.contains("(tensor<4x2xbf16>) -> tensor<4x2xf32>"), text)
        dir.deleteRecursively()
    }

    @Test
    fun `BF16 weights widen to exactly the same f32 values`() {
        val bits = intArrayOf(0x3F80, 0xC020, 0x7F80, 0x8000, 0x0001, 0x4049, 0xFF80, 0x3E00)
        val (tape, _) = linear({ it.halfWeight("model.n.weight", TestSupport.le16(bits), DType.BF16, 4, 2) })
        val graph = tape.toComputeGraph(halfConstants = HalfConstantHandling.WIDEN)
        assertEquals("widened", graph.constants.single().kind)
        val dir = tempDir("tapeout-bf16")
        val r = graph.export(dir, "bf16", MaterializationPolicy.ExternalAlways())
        val got = readF32(r.irpa, "model.n.weight", 0, 8)
        for (i in bits.indices) assertEquals(bits[i] shl 16, got[i].toRawBits(), "element $i")
        dir.deleteRecursively()
    }

    @Test
    fun `BF16 and F16 bits in a ShortArray widen exactly, across chunks, without a copy`() {
        // 40 Mi shorts = 80 MiB of bf16, widened to 160 MiB of f32: more than one 64 MiB chunk on each side.
        val n = 40 shl 20
        val bits = ShortArray(n) { (0x3E00 + (it * 7919 and 0x1FF) or (if (it and 1 == 1) 0x8000 else 0)).toShort() }
        val tape = ExecutionTape()
        val ids = tape.input("ids", longArrayOf(2), DType.I32)
        val table = tape.halfWeight("model.embed.weight", bits, DType.BF16, (n / 64).toLong(), 64)
        val specials = intArrayOf(0x3C00, 0xC000, 0x7C00, 0xFC00, 0x8000, 0x0001, 0x7BFF, 0x3555)
        val h = tape.halfWeight("model.h.weight", ShortArray(8) { specials[it].toShort() }, DType.F16, 8)
        tape.output(tape.gather(table, ids), tape.add(tape.gather(h, ids), tape.gather(h, ids)))
        val kept = tape.toComputeGraph()
        assertEquals(listOf("kept_16bit", "kept_16bit"), kept.constants.map { it.kind })
        assertEquals(n * 2L, kept.constants.first { it.key == "model.embed.weight" }.bytes)
        val keptDir = tempDir("tapeout-shorts-kept")
        val k = kept.export(keptDir, "shorts", MaterializationPolicy.ExternalAlways())
        assertEquals(0L, k.copies)
        for (first in longArrayOf(0, n / 2L - 3, n - 16L)) {
            val got = ByteBuffer.wrap(TestSupport.readBytes(k.irpa, "model.embed.weight", first * 2, 32)).order(ByteOrder.LITTLE_ENDIAN)
            for (i in 0 until 16) assertEquals(bits[(first + i).toInt()], got.getShort(2 * i), "kept element ${first + i}")
        }
        keptDir.deleteRecursively()

        val graph = tape.toComputeGraph(halfConstants = HalfConstantHandling.WIDEN)
        assertEquals(listOf("widened", "widened"), graph.constants.map { it.kind })
        assertEquals(n * 4L, graph.constants.first { it.key == "model.embed.weight" }.bytes)
        val dir = tempDir("tapeout-shorts")
        val r = graph.export(dir, "shorts", MaterializationPolicy.ExternalAlways())
        assertEquals(0L, r.copies)
        assertTrue(r.pins >= 2, "re-pinned per chunk: ${r.pins} pins")
        for (first in longArrayOf(0, n / 2L - 3, n - 16L)) {
            val got = readF32(r.irpa, "model.embed.weight", first, 16)
            for (i in 0 until 16) assertEquals((bits[(first + i).toInt()].toInt() and 0xFFFF) shl 16, got[i].toRawBits(), "element ${first + i}")
        }
        val f16 = readF32(r.irpa, "model.h.weight", 0, 8)
        val want = floatArrayOf(1f, -2f, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY, -0f, 5.9604645e-8f, 65504f, 0.33325195f)
        for (i in want.indices) assertEquals(want[i].toRawBits(), f16[i].toRawBits(), "f16 element $i")
        dir.deleteRecursively()
    }

    @Test
    fun `a ShortArray whose length does not match the shape is refused`() {
        val e = assertThrows<IllegalArgumentException> { ExecutionTape().halfWeight("w", ShortArray(5), DType.BF16, 2, 3) }
        assertTrue(e.message!!.contains("5 values"), e.message)
    }

    @Test
    fun `the JNI benchmark's two variants write the same archive`() {
        val values = FloatArray(3 shl 20) { it * 0.5f } // 12 MiB
        val (tape, _) = linear({ it.weight("model.w", values, 4, (values.size / 4).toLong()) })
        val m = Marshalled(tape)
        val dir = tempDir("tapeout-benchexport")
        val v = NativeTestHooks.benchExport(tape.toGraphJson("b"), m.data, m.kinds, File(dir, "lent").path, File(dir, "owned").path, 2)
        assertEquals(7, v.size) // 2 lent times, 2 owned times, bytes, pins, copies
        assertTrue(v.take(4).all { it > 0 }, v.toList().toString())
        assertEquals(12L shl 20, v[4] - 4096, "one 12 MiB entry after the 4 KiB header")
        assertEquals(1L, v[5], "one lent export pins the 12 MiB array once")
        assertEquals(0L, v[6])
        assertArrayEquals(File(dir, "lent/bench.irpa").readBytes(), File(dir, "owned/bench.irpa").readBytes())
        dir.deleteRecursively()
    }

    @Test
    fun `a forced input stays an input, even with data`() {
        val (tape, w) = linear({ it.weight("model.w", FloatArray(12), 4, 3) })
        val graph = tape.toComputeGraph(inputTensorIds = setOf(w.id))
        assertEquals(listOf("x", w.name), graph.inputs)
        assertTrue(graph.constants.isEmpty())
    }

    @Test
    fun `a tied weight used twice is one constant, and keys are module paths`() {
        val tape = ExecutionTape()
        val ids = tape.input("ids", longArrayOf(3), DType.I32)
        val emb = tape.weight("model.embed_tokens.weight", FloatArray(10 * 4) { it * 0.25f }, 10, 4)
        val h = tape.gather(emb, ids)
        tape.output(tape.matmul(h, tape.transpose(emb)))
        val graph = tape.toComputeGraph()
        assertEquals(listOf("model.embed_tokens.weight"), graph.constants.map { it.key })
        val text = graph.toStableHlo(MaterializationPolicy.ExternalAlways())
        assertEquals(1, Regex("util.global private").findAll(text).count(), text)
    }

    @Test
    fun `undeclared inputs are refused when synthesis is off`() {
        val tape = ExecutionTape()
        val x = tape.input("x", longArrayOf(2))
        tape.output(tape.add(x, tape.mapped("m", "/nonexistent/weights.bin", 0, 8, DType.F32, 2)))
        val e = assertThrows<GraphValidationException> { tape.toComputeGraph(synthesizeExternalInputs = false) }
        assertTrue(e.message!!.contains("[m]"), e.message)
    }
}
