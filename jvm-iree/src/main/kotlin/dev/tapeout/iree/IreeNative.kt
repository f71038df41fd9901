package dev.tapeout.iree

import java.io.File
import java.nio.ByteBuffer
import java.nio.file.Files
import java.nio.file.StandardCopyOption

/**
 * Finds and loads `tapeout_iree_jni` (IREE's runtime and tapeout's binding of it), trying in order:
 * 1. the system property `tapeout.iree.native.path` or the environment variable `TAPEOUT_IREE_NATIVE_PATH`;
 * 2. the jar resource `native/<os>-<arch>/<libname>`, copied to a temporary file;
 * 3. `System.loadLibrary("tapeout_iree_jni")` through `java.library.path`.
 * If all fail, the error lists what was tried. Loaded on first use of [IreeInstance], not before.
 */
object IreeNativeLoader {
    private const val LIB = "tapeout_iree_jni"

    /** Where the library was loaded from, once it is. */
    @Volatile
    var loadedFrom: String? = null
        private set

    private fun platform(): String {
        val os = System.getProperty("os.name").lowercase().let {
            when {
                it.contains("linux") -> "linux"
                it.contains("mac") -> "macos"
                it.contains("win") -> "windows"
                else -> it.replace(' ', '_')
            }
        }
        val arch = when (val a = System.getProperty("os.arch").lowercase()) {
            "amd64", "x86_64" -> "x86-64"
            "aarch64", "arm64" -> "aarch64"
            else -> a
        }
        return "$os-$arch"
    }

    private fun tempCopy(from: java.io.InputStream): String {
        val tmp = Files.createTempFile(LIB, ".so")
        from.use { Files.copy(it, tmp, StandardCopyOption.REPLACE_EXISTING) }
        tmp.toFile().deleteOnExit()
        return tmp.toAbsolutePath().toString()
    }

    /** Loads the library (once); returns where from. */
    @Synchronized
    fun load(): String {
        loadedFrom?.let { return it }
        val tried = ArrayList<String>()
        val explicit = System.getProperty("tapeout.iree.native.path") ?: System.getenv("TAPEOUT_IREE_NATIVE_PATH")
        if (explicit != null) {
            try {
                System.load(File(explicit).absolutePath)
                return "path:$explicit".also { loadedFrom = it }
            } catch (e: UnsatisfiedLinkError) {
                tried += "tapeout.iree.native.path=$explicit: ${e.message}"
            }
        }
        val resource = "/native/${platform()}/${System.mapLibraryName(LIB)}"
        val stream = IreeNativeLoader::class.java.getResourceAsStream(resource)
        if (stream != null) {
            try {
                System.load(tempCopy(stream))
                return "resource:$resource".also { loadedFrom = it }
            } catch (e: UnsatisfiedLinkError) {
                tried += "jar resource $resource: ${e.message}"
            }
        } else {
            tried += "jar resource $resource: not in the jar (platform ${platform()})"
        }
        try {
            System.loadLibrary(LIB)
            return "java.library.path".also { loadedFrom = it }
        } catch (e: UnsatisfiedLinkError) {
            tried += "System.loadLibrary($LIB): ${e.message}"
        }
        throw UnsatisfiedLinkError("cannot load tapeout's IREE runtime library; tried:\n  " + tried.joinToString("\n  ") +
            "\nSet -Dtapeout.iree.native.path=/path/to/${System.mapLibraryName(LIB)} to load a specific file.")
    }
}

/**
 * What the native side throws: [kind] names the exception class and [texts] / [numbers] carry its fields, in the
 * encoding rust/iree-jni/src/contract.rs defines (and renders into IreeContract.kt). [toTyped] makes the exception the
 * public API throws. Not part of the API.
 */
class IreeNativeError(val kind: Int, message: String, val texts: Array<String>, val numbers: LongArray) : RuntimeException(message) {
    /** The typed exception for this failure. */
    fun toTyped(): IreeException = nativeException(kind, message ?: "", texts, numbers)
}

/** Runs a native call, turning its failure into the typed exception. */
internal inline fun <T> native(call: () -> T): T =
    try {
        call()
    } catch (e: IreeNativeError) {
        throw e.toTyped()
    }

/** The JNI entry points (rust/iree-jni). */
internal object IreeNative {
    init {
        IreeNativeLoader.load()
    }

    @JvmStatic external fun instanceCreate(): Long
    @JvmStatic external fun instanceRelease(handle: Long)
    @JvmStatic external fun instanceDrivers(handle: Long): String
    @JvmStatic external fun deviceCreate(instance: Long, uri: String, workers: Int): Long
    @JvmStatic external fun deviceRelease(handle: Long)
    @JvmStatic external fun deviceBatchWaits(handle: Long, set: Int): Boolean
    @JvmStatic external fun moduleLoad(device: Long, vmfb: ByteArray?, vmfbPath: String?, scopes: Array<String>, paths: Array<String>): Long
    @JvmStatic external fun moduleRelease(handle: Long)
    @JvmStatic external fun moduleTexts(handle: Long): Array<String>
    @JvmStatic external fun moduleLayout(handle: Long): LongArray
    @JvmStatic external fun parametersFromIndex(path: String): Array<String>
    @JvmStatic external fun valueFromFloats(module: Long, dtype: Int, dims: LongArray, data: FloatArray): Long
    @JvmStatic external fun valueFromInts(module: Long, dtype: Int, dims: LongArray, data: IntArray): Long
    @JvmStatic external fun valueFromLongs(module: Long, dtype: Int, dims: LongArray, data: LongArray): Long
    @JvmStatic external fun valueFromShorts(module: Long, dtype: Int, dims: LongArray, data: ShortArray): Long
    @JvmStatic external fun valueFromBytes(module: Long, dtype: Int, dims: LongArray, data: ByteArray): Long
    @JvmStatic external fun valueFromBuffer(module: Long, dtype: Int, dims: LongArray, data: ByteBuffer, position: Int, limit: Int): Long
    @JvmStatic external fun valueRelease(handle: Long)
    @JvmStatic external fun valueInfo(handle: Long): LongArray
    @JvmStatic external fun valueReadFloats(handle: Long, into: FloatArray)
    @JvmStatic external fun valueReadInts(handle: Long, into: IntArray)
    @JvmStatic external fun valueReadLongs(handle: Long, into: LongArray)
    @JvmStatic external fun valueReadShorts(handle: Long, into: ShortArray)
    @JvmStatic external fun valueReadBytes(handle: Long, into: ByteArray)
    @JvmStatic external fun valueReadBuffer(handle: Long, into: ByteBuffer, position: Int, limit: Int)
    @JvmStatic external fun call(module: Long, function: String, inputs: LongArray): LongArray
}
