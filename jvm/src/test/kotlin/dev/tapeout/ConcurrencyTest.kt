package dev.tapeout

import dev.tapeout.TestSupport.readF32
import dev.tapeout.TestSupport.tempDir
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Test
import java.io.File
import java.net.URLClassLoader
import java.util.concurrent.Callable
import java.util.concurrent.Executors

class ConcurrencyTest {
    @Test
    fun `several threads export different models at once`() {
        val pool = Executors.newFixedThreadPool(4)
        val dir = tempDir("tapeout-concurrent")
        try {
            val jobs = (0 until 8).map { i ->
                Callable {
                    val values = FloatArray(1 shl 20) { (it + i).toFloat() } // 4 MiB each
                    val tape = ExecutionTape()
                    val x = tape.input("x", longArrayOf(2, 1024))
                    tape.output(tape.matmul(x, tape.weight("model.w$i", values, 1024, 1024)))
                    val r = tape.toComputeGraph().export(File(dir, "m$i"), "m$i", MaterializationPolicy.ExternalAlways())
                    Triple(i, r, values)
                }
            }
            for ((i, r, values) in pool.invokeAll(jobs).map { it.get() }) {
                assertEquals(0L, r.copies)
                assertArrayEquals(values.copyOfRange(values.size - 4, values.size), readF32(r.irpa, "model.w$i", values.size - 4L, 4))
            }
        } finally {
            pool.shutdown()
            dir.deleteRecursively()
        }
    }

    @Test
    fun `two class loaders can each load and use the library`() {
        // The library classes and the Kotlin stdlib, in two loaders that share nothing but the platform.
        val urls = System.getProperty("java.class.path").split(File.pathSeparator).map { File(it).toURI().toURL() }.toTypedArray()
        repeat(2) {
            URLClassLoader(urls, ClassLoader.getPlatformClassLoader()).use { loader ->
                val loaderClass = loader.loadClass("dev.tapeout.NativeLoader")
                assertEquals(false, loaderClass == NativeLoader::class.java, "isolated class")
                val instance = loaderClass.getField("INSTANCE").get(null)
                val from = loaderClass.getMethod("load").invoke(instance) as String
                // A native call through the isolated copy works.
                val hooks = loader.loadClass("dev.tapeout.NativeTestHooks")
                val info = hooks.getMethod("pinInfo", FloatArray::class.java).invoke(null, FloatArray(3)) as LongArray
                assertEquals(3L, info[1], "loaded from $from")
            }
        }
    }
}
