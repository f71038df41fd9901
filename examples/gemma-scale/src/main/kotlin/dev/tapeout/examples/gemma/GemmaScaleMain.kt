package dev.tapeout.examples.gemma

import dev.tapeout.MaterializationPolicy
import dev.tapeout.toComputeGraph
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.nio.channels.FileChannel
import java.nio.file.StandardOpenOption
import kotlin.system.exitProcess

/**
 * `GemmaScaleMain <e2b|e2b-odd|tiny|tiny256|tiny256-odd> <output dir>` (`-Dgemma.weights=q4k` for Q4_K matrices): builds [GemmaScale] on the heap, exports it with tapeout
 * (`gemma.mlir` + `gemma.irpa`, every bf16 weight widened to f32 chunk by chunk), then computes the float64
 * reference logits. Writes `tokens.npy`, `reference.npy` and `measure.json` (sizes, times, and the process's own
 * VmRSS/VmHWM around the export) for tests/bench/gemma_scale.py, which runs this and checks the export with IREE.
 */
object GemmaScaleMain {
    private fun status(field: String): Long =
        File("/proc/self/status").readLines().first { it.startsWith("$field:") }.split(Regex("\\s+"))[1].toLong() * 1024

    private fun npy(descr: String, shape: String, body: ByteBuffer): ByteArray {
        var header = "{'descr': '$descr', 'fortran_order': False, 'shape': $shape, }"
        while ((10 + header.length + 1) % 64 != 0) header += " "
        header += "\n"
        val out = ByteBuffer.allocate(10 + header.length + body.remaining()).order(ByteOrder.LITTLE_ENDIAN)
        out.put(0x93.toByte()).put("NUMPY".toByteArray()).put(1).put(0).putShort(header.length.toShort()).put(header.toByteArray()).put(body)
        return out.array()
    }

    private fun plainWrite(file: File, bytes: Long): Double {
        val buf = ByteBuffer.allocateDirect(64 shl 20)
        while (buf.hasRemaining()) buf.putLong(buf.position().toLong() * 0x9E3779B97F4A7C15uL.toLong())
        val t = System.nanoTime()
        FileChannel.open(file.toPath(), StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING).use { ch ->
            var left = bytes
            while (left > 0) {
                buf.clear().limit(minOf(buf.capacity().toLong(), left).toInt())
                while (buf.hasRemaining()) left -= ch.write(buf)
            }
            ch.force(true)
        }
        return (System.nanoTime() - t) / 1e9
    }

    @JvmStatic
    fun main(args: Array<String>) {
        if (args.size !in 2..3 || (args.size == 3 && args[2] != "--baseline-write")) {
            System.err.println("usage: GemmaScaleMain <e2b|e2b-odd|tiny|tiny256|tiny256-odd> <output dir> [--baseline-write]")
            exitProcess(2)
        }
        val out = File(args[1]).apply { mkdirs() }
        val t0 = System.nanoTime()
        val model = GemmaScale(Config.named(args[0]))
        val tBuilt = System.nanoTime()
        val tape = model.buildTape()
        val packed = if (model.weights == "q4k") dev.tapeout.PackedConstantHandling.KEEP else dev.tapeout.PackedConstantHandling.FAIL
        val graph = tape.toComputeGraph(packedConstants = packed)
        println("gemma-scale: ${model.cfg.name}: ${model.parameterCount} parameters, ${model.heapBytes} bytes on the heap, " +
            "${tape.ops.size} ops, ${graph.constants.size} constants, built in %.1f s".format((tBuilt - t0) / 1e9))
        val policy = MaterializationPolicy.SizeThreshold(4096, "model")
        val rssBefore = status("VmRSS"); val hwmBefore = status("VmHWM")
        val t1 = System.nanoTime()
        val r = graph.export(out, "gemma", policy)
        val exportSecs = (System.nanoTime() - t1) / 1e9
        val hwmAfter = status("VmHWM")
        println("gemma-scale: exported ${r.irpaBytes} bytes (${r.externals} parameters) in %.1f s; pins ${r.pins}, copies ${r.copies}".format(exportSecs))
        println("gemma-scale: VmRSS before export ${rssBefore shr 20} MiB, VmHWM before ${hwmBefore shr 20} MiB, after ${hwmAfter shr 20} MiB")

        // The export's throughput baseline, in the same process and memory state: plain write() calls of one
        // reused 64 MiB buffer, as many bytes as the archive's payload, to the same directory, then fsync. On a
        // virtual machine the first write of a fresh 18 GB can be several times slower than later ones (the host
        // backs the guest's page cache on first touch, and takes back pages the guest frees), so the two alternate
        // for three more rounds after the first export, and neither deletes its file before the other writes: each
        // finds the other's clean pages to reuse, never a just-freed (and host-reclaimed) range.
        val exports = arrayListOf(exportSecs); val plains = ArrayList<Double>()
        if (args.size == 3) {
            val payload = graph.constants.sumOf { it.bytes }
            repeat(3) {
                plains.add(plainWrite(File(out, "plain.bin"), payload))
                val t = System.nanoTime()
                graph.export(out, "gemma", policy)
                exports.add((System.nanoTime() - t) / 1e9)
            }
            File(out, "plain.bin").delete()
            println("gemma-scale: export ${exports.joinToString { "%.1f".format(it) }} s; plain write() + fsync of $payload bytes ${plains.joinToString { "%.1f".format(it) }} s")
        }
        val hwmAll = status("VmHWM")

        val t2 = System.nanoTime()
        val logits = model.reference()
        val refSecs = (System.nanoTime() - t2) / 1e9
        val seq = model.cfg.seq; val vocab = model.cfg.vocab
        val lb = ByteBuffer.allocate(logits.size * 4).order(ByteOrder.LITTLE_ENDIAN)
        logits.forEach { lb.putFloat(it.toFloat()) }
        lb.flip()
        File(out, "reference.npy").writeBytes(npy("<f4", "($seq, $vocab)", lb))
        val tb = ByteBuffer.allocate(seq * 4).order(ByteOrder.LITTLE_ENDIAN)
        model.cfg.tokens.forEach { tb.putInt(it) }
        tb.flip()
        File(out, "tokens.npy").writeBytes(npy("<i4", "($seq,)", tb))
        println("gemma-scale: float64 reference logits in %.1f s".format(refSecs))
        // What each key holds, for the checker that recomputes values from (key, index).
        File(out, "params.json").writeText(model.params.entries.joinToString(",\n", "[\n", "\n]\n") { (key, p) ->
            val kind = if (p.q4k != null) "q4k" else if (p.bits != null) "bf16" else "f32"
            """{"key":"$key","shape":${p.shape.joinToString(",", "[", "]")},"kind":"$kind","exponent":${model.exponents[key] ?: 0}}"""
        })
        File(out, "measure.json").writeText(
            """{"config":"${model.cfg.name}","weights":"${model.weights}","parameters":${model.parameterCount},"heap_bytes":${model.heapBytes},""" +
                """"max_heap":${Runtime.getRuntime().maxMemory()},"build_s":${(tBuilt - t0) / 1e9},"export_s":$exportSecs,""" +
                """"irpa_bytes":${r.irpaBytes},"mlir_bytes":${r.mlirBytes},"externals":${r.externals},"pins":${r.pins},"copies":${r.copies},""" +
                """"rss_before_export":$rssBefore,"hwm_before_export":$hwmBefore,"hwm_after_export":$hwmAfter,"reference_s":$refSecs,""" +
                """"hwm_after_all_exports":$hwmAll,"export_rounds_s":$exports,"plain_write_rounds_s":$plains}""" + "\n")
    }
}
