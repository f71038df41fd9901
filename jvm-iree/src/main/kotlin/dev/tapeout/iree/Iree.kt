package dev.tapeout.iree

import java.io.File
import java.nio.ByteBuffer

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
class IreeInstance : IreeHandle(native { IreeNative.instanceCreate() }, "IreeInstance", IreeNative::instanceRelease) {

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

/**
 * A HAL device of an [IreeInstance]. It may be shared across threads, and serve several modules at once.
 */
class IreeDevice internal constructor(handle: Long, /** Its URI. */ val uri: String) :
    IreeHandle(handle, "IreeDevice($uri)", IreeNative::deviceRelease) {

    /**
     * Whether a thread waiting on this device's work (a call, a value made, a value read) waits under Linux's
     * SCHED_BATCH policy and then gets its own back: off by default, since the caller's thread is the caller's.
     * It works around IREE 3.13's wait, which ends by spinning while the worker thread it preempted on waking
     * finishes (docs/performance.md#serving-from-the-jvm). On a machine with no spare core, turning it on makes a
     * small call several times faster. Only a thread under the default policy is switched, and only
     * for the wait.
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
            val read = native { IreeNative.parametersFromIndex(index.path) }
            return read.drop(1).map { IreeParameters(read[0], File(it)) }
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
 *
 * **Threads.** A module may be shared across threads: its calls are serialized (IREE's VM context is not
 * thread-safe; one call runs at a time, the others wait), while values are made and read from any thread at once.
 * Closing it from one thread while another calls waits for the call. A value belongs to the module that made it.
 */
class IreeModule private constructor(handle: Long, /** The device it runs on. */ val device: IreeDevice) :
    IreeHandle(handle, "IreeModule", IreeNative::moduleRelease) {

    /** The exported functions, with their signatures. */
    val functions: List<IreeFunction> = held { readFunctions(IreeNative.moduleTexts(it), IreeNative.moduleLayout(it)) }

    /** The function `name`; [IreeNoSuchFunctionException] listing the others if there is none. */
    fun function(name: String): IreeFunction = functions.firstOrNull { it.name == name }
        ?: throw IreeNoSuchFunctionException(
            "the module has no function '$name'; it has: ${functions.joinToString(", ") { it.name }}",
            name,
            functions.map { it.name },
        )

    /** Calls function `name` (see [IreeFunction.call]). */
    fun call(name: String, vararg inputs: IreeValue): IreeResults = function(name).call(*inputs)

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

    /**
     * A value of `dtype` from a direct buffer's remaining bytes (little-endian), read in place. Its pages are checked
     * readable first, so that a mapped file truncated after it was mapped is an [IreeUsageException] rather than a
     * fault in native code (a file truncated during the call itself still faults).
     */
    fun value(buffer: ByteBuffer, dtype: IreeDType, vararg shape: Long): IreeValue {
        if (!buffer.isDirect) {
            throw IreeUsageException("value(ByteBuffer): use a direct buffer (ByteBuffer.allocateDirect); a heap buffer's bytes are in a ByteArray")
        }
        return make(dtype, shape, null) { h, d, s -> IreeNative.valueFromBuffer(h, d, s, buffer, buffer.position(), buffer.limit()) }
    }

    private inline fun make(dtype: IreeDType, shape: LongArray, elements: Long?, create: (Long, Int, LongArray) -> Long): IreeValue {
        val negative = shape.indexOfFirst { it < 0 }
        if (negative >= 0) throw IreeUsageException("a $dtype value of shape ${shape.contentToString()}: dimension $negative is negative")
        if (elements != null) {
            val want = try {
                shape.fold(1L) { a, d -> Math.multiplyExact(a, d) }
            } catch (e: ArithmeticException) {
                throw IreeSizeException("a $dtype value of shape ${shape.contentToString()} has more elements than a 64-bit count holds; given $elements", Long.MAX_VALUE, elements)
            }
            if (want != elements) {
                val bytes = { n: Long -> if (n > Long.MAX_VALUE / dtype.bytes) Long.MAX_VALUE else n * dtype.bytes }
                throw IreeSizeException("a $dtype value of shape ${shape.contentToString()} holds $want elements; given $elements",
                    bytes(want), bytes(elements))
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

        /** The functions from the module's signature texts and layout (rust/iree-jni: moduleTexts, moduleLayout). */
        private fun IreeModule.readFunctions(texts: Array<String>, layout: LongArray): List<IreeFunction> {
            var t = 0
            var n = 0
            fun param(): IreeParam {
                val name = texts[t++]
                val dtype = IreeDType.of(layout[n++])
                val dims = List(layout[n++].toInt()) { layout[n++].takeIf { it >= 0 } }
                return IreeParam(name, dtype, dims)
            }
            return List(layout[n++].toInt()) {
                val name = texts[t++]
                val declaration = texts[t++]
                val (inputs, outputs) = layout[n++].toInt() to layout[n++].toInt()
                val ins = List(inputs) { param() }
                IreeFunction(this, name, ins, List(outputs) { param() }, declaration)
            }
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
     * argument); a value another module made is an [IreeForeignValueException].
     *
     * The results are an [IreeResults]: close it (or each value) when done, e.g. `call(x).use { r -> … }`, to free
     * their device memory at once; results never closed are freed once the garbage collector finds them.
     */
    fun call(vararg inputs: IreeValue): IreeResults {
        for ((i, v) in inputs.withIndex()) {
            if (v.module !== module) {
                val what = "$name argument $i '${this.inputs.getOrNull(i)?.name ?: "?"}'"
                throw IreeForeignValueException("$what belongs to another module; values stay with the module (and device) that made them", what)
            }
        }
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
            return IreeResults(module.held { IreeNative.call(it, name, handles) }.map { IreeValue(it, module) })
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
class IreeValue internal constructor(handle: Long, internal val module: IreeModule) :
    IreeHandle(handle, "IreeValue", IreeNative::valueRelease) {

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

    /**
     * Copies its bytes into a direct, writable buffer's remaining space (exactly [byteLength] bytes), then advances its
     * position. A read-only buffer is an [IreeUsageException]; its pages are checked first, as in [IreeModule.value].
     */
    fun readInto(into: ByteBuffer) {
        if (!into.isDirect) throw IreeUsageException("readInto(ByteBuffer): use a direct buffer (ByteBuffer.allocateDirect)")
        if (into.isReadOnly) throw IreeUsageException("readInto(ByteBuffer): the buffer is read-only; pass a writable one")
        held { h -> IreeNative.valueReadBuffer(h, into, into.position(), into.position() + Math.toIntExact(byteLength).coerceAtMost(into.remaining())) }
        into.position(into.position() + byteLength.toInt())
    }

    override fun toString() = if (isClosed) "IreeValue(closed)" else "IreeValue(${dtype ?: "?"}${shape.contentToString()})"
}

/**
 * The results of a call, in order: a list of values that [close] frees together. Use it with `use { }` so that a
 * loop of calls frees each step's results; keep a value past it by not closing the set (close the value itself later).
 */
class IreeResults internal constructor(private val values: List<IreeValue>) : List<IreeValue> by values, AutoCloseable {
    /** Frees every value (one already closed is skipped). */
    override fun close() = values.forEach { it.close() }

    override fun toString() = values.toString()
}
