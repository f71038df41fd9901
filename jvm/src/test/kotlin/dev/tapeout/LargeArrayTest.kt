package dev.tapeout

import dev.tapeout.TestSupport.procStatus
import dev.tapeout.TestSupport.readF32
import dev.tapeout.TestSupport.tempDir
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assumptions.assumeTrue
import org.junit.jupiter.api.Test

/**
 * A 262144 x 2048 f32 embedding is exactly 2^31 bytes: one more than a JVM byte array can hold. With a 1 GiB
 * projection beside it, the model is 3 GiB of FloatArrays.
 *
 * Runs in the `bigTest` task (4 GiB heap, `-Dtapeout.big=true`) and not under `-Xcheck:jni`: HotSpot's checked
 * JNI copies every critical array into a guarded native buffer of its full size, which for 2 GiB fails inside
 * GetPrimitiveArrayCritical — and it silently copies smaller arrays too, so no-copy proofs only mean something
 * without it.
 */
class LargeArrayTest {
    @Test
    fun `a 3 GiB model with a tied 2^31-byte embedding exports from the heap without copying it`() {
        assumeTrue(System.getProperty("tapeout.big") == "true", "runs in the bigTest task (gradle :jvm:bigTest)")
        val vocab = 262_144L
        val dim = 2048L
        val values = FloatArray((vocab * dim).toInt()) { (it % 9973).toFloat() }
        val tape = ExecutionTape()
        val ids = tape.input("ids", longArrayOf(4), DType.I32)
        val emb = tape.weight("model.embed_tokens.weight", values, vocab, dim)
        val h = tape.gather(emb, ids)                          // the lookup ...
        val proj = FloatArray(1 shl 28) { (it % 7919).toFloat() } // 2048 x 131072 f32 = 1 GiB
        tape.output(tape.matmul(h, tape.transpose(emb)),       // ... and the tied output projection
            tape.matmul(h, tape.weight("model.proj.weight", proj, dim, proj.size / dim)))
        val graph = tape.toComputeGraph()
        assertEquals(2, graph.constants.size)
        val total = (1L shl 31) + (1L shl 30)

        // Inline is refused up front: a typed error naming the size, not a 4 GiB string.
        val e = assertThrows<ConstantTooLargeException> { graph.toStableHlo(MaterializationPolicy.InlineAlways) }
        assertTrue(e.message!!.contains("2147483648 bytes") && e.message!!.contains("ExternalAlways"), e.message)

        val dir = tempDir("tapeout-big")
        try {
            val hwmBefore = maxOf(procStatus("VmHWM"), procStatus("VmRSS"))
            val t0 = System.nanoTime()
            val r = graph.export(dir, "big", MaterializationPolicy.ExternalAlways())
            val exportMs = (System.nanoTime() - t0) / 1_000_000
            val grew = procStatus("VmHWM") - hwmBefore

            // Again, with another thread that allocates continuously (so it needs the GC while arrays are
            // pinned) and polls the progress: it must see the export advance and must never wait for the
            // whole tensor, only for a chunk's pin and the GC behind it.
            val samples = java.util.concurrent.ConcurrentLinkedQueue<LongArray>()
            val poller = Thread {
                var sink = 0L
                while (!Thread.currentThread().isInterrupted) {
                    val garbage = ByteArray(1 shl 20).also { it[it.size - 1] = 1 }
                    sink += garbage[garbage.size - 1]
                    samples.add(longArrayOf(System.nanoTime(), NativeBridge.progressWritten(), NativeBridge.progressTotal(), sink))
                    try { Thread.sleep(5) } catch (_: InterruptedException) { break }
                }
            }.apply { isDaemon = true; start() }
            try { graph.export(dir, "big2", MaterializationPolicy.ExternalAlways()) } finally { poller.interrupt(); poller.join() }
            val s = samples.toList()
            assertTrue(s.any { it[2] >= total && it[1] > 0 && it[1] < it[2] }, "progress was seen mid-export")
            val longestPauseMs = s.zipWithNext { a, b -> (b[0] - a[0]) / 1_000_000 }.maxOrNull() ?: 0
            println("3 GiB export (2^31-byte tensor + 1 GiB): $exportMs ms, peak RSS +${grew shr 20} MiB; an allocating thread took ${s.size} samples " +
                "during a second export, its longest pause $longestPauseMs ms")
            assertTrue(longestPauseMs < maxOf(1000L, exportMs / 3), "the allocating thread was stalled for $longestPauseMs ms")
            assertEquals(0L, r.copies)
            assertTrue(r.pins >= 48, "one pin per 64 MiB chunk: ${r.pins}")
            assertTrue(grew <= 64L shl 20, "peak RSS grew by ${grew shr 20} MiB while exporting 3 GiB")
            assertEquals(1L shl 31, TestSupport.entryLength(r.irpa, "model.embed_tokens.weight"))
            // Tied: stored once as Eᵀ [dim, vocab] (the layout IREE runs a decode step from without a copy),
            // transposed from the live array through 16 MiB strided copies, one short pin each.
            val n = values.size.toLong()
            for (start in longArrayOf(0, n / 2 - 3, n - 8)) {
                val expect = FloatArray(8) { val i = start + it; values[((i % vocab) * dim + i / vocab).toInt()] }
                assertArrayEquals(expect, readF32(r.irpa, "model.embed_tokens.weight", start, 8), "at $start")
            }
            assertArrayEquals(proj.copyOfRange(proj.size - 8, proj.size), readF32(r.irpa, "model.proj.weight", proj.size - 8L, 8))
            assertTrue(r.mlirBytes < 4096, "the module does not grow with the weight: ${r.mlirBytes} bytes")
        } finally {
            dir.deleteRecursively()
        }
    }
}
