package dev.tapeout.iree

import java.io.File
import java.nio.ByteBuffer

/** Element types of values, as tapeout's modules use them. [bytes] per element. */
enum class IreeDType(internal val code: Int, val bytes: Int, val mlir: String) {
    /** 32-bit float (`FloatArray`). */
    F32(0, 4, "f32"),
    /** 16-bit float, as its bits (`ShortArray`). */
    F16(1, 2, "f16"),
    /** bfloat16, as its bits (`ShortArray`). */
    BF16(2, 2, "bf16"),
    /** 64-bit float. */
    F64(3, 8, "f64"),
    /** 8-bit integer (`ByteArray`). */
    I8(4, 1, "i8"),
    /** 16-bit integer (`ShortArray`). */
    I16(5, 2, "i16"),
    /** 32-bit integer (`IntArray`). */
    I32(6, 4, "i32"),
    /** 64-bit integer (`LongArray`). */
    I64(7, 8, "i64"),
    /** Unsigned 8-bit integer (`ByteArray`). */
    U8(8, 1, "ui8"),
    /** Boolean, one byte each (`ByteArray` of 0/1). */
    BOOL(9, 1, "i1");

    override fun toString() = mlir

    internal companion object {
        fun of(code: Long): IreeDType? = values().firstOrNull { it.code.toLong() == code }
    }
}

/**
 * Something native that [close] frees once; using it afterwards is an [IllegalStateException] naming it. Every
 * native use holds a read lock and [close] the write lock, so a close from another thread waits for calls in flight
 * instead of freeing what they use.
 */
abstract class IreeHandle internal constructor(handle: Long, private val what: String) : AutoCloseable {
    private var handle: Long = handle
    internal val lock = java.util.concurrent.locks.ReentrantReadWriteLock()

    /** Runs `block` with the live native handle, the read lock held; a native failure becomes its typed exception. */
    internal inline fun <T> held(block: (Long) -> T): T {
        lock.readLock().lock()
        try {
            return native { block(liveLocked()) }
        } finally {
            lock.readLock().unlock()
        }
    }

    /** The handle, under a lock the caller holds. */
    internal fun liveLocked(): Long {
        val h = handle
        check(h != 0L) { "$what is closed" }
        return h
    }

    /** Whether [close] was called. */
    val isClosed: Boolean get() = lock.readLock().run { lock(); try { handle == 0L } finally { unlock() } }

    /** Frees the native object (a second call does nothing). */
    override fun close() {
        lock.writeLock().lock()
        try {
            val h = handle
            handle = 0L
            if (h != 0L) release(h)
        } finally {
            lock.writeLock().unlock()
        }
    }

    internal abstract fun release(handle: Long)
}

/**
 * IREE's runtime instance (one per process is plenty): the drivers this runtime was built with.
 *
 * ```kotlin
 * IreeInstance().use { iree ->
 *     iree.device("local-task", workers = 2).use { device ->
 *         IreeModule.load(device, File("model.vmfb"), listOf(IreeParameters.archive(File("model.irpa")))).use { m ->
 *             val logits = m.function("prefill").call(m.value(intArrayOf(1, 2, 3), 3))[0].toFloatArray()
 *         }
 *     }
 * }
 * ```
 */
class IreeInstance : IreeHandle(native { IreeNative.instanceCreate() }, "IreeInstance") {
    override fun release(handle: Long) = IreeNative.instanceRelease(handle)

    /** The HAL drivers of this runtime (`local-sync`, `local-task`, `vulkan`). */
    fun drivers(): List<String> = held { IreeNative.instanceDrivers(it) }.lines().filter { it.isNotEmpty() }

    /**
     * A device: `local-task` (IREE's multi-threaded CPU executor, [workers] threads; 0 lets IREE choose),
     * `local-sync` (the calling thread), `vulkan` (the first Vulkan 1.3 device; it runs modules compiled with
     * `IreeTarget.vulkan()`), or another driver's URI where the runtime was built with it.
     *
     * Where the driver finds nothing to run on (no Vulkan loader `libvulkan.so.1`, no Vulkan driver, no device) this
     * is an [IreeDeviceUnavailableException] saying what to install or to use `local-task`; a driver this runtime
     * lacks is an [IreeRuntimeException] listing those it has.
     */
    @JvmOverloads
    fun device(uri: String = "local-task", workers: Int = 0): IreeDevice {
        require(workers >= 0) { "workers = $workers: use 0 (IREE's choice) or more" }
        return IreeDevice(held { IreeNative.deviceCreate(it, uri, workers) }, uri)
    }

    /** The `local-sync` device: everything runs on the calling thread. */
    fun localSync(): IreeDevice = device("local-sync")
}

/** A HAL device of an [IreeInstance]. */
class IreeDevice internal constructor(handle: Long, /** Its URI. */ val uri: String) : IreeHandle(handle, "IreeDevice($uri)") {
    override fun release(handle: Long) = IreeNative.deviceRelease(handle)

    /**
     * Whether a thread waiting on this device's work (a call, a value made, a value read) waits under Linux's
     * SCHED_BATCH policy and then gets its own back: on by default. IREE 3.13's wait otherwise ends by spinning
     * while the worker thread it preempted on waking finishes (docs/performance.md, "A wait that preempts its own
     * worker"). Only a thread under the default policy is switched; off gives IREE's own wait.
     */
    var batchWaits: Boolean
        get() = held { IreeNative.deviceBatchWaits(it, -1) }
        set(on) {
            held { IreeNative.deviceBatchWaits(it, if (on) 1 else 0) }
        }

    override fun toString() = "IreeDevice($uri)"
}

/**
 * A parameter file and the scope the module names it by (`#flow.parameter.named<"model"::"key">`: scope `model`,
 * tapeout's default). The file is memory-mapped by the runtime: its pages are used in place, never read onto the
 * JVM heap.
 */
class IreeParameters(
    /** The scope (`""` for unscoped keys). */
    val scope: String,
    /** The .irpa (or .gguf / .safetensors) file. */
    val file: File,
) {
    override fun toString() = "$scope=$file"

    companion object {
        /** An archive under tapeout's default scope `model`. */
        @JvmStatic
        @JvmOverloads
        fun archive(file: File, scope: String = "model") = IreeParameters(scope, file)

        /**
         * Every shard of an archive set (`tapeout { maxArchiveBytes }`) from its `<name>.irpa.index.json`, under the
         * index's scope.
         */
        @JvmStatic
        fun set(index: File): List<IreeParameters> {
            val text = try {
                index.readText()
            } catch (e: java.io.IOException) {
                throw IreeIoException("reading $index: ${e.message}", index)
            }
            fun bad(what: String): Nothing = throw IreeParameterFileException("$index is not a tapeout archive index: $what", index)
            if (!Regex(""""format"\s*:\s*"tapeout-irpa-index/1"""").containsMatchIn(text)) bad("its \"format\" is not \"tapeout-irpa-index/1\"")
            val scope = Regex(""""scope"\s*:\s*"((?:[^"\\]|\\.)*)"""").find(text)?.groupValues?.get(1) ?: bad("no \"scope\"")
            val files = Regex(""""files"\s*:\s*\[([^\]]*)\]""").find(text)?.groupValues?.get(1) ?: bad("no \"files\" list")
            val names = Regex(""""((?:[^"\\]|\\.)*)"""").findAll(files).map { it.groupValues[1] }.toList()
            if (names.isEmpty()) bad("an empty \"files\" list")
            return names.map { IreeParameters(scope, File(index.absoluteFile.parentFile, it)) }
        }
    }
}

/** One argument or result: its name (`tapeout.name`), element type, and dimensions (`null` where `?`). */
class IreeParam internal constructor(
    /** The name. */
    val name: String,
    /** The element type; `null` when it is not a tensor of a type tapeout names. */
    val dtype: IreeDType?,
    /** The dimensions, `null` for a `?` one. */
    val dims: List<Long?>,
) {
    override fun toString() = "$name: ${dtype ?: "?"}[${dims.joinToString(", ") { it?.toString() ?: "?" }}]"
}

/**
 * A compiled module loaded on a device with its parameters ([load]). Its functions are [functions]; values for
 * them are made with [value] and stay on the device.
 */
class IreeModule private constructor(handle: Long, /** The device it runs on. */ val device: IreeDevice) :
    IreeHandle(handle, "IreeModule") {
    override fun release(handle: Long) = IreeNative.moduleRelease(handle)

    /** The exported functions, with their signatures. */
    val functions: List<IreeFunction> = parseFunctions(held { IreeNative.moduleFunctions(it) })

    /** The function `name`; [IreeNoSuchFunctionException] listing the others if there is none. */
    fun function(name: String): IreeFunction = functions.firstOrNull { it.name == name }
        ?: throw IreeNoSuchFunctionException(
            "the module has no function '$name'; it has: ${functions.joinToString(", ") { it.name }}",
            name,
            functions.map { it.name },
        )

    /** Calls function `name` (see [IreeFunction.call]). */
    fun call(name: String, vararg inputs: IreeValue): List<IreeValue> = function(name).call(*inputs)

    /** An f32 value of `shape` (a scalar when empty). */
    fun value(data: FloatArray, vararg shape: Long): IreeValue = make(IreeDType.F32, shape, data.size.toLong()) { h, d, s -> IreeNative.valueFromFloats(h, d, s, data) }

    /** An i32 value. */
    fun value(data: IntArray, vararg shape: Long): IreeValue = make(IreeDType.I32, shape, data.size.toLong()) { h, d, s -> IreeNative.valueFromInts(h, d, s, data) }

    /** An i64 value. */
    fun value(data: LongArray, vararg shape: Long): IreeValue = make(IreeDType.I64, shape, data.size.toLong()) { h, d, s -> IreeNative.valueFromLongs(h, d, s, data) }

    /** A bf16 value from its bits. */
    fun bf16(bits: ShortArray, vararg shape: Long): IreeValue = make(IreeDType.BF16, shape, bits.size.toLong()) { h, d, s -> IreeNative.valueFromShorts(h, d, s, bits) }

    /** An f16 value from its bits. */
    fun f16(bits: ShortArray, vararg shape: Long): IreeValue = make(IreeDType.F16, shape, bits.size.toLong()) { h, d, s -> IreeNative.valueFromShorts(h, d, s, bits) }

    /** A value of `dtype` from raw little-endian bytes. */
    fun value(bytes: ByteArray, dtype: IreeDType, vararg shape: Long): IreeValue =
        make(dtype, shape, null) { h, d, s -> IreeNative.valueFromBytes(h, d, s, bytes) }

    /** A value of `dtype` from a direct buffer's remaining bytes (little-endian), read in place. */
    fun value(buffer: ByteBuffer, dtype: IreeDType, vararg shape: Long): IreeValue {
        require(buffer.isDirect) { "value(ByteBuffer): use a direct buffer (ByteBuffer.allocateDirect); a heap buffer's bytes are in a ByteArray" }
        return make(dtype, shape, null) { h, d, s -> IreeNative.valueFromBuffer(h, d, s, buffer, buffer.position(), buffer.limit()) }
    }

    private inline fun make(dtype: IreeDType, shape: LongArray, elements: Long?, create: (Long, Int, LongArray) -> Long): IreeValue {
        if (elements != null) {
            val want = shape.fold(1L) { a, d -> Math.multiplyExact(a, d) }
            if (want != elements) {
                throw IreeSizeException("a $dtype value of shape ${shape.contentToString()} holds $want elements; given $elements",
                    want * dtype.bytes, elements * dtype.bytes)
            }
        }
        return IreeValue(held { create(it, dtype.code, shape) }, this)
    }

    companion object {
        /** Loads `vmfb` (read off the JVM heap) on `device` with its parameter files. */
        @JvmStatic
        @JvmOverloads
        fun load(device: IreeDevice, vmfb: File, parameters: List<IreeParameters> = emptyList()): IreeModule =
            IreeModule(device.held { IreeNative.moduleLoad(it, null, vmfb.path, scopes(parameters), paths(parameters)) }, device)

        /** Loads a compiled module from its bytes on `device` with its parameter files. */
        @JvmStatic
        @JvmOverloads
        fun load(device: IreeDevice, vmfb: ByteArray, parameters: List<IreeParameters> = emptyList()): IreeModule =
            IreeModule(device.held { IreeNative.moduleLoad(it, vmfb, null, scopes(parameters), paths(parameters)) }, device)

        private fun scopes(p: List<IreeParameters>) = p.map { it.scope }.toTypedArray()
        private fun paths(p: List<IreeParameters>) = p.map { it.file.path }.toTypedArray()

        private fun unescape(s: String): String {
            val out = StringBuilder()
            var i = 0
            while (i < s.length) {
                val c = s[i]
                if (c == '\\' && i + 1 < s.length) {
                    out.append(when (s[i + 1]) { 't' -> '\t'; 'n' -> '\n'; else -> s[i + 1] })
                    i += 2
                } else {
                    out.append(c)
                    i++
                }
            }
            return out.toString()
        }

        private fun IreeModule.parseFunctions(listing: String): List<IreeFunction> {
            val functions = ArrayList<IreeFunction>()
            var name = ""
            var declaration = ""
            var inputs = ArrayList<IreeParam>()
            var outputs = ArrayList<IreeParam>()
            fun flush() {
                if (name.isNotEmpty()) functions += IreeFunction(this, name, inputs, outputs, declaration)
            }
            for (line in listing.split('\n')) {
                val parts = line.split('\t')
                when (parts[0]) {
                    "F" -> {
                        flush()
                        name = unescape(parts[1])
                        declaration = unescape(parts.getOrElse(2) { "" })
                        inputs = ArrayList()
                        outputs = ArrayList()
                    }
                    "I", "O" -> {
                        val dims = if (parts[3].isEmpty()) emptyList() else parts[3].split(',').map { if (it == "?") null else it.toLong() }
                        val p = IreeParam(unescape(parts[1]), IreeDType.of(parts[2].toLong()), dims)
                        if (parts[0] == "I") inputs += p else outputs += p
                    }
                }
            }
            flush()
            return functions
        }
    }
}

/** An exported function of an [IreeModule]: its name, arguments and results as the module declares them. */
class IreeFunction internal constructor(
    private val module: IreeModule,
    /** The name. */
    val name: String,
    /** The arguments, in call order. */
    val inputs: List<IreeParam>,
    /** The results, in order. */
    val outputs: List<IreeParam>,
    /** IREE's `iree.abi.declaration` of it. */
    val declaration: String,
) {
    /**
     * Calls the function. The results stay on the device: pass one straight to the next call (a KV cache from one
     * decode step to the next) without a copy to the host. Arity, element types and static dimensions are checked
     * against the signature first ([IreeArityException], [IreeDTypeException], [IreeShapeException], naming the
     * argument).
     */
    fun call(vararg inputs: IreeValue): List<IreeValue> {
        // Every argument's read lock, then the module's: none can be closed while the call uses it.
        val locked = ArrayList<IreeHandle>()
        try {
            val handles = LongArray(inputs.size) { i ->
                inputs[i].lock.readLock().lock()
                locked += inputs[i]
                try {
                    inputs[i].liveLocked()
                } catch (e: IllegalStateException) {
                    throw IllegalStateException("$name argument $i '${this.inputs.getOrNull(i)?.name ?: "?"}': ${e.message}")
                }
            }
            return module.held { IreeNative.call(it, name, handles) }.map { IreeValue(it, module) }
        } finally {
            locked.forEach { it.lock.readLock().unlock() }
        }
    }

    override fun toString() = "$name(${inputs.joinToString(", ")}) -> (${outputs.joinToString(", ")})"
}

/**
 * A tensor on the device (an IREE buffer view). Reading it ([toFloatArray], [readInto], ...) copies it to the host;
 * passing it to a call does not. [close] frees it (values also keep their module's runtime session alive).
 */
class IreeValue internal constructor(handle: Long, private val module: IreeModule) : IreeHandle(handle, "IreeValue") {
    override fun release(handle: Long) = IreeNative.valueRelease(handle)

    private val info: LongArray by lazy { held { IreeNative.valueInfo(it) } }

    /** The element type (`null`: a type tapeout does not name). */
    val dtype: IreeDType? get() = IreeDType.of(info[0])

    /** The size in bytes. */
    val byteLength: Long get() = info[1]

    /** The dimensions. */
    val shape: LongArray get() = info.copyOfRange(3, 3 + info[2].toInt())

    private fun elements(bytes: Int, what: String, vararg allowed: IreeDType): Int {
        val d = dtype
        check(d in allowed) { "$what of a ${d ?: "?"} value: use ${allowed.joinToString(" or ")}" }
        val n = byteLength / bytes
        check(n <= Int.MAX_VALUE) { "the value has $n elements, more than a JVM array holds: read it into a direct ByteBuffer" }
        return n.toInt()
    }

    /** Its f32 elements. */
    fun toFloatArray(): FloatArray = FloatArray(elements(4, "toFloatArray", IreeDType.F32)).also { readInto(it) }

    /** Its i32 elements. */
    fun toIntArray(): IntArray = IntArray(elements(4, "toIntArray", IreeDType.I32)).also { held { h -> IreeNative.valueReadInts(h, it) } }

    /** Its i64 elements. */
    fun toLongArray(): LongArray = LongArray(elements(8, "toLongArray", IreeDType.I64)).also { held { h -> IreeNative.valueReadLongs(h, it) } }

    /** Its 16-bit elements (bf16 / f16 bits, or i16). */
    fun toShortArray(): ShortArray =
        ShortArray(elements(2, "toShortArray", IreeDType.BF16, IreeDType.F16, IreeDType.I16)).also { held { h -> IreeNative.valueReadShorts(h, it) } }

    /** Its bytes (little-endian). */
    fun toByteArray(): ByteArray {
        check(byteLength <= Int.MAX_VALUE) { "the value has $byteLength bytes, more than a JVM array holds: read it into a direct ByteBuffer" }
        return ByteArray(byteLength.toInt()).also { held { h -> IreeNative.valueReadBytes(h, it) } }
    }

    /** Copies its f32 elements into `into` (exactly as many). */
    fun readInto(into: FloatArray) {
        check(dtype == IreeDType.F32) { "readInto(FloatArray) of a $dtype value" }
        held { h -> IreeNative.valueReadFloats(h, into) }
    }

    /** Copies its bytes into a direct buffer's remaining space (exactly [byteLength] bytes), then advances its position. */
    fun readInto(into: ByteBuffer) {
        require(into.isDirect) { "readInto(ByteBuffer): use a direct buffer" }
        held { h -> IreeNative.valueReadBuffer(h, into, into.position(), into.position() + Math.toIntExact(byteLength).coerceAtMost(into.remaining())) }
        into.position(into.position() + byteLength.toInt())
    }

    override fun toString() = if (isClosed) "IreeValue(closed)" else "IreeValue(${dtype ?: "?"}${shape.contentToString()})"
}
