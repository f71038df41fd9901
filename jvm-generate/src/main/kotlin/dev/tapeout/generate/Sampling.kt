package dev.tapeout.generate

import java.util.SplittableRandom
import kotlin.math.exp

/**
 * Token choice from one position's logits, computed in double precision: [argmax], and [probabilities] with
 * transformers' temperature, top-k and top-p warpers applied in its order, then [draw].
 */
object Sampling {
    /** The index of the largest logit (the first of equal ones, as torch.argmax). */
    @JvmStatic
    fun argmax(logits: FloatArray): Int {
        var best = 0
        for (i in 1 until logits.size) if (logits[i] > logits[best]) best = i
        return best
    }

    /**
     * The sampling distribution: softmax of `logits / temperature` over the tokens top-k and top-p keep, zero
     * elsewhere, summing to 1. Top-k keeps every logit at least the k-th largest; top-p (as transformers'
     * TopPLogitsWarper) sorts the survivors ascending and drops each token whose probability plus those of all tokens
     * before it is at most 1 - topP, always keeping the most likely one.
     */
    @JvmStatic
    fun probabilities(logits: FloatArray, temperature: Double, topK: Int, topP: Double): DoubleArray {
        val n = logits.size
        val scaled = DoubleArray(n) { logits[it] / temperature }
        val keep = BooleanArray(n) { true }
        if (topK in 1 until n) {
            val kth = scaled.sortedArrayDescending()[topK - 1]
            for (i in 0 until n) if (scaled[i] < kth) keep[i] = false
        }
        if (topP < 1.0) {
            val p = softmax(scaled, keep)
            // Ascending by probability; a stable sort, so equal ones keep index order as torch.sort does on CPU.
            val order = (0 until n).filter { keep[it] }.sortedBy { p[it] }
            var cumulative = 0.0
            for ((rank, i) in order.withIndex()) {
                cumulative += p[i]
                if (rank < order.size - 1 && cumulative <= 1.0 - topP) keep[i] = false
            }
        }
        return softmax(scaled, keep)
    }

    /** An index drawn from `probabilities` (summing to 1) with `random`. */
    @JvmStatic
    fun draw(probabilities: DoubleArray, random: SplittableRandom): Int {
        val u = random.nextDouble()
        var cumulative = 0.0
        var last = -1
        for (i in probabilities.indices) {
            if (probabilities[i] <= 0.0) continue
            cumulative += probabilities[i]
            last = i
            if (u < cumulative) return i
        }
        // Rounding can leave the sum a hair under u: the last token with any probability takes it.
        return last
    }

    private fun softmax(x: DoubleArray, keep: BooleanArray): DoubleArray {
        var max = Double.NEGATIVE_INFINITY
        for (i in x.indices) if (keep[i] && x[i] > max) max = x[i]
        val out = DoubleArray(x.size) { if (keep[it]) exp(x[it] - max) else 0.0 }
        val sum = out.sum()
        for (i in out.indices) out[i] /= sum
        return out
    }
}
