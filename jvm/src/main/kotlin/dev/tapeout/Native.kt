package dev.tapeout

import java.io.File
import java.nio.file.Files
import java.nio.file.StandardCopyOption

/**
 * Finds and loads the native library `tapeout_jni`, trying in order:
 * 1. the system property `tapeout.native.path` or the environment variable `TAPEOUT_NATIVE_PATH` (a file);
 * 2. the jar resource `native/<os>-<arch>/<libname>`, copied to a temporary file (folder: `tapeout.native.tmpdir`);
 * 3. `System.loadLibrary("tapeout_jni")` through `java.library.path`.
 * If all fail, the error lists what was tried.
 */
object NativeLoader {
    private const val LIB = "tapeout_jni"

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

    /** Copies a library into a temporary file (folder: `tapeout.native.tmpdir`), deleted when the JVM exits. */
    private fun tempCopy(from: java.io.InputStream): String {
        val dir = System.getProperty("tapeout.native.tmpdir")?.let { File(it).toPath() }
        val tmp = if (dir != null) Files.createTempFile(dir, LIB, ".so") else Files.createTempFile(LIB, ".so")
        from.use { Files.copy(it, tmp, StandardCopyOption.REPLACE_EXISTING) }
        tmp.toFile().deleteOnExit()
        return tmp.toAbsolutePath().toString()
    }

    @Synchronized
    fun load(): String {
        loadedFrom?.let { return it }
        val tried = ArrayList<String>()
        val explicit = System.getProperty("tapeout.native.path") ?: System.getenv("TAPEOUT_NATIVE_PATH")
        if (explicit != null) {
            try {
                System.load(File(explicit).absolutePath)
                return "path:$explicit".also { loadedFrom = it }
            } catch (e: UnsatisfiedLinkError) {
                // The JVM binds a library file to one class loader; another loader gets its own copy.
                if (e.message?.contains("already loaded in another classloader") == true) {
                    val copy = tempCopy(File(explicit).inputStream())
                    System.load(copy)
                    return "path:$explicit (copy for this class loader)".also { loadedFrom = it }
                }
                tried += "tapeout.native.path=$explicit: ${e.message}"
            }
        }
        val resource = "/native/${platform()}/${System.mapLibraryName(LIB)}"
        val stream = NativeLoader::class.java.getResourceAsStream(resource)
        if (stream != null) {
            val tmp = tempCopy(stream)
            try {
                System.load(tmp)
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
        throw UnsatisfiedLinkError("cannot load the tapeout native library; tried:\n  " + tried.joinToString("\n  ") +
            "\nSet -Dtapeout.native.path=/path/to/${System.mapLibraryName(LIB)} to load a specific file.")
    }
}

/** The JNI entry points (rust/jni). */
internal object NativeBridge {
    init {
        NativeLoader.load()
    }

    @JvmStatic external fun finalize(graphJson: String, data: Array<Any?>, kinds: IntArray, encodings: Array<String?>,
                                     options: Int, forcedInputs: IntArray): String

    @JvmStatic external fun export(graphJson: String, data: Array<Any?>, kinds: IntArray, encodings: Array<String?>,
                                   options: Int, forcedInputs: IntArray, outDir: String, name: String,
                                   scope: String, inlineBelow: Long, maxArchiveBytes: Long): String

    @JvmStatic external fun toStableHlo(graphJson: String, data: Array<Any?>, kinds: IntArray, encodings: Array<String?>,
                                        options: Int, forcedInputs: IntArray, name: String, scope: String,
                                        inlineBelow: Long): String

    @JvmStatic external fun archiveEntry(path: String, key: String): LongArray

    /** A safetensors or GGUF file's tensors (absolute offsets) and metadata as JSON, read by the native reader. */
    @JvmStatic external fun describeWeights(path: String): String

    /** The names of every op of the native op table, comma-separated. */
    @JvmStatic external fun knownOps(): String

    /** Archive bytes written so far by the export in flight (callable from another thread). */
    @JvmStatic external fun progressWritten(): Long

    /** Archive bytes the export in flight will write; 0 before it has started. */
    @JvmStatic external fun progressTotal(): Long
}
