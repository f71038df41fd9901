package dev.tapeout.transformers

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows

/** [ModelOptions.parse]: the run-time batch option and what it refuses. */
class ModelOptionsTest {
    @Test
    fun `batch=dynamic is a run-time batch, batch=1 and no option one row`() {
        assertTrue(ModelOptions.parse("T", listOf("batch=dynamic", "logits_to_keep=1")).dynamicBatch)
        assertEquals(false, ModelOptions.parse("T", listOf("batch=1")).dynamicBatch)
        assertEquals(false, ModelOptions.parse("T", emptyList()).dynamicBatch)
    }

    @Test
    fun `another batch value, a repeated one, or a static cache with a run-time batch is refused`() {
        val other = assertThrows<IllegalArgumentException> { ModelOptions.parse("T", listOf("batch=4")) }
        assertTrue(other.message!!.contains("batch is 'dynamic'") && other.message!!.contains("'batch=4'"), other.message)
        val twice = assertThrows<IllegalArgumentException> { ModelOptions.parse("T", listOf("batch=dynamic", "batch=1")) }
        assertTrue(twice.message!!.contains("given twice"), twice.message)
        val static = assertThrows<IllegalArgumentException> { ModelOptions.parse("T", listOf("static=16", "batch=dynamic")) }
        assertTrue(static.message!!.contains("dynamic cache form only") && static.message!!.contains("static=16"), static.message)
        assertThrows<IllegalArgumentException> { ModelOptions(staticCache = 16, dynamicBatch = true) }
    }

    @Test
    fun `a run-time batch gives prefill input_ids of two run-time sizes and decode caches of a run-time batch`() {
        val repo = java.io.File(System.getProperty("tapeout.repo") ?: ".")
        val m = AutoModelForCausalLM.fromPretrained(java.io.File(repo, "jvm-transformers/testdata/mistral-window-f32"))
        val tapes = m.tapes(ModelOptions(dynamicBatch = true, logitsToKeep = 1))
        val prefill = tapes.getValue("prefill")
        val decode = tapes.getValue("decode")
        fun shape(t: dev.tapeout.ExecutionTape, name: String) = t.tensors.first { it.name == name }.shape.toList()
        assertEquals(listOf(-1L, -1L), shape(prefill, "input_ids"))
        assertEquals(listOf(-1L, 1L, 97L), shape(prefill, "logits"))
        assertEquals(listOf(-1L, 2L, -1L, 8L), shape(prefill, "present_key_0"))
        assertEquals(listOf(-1L, 1L), shape(decode, "input_ids"))
        assertEquals(listOf(-1L, 2L, -1L, 8L), shape(decode, "past_key_0"))
        assertEquals(listOf(-1L, 1L, 97L), shape(decode, "logits"))
    }
}
