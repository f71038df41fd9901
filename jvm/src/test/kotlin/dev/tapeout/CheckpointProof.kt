package dev.tapeout

import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.nio.channels.FileChannel
import java.nio.file.StandardOpenOption
import kotlin.system.exitProcess

/**
 * `CheckpointProof <work dir> <IREE bin dir>`, run with `-Xmx256m` (`gradle :jvm:checkpointProof`, in
 * scripts/test): a safetensors checkpoint holding a 262144 × 2048 f32 table (2^31 bytes, 8× the heap) is opened
 * with [SafeTensors.open], used as the weight of an embedding, and exported. The JVM never holds the table:
 * the export reads it from the file. Checks, printed: the peak growth of anonymous memory (RssAnon, sampled every
 * 2 ms: the process's own memory, not the page cache that file reads fill) stays within 64 MiB; no JVM array is
 * pinned; and IREE, given the archive, gathers the table's first and last rows with the values the file holds.
 */
object CheckpointProof {
    private const val ROWS = 262144
    private const val COLS = 2048

    /** Element (r, c): exact in f32 (23 significant bits). */
    private fun value(r: Int, c: Int): Float = (r % 4096) + c / 2048f

    private fun rssAnon(): Long =
        File("/proc/self/status").readLines().first { it.startsWith("RssAnon:") }.split(Regex("\\s+"))[1].toLong() * 1024

    private fun writeCheckpoint(file: File) {
        val bytes = ROWS.toLong() * COLS * 4
        var header = "{\"embed.weight\":{\"dtype\":\"F32\",\"shape\":[$ROWS,$COLS],\"data_offsets\":[0,$bytes]}," +
            "\"__metadata__\":{\"format\":\"pt\"}}"
        while ((8 + header.length) % 64 != 0) header += " " // the data starts 64-aligned, as torch's writer pads it
        FileChannel.open(file.toPath(), StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING).use { ch ->
            val head = ByteBuffer.allocate(8 + header.length).order(ByteOrder.LITTLE_ENDIAN)
            head.putLong(header.length.toLong()).put(header.toByteArray()).flip()
            while (head.hasRemaining()) ch.write(head)
            val rowsPerBuf = 1024
            val buf = ByteBuffer.allocateDirect(rowsPerBuf * COLS * 4).order(ByteOrder.LITTLE_ENDIAN)
            for (r0 in 0 until ROWS step rowsPerBuf) {
                buf.clear()
                val fb = buf.asFloatBuffer()
                for (r in r0 until r0 + rowsPerBuf) for (c in 0 until COLS) fb.put(value(r, c))
                buf.limit(rowsPerBuf * COLS * 4)
                while (buf.hasRemaining()) ch.write(buf)
            }
        }
    }

    private fun run(cmd: List<String>) {
        val p = ProcessBuilder(cmd).redirectErrorStream(true).start()
        val out = p.inputStream.bufferedReader().readText()
        check(p.waitFor() == 0) { "${cmd[0]} failed:\n$out" }
    }

    private fun npyInt32(file: File, values: IntArray) {
        var header = "{'descr': '<i4', 'fortran_order': False, 'shape': (${values.size},), }"
        while ((10 + header.length + 1) % 64 != 0) header += " "
        header += "\n"
        val buf = ByteBuffer.allocate(10 + header.length + values.size * 4).order(ByteOrder.LITTLE_ENDIAN)
        buf.put(0x93.toByte()).put("NUMPY".toByteArray()).put(1).put(0).putShort(header.length.toShort()).put(header.toByteArray())
        values.forEach { buf.putInt(it) }
        file.writeBytes(buf.array())
    }

    private fun npyFloat32(file: File): FloatArray {
        val bytes = file.readBytes()
        val headerLen = (bytes[8].toInt() and 0xFF) or ((bytes[9].toInt() and 0xFF) shl 8)
        val fb = ByteBuffer.wrap(bytes, 10 + headerLen, bytes.size - 10 - headerLen).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer()
        return FloatArray(fb.remaining()) { fb.get(it) }
    }

    @JvmStatic
    fun main(args: Array<String>) {
        val work = File(args[0]).also { it.deleteRecursively(); it.mkdirs() }
        val bin = args.getOrElse(1) { "" }
        val tool = { t: String -> if (bin.isEmpty()) t else File(bin, t).path }
        val heap = Runtime.getRuntime().maxMemory()
        try {
            val ckpt = File(work, "model.safetensors")
            writeCheckpoint(ckpt)
            val table = SafeTensors.open(ckpt)["embed.weight"]
            check(table.length == 1L shl 31) { "the table is ${table.length} bytes" }
            val tape = ExecutionTape()
            tape.output("rows", tape.embedding(tape.weight("model.embed_tokens.weight", table), tape.input("ids", 2, dtype = DType.I32)))
            val graph = tape.toComputeGraph()
            System.gc()
            val before = rssAnon()
            val peak = java.util.concurrent.atomic.AtomicLong(before)
            val done = java.util.concurrent.atomic.AtomicBoolean(false)
            val sampler = Thread { while (!done.get()) { peak.accumulateAndGet(rssAnon(), ::maxOf); Thread.sleep(2) } }
                .also { it.isDaemon = true; it.start() }
            val t0 = System.nanoTime()
            val r = graph.export(File(work, "out"), "ckpt", MaterializationPolicy.ExternalAlways())
            val seconds = (System.nanoTime() - t0) / 1e9
            done.set(true)
            sampler.join()
            val grew = maxOf(peak.get(), rssAnon()) - before
            println("checkpoint-proof: heap limit ${heap shr 20} MiB; exported a ${table.length}-byte checkpoint tensor in %.1f s; ".format(seconds) +
                "archive ${r.irpaBytes} bytes; pins ${r.pins}; RssAnon peak growth ${grew shr 20} MiB (limit 64 MiB)")
            check(heap < table.length / 4) { "run with -Xmx256m: the heap ($heap bytes) must be far smaller than the tensor" }
            check(r.pins == 0L) { "a JVM array was pinned: ${r.pins}" }
            check(grew <= 64L shl 20) { "RssAnon grew by $grew bytes" }
            // Copied file to file by the kernel: the entry starts at the tensor's offset in the checkpoint modulo 64 KiB.
            val start = FileChannel.open(r.irpa.toPath()).use { ch ->
                val b = ByteBuffer.allocate(168).order(ByteOrder.LITTLE_ENDIAN)
                while (b.hasRemaining() && ch.read(b) >= 0) Unit
                b.getLong(72) + b.getLong(96 + 60) // storage segment + the only entry's storage offset
            }
            val source = 8L + ckpt.inputStream().use { ByteBuffer.wrap(it.readNBytes(8)).order(ByteOrder.LITTLE_ENDIAN).long }
            println("checkpoint-proof: the tensor starts at $source in the checkpoint and at $start in the archive")
            check(start % 65536 == source % 65536) { "the entry starts at $start, not at $source modulo 64 KiB: not copied file to file" }
            ckpt.delete() // IREE reads the archive, not the checkpoint

            val vmfb = File(work, "ckpt.vmfb")
            run(listOf(tool("iree-compile"), r.mlir.path, "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                "--iree-llvmcpu-target-cpu=generic", "-o", vmfb.path))
            val ids = intArrayOf(0, ROWS - 1)
            val idsFile = File(work, "ids.npy").also { npyInt32(it, ids) }
            val out = File(work, "rows.npy")
            run(listOf(tool("iree-run-module"), "--device=local-task", "--module=${vmfb.path}", "--function=main",
                "--parameters=model=${r.irpa.path}", "--input=@${idsFile.path}", "--output=@${out.path}"))
            val got = npyFloat32(out)
            val want = FloatArray(2 * COLS) { value(ids[it / COLS], it % COLS) }
            val bad = got.indices.firstOrNull { got[it] != want[it] }
            check(got.size == want.size && bad == null) { "IREE's rows differ at element $bad: ${bad?.let { got[it] }} vs ${bad?.let { want[it] }}" }
            println("checkpoint-proof: IREE gathered rows 0 and ${ROWS - 1} (the last 8 KiB of the 2^31-byte tensor) exactly")
        } catch (e: Throwable) {
            System.err.println("checkpoint-proof: FAILED: $e")
            exitProcess(1)
        } finally {
            work.deleteRecursively()
        }
    }
}
