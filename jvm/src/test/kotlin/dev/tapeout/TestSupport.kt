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

    /** `count` little-endian f32 values of archive entry [key], starting at element [first] (read by [IrpaReader]). */
    fun readF32(archive: File, key: String, first: Long, count: Int): FloatArray {
        val fb = ByteBuffer.wrap(readBytes(archive, key, first * 4, count * 4)).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer()
        return FloatArray(count) { fb.get(it) }
    }

    fun entryLength(archive: File, key: String): Long = IrpaReader.entry(archive, key).length

    /** `count` bytes of archive entry [key], starting at byte [first] (read by [IrpaReader]). */
    fun readBytes(archive: File, key: String, first: Long, count: Int): ByteArray {
        val e = IrpaReader.entry(archive, key)
        require(first + count <= e.length) { "entry $key: bytes $first + $count of ${e.length}" }
        RandomAccessFile(archive, "r").use { f ->
            val buf = ByteArray(count)
            f.seek(e.offset + first)
            f.readFully(buf)
            return buf
        }
    }

    fun le16(values: IntArray): ByteArray = ByteArray(values.size * 2) { i -> (values[i / 2] shr (8 * (i % 2))).toByte() }
}

/** `assertThrows<T> { … }` (Debian's junit5 jar lacks JUnit's Kotlin extension). */
inline fun <reified T : Throwable> assertThrows(noinline block: () -> Unit): T =
    org.junit.jupiter.api.Assertions.assertThrows(T::class.java) { block() }

/**
 * An IRPA v0 reader written from the format description (docs: header of 88 bytes, a table of 16-byte aligned
 * entries, names in the metadata segment, DATA storage relative to the storage segment), independent of the
 * Rust reader the library uses, so tests of what the export wrote do not read it back through the code under test.
 */
object IrpaReader {
    /** One entry: its [type] (1 splat, 2 data), absolute [offset] of its bytes (data) and byte [length]. */
    data class Entry(val name: String, val type: Int, val offset: Long, val length: Long)

    /** Every entry of [archive], in table order. */
    fun entries(archive: File): List<Entry> = RandomAccessFile(archive, "r").use { f ->
        val header = read(f, 0, 88)
        require(header.int == 0x41505249) { "$archive: no IRPA magic" }
        require(header.short.toInt() == 0 && header.short.toInt() == 0) { "$archive: not IRPA version 0.0" }
        require(header.long == 88L) { "$archive: header size is not 88" }
        header.position(32)
        val count = header.long
        val entrySeg = header.long
        header.long // entry segment length
        val metaSeg = header.long
        header.long // metadata segment length
        val storageSeg = header.long
        val storageLen = header.long
        var pos = entrySeg
        (0 until count).map {
            val e = read(f, pos, 76)
            val size = e.long
            val type = e.int
            e.long // flags
            val nameOff = e.long
            val nameLen = e.long
            val name = String(read(f, metaSeg + nameOff, nameLen.toInt()).array(), Charsets.UTF_8)
            val entry = when (type) {
                2 -> {
                    e.position(60)
                    val off = e.long
                    val len = e.long
                    require(off + len <= storageLen) { "$archive: entry '$name' ends past the storage segment" }
                    Entry(name, type, storageSeg + off, len)
                }
                1 -> Entry(name, type, -1, read(f, pos + 60, 8).long)
                else -> Entry(name, type, -1, 0)
            }
            pos += (size + 15) / 16 * 16
            entry
        }
    }

    /** The DATA entry [key] of [archive]. */
    fun entry(archive: File, key: String): Entry {
        val all = entries(archive)
        return all.firstOrNull { it.name == key && it.type == 2 } ?: throw NoSuchElementException("$archive has no data entry '$key' (${all.map { it.name }})")
    }

    private fun read(f: RandomAccessFile, at: Long, n: Int): ByteBuffer {
        val b = ByteArray(n)
        f.seek(at)
        f.readFully(b)
        return ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN)
    }
}
