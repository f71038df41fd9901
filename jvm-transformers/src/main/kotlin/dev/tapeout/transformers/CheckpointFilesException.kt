package dev.tapeout.transformers

import dev.tapeout.TapeoutException
import java.io.File

/**
 * A checkpoint's files do not make one model: no `config.json` or weights in a directory, a shard index naming a
 * file that is not there, or tensors the model needs missing (or tensors it would never read). [path] is the file
 * or directory; the message names what is missing or extra and what to do.
 */
class CheckpointFilesException(
    /** The checkpoint file or directory. */
    val path: File,
    problem: String,
) : TapeoutException("${path.path}: $problem")
