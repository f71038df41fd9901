package dev.tapeout

import dev.tapeout.TestSupport.tempDir
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder
import kotlin.random.Random

/**
 * The property of issue 27's "never an invalid module", first half: random small graphs (1..6 ops from a wide mix,
 * random static sizes including 1 and odd ones, and `?` dimensions) recorded through the public Kotlin API, each
 * either refused — at the recording line or at export — with a message that names the op and the line of this file
 * that recorded it, or exported. An exported case is written (graph JSON, weights, module, archive, and a
 * `case.json` with the run-time sizes of `?` and the value ranges of integer inputs) for the second half,
 * tests/iree/test_random_graphs.py, which compiles and runs every case with IREE at two run-time sizes and compares
 * it with the numpy interpreter (tests/graphs/reference.py).
 *
 * `TAPEOUT_RANDOM_GRAPHS_DIR` (where the cases go; a temporary directory otherwise), `TAPEOUT_RANDOM_GRAPHS_COUNT`
 * (default 60) and `TAPEOUT_RANDOM_GRAPHS_SEED` (the first seed, default 27000) steer it. Case `n` is seed
 * `SEED + n`, so a failing case is regenerated alone with `COUNT=1 SEED=<its seed>`.
 *
 * Shapes are tracked symbolically: a dimension is a static size (>= 0) or `-k`, meaning k times the one run-time
 * size S of the case (concatenating two `?` axes gives 2S). The generator only combines `?` dimensions of the same
 * multiple (or against 1), which is what makes a graph meaningful at run time; besides the valid choices it makes a
 * deliberately wrong one now and then (a mismatched dimension, an axis out of range, a negative length, a half-width
 * rope table …), which must be refused.
 */
class RandomGraphPropertyTest {
    private val sourceFile: File? = run {
        val repo = System.getProperty("tapeout.repo")?.let(::File) ?: File("..")
        File(repo, "jvm/src/test/kotlin/dev/tapeout/RandomGraphPropertyTest.kt").takeIf { it.isFile }
    }
    private val sourceLines: List<String> = sourceFile?.readLines() ?: emptyList()

    /** The Kotlin calls that record each op (what the line an error names must call). */
    private val callsOf = mapOf(
        "reduce_sum" to listOf("reduceSum"), "reduce_mean" to listOf("reduceMean"), "reduce_max" to listOf("reduceMax"),
        "layer_norm" to listOf("layerNorm"), "rms_norm" to listOf("rmsNorm"), "causal_mask" to listOf("causalMask"),
        "dynamic_slice" to listOf("dynamicSlice"),
        // Ops a composite call records at the caller's line.
        "broadcast" to listOf("broadcast", "expand"), "iota" to listOf("iota", "arange"),
        "reshape" to listOf("reshape", "repeatKv"), "concat" to listOf("concat", "repeatKv"),
    )

    /**
     * Known bugs: a problem of this test whose text matches the pattern is listed (printed and in summary.json)
     * instead of failing the test, under the name, with its reproducer. Remove an entry when its fix is merged.
     */
    private val knownBugs: Map<String, Pair<Regex, String>> = mapOf(
        // Fixed by wt-dyn (merged): "slice-limit-minus-one", ShapeOps.slice computing (limit - start + stride - 1)
        // / stride also for the documented limit -1, so `t.slice(t.input("x", 5), longArrayOf(0), longArrayOf(-1))`
        // recorded [-1] (read as `?`), [-2] (export: `invalid graph JSON file: tensor "y": shape entries must be
        // sizes or "?"`, naming no line) or 0.
    )

    /**
     * Refusals of graphs the generator made valid that are allowed for now (the message still names the op and
     * the line): each a limitation being lifted or documented. A valid graph refused for any other reason fails.
     */
    private val knownRefusals = mapOf<String, Pair<Regex, String>>(
        // Lifted: gather on tensors with `?` dims, concat along a `?` axis; sdpa with a `?` head dimension is now
        // refused at the recording line, so the generator counts it as a deliberately invalid choice.
    )

    private class Sym(val t: Tensor, val sym: LongArray, val leaf: Boolean)

    private class Case(val seed: Long, val rng: Random, val sizes: IntArray) {
        val t = ExecutionTape()
        val pool = ArrayList<Sym>()
        val symOf = HashMap<Int, LongArray>()
        val inputs = LinkedHashMap<String, Pair<LongArray, Long>>() // name -> (sym shape, exclusive high for ints; 0 = float)
        val weights = LinkedHashMap<String, Pair<LongArray, FloatArray>>()
        val ops = ArrayList<String>()
        var invalid = ArrayList<String>() // the deliberately wrong choices made
        val mismatches = ArrayList<String>()
        var bf16 = false
        var n = 0
        val minS get() = sizes.min().toLong()
    }

    private fun dims(sym: LongArray) = LongArray(sym.size) { if (sym[it] < 0) DYNAMIC else sym[it] }
    private fun symText(sym: LongArray) = sym.joinToString(",", "[", "]") { if (it < 0) (if (it == -1L) "S" else "${-it}S") else "$it" }
    private fun Random.dim() = listOf(1L, 2, 3, 4, 5, 7, 1, 3)[nextInt(8)]
    private fun Random.chance(p: Double) = nextDouble() < p

    private fun add(c: Case, t: Tensor, sym: LongArray, leaf: Boolean = false): Sym {
        if (!t.shape.contentEquals(dims(sym))) {
            // Kotlin inferred another shape than NumPy's rules give: a bug when every choice was valid; after a
            // deliberately wrong one that was accepted, the export or IREE has to catch it.
            c.mismatches += "${c.t.ops.lastOrNull()?.op}: Kotlin inferred ${shapeText(t.shape)}, NumPy's rules give ${symText(sym)}"
        }
        val s = Sym(t, sym, leaf)
        c.symOf[t.id] = sym
        c.pool += s
        return s
    }

    /** A new f32 leaf of [sym]: a weight when it is static (sometimes), a run-time input otherwise. */
    private fun leaf(c: Case, sym: LongArray, forceInput: Boolean = false): Sym {
        val name = "v${c.n++}"
        if (!forceInput && sym.all { it >= 0 } && c.rng.chance(0.4)) {
            val count = sym.fold(1L) { a, d -> a * d }.toInt()
            val values = FloatArray(count) { (c.rng.nextDouble(-1.0, 1.0)).toFloat() }
            c.weights[name] = sym to values
            return add(c, c.t.weight(name, values, *sym), sym, leaf = true)
        }
        c.inputs[name] = sym to 0L
        return add(c, c.t.input(name, dims(sym)), sym, leaf = true)
    }

    /** A new integer input of [sym] with values in [0, high). */
    private fun intInput(c: Case, sym: LongArray, high: Long, dtype: DType = DType.I32): Tensor {
        val name = "i${c.n++}"
        c.inputs[name] = sym to high
        val t = c.t.input(name, dims(sym), dtype)
        c.symOf[t.id] = sym
        return t
    }

    private fun randomSym(c: Case, rank: Int, dynamic: Boolean): LongArray {
        val s = LongArray(rank) { c.rng.dim() }
        if (dynamic && rank > 0) s[c.rng.nextInt(rank)] = -1
        return s
    }

    /** A shape that broadcasts against [sym] by NumPy rules: a suffix of it, some dims 1; or a wrong one. */
    private fun broadcastPartner(c: Case, sym: LongArray): LongArray {
        val r = c.rng
        if (r.chance(0.06) && sym.any { it > 1 }) {
            val i = sym.indices.filter { sym[it] > 1 }.random(r)
            c.invalid += "a ${sym[i] + 1} against ${sym[i]} in dimension $i"
            return sym.copyOf().also { it[i] = sym[i] + 1 }
        }
        val rank = (sym.size - r.nextInt(sym.size + 1)).coerceAtLeast(0)
        val out = sym.copyOfRange(sym.size - rank, sym.size)
        for (i in out.indices) if (r.chance(0.3)) out[i] = 1
        // A 1 in x against a size in the partner broadcasts x instead (a static size only: a `?` against 1 is fine too).
        return out
    }

    /** The NumPy broadcast of two symbolic shapes (the generator only makes compatible ones, or wrong on purpose). */
    private fun broadcastSym(a: LongArray, b: LongArray): LongArray {
        val rank = maxOf(a.size, b.size)
        return LongArray(rank) { i ->
            val x = a.getOrElse(i - (rank - a.size)) { 1 }
            val y = b.getOrElse(i - (rank - b.size)) { 1 }
            if (x == 1L) y else x
        }
    }

    private fun pick(c: Case, pred: (Sym) -> Boolean = { true }): Sym? {
        val ok = c.pool.filter { pred(it) && it.t.dtype == DType.F32 }
        if (ok.isEmpty()) return null
        // Prefer recent results, so graphs are chains more often than fans.
        return if (c.rng.chance(0.6)) ok.last() else ok.random(c.rng)
    }

    /** Records one random op; returns false when the op family did not fit the pool (another one is tried). */
    private fun step(c: Case): Boolean {
        val r = c.rng
        val t = c.t
        val x = pick(c) ?: return false
        val xs = x.sym
        when (r.nextInt(27)) {
            0, 1 -> {
                c.ops += "unary"
                val y = when (r.nextInt(13)) {
                    0 -> t.neg(x.t); 1 -> t.abs(x.t); 2 -> t.exp(x.t); 3 -> t.log(x.t); 4 -> t.sqrt(x.t)
                    5 -> t.rsqrt(x.t); 6 -> t.tanh(x.t); 7 -> t.sigmoid(x.t); 8 -> t.relu(x.t); 9 -> t.gelu(x.t)
                    10 -> t.silu(x.t); 11 -> t.sin(x.t); else -> t.cos(x.t)
                }
                add(c, y, xs)
            }
            2, 3, 4 -> {
                val ps = broadcastPartner(c, xs)
                val p = pick(c) { it !== x && it.sym.contentEquals(ps) } ?: leaf(c, ps)
                val (a, b) = if (r.nextBoolean()) x to p else p to x
                c.ops += "binary"
                val y = when (r.nextInt(7)) {
                    0 -> t.add(a.t, b.t); 1 -> t.sub(a.t, b.t); 2 -> t.mul(a.t, b.t); 3 -> t.div(a.t, b.t)
                    4 -> t.pow(t.abs(a.t), b.t); 5 -> t.max(a.t, b.t); else -> t.min(a.t, b.t)
                }
                add(c, y, broadcastSym(a.sym, b.sym))
            }
            5 -> {
                val ps = broadcastPartner(c, xs)
                val p = leaf(c, ps)
                val dir = listOf("LT", "LE", "GT", "GE", "EQ", "NE")[r.nextInt(6)]
                val m = t.compare(x.t, p.t, dir)
                val y = t.select(m, x.t, p.t)
                add(c, y, broadcastSym(xs, ps))
            }
            6 -> {
                val lo = r.nextDouble(-1.0, 0.5)
                add(c, t.clamp(x.t, lo, lo + r.nextDouble(0.0, 1.5)), xs)
            }
            7 -> {
                if (r.nextBoolean() || !x.leaf) {
                    c.bf16 = true
                    add(c, t.convert(t.convert(x.t, DType.BF16), DType.F32), xs)
                } else {
                    // To an integer only from a leaf: a computed value near an integer could truncate either way.
                    add(c, t.convert(t.convert(x.t, DType.I32), DType.F32), xs)
                }
            }
            8 -> {
                if (xs.isEmpty()) return false
                var axis = r.nextInt(-xs.size, xs.size)
                if (r.chance(0.05)) { axis = xs.size; c.invalid += "softmax axis $axis of rank ${xs.size}" }
                add(c, t.softmax(x.t, axis), xs)
            }
            9 -> {
                if (xs.isEmpty()) return false
                val axes = xs.indices.filter { r.nextBoolean() }.ifEmpty { listOf(r.nextInt(xs.size)) }.toIntArray()
                val keep = r.nextBoolean()
                val out = if (keep) LongArray(xs.size) { if (it in axes) 1 else xs[it] } else xs.filterIndexed { i, _ -> i !in axes }.toLongArray()
                val y = when (r.nextInt(3)) {
                    0 -> t.reduceSum(x.t, *axes, keepDims = keep); 1 -> t.reduceMean(x.t, *axes, keepDims = keep)
                    else -> t.reduceMax(x.t, *axes, keepDims = keep)
                }
                add(c, y, out)
            }
            10 -> {
                // Reshape: a static tensor to any factorization of its size. A tensor with one `?` keeps it as a
                // group of its own, and the static dimensions before it are kept or merged into one, those after it
                // kept, merged, or one of them split in two (IREE 3.13 lowers a dynamic reshape only when it splits
                // or merges whole dimensions, each `?` grouped with one `?`: docs/graph-format.md).
                val dyn = xs.indices.filter { xs[it] < 0 }
                if (dyn.size > 1) return false
                val out = if (dyn.isEmpty()) factorize(r, xs.fold(1L) { a, d -> a * d }) else {
                    val pre = xs.take(dyn[0])
                    val post = xs.drop(dyn[0] + 1)
                    val merge = { l: List<Long> -> if (l.isEmpty()) l else listOf(l.fold(1L) { a, d -> a * d }) }
                    val newPre = if (r.nextBoolean()) merge(pre) else pre
                    val newPost = when (r.nextInt(3)) {
                        0 -> merge(post)
                        1 -> post.flatMap { d -> val f = (2 until d).firstOrNull { d % it == 0L }; if (f != null) listOf(f, d / f) else listOf(d) }
                        else -> post
                    }
                    (newPre + xs[dyn[0]] + newPost).toLongArray()
                }
                if (r.chance(0.06) && dyn.isEmpty()) {
                    out[0] = out[0] + 1
                    c.invalid += "reshape ${symText(xs)} to ${symText(out)}"
                }
                add(c, t.reshape(x.t, *dims(out)), out)
            }
            11 -> {
                val perm = xs.indices.shuffled(r).toIntArray()
                add(c, t.transpose(x.t, *perm), LongArray(xs.size) { xs[perm[it]] })
            }
            12 -> {
                if (xs.isEmpty()) return false
                val start = LongArray(xs.size)
                val limit = LongArray(xs.size)
                val stride = LongArray(xs.size) { 1L + r.nextInt(2) }
                val out = LongArray(xs.size)
                for (i in xs.indices) {
                    val d = if (xs[i] < 0) -xs[i] * c.minS else xs[i]
                    start[i] = r.nextLong(0, d)
                    if (xs[i] < 0 || r.chance(0.25)) {
                        // -1: to the end (the only way on a `?` dimension); a stride of 1 keeps the size symbolic.
                        limit[i] = -1
                        if (xs[i] < 0) { stride[i] = 1; start[i] = 0 }
                        out[i] = if (xs[i] < 0) xs[i] else (xs[i] - start[i] + stride[i] - 1) / stride[i]
                    } else {
                        limit[i] = r.nextLong(start[i] + 1, d + 1)
                        out[i] = (limit[i] - start[i] + stride[i] - 1) / stride[i]
                    }
                }
                if (r.chance(0.06)) {
                    val i = r.nextInt(xs.size)
                    if (xs[i] >= 0) { limit[i] = xs[i] + 2; c.invalid += "slice limit ${limit[i]} past ${xs[i]}" }
                }
                add(c, t.slice(x.t, start, limit, stride), out)
            }
            13 -> {
                if (xs.isEmpty()) return false
                val axis = r.nextInt(xs.size)
                val ps = xs.copyOf()
                if (xs[axis] >= 0) ps[axis] = r.dim()
                if (r.chance(0.06)) {
                    val other = (xs.indices - axis).firstOrNull { xs[it] >= 0 }
                    if (other != null) { ps[other] = xs[other] + 1; c.invalid += "concat parts differ off the axis" }
                }
                val p = leaf(c, ps)
                val out = xs.copyOf().also { it[axis] = if (xs[axis] < 0) 2 * xs[axis] else xs[axis] + ps[axis] }
                add(c, t.concat(listOf(x.t, p.t), axis = axis), out)
            }
            14 -> {
                if (xs.isEmpty()) return false
                val axis = r.nextInt(xs.size)
                val high = if (xs[axis] < 0) -xs[axis] * c.minS else xs[axis]
                val isym = randomSym(c, r.nextInt(1, 3), r.chance(0.4) && xs.none { it < 0 && it != -1L })
                val ids = intInput(c, isym, high, if (r.nextBoolean()) DType.I32 else DType.I64)
                val out = (xs.take(axis) + isym.toList() + xs.drop(axis + 1)).toLongArray()
                add(c, t.gather(x.t, ids, axis = axis), out)
            }
            15, 16 -> {
                // matmul: [.., M, K] by a weight [K, N], or batched by an input [.., K, N].
                if (xs.isEmpty()) return false
                val a = if (xs.size == 1) add(c, t.reshape(x.t, 1L, *dims(xs)), longArrayOf(1, xs[0])) else x
                val asym = a.sym
                var k = asym.last()
                if (r.chance(0.05) && k >= 0) { k += 1; c.invalid += "matmul inner dimensions ${asym.last()} and $k" }
                val nDim = if (r.chance(0.2)) -1L else r.dim()
                val bsym = if (r.nextBoolean() && k >= 0 && nDim >= 0) longArrayOf(k, nDim)
                else (asym.copyOfRange(0, asym.size - 2).toList() + k + nDim).toLongArray()
                val b = leaf(c, bsym)
                val out = (asym.copyOfRange(0, asym.size - 1).toList() + nDim).toLongArray()
                add(c, t.matmul(a.t, b.t), out)
            }
            17 -> {
                if (xs.isEmpty()) return false
                val d = xs.last()
                val withParams = d >= 0 && r.nextBoolean()
                val y = if (r.nextBoolean()) {
                    if (withParams) t.layerNorm(x.t, leaf(c, longArrayOf(d)).t, leaf(c, longArrayOf(d)).t) else t.layerNorm(x.t)
                } else {
                    if (withParams) t.rmsNorm(x.t, leaf(c, longArrayOf(d)).t) else t.rmsNorm(x.t)
                }
                add(c, y, xs)
            }
            18 -> {
                val shape = LongArray(r.nextInt(1, 3)) { r.dim() }
                val dim = r.nextInt(shape.size)
                if (r.chance(0.25)) { shape[dim] = -1; c.invalid += "iota of length -1" }
                val i = t.iota(shape, dim)
                add(c, t.convert(i, DType.F32), shape)
            }
            19, 20 -> {
                // sdpa: q [.., S, D], k [.., T, D], v [.., T, Dv]; GQA with fewer K/V heads at rank 4.
                if (xs.size !in 2..4) return false
                val batch = xs.copyOfRange(0, xs.size - 2)
                var kvBatch = batch.copyOf()
                if (xs.size == 4 && batch[1] > 1 && r.nextBoolean()) {
                    val divisors = (1 until batch[1].toInt()).filter { batch[1].toInt() % it == 0 }
                    kvBatch[1] = divisors.random(r).toLong()
                }
                if (r.chance(0.05) && xs.size == 4 && batch[1] >= 2) {
                    kvBatch = batch.copyOf().also { it[1] = batch[1] + 1 }
                    c.invalid += "sdpa with ${batch[1]} query heads and ${kvBatch[1]} KV heads"
                }
                if (x.t.shape.last() == DYNAMIC) c.invalid += "sdpa with a ? head dimension"
                val tLen = if (r.chance(0.4)) -1L else r.dim()
                val dv = r.dim()
                val k = leaf(c, (kvBatch.toList() + tLen + xs.last()).toLongArray())
                val v = leaf(c, (kvBatch.toList() + tLen + dv).toLongArray())
                val causal = r.nextBoolean() && seesAKey(c, xs[xs.size - 2], tLen)
                val mask = if (r.chance(0.3)) leaf(c, longArrayOf(xs[xs.size - 2], tLen)) else null
                val scale = if (r.nextBoolean()) r.nextDouble(0.1, 1.0) else null
                val y = t.sdpa(x.t, k.t, v.t, mask = mask?.t, causal = causal, scale = scale)
                add(c, y, (batch.toList() + xs[xs.size - 2] + dv).toLongArray())
            }
            21 -> {
                // rope: x [.., S, D] with D even, cos/sin [S, D] or the half table [S, D/2] (or [1, ..]), in the
                // rotate_half or the interleaved form.
                if (xs.size < 2 || xs.last() < 0 || xs.last() % 2 != 0L) return false
                val s = if (r.nextBoolean()) xs[xs.size - 2] else 1L
                var width = if (r.nextBoolean()) xs.last() else xs.last() / 2
                if (r.chance(0.15)) { width = xs.last() + 2; c.invalid += "rope table of width $width for D ${xs.last()}" }
                val cos = leaf(c, longArrayOf(s, width))
                val sin = leaf(c, longArrayOf(s, width))
                add(c, t.rope(x.t, cos.t, sin.t, interleaved = r.nextBoolean()), xs)
            }
            22 -> {
                if (!x.leaf || xs.isEmpty()) return false // ties (after relu or clamp) have no one answer
                val axis = r.nextInt(xs.size)
                val y = t.argmax(x.t, axis, if (r.nextBoolean()) DType.I32 else DType.I64)
                add(c, t.convert(y, DType.F32), xs.filterIndexed { i, _ -> i != axis }.toLongArray())
            }
            23 -> {
                // expand(x, like): x's 1s become a size or `?` of like, maybe with dimensions in front.
                val lead = LongArray(r.nextInt(0, 2)) { if (r.chance(0.3)) -1L else r.dim() }
                val like = (lead.toList() + xs.map { d -> if (d == 1L && r.nextBoolean()) (if (r.chance(0.4)) -1L else r.dim()) else d }).toLongArray()
                if (r.chance(0.06) && xs.any { it > 1 }) {
                    val i = like.indices.last { like[it] > 1 }
                    like[i] += 1
                    c.invalid += "expand ${symText(xs)} like ${symText(like)}"
                }
                val l = leaf(c, like, forceInput = true)
                add(c, t.expand(x.t, l.t), like)
            }
            24 -> {
                if (xs.isEmpty()) return false
                val axis = r.nextInt(xs.size)
                add(c, t.convert(t.arange(x.t, axis), DType.F32), longArrayOf(xs[axis]))
            }
            25 -> {
                // repeatKv: [B, KV, T, D] to [B, KV·G, T, D].
                if (xs.size != 4 || xs[1] < 0) return false
                val g = r.nextInt(1, 4)
                add(c, t.repeatKv(x.t, g), xs.copyOf().also { it[1] = xs[1] * g })
            }
            else -> {
                if (xs.size < 2 || !seesAKey(c, xs[xs.size - 2], xs.last())) return false
                // A causal mask, then a softmax over the keys (the -inf stay inside the op pair).
                val y = t.softmax(t.causalMask(x.t), -1)
                add(c, y, xs)
            }
        }
        return true
    }

    /**
     * Whether every query row of a bottom-right aligned causal mask over [s] queries and [t] keys keeps a key
     * (S <= T at every run-time size): a row with none has no defined softmax (numpy gives NaN, IREE a finite
     * value), so the generator does not make one.
     */
    private fun seesAKey(c: Case, s: Long, t: Long): Boolean = when {
        s >= 0 && t >= 0 -> s <= t
        s >= 0 -> s <= -t * c.minS
        t >= 0 -> false
        else -> -s <= -t
    }

    /** A random factorization of [n] into 1..3 factors (1s included). */
    private fun factorize(r: Random, n: Long): LongArray {
        val out = ArrayList<Long>()
        var rest = n
        repeat(r.nextInt(0, 3)) {
            val divisors = (1..rest).filter { rest % it == 0L }
            val d = divisors.random(r)
            out += d
            rest /= d
        }
        out += rest
        return out.shuffled(r).toLongArray()
    }

    private class Outcome(val seed: Long, val kind: String, val message: String, val ops: List<String>)

    @Test
    fun `random graphs are refused naming the op and the line, or exported for IREE and numpy`() {
        val env = System.getenv()
        val dir = env["TAPEOUT_RANDOM_GRAPHS_DIR"]?.let(::File) ?: tempDir("tapeout-random-graphs")
        val count = env["TAPEOUT_RANDOM_GRAPHS_COUNT"]?.toInt() ?: 60
        val first = env["TAPEOUT_RANDOM_GRAPHS_SEED"]?.toLong() ?: 27000L
        assertTrue(sourceLines.isNotEmpty(), "the generator's own source is readable (to check the lines errors name)")
        dir.mkdirs()
        dir.listFiles()?.filter { it.name.startsWith("case-") }?.forEach { it.deleteRecursively() }
        val outcomes = ArrayList<Outcome>()
        val problems = ArrayList<String>()
        val unknown = ArrayList<String>()
        for (i in 0 until count) {
            val seed = first + i
            val r = Random(seed)
            val s1 = listOf(1, 2, 3, 5)[r.nextInt(4)]
            val c = Case(seed, r, intArrayOf(s1, s1 + listOf(1, 2, 4)[r.nextInt(3)]))
            val o = runCase(c, dir, problems)
            outcomes += o
        }
        val summary = StringBuilder("{\"cases\":[")
        outcomes.forEachIndexed { i, o ->
            if (i > 0) summary.append(',')
            summary.append("{\"seed\":").append(o.seed).append(",\"kind\":").append(Json.quote(o.kind))
                .append(",\"message\":").append(Json.quote(o.message)).append(",\"ops\":")
                .append(o.ops.joinToString(",", "[", "]") { Json.quote(it) }).append('}')
        }
        File(dir, "summary.json").writeText(summary.append("]}").toString())
        val byKind = outcomes.groupingBy { it.kind }.eachCount()
        println("random graphs: $byKind in $dir")
        val known = problems.mapNotNull { p -> knownBugs.entries.firstOrNull { it.value.first.containsMatchIn(p) }?.let { p to it.key } }
        for ((p, name) in known) println("known bug $name (${knownBugs.getValue(name).second}): $p")
        unknown += problems - known.map { it.first }.toSet()
        for (o in outcomes.filter { it.kind.startsWith("refused valid") }) {
            val k = knownRefusals.entries.firstOrNull { it.value.first.containsMatchIn(o.message) }
            val bug = knownBugs.entries.firstOrNull { it.value.first.containsMatchIn(o.message) }
            if (bug != null) println("known bug ${bug.key} (seed ${o.seed}): ${o.message}")
            else if (k == null) unknown += "seed ${o.seed}: a valid graph was refused: ${o.message}" else println("known refusal ${k.key} (seed ${o.seed}): ${k.value.second}")
        }
        if (env["TAPEOUT_RANDOM_GRAPHS_DIR"] == null) dir.deleteRecursively() else File(dir, "known.txt").writeText(known.joinToString("") { (p, name) -> "$name\t$p\n" })
        assertTrue(unknown.isEmpty(), unknown.joinToString("\n"))
        // A generator that only ever refuses (or never does) tests one half of the property.
        assertTrue((byKind["exported"] ?: 0) * 2 >= count, "at least half the cases export: $byKind")
        if (count >= 30) assertTrue((byKind["refused"] ?: 0) + (byKind["refused at export"] ?: 0) > 0, "some cases are refused: $byKind")
    }

    /**
     * Whether [message] names an op at a line of this file (`<op> at RandomGraphPropertyTest.kt:L` from a recording
     * check, `node N (<op>) was recorded at RandomGraphPropertyTest.kt:L` from the native side) whose source line
     * calls that op's Kotlin method; null when it does, what is wrong otherwise. Lines named after `from` are where
     * the operands came from and are not checked.
     */
    private fun located(message: String): String? {
        val sites = Regex("(?:\\b(?!recorded\\b)([A-Za-z0-9_]+) at|\\(([A-Za-z0-9_]+)\\) was recorded at) RandomGraphPropertyTest\\.kt:(\\d+)").findAll(message)
            .map { (it.groupValues[1].ifEmpty { it.groupValues[2] }) to it.groupValues[3].toInt() }.toList()
        if (sites.isEmpty()) return "names no op at a line of RandomGraphPropertyTest.kt"
        for ((op, l) in sites) {
            val text = sourceLines.getOrNull(l - 1) ?: return "names line $l, which this file does not have"
            if ((callsOf[op] ?: listOf(camel(op))).none { text.contains("t.$it(") }) return "names line $l (`${text.trim()}`) for $op, which it does not record"
        }
        return null
    }

    private fun camel(op: String) = op.split('_').mapIndexed { i, p -> if (i == 0) p else p.replaceFirstChar { it.uppercase() } }.joinToString("")

    private fun runCase(c: Case, dir: File, problems: MutableList<String>): Outcome {
        val r = c.rng
        val rank = r.nextInt(1, 5)
        leaf(c, randomSym(c, rank, r.chance(0.5)), forceInput = true)
        val steps = r.nextInt(1, 7)
        var done = 0
        var tries = 0
        val recorded = { c.t.ops.map { it.op }.toSet() }
        while (done < steps && tries < 40) {
            tries++
            try {
                if (step(c)) done++
            } catch (e: TapeoutException) {
                val msg = e.message ?: ""
                val why = located(msg)
                if (why != null) problems += "seed ${c.seed}: the refusal `$msg` $why"
                if (c.invalid.isEmpty() && c.mismatches.isNotEmpty()) {
                    // Refused downstream of a shape Kotlin inferred wrongly: the wrong shape is the finding.
                    problems += "seed ${c.seed}: ${c.mismatches}, then refused: $msg"
                    return Outcome(c.seed, "refused after a wrong shape", msg, c.mismatches.toList())
                }
                return Outcome(c.seed, if (c.invalid.isNotEmpty()) "refused" else "refused valid", msg, c.invalid.toList())
            }
        }
        if (c.invalid.isEmpty() && c.mismatches.isNotEmpty()) problems += "seed ${c.seed}: ${c.mismatches}"
        val outs = c.pool.filter { !it.leaf }.let { if (it.isEmpty()) return Outcome(c.seed, "empty", "", emptyList()) else it }
        val results = listOf(outs.last()) + (if (outs.size > 1 && r.nextBoolean()) listOf(outs.random(r)) else emptyList())
        val distinct = results.distinctBy { it.t.id }
        distinct.forEachIndexed { i, o -> c.t.output("y$i", o.t) }
        val caseDir = File(dir, "case-${c.seed}")
        val opsDone = recorded().toList()
        try {
            val g = c.t.toComputeGraph()
            val res = g.export(caseDir, "model", MaterializationPolicy.ExternalAlways())
            // The portable lowering of the same graph beside it: the IREE half runs both and compares them.
            c.t.toComputeGraph(options = ExportOptions(ExportTarget.PORTABLE))
                .export(File(caseDir, "portable"), "model", MaterializationPolicy.ExternalAlways())
            val snap = c.t.snapshot()
            File(caseDir, "graph.json").writeText(snap.toGraphJson("model"))
            writeSafetensors(File(caseDir, "weights.safetensors"), c.weights)
            writeManifest(File(caseDir, "case.json"), c, g.inputs, distinct, res)
            return Outcome(c.seed, "exported", "", opsDone + c.invalid.map { "invalid: $it" })
        } catch (e: TapeoutException) {
            caseDir.deleteRecursively()
            val msg = e.message ?: ""
            val why = located(msg)
            if (why != null) problems += "seed ${c.seed}: the export refusal `$msg` $why"
            return Outcome(c.seed, if (c.invalid.isNotEmpty()) "refused at export" else "refused valid at export", msg, opsDone + c.invalid)
        }
    }

    private fun writeSafetensors(f: File, weights: Map<String, Pair<LongArray, FloatArray>>) {
        val header = StringBuilder("{")
        var offset = 0L
        weights.entries.forEachIndexed { i, (name, w) ->
            if (i > 0) header.append(',')
            val end = offset + 4L * w.second.size
            header.append(Json.quote(name)).append(":{\"dtype\":\"F32\",\"shape\":").append(w.first.joinToString(",", "[", "]"))
                .append(",\"data_offsets\":[").append(offset).append(',').append(end).append("]}")
            offset = end
        }
        if (weights.isEmpty()) header.append("\"__metadata__\":{}")
        header.append('}')
        while (header.length % 8 != 0) header.append(' ')
        val h = header.toString().toByteArray()
        val buf = ByteBuffer.allocate(8 + h.size + offset.toInt()).order(ByteOrder.LITTLE_ENDIAN)
        buf.putLong(h.size.toLong()).put(h)
        for ((_, w) in weights) for (v in w.second) buf.putFloat(v)
        f.writeBytes(buf.array())
    }

    private fun writeManifest(f: File, c: Case, order: List<String>, outs: List<Sym>, res: ExportResult) {
        val sb = StringBuilder("{\"seed\":").append(c.seed).append(",\"sizes\":").append(c.sizes.joinToString(",", "[", "]"))
        sb.append(",\"bf16\":").append(c.bf16).append(",\"mlir\":").append(Json.quote(res.mlir.name))
            .append(",\"irpa\":").append(Json.quote(res.irpa.name))
        sb.append(",\"arguments\":[")
        order.forEachIndexed { i, name ->
            if (i > 0) sb.append(',')
            val (sym, high) = c.inputs[name] ?: error("argument $name is not an input the generator declared")
            sb.append("{\"name\":").append(Json.quote(name)).append(",\"shape\":").append(sym.joinToString(",", "[", "]"))
                .append(",\"high\":").append(high).append('}')
        }
        sb.append("],\"weights\":").append(c.weights.keys.joinToString(",", "[", "]") { Json.quote(it) })
        sb.append(",\"outputs\":").append(outs.joinToString(",", "[", "]") { o -> o.sym.joinToString(",", "[", "]") })
        sb.append(",\"invalid\":").append(c.invalid.joinToString(",", "[", "]") { Json.quote(it) })
        sb.append(",\"calls\":").append(c.t.ops.joinToString(",", "[", "]") { op ->
            Json.quote(op.op + (op.site?.let { " at ${siteText(it)}" } ?: ""))
        })
        f.writeText(sb.append('}').toString())
    }
}
