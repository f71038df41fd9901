package dev.tapeout

import java.io.File
import java.nio.file.Files
import kotlin.system.exitProcess

/**
 * `JniOverheadBench <bytes> <rounds> <dir>...`: the JNI figure of docs/performance.md#exporting-from-the-jvm.
 * Exports one model whose f32 weights total `bytes` (4 FloatArrays) to each `dir`, alternating two variants every
 * round: the arrays lent through JNI as `export` does (pinned one 64 MiB chunk at a time), and the same export from
 * Rust-owned copies (the baseline; copied once, before the first round). Only `tapeout_hlo::export` is timed, inside
 * Rust. The two archives are compared byte for byte. Prints one JSON object per directory.
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
            val lentDir = File(base, "lent").apply { mkdirs() }; val ownedDir = File(base, "owned").apply { mkdirs() }
            val v = NativeTestHooks.benchExport(json, m.data, m.kinds, lentDir.path, ownedDir.path, rounds)
            val lentAll = v.slice(0 until rounds); val ownedAll = v.slice(rounds until 2 * rounds)
            val (size, pins, copies) = Triple(v[2 * rounds], v[2 * rounds + 1], v[2 * rounds + 2])
            val identical = Files.mismatch(File(lentDir, "bench.irpa").toPath(), File(ownedDir, "bench.irpa").toPath()) == -1L
            val lent = median(lentAll); val owned = median(ownedAll)
            println("""{"figure":"jni_vs_rust_owned","dir":${Json.quote(path)},"bytes":$size,"rounds":$rounds,""" +
                """"lent_ms":${lent / 1e6},"owned_ms":${owned / 1e6},"ratio":${lent.toDouble() / owned},"pins":$pins,"copies":$copies,""" +
                """"identical":$identical,"lent_all_ms":${lentAll.map { it / 1e6 }},"owned_all_ms":${ownedAll.map { it / 1e6 }}}""")
            base.deleteRecursively()
        }
    }
}
