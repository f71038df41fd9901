package dev.tapeout.iree

import java.io.File
import java.nio.file.Files
import java.nio.file.StandardCopyOption
import java.util.concurrent.TimeUnit

/**
 * What `iree-compile` builds a module for: the target devices and, for the CPU, which CPU.
 *
 * `IreeTarget.cpu()` (this machine's CPU, `host`), `IreeTarget.cpu("generic")` (any x86-64),
 * `IreeTarget.cpu("host", "+avx2,+fma")`, `IreeTarget.vmvx()`, `IreeTarget.vulkan()`, `IreeTarget.cuda()`,
 * `IreeTarget.hip()`; [flags] are the `iree-compile` flags it stands for.
 */
class IreeTarget private constructor(
    /** The iree-compile flags. */
    val flags: List<String>,
    /** A short name for messages. */
    val description: String,
) {
    /** Whether this is the llvm-cpu backend (where tapeout's tuning spec applies). */
    val isCpu: Boolean get() = "--iree-hal-local-target-device-backends=llvm-cpu" in flags

    override fun toString() = description

    companion object {
        /** The llvm-cpu backend for `cpu` (`host`: this machine's; `generic`: any x86-64) with extra CPU `features`. */
        @JvmStatic
        @JvmOverloads
        fun cpu(cpu: String = "host", features: String = ""): IreeTarget = IreeTarget(
            listOf("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                "--iree-llvmcpu-target-cpu=$cpu") + (if (features.isEmpty()) emptyList() else listOf("--iree-llvmcpu-target-cpu-features=$features")),
            "llvm-cpu ($cpu${if (features.isEmpty()) "" else " $features"})",
        )

        /** IREE's portable VM-based CPU backend. */
        @JvmStatic
        fun vmvx(): IreeTarget = IreeTarget(listOf("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=vmvx"), "vmvx")

        /** Vulkan (SPIR-V). */
        @JvmStatic
        fun vulkan(): IreeTarget = IreeTarget(listOf("--iree-hal-target-device=vulkan"), "vulkan")

        /** CUDA. */
        @JvmStatic
        fun cuda(): IreeTarget = IreeTarget(listOf("--iree-hal-target-device=cuda"), "cuda")

        /** HIP (ROCm). */
        @JvmStatic
        fun hip(): IreeTarget = IreeTarget(listOf("--iree-hal-target-device=hip"), "hip")
    }
}

/** iree-compile refused a module, or could not be run; [diagnostics] is what it printed. */
class IreeCompileException(message: String, val diagnostics: String) : IreeException(message)

/**
 * IREE's compiler, run as the `iree-compile` program (PyPI `iree-base-compiler==3.13.0`, which the project's
 * `scripts/setup` installs into `.venv`). It runs in a process of its own: the compiler library (321 MB)
 * has no business in a serving JVM's memory once the module is built.
 *
 * ```kotlin
 * val vmfb = IreeCompiler.find().compile(File("build/tapeout/model.mlir"), IreeTarget.cpu())
 * ```
 */
class IreeCompiler(
    /** The `iree-compile` executable. */
    val executable: File,
) {
    init {
        if (!executable.isFile || !executable.canExecute()) {
            throw IreeCompileException("$executable is not an executable iree-compile", "")
        }
    }

    /** `iree-compile --version`. */
    fun version(): String = run(listOf(executable.path, "--version"), "asking $executable for its version").trim()

    /**
     * Compiles `mlir` (a StableHLO module tapeout exported) for `target` into `output` (default: beside it, `.vmfb`),
     * written to a temporary file and renamed into place. Returns `output`.
     *
     * For the llvm-cpu target, the tuning spec the export wrote beside the module (`<name>.tuning.mlir`, when it
     * has products IREE computes faster with it: a Q8_0 / Q4_0 weight kept packed, a bf16 or f16 weight in row
     * bands) is passed as `--iree-codegen-tuning-spec-path`, with
     * `--mlir-disable-threading` (IREE 3.13 can deadlock loading a spec on several threads), unless `extraFlags`
     * name a spec of their own (`--iree-codegen-tuning-spec-path=`, empty, for none).
     */
    @JvmOverloads
    fun compile(
        mlir: File,
        target: IreeTarget = IreeTarget.cpu(),
        output: File = File(mlir.parentFile, mlir.name.removeSuffix(".mlir") + ".vmfb"),
        extraFlags: List<String> = emptyList(),
    ): File {
        if (!mlir.isFile) throw IreeCompileException("no module at $mlir: export the model first", "")
        val tmp = File(output.path + ".tmp")
        val spec = tuningSpecFor(mlir)
        val tuning = if (spec != null && target.isCpu && extraFlags.none { it.startsWith(TUNING_SPEC_FLAG) }) {
            // IREE 3.13 can deadlock loading a tuning spec while it configures executables on several threads:
            // compiled on one thread when the spec is passed.
            listOf("$TUNING_SPEC_FLAG=${spec.path}", "--mlir-disable-threading")
        } else {
            emptyList()
        }
        val cmd = listOf(executable.path, "--iree-input-type=stablehlo") + target.flags + tuning + extraFlags + listOf(mlir.path, "-o", tmp.path)
        try {
            run(cmd, "compiling $mlir for $target")
            Files.move(tmp.toPath(), output.toPath(), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE)
        } finally {
            tmp.delete()
        }
        return output
    }

    /** Compiles MLIR text for `target`; the vmfb's bytes. */
    @JvmOverloads
    fun compile(mlirText: String, target: IreeTarget = IreeTarget.cpu(), extraFlags: List<String> = emptyList()): ByteArray {
        val dir = Files.createTempDirectory("tapeout-iree-compile").toFile()
        try {
            val mlir = File(dir, "module.mlir").also { it.writeText(mlirText) }
            return compile(mlir, target, File(dir, "module.vmfb"), extraFlags).readBytes()
        } finally {
            dir.deleteRecursively()
        }
    }

    private fun run(cmd: List<String>, what: String): String {
        val p = try {
            ProcessBuilder(cmd).redirectErrorStream(true).start()
        } catch (e: java.io.IOException) {
            throw IreeCompileException("$what: cannot start $executable: ${e.message}", "")
        }
        val out = p.inputStream.bufferedReader().readText()
        if (!p.waitFor(1, TimeUnit.HOURS)) {
            p.destroyForcibly()
            throw IreeCompileException("$what: iree-compile did not finish within an hour", out)
        }
        if (p.exitValue() != 0) {
            val shown = out.lines().take(40).joinToString("\n")
            throw IreeCompileException("$what: iree-compile failed (exit ${p.exitValue()}):\n$shown", out)
        }
        return out
    }

    companion object {
        private const val TUNING_SPEC_FLAG = "--iree-codegen-tuning-spec-path"

        /** The tuning spec tapeout's export writes beside `mlir` (`<name>.tuning.mlir`), if there is one. */
        @JvmStatic
        fun tuningSpecFor(mlir: File): File? =
            File(mlir.absoluteFile.parentFile, mlir.name.removeSuffix(".mlir") + ".tuning.mlir").takeIf { it.isFile }

        /**
         * The iree-compile to use: system property `tapeout.iree.compile`, else `$TAPEOUT_IREE_COMPILE`, else
         * `.venv/bin/iree-compile` in `searchFrom` or any directory above it (the working directory by default),
         * else the first on `PATH`. Throws [IreeCompileException] saying how to install one when none is found.
         */
        @JvmStatic
        @JvmOverloads
        fun find(searchFrom: File = File(".").absoluteFile): IreeCompiler {
            System.getProperty("tapeout.iree.compile")?.takeIf { it.isNotEmpty() }?.let { return IreeCompiler(File(it)) }
            System.getenv("TAPEOUT_IREE_COMPILE")?.takeIf { it.isNotEmpty() }?.let { return IreeCompiler(File(it)) }
            var dir: File? = searchFrom
            while (dir != null) {
                val venv = File(dir, ".venv/bin/iree-compile")
                if (venv.isFile && venv.canExecute()) return IreeCompiler(venv)
                dir = dir.parentFile
            }
            for (p in (System.getenv("PATH") ?: "").split(File.pathSeparator)) {
                val f = File(p, "iree-compile")
                if (p.isNotEmpty() && f.isFile && f.canExecute()) return IreeCompiler(f)
            }
            throw IreeCompileException(
                "iree-compile not found (no tapeout.iree.compile property, no TAPEOUT_IREE_COMPILE, no .venv/bin/iree-compile " +
                    "above $searchFrom, none on PATH): install IREE's compiler with pip install iree-base-compiler==3.13.0, " +
                    "or point TAPEOUT_IREE_COMPILE at it",
                "",
            )
        }
    }
}
