package dev.tapeout

import dev.tapeout.TestSupport.readF32
import dev.tapeout.TestSupport.tempDir
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File

/** `export(…, maxArchiveBytes)`: the parameters split over a set of archives with an index, from Kotlin. */
class ShardingTest {
    @Test
    fun `maxArchiveBytes splits the parameters over archives, each key in one, with an index and IREE's flags`() {
        // Three 1 MiB weights and a 3 MiB one under a 2.5 MiB limit: [w0, w1], [w2], [big].
        val tape = ExecutionTape()
        val x = tape.input("x", longArrayOf(1, 1024))
        val weights = (0 until 3).map { i -> FloatArray(256 * 1024) { (it % 1000 + i * 1000).toFloat() } }
        val big = FloatArray(768 * 1024) { (it % 977).toFloat() }
        val outs = weights.mapIndexed { i, w -> tape.matmul(x, tape.weight("model.w$i", w, 1024, 256)) }
        tape.output(*(outs + tape.matmul(x, tape.weight("model.big", big, 1024, 768))).toTypedArray())
        val dir = tempDir("tapeout-shards")
        val r = tape.toComputeGraph().export(dir, "m", MaterializationPolicy.ExternalAlways(), maxArchiveBytes = 5L shl 19)
        val names = r.archives.map { it.name }
        assertEquals(listOf("m-00001-of-00003.irpa", "m-00002-of-00003.irpa", "m-00003-of-00003.irpa"), names)
        assertEquals(File(dir, "m.irpa.index.json"), r.index)
        assertEquals(r.archives.map { "--parameters=model=${it.path}" }, r.parametersFlags)
        assertEquals(r.archives.sumOf { it.length() }, r.irpaBytes)
        assertTrue(r.archives.dropLast(1).all { it.length() <= 5L shl 19 }, "${r.archives.map { it.length() }}")
        val index = Json.parse(r.index!!.readText()) as Map<*, *>
        val map = index["weight_map"] as Map<*, *>
        assertEquals(mapOf("model.w0" to names[0], "model.w1" to names[0], "model.w2" to names[1], "model.big" to names[2]), map)
        assertArrayEquals(weights[1].copyOfRange(0, 8), readF32(r.archives[0], "model.w1", 0, 8))
        assertArrayEquals(big.copyOfRange(big.size - 8, big.size), readF32(r.archives[2], "model.big", big.size - 8L, 8))

        // One archive again without the limit: the set and its index are gone.
        val one = tape.toComputeGraph().export(dir, "m", MaterializationPolicy.ExternalAlways())
        assertNull(one.index)
        assertEquals(listOf("m.irpa", "m.mlir", "m.signature.json"), dir.list()!!.sorted())
        assertEquals(listOf(File(dir, "m.irpa")), one.archives)
        dir.deleteRecursively()
    }
}
