package dev.tapeout

/**
 * A model written as a tree of modules, as in PyTorch: each module has named children ([child], [ModuleList])
 * and parameters ([declare]), and a parameter's key is its path in the tree, exactly as `state_dict()` names it
 * (`model.layers.3.self_attn.q_proj.weight`). The root has no name; its children's names start the keys.
 *
 * A parameter's values come from a checkpoint loaded into the tape ([ExecutionTape.load]: by key, the bytes
 * staying in the file) or from an array bound to the module ([bind]). Asking for one key twice on one tape gives
 * one tensor, so a tied weight is one parameter.
 *
 * ```kotlin
 * class Block(d: Int) : Module() {
 *     val fc1 = child("fc1", Linear(d, 4 * d))
 *     val fc2 = child("fc2", Linear(4 * d, d))
 *     operator fun invoke(x: Tensor) = x + fc2(x.tape.gelu(fc1(x)))
 * }
 * ```
 */
abstract class Module {
    private var parent: Module? = null
    private var localName: String = ""
    private val childMap = LinkedHashMap<String, Module>()
    private val declared = LinkedHashMap<String, LongArray>()
    private val bound = HashMap<String, (ExecutionTape, String) -> Tensor>()

    /** This module's path from the root (`model.layers.3.self_attn`); `""` for the root. */
    val path: String
        get() {
            val p = parent ?: return ""
            val up = p.path
            return if (up.isEmpty()) localName else "$up.$localName"
        }

    /** The full key of this module's parameter [name]. */
    fun keyOf(name: String): String = if (path.isEmpty()) name else "$path.$name"

    /** The named children, in registration order. */
    val children: Map<String, Module> get() = childMap

    /** Registers [module] as the child [name] (PyTorch's attribute name, e.g. `q_proj`) and returns it. */
    protected fun <M : Module> child(name: String, module: M): M {
        require(name.isNotEmpty() && !name.contains('.')) { "child name '$name' must be non-empty and without dots" }
        require(name !in childMap && name !in declared) { "module '$path' already has a child or parameter '$name'" }
        require(module.parent == null) { "module ${module.javaClass.simpleName} is already the child '${module.path}'" }
        module.parent = this
        module.localName = name
        childMap[name] = module
        return module
    }

    /** Declares this module's parameter [name] with its shape (as PyTorch stores it, e.g. `[out, in]`). */
    protected fun declare(name: String, vararg shape: Int) {
        require(name !in childMap && name !in declared) { "module '$path' already has a child or parameter '$name'" }
        declared[name] = longs(shape)
    }

    /** Gives the parameter [name] these f32 [values] (row-major, its declared shape), borrowed, never copied. */
    fun bind(name: String, values: FloatArray): Module {
        val shape = declared[name] ?: throw IllegalArgumentException("module '$path' has no parameter '$name' (it has ${declared.keys})")
        bound[name] = { tape, key -> tape.weightAt(key, values, shape) }
        return this
    }

    /** Gives the parameter [name] 16-bit [bits] of [dtype] (bf16 or f16), kept as stored. */
    fun bindHalf(name: String, bits: ShortArray, dtype: DType): Module {
        val shape = declared[name] ?: throw IllegalArgumentException("module '$path' has no parameter '$name' (it has ${declared.keys})")
        bound[name] = { tape, key -> tape.halfWeightAt(key, bits, dtype, shape) }
        return this
    }

    /** Gives the parameter [name] packed GGML [blocks] of [encoding] (`Q8_0`, `Q4_K`, …) in its declared (logical) shape. */
    fun bindPacked(name: String, blocks: ByteArray, encoding: String): Module {
        val shape = declared[name] ?: throw IllegalArgumentException("module '$path' has no parameter '$name' (it has ${declared.keys})")
        bound[name] = { tape, key -> tape.packedWeightAt(key, blocks, encoding, shape) }
        return this
    }

    /** The parameter [name] of this module on [tape]: its bound array, else the loaded checkpoint's tensor of its key. */
    fun param(tape: ExecutionTape, name: String): Tensor {
        val shape = declared[name] ?: throw IllegalArgumentException("module '$path' has no parameter '$name' (it has ${declared.keys})")
        val key = keyOf(name)
        synchronized(tape.modules) { tape.modules.add(root) }
        val make = bound[name]
        return if (make != null) tape.keyedOrMake(key) { make(tape, key) } else tape.paramAt(key, shape)
    }

    /** The root of this module's tree. */
    internal val root: Module get() = parent?.root ?: this

    /** Whether this module's parameter [name] takes its values from elsewhere (a tied LM head's weight). */
    internal open fun isTied(name: String): Boolean = false

    /** Keys of the tree's parameters that no [bind] gave values and that are not tied: a checkpoint must have them. */
    internal fun unprovidedKeys(): List<String> =
        declared.keys.filter { it !in bound && !isTied(it) }.map { keyOf(it) } + childMap.values.flatMap { it.unprovidedKeys() }

    /** Every parameter key of the tree, depth first in registration order: the keys PyTorch's `state_dict()` lists. */
    fun stateDictKeys(): List<String> = declared.keys.map { keyOf(it) } + childMap.values.flatMap { it.stateDictKeys() }
}

/** PyTorch's `nn.ModuleList`: children named `0`, `1`, … */
class ModuleList<M : Module>(items: List<M>) : Module(), List<M> by items {
    init {
        items.forEachIndexed { i, m -> child(i.toString(), m) }
    }
}

/** PyTorch's `nn.Linear`: `weight [out, in]`, `bias [out]`; `y = x @ weightᵀ + bias` with no transpose in the module. */
class Linear(val inFeatures: Int, val outFeatures: Int, val bias: Boolean = true) : Module() {
    init {
        declare("weight", outFeatures, inFeatures)
        if (bias) declare("bias", outFeatures)
    }

    private var tied: Embedding? = null

    override fun isTied(name: String): Boolean = name == "weight" && tied != null

    /** Uses [embedding]'s table as this layer's weight (a tied LM head): one parameter, stored once. */
    fun tieTo(embedding: Embedding): Linear {
        require(embedding.embeddingDim == inFeatures && embedding.numEmbeddings == outFeatures) {
            "a [$outFeatures, $inFeatures] linear cannot use a [${embedding.numEmbeddings}, ${embedding.embeddingDim}] table"
        }
        tied = embedding
        return this
    }

    /** `linear(x, weight, bias)`. */
    operator fun invoke(x: Tensor): Tensor {
        val t = x.tape
        val w = tied?.param(t, "weight") ?: param(t, "weight")
        return t.linear(x, w, if (bias) param(t, "bias") else null)
    }
}

/** PyTorch's `nn.Embedding`: `weight [num, dim]`, rows gathered for integer ids. */
class Embedding(val numEmbeddings: Int, val embeddingDim: Int) : Module() {
    init {
        declare("weight", numEmbeddings, embeddingDim)
    }

    /** `embedding(weight, ids)`. */
    operator fun invoke(ids: Tensor): Tensor = ids.tape.embedding(param(ids.tape, "weight"), ids)
}

/** PyTorch's `nn.LayerNorm` over the last dimension: `weight`, `bias` `[dim]`. */
class LayerNorm(val dim: Int, val eps: Double = 1e-5) : Module() {
    init {
        declare("weight", dim)
        declare("bias", dim)
    }

    /** `layerNorm(x, weight, bias, eps)`. */
    operator fun invoke(x: Tensor): Tensor = x.tape.layerNorm(x, param(x.tape, "weight"), param(x.tape, "bias"), eps)
}

/** PyTorch's `nn.RMSNorm` (and Llama's `LlamaRMSNorm`) over the last dimension: `weight [dim]`. */
class RMSNorm(val dim: Int, val eps: Double = 1e-6) : Module() {
    init {
        declare("weight", dim)
    }

    /** `rmsNorm(x, weight, eps)`. */
    operator fun invoke(x: Tensor): Tensor = x.tape.rmsNorm(x, param(x.tape, "weight"), eps)
}

/** PyTorch's `nn.Conv2d` on NCHW: `weight [out, in / groups, kh, kw]` (OIHW), `bias [out]`. */
class Conv2d(
    val inChannels: Int,
    val outChannels: Int,
    val kernel: Int,
    val stride: Int = 1,
    val padding: Int = 0,
    val groups: Int = 1,
    val bias: Boolean = true,
) : Module() {
    init {
        declare("weight", outChannels, inChannels / groups, kernel, kernel)
        if (bias) declare("bias", outChannels)
    }

    /** `conv2d(x, weight, bias, …)`. */
    operator fun invoke(x: Tensor): Tensor = x.tape.conv2d(x, param(x.tape, "weight"), if (bias) param(x.tape, "bias") else null,
        stride = intArrayOf(stride, stride), padding = intArrayOf(padding, padding, padding, padding), groups = groups)
}
