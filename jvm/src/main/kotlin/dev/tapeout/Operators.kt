package dev.tapeout

// Operators on tensors. A tensor knows the tape that recorded it, so `x + y` records `add(x, y)` on that tape:
// each operator records exactly what the explicit call records. A number next to a tensor becomes a scalar
// constant of the tensor's dtype ([ExecutionTape.scalar]), written inline.

/** `add(this, other)`. */
operator fun Tensor.plus(other: Tensor): Tensor = tape.add(this, other)

/** `sub(this, other)`. */
operator fun Tensor.minus(other: Tensor): Tensor = tape.sub(this, other)

/** `mul(this, other)` (elementwise). */
operator fun Tensor.times(other: Tensor): Tensor = tape.mul(this, other)

/** `div(this, other)`. */
operator fun Tensor.div(other: Tensor): Tensor = tape.div(this, other)

/** `neg(this)`. */
operator fun Tensor.unaryMinus(): Tensor = tape.neg(this)

/** `and(this, other)`: logical on bool masks (`causal and window`), bitwise on integers. */
infix fun Tensor.and(other: Tensor): Tensor = tape.and(this, other)

/** `or(this, other)`: logical on bool masks, bitwise on integers. */
infix fun Tensor.or(other: Tensor): Tensor = tape.or(this, other)

/** `not(this)`: `!mask`. */
operator fun Tensor.not(): Tensor = tape.not(this)

/** `matmul(this, other)`: `[.., K] x [K, N]`. For a PyTorch `[out, in]` weight use [ExecutionTape.linear]. */
infix fun Tensor.matmul(other: Tensor): Tensor = tape.matmul(this, other)

/** A scalar of this tensor's dtype (a 16-bit weight as the tape sees it alone: its [ExecutionTape.compute] type or f32). */
private fun Tensor.scalarLike(value: Double): Tensor = tape.scalar(value, if (isHalfWeight() && dtype != tape.compute) DType.F32 else dtype)

/** `this + value`, the value a scalar constant of this tensor's dtype. */
operator fun Tensor.plus(value: Number): Tensor = tape.add(this, scalarLike(value.toDouble()))

/** `this - value`. */
operator fun Tensor.minus(value: Number): Tensor = tape.sub(this, scalarLike(value.toDouble()))

/** `this * value`. */
operator fun Tensor.times(value: Number): Tensor = tape.mul(this, scalarLike(value.toDouble()))

/** `this / value`. */
operator fun Tensor.div(value: Number): Tensor = tape.div(this, scalarLike(value.toDouble()))

/** `value + tensor`. */
operator fun Number.plus(t: Tensor): Tensor = t.tape.add(t.scalarLike(toDouble()), t)

/** `value - tensor`. */
operator fun Number.minus(t: Tensor): Tensor = t.tape.sub(t.scalarLike(toDouble()), t)

/** `value * tensor`. */
operator fun Number.times(t: Tensor): Tensor = t.tape.mul(t.scalarLike(toDouble()), t)

/** `value / tensor`. */
operator fun Number.div(t: Tensor): Tensor = t.tape.div(t.scalarLike(toDouble()), t)

/** The tensor converted to [to] ([ExecutionTape.convert]). */
fun Tensor.to(to: DType): Tensor = tape.convert(this, to)

/** The tensor with another shape ([ExecutionTape.reshape]). */
fun Tensor.reshape(vararg shape: Int): Tensor = tape.reshape(this, *shape)

/** The tensor with its dimensions permuted ([ExecutionTape.transpose]; reversed without [perm]). */
fun Tensor.transpose(vararg perm: Int): Tensor = tape.transpose(this, *perm)

/** `transpose(1, 0)` of a rank-2 tensor. */
val Tensor.T: Tensor get() = tape.transpose(this)
