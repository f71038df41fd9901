package dev.tapeout

import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

class SmokeTest {
    @Test
    fun `a small model becomes StableHLO`() {
        val tape = ExecutionTape()
        val x = tape.input("x", longArrayOf(2, 4))
        val w = tape.weight("model.fc.weight", FloatArray(12) { it.toFloat() }, 4, 3)
        tape.output(tape.relu(tape.matmul(x, w)))
        val text = tape.toComputeGraph().toStableHlo(MaterializationPolicy.ExternalAlways())
        assertTrue(text.contains("#flow.parameter.named<\"model\"::\"model.fc.weight\">"), text)
    }
}
