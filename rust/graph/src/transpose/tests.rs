//! Transposed streams against the plain transpose of the held values, for every layout and odd sizes.

use super::*;
use crate::tensor::ChunkLender;
use std::cell::Cell;

/// f32 lent in chunks, counting lends.
struct Counting(Vec<f32>, Cell<u64>);
impl ChunkLender<f32> for Counting {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn with_chunk(
        &self,
        start: u64,
        len: u64,
        f: &mut dyn FnMut(&[f32]) -> Result<(), StreamError>,
    ) -> Result<(), StreamError> {
        self.1.set(self.1.get() + 1);
        let s = usize::try_from(start).unwrap();
        f(&self.0[s..s + usize::try_from(len).unwrap()])
    }
}

/// Q4_0 codes of `[rows, 64]` as a plane, against GGML's nibble layout read here directly: each output row is
/// the rows' codes less 8, then zeros to the next multiple of 64, packed two per byte across the plane.
#[test]
fn q4_0_code_planes_are_padded_to_64_rows() {
    for rows in [1u64, 2, 3, 5, 7, 8, 64, 65] {
        let blocks: Vec<u8> = (0..rows * 2 * 18).map(|i| ((i * 37 + 11) % 256).to_le_bytes()[0]).collect();
        // The codes of W[r, c]: block (r, c / 32), byte 2 + c % 16, low nibble below 16, high above.
        let code = |r: u64, c: u64| {
            let byte = blocks[usize::try_from((r * 2 + c / 32) * 18 + 2 + c % 16).unwrap()];
            i32::from(if c % 32 < 16 { byte & 15 } else { byte >> 4 }) - 8
        };
        let lent = Lent::Slice(&blocks);
        let padded = rows.div_ceil(64) * 64;
        let want: Vec<i32> = (0..64)
            .flat_map(|c| (0..padded).map(move |r| (c, r)))
            .map(|(c, r)| if r < rows { code(r, c) } else { 0 })
            .collect();
        let mut i4 = Vec::new();
        stream_plane(&Encoding::Q4_0, &lent, [rows, 64], padded, Plane::Quants, &mut i4).unwrap();
        let nibbles: Vec<i32> =
            i4.iter().flat_map(|b| [b & 15, b >> 4]).map(|n| i32::from(n) - if n >= 8 { 16 } else { 0 }).collect();
        assert_eq!(nibbles, want, "{rows} rows");
        // The scales plane has the same padded rows.
        let mut d = Vec::new();
        stream_plane(&Encoding::Q4_0, &lent, [rows, 64], padded, Plane::Scale, &mut d).unwrap();
        assert_eq!(d.len() as u64, 2 * padded * 2);
        // Rows that are not the padded count are refused, whatever the plane.
        let unpadded = (rows != padded).then_some((Plane::Quants, rows));
        for (plane, wrong) in [(Plane::Quants, padded + 64), (Plane::Scale, padded + 1)].into_iter().chain(unpadded) {
            let err = stream_plane(&Encoding::Q4_0, &lent, [rows, 64], wrong, plane, &mut Vec::new());
            assert!(matches!(err, Err(StreamError::Decode(_))), "{wrong} rows for {rows}: {err:?}");
        }
    }
}

/// Codes in row bands, against GGML's layouts read here directly: element `[p, kb, j, t]` is the code of
/// `W[p·32 + t, kb·32 + j]` (zero past the rows), Q4_0's packed two per byte across the plane; a band count
/// that does not divide the padded rows is refused.
#[test]
fn code_planes_in_row_bands_hold_each_band_block_by_block() {
    let cols = 96u64;
    for (encoding, block_bytes, row_multiple) in [(Encoding::Q4_0, 18u64, 64u64), (Encoding::Q8_0, 34, 1)] {
        for rows in [1u64, 5, 31, 32, 33, 64, 96, 130] {
            let padded = rows.div_ceil(row_multiple) * row_multiple;
            if padded % 32 != 0 {
                let err = stream_plane_bands(
                    &encoding,
                    &Lent::Slice(&vec![0u8; usize::try_from(rows * 3 * block_bytes).unwrap()]),
                    [rows, cols],
                    padded,
                    Plane::Quants,
                    32,
                    &mut Vec::new(),
                );
                assert!(matches!(err, Err(StreamError::Decode(_))), "{encoding} {rows} rows: {err:?}");
                continue;
            }
            let blocks: Vec<u8> =
                (0..rows * (cols / 32) * block_bytes).map(|i| ((i * 37 + 11) % 256).to_le_bytes()[0]).collect();
            let code = |r: u64, c: u64| -> i32 {
                let at = |o: u64| blocks[usize::try_from((r * (cols / 32) + c / 32) * block_bytes + o).unwrap()];
                if encoding == Encoding::Q8_0 {
                    i32::from(i8::from_le_bytes([at(2 + c % 32)]))
                } else {
                    let byte = at(2 + c % 16);
                    i32::from(if c % 32 < 16 { byte & 15 } else { byte >> 4 }) - 8
                }
            };
            let want: Vec<i32> = (0..padded / 32)
                .flat_map(|p| (0..cols).flat_map(move |c| (0..32).map(move |t| (p * 32 + t, c))))
                .map(|(r, c)| if r < rows { code(r, c) } else { 0 })
                .collect();
            let mut got = Vec::new();
            stream_plane_bands(&encoding, &Lent::Slice(&blocks), [rows, cols], padded, Plane::Quants, 32, &mut got)
                .unwrap();
            let got: Vec<i32> = if encoding == Encoding::Q8_0 {
                got.iter().map(|&b| i32::from(i8::from_le_bytes([b]))).collect()
            } else {
                got.iter().flat_map(|b| [b & 15, b >> 4]).map(|n| i32::from(n) - if n >= 8 { 16 } else { 0 }).collect()
            };
            assert_eq!(got, want, "{encoding}, {rows} rows");
            let wrong = stream_plane_bands(
                &encoding,
                &Lent::Slice(&blocks),
                [rows, cols],
                padded,
                Plane::Quants,
                padded + 32,
                &mut Vec::new(),
            );
            assert!(matches!(wrong, Err(StreamError::Decode(_))), "{encoding} {rows}: {wrong:?}");
            // Only the codes are banded.
            let scale = stream_plane_bands(
                &encoding,
                &Lent::Slice(&blocks),
                [rows, cols],
                padded,
                Plane::Scale,
                32,
                &mut Vec::new(),
            );
            assert!(matches!(scale, Err(StreamError::Decode(_))), "{encoding} {rows}: {scale:?}");
        }
        // A weight of no rows has nothing to band: refused, whatever its width, before any allocation.
        let none =
            stream_plane_bands(&encoding, &Lent::Slice(&[]), [0, 1 << 40], 0, Plane::Quants, 32, &mut Vec::new());
        assert!(matches!(none, Err(StreamError::Decode(_))), "{encoding}: {none:?}");
    }
}

fn transposed(data: &Held<'_, '_>, rows: u64, cols: u64) -> Vec<u8> {
    let mut out = Vec::new();
    stream(data, rows, cols, &mut out).unwrap();
    out
}

#[test]
fn chunk_lent_f32_is_transposed_exactly() {
    let (rows, cols) = (37u64, 53u64);
    let values: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
    let lender = Counting(values.clone(), Cell::new(0));
    let got = transposed(&Held::F32(&Lent::Chunked(&lender)), rows, cols);
    let want: Vec<u8> =
        (0..cols).flat_map(|c| (0..rows).map(move |r| (r * cols + c) as f32)).flat_map(f32::to_le_bytes).collect();
    assert_eq!(got, want);
    assert_eq!(lender.1.get(), rows, "one lend per source row of the one tile (the default copy_runs)");
    assert_eq!(got, transposed(&Held::F32(&Lent::Slice(&values)), rows, cols));
}

/// Row bands: element `[b, k, t]` of the output is source `[b·tile + t, k]`, for f32 lent in chunks, bf16
/// widened and bf16 kept, and `tile == rows` is the plain transpose; a tile that does not divide the rows is
/// refused.
#[test]
fn row_bands_are_each_band_transposed() {
    let (rows, cols) = (48u64, 20u64);
    let values: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.5).collect();
    // Integers below 256: exact in bf16.
    let small: Vec<f32> = (0..rows * cols).map(|i| ((i * 7) % 251) as f32).collect();
    let banded = |v: &[f32], tile: u64| -> Vec<f32> {
        (0..rows / tile)
            .flat_map(|b| (0..cols).flat_map(move |k| (0..tile).map(move |t| (b * tile + t) * cols + k)))
            .map(|i| v[usize::try_from(i).unwrap()])
            .collect()
    };
    let le = |v: Vec<f32>| -> Vec<u8> { v.into_iter().flat_map(f32::to_le_bytes).collect() };
    let lender = Counting(values.clone(), Cell::new(0));
    let bf16: Vec<u8> = small.iter().flat_map(|v| v.to_bits().to_le_bytes()[2..].to_vec()).collect();
    let bytes = Lent::Slice(&bf16);
    for tile in [8u64, 16, 48] {
        let mut got = Vec::new();
        stream_tiled(&Held::F32(&Lent::Chunked(&lender)), rows, cols, tile, &mut got).unwrap();
        assert_eq!(got, le(banded(&values, tile)), "tile {tile}");
        let mut widened = Vec::new();
        stream_tiled(&Held::Widen { from: DType::BF16, bytes: &bytes }, rows, cols, tile, &mut widened).unwrap();
        assert_eq!(widened, le(banded(&small, tile)), "tile {tile}, widened");
        let mut kept = Vec::new();
        stream_tiled(&Held::Stored { width: 2, bytes: &bytes }, rows, cols, tile, &mut kept).unwrap();
        let want_kept: Vec<u8> = le(banded(&small, tile)).chunks(4).flat_map(|w| w[2..].to_vec()).collect();
        assert_eq!(kept, want_kept, "tile {tile}, kept");
    }
    let mut plain = Vec::new();
    stream_tiled(&Held::F32(&Lent::Slice(&values)), rows, cols, rows, &mut plain).unwrap();
    assert_eq!(plain, transposed(&Held::F32(&Lent::Slice(&values)), rows, cols));
    for tile in [0u64, 5, 96] {
        let err = stream_tiled(&Held::F32(&Lent::Slice(&values)), rows, cols, tile, &mut Vec::new());
        assert!(matches!(err, Err(StreamError::Lend(_))), "tile {tile}: {err:?}");
    }
}

#[test]
fn a_column_larger_than_a_tile_is_written_in_row_groups() {
    // 4 Mi + 3 rows of one f32 column pair: each column is 16 MiB + 12 bytes, past one tile.
    let (rows, cols) = ((4u64 << 20) + 3, 2u64);
    let values: Vec<f32> = (0..rows * cols).map(|i| (i % 1_000_003) as f32).collect();
    let p = plan(&Held::F32(&Lent::Slice(&values)), rows, cols).unwrap();
    assert_eq!((p.band, p.window, p.group), (1, 1, 4 << 20));
    let got = transposed(&Held::F32(&Lent::Slice(&values)), rows, cols);
    let at = |c: u64, r: u64| {
        let i = usize::try_from(4 * (c * rows + r)).unwrap();
        f32::from_le_bytes(got[i..i + 4].try_into().unwrap())
    };
    for (c, r) in [(0, 0), (0, rows - 1), (1, 0), (1, 4 << 20), (1, rows - 1)] {
        assert_eq!(at(c, r), values[usize::try_from(r * cols + c).unwrap()], "[{c}, {r}]");
    }
}

#[test]
fn tiles_bound_both_the_gathered_source_and_the_decoded_values() {
    // The scale plane of a 1 GiB Q8_0 weight: 2 bytes out per 34-byte block in. The band is sized by the
    // source, not only by the output (which once gathered 285 MB for a 16 MiB tile).
    let rows = 246_723u64;
    let p = Plan::new(rows, 128, 1, 34, 2, 34).unwrap();
    assert!(p.band * rows * 34 <= TILE_BYTES && p.band * rows * 2 <= TILE_BYTES, "{p:?}");
    // A source column past a tile but within SOURCE_BYTES (a 262144-row Q4_K table): gathered once, decoded a
    // window of values at a time.
    let p = Plan::new(262_144, 8, 256, 144, 1, 144).unwrap();
    assert_eq!((p.band, p.window, p.group), (1, 16, 262_144), "{p:?}");
    assert!(262_144 * (144 + p.window) <= SOURCE_BYTES);
    // Past SOURCE_BYTES: one value of one unit at a time, in row groups.
    let p = Plan::new(1 << 21, 4, 32, 34, 1, 34).unwrap();
    assert_eq!((p.band, p.window), (1, 1));
    assert!(p.group * 34 <= TILE_BYTES, "{p:?}");
}

#[test]
fn a_plane_of_many_rows_is_exact_through_windows_and_row_groups() {
    // Q8_0 codes of 3 blocks per row: through one band, through windows (a big source column), and through
    // row groups (a huge one), the plane is the same.
    let mut seed = 7u64;
    let (rows, cols) = (5u64, 96u64);
    let bytes: Vec<u8> = (0..rows * 3 * 34)
        .map(|_| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 56) as u8
        })
        .collect();
    let lent = Lent::Slice(&bytes[..]);
    let mut want = Vec::new();
    stream_plane(&Encoding::Q8_0, &lent, [rows, cols], rows, Plane::Quants, &mut want).unwrap();
    let mut buf = [0u8; 32];
    for c in 0..cols {
        for r in 0..rows {
            let at = usize::try_from((r * 3 + c / 32) * 34).unwrap();
            split_block(&Encoding::Q8_0, Plane::Quants, &bytes[at..at + 34], &mut buf).unwrap();
            assert_eq!(want[usize::try_from(c * rows + r).unwrap()], buf[usize::try_from(c % 32).unwrap()]);
        }
    }
    for plan in [
        Plan::new(rows, 3, 32, 34, 1, 34).unwrap(),
        Plan { window: 5, band: 1, ..Plan::new(rows, 3, 32, 34, 1, 34).unwrap() },
        Plan { window: 1, band: 1, group: 2, ..Plan::new(rows, 3, 32, 34, 1, 34).unwrap() },
    ] {
        let mut got = Vec::new();
        tiles(&plan, &lent, &mut got, &mut |g: &[u8], [v0, v1]: [usize; 2], tile: &mut Vec<u8>| {
            for block in g.chunks_exact(34) {
                split_block(&Encoding::Q8_0, Plane::Quants, block, &mut buf).unwrap();
                tile.extend_from_slice(&buf[v0..v1]);
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(got, want, "{plan:?}");
    }
}

#[test]
fn sub_byte_codes_pack_lowest_first_across_any_split() {
    let codes: Vec<u8> = (0..37u8).map(|i| (i % 16).wrapping_sub(8)).collect(); // -8..=7 as bytes
    for bits in [4u32, 2] {
        let mut whole = Vec::new();
        let mut p = SubByte::new(&mut whole, bits).unwrap();
        p.put(&codes).unwrap();
        p.finish().unwrap();
        let per = 8 / usize::try_from(bits).unwrap();
        assert_eq!(whole.len(), codes.len().div_ceil(per));
        let mask = (1u8 << bits) - 1;
        for (i, &c) in codes.iter().enumerate() {
            let got = (whole[i / per] >> (usize::try_from(bits).unwrap() * (i % per))) & mask;
            assert_eq!(got, c & mask, "{bits}-bit code {i}");
        }
        for cut in [1, 3, 5, 7, 36] {
            let mut split = Vec::new();
            let mut p = SubByte::new(&mut split, bits).unwrap();
            p.put(&codes[..cut]).unwrap();
            p.put(&codes[cut..]).unwrap();
            p.finish().unwrap();
            assert_eq!(split, whole, "{bits} bits, cut at {cut}");
        }
    }
}

#[test]
fn packed_blocks_are_dequantized_and_transposed() {
    // Q8_0: per block an f16 scale then 32 i8. 3 rows x 64 values = 2 blocks per row.
    let (rows, cols) = (3u64, 64u64);
    let mut bytes = Vec::new();
    for r in 0..rows {
        for b in 0..2u64 {
            bytes.extend(half::f16::from_f32(0.5 * (r + 1) as f32).to_le_bytes());
            bytes.extend((0..32).map(|i| u8::try_from((i + b * 32) % 100).unwrap()));
        }
    }
    let enc = Encoding::Q8_0;
    let lent = Lent::Slice(&bytes);
    let data = Held::Dequantize { encoding: &enc, bytes: &lent };
    // The row-major values, decoded block by block on their own.
    let mut row_major = Vec::new();
    for block in bytes.chunks_exact(34) {
        let mut values = [0f32; 32];
        packed::dequantize(&enc, block, &mut values).unwrap();
        row_major.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    }
    let got = transposed(&data, rows, cols);
    for c in 0..cols {
        for r in 0..rows {
            let (s, d) = (usize::try_from(4 * (r * cols + c)).unwrap(), usize::try_from(4 * (c * rows + r)).unwrap());
            assert_eq!(got[d..d + 4], row_major[s..s + 4], "[{c}, {r}]");
        }
    }
    assert!(!transposable(&data, rows * 4, cols / 4), "rows of half a block are not transposed");
}
