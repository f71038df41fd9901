//! Conversions, and the forms IREE 3.13 needs to keep a value's dispatch apart or ordered (`unfused`, `after`,
//! `opaque`).

use tapeout_graph::{DType, Dim, Shape};

use super::{Emitter, Val, signless, ty};
use crate::error::Result;

impl Emitter<'_, '_, '_> {
    pub(crate) fn unary(&mut self, op: &str, x: &Val) -> Val {
        let t = x.ty();
        self.assign(&format!("stablehlo.{op} {} : {t}", x.name), x.shape.clone(), x.dtype)
    }

    /// `x` converted to `dtype`, same shape: `stablehlo.convert`, except that a conversion to bf16 from f32, an
    /// integer or bool is rounded by [`Emitter::round_f32_to_bf16`].
    pub(crate) fn convert_to(&mut self, x: &Val, dtype: DType) -> Result<Val> {
        if dtype == DType::BF16 && !matches!(x.dtype, DType::BF16 | DType::F64 | DType::F16) {
            let f = if x.dtype == DType::F32 { x.clone() } else { self.plain_convert(x, DType::F32) };
            return self.round_f32_to_bf16(&f);
        }
        Ok(self.plain_convert(x, dtype))
    }

    /// `x` unchanged, bit for bit, through ops IREE cannot clone into a consumer's dispatch. IREE 3.13 clones a
    /// "bit extend" (an elementwise chain from a narrower element type without a `math` op: `convert(bf16 ->
    /// f32)`, `convert(i32 -> i64)`, a dequantization) into each consumer; cloned into a `concatenate` with `?`
    /// dimensions it is materialized on the stack at the `?` size, and iree-compile refuses the module
    /// (`exceeded stack allocation limit`: an f16 value widened and joined along a static axis with `?` rows; a
    /// `?` axis, such as a KV cache's, is written as insertions, [`Emitter::concat_in_place`], which IREE does
    /// not clone into). A float `abs` (a `math` op) makes the chain an
    /// ordinary dispatch: 16- and 32-bit floats take it on their bits with the sign bit put back (exact, NaN
    /// too); integers and f64 (which IREE demotes to f32, so its bits cannot be reinterpreted) subtract
    /// `min(|x as f32|, 0)`, a zero no folder can see. Bool values are returned as they are.
    pub(crate) fn unfused(&mut self, x: &Val) -> Result<Val> {
        let bits = match x.dtype {
            DType::F16 | DType::BF16 => DType::U16,
            DType::F32 => DType::U32,
            DType::Bool => return Ok(x.clone()),
            _ => {
                let f = if x.dtype.is_float() { x.clone() } else { self.plain_convert(x, DType::F32) };
                let magnitude = self.unary("abs", &f);
                let zero = self.fill_like(0.0, &f, f.dtype)?;
                let hidden_zero = self.binary_same("minimum", &magnitude, &zero);
                let hidden_zero = self.plain_convert(&hidden_zero, x.dtype);
                return Ok(self.binary_same("subtract", x, &hidden_zero));
            }
        };
        let magnitude = self.unary("abs", x);
        let magnitude_bits = self.bitcast(&magnitude, bits);
        let x_bits = self.bitcast(x, bits);
        // |x| differs from x in the sign bit alone: xor isolates it, or puts it back.
        let sign_bit = self.binary_same("xor", &x_bits, &magnitude_bits);
        let both = self.binary_same("or", &sign_bit, &magnitude_bits);
        Ok(self.bitcast(&both, x.dtype))
    }

    /// `a` through a `stablehlo.optimization_barrier` with `b`: the same value, which IREE cannot compute (or
    /// schedule what reads it) before `b` is.
    pub(crate) fn after(&mut self, a: &Val, b: &Val) -> Val {
        let name = self.fresh();
        self.line(&format!(
            "{name}:2 = stablehlo.optimization_barrier {}, {} : {}, {}",
            a.name,
            b.name,
            a.ty(),
            b.ty()
        ));
        Val { name: format!("{name}#0"), shape: a.shape.clone(), dtype: a.dtype }
    }

    /// `a` through a `stablehlo.optimization_barrier` of its own: the same value, which IREE does not treat as a
    /// constant expression (it computes nothing from it at load).
    pub(crate) fn opaque(&mut self, a: &Val) -> Val {
        let name = self.fresh();
        self.line(&format!("{name} = stablehlo.optimization_barrier {} : {}", a.name, a.ty()));
        Val { name, shape: a.shape.clone(), dtype: a.dtype }
    }

    /// `x`, or the signless integers of its bits when its elements are unsigned and dimension `i` is `?`: the
    /// value whose extent a `get_dimension_size` / `tensor.dim` reads. IREE 3.13 cannot lower either on a `?`
    /// unsigned tensor ("failed to legalize operation 'tensor.dim'"); a bitcast has the same extents.
    pub(super) fn measurable(&mut self, x: &Val, i: usize) -> Val {
        match (signless(x.dtype), x.shape.0.get(i)) {
            (Some(bits), Some(Dim::Dynamic)) => self.bitcast(x, bits),
            _ => x.clone(),
        }
    }

    /// `x` retyped to `shape`, the same extents more or less specific (`tensor.cast`); an unsigned `x` is cast as
    /// the signless integers of its bits (IREE 3.13 cannot lower a `tensor.cast` of a ui16 tensor).
    pub(crate) fn tensor_cast(&mut self, x: &Val, shape: &Shape) -> Val {
        if let Some(bits) = signless(x.dtype) {
            let signless = self.bitcast(x, bits);
            let cast = self.tensor_cast(&signless, shape);
            return self.bitcast(&cast, x.dtype);
        }
        let rhs = format!("tensor.cast {} : {} to {}", x.name, x.ty(), ty(shape, x.dtype));
        self.assign(&rhs, shape.clone(), x.dtype)
    }

    /// `stablehlo.bitcast_convert` of `x` to `dtype`, an element type of the same width: its bits, retyped.
    pub(crate) fn bitcast(&mut self, x: &Val, dtype: DType) -> Val {
        let rhs = format!("stablehlo.bitcast_convert {} : ({}) -> {}", x.name, x.ty(), ty(&x.shape, dtype));
        self.assign(&rhs, x.shape.clone(), dtype)
    }

    /// `stablehlo.convert` of `x` to `dtype`, same shape.
    pub(super) fn plain_convert(&mut self, x: &Val, dtype: DType) -> Val {
        let rhs = format!("stablehlo.convert {} : ({}) -> {}", x.name, x.ty(), ty(&x.shape, dtype));
        self.assign(&rhs, x.shape.clone(), dtype)
    }

    /// f32 `x` rounded to bf16 (to nearest, ties to even; a NaN stays a quiet NaN of the same sign) in integer
    /// arithmetic on its bits. IREE 3.13 folds `convert(f32 -> bf16)` of an integer-to-float conversion (an
    /// `iota`, an `argmax`, a `convert` from an integer) into one integer-to-bf16 conversion, which its CPU
    /// backend compiles into a call to compiler-rt's `__truncsfbf2` that the embedded executable cannot link; an
    /// integer source also goes through f32 here (rounded twice above 2^24, as the graph format's reference does).
    pub(crate) fn round_f32_to_bf16(&mut self, x: &Val) -> Result<Val> {
        let (chosen, _) = self.bf16_bits(x)?;
        let narrow = self.plain_convert(&chosen, DType::U16);
        Ok(self.bitcast(&narrow, DType::BF16))
    }

    /// The bf16 bits of f32 `x` as [`Emitter::round_f32_to_bf16`] rounds it, in the low half of a u32, and the u32
    /// constant 16 (for a caller that moves them back up).
    pub(super) fn bf16_bits(&mut self, x: &Val) -> Result<(Val, Val)> {
        let u = DType::U32;
        let bits = self.bitcast(x, u);
        let sixteen = self.fill_like(16.0, x, u)?;
        let one = self.fill_like(1.0, x, u)?;
        let half_ulp = self.fill_like(f64::from(0x7FFF_u32), x, u)?;
        let quiet = self.fill_like(f64::from(0x0040_u32), x, u)?;
        let high = self.binary_same("shift_right_logical", &bits, &sixteen);
        let lsb = self.binary_same("and", &high, &one);
        let bias = self.binary_same("add", &lsb, &half_ulp);
        let biased = self.binary_same("add", &bits, &bias);
        let rounded = self.binary_same("shift_right_logical", &biased, &sixteen);
        let nan_bits = self.binary_same("or", &high, &quiet);
        let is_nan = self.compare_same("NE", x, x);
        Ok((self.select_same(&is_nan, &nan_bits, &rounded), sixteen))
    }
}
