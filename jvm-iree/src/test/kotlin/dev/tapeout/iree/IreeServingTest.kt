package dev.tapeout.iree

import dev.tapeout.ExecutionTape
import dev.tapeout.MaterializationPolicy
import dev.tapeout.PackedConstantHandling
import dev.tapeout.toComputeGraph
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.io.TempDir
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder
import kotlin.math.abs
import kotlin.math.exp
import kotlin.math.max

/**
 * From Kotlin to IREE and back, no Python: a model traced with tapeout's Kotlin API, exported, compiled with
 * [IreeCompiler] (iree-compile from the project's .venv), served through [IreeModule] with its archive mapped,
 * and its numbers checked against the same arithmetic done here in double precision. Then every kind of bad input,
 * each a typed exception after which the same module still serves.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class IreeServingTest {
    private val repo = File(System.getProperty("tapeout.repo") ?: ".")
    private val compiler = IreeCompiler.find(repo)
    private lateinit var instance: IreeInstance
    private lateinit var device: IreeDevice
    private lateinit var dir: File

    // y = softmax(relu(x @ w + b)) over a `?` batch; w [K, N], b [N].
    private val k = 6
    private val n = 5
    private val w = FloatArray(k * n) { ((it * 7) % 11 - 5) * 0.1f }
    private val b = FloatArray(n) { it * 0.25f - 0.5f }

    @BeforeAll
    fun setUp(@TempDir tmp: File) {
        dir = tmp
        instance = IreeInstance()
        device = instance.device("local-task", workers = 2)
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(-1, k.toLong()))
        val h = t.add(t.matmul(x, t.weight("model.fc.weight", w, k, n)), t.weight("model.fc.bias", b, n))
        t.output("y", t.softmax(t.relu(h)))
        t.toComputeGraph().export(dir, "mlp", MaterializationPolicy.ExternalAlways())
        compiler.compile(File(dir, "mlp.mlir"), IreeTarget.cpu("generic"))
    }

    @AfterAll
    fun tearDown() {
        device.close()
        instance.close()
    }

    private fun reference(x: FloatArray, rows: Int): DoubleArray {
        val out = DoubleArray(rows * n)
        for (r in 0 until rows) {
            val h = DoubleArray(n) { j -> max(0.0, (0 until k).sumOf { i -> x[r * k + i].toDouble() * w[i * n + j] } + b[j]) }
            val m = h.maxOrNull()!!
            val e = h.map { exp(it - m) }
            for (j in 0 until n) out[r * n + j] = e[j] / e.sum()
        }
        return out
    }

    private fun load(): IreeModule =
        IreeModule.load(device, File(dir, "mlp.vmfb"), listOf(IreeParameters.archive(File(dir, "mlp.irpa"))))

    @Test
    fun `a Kotlin model is exported, compiled and served from Kotlin at batch 1, 3 and 5`() {
        load().use { m ->
            val f = m.function("main")
            assertEquals(listOf("x"), f.inputs.map { it.name })
            assertEquals(listOf(null, k.toLong()), f.inputs[0].dims)
            assertEquals(IreeDType.F32, f.inputs[0].dtype)
            assertEquals(listOf("y"), f.outputs.map { it.name })
            for (rows in listOf(1, 3, 5)) {
                val x = FloatArray(rows * k) { ((it * 13) % 17 - 8) * 0.3f }
                val out = m.value(x, rows.toLong(), k.toLong()).use { f.call(it) }
                assertEquals(1, out.size)
                out[0].use { y ->
                    assertArrayEquals(longArrayOf(rows.toLong(), n.toLong()), y.shape)
                    val got = y.toFloatArray()
                    val want = reference(x, rows)
                    for (i in got.indices) assertTrue(abs(got[i] - want[i]) < 1e-6, "rows $rows element $i: ${got[i]} vs ${want[i]}")
                }
            }
        }
    }

    /** This thread's scheduling policy: field 41 of /proc/thread-self/stat (0 SCHED_OTHER, 3 SCHED_BATCH). */
    private fun policy(): Int {
        val stat = File("/proc/thread-self/stat").readText()
        return stat.substring(stat.lastIndexOf(')') + 1).trim().split(Regex("\\s+"))[41 - 3].toInt()
    }

    @Test
    fun `batch waits are off by default, can be turned on, change no number and give the thread its policy back`() {
        instance.device("local-task", workers = 2).use { d ->
            assertFalse(d.batchWaits, "the caller's thread is the caller's: off by default")
            IreeModule.load(d, File(dir, "mlp.vmfb"), listOf(IreeParameters.archive(File(dir, "mlp.irpa")))).use { m ->
                val x = FloatArray(3 * k) { ((it * 5) % 13 - 6) * 0.2f }
                val want = reference(x, 3)
                for (on in listOf(true, false, true)) {
                    d.batchWaits = on
                    assertEquals(on, d.batchWaits)
                    val start = policy()
                    val got = m.value(x, 3, k.toLong()).use { v -> m.function("main").call(v)[0].use { it.toFloatArray() } }
                    assertEquals(start, policy(), "the thread's policy after a value, a call and a read (batch waits $on)")
                    for (i in got.indices) assertTrue(abs(got[i] - want[i]) < 1e-6, "batch waits $on element $i")
                }
            }
        }
    }

    @Test
    fun `values round-trip in every array form and a result feeds the next call on the device`() {
        load().use { m ->
            m.value(intArrayOf(1, -2, 3), 3).use { assertArrayEquals(intArrayOf(1, -2, 3), it.toIntArray()); assertEquals(IreeDType.I32, it.dtype) }
            assertThrows<IreeSizeException> { m.value(longArrayOf(Long.MIN_VALUE, 7)) } // a scalar holds one
            m.value(longArrayOf(Long.MIN_VALUE, 7), 2).use { assertArrayEquals(longArrayOf(Long.MIN_VALUE, 7), it.toLongArray()) }
            m.bf16(shortArrayOf(0x3F80, 0xC000.toShort()), 2).use { assertArrayEquals(shortArrayOf(0x3F80, 0xC000.toShort()), it.toShortArray()); assertEquals(IreeDType.BF16, it.dtype) }
            m.value(longArrayOf(42)).use { assertArrayEquals(LongArray(0), it.shape); assertArrayEquals(longArrayOf(42), it.toLongArray()) }
            // A direct buffer in and out, read and written in place.
            val buf = ByteBuffer.allocateDirect(4 * k).order(ByteOrder.LITTLE_ENDIAN)
            for (i in 0 until k) buf.putFloat(i * 0.5f)
            buf.flip()
            val fromBuffer = m.value(buf, IreeDType.F32, 1, k.toLong())
            val out = ByteBuffer.allocateDirect(4 * k).order(ByteOrder.LITTLE_ENDIAN)
            fromBuffer.readInto(out)
            out.flip()
            for (i in 0 until k) assertEquals(i * 0.5f, out.getFloat())
            // The buffer-made value is an argument like any other.
            val y1 = m.function("main").call(fromBuffer)[0]
            val want = reference(FloatArray(k) { it * 0.5f }, 1)
            val got = y1.toFloatArray()
            for (i in got.indices) assertTrue(abs(got[i] - want[i]) < 1e-6)
            listOf(fromBuffer, y1).forEach { it.close() }
        }
    }

    @Test
    fun `a decode-style chain keeps its state on the device between calls`(@TempDir tmp: File) {
        // state' = state * 0.5 + x: the state goes from one call's result to the next call's argument.
        val t = ExecutionTape()
        val state = t.input("state", 1, 4)
        val x = t.input("x", 1, 4)
        t.output("next", t.add(t.mul(state, t.weight("model.half", FloatArray(4) { 0.5f }, 1, 4)), x))
        t.toComputeGraph().export(tmp, "chain", MaterializationPolicy.ExternalAlways())
        val vmfb = compiler.compile(File(tmp, "chain.mlir"), IreeTarget.cpu("generic"))
        IreeModule.load(device, vmfb, listOf(IreeParameters.archive(File(tmp, "chain.irpa")))).use { m ->
            val step = m.function("main")
            val input = m.value(floatArrayOf(1f, 2f, 3f, 4f), 1, 4)
            var s = m.value(FloatArray(4), 1, 4)
            val want = DoubleArray(4)
            repeat(10) {
                val next = step.call(s, input)[0]
                s.close()
                s = next
                for (i in 0 until 4) want[i] = want[i] * 0.5 + (i + 1)
            }
            val got = s.toFloatArray()
            for (i in 0 until 4) assertEquals(want[i], got[i].toDouble(), 1e-6)
            s.close()
            input.close()
        }
    }

    @Test
    fun `wrong calls are typed exceptions naming the argument, and the module keeps serving`() {
        load().use { m ->
            val f = m.function("main")
            val good = m.value(FloatArray(2 * k), 2, k.toLong())
            val e1 = assertThrows<IreeArityException> { f.call() }
            assertEquals(1, e1.expected); assertEquals(0, e1.given)
            assertThrows<IreeArityException> { f.call(good, good) }
            val e2 = m.value(IntArray(2 * k), 2, k.toLong()).use { v -> assertThrows<IreeDTypeException> { f.call(v) } }
            assertEquals("x", e2.argument); assertEquals("f32", e2.expected); assertEquals("i32", e2.given)
            val e3 = m.value(FloatArray(2 * 4), 2, 4).use { v -> assertThrows<IreeShapeException> { f.call(v) } }
            assertEquals("x", e3.argument); assertEquals("[?, $k]", e3.expected); assertEquals("[2, 4]", e3.given)
            val e4 = assertThrows<IreeNoSuchFunctionException> { m.function("prefill") }
            assertEquals(listOf("main"), e4.available)
            assertThrows<IreeSizeException> { m.value(FloatArray(5), 2, 3) }
            val closed = m.value(FloatArray(2 * k), 2, k.toLong()).also { it.close() }
            val e5 = assertThrows<IllegalStateException> { f.call(closed) }
            assertTrue(e5.message!!.contains("'x'"), e5.message)
            assertThrows<IllegalStateException> { closed.toFloatArray() }
            closed.close() // twice: nothing
            assertThrows<IllegalStateException> { good.toIntArray() }
            val y = f.call(good)[0]
            assertEquals(2 * n, y.toFloatArray().size)
            y.close(); good.close()
        }
        val m = load()
        m.close()
        assertThrows<IllegalStateException> { m.value(FloatArray(k), 1, k.toLong()) }
    }

    @Test
    fun `bad modules and archives are typed exceptions, and the JVM keeps running`(@TempDir tmp: File) {
        val vmfb = File(dir, "mlp.vmfb")
        val archive = File(dir, "mlp.irpa")
        val params = listOf(IreeParameters.archive(archive))
        assertThrows<IreeNotAModuleException> { IreeModule.load(device, "not a module".toByteArray(), params) }
        assertThrows<IreeNotAModuleException> { IreeModule.load(device, vmfb.readBytes().copyOf(200), params) }
        assertThrows<IreeIoException> { IreeModule.load(device, File(tmp, "absent.vmfb"), params) }
        val noScope = assertThrows<IreeMissingParameterException> { IreeModule.load(device, vmfb, emptyList()) }
        assertEquals("model::*", noScope.key)
        val bytes = archive.readBytes()
        // Cut inside the header, and inside the bias's bytes (the archive's last entry).
        val biasAt = (0..bytes.size - 4 * n).first { at -> (0 until n).all { j ->
            ByteBuffer.wrap(bytes, at + 4 * j, 4).order(ByteOrder.LITTLE_ENDIAN).float == b[j] } }
        for ((label, size) in listOf("header" to 40, "data" to biasAt + 6)) {
            val cut = File(tmp, "cut-$label.irpa").also { it.writeBytes(bytes.copyOf(size)) }
            val e = assertThrows<IreeParameterFileException> { IreeModule.load(device, vmfb, listOf(IreeParameters.archive(cut))) }
            assertEquals(cut, e.file, label)
        }
        assertThrows<IreeParameterFileException> { IreeModule.load(device, vmfb, listOf(IreeParameters.archive(File(tmp, "absent.irpa")))) }
        // An archive with one of the two keys: the other is named.
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(-1, k.toLong()))
        t.output("y", t.matmul(x, t.weight("model.fc.weight", w, k, n)))
        t.toComputeGraph().export(tmp, "half", MaterializationPolicy.ExternalAlways())
        val missing = assertThrows<IreeMissingParameterException> {
            IreeModule.load(device, vmfb, listOf(IreeParameters.archive(File(tmp, "half.irpa"))))
        }
        assertEquals("model.fc.bias", missing.key)
        // A module compiled for Vulkan only.
        val vulkan = compiler.compile(File(dir, "mlp.mlir"), IreeTarget.vulkan(), File(tmp, "mlp-vulkan.vmfb"))
        assertThrows<IreeWrongTargetException> { IreeModule.load(device, vulkan, params) }
        // After all of that, the right files still serve.
        load().use { m -> m.value(FloatArray(k), 1, k.toLong()).use { v -> m.call("main", v).forEach { it.close() } } }
    }

    @Test
    fun `closing from another thread while calls run never frees what a call uses`() {
        repeat(5) {
            val m = load()
            val x = m.value(FloatArray(k) { 1f }, 1, k.toLong())
            val errors = java.util.concurrent.atomic.AtomicInteger()
            val callers = (0 until 3).map {
                Thread {
                    repeat(200) {
                        try {
                            m.call("main", x).forEach { v -> v.close() }
                        } catch (e: IllegalStateException) {
                            errors.incrementAndGet() // closed under us: refused, not a crash
                        }
                    }
                }.also { it.start() }
            }
            Thread.sleep(5)
            x.close()
            m.close()
            callers.forEach { it.join() }
            assertTrue(m.isClosed && x.isClosed)
            assertTrue(errors.get() > 0, "the calls after close were refused")
        }
    }

    @Test
    fun `the instance lists its drivers and local-sync serves too`() {
        assertTrue(instance.drivers().containsAll(listOf("local-sync", "local-task")), instance.drivers().toString())
        instance.localSync().use { sync ->
            IreeModule.load(sync, File(dir, "mlp.vmfb"), listOf(IreeParameters.archive(File(dir, "mlp.irpa")))).use { m ->
                val x = FloatArray(k) { 1f }
                val got = m.value(x, 1, k.toLong()).use { m.call("main", it)[0] }.use { it.toFloatArray() }
                val want = reference(x, 1)
                for (i in got.indices) assertTrue(abs(got[i] - want[i]) < 1e-6)
            }
        }
        val e = assertThrows<IreeRuntimeException> { instance.device("no-such-driver") }
        assertTrue(e.message!!.contains("local-task"), e.message)
    }

    @Test
    fun `an archive set is served from its index`(@TempDir tmp: File) {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(-1, k.toLong()))
        val h = t.add(t.matmul(x, t.weight("model.fc.weight", w, k, n)), t.weight("model.fc.bias", b, n))
        t.output("y", t.softmax(t.relu(h)))
        t.toComputeGraph().export(tmp, "set", MaterializationPolicy.ExternalAlways(), maxArchiveBytes = 64)
        val set = IreeParameters.set(File(tmp, "set.irpa.index.json"))
        assertTrue(set.size >= 2, set.toString())
        IreeModule.load(device, File(dir, "mlp.vmfb"), set).use { m ->
            val xs = FloatArray(k) { it - 2f }
            val got = m.value(xs, 1, k.toLong()).use { m.call("main", it)[0] }.use { it.toFloatArray() }
            val want = reference(xs, 1)
            for (i in got.indices) assertTrue(abs(got[i] - want[i]) < 1e-6)
        }
        assertThrows<IreeParameterFileException> { IreeParameters.set(File(tmp, "set.mlir")) }
    }

    @Test
    fun `a Q8_0 linear kept packed writes a tuning spec that a CPU compile uses and that serves the same numbers`(@TempDir tmp: File) {
        // 64 outputs of 32 inputs at one row, one Q8_0 block per row (an f16 scale of 0.5, 1, 0.25 or 2, then 32
        // signed codes), kept packed: the per-block product the spec tunes.
        val scales = intArrayOf(0x3800, 0x3C00, 0x3400, 0x4000)
        val scale = doubleArrayOf(0.5, 1.0, 0.25, 2.0)
        val code = { o: Int, i: Int -> (o * 7 + i) % 17 - 8 }
        val bytes = ByteArray(64 * 34)
        for (o in 0 until 64) {
            bytes[o * 34] = (scales[o % 4] and 0xFF).toByte()
            bytes[o * 34 + 1] = (scales[o % 4] shr 8).toByte()
            for (i in 0 until 32) bytes[o * 34 + 2 + i] = code(o, i).toByte()
        }
        val t = ExecutionTape()
        t.output("y", t.linear(t.input("x", 1, 32), t.packedWeight("model.fc.weight", bytes, "Q8_0", 64, 32)))
        val r = t.toComputeGraph(packedConstants = PackedConstantHandling.KEEP).export(tmp, "lin", MaterializationPolicy.ExternalAlways())
        val spec = File(tmp, "lin.tuning.mlir")
        assertEquals(spec, r.tuningSpec)
        assertEquals(spec, IreeCompiler.tuningSpecFor(r.mlir))
        val vmfb = compiler.compile(r.mlir, IreeTarget.cpu())
        val x = FloatArray(32) { it * 0.125f - 2f }
        IreeModule.load(device, vmfb, listOf(IreeParameters.archive(r.irpa))).use { m ->
            val got = m.value(x, 1L, 32L).use { m.call("main", it)[0] }.use { it.toFloatArray() }
            for (o in 0 until 64) {
                var want = 0.0
                for (i in 0 until 32) want += x[i] * scale[o % 4] * code(o, i)
                assertTrue(abs(got[o] - want) < 1e-5 * (1 + abs(want)), "y[$o] = ${got[o]}, want $want")
            }
        }
        // The spec is really passed: a broken one beside the module fails the CPU compile; flags naming no spec
        // (`--iree-codegen-tuning-spec-path=`) or a spec of their own win over it.
        val good = spec.readText()
        spec.writeText("this is not a tuning spec")
        val e = assertThrows<IreeCompileException> { compiler.compile(r.mlir, IreeTarget.cpu()) }
        assertTrue(e.diagnostics.contains("tuning"), e.diagnostics)
        compiler.compile(r.mlir, IreeTarget.cpu(), File(tmp, "lin.plain.vmfb"), listOf("--iree-codegen-tuning-spec-path="))
        val own = File(tmp, "own.mlir").also { it.writeText(good) }
        compiler.compile(r.mlir, IreeTarget.cpu(), extraFlags = listOf("--iree-codegen-tuning-spec-path=${own.path}", "--mlir-disable-threading"))
    }

    @Test
    fun `Q8_0 and Q4_0 linears kept in row bands serve the numbers of the blocks`(@TempDir tmp: File) {
        // 96 outputs (3 bands of 32) of 64 inputs (2 blocks), at 1 row and 3 rows: the one-row products the spec
        // tunes per band and the few-rows ones. Oracle: the blocks dequantized here, summed in double.
        val scales = intArrayOf(0x3800, 0x3C00, 0x3400, 0x4000)
        val scale = doubleArrayOf(0.5, 1.0, 0.25, 2.0)
        for (format in listOf("Q8_0", "Q4_0")) {
            val (blockBytes, code) = if (format == "Q8_0") 34 to { o: Int, i: Int -> (o * 7 + i) % 17 - 8 }
                else 18 to { o: Int, i: Int -> (o * 5 + i * 3) % 16 - 8 }
            val bytes = ByteArray(96 * 2 * blockBytes)
            for (o in 0 until 96) for (b in 0 until 2) {
                val at = (o * 2 + b) * blockBytes
                bytes[at] = (scales[(o + b) % 4] and 0xFF).toByte()
                bytes[at + 1] = (scales[(o + b) % 4] shr 8).toByte()
                for (j in 0 until 32) {
                    val c = code(o, b * 32 + j)
                    if (format == "Q8_0") bytes[at + 2 + j] = c.toByte()
                    else if (j < 16) bytes[at + 2 + j] = (bytes[at + 2 + j].toInt() or (c + 8)).toByte()
                    else bytes[at + 2 + j - 16] = (bytes[at + 2 + j - 16].toInt() or ((c + 8) shl 4)).toByte()
                }
            }
            for (rows in listOf(1L, 3L)) {
                val dir = File(tmp, "$format-$rows").also { it.mkdirs() }
                val t = ExecutionTape()
                t.output("y", t.linear(t.input("x", rows.toInt(), 64), t.packedWeight("model.fc.weight", bytes, format, 96, 64)))
                val r = t.toComputeGraph(packedConstants = PackedConstantHandling.KEEP_ROW_BANDS)
                    .export(dir, "lin", MaterializationPolicy.ExternalAlways())
                val stored = if (format == "Q8_0") "tensor<3x2x32x32xi8>" else "tensor<4x2x32x32xi4>" // Q4_0: rows padded to 64
                assertTrue(r.mlir.readText().contains(stored), "$format: the codes in bands")
                val x = FloatArray((rows * 64).toInt()) { ((it * 37) % 29) * 0.125f - 1.75f }
                IreeModule.load(device, compiler.compile(r.mlir, IreeTarget.cpu()), listOf(IreeParameters.archive(r.irpa))).use { m ->
                    val got = m.value(x, rows, 64L).use { m.call("main", it)[0] }.use { it.toFloatArray() }
                    for (row in 0 until rows.toInt()) for (o in 0 until 96) {
                        var want = 0.0
                        for (i in 0 until 64) want += x[row * 64 + i] * scale[(o + i / 32) % 4] * code(o, i)
                        val y = got[row * 96 + o]
                        assertTrue(abs(y - want) < 1e-5 * (1 + abs(want)), "$format rows=$rows y[$row, $o] = $y, want $want")
                    }
                }
            }
        }
    }

    @Test
    fun `the compiler says what it refused`() {
        val e = assertThrows<IreeCompileException> { compiler.compile("module { func.func @f( }") }
        assertTrue(e.diagnostics.contains("error"), e.diagnostics)
        assertTrue(compiler.version().contains("IREE"), compiler.version())
    }
}

/** JUnit's assertThrows with the thrown type as a type argument (the Kotlin extension is not on this classpath). */
inline fun <reified T : Throwable> assertThrows(noinline block: () -> Unit): T =
    org.junit.jupiter.api.Assertions.assertThrows(T::class.java, block)
