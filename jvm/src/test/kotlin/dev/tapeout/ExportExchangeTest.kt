package dev.tapeout

import dev.tapeout.TestSupport.tempDir
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File
import java.util.Properties

/** The export JVM's side of the Gradle exchange: the request file the plugin writes, the response it reads. */
class ExportExchangeTest {
    private fun request(dir: File, edit: (Properties) -> Unit = {}): File {
        // The fields the plugin's ExportExchange.Request writes, spelled out here as the plugin spells them.
        val p = Properties()
        for ((k, v) in listOf("format" to "tapeout-export/1", "model" to "demo.Model", "outputDir" to "/out", "moduleName" to "m",
            "scope" to "model", "inlineBelowBytes" to "4096", "packedConstants" to "dequantize", "halfConstants" to "KEEP",
            "maxArchiveBytes" to "0", "response" to "/out/r.properties", "args.count" to "2", "args.0" to "a b", "args.1" to "--x=1")) {
            p.setProperty(k, v)
        }
        edit(p)
        return File(dir, "request.properties").also { f -> f.outputStream().use { p.store(it, null) } }
    }

    @Test
    fun `a request reads back field by field and a malformed one names the field`() {
        val dir = tempDir("tapeout-exchange")
        val r = ExportRequest.read(request(dir))
        assertEquals(listOf("demo.Model", "/out", "m", "model"), listOf(r.model, r.outputDir, r.moduleName, r.scope))
        assertEquals(listOf(4096L, 0L), listOf(r.inlineBelowBytes, r.maxArchiveBytes))
        assertEquals(PackedConstantHandling.DEQUANTIZE to HalfConstantHandling.KEEP, r.packed to r.half)
        assertEquals(listOf("a b", "--x=1"), r.args)
        assertEquals(File("/out/r.properties"), r.response)
        val missing = assertThrows<IllegalArgumentException> { ExportRequest.read(request(dir) { it.remove("args.1") }) }
        assertTrue(missing.message!!.contains("'args.1' is missing"), missing.message)
        val format = assertThrows<IllegalArgumentException> { ExportRequest.read(request(dir) { it.setProperty("format", "x/2") }) }
        assertTrue(format.message!!.contains("is not a tapeout-export/1 request"), format.message)
        dir.deleteRecursively()
    }

    @Test
    fun `a failed response carries its warnings and the lines of its message`() {
        val dir = tempDir("tapeout-exchange")
        val file = File(dir, "response.properties")
        ExportResponse(file).apply { warnings += "two weights have the key 'k'" }.failed(listOf("first line", "  at demo.M.f(M.kt:3)"))
        val p = Properties().apply { file.inputStream().use { load(it) } }
        assertEquals("failed", p.getProperty("status"))
        assertEquals(listOf("1", "two weights have the key 'k'"), listOf(p.getProperty("warning.count"), p.getProperty("warning.0")))
        assertEquals(listOf("2", "first line", "  at demo.M.f(M.kt:3)", "0"),
            listOf(p.getProperty("error.count"), p.getProperty("error.0"), p.getProperty("error.1"), p.getProperty("output.count")))
        dir.deleteRecursively()
    }
}
