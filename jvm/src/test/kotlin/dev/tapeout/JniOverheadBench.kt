package dev.tapeout

import java.io.File
import kotlin.system.exitProcess

/**
 * `JniOverheadBench <bytes> <rounds> <dir>...`: the JNI figure of docs/performance.md. Exports one model whose
 * f32 weights total `bytes` (4 FloatArrays, each re-pinned per 64 MiB chunk) to each `dir`, alternating two variants every round: the arrays
 * lent through JNI as `export` does (pinned one 64 MiB chunk at a time), and the same export from Rust-owned
 * copies (the baseline; copied before the clock starts). Only `tapeout_hlo::export` is timed, inside Rust. The
 * two archives are compared byte for byte. Prints one JSON object per directory.
 */
object JniOverheadBench {
    private fun median(v: List<Long>) = v.sorted()[v.size / 2]

    @JvmStatic
    fun main(args: Array<String>) {
        if (args.size < 3) {
            System.err.println("usage: JniOverheadBench <bytes> <rounds> <dir>...")
            exitProcess(2)
        }
        val bytes = args[0].toLong(); val rounds = args[1].toInt()
        val tensors = 4; val rows = 1024
        val cols = Math.toIntExact(bytes / 4 / tensors / rows)
        val tape = ExecutionTape()
        val x = tape.input("x", longArrayOf(1, rows.toLong()))
        val outs = (0 until tensors).map { i ->
            val w = FloatArray(rows * cols) { j -> ((j * 31 + i) % 1021) * 0.001f }
            tape.matmul(x, tape.weight("model.w$i", w, rows.toLong(), cols.toLong()))
        }
        tape.output(*outs.toTypedArray())
        val m = Marshalled(tape)
        val json = tape.toGraphJson("bench")
        for (path in args.drop(2)) {
            val base = File(path)
            val dirs = mapOf(false to File(base, "lent"), true to File(base, "owned"))
            dirs.values.forEach { it.mkdirs() }
            val times = mapOf(false to ArrayList<Long>(), true to ArrayList())
            var pins = 0L; var copies = 0L
            for (r in 0 until rounds) {
                for (owned in if (r % 2 == 0) listOf(false, true) else listOf(true, false)) {
                    val v = NativeBridge.benchExport(json, m.data, m.kinds, dirs.getValue(owned).path, "bench", owned)
                    times.getValue(owned).add(v[0])
                    if (!owned) { pins = v[2]; copies = v[3] }
                }
            }
            val a = File(dirs.getValue(false), "bench.irpa"); val b = File(dirs.getValue(true), "bench.irpa")
            val identical = a.length() == b.length() && a.inputStream().buffered().use { ia ->
                b.inputStream().buffered().use { ib -> generateSequence { ia.read() }.takeWhile { it >= 0 }.all { it == ib.read() } }
            }
            val lent = median(times.getValue(false)); val owned = median(times.getValue(true))
            println("""{"figure":"jni_vs_rust_owned","dir":"${Json.quote(path).trim('"')}","bytes":${a.length()},"rounds":$rounds,""" +
                """"lent_ms":${lent / 1e6},"owned_ms":${owned / 1e6},"ratio":${lent.toDouble() / owned},"pins":$pins,"copies":$copies,""" +
                """"identical":$identical,"lent_all_ms":${times.getValue(false).map { it / 1e6 }},"owned_all_ms":${times.getValue(true).map { it / 1e6 }}}""")
            base.deleteRecursively()
        }
    }
}
