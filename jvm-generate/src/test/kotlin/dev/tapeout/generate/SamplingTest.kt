package dev.tapeout.generate

import org.junit.jupiter.api.Assertions.assertArrayEquals
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.assertThrows
import java.util.SplittableRandom
import kotlin.math.abs

/**
 * Sampling against numpy (make_generate_golden.py: float64 softmax of logits / temperature over the tokens top-k and
 * top-p keep, the sets also checked there against transformers' warpers) on fixed logits of 97, 1001 and 7 tokens.
 */
class SamplingTest {
    private val golden = Goldens.json("generate/sampling.json")

    @Test
    fun `filtered sets and renormalized probabilities equal numpy's`() {
        var checked = 0
        for (row in Goldens.objects(golden.getAsJsonArray("rows"))) {
            val logits = row.getAsJsonArray("logits").let { a -> FloatArray(a.size()) { a[it].asFloat } }
            for (c in Goldens.objects(row.getAsJsonArray("cases"))) {
                val (t, k, p) = Triple(c.get("temperature").asDouble, c.get("top_k").asInt, c.get("top_p").asDouble)
                val got = Sampling.probabilities(logits, t, k, p)
                val what = "vocab ${logits.size}, temperature $t, top_k $k, top_p $p"
                assertArrayEquals(Goldens.ints(c.get("kept")), got.indices.filter { got[it] > 0 }.toIntArray(), "$what: kept tokens")
                val want = c.getAsJsonArray("probabilities")
                for (i in got.indices) assertTrue(abs(got[i] - want[i].asDouble) < 1e-12, "$what: p[$i] ${got[i]} vs numpy ${want[i].asDouble}")
                checked++
            }
        }
        assertEquals(27, checked)
    }

    @Test
    fun `draws follow the distribution, and a seed reproduces them`() {
        val probabilities = doubleArrayOf(0.1, 0.0, 0.6, 0.3)
        val counts = IntArray(4)
        val random = SplittableRandom(7)
        val draws = IntArray(20000) { Sampling.draw(probabilities, random) }
        draws.forEach { counts[it]++ }
        assertEquals(0, counts[1], "a token of probability 0 is never drawn")
        for (i in probabilities.indices) assertTrue(abs(counts[i] / 20000.0 - probabilities[i]) < 0.015, "token $i: ${counts[i]} of 20000")
        val again = SplittableRandom(7)
        assertArrayEquals(draws, IntArray(20000) { Sampling.draw(probabilities, again) })
    }

    @Test
    fun `argmax takes the first of equal maxima, as torch does`() {
        assertEquals(2, Sampling.argmax(floatArrayOf(0f, 1f, 3f, 3f, -1f)))
        assertEquals(0, Sampling.argmax(floatArrayOf(5f)))
    }

    @Test
    fun `settings that cannot be honoured are refused with their name`() {
        assertEquals("maxNewTokens", assertThrows<GenerateArgumentException> { GenerationConfig(0) }.argument)
        assertEquals("temperature", assertThrows<GenerateArgumentException> { GenerationConfig(4, doSample = true, temperature = 0.0) }.argument)
        assertEquals("temperature", assertThrows<GenerateArgumentException> { GenerationConfig(4, temperature = Double.NaN) }.argument)
        assertEquals("topK", assertThrows<GenerateArgumentException> { GenerationConfig(4, topK = -1) }.argument)
        assertEquals("topP", assertThrows<GenerateArgumentException> { GenerationConfig(4, topP = 0.0) }.argument)
        assertEquals("topP", assertThrows<GenerateArgumentException> { GenerationConfig(4, topP = 1.5) }.argument)
        assertEquals("stopStrings", assertThrows<GenerateArgumentException> { GenerationConfig(4, stopStrings = listOf("")) }.argument)
    }
}
