package dev.tapeout

import dev.tapeout.TestSupport.tempDir
import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Assumptions.assumeTrue
import org.junit.jupiter.api.Test
import java.io.File
import java.io.IOException

/** A JNI export onto a full file system (a 1 MiB tmpfs, mounted where the tests run as root): an IOException naming
 *  the file, nothing under the final names, no temporary file, and the previous archive intact. */
class WriteFaultTest {
    private fun run(vararg cmd: String): Boolean =
        ProcessBuilder(*cmd).redirectErrorStream(true).start().let { p -> p.inputStream.readBytes(); p.waitFor() == 0 }

    private fun model(floats: Int): ExecutionTape {
        val t = ExecutionTape()
        val x = t.input("x", longArrayOf(floats.toLong()))
        t.output(t.add(x, t.weight("model.w", FloatArray(floats) { it.toFloat() }, floats.toLong())))
        return t
    }

    @Test
    fun `an export onto a full disk fails cleanly and keeps the previous archive`() {
        val mnt = tempDir("tapeout-full")
        assumeTrue(run("mount", "-t", "tmpfs", "-o", "size=1048576", "tmpfs", mnt.path), "cannot mount a tmpfs here")
        try {
            // A previous, small export under the same names.
            model(16).toComputeGraph().export(mnt, "out")
            val before = File(mnt, "out.irpa").readBytes()
            val beforeMlir = File(mnt, "out.mlir").readBytes()
            val beforeSignature = File(mnt, "out.signature.json").readBytes()
            // 4 MiB of weights into 1 MiB.
            val e = assertThrows<IOException> { model(1 shl 20).toComputeGraph().export(mnt, "out") }
            val msg = e.message ?: ""
            assertTrue(msg.contains(File(mnt, "out.irpa").path) && msg.contains("No space left on device"), msg)
            assertFalse(msg.contains("tapeout-tmp"), msg)
            assertArrayEquals(before, File(mnt, "out.irpa").readBytes(), "the previous archive is intact")
            assertArrayEquals(beforeMlir, File(mnt, "out.mlir").readBytes(), "the previous module is intact")
            assertArrayEquals(beforeSignature, File(mnt, "out.signature.json").readBytes(), "the previous signature is intact")
            val left = mnt.list()!!.sorted()
            assertTrue(left == listOf("out.irpa", "out.mlir", "out.signature.json"), "no temporary file is left: $left")
        } finally {
            run("umount", "-l", mnt.path)
            mnt.deleteRecursively()
        }
    }
}
