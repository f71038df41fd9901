//! `decode_words`: narrow values stored in 32-bit words, widened with 32-bit integer arithmetic only (the form a
//! device that stores only 32-bit values reads, `tapeout_graph`'s Vulkan pass).

use tapeout_graph::{DType, Dim, Shape};

use super::{Emitter, Val, list, ty};
use crate::error::Result;

impl Emitter<'_, '_, '_> {
    /// `words [.., W]` (i32, `W` static) as the `[.., W · 32 / bits]` values of `from` they hold, lowest bits first: sign-extended
    /// (signed integers) or zero-extended (unsigned) to i32, or widened to f32 (`bf16`: its bits are the top half of
    /// the f32; `f16`: [`Emitter::f16_bits_to_f32`]). Every step is exact.
    pub(crate) fn decode_words(&mut self, words: &Val, from: DType, bits: u32) -> Result<Val> {
        let (rank, per_word) = (words.rank(), 32 / bits);
        let Some(&Dim::Static(w)) = words.shape.0.last() else {
            return Err(self.err(format!("decode_words takes words [.., W] with W static, not [{}]", words.shape)));
        };
        let e = u64::from(per_word);
        let grid = Shape(words.shape.0.iter().copied().chain([Dim::Static(e)]).collect());
        // Value j of a word moved to its top bits: shifted left by 32 - bits·(j + 1).
        let lefts: Vec<u32> = (0..per_word).map(|j| 32 - bits * (j + 1)).collect();
        let lefts = self.assign(
            &format!("stablehlo.constant dense<[{}]> : {}", list(&lefts), ty(&Shape::of(&[e]), DType::I32)),
            Shape::of(&[e]),
            DType::I32,
        );
        let (spread, lefts) = if grid.is_dynamic() {
            // The grid's run-time shape: the words' and E.
            let mut parts = (0..rank).map(|i| self.dim_part(words, i)).collect::<Result<Vec<_>>>()?;
            parts.push(self.i32_part(e, rank, &grid)?);
            let st = self.concat_parts(parts);
            let all: Vec<usize> = (0..rank).collect();
            (self.dynamic_broadcast(words, &all, &grid, &st), self.dynamic_broadcast(&lefts, &[rank], &grid, &st))
        } else {
            let all: Vec<usize> = (0..rank).collect();
            (self.broadcast_to(words, &all, &grid, None)?, self.broadcast_to(&lefts, &[rank], &grid, None)?)
        };
        let top = self.binary_same("shift_left", &spread, &lefts);
        let down = self.fill_like(f64::from(32 - bits), &spread, DType::I32)?;
        let values = match from {
            DType::BF16 => {
                let high = self.fill_like(f64::from(0xFFFF_0000u32 as i32), &spread, DType::I32)?;
                let f = self.binary_same("and", &top, &high);
                self.bitcast(&f, DType::F32)
            }
            DType::F16 => {
                let h = self.binary_same("shift_right_logical", &top, &down);
                self.f16_bits_to_f32(&h)?
            }
            DType::U8 | DType::U16 => self.binary_same("shift_right_logical", &top, &down),
            _ => self.binary_same("shift_right_arithmetic", &top, &down),
        };
        let mut out = words.shape.clone();
        if let Some(last) = out.0.last_mut() {
            *last = Dim::Static(w * e);
        }
        self.reshape(&values, &out)
    }

    /// The f32 value of f16 bits `h` (i32, `0 ..= 0xFFFF`), exactly, in integer arithmetic and one exact float
    /// product: a normal number's exponent rebased (`+ 112 << 23`), infinities and NaNs (their payload kept) with
    /// the f32 exponent all ones, and a subnormal `m · 2^-24` computed as a float (a normal f32), so that no result
    /// depends on whether the device flushes subnormal floats.
    fn f16_bits_to_f32(&mut self, h: &Val) -> Result<Val> {
        let k = |e: &mut Self, v: i32| e.fill_like(f64::from(v), h, DType::I32);
        let (c10, c13, c15, c31) = (k(self, 10)?, k(self, 13)?, k(self, 15)?, k(self, 31)?);
        let (m1023, m7fff, rebase, inf) =
            (k(self, 0x3FF)?, k(self, 0x7FFF)?, k(self, 112 << 23)?, k(self, 0x7F80_0000)?);
        let zero = k(self, 0)?;
        let exp_field = self.binary_same("shift_right_logical", h, &c10);
        let exp = self.binary_same("and", &exp_field, &c31);
        let mant = self.binary_same("and", h, &m1023);
        let sign_bit = self.binary_same("shift_right_logical", h, &c15);
        let sign = self.binary_same("shift_left", &sign_bit, &c31);
        let magnitude = self.binary_same("and", h, &m7fff);
        let shifted = self.binary_same("shift_left", &magnitude, &c13);
        let normal = self.binary_same("add", &shifted, &rebase);
        let mant_top = self.binary_same("shift_left", &mant, &c13);
        let special = self.binary_same("or", &mant_top, &inf);
        let mant_f = self.plain_convert(&mant, DType::F32);
        let ulp = self.fill_like(2f64.powi(-24), &mant_f, DType::F32)?;
        let tiny = self.binary_same("multiply", &mant_f, &ulp);
        let tiny = self.bitcast(&tiny, DType::I32);
        let is_tiny = self.compare_same("EQ", &exp, &zero);
        let is_special = self.compare_same("EQ", &exp, &c31);
        let big = self.select_same(&is_special, &special, &normal);
        let bits = self.select_same(&is_tiny, &tiny, &big);
        let signed = self.binary_same("or", &bits, &sign);
        Ok(self.bitcast(&signed, DType::F32))
    }
}

impl Emitter<'_, '_, '_> {
    /// f32 `x` rounded to the precision of `to` (`F16` or `BF16`) and kept f32, in 32-bit unsigned integer arithmetic
    /// on its bits: to nearest, ties to even; for f16, overflow to infinity from 65520, subnormals (a multiple of
    /// 2^-24 computed as an exact integer-to-float conversion) and a NaN kept with numpy's payload; for bf16 a NaN kept
    /// a quiet NaN of its sign. No 16-bit type appears, so a device that has none (IREE's default Vulkan profile,
    /// which erases an f32 -> f16 convert and stores f16 as f32) rounds as numpy and ml_dtypes do.
    pub(crate) fn round_as(&mut self, x: &Val, to: DType) -> Result<Val> {
        let u32_of = |e: &mut Self, v: u32| e.fill_like(f64::from(v), x, DType::U32);
        if to == DType::BF16 {
            // The CPU's rounding to bf16, its bits moved back to the top of an f32 instead of narrowed to 16 bits.
            let (bits, sixteen) = self.bf16_bits(x)?;
            let top = self.binary_same("shift_left", &bits, &sixteen);
            return Ok(self.bitcast(&top, DType::F32));
        }
        let u = self.bitcast(x, DType::U32);
        let k = |e: &mut Self, v: u32| u32_of(e, v);
        let (abs_mask, sign_mask, c13, one) = (k(self, 0x7FFF_FFFF)?, k(self, 0x8000_0000)?, k(self, 13)?, k(self, 1)?);
        let a = self.binary_same("and", &u, &abs_mask);
        let sign = self.binary_same("and", &u, &sign_mask);
        // Normal range: 13 bits dropped, ties to even.
        let lsb = self.binary_same("shift_right_logical", &a, &c13);
        let lsb = self.binary_same("and", &lsb, &one);
        let bias = self.with_u32("add", &lsb, 0xFFF, x)?;
        let up = self.binary_same("add", &a, &bias);
        let normal = self.with_u32("and", &up, 0xFFFF_E000, x)?;
        // Subnormal range: q = the value in units of 2^-24, rounded to nearest even by a shift of 14 to 24 bits.
        let exp = self.with_u32("shift_right_logical", &a, 23, x)?;
        let exp = self.with_u32("maximum", &exp, 102, x)?;
        let exp = self.with_u32("minimum", &exp, 112, x)?;
        let c126 = k(self, 126)?;
        let sh = self.binary_same("subtract", &c126, &exp);
        let mant = self.with_u32("and", &a, 0x7F_FFFF, x)?;
        let m = self.with_u32("or", &mant, 0x80_0000, x)?;
        let qlsb = self.binary_same("shift_right_logical", &m, &sh);
        let qlsb = self.binary_same("and", &qlsb, &one);
        let sh1 = self.binary_same("subtract", &sh, &one);
        let half = self.binary_same("shift_left", &one, &sh1);
        let half = self.binary_same("subtract", &half, &one);
        let bias = self.binary_same("add", &half, &qlsb);
        let up = self.binary_same("add", &m, &bias);
        let q = self.binary_same("shift_right_logical", &up, &sh);
        let qf = self.plain_convert(&q, DType::F32);
        let qb = self.bitcast(&qf, DType::U32);
        // q · 2^-24: 24 off the exponent of the exact float q (at least 1, so a normal float).
        let scaled = self.with_u32("subtract", &qb, 0x0C00_0000, x)?;
        let zero = k(self, 0)?;
        let q_zero = self.compare_same("EQ", &q, &zero);
        let tiny = self.select_same(&q_zero, &zero, &scaled);
        // A NaN keeps its top 10 payload bits (at least one: numpy's quiet bit when none is left).
        let payload = self.with_u32("and", &a, 0x7F_E000, x)?;
        let payload = self.with_u32("maximum", &payload, 0x2000, x)?;
        let inf = k(self, 0x7F80_0000)?;
        let nan = self.binary_same("or", &payload, &inf);
        let r = |e: &mut Self, dir: &str, limit: u32, then: &Val, other: &Val| -> Result<Val> {
            let l = k(e, limit)?;
            let c = e.compare_same(dir, &a, &l);
            Ok(e.select_same(&c, then, other))
        };
        let r1 = r(self, "GT", 0x3300_0000, &tiny, &zero)?; // above 2^-25: a subnormal (or the smallest normal)
        let r2 = r(self, "GE", 0x3880_0000, &normal, &r1)?; // from 2^-14: a normal f16
        let r3 = r(self, "GE", 0x477F_F000, &inf, &r2)?; // from 65520: infinity
        let r4 = r(self, "GT", 0x7F80_0000, &nan, &r3)?; // NaN
        let signed = self.binary_same("or", &r4, &sign);
        Ok(self.bitcast(&signed, DType::F32))
    }

    /// `op(a, c)` for the u32 constant `c` as wide as `like`.
    fn with_u32(&mut self, op: &str, a: &Val, c: u32, like: &Val) -> Result<Val> {
        let c = self.fill_like(f64::from(c), like, DType::U32)?;
        Ok(self.binary_same(op, a, &c))
    }
}
