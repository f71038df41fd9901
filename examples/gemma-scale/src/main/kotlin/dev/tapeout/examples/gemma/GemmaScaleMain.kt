package dev.tapeout.examples.gemma

import dev.tapeout.MaterializationPolicy
import dev.tapeout.toComputeGraph
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder
import kotlin.system.exitProcess

/**
 * `GemmaScaleMain <e2b|tiny> <output dir>`: builds [GemmaScale] on the heap, exports it with tapeout
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

    @JvmStatic
    fun main(args: Array<String>) {
        if (args.size != 2) {
            System.err.println("usage: GemmaScaleMain <e2b|tiny> <output dir>")
            exitProcess(2)
        }
        val out = File(args[1]).apply { mkdirs() }
        val t0 = System.nanoTime()
        val model = GemmaScale(Config.named(args[0]))
        val tBuilt = System.nanoTime()
        val tape = model.buildTape()
        val graph = tape.toComputeGraph()
        println("gemma-scale: ${model.cfg.name}: ${model.parameterCount} parameters, ${model.heapBytes} bytes on the heap, " +
            "${tape.ops.size} ops, ${graph.constants.size} constants, built in %.1f s".format((tBuilt - t0) / 1e9))
        val rssBefore = status("VmRSS"); val hwmBefore = status("VmHWM")
        val t1 = System.nanoTime()
        val r = graph.export(out, "gemma", MaterializationPolicy.SizeThreshold(4096, "model"))
        val exportSecs = (System.nanoTime() - t1) / 1e9
        val hwmAfter = status("VmHWM")
        println("gemma-scale: exported ${r.irpaBytes} bytes (${r.externals} parameters) in %.1f s; pins ${r.pins}, copies ${r.copies}".format(exportSecs))
        println("gemma-scale: VmRSS before export ${rssBefore shr 20} MiB, VmHWM before ${hwmBefore shr 20} MiB, after ${hwmAfter shr 20} MiB")

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
            val kind = if (p.bits != null) "bf16" else "f32"
            """{"key":"$key","shape":${p.shape.joinToString(",", "[", "]")},"kind":"$kind","exponent":${model.exponents[key] ?: 0}}"""
        })
        File(out, "measure.json").writeText(
            """{"config":"${model.cfg.name}","parameters":${model.parameterCount},"heap_bytes":${model.heapBytes},""" +
                """"max_heap":${Runtime.getRuntime().maxMemory()},"build_s":${(tBuilt - t0) / 1e9},"export_s":$exportSecs,""" +
                """"irpa_bytes":${r.irpaBytes},"mlir_bytes":${r.mlirBytes},"externals":${r.externals},"pins":${r.pins},"copies":${r.copies},""" +
                """"rss_before_export":$rssBefore,"hwm_before_export":$hwmBefore,"hwm_after_export":$hwmAfter,"reference_s":$refSecs}""" + "\n")
    }
}
