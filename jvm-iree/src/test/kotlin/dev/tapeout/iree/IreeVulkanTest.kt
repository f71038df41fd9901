package dev.tapeout.iree

import dev.tapeout.ExportOptions
import dev.tapeout.ExportTarget
import dev.tapeout.HalfConstantHandling
import dev.tapeout.MaterializationPolicy
import dev.tapeout.PackedConstantHandling
import dev.tapeout.examples.TinyLlm
import dev.tapeout.examples.TinyLlmServer
import dev.tapeout.examples.Verify
import dev.tapeout.exportModule
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.io.TempDir
import java.io.File
import java.util.concurrent.TimeUnit
import kotlin.math.abs
import kotlin.system.exitProcess

/**
 * The `vulkan` device from Kotlin, on the machine's Vulkan driver (Mesa's lavapipe, Vulkan on the CPU, which
 * scripts/setup installs): the tiny LLM of examples/tiny-llm exported for Vulkan and for the CPU, compiled for each,
 * and served by the example's own [TinyLlmServer] (prefill, then greedy decode steps with the KV cache kept on the
 * device) on `vulkan` and on `local-task`. Then the typed exception where no Vulkan driver is found.
 */
class IreeVulkanTest {
    private val repo = File(System.getProperty("tapeout.repo") ?: ".")
    private val compiler = IreeCompiler.find(repo)

    /**
     * tiny-llm exported as its Gradle build does (bf16 kept, inline below 1 KiB) for `target`, its Q8_0 weight
     * dequantized (the build's default) or kept packed. For Vulkan the kept planes and the bf16 weights are stored as
     * 32-bit words and decoded in the module (docs/devices.md): before that form, the Vulkan build of prefill with the
     * weight kept packed gave logits off by 3 to 6 on lavapipe, IREE's own iree-run-module too.
     */
    private fun export(dir: File, target: ExportTarget, packed: PackedConstantHandling) =
        exportModule(dir, "tiny_llm", TinyLlm().buildTapes(emptyList()),
            packed, HalfConstantHandling.KEEP, MaterializationPolicy.SizeThreshold(1024),
            options = ExportOptions(target))

    private fun generate(device: IreeDevice, vmfb: File, irpa: File): TinyLlmServer.Generation =
        IreeModule.load(device, vmfb, listOf(IreeParameters.archive(irpa))).use { m ->
            TinyLlmServer(m).generate(TinyLlm.TOKENS, Verify.STEPS)
        }

    @Test
    fun `tiny-llm's prefill and decode on Vulkan give the greedy tokens and logits of local-task`(@TempDir tmp: File) =
        servedAlike(tmp, PackedConstantHandling.DEQUANTIZE)

    @Test
    fun `so do they with its Q8_0 weight kept packed`(@TempDir tmp: File) =
        servedAlike(tmp, PackedConstantHandling.KEEP)

    private fun servedAlike(tmp: File, packed: PackedConstantHandling) {
        val cpuExport = export(File(tmp, "cpu"), ExportTarget.LLVM_CPU, packed)
        val vulkanExport = export(File(tmp, "vulkan"), ExportTarget.VULKAN, packed)
        // The Vulkan export keeps the bf16 q/k/v weights' bytes, in 32-bit words it decodes where it uses them.
        assertTrue(vulkanExport.mlir.readText().contains("shift_left"), "the Vulkan module decodes words")
        val cpuVmfb = compiler.compile(cpuExport.mlir, IreeTarget.cpu("generic"))
        val vulkanVmfb = compiler.compile(vulkanExport.mlir, IreeTarget.vulkan())
        val (onVulkan, onCpu) = IreeInstance().use { instance ->
            assertTrue("vulkan" in instance.drivers(), instance.drivers().toString())
            val vulkan = try {
                instance.device("vulkan")
            } catch (e: IreeDeviceUnavailableException) {
                throw AssertionError("no Vulkan device: run scripts/setup (it installs Mesa's lavapipe): ${e.message}", e)
            }
            vulkan.use { gpu ->
                instance.device("local-task", workers = 2).use { cpu ->
                    // A module for the CPU is refused by the Vulkan device, naming it.
                    assertEquals("vulkan", assertThrows<IreeWrongTargetException> {
                        IreeModule.load(gpu, cpuVmfb, listOf(IreeParameters.archive(cpuExport.irpa)))
                    }.device)
                    generate(gpu, vulkanVmfb, vulkanExport.irpa) to generate(cpu, cpuVmfb, cpuExport.irpa)
                }
            }
        }
        assertEquals(onCpu.tokens, onVulkan.tokens, "the greedy tokens")
        // The prompt, prefill's next token, and one token per decode step.
        assertEquals(TinyLlm.TOKENS.size + 1 + Verify.STEPS, onVulkan.tokens.size)
        // Every position's logits (the prompt's from prefill, then one row per decode step), against local-task's and
        // against the float64 Kotlin reference (as Verify checks the CPU). The two devices run the same f32 model in
        // two compilations (SPIR-V and LLVM: their own order of sums, their own exp and rsqrt), so they differ by
        // f32 rounding, not by a bug: |a - b| <= 1e-5 * (1 + |b|). The logits reach ~10, where an f32 ulp is ~1e-6;
        // the two devices were 6.7e-6 apart at most (lavapipe, Mesa 22.3), a wrong dispatch is off by whole units.
        val want = TinyLlm().referenceLogits(onCpu.tokens.dropLast(1).toIntArray())
        val v = TinyLlm.VOCAB
        var worst = 0.0
        for ((s, row) in onVulkan.logits.withIndex()) for (j in 0 until v) {
            val (g, c, r) = Triple(row[j].toDouble(), onCpu.logits[s][j].toDouble(), want[s * v + j])
            worst = maxOf(worst, abs(g - c))
            assertTrue(abs(g - c) <= 1e-5 * (1 + abs(c)), "position $s logit $j: vulkan $g, local-task $c")
            assertTrue(abs(g - r) <= 1e-5 * (1 + abs(r)), "position $s logit $j: vulkan $g, reference $r")
        }
        println("vulkan vs local-task ($packed): ${onVulkan.logits.size} positions, tokens ${onVulkan.tokens}, max |logit difference| %.2e".format(worst))
    }

    @Test
    fun `without a Vulkan driver the device is a typed exception naming the remedy, and the CPU still serves`() {
        // The Vulkan loader reads its driver list when IREE makes a Vulkan instance; the JVM cannot change its own
        // environment, so a child JVM ([NoVulkanDriver]) is given none: a machine with the loader and no driver.
        val java = File(System.getProperty("java.home"), "bin/java").path
        val cmd = listOf(java, "-Xcheck:jni", "-cp", System.getProperty("java.class.path"),
            "-Dtapeout.iree.native.path=${System.getProperty("tapeout.iree.native.path")}", "-Dtapeout.repo=${repo.absolutePath}",
            NoVulkanDriver::class.java.name)
        val p = ProcessBuilder(cmd).redirectErrorStream(true).also {
            it.environment()["VK_DRIVER_FILES"] = "/nonexistent/icd.json" // loader 1.3.207 and later
            it.environment()["VK_ICD_FILENAMES"] = "/nonexistent/icd.json" // older loaders
        }.start()
        val out = p.inputStream.bufferedReader().readText()
        assertTrue(p.waitFor(2, TimeUnit.MINUTES), "the child JVM did not finish:\n$out")
        assertEquals(0, p.exitValue(), out)
        assertTrue(out.contains("typed: driver=vulkan uri=vulkan code=UNAVAILABLE"), out)
        assertTrue(out.contains("local-task serves: [3.0, -6.0]"), out)
        // scripts/test fails on JNI warnings in the test reports; the child's -Xcheck:jni output is checked here.
        assertTrue(Regex("Calling other JNI functions|WARNING in native method|JNI local refs").find(out) == null, out)
    }
}

/** The child of the test above: asks for a `vulkan` device where the loader has no driver, then serves on the CPU. */
object NoVulkanDriver {
    @JvmStatic
    fun main(args: Array<String>) {
        IreeInstance().use { instance ->
            try {
                instance.device("vulkan").close()
                println("a vulkan device was made without a driver")
                exitProcess(1)
            } catch (e: IreeDeviceUnavailableException) {
                val m = e.message ?: ""
                println("message: $m")
                for (needle in listOf("'vulkan' device", "VK_ERROR_INCOMPATIBLE_DRIVER", "mesa-vulkan-drivers", "\"local-task\"")) {
                    if (needle !in m) { println("the message lacks $needle"); exitProcess(1) }
                }
                println("typed: driver=${e.driver} uri=${e.uri} code=${e.code}")
            }
            instance.device("local-task", workers = 1).use { cpu ->
                val twice = "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %y = stablehlo.add %x, %x : tensor<2xf32>\n  return %y : tensor<2xf32>\n}\n"
                val vmfb = IreeCompiler.find(File(System.getProperty("tapeout.repo") ?: ".")).compile(twice, IreeTarget.cpu("generic"))
                IreeModule.load(cpu, vmfb).use { m ->
                    val y = m.value(floatArrayOf(1.5f, -3f), 2).use { m.call("main", it)[0] }.use { it.toFloatArray() }
                    println("local-task serves: ${y.toList()}")
                }
            }
        }
    }
}
