//! GGML blocks split into planes ([`PackedConstantHandling::Keep`](crate::PackedConstantHandling::Keep)): the
//! integer codes of every element as one tensor, and each per-block number (scale, min, K-quant sub-block codes and
//! super-scales) as another, laid out for the program that contracts them.
//!
//! A packed weight `W [N, K]` (blocks along `K`, GGML's and PyTorch's `[out, in]`) with sub-blocks of `B` values
//! (`Kb = K / B` of them) and blocks of `E` values (`Ks = K / E`) becomes, under its key, the planes below. Each
//! holds `Np` rows where the table says `N`: `N` rounded up to [`SUB_BYTE_ROWS`] for a format with sub-byte
//! codes (the rows past `N` are zero), `N` itself for Q8_0.
//!
//! | plane | dtype | shape | holds |
//! |---|---|---|---|
//! | `<key>.qs` | `i8` (Q8_0) or `i4` (two per byte, low nibble first) | `[Kb, B, N]` | the code of `W[n, kb·B + l]` minus the format's offset; for 5/6-bit codes their low 4 bits minus 8 |
//! | `<key>.qh` | `i2` (four per byte) | `[Kb, B, N]` | 5/6-bit codes only: their high bits (`code >> 4`, minus 2 for 6-bit) |
//! | `<key>.d` | f16 | `[Kb, N]` (32-blocks) or `[Ks, N]` (K-quants) | the block scale `d` |
//! | `<key>.m` | f16 | `[Kb, N]` | Q4_1's and Q5_1's min `m` |
//! | `<key>.scales` | i8 | `[Kb, N]` | K-quants' sub-block scale codes (6-bit; Q6_K's signed 8-bit) |
//! | `<key>.mins` | i8 | `[Kb, N]` | Q4_K/Q5_K's sub-block min codes |
//! | `<key>.dmin` | f16 | `[Ks, N]` | Q4_K/Q5_K's `dmin` |
//!
//! With `A[kb, n]` the sub-block's scale (`d`, or `d·scales`) and `C[kb, n]` its offset term (`offset·A + m`, or
//! `offset·A − dmin·mins`, plus `bias·A` with a `qh` plane; none for Q8_0, Q4_0), `W[n, kb·B + l] =
//! A·(qs + 16·qh) + C`: the program contracts `x` with `qs` (and `qh`) per sub-block, scales by `A`, and adds
//! `C · Σ x` per sub-block.
//!
//! Q8_0's and Q4_0's `qs` may instead be stored in row bands of 32, `[Np / 32, Kb, B, 32]`
//! ([`ConstantData::Plane`](crate::ConstantData::Plane)'s `band`, chosen by the `keep_packed` rewrite): the program
//! names the same `[Kb, B, Np]` values.

use crate::dtype::DType;
use crate::packed::{BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, Encoding};
use crate::tensor::StreamError;

/// The row multiple of a weight with sub-byte planes. IREE 3.13's llvm-cpu code reads an `i4`/`i2` tensor whose
/// innermost rows do not fill whole bytes from the wrong place, and cannot compile a contraction whose tiles of the
/// innermost dimension need a masked sub-byte load (a row count that is not a multiple of the tile: 510 rows on
/// AVX-512, for one). Rows padded to 64 fill whole bytes and divide into every tile measured, on a generic CPU and on
/// AVX-512 (docs/graph-format.md, tests/iree/test_shape_sweep.py).
pub const SUB_BYTE_ROWS: u64 = 64;
// The CPU tuning spec (`tapeout_hlo::cpu_tuning_spec`) tiles one-row products over `i4` codes in vectors of 32 rows
// with no distribution tile along the rows: a sub-byte plane must be a whole number of those vectors.
const _: () = assert!(SUB_BYTE_ROWS % 32 == 0);

/// One plane of a packed weight kept planar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Plane {
    /// The codes, offset-centred; for 5- and 6-bit formats only their low 4 bits, less 8.
    Quants,
    /// The high bits of 5- and 6-bit codes (`code >> 4`, less 2 for 6-bit), `i2`.
    QuantsHigh,
    /// The block scale `d` (per sub-block for 32-value blocks, per super-block for K-quants).
    Scale,
    /// Q4_1's and Q5_1's per-block min `m`.
    Min,
    /// K-quants' sub-block scale codes.
    SubScales,
    /// Q4_K/Q5_K's sub-block min codes.
    SubMins,
    /// Q4_K/Q5_K's super-block `dmin`.
    SuperMin,
}

impl Plane {
    /// The suffix of its key (`qs`, `d`, `m`, `scales`, `mins`, `dmin`).
    #[must_use]
    pub fn suffix(self) -> &'static str {
        match self {
            Plane::Quants => "qs",
            Plane::QuantsHigh => "qh",
            Plane::Scale => "d",
            Plane::Min => "m",
            Plane::SubScales => "scales",
            Plane::SubMins => "mins",
            Plane::SuperMin => "dmin",
        }
    }
}

/// The high-bit plane of 5- and 6-bit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HighBits {
    /// Subtracted from `code >> 4` so it fits i2 (0 for one high bit, 2 for two).
    pub offset: i32,
    /// `qs + 16·qh + bias` is the centred code: `8 + 16·offset − format offset`.
    pub bias: i32,
}

/// How a format splits: sub-block size, code offset, code width, and its planes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Values per block.
    pub block_values: u64,
    /// Bytes per block.
    pub block_bytes: u64,
    /// Values per sub-block (the contraction's block).
    pub sub_values: u64,
    /// Subtracted from each code to centre it (the `qs` of a format without a high plane).
    pub offset: i32,
    /// `I4` or `I8`.
    pub quants: DType,
    /// 5- and 6-bit formats: their codes are `qs + 16·qh + high_bias` (low 4 bits as i4 less 8, high bits as i2),
    /// where `high_bias` makes that the centred code (`code − offset`).
    pub high: Option<HighBits>,
    /// True for K-quants: `d` (and `dmin`) are per super-block, scaled by per-sub-block codes.
    pub two_level: bool,
    /// Whether the format has an offset term (`C` above): a min, or a code offset to undo.
    pub has_offset_term: bool,
}

impl Split {
    /// The split of `encoding`, or `None` when it is not decodable.
    #[must_use]
    pub fn of(encoding: &Encoding) -> Option<Split> {
        let (block_values, block_bytes) = encoding.block_geometry()?;
        // One high bit (5-bit codes) as i2 0..1; two (6-bit) as i2 less 2.
        let five = Some(HighBits { offset: 0, bias: 8 - 16 });
        let six = Some(HighBits { offset: 2, bias: 8 + 32 - 32 });
        let (sub_values, offset, quants, high, two_level, has_offset_term) = match encoding {
            Encoding::Q8_0 => (32, 0, DType::I8, None, false, false),
            Encoding::Q4_0 => (32, 8, DType::I4, None, false, false),
            Encoding::Q4_1 => (32, 8, DType::I4, None, false, true),
            Encoding::Q5_0 => (32, 16, DType::I4, five, false, false),
            Encoding::Q5_1 => (32, 16, DType::I4, five, false, true),
            Encoding::Q4K => (32, 8, DType::I4, None, true, true),
            Encoding::Q5K => (32, 16, DType::I4, five, true, true),
            Encoding::Q6K => (16, 32, DType::I4, six, true, false),
            Encoding::Other(_) => return None,
        };
        Some(Split { block_values, block_bytes, sub_values, offset, quants, high, two_level, has_offset_term })
    }

    /// Its planes, quants first.
    #[must_use]
    pub fn planes(&self, encoding: &Encoding) -> Vec<Plane> {
        let mut p = vec![Plane::Quants];
        if self.high.is_some() {
            p.push(Plane::QuantsHigh);
        }
        p.push(Plane::Scale);
        match encoding {
            Encoding::Q4_1 | Encoding::Q5_1 => p.push(Plane::Min),
            Encoding::Q4K | Encoding::Q5K => p.extend([Plane::SubScales, Plane::SubMins, Plane::SuperMin]),
            Encoding::Q6K => p.push(Plane::SubScales),
            _ => {}
        }
        p
    }

    /// Values of `plane` one block yields.
    #[must_use]
    pub fn values_per_block(&self, plane: Plane) -> u64 {
        match plane {
            Plane::Quants | Plane::QuantsHigh => self.block_values,
            Plane::Scale | Plane::SuperMin if self.two_level => 1,
            _ => self.block_values / self.sub_values,
        }
    }

    /// The element type of `plane`.
    #[must_use]
    pub fn dtype(&self, plane: Plane) -> DType {
        match plane {
            Plane::Quants => self.quants,
            Plane::QuantsHigh => DType::I2,
            Plane::Scale | Plane::Min | Plane::SuperMin => DType::F16,
            Plane::SubScales | Plane::SubMins => DType::I8,
        }
    }

    /// The multiple the rows of a kept weight are padded to in every plane: [`SUB_BYTE_ROWS`] when it has a
    /// sub-byte plane (i4 codes, i2 high bits), 1 for i8 codes.
    #[must_use]
    pub fn row_multiple(&self) -> u64 {
        if self.quants.is_sub_byte() || self.high.is_some() { SUB_BYTE_ROWS } else { 1 }
    }

    /// `rows` rounded up to [`Split::row_multiple`]; `None` past `u64::MAX`.
    #[must_use]
    pub fn padded_rows(&self, rows: u64) -> Option<u64> {
        let m = self.row_multiple();
        rows.div_ceil(m).checked_mul(m)
    }

    /// Bytes per value in the tile a plane is assembled in (i4 codes are packed two per byte afterwards).
    #[must_use]
    pub fn tile_width(&self, plane: Plane) -> u64 {
        if self.dtype(plane) == DType::F16 { 2 } else { 1 }
    }
}

/// `v` as one i8 byte. Every value a plane holds fits (centred codes, their low and high parts, sub-block scale and
/// min codes: the widest is Q8_0's own i8); one that does not is a broken invariant, reported, never written as 0.
fn i8_byte(encoding: &Encoding, plane: Plane, v: i32) -> Result<u8, StreamError> {
    i8::try_from(v).map(|b| b.to_le_bytes()[0]).map_err(|_| {
        StreamError::Decode(format!("a {encoding} '{}' value {v} does not fit i8 (a bug in tapeout)", plane.suffix()))
    })
}

fn i8s(
    encoding: &Encoding,
    plane: Plane,
    values: impl IntoIterator<Item = i32>,
    out: &mut [u8],
) -> Result<(), StreamError> {
    for (o, v) in out.iter_mut().zip(values) {
        *o = i8_byte(encoding, plane, v)?;
    }
    Ok(())
}

/// A per-block count (at most 256) as a `usize`.
fn count_of(encoding: &Encoding, plane: Plane, count: u64, most: u64) -> Result<usize, StreamError> {
    usize::try_from(count).ok().filter(|_| (1..=most).contains(&count)).ok_or_else(|| {
        StreamError::Decode(format!("{count} '{}' values per {encoding} block (1 to {most})", plane.suffix()))
    })
}

fn split_of(encoding: &Encoding) -> Result<Split, StreamError> {
    Split::of(encoding).ok_or_else(|| StreamError::Decode(format!("encoding {encoding} cannot be split into planes")))
}

/// Writes the values of `plane` for one block of `encoding` into `out` (`values_per_block · tile_width` bytes).
/// `block` is exactly one block.
pub(crate) fn split_block(encoding: &Encoding, plane: Plane, block: &[u8], out: &mut [u8]) -> Result<(), StreamError> {
    let n = count_of(encoding, plane, split_of(encoding)?.values_per_block(plane), 256)?;
    split_block_window(encoding, plane, block, [0, n], out)
}

/// [`split_block`] for values `v0 .. v1` of the block only (`(v1 − v0) · tile_width` bytes into `out`): a tall
/// table repacked a window at a time computes each code once.
pub(crate) fn split_block_window(
    encoding: &Encoding,
    plane: Plane,
    block: &[u8],
    [v0, v1]: [usize; 2],
    out: &mut [u8],
) -> Result<(), StreamError> {
    let split = split_of(encoding)?;
    if !matches!(plane, Plane::Quants | Plane::QuantsHigh) {
        // A few values per block (scales, mins: at most 16): split whole, keep the window.
        let width = if split.tile_width(plane) == 2 { 2 } else { 1 };
        let mut all = [0u8; 32];
        let n = count_of(encoding, plane, split.values_per_block(plane), 16)? * width;
        split_numbers(encoding, plane, block, &mut all[..n])?;
        out[..(v1 - v0) * width].copy_from_slice(&all[v0 * width..v1 * width]);
        return Ok(());
    }
    let mut codes = [0i32; 256];
    let n = (v1 - v0).min(codes.len());
    raw_codes(encoding, block, v0, &mut codes[..n]);
    for (o, &code) in out.iter_mut().zip(&codes[..n]) {
        let v = match (split.high, plane) {
            (Some(_), Plane::Quants) => (code & 15) - 8,
            (Some(high), _) => (code >> 4) - high.offset,
            (None, _) => code - split.offset,
        };
        *o = i8_byte(encoding, plane, v)?;
    }
    Ok(())
}

/// The raw codes of elements `v0 .. v0 + out.len()` of one block (Q8_0: its signed values), as ggml lays them out
/// (the `block_q*` structs of ggml's `ggml-common.h`, whose fields and sizes the `Block*` types in `packed.rs`
/// declare); the one place tapeout reads codes for planes.
fn raw_codes(encoding: &Encoding, b: &[u8], v0: usize, out: &mut [i32]) {
    let nibble = |byte: u8, high: bool| i32::from(if high { byte >> 4 } else { byte & 0xF });
    let idx = v0..v0 + out.len();
    match encoding {
        Encoding::Q8_0 => out.iter_mut().zip(idx).for_each(|(o, i)| *o = i32::from(i8::from_le_bytes([b[2 + i]]))),
        Encoding::Q4_0 | Encoding::Q4_1 => {
            let qs = if *encoding == Encoding::Q4_0 { 2 } else { 4 };
            out.iter_mut().zip(idx).for_each(|(o, i)| *o = nibble(b[qs + i % 16], i >= 16));
        }
        Encoding::Q5_0 | Encoding::Q5_1 => {
            let (qh, qs) = if *encoding == Encoding::Q5_0 { (2, 6) } else { (4, 8) };
            let bits = u32::from_le_bytes([b[qh], b[qh + 1], b[qh + 2], b[qh + 3]]);
            for (o, i) in out.iter_mut().zip(idx) {
                *o = nibble(b[qs + i % 16], i >= 16) | (i32::from((bits >> i) & 1 == 1) << 4);
            }
        }
        Encoding::Q4K | Encoding::Q5K => {
            let (qs, five) = if *encoding == Encoding::Q4K { (16, false) } else { (48, true) };
            for (o, i) in out.iter_mut().zip(idx) {
                let (g, w) = (i / 64, i % 64);
                let l = w % 32;
                let high = if five { i32::from((b[16 + l] >> (2 * g + usize::from(w >= 32))) & 1) << 4 } else { 0 };
                *o = nibble(b[qs + 32 * g + l], w >= 32) | high;
            }
        }
        Encoding::Q6K => {
            for (o, i) in out.iter_mut().zip(idx) {
                let (h, w) = (i / 128, i % 128);
                let (l, quarter) = (w % 32, w / 32);
                let ql = b[64 * h + l + if quarter % 2 == 1 { 32 } else { 0 }];
                let qh = b[128 + 32 * h + l];
                *o = nibble(ql, quarter >= 2) | (i32::from((qh >> (2 * quarter)) & 3) << 4);
            }
        }
        Encoding::Other(_) => out.fill(0),
    }
}

/// One block's per-block numbers of `plane` (every plane but the codes): f16 scales and mins as stored, K-quant
/// sub-block codes as i8.
fn split_numbers(encoding: &Encoding, plane: Plane, block: &[u8], out: &mut [u8]) -> Result<(), StreamError> {
    let f16 = |out: &mut [u8], v: [u8; 2]| out[..2].copy_from_slice(&v);
    match encoding {
        Encoding::Q8_0 => f16(out, bytemuck::from_bytes::<BlockQ8_0>(block).d),
        Encoding::Q4_0 => f16(out, bytemuck::from_bytes::<BlockQ4_0>(block).d),
        Encoding::Q5_0 => f16(out, bytemuck::from_bytes::<BlockQ5_0>(block).d),
        Encoding::Q4_1 => {
            let b: &BlockQ4_1 = bytemuck::from_bytes(block);
            f16(out, if plane == Plane::Min { b.m } else { b.d });
        }
        Encoding::Q5_1 => {
            let b: &BlockQ5_1 = bytemuck::from_bytes(block);
            f16(out, if plane == Plane::Min { b.m } else { b.d });
        }
        Encoding::Q4K | Encoding::Q5K => {
            let (d, dmin, scales) = if *encoding == Encoding::Q4K {
                let b: &BlockQ4K = bytemuck::from_bytes(block);
                (b.d, b.dmin, b.scales)
            } else {
                let b: &BlockQ5K = bytemuck::from_bytes(block);
                (b.d, b.dmin, b.scales)
            };
            match plane {
                Plane::SubScales | Plane::SubMins => {
                    let code = |j| {
                        let (scale, min) = crate::packed::k_scale_min(j, &scales);
                        i32::from(if plane == Plane::SubMins { min } else { scale })
                    };
                    return i8s(encoding, plane, (0..8).map(code), out);
                }
                Plane::SuperMin => f16(out, dmin),
                _ => f16(out, d),
            }
        }
        Encoding::Q6K => {
            let b: &BlockQ6K = bytemuck::from_bytes(block);
            match plane {
                // Sub-block j covers values 16j .. 16j + 16: in the decoder's table, scale index i + 2s for the
                // s-th quarter of a half, which is exactly sc[j].
                Plane::SubScales => return i8s(encoding, plane, b.sc.iter().map(|&s| i32::from(s)), out),
                _ => f16(out, b.d),
            }
        }
        Encoding::Other(_) => {
            return Err(StreamError::Decode(format!("encoding {encoding} cannot be split into planes")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any window of any plane equals the same values of the whole block's split.
    #[test]
    /// A window of a block's values splits to the same bytes as that part of the whole block's split. The whole
    /// split (`split_block`, the window `[0, n]`) is not checked here against itself: its oracle is the
    /// dequantizer, in `planes_recombine_to_the_dequantized_values`, and the dequantizer's is PyPI gguf.
    fn windows_equal_the_whole_split() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for enc in Encoding::DECODABLE {
            let s = Split::of(&enc).unwrap();
            for _ in 0..32 {
                let block: Vec<u8> = (0..s.block_bytes)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        seed.to_le_bytes()[0]
                    })
                    .collect();
                for p in s.planes(&enc) {
                    let (n, w) =
                        (usize::try_from(s.values_per_block(p)).unwrap(), usize::try_from(s.tile_width(p)).unwrap());
                    let mut whole = vec![0u8; n * w];
                    split_block(&enc, p, &block, &mut whole).unwrap();
                    for (v0, v1) in [(0, 1), (n - 1, n), (n / 3, n / 2 + 1), (n / 2, n), (1, n)] {
                        let mut win = vec![0u8; (v1 - v0) * w];
                        split_block_window(&enc, p, &block, [v0, v1], &mut win).unwrap();
                        assert_eq!(win, whole[v0 * w..v1 * w], "{enc} {p:?} [{v0}, {v1})");
                    }
                }
            }
        }
    }

    /// The planes recombine to exactly what the dequantizer computes, for every format (random blocks, finite
    /// scales): `W = A·qs + C` evaluated in f64 and rounded, against the f32 dequantizer, within one f32 ulp of
    /// the larger term (the dequantizer rounds its two products separately).
    #[test]
    fn planes_recombine_to_the_dequantized_values() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for enc in Encoding::DECODABLE {
            let s = Split::of(&enc).unwrap();
            let bytes = usize::try_from(s.block_bytes).unwrap();
            for _ in 0..64 {
                let mut block: Vec<u8> = (0..bytes).map(|_| next().to_le_bytes()[0]).collect();
                let finite = |v: f32| half::f16::from_f32(v).to_le_bytes();
                let d = finite(0.01 + (next() % 1000) as f32 / 1000.0);
                let m = finite(-0.5 + (next() % 1000) as f32 / 1000.0);
                match enc {
                    Encoding::Q6K => block[208..210].copy_from_slice(&d),
                    Encoding::Q4_1 | Encoding::Q5_1 | Encoding::Q4K | Encoding::Q5K => {
                        block[0..2].copy_from_slice(&d);
                        block[2..4].copy_from_slice(&m);
                    }
                    _ => block[0..2].copy_from_slice(&d),
                }
                let n = usize::try_from(s.block_values).unwrap();
                let mut want = vec![0f32; n];
                crate::packed::dequantize(&enc, &block, &mut want).unwrap();
                let plane = |p: Plane| {
                    let k = usize::try_from(s.values_per_block(p) * s.tile_width(p)).unwrap();
                    let mut out = vec![0u8; k];
                    split_block(&enc, p, &block, &mut out).unwrap();
                    out
                };
                let f16s = |b: Vec<u8>| -> Vec<f64> {
                    b.chunks(2).map(|c| f64::from(half::f16::from_le_bytes([c[0], c[1]]).to_f32())).collect()
                };
                let mut codes: Vec<f64> = plane(Plane::Quants).iter().map(|&b| f64::from(b as i8)).collect();
                if let Some(high) = s.high {
                    for (c, &h) in codes.iter_mut().zip(&plane(Plane::QuantsHigh)) {
                        assert!((-8.0..=7.0).contains(c) && (-2..=1).contains(&(h as i8)), "{enc}: {c} {h}");
                        *c += 16.0 * f64::from(h as i8) + f64::from(high.bias);
                    }
                }
                let sub = usize::try_from(s.sub_values).unwrap();
                let subs = n / sub;
                let d = f16s(plane(Plane::Scale));
                let (a, c): (Vec<f64>, Vec<f64>) = (0..subs)
                    .map(|j| {
                        let off = f64::from(s.offset);
                        if s.two_level {
                            let sc = f64::from(plane(Plane::SubScales)[j] as i8);
                            let a = d[0] * sc;
                            let c = if s.has_offset_term {
                                let mn = f64::from(plane(Plane::SubMins)[j] as i8);
                                off * a - f16s(plane(Plane::SuperMin))[0] * mn
                            } else {
                                0.0
                            };
                            (a, c)
                        } else {
                            let c = if s.has_offset_term { off * d[j] + f16s(plane(Plane::Min))[j] } else { 0.0 };
                            (d[j], c)
                        }
                    })
                    .unzip();
                for (i, &w) in want.iter().enumerate() {
                    let j = i / sub;
                    let (prod, got) = (a[j] * codes[i], a[j] * codes[i] + c[j]);
                    let tol = f64::from(f32::EPSILON) * (prod.abs() + c[j].abs()) * 2.0;
                    assert!((got - f64::from(w)).abs() <= tol, "{enc} value {i}: planes give {got}, dequantizer {w}");
                }
            }
        }
    }
}
