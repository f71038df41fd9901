package dev.tapeout

import java.io.File
import java.io.RandomAccessFile
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.nio.file.Files

/** Helpers shared by the tests. */
object TestSupport {
    /** A field of /proc/self/status in bytes (VmRSS, VmHWM). */
    fun procStatus(field: String): Long =
        File("/proc/self/status").readLines().first { it.startsWith("$field:") }.split(Regex("\\s+"))[1].toLong() * 1024

    fun tempDir(prefix: String): File = Files.createTempDirectory(prefix).toFile()

    /** `count` little-endian f32 values of archive entry [key], starting at element [first]. */
    fun readF32(archive: File, key: String, first: Long, count: Int): FloatArray {
        val (offset, length) = NativeBridge.archiveEntry(archive.path, key).let { it[0] to it[1] }
        require(offset >= 0 && (first + count) * 4 <= length) { "entry $key: offset $offset length $length" }
        RandomAccessFile(archive, "r").use { f ->
            val buf = ByteArray(count * 4)
            f.seek(offset + first * 4)
            f.readFully(buf)
            val fb = ByteBuffer.wrap(buf).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer()
            return FloatArray(count) { fb.get(it) }
        }
    }

    fun entryLength(archive: File, key: String): Long = NativeBridge.archiveEntry(archive.path, key)[1]

    /** `count` bytes of archive entry [key], starting at byte [first]. */
    fun readBytes(archive: File, key: String, first: Long, count: Int): ByteArray {
        val (offset, length) = NativeBridge.archiveEntry(archive.path, key).let { it[0] to it[1] }
        require(offset >= 0 && first + count <= length) { "entry $key: offset $offset length $length" }
        RandomAccessFile(archive, "r").use { f ->
            val buf = ByteArray(count)
            f.seek(offset + first)
            f.readFully(buf)
            return buf
        }
    }

    fun le16(values: IntArray): ByteArray = ByteArray(values.size * 2) { i -> (values[i / 2] shr (8 * (i % 2))).toByte() }
}

/** `assertThrows<T> { … }` (Debian's junit5 jar lacks JUnit's Kotlin extension). */
inline fun <reified T : Throwable> assertThrows(noinline block: () -> Unit): T =
    org.junit.jupiter.api.Assertions.assertThrows(T::class.java) { block() }
