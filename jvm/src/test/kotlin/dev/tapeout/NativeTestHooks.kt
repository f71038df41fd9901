package dev.tapeout

/** The native library's test and benchmark entry points (rust/jni, cargo feature `test-hooks`): only the library
 *  the tests load carries them, never the one in the published jar. */
internal object NativeTestHooks {
    init {
        NativeLoader.load()
    }

    /** Panics natively with [message], so tests can check that it arrives as a RuntimeException. */
    @JvmStatic external fun panicForTest(message: String)

    /** `[isCopy (0/1), length]` of one critical pin of [array]. */
    @JvmStatic external fun pinInfo(array: FloatArray): LongArray

    /** The JNI-overhead benchmark: lent and Rust-owned exports, alternating; see rust/jni/src/hooks.rs. */
    @JvmStatic external fun benchExport(graphJson: String, data: Array<Any?>, kinds: IntArray, lentDir: String, ownedDir: String,
                                        rounds: Int): LongArray
}
