package dev.tapeout.examples

import dev.tapeout.DType
import dev.tapeout.ExecutionTape
import dev.tapeout.Linear
import dev.tapeout.ModelProvider
import dev.tapeout.Module
import dev.tapeout.SafeTensors
import dev.tapeout.Tensor
import java.io.File

/**
 * A PyTorch MLP exported from its safetensors checkpoint, the weights never on the JVM heap: [SafeTensors.open]
 * reads the header, [ExecutionTape.load] makes its tensors the parameters of the module tree by key, and the
 * export copies them from the file into the archive. The checkpoint is the system property
 * `tapeout.example.checkpoint` (set by `tapeout { systemProperty … }` in build.gradle).
 */
class CheckpointMlp : ModelProvider {
    class Mlp : Module() {
        val fc1 = child("fc1", Linear(16, 64))
        val fc2 = child("fc2", Linear(64, 10))

        operator fun invoke(x: Tensor): Tensor = fc2(x.tape.relu(fc1(x)))
    }

    override fun buildTape(): ExecutionTape {
        val path = System.getProperty("tapeout.example.checkpoint")
            ?: throw IllegalStateException("set the system property tapeout.example.checkpoint to the checkpoint file")
        val checkpoint = SafeTensors.open(File(path))
        println("checkpoint-mlp: ${checkpoint.file.name}: ${checkpoint.tensors.values.joinToString { "${it.name} ${it.dtype}" }}; " +
            "metadata ${checkpoint.metadata}")
        val tape = ExecutionTape()
        tape.load(checkpoint)
        tape.output("logits", Mlp()(tape.input("x", 4, 16, dtype = DType.F32)))
        return tape
    }
}
