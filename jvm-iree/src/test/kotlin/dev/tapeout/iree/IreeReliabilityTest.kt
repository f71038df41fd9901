package dev.tapeout.iree

import dev.tapeout.ExecutionTape
import dev.tapeout.MaterializationPolicy
import dev.tapeout.toComputeGraph
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.io.TempDir
import java.io.File
import java.nio.ByteBuffer
import java.util.concurrent.TimeUnit

/**
 * The serving matrix of docs/reliability.md: bad input, misuse and long runs, each a typed exception or a bounded
 * footprint. Cases that crashed the JVM before run in a JVM of their own ([ReliabilityCases]), so that a crash fails
 * one test; the leak cases run 10,000 iterations there and bound the growth of the process's RSS.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class IreeReliabilityTest {
    private val repo = File(System.getProperty("tapeout.repo") ?: ".")
    private val compiler = IreeCompiler.find(repo)
    private lateinit var instance: IreeInstance
    private lateinit var device: IreeDevice
    private lateinit var dir: File
    private lateinit var twice: File

    @BeforeAll
    fun setUp(@TempDir tmp: File) {
        dir = tmp
        instance = IreeInstance()
        device = instance.device("local-task", workers = 2)
        twice = File(dir, "twice.vmfb")
        twice.writeBytes(compiler.compile(module("tensor<4xf32>", "stablehlo.add %x, %x"), IreeTarget.cpu("generic")))
    }

    @AfterAll
    fun tearDown() {
        device.close()
        instance.close()
    }

    private fun module(type: String, body: String) =
        "func.func @main(%x: $type) -> $type {\n  %y = $body : $type\n  return %y : $type\n}\n"

    /** Runs a [ReliabilityCases] case in a JVM of its own (with -Xcheck:jni): its exit code and output. */
    private fun child(vararg args: String): Pair<Int, String> {
        val java = File(System.getProperty("java.home"), "bin/java").path
        val cmd = listOf(java, "-Xcheck:jni", "-Xms64m", "-Xmx64m", "-XX:+AlwaysPreTouch", "-XX:MaxDirectMemorySize=256m", "-cp", System.getProperty("java.class.path"),
            "-Dtapeout.iree.native.path=${System.getProperty("tapeout.iree.native.path")}",
            "dev.tapeout.iree.ReliabilityCases") + args
        val p = ProcessBuilder(cmd).redirectErrorStream(true).start()
        val out = p.inputStream.bufferedReader().readText()
        assertTrue(p.waitFor(5, TimeUnit.MINUTES), "case ${args[0]} did not finish")
        return p.exitValue() to out
    }

    private fun expectOk(vararg args: String): String {
        val (code, out) = child(*args)
        println("${args[0]}: ${out.trim()}")
        // 128 + a signal number is the JVM killed by it: the crash this case guards against.
        assertEquals(0, code, "case ${args[0]} exited $code${if (code > 128) " (signal ${code - 128})" else ""}:\n$out")
        assertTrue(out.lines().any { it.startsWith("OK ") || it.startsWith("RSS_GROWTH_KB ") }, out)
        assertTrue(!out.contains("WARNING in native method") && !out.contains("JNI local refs"), "-Xcheck:jni warned:\n$out")
        return out
    }

    @Test
    fun `bool values cross both ways with their dtype`() {
        val not = compiler.compile(module("tensor<5xi1>", "stablehlo.not %x"), IreeTarget.cpu("generic"))
        IreeModule.load(device, not).use { m ->
            assertEquals(IreeDType.BOOL, m.function("main").inputs[0].dtype)
            val given = byteArrayOf(1, 0, 0, 1, 1)
            m.value(given, IreeDType.BOOL, 5).use { x ->
                assertEquals(IreeDType.BOOL, x.dtype)
                m.call("main", x).use { r ->
                    assertEquals(IreeDType.BOOL, r[0].dtype)
                    assertArrayEquals(ByteArray(5) { (1 - given[it]).toByte() }, r[0].toByteArray())
                }
            }
        }
    }

    @Test
    fun `a value of another module is a typed exception naming the argument`() {
        IreeModule.load(device, twice).use { a ->
            IreeModule.load(device, twice).use { b ->
                a.value(FloatArray(4), 4).use { x ->
                    val e = assertThrows<IreeForeignValueException> { b.call("main", x) }
                    assertTrue(e.what.contains("main argument 0"), e.message)
                    b.value(FloatArray(4) { it.toFloat() }, 4).use { y ->
                        b.call("main", y).use { r -> assertArrayEquals(floatArrayOf(0f, 2f, 4f, 6f), r[0].toFloatArray()) }
                    }
                }
            }
        }
    }

    @Test
    fun `results close together, and forgotten ones are freed by the cleaner`() {
        IreeModule.load(device, twice).use { m ->
            val x = m.value(FloatArray(4) { it.toFloat() }, 4)
            val results = m.call("main", x)
            results.use { assertArrayEquals(floatArrayOf(0f, 2f, 4f, 6f), it[0].toFloatArray()) }
            assertTrue(results.all { it.isClosed })
            val open = IreeCleaner.openHandles
            val forgotten = IreeCleaner.forgotten.get()
            repeat(3) { m.call("main", x) }
            assertEquals(open + 3, IreeCleaner.openHandles)
            val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30)
            while (IreeCleaner.forgotten.get() < forgotten + 3 && System.nanoTime() < deadline) {
                System.gc()
                Thread.sleep(20)
            }
            assertEquals(forgotten + 3, IreeCleaner.forgotten.get(), "the three forgotten results freed")
            assertEquals(open, IreeCleaner.openHandles)
            x.close()
        }
    }

    @Test
    fun `four threads share one module and a device, each call equal to the same arithmetic done here`() {
        IreeModule.load(device, twice).use { m ->
            val pool = java.util.concurrent.Executors.newFixedThreadPool(4)
            try {
                val done = (0 until 4).map { t ->
                    pool.submit<Int> {
                        var calls = 0
                        repeat(250) { i ->
                            val xs = FloatArray(4) { j -> (t * 1000 + i * 4 + j).toFloat() }
                            m.value(xs, 4).use { x ->
                                m.call("main", x).use { r -> assertArrayEquals(FloatArray(4) { 2 * xs[it] }, r[0].toFloatArray()) }
                            }
                            calls++
                        }
                        calls
                    }
                }
                assertEquals(1000, done.sumOf { it.get(5, TimeUnit.MINUTES) })
            } finally {
                pool.shutdown()
            }
        }
    }

    @Test
    fun `an element count past 64 bits and a negative dimension are typed`() {
        IreeModule.load(device, twice).use { m ->
            assertThrows<IreeSizeException> { m.value(FloatArray(4), Long.MAX_VALUE, 3) }
            assertThrows<IreeUsageException> { m.value(FloatArray(4), -4) }
            assertThrows<IreeUsageException> { m.value(ByteBuffer.allocate(16), IreeDType.F32, 4) }
        }
    }

    @Test
    fun `a read-only buffer as output is refused`() {
        expectOk("read-only-output", twice.path)
    }

    @Test
    fun `a mapped file truncated after mapping is refused, as input and as output`() {
        expectOk("mapped-value-truncated", twice.path, File(dir, "in.bin").path)
        expectOk("mapped-read-truncated", twice.path, File(dir, "out.bin").path)
    }

    @Test
    fun `a module for CPU features this machine lacks is refused at load, not a SIGILL`() {
        val vmfb = File(dir, "spr.vmfb")
        vmfb.writeBytes(compiler.compile(module("tensor<4xf32>", "stablehlo.add %x, %x"), IreeTarget.cpu("sapphirerapids")))
        val out = expectOk("cpu-features", vmfb.path)
        assertTrue(out.contains("avx512fp16") || out.contains("amx"), out)
    }

    @Test
    fun `every truncation of a module is refused as not a module`() {
        expectOk("truncated-vmfb", twice.path)
    }

    @Test
    fun `two ? dims the graph requires equal, given unequal extents, are refused before IREE reads out of bounds`(@TempDir tmp: File) {
        val t = ExecutionTape()
        val a = t.input("a", longArrayOf(-1))
        val b = t.input("b", longArrayOf(-1))
        t.output("y", t.add(a, b))
        t.toComputeGraph().export(tmp, "add", MaterializationPolicy.ExternalAlways())
        val vmfb = compiler.compile(File(tmp, "add.mlir"), IreeTarget.cpu("generic"))
        val out = expectOk("unequal-dims", vmfb.path)
        assertTrue(out.contains("argument 'a' dimension 0 is 16777216"), out)
    }

    private fun growth(out: String): Long =
        out.lines().first { it.startsWith("RSS_GROWTH_KB ") }.removePrefix("RSS_GROWTH_KB ").trim().toLong()

    // Each leak class leaked 5 KB to 64 KB per iteration before (50 to 640 MiB over 10,000); the heap is touched in
    // full at start (-XX:+AlwaysPreTouch), so what grows is native memory: 10,000 iterations stay under 16 MiB.
    private val leakBoundKb = 16L * 1024

    @Test
    fun `10,000 calls whose results are never closed stay bounded`() {
        val out = expectOk("leak-results", twice.path, "10000")
        assertTrue(growth(out) < leakBoundKb, out)
        assertTrue(out.contains("FORGOTTEN "), out)
    }

    @Test
    fun `10,000 refused loads free what they took`() {
        val out = expectOk("leak-refused-load", twice.path, "10000")
        assertTrue(growth(out) < leakBoundKb, out)
    }

    @Test
    fun `10,000 loads and closes stay bounded`() {
        val out = expectOk("leak-load-close", twice.path, "10000")
        assertTrue(growth(out) < leakBoundKb, out)
    }

    @Test
    fun `10,000 loads with 24 parameter files stay bounded and -Xcheck-jni clean`(@TempDir tmp: File) {
        // y = x + w0 + … + w23, each weight its own archive file (maxArchiveBytes = 64 holds one 4-float weight).
        val t = ExecutionTape()
        var y = t.input("x", longArrayOf(4))
        repeat(24) { i -> y = t.add(y, t.weight("model.w$i", FloatArray(4) { j -> (i * 4 + j).toFloat() }, 4)) }
        t.output("y", y)
        t.toComputeGraph().export(tmp, "sum", MaterializationPolicy.ExternalAlways(), maxArchiveBytes = 64)
        val vmfb = compiler.compile(File(tmp, "sum.mlir"), IreeTarget.cpu("generic"))
        val index = File(tmp, "sum.irpa.index.json")
        val files = IreeParameters.set(index)
        assertTrue(files.size >= 24, "${files.size} files")
        IreeModule.load(device, vmfb, files).use { m ->
            val got = m.value(FloatArray(4) { 1f }, 4).use { x -> m.call("main", x).use { it[0].toFloatArray() } }
            val want = FloatArray(4) { j -> 1f + (0 until 24).sumOf { i -> i * 4 + j }.toFloat() }
            assertArrayEquals(want, got)
        }
        val out = expectOk("leak-parameter-files", vmfb.path, index.path, "10000")
        assertTrue(growth(out) < leakBoundKb, out)
    }
}
