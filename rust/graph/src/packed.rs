//! Packed (quantized) block encodings and their dequantization to f32.
//!
//! Each GGML block type is a `#[repr(C)]` struct made only of byte arrays, so it has alignment 1,
//! its size is asserted at compile time, and a byte buffer can be viewed as a slice of blocks
//! without copying. One trait, [`BlockFormat`], covers them all. The arithmetic follows ggml's
//! scalar reference in the same order (no fused multiply-add), so results are bit-exact with
//! PyPI `gguf` 0.19.0's `dequantize`.

use std::fmt;

use bytemuck::{Pod, Zeroable};

/// How a packed tensor's bytes encode its values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// 32 elements in 34 bytes: f16 scale + 32 × i8.
    Q8_0,
    /// 32 elements in 18 bytes: f16 scale + 32 × 4-bit codes.
    Q4_0,
    /// 32 elements in 20 bytes: f16 scale and min + 32 × 4-bit codes.
    Q4_1,
    /// 32 elements in 22 bytes: f16 scale + 5-bit codes.
    Q5_0,
    /// 32 elements in 24 bytes: f16 scale and min + 5-bit codes.
    Q5_1,
    /// 256 elements in 144 bytes: K-quant with 6-bit sub-block scales and mins.
    Q4K,
    /// 256 elements in 176 bytes: K-quant with 5-bit codes.
    Q5K,
    /// 256 elements in 210 bytes: K-quant with 6-bit codes.
    Q6K,
    /// An encoding tapeout does not decode, kept by name (`TQ1_0`, `BitNet`, …).
    Other(String),
}

/// The order in which blocks are laid out in a packed tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum BlockOrder {
    /// GGML's order: blocks run along the innermost dimension, rows one after another.
    #[default]
    RowMajor,
    /// Any other order, kept by name (for example `INPUT_BLOCK_MAJOR`). Not decoded.
    Other(String),
}

impl fmt::Display for BlockOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockOrder::RowMajor => f.write_str("ROW_MAJOR"),
            BlockOrder::Other(s) => f.write_str(s),
        }
    }
}

impl Encoding {
    /// Every encoding tapeout decodes.
    pub const DECODABLE: [Encoding; 8] = [
        Encoding::Q8_0,
        Encoding::Q4_0,
        Encoding::Q4_1,
        Encoding::Q5_0,
        Encoding::Q5_1,
        Encoding::Q4K,
        Encoding::Q5K,
        Encoding::Q6K,
    ];

    /// The conventional name (`Q8_0`, `Q4_K`, …).
    #[must_use]
    pub fn name(&self) -> &str {
        match self {
            Encoding::Q8_0 => "Q8_0",
            Encoding::Q4_0 => "Q4_0",
            Encoding::Q4_1 => "Q4_1",
            Encoding::Q5_0 => "Q5_0",
            Encoding::Q5_1 => "Q5_1",
            Encoding::Q4K => "Q4_K",
            Encoding::Q5K => "Q5_K",
            Encoding::Q6K => "Q6_K",
            Encoding::Other(name) => name,
        }
    }

    /// The names of [`Encoding::DECODABLE`], comma-separated, for messages (the list is written once, there).
    #[must_use]
    pub fn decodable_names() -> String {
        Encoding::DECODABLE.iter().map(Encoding::name).collect::<Vec<_>>().join(", ")
    }

    /// Parses a name case-insensitively; unknown names become [`Encoding::Other`].
    #[must_use]
    pub fn parse(name: &str) -> Encoding {
        Encoding::DECODABLE
            .into_iter()
            .find(|e| e.name().eq_ignore_ascii_case(name))
            .unwrap_or_else(|| Encoding::Other(name.to_owned()))
    }

    /// `(elements per block, bytes per block)`, or `None` for an encoding tapeout does not know.
    #[must_use]
    pub fn block_geometry(&self) -> Option<(u64, u64)> {
        let (elems, bytes) = match self {
            Encoding::Q8_0 => (BlockQ8_0::ELEMS, size_of::<BlockQ8_0>()),
            Encoding::Q4_0 => (BlockQ4_0::ELEMS, size_of::<BlockQ4_0>()),
            Encoding::Q4_1 => (BlockQ4_1::ELEMS, size_of::<BlockQ4_1>()),
            Encoding::Q5_0 => (BlockQ5_0::ELEMS, size_of::<BlockQ5_0>()),
            Encoding::Q5_1 => (BlockQ5_1::ELEMS, size_of::<BlockQ5_1>()),
            Encoding::Q4K => (BlockQ4K::ELEMS, size_of::<BlockQ4K>()),
            Encoding::Q5K => (BlockQ5K::ELEMS, size_of::<BlockQ5K>()),
            Encoding::Q6K => (BlockQ6K::ELEMS, size_of::<BlockQ6K>()),
            Encoding::Other(_) => return None,
        };
        Some((elems as u64, bytes as u64))
    }

    /// The packed byte size of `elements` values, or `None` when the encoding is unknown, the
    /// count is not a whole number of blocks, or the size overflows.
    #[must_use]
    pub fn physical_bytes(&self, elements: u64) -> Option<u64> {
        let (per_block, block_bytes) = self.block_geometry()?;
        if elements % per_block != 0 {
            return None;
        }
        (elements / per_block).checked_mul(block_bytes)
    }

    /// The GGML type id (as in GGUF files).
    #[must_use]
    pub fn ggml_type(&self) -> Option<u32> {
        Some(match self {
            Encoding::Q4_0 => 2,
            Encoding::Q4_1 => 3,
            Encoding::Q5_0 => 6,
            Encoding::Q5_1 => 7,
            Encoding::Q8_0 => 8,
            Encoding::Q4K => 12,
            Encoding::Q5K => 13,
            Encoding::Q6K => 14,
            Encoding::Other(_) => return None,
        })
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One block of a packed format.
pub trait BlockFormat: Pod {
    /// Elements decoded from one block.
    const ELEMS: usize;
    /// Decodes this block into `out` (exactly [`BlockFormat::ELEMS`] values).
    fn dequantize(&self, out: &mut [f32]);
}

#[inline(always)]
fn f16(bytes: [u8; 2]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes(bytes)).to_f32()
}

/// Q8_0: `y = q · d`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub(crate) d: [u8; 2],
    pub(crate) qs: [i8; 32],
}
const _: () = assert!(size_of::<BlockQ8_0>() == 34);

impl BlockFormat for BlockQ8_0 {
    const ELEMS: usize = 32;
    #[inline(always)]
    fn dequantize(&self, out: &mut [f32]) {
        let d = f16(self.d);
        for (y, &q) in out.iter_mut().zip(&self.qs) {
            *y = f32::from(q) * d;
        }
    }
}

/// Q4_0: `y = (q − 8) · d`, low nibbles first half, high nibbles second half.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub(crate) d: [u8; 2],
    pub(crate) qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ4_0>() == 18);

impl BlockFormat for BlockQ4_0 {
    const ELEMS: usize = 32;
    #[inline(always)]
    fn dequantize(&self, out: &mut [f32]) {
        let d = f16(self.d);
        let (lo, hi) = out.split_at_mut(16);
        for ((a, b), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&self.qs) {
            *a = f32::from(i16::from(q & 0xF) - 8) * d;
            *b = f32::from(i16::from(q >> 4) - 8) * d;
        }
    }
}

/// Q4_1: `y = q · d + m` (two roundings), nibbles as Q4_0.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub(crate) d: [u8; 2],
    pub(crate) m: [u8; 2],
    pub(crate) qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ4_1>() == 20);

impl BlockFormat for BlockQ4_1 {
    const ELEMS: usize = 32;
    #[inline(always)]
    fn dequantize(&self, out: &mut [f32]) {
        let (d, m) = (f16(self.d), f16(self.m));
        let (lo, hi) = out.split_at_mut(16);
        for ((a, b), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&self.qs) {
            *a = f32::from(q & 0xF) * d + m;
            *b = f32::from(q >> 4) * d + m;
        }
    }
}

#[inline(always)]
pub(crate) fn five_bit_codes(qh: [u8; 4], qs: &[u8; 16]) -> [u8; 32] {
    let qh = u32::from_le_bytes(qh);
    let mut q = [0u8; 32];
    for j in 0..16 {
        let hi0 = u8::from((qh >> j) & 1 == 1) << 4;
        let hi1 = u8::from((qh >> (j + 16)) & 1 == 1) << 4;
        q[j] = (qs[j] & 0xF) | hi0;
        q[j + 16] = (qs[j] >> 4) | hi1;
    }
    q
}

/// Q5_0: `y = (q − 16) · d` with a fifth bit per element in `qh`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct BlockQ5_0 {
    pub(crate) d: [u8; 2],
    pub(crate) qh: [u8; 4],
    pub(crate) qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ5_0>() == 22);

impl BlockFormat for BlockQ5_0 {
    const ELEMS: usize = 32;
    #[inline(always)]
    fn dequantize(&self, out: &mut [f32]) {
        let d = f16(self.d);
        for (y, q) in out.iter_mut().zip(five_bit_codes(self.qh, &self.qs)) {
            *y = f32::from(i16::from(q) - 16) * d;
        }
    }
}

/// Q5_1: `y = q · d + m` (two roundings).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct BlockQ5_1 {
    pub(crate) d: [u8; 2],
    pub(crate) m: [u8; 2],
    pub(crate) qh: [u8; 4],
    pub(crate) qs: [u8; 16],
}
const _: () = assert!(size_of::<BlockQ5_1>() == 24);

impl BlockFormat for BlockQ5_1 {
    const ELEMS: usize = 32;
    #[inline(always)]
    fn dequantize(&self, out: &mut [f32]) {
        let (d, m) = (f16(self.d), f16(self.m));
        for (y, q) in out.iter_mut().zip(five_bit_codes(self.qh, &self.qs)) {
            *y = f32::from(q) * d + m;
        }
    }
}

/// The 6-bit scale and min of sub-block `j` of a Q4_K / Q5_K block.
#[inline(always)]
pub(crate) fn k_scale_min(j: usize, s: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    }
}

/// Q4_K: 8 sub-blocks of 32, `y = d·sc · q − dmin·m`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct BlockQ4K {
    pub(crate) d: [u8; 2],
    pub(crate) dmin: [u8; 2],
    pub(crate) scales: [u8; 12],
    pub(crate) qs: [u8; 128],
}
const _: () = assert!(size_of::<BlockQ4K>() == 144);

impl BlockFormat for BlockQ4K {
    const ELEMS: usize = 256;
    #[inline(always)]
    fn dequantize(&self, out: &mut [f32]) {
        decode_k(self.d, self.dmin, &self.scales, &self.qs, None, out);
    }
}

/// The Q4_K/Q5_K loop: 4 groups of 64 outputs, `y = d·sc · q − dmin·m`, with the fifth bit of
/// each code taken from `qh` for Q5_K. Inlined per format, so `qh = None` costs nothing.
#[inline(always)]
fn decode_k(d: [u8; 2], dmin: [u8; 2], scales: &[u8; 12], qs: &[u8; 128], qh: Option<&[u8; 32]>, out: &mut [f32]) {
    let (d, dmin) = (f16(d), f16(dmin));
    for (g, (ys, qs)) in out.chunks_exact_mut(64).zip(qs.chunks_exact(32)).enumerate() {
        let (sc1, m1) = k_scale_min(2 * g, scales);
        let (sc2, m2) = k_scale_min(2 * g + 1, scales);
        let (d1, m1) = (d * f32::from(sc1), dmin * f32::from(m1));
        let (d2, m2) = (d * f32::from(sc2), dmin * f32::from(m2));
        let (lo, hi) = ys.split_at_mut(32);
        for (l, ((a, b), &q)) in lo.iter_mut().zip(hi.iter_mut()).zip(qs).enumerate() {
            let (h0, h1) = match qh {
                Some(qh) => {
                    let h = qh[l] >> (2 * g);
                    ((h & 1) << 4, ((h >> 1) & 1) << 4)
                }
                None => (0, 0),
            };
            *a = d1 * f32::from((q & 0xF) + h0) - m1;
            *b = d2 * f32::from((q >> 4) + h1) - m2;
        }
    }
}

/// Q5_K: Q4_K with a fifth bit per element in `qh`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct BlockQ5K {
    pub(crate) d: [u8; 2],
    pub(crate) dmin: [u8; 2],
    pub(crate) scales: [u8; 12],
    pub(crate) qh: [u8; 32],
    pub(crate) qs: [u8; 128],
}
const _: () = assert!(size_of::<BlockQ5K>() == 176);

impl BlockFormat for BlockQ5K {
    const ELEMS: usize = 256;
    #[inline(always)]
    fn dequantize(&self, out: &mut [f32]) {
        decode_k(self.d, self.dmin, &self.scales, &self.qs, Some(&self.qh), out);
    }
}

/// Q6_K: 16 sub-blocks of 16, `y = (d · sc) · (q − 32)`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct BlockQ6K {
    pub(crate) ql: [u8; 128],
    pub(crate) qh: [u8; 64],
    pub(crate) sc: [i8; 16],
    pub(crate) d: [u8; 2],
}
const _: () = assert!(size_of::<BlockQ6K>() == 210);

impl BlockFormat for BlockQ6K {
    const ELEMS: usize = 256;
    #[inline(always)]
    fn dequantize(&self, out: &mut [f32]) {
        let d = f16(self.d);
        for (h, ys) in out.chunks_exact_mut(128).enumerate() {
            let ql = &self.ql[64 * h..64 * h + 64];
            let qh = &self.qh[32 * h..32 * h + 32];
            let sc = &self.sc[8 * h..8 * h + 8];
            for l in 0..32 {
                let i = l / 16;
                let code = |v: u8| f32::from(i16::from(v) - 32);
                let q1 = (ql[l] & 0xF) | ((qh[l] & 3) << 4);
                let q2 = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
                let q3 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                let q4 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                ys[l] = (d * f32::from(sc[i])) * code(q1);
                ys[l + 32] = (d * f32::from(sc[i + 2])) * code(q2);
                ys[l + 64] = (d * f32::from(sc[i + 4])) * code(q3);
                ys[l + 96] = (d * f32::from(sc[i + 6])) * code(q4);
            }
        }
    }
}

#[inline(always)]
fn decode_portable<B: BlockFormat>(blocks: &[u8], out: &mut [f32]) {
    let blocks: &[B] = bytemuck::cast_slice(blocks);
    for (b, o) in blocks.iter().zip(out.chunks_exact_mut(B::ELEMS)) {
        b.dequantize(o);
    }
}

/// The same loop compiled for AVX2 + F16C (wider integer-to-float conversion, hardware f16).
/// FMA is deliberately not enabled: the evaluation order must stay two roundings.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
fn decode_avx2<B: BlockFormat>(blocks: &[u8], out: &mut [f32]) {
    decode_portable::<B>(blocks, out);
}

fn decode_all<B: BlockFormat>(blocks: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: the CPU supports the features `decode_avx2` was compiled for (checked just above).
        return unsafe { decode_avx2::<B>(blocks, out) };
    }
    decode_portable::<B>(blocks, out);
}

/// Why a packed buffer could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The encoding is not one tapeout decodes.
    #[error("encoding {0} cannot be decoded by tapeout (decodable: {names})", names = Encoding::decodable_names())]
    Unsupported(String),
    /// The buffers do not hold whole blocks, or disagree in size.
    #[error(
        "{encoding}: {bytes} packed bytes and {elements} output values are not the same whole number of {block_bytes}-byte blocks of {block_elems} values"
    )]
    Size {
        /// Encoding name.
        encoding: String,
        /// Packed input bytes.
        bytes: u64,
        /// Output values.
        elements: u64,
        /// Bytes per block.
        block_bytes: u64,
        /// Values per block.
        block_elems: u64,
    },
}

/// Decodes whole blocks of `encoding` from `blocks` into `out`.
pub fn dequantize(encoding: &Encoding, blocks: &[u8], out: &mut [f32]) -> Result<(), DecodeError> {
    let (elems, bytes) = encoding.block_geometry().ok_or_else(|| DecodeError::Unsupported(encoding.name().into()))?;
    let n_blocks = blocks.len() as u64 / bytes;
    if blocks.len() as u64 % bytes != 0 || n_blocks.checked_mul(elems) != Some(out.len() as u64) {
        return Err(DecodeError::Size {
            encoding: encoding.name().into(),
            bytes: blocks.len() as u64,
            elements: out.len() as u64,
            block_bytes: bytes,
            block_elems: elems,
        });
    }
    match encoding {
        Encoding::Q8_0 => decode_all::<BlockQ8_0>(blocks, out),
        Encoding::Q4_0 => decode_all::<BlockQ4_0>(blocks, out),
        Encoding::Q4_1 => decode_all::<BlockQ4_1>(blocks, out),
        Encoding::Q5_0 => decode_all::<BlockQ5_0>(blocks, out),
        Encoding::Q5_1 => decode_all::<BlockQ5_1>(blocks, out),
        Encoding::Q4K => decode_all::<BlockQ4K>(blocks, out),
        Encoding::Q5K => decode_all::<BlockQ5K>(blocks, out),
        Encoding::Q6K => decode_all::<BlockQ6K>(blocks, out),
        Encoding::Other(name) => return Err(DecodeError::Unsupported(name.clone())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: f32) -> [u8; 2] {
        half::f16::from_f32(v).to_bits().to_le_bytes()
    }

    fn decode(e: &Encoding, block: &[u8]) -> Vec<f32> {
        let (elems, _) = e.block_geometry().unwrap();
        let mut out = vec![0f32; usize::try_from(elems).unwrap()];
        dequantize(e, block, &mut out).unwrap();
        out
    }

    #[test]
    fn q8_0_scales_signed_codes() {
        let mut b = h(0.5).to_vec();
        b.extend((0..32).map(|i: i8| (i - 16).to_le_bytes()[0]));
        let y = decode(&Encoding::Q8_0, &b);
        assert_eq!(y[0], -8.0);
        assert_eq!(y[31], 7.5);
    }

    #[test]
    fn q4_0_low_nibbles_fill_the_first_half() {
        let mut b = h(2.0).to_vec();
        b.extend([0xA3u8; 16]); // low nibble 3, high nibble 10
        let y = decode(&Encoding::Q4_0, &b);
        assert!(y[..16].iter().all(|&v| v == (3.0 - 8.0) * 2.0));
        assert!(y[16..].iter().all(|&v| v == (10.0 - 8.0) * 2.0));
    }

    #[test]
    fn q5_fifth_bit_comes_from_qh() {
        let mut b = h(1.0).to_vec();
        b.extend(0x0000_0001u32.to_le_bytes()); // only element 0 has its 5th bit
        b.extend([0u8; 16]);
        let y = decode(&Encoding::Q5_0, &b);
        assert_eq!((y[0], y[1], y[16]), (0.0, -16.0, -16.0));

        let mut b = h(1.0).to_vec();
        b.extend(h(0.25));
        b.extend(0x0001_0000u32.to_le_bytes()); // element 16
        b.extend([0x21u8; 16]);
        let y = decode(&Encoding::Q5_1, &b);
        assert_eq!((y[0], y[16], y[17]), (1.25, 18.25, 2.25));
    }

    #[test]
    fn q4_k_unpacks_six_bit_scales_and_mins() {
        let mut b = h(1.0).to_vec();
        b.extend(h(1.0));
        // sc0 = 2, m0 = 1; sub-block 4: sc = (s[8]&0xF) | (s[0]>>6)<<4 = 3 | 1<<4 = 19
        let mut scales = [0u8; 12];
        scales[0] = 2 | (1 << 6);
        scales[4] = 1;
        scales[8] = 3;
        b.extend(scales);
        b.extend([0x15u8; 128]); // low 5, high 1
        let y = decode(&Encoding::Q4K, &b);
        assert_eq!(y[0], 2.0 * 5.0 - 1.0);
        assert_eq!(y[128], 19.0 * 5.0); // sub-block 4 (group 2, low nibbles): min of sub-block 4 is 0
    }

    #[test]
    fn q6_k_scale_is_applied_before_the_code() {
        let mut b = vec![0u8; 210];
        b[192] = 3; // sc[0]
        b[208..210].copy_from_slice(&h(0.5));
        b[0] = 0x0F; // ql[0] low = 15, qh[0] = 0 → code 15 - 32 = -17
        let y = decode(&Encoding::Q6K, &b);
        assert_eq!(y[0], (0.5 * 3.0) * -17.0);
        assert_eq!(y[1], (0.5 * 3.0) * -32.0);
    }

    /// Blocks and PyPI gguf 0.19.0's dequantization of them, committed in `testdata/ggml/` (written by
    /// `tests/ggml/gen_golden.py`; 8 blocks with finite scales, then 16 with subnormal, zero, ±Inf and NaN scales).
    fn golden(e: &Encoding) -> (&'static [u8], Vec<f32>) {
        macro_rules! files {
            ($name:literal) => {
                (
                    &include_bytes!(concat!("testdata/ggml/", $name, ".bin"))[..],
                    &include_bytes!(concat!("testdata/ggml/", $name, ".f32"))[..],
                )
            };
        }
        let (raw, f32s) = match e {
            Encoding::Q8_0 => files!("Q8_0"),
            Encoding::Q4_0 => files!("Q4_0"),
            Encoding::Q4_1 => files!("Q4_1"),
            Encoding::Q5_0 => files!("Q5_0"),
            Encoding::Q5_1 => files!("Q5_1"),
            Encoding::Q4K => files!("Q4_K"),
            Encoding::Q5K => files!("Q5_K"),
            Encoding::Q6K => files!("Q6_K"),
            Encoding::Other(_) => unreachable!("only decodable encodings have golden vectors"),
        };
        (raw, f32s.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    fn assert_bits_equal(what: &str, ours: &[f32], gguf: &[f32]) {
        assert_eq!(ours.len(), gguf.len(), "{what}: length");
        for (i, (x, y)) in ours.iter().zip(gguf).enumerate() {
            assert!(x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()), "{what}: value {i}: ours {x} gguf {y}");
        }
    }

    #[test]
    fn portable_and_dispatched_decoders_match_gguf_golden_vectors() {
        for e in Encoding::DECODABLE {
            let (raw, want) = golden(&e);
            assert!(want.iter().any(|v| v.is_nan()) && want.iter().any(|v| v.is_infinite()), "{e}: specials covered");
            // The decoder the export path runs (AVX2 + F16C on a CPU that has them).
            let mut dispatched = vec![0f32; want.len()];
            dequantize(&e, raw, &mut dispatched).unwrap();
            assert_bits_equal(&format!("{e} dispatched"), &dispatched, &want);
            // The portable body, whatever the CPU.
            let mut portable = vec![0f32; want.len()];
            match e {
                Encoding::Q8_0 => decode_portable::<BlockQ8_0>(raw, &mut portable),
                Encoding::Q4_0 => decode_portable::<BlockQ4_0>(raw, &mut portable),
                Encoding::Q4_1 => decode_portable::<BlockQ4_1>(raw, &mut portable),
                Encoding::Q5_0 => decode_portable::<BlockQ5_0>(raw, &mut portable),
                Encoding::Q5_1 => decode_portable::<BlockQ5_1>(raw, &mut portable),
                Encoding::Q4K => decode_portable::<BlockQ4K>(raw, &mut portable),
                Encoding::Q5K => decode_portable::<BlockQ5K>(raw, &mut portable),
                Encoding::Q6K => decode_portable::<BlockQ6K>(raw, &mut portable),
                Encoding::Other(_) => unreachable!(),
            }
            assert_bits_equal(&format!("{e} portable"), &portable, &want);
        }
    }

    #[test]
    fn sizes_and_names() {
        assert_eq!(Encoding::parse("q4_k"), Encoding::Q4K);
        assert_eq!(Encoding::parse("TQ1_0"), Encoding::Other("TQ1_0".into()));
        assert_eq!(Encoding::Q4K.physical_bytes(512), Some(288));
        assert_eq!(Encoding::Q4K.physical_bytes(100), None);
        assert_eq!(Encoding::Other("x".into()).physical_bytes(32), None);
        let err = dequantize(&Encoding::Q8_0, &[0; 33], &mut [0.0; 32]).unwrap_err();
        assert!(matches!(err, DecodeError::Size { .. }));
        let err = dequantize(&Encoding::Other("TQ1_0".into()), &[], &mut []).unwrap_err();
        assert!(matches!(&err, DecodeError::Unsupported(name) if name == "TQ1_0"), "{err}");
    }
}
