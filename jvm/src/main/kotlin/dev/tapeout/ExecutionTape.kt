package dev.tapeout

/** One recorded operation. [site] is the line of your code that recorded it, if the tape captures call sites. */
class TapeOp internal constructor(
    val op: String,
    val inputs: List<Tensor>,
    val outputs: List<Tensor>,
    val attrs: Map<String, Any>,
    val site: StackTraceElement? = null,
)

/**
 * Records what a model does: tensors (inputs, weights that borrow your arrays or stay in checkpoint files,
 * activations) and the ops between them. Each op function infers its result's shape and dtype, records the op,
 * and returns the result, so a model is written as ordinary Kotlin: `val h = relu(x matmul w + b)` (operators:
 * `Operators.kt`) or `tape.relu(tape.add(tape.matmul(x, w), b))`. Mark the results with [output].
 *
 * The tape is split by job: this file is the recorder (tensors, ops, names, call sites, module scopes and keys);
 * the tensors it starts from are [TapeSources] (`Weights.kt`); the ops are [ElementwiseOps], [ShapeOps] and
 * [LayerOps] (one file each), every one named by the native op table ([Op], `OpTable.kt`); the 16-bit dtype
 * policy is `DTypePolicy.kt` and the graph JSON `GraphJson.kt`.
 *
 * Parameter keys come from the module path: inside [scope]`("model.layers.3") { … }`, `weight("q.weight", …)`
 * is keyed `model.layers.3.q.weight`, as PyTorch's `state_dict()` names it ([Module] does this for you).
 *
 * [compute] is the float type of solitary uses of 16-bit weights: with the default `F32`, an op whose only float
 * operand is a bf16/f16 weight (a gather, a transpose) computes in f32; with `BF16`/`F16`, in that type. A
 * 16-bit weight combined with an activation takes the activation's type when it is its own (a bf16 weight with a
 * bf16 activation computes in bf16) and f32 otherwise; one weight is seen in one type for the whole tape.
 * [captureSites] records the line of your code behind each op (one stack walk per op), which errors name.
 *
 * [toComputeGraph] takes a snapshot: recording more afterwards does not change the [ComputeGraph] made before.
 */
class ExecutionTape(val compute: DType = DType.F32, val captureSites: Boolean = true) :
    TapeSources, ElementwiseOps, ShapeOps, LayerOps {
    init {
        require(compute.isFloat) { "compute must be a float type, not $compute" }
    }

    private val tensorList = ArrayList<Tensor>()
    private val opList = ArrayList<TapeOp>()
    private val outputList = ArrayList<Tensor>()
    private val declaredInputs = LinkedHashSet<Int>()
    private val names = HashMap<String, Tensor>()
    private val scopes = ArrayList<String>()
    internal val checkpoints = ArrayList<Checkpoint>()
    /** The root modules whose parameters were asked for on this tape ([Module.param]), for [checkpointReport]. */
    internal val modules = LinkedHashSet<Module>()
    private val byKey = HashMap<String, Tensor>()

    /** Scalars made by [scalar], one per value and dtype. */
    internal val scalars = HashMap<Pair<Double, DType>, Tensor>()

    /** Rank-2 weights already transposed by [linear], by tensor id: one transpose per weight. */
    internal val transposed = HashMap<Int, Tensor>()

    /** How ops see 16-bit weights. */
    internal val dtypes = DTypePolicy(this)

    val tensors: List<Tensor> get() = tensorList
    val ops: List<TapeOp> get() = opList
    val outputs: List<Tensor> get() = outputList

    /** Tensors created with [input]. */
    val inputIds: Set<Int> get() = declaredInputs

    internal fun newTensor(name: String?, shape: LongArray, dtype: DType, path: String?, data: TensorData): Tensor {
        val id = tensorList.size
        var n = name ?: "t$id"
        // Generated names step aside for names the user chose.
        if (name == null) while (names.containsKey(n)) n = "t$id.${names.size}"
        if (names.containsKey(n)) {
            throw GraphValidationException("tensor name '$n' is used twice (first ${names.getValue(n).description}); " +
                "give each input and output its own name")
        }
        val t = Tensor(id, n, shape, dtype, path, data, this, callSite())
        tensorList.add(t)
        names[n] = t
        return t
    }

    /** [newTensor] for a runtime input declared with [input]. */
    internal fun newInput(name: String, shape: LongArray, dtype: DType): Tensor =
        newTensor(name, shape, dtype, null, ShapeOnly).also { declaredInputs.add(it.id) }

    /** The first stack frame outside the tapeout library: the line of the model that is being recorded. */
    private fun callSite(): StackTraceElement? {
        if (!captureSites) return null
        return Throwable().stackTrace.firstOrNull { !isLibraryFrame(it) }
    }

    /** ` at File.kt:LINE` of the calling model code, or nothing. */
    internal fun at(): String = callSite()?.let { " at ${siteText(it)}" } ?: ""

    /** Throws a [GraphValidationException] naming the op, the site that records it, and its operands. */
    internal fun fail(op: String, operands: List<Tensor>, detail: String): Nothing {
        val what = if (operands.isEmpty()) "" else " of " + operands.joinToString(", ") { it.description }
        throw GraphValidationException("$op${at()}$what: $detail")
    }

    /** [fail] for an op of the table. */
    internal fun fail(op: Op, operands: List<Tensor>, detail: String): Nothing = fail(op.opName, operands, detail)

    // --- scopes and keys ------------------------------------------------------------------------

    /** The module path of the innermost [scope] (`""` outside any). */
    val currentScope: String get() = scopes.lastOrNull() ?: ""

    /** The parameter key of [name] in the current scope: `model.layers.3.` + [name]. */
    fun key(name: String): String = if (scopes.isEmpty()) name else "$currentScope.$name"

    /**
     * Runs [block] with [name] appended to the module path (`scope("model") { scope("layers.0") { … } }` is
     * `model.layers.0`): weight paths and [param] names inside are relative to it.
     */
    fun <T> scope(name: String, block: ExecutionTape.() -> T): T {
        require(name.isNotEmpty() && !name.startsWith('.') && !name.endsWith('.')) { "scope name '$name' must be a non-empty dotted path" }
        scopes.add(key(name))
        try {
            return block()
        } finally {
            scopes.removeAt(scopes.size - 1)
        }
    }

    /** Makes [checkpoint]'s tensors available to [param] by their names (its keys). */
    fun load(checkpoint: Checkpoint) {
        checkpoints.add(checkpoint)
    }

    /**
     * The parameter [name] of the current scope (key [key]`(name)`), from a checkpoint given to [load]. Asking
     * twice for one key gives the same tensor: one parameter, one archive entry (a tied embedding and LM head).
     * [shape], when given, is checked against the stored shape.
     */
    fun param(name: String, vararg shape: Int): Tensor = paramAt(key(name), longs(shape).takeIf { shape.isNotEmpty() })

    /** [param] by full key; [shape] checked when given. */
    internal fun paramAt(k: String, shape: LongArray?): Tensor {
        val t = byKey[k] ?: run {
            val found = checkpoints.firstNotNullOfOrNull { it.tensors[k] }
                ?: fail("param", emptyList(), "no checkpoint given to load() has a tensor '$k'" + suggestKeys(k, checkpoints))
            checkpointWeightAt(k, found)
        }
        if (shape != null && !t.shape.contentEquals(shape)) {
            fail("param", listOf(t), "the module expects shape ${shapeText(shape)}")
        }
        return t
    }

    /** The tensor already keyed [k] on this tape, else [make]'s. */
    internal fun keyedOrMake(k: String, make: () -> Tensor): Tensor = byKey[k] ?: make()

    /** Registers [t] as the tensor of key [path] (the first one keeps it) and returns it. */
    internal fun keyed(path: String, t: Tensor): Tensor {
        byKey.putIfAbsent(path, t)
        return t
    }

    // --- results and recording ------------------------------------------------------------------

    /** Marks the model's results, in order. */
    fun output(vararg results: Tensor) {
        outputList.addAll(results)
    }

    /**
     * Marks [result] as the next result, named [name] (its `tapeout.name` in the module, and its name in the graph),
     * and returns the tensor that carries that name: [result] itself, or, when [result] is an [input], a weight
     * or constant, or already a result, a copy of it (a `convert` to its own dtype), so that the input keeps its
     * argument name, a weight its parameter key, and each result its own name.
     */
    fun output(name: String, result: Tensor): Tensor {
        if (result.tape !== this) fail("output", listOf(result), "the tensor belongs to another tape")
        val other = names[name]
        if (other != null && other !== result) fail("output", listOf(result), "the name '$name' is already ${other.description}")
        val keepsItsName = result.id in declaredInputs || result.data !== ShapeOnly || outputList.any { it === result }
        if (keepsItsName && other === result) fail("output", listOf(result), "the name '$name' is already this tensor's own")
        val named = if (keepsItsName) record(Op.CONVERT, listOf(result), result.shape, result.dtype) else result
        names.remove(named.name)
        named.name = name
        names[name] = named
        outputList.add(named)
        return named
    }

    /**
     * Records [op] with explicitly given result shape and dtype (for ops the tracing API does not cover). An op of
     * the native table ([Op]) is checked against its operand count here, so a wrong count names this line; a name
     * the table does not have is left to the native side, which refuses it when the graph is made.
     */
    fun record(op: String, inputs: List<Tensor>, shape: LongArray, dtype: DType, attrs: Map<String, Any> = emptyMap(), name: String? = null): Tensor {
        val known = Op.named(op)
        if (known != null) return record(known, inputs, shape, dtype, attrs, name)
        return append(op, inputs, shape, dtype, attrs, name)
    }

    /** Records [op] of the table, its operand count checked against the table. */
    internal fun record(op: Op, inputs: List<Tensor>, shape: LongArray, dtype: DType, attrs: Map<String, Any> = emptyMap(), name: String? = null): Tensor {
        if (!op.acceptsInputs(inputs.size)) {
            fail(op, inputs, "takes ${op.inputsText} operands (the native op table), not ${inputs.size}")
        }
        return append(op.opName, inputs, shape, dtype, attrs, name)
    }

    private fun append(op: String, inputs: List<Tensor>, shape: LongArray, dtype: DType, attrs: Map<String, Any>, name: String?): Tensor {
        for (t in inputs) if (t.tape !== this) fail(op, inputs, "${t.description} belongs to another tape")
        val out = newTensor(name, shape.copyOf(), dtype, null, ShapeOnly)
        // Copies: a list or map the caller changes later does not change the recorded op.
        opList.add(TapeOp(op, inputs.toList(), listOf(out), LinkedHashMap(attrs), out.site))
        return out
    }

    /** The tape as it is now, unchangeable: what [toComputeGraph] keeps, so later recording does not alter a graph. */
    internal fun snapshot(): TapeSnapshot = TapeSnapshot(this, tensorList.toList(), tensorList.map { it.name }, opList.toList(), outputList.toList())

    /** The tape as tapeout's graph JSON (`tapeout-graph/1`); JVM data travels separately, by reference. */
    internal fun toGraphJson(name: String): String = snapshot().toGraphJson(name)
}

/** Source files of the tapeout library, whose frames a call site skips (every file of jvm/src/main, a test checks). */
internal val LIBRARY_FILES = setOf(
    "ExecutionTape.kt", "Weights.kt", "ElementwiseOps.kt", "ShapeOps.kt", "LayerOps.kt", "DTypePolicy.kt", "OpTable.kt",
    "GraphJson.kt", "Bits.kt", "Operators.kt", "Modules.kt", "Checkpoints.kt", "Tensors.kt", "ComputeGraph.kt",
    "ModuleExport.kt", "Json.kt", "Native.kt", "Exceptions.kt", "ExportMain.kt", "NativeBoundary.kt", "NativeContract.kt",
    "ModuleSignature.kt", "HfConfig.kt", "Rotary.kt",
)

/** A frame of the tapeout library itself (or of the JDK and Kotlin runtime), which a call site skips. */
internal fun isLibraryFrame(e: StackTraceElement): Boolean {
    val c = e.className
    if (c.startsWith("java.") || c.startsWith("jdk.") || c.startsWith("kotlin.") || c.startsWith("sun.")) return true
    return c.startsWith("dev.tapeout.") && c.lastIndexOf('.') == "dev.tapeout".length && e.fileName in LIBRARY_FILES
}
