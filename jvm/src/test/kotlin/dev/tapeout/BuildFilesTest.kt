package dev.tapeout

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File

/** settings.gradle.kts (modern Gradle) and its Groovy twin (Debian's 4.4.1) must declare the same build. */
class BuildFilesTest {
    private val repo = File(System.getProperty("tapeout.repo") ?: "..")

    private fun declared(file: String): Pair<String, Set<String>> {
        val text = File(repo, file).readText().lines().filterNot { it.trim().startsWith("//") }.joinToString("\n")
        val name = Regex("rootProject\\.name\\s*=\\s*[\"']([^\"']+)[\"']").find(text)!!.groupValues[1]
        val includes = Regex("include\\s*\\(?\\s*([^)\\n]+)").findAll(text)
            .flatMap { m -> Regex("[\"']([^\"']+)[\"']").findAll(m.groupValues[1]).map { it.groupValues[1] } }.toSet()
        return name to includes
    }

    @Test
    fun `both settings files declare the same projects`() {
        val kts = declared("settings.gradle.kts")
        val groovy = declared("settings-gradle4.gradle")
        assertEquals(kts, groovy)
        assertTrue(kts.second.contains("jvm"))
    }
}
