//! `decode_words`: narrow values stored in 32-bit words, widened with 32-bit integer arithmetic only (the form a
//! device that stores only 32-bit values reads, `tapeout_graph`'s Vulkan pass).

use tapeout_graph::{DType, Shape};

use super::{Emitter, Val, list, ty};
use crate::error::Result;

impl Emitter<'_, '_, '_> {
    /// `words [W]` (i32) as the `[W · 32 / bits]` values of `from` they hold, lowest bits first: sign-extended
    /// (signed integers) or zero-extended (unsigned) to i32, or widened to f32 (`bf16`: its bits are the top half of
    /// the f32; `f16`: [`Emitter::f16_bits_to_f32`]). Every step is exact.
    pub(crate) fn decode_words(&mut self, words: &Val, from: DType, bits: u32) -> Result<Val> {
        let [w] = self.static_dims(words)?[..] else {
            return Err(self.err(format!("decode_words takes words [W], not [{}]", words.shape)));
        };
        let per_word = 32 / bits;
        let grid = Shape::of(&[w, u64::from(per_word)]);
        let spread = self.broadcast_to(words, &[0], &grid, None)?;
        // Value j of a word moved to its top bits: shifted left by 32 - bits·(j + 1).
        let lefts: Vec<u32> = (0..per_word).map(|j| 32 - bits * (j + 1)).collect();
        let lefts = self.assign(
            &format!(
                "stablehlo.constant dense<[{}]> : {}",
                list(&lefts),
                ty(&Shape::of(&[u64::from(per_word)]), DType::I32)
            ),
            Shape::of(&[u64::from(per_word)]),
            DType::I32,
        );
        let lefts = self.broadcast_to(&lefts, &[1], &grid, None)?;
        let top = self.binary_same("shift_left", &spread, &lefts);
        let down = self.splat(f64::from(32 - bits), &grid, DType::I32);
        let values = match from {
            DType::BF16 => {
                let high = self.splat(f64::from(0xFFFF_0000u32 as i32), &grid, DType::I32);
                let f = self.binary_same("and", &top, &high);
                self.bitcast(&f, DType::F32)
            }
            DType::F16 => {
                let h = self.binary_same("shift_right_logical", &top, &down);
                self.f16_bits_to_f32(&h)
            }
            DType::U8 | DType::U16 => self.binary_same("shift_right_logical", &top, &down),
            _ => self.binary_same("shift_right_arithmetic", &top, &down),
        };
        self.reshape(&values, &Shape::of(&[w * u64::from(per_word)]))
    }

    /// The f32 value of f16 bits `h` (i32, `0 ..= 0xFFFF`), exactly, in integer arithmetic and one exact float
    /// product: a normal number's exponent rebased (`+ 112 << 23`), infinities and NaNs (their payload kept) with
    /// the f32 exponent all ones, and a subnormal `m · 2^-24` computed as a float (a normal f32), so that no result
    /// depends on whether the device flushes subnormal floats.
    fn f16_bits_to_f32(&mut self, h: &Val) -> Val {
        let shape = h.shape.clone();
        let k = |e: &mut Self, v: i64| e.splat(v as f64, &shape, DType::I32);
        let (c10, c13, c15, c31) = (k(self, 10), k(self, 13), k(self, 15), k(self, 31));
        let (m1023, m7fff, rebase, inf) = (k(self, 0x3FF), k(self, 0x7FFF), k(self, 112 << 23), k(self, 0x7F80_0000));
        let zero = k(self, 0);
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
        let ulp = self.splat(2f64.powi(-24), &shape, DType::F32);
        let tiny = self.binary_same("multiply", &mant_f, &ulp);
        let tiny = self.bitcast(&tiny, DType::I32);
        let is_tiny = self.compare_same("EQ", &exp, &zero);
        let is_special = self.compare_same("EQ", &exp, &c31);
        let big = self.select_same(&is_special, &special, &normal);
        let bits = self.select_same(&is_tiny, &tiny, &big);
        let signed = self.binary_same("or", &bits, &sign);
        self.bitcast(&signed, DType::F32)
    }
}
