//! Writing a row-major `[rows, cols]` constant as `[cols, rows]`, tile by tile, from any lender: the layout chosen
//! at export time for a weight the program only contracts on its last dimension (the `transpose_at_export`
//! rewrite), and the planes of a packed weight kept packed. It reads what [`Held`] describes, so that it does not
//! depend on [`crate::ConstantData`] (which depends on it).
//!
//! A tile is a band of source columns across the source rows. Its bytes are read as one strided copy
//! ([`Lent::copy_runs`]: one short pin of a JVM array, or plain reads of a mapped file), decoded (widened or
//! dequantized when asked), and written out as whole output rows. Nothing holds more than a few tiles' worth of
//! memory, whatever the weight's size; nothing pins a JVM array for longer than one tile's copy.

use crate::dtype::DType;
use crate::packed::{self, Encoding};
use crate::planar::{Plane, Split, split_block, split_block_window};
use crate::sink::{ByteSink, widen_into};
use crate::tensor::{Lent, StreamError};

/// Row-major values the transposer can read, each unit of them a whole number of lent elements.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Held<'d, 'a> {
    /// f32 values.
    F32(&'d Lent<'a, f32>),
    /// Values of `width` bytes each, written as stored.
    Stored {
        /// Bytes per value (1, 2, 4 or 8: not a sub-byte type).
        width: u64,
        /// The bytes.
        bytes: &'d Lent<'a, u8>,
    },
    /// Row-major f16 or bf16 (`from`) values widened to f32.
    Widen {
        /// `F16` or `BF16`.
        from: DType,
        /// Two bytes per value.
        bytes: &'d Lent<'a, u8>,
    },
    /// Row-major packed blocks dequantized to f32.
    Dequantize {
        /// The block encoding.
        encoding: &'d Encoding,
        /// The packed bytes.
        bytes: &'d Lent<'a, u8>,
    },
}

/// The error of writing values that cannot be written as `[cols, rows]`.
pub(crate) fn cannot_transpose(rows: u64, cols: u64) -> StreamError {
    StreamError::Lend(format!("these values cannot be written as [{cols}, {rows}]").into())
}

/// Target size of one decoded tile.
const TILE_BYTES: u64 = 16 << 20;
/// The most bytes of gathered source and decoded tile together when one unit column over every row is larger
/// than a tile (a packed table of 262144 rows: 37.7 MB of Q4_K blocks per block column). The band is gathered
/// once, then decoded a window of values at a time into what is left, so that nothing is read twice. With one
/// output batch: at most 42 MiB.
const SOURCE_BYTES: u64 = 40 << 20;
/// Bytes of output assembled per write.
const OUT_BYTES: u64 = 2 << 20;
/// The smallest decoded tile of the windowed path.
const MIN_WINDOW_BYTES: u64 = 4 << 20;
/// Values decoded per step when widening or dequantizing into a tile.
const DECODE_VALUES: u64 = 1 << 18;

/// Decodes one tile's gathered source elements, appending, for every row and unit, the output bytes of the unit's
/// values `window[0] .. window[1]`.
type DecodeTile<'d, T> = dyn FnMut(&[T], [usize; 2], &mut Vec<u8>) -> Result<(), StreamError> + 'd;

/// How one transposition proceeds: tiles of `group` source rows × `band` units, of which values `window` at a time.
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// The first source row read (a band of a tiled layout starts past 0).
    first_row: u64,
    /// Source rows read.
    rows: u64,
    /// Units per source row (a unit: one value, or one packed block).
    units: u64,
    /// Output values per unit.
    unit_values: u64,
    /// Source elements (of the lender's type) per unit.
    unit_elems: u64,
    /// Bytes per value written.
    ow: u64,
    /// Units per band.
    band: u64,
    /// Values of a unit per pass: all of them, unless one unit column over every row exceeds a tile (then `band`
    /// is 1 and the band is read again for each window of values).
    window: u64,
    /// Source rows per tile: all of them, unless one value column alone exceeds a tile (then `band` and `window`
    /// are 1, so each output row is written group by group, in order).
    group: u64,
    /// Bytes of source per unit.
    src_unit_bytes: u64,
}

impl Plan {
    /// `src_unit_bytes`: bytes of source per unit (its elements times the lender's element size). Both the
    /// gathered source and the decoded tile stay within [`TILE_BYTES`].
    fn new(rows: u64, units: u64, unit_values: u64, unit_elems: u64, ow: u64, src_unit_bytes: u64) -> Option<Plan> {
        if rows == 0 || units == 0 || unit_values == 0 || ow == 0 || src_unit_bytes == 0 {
            return None;
        }
        let value_column = rows.checked_mul(ow)?;
        let column = value_column.checked_mul(unit_values)?; // decoded bytes of one unit column
        let source_column = rows.checked_mul(src_unit_bytes)?; // gathered bytes of one unit column
        let (band, window, group) = if column <= TILE_BYTES && source_column <= TILE_BYTES {
            ((TILE_BYTES / column).min(TILE_BYTES / source_column).clamp(1, units), unit_values, rows)
        } else if value_column <= TILE_BYTES
            && source_column.saturating_add(value_column.max(MIN_WINDOW_BYTES)) <= SOURCE_BYTES
        {
            let room = (SOURCE_BYTES - source_column).min(TILE_BYTES);
            (1, (room / value_column).clamp(1, unit_values), rows)
        } else {
            // One value column of one unit at a time, in row groups: each output row is then written in order.
            (1, 1, (TILE_BYTES / ow.max(src_unit_bytes)).max(1))
        };
        Some(Plan { first_row: 0, rows, units, unit_values, unit_elems, ow, band, window, group, src_unit_bytes })
    }
}

fn plan(data: &Held<'_, '_>, rows: u64, cols: u64) -> Option<Plan> {
    let (unit_values, unit_elems, ow, held, elem) = match *data {
        Held::F32(v) => (1, 1, 4, v.len(), 4),
        Held::Stored { width, bytes } => (1, width, width, bytes.len(), 1),
        Held::Widen { bytes, .. } => (1, 2, 4, bytes.len(), 1),
        Held::Dequantize { encoding, bytes } => {
            let (values, block) = encoding.block_geometry()?;
            (values, block, 4, bytes.len(), 1)
        }
    };
    if unit_values == 0 || cols % unit_values != 0 {
        return None;
    }
    let units = cols / unit_values;
    if rows.checked_mul(units)?.checked_mul(unit_elems)? != held {
        return None;
    }
    Plan::new(rows, units, unit_values, unit_elems, ow, unit_elems * elem)
}

/// True when `data`, the row-major `[rows, cols]` values of a constant, can be streamed transposed: its rows are
/// whole units (values, or packed blocks) and it holds exactly `rows` of them.
pub(crate) fn transposable(data: &Held<'_, '_>, rows: u64, cols: u64) -> bool {
    plan(data, rows, cols).is_some()
}

/// Writes the row-major `[rows, cols]` values of `data` to `out` as row-major `[cols, rows]`.
#[cfg(test)]
pub(crate) fn stream(data: &Held<'_, '_>, rows: u64, cols: u64, out: &mut dyn ByteSink) -> Result<(), StreamError> {
    stream_tiled(data, rows, cols, rows, out)
}

/// Writes the row-major `[rows, cols]` values of `data` to `out` one band of `tile` rows at a time, each band
/// transposed: row-major `[rows / tile, cols, tile]` (with `tile == rows`, `[cols, rows]`). `tile` must divide
/// `rows`.
pub(crate) fn stream_tiled(
    data: &Held<'_, '_>,
    rows: u64,
    cols: u64,
    tile: u64,
    out: &mut dyn ByteSink,
) -> Result<(), StreamError> {
    if tile == 0 || rows % tile != 0 {
        return Err(StreamError::Lend(format!("{rows} rows cannot be written in bands of {tile}").into()));
    }
    let Some(whole) = plan(data, rows, cols) else {
        return Err(cannot_transpose(rows, cols));
    };
    let Some(band) = Plan::new(tile, whole.units, whole.unit_values, whole.unit_elems, whole.ow, whole.src_unit_bytes)
    else {
        return Err(cannot_transpose(rows, cols));
    };
    let mut first = 0;
    while first < rows {
        stream_band(data, Plan { first_row: first, ..band }, out)?;
        first += tile;
    }
    Ok(())
}

/// Writes the `plan.rows` source rows from `plan.first_row` on, transposed.
fn stream_band(data: &Held<'_, '_>, plan: Plan, out: &mut dyn ByteSink) -> Result<(), StreamError> {
    match *data {
        Held::F32(lent) => tiles(&plan, lent, out, &mut |gathered, _, tile| {
            if cfg!(target_endian = "little") {
                tile.extend_from_slice(bytemuck::cast_slice(gathered));
            } else {
                tile.extend(gathered.iter().flat_map(|v| v.to_le_bytes()));
            }
            Ok(())
        }),
        Held::Stored { bytes, .. } => tiles(&plan, bytes, out, &mut |gathered, _, tile| {
            tile.extend_from_slice(gathered);
            Ok(())
        }),
        Held::Widen { from, bytes } => {
            let mut buf = vec![0f32; host(DECODE_VALUES)?];
            tiles(&plan, bytes, out, &mut |gathered, _, tile| {
                for piece in gathered.chunks(buf.len() * 2) {
                    let n = piece.len() / 2;
                    widen_into(from, piece, &mut buf[..n]);
                    extend_f32(tile, &buf[..n]);
                }
                Ok(())
            })
        }
        Held::Dequantize { encoding, bytes } => {
            let (block_bytes, block_values) = (host(plan.unit_elems)?, host(plan.unit_values)?);
            let mut buf = vec![0f32; block_values];
            tiles(&plan, bytes, out, &mut |gathered, [v0, v1], tile| {
                for block in gathered.chunks_exact(block_bytes) {
                    packed::dequantize(encoding, block, &mut buf).map_err(|e| StreamError::Decode(e.to_string()))?;
                    extend_f32(tile, &buf[v0..v1]);
                }
                Ok(())
            })
        }
    }
}

fn extend_f32(tile: &mut Vec<u8>, values: &[f32]) {
    if cfg!(target_endian = "little") {
        tile.extend_from_slice(bytemuck::cast_slice(values));
    } else {
        tile.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    }
}

fn host(n: u64) -> Result<usize, StreamError> {
    usize::try_from(n).map_err(|e| StreamError::Lend(e.into()))
}

/// Reads each tile of `lent` (one strided copy), decodes it into row-major `[group, band values]` bytes with
/// `decode`, and writes those values column by column: output row `c` is source column `c`.
fn tiles<T: Copy + Default>(
    plan: &Plan,
    lent: &Lent<'_, T>,
    out: &mut dyn ByteSink,
    decode: &mut DecodeTile<'_, T>,
) -> Result<(), StreamError> {
    let Plan { first_row, rows, units, unit_values, unit_elems, ow, band, window, group, .. } = *plan;
    let stride = units * unit_elems;
    let mut gathered: Vec<T> = Vec::new();
    let mut tile: Vec<u8> = Vec::new();
    let mut piece: Vec<u8> = Vec::new();
    let mut u0 = 0;
    while u0 < units {
        let u1 = (u0 + band).min(units);
        let run = (u1 - u0) * unit_elems;
        let gather = |r0: u64, r1: u64, gathered: &mut Vec<T>| -> Result<(), StreamError> {
            gathered.clear();
            gathered.resize(host((r1 - r0) * run)?, T::default());
            lent.copy_runs((first_row + r0) * stride + u0 * unit_elems, run, stride, gathered)
        };
        let mut emit = |gathered: &[T], [r0, r1]: [u64; 2], [v0, v1]: [u64; 2]| -> Result<(), StreamError> {
            let width = (u1 - u0) * (v1 - v0); // values per tile row
            tile.clear();
            decode(gathered, [host(v0)?, host(v1)?], &mut tile)?;
            if tile.len() as u64 != (r1 - r0) * width * ow {
                return Err(StreamError::Decode(format!("a tile decoded to {} bytes", tile.len())));
            }
            // Output rows in batches of at most OUT_BYTES (at least one row).
            let per_batch = (OUT_BYTES / ((r1 - r0) * ow)).clamp(1, width);
            let mut j0 = 0;
            while j0 < width {
                let j1 = (j0 + per_batch).min(width);
                piece.clear();
                piece.resize(host((j1 - j0) * (r1 - r0) * ow)?, 0);
                transpose_block(&tile, host(width)?, host(ow)?, [host(j0)?, host(j1)?], host(r1 - r0)?, &mut piece);
                out.put(&piece)?;
                j0 = j1;
            }
            Ok(())
        };
        if group >= rows {
            // Every row at once: gather the band once, decode it a window of values at a time.
            gather(0, rows, &mut gathered)?;
            let mut v0 = 0;
            while v0 < unit_values {
                let v1 = (v0 + window).min(unit_values);
                emit(&gathered, [0, rows], [v0, v1])?;
                v0 = v1;
            }
        } else {
            // One value column of one unit at a time (`band` and `window` are 1), row group by row group, so that
            // each output row is written in order.
            for v0 in 0..unit_values {
                let mut r0 = 0;
                while r0 < rows {
                    let r1 = (r0 + group).min(rows);
                    gather(r0, r1, &mut gathered)?;
                    emit(&gathered, [r0, r1], [v0, v0 + 1])?;
                    r0 = r1;
                }
            }
        }
        u0 = u1;
    }
    Ok(())
}

/// The split of `encoding`, or the error of streaming planes of an encoding that has none.
fn split_of_plane(encoding: &Encoding) -> Result<Split, StreamError> {
    Split::of(encoding).ok_or_else(|| StreamError::Decode(format!("encoding {encoding} cannot be split into planes")))
}

/// The blocks per row of `bytes` when they are `[rows, cols]` (`rows > 0`) in whole blocks of `split`'s, else the
/// error saying they are not.
fn whole_block_units(
    encoding: &Encoding,
    split: &Split,
    bytes: &Lent<'_, u8>,
    [rows, cols]: [u64; 2],
) -> Result<u64, StreamError> {
    (rows > 0 && cols % split.block_values == 0)
        .then(|| cols / split.block_values)
        .filter(|units| rows.checked_mul(*units).and_then(|n| n.checked_mul(split.block_bytes)) == Some(bytes.len()))
        .ok_or_else(|| {
            StreamError::Decode(format!(
                "{} bytes are not [{rows}, {cols}] in {encoding} blocks of {} values",
                bytes.len(),
                split.block_values
            ))
        })
}

/// Streams plane `plane` of the packed `[rows, cols]` weight `bytes` (row-major blocks along `cols`), laid out for
/// the program: `[cols / sub, sub, padded_rows]` for the codes, `[blocks or sub-blocks, padded_rows]` for the rest.
/// i4 codes are packed two per byte, low nibble first, across the whole plane. Every output row (one value column
/// of the source) is followed by zeros up to `padded_rows` values, [`Split::padded_rows`] (every plane of one
/// weight has its rows).
pub(crate) fn stream_plane(
    encoding: &Encoding,
    bytes: &Lent<'_, u8>,
    [rows, cols]: [u64; 2],
    padded_rows: u64,
    plane: Plane,
    out: &mut dyn ByteSink,
) -> Result<(), StreamError> {
    let split = split_of_plane(encoding)?;
    if split.padded_rows(rows) != Some(padded_rows) {
        return Err(StreamError::Decode(format!(
            "a {encoding} plane of {rows} rows is written with its rows padded to a multiple of {}, not {padded_rows}",
            split.row_multiple()
        )));
    }
    let units = whole_block_units(encoding, &split, bytes, [rows, cols])?;
    let (values, width) = (split.values_per_block(plane), split.tile_width(plane));
    let Some(plan) = Plan::new(rows, units, values, split.block_bytes, width, split.block_bytes) else {
        return Err(StreamError::Decode(format!("a {encoding} plane of [{rows}, {cols}] cannot be tiled")));
    };
    let (block_bytes, ow) = (host(split.block_bytes)?, host(plan.ow)?);
    let mut buf = vec![0u8; host(plan.unit_values * plan.ow)?];
    let whole = host(plan.unit_values)?;
    let mut decode = |gathered: &[u8], [v0, v1]: [usize; 2], tile: &mut Vec<u8>| {
        for block in gathered.chunks_exact(block_bytes) {
            if v1 - v0 == whole {
                split_block(encoding, plane, block, &mut buf)?;
            } else {
                split_block_window(encoding, plane, block, [v0, v1], &mut buf)?;
            }
            tile.extend_from_slice(&buf[..(v1 - v0) * ow]);
        }
        Ok(())
    };
    // The pad is less than one row multiple: at most 63 values of at most 2 bytes.
    let (row, pad) = (rows * plan.ow, host((padded_rows - rows) * plan.ow)?);
    let Some(bits) = split.dtype(plane).sub_byte_bits() else {
        return tiles(&plan, bytes, &mut RowPad::new(out, row, pad), &mut decode);
    };
    let mut packer = SubByte::new(out, bits)?;
    tiles(&plan, bytes, &mut RowPad::new(&mut packer, row, pad), &mut decode)?;
    packer.finish()
}

/// Streams plane `plane` of the packed `[rows, cols]` weight `bytes` in row bands of `tile` rows: for each band of
/// `tile` source rows (the last ones, and any past `rows` up to `padded_rows`, zero), its values laid out
/// `[units, values per block, tile]` (for the codes of 32-value blocks `[Kb, 32, tile]`), so that the whole plane is
/// `[padded_rows / tile, units, values per block, tile]`: the layout in which one decode step's product reads each
/// band's codes as one contiguous run (docs/performance.md#weights-in-iree). Each band's source rows are read in one
/// copy (at most `tile` rows of blocks); i4 codes are packed two per byte, low nibble first, as in [`stream_plane`].
/// Only the codes ([`Plane::Quants`]) are written in bands.
pub(crate) fn stream_plane_bands(
    encoding: &Encoding,
    bytes: &Lent<'_, u8>,
    [rows, cols]: [u64; 2],
    padded_rows: u64,
    plane: Plane,
    tile: u64,
    out: &mut dyn ByteSink,
) -> Result<(), StreamError> {
    let split = split_of_plane(encoding)?;
    if plane != Plane::Quants {
        return Err(StreamError::Decode(format!("the {encoding} '{}' plane is not written in bands", plane.suffix())));
    }
    if split.padded_rows(rows) != Some(padded_rows) || tile == 0 || padded_rows % tile != 0 {
        return Err(StreamError::Decode(format!(
            "a {encoding} plane of {rows} rows (padded to {padded_rows}) cannot be written in bands of {tile} rows"
        )));
    }
    let units = whole_block_units(encoding, &split, bytes, [rows, cols])?;
    if units == 0 {
        return Err(StreamError::Decode(format!("a {encoding} plane of [{rows}, {cols}] has no blocks to band")));
    }
    // The source read at once is at most `min(rows, tile)` rows of blocks (within the bytes the lender holds); a
    // band's output is `tile` rows of values, which the plane writes anyway (its rows are padded to bands).
    let (values, width) = (split.values_per_block(plane), split.tile_width(plane));
    let too_big = || StreamError::Decode(format!("a band of {tile} rows of [{rows}, {cols}] {encoding} overflows"));
    let row_bytes = units * split.block_bytes;
    let (t, ow) = (host(tile)?, host(width)?);
    let row_values = host(units.checked_mul(values).ok_or_else(too_big)?)?;
    let band_len = t.checked_mul(row_values).and_then(|n| n.checked_mul(ow)).ok_or_else(too_big)?;
    let mut source = vec![0u8; host(rows.min(tile) * row_bytes)?];
    // `[tile, units · values]` values of `ow` bytes, row by row, then written transposed.
    let mut decoded = vec![0u8; band_len];
    let mut band = vec![0u8; band_len];
    let (block_bytes, per_block, row_len) = (host(split.block_bytes)?, host(values)? * ow, host(row_bytes)?);
    let mut write = |sink: &mut dyn ByteSink| -> Result<(), StreamError> {
        let mut r0 = 0u64;
        while r0 < padded_rows {
            let real = rows.saturating_sub(r0).min(tile);
            decoded.fill(0);
            if real > 0 {
                let src = &mut source[..host(real * row_bytes)?];
                bytes.copy_runs(r0 * row_bytes, real * row_bytes, real * row_bytes, src)?;
                for (row, dst) in src.chunks_exact(row_len).zip(decoded.chunks_exact_mut(row_values * ow)) {
                    for (block, to) in row.chunks_exact(block_bytes).zip(dst.chunks_exact_mut(per_block)) {
                        split_block(encoding, plane, block, to)?;
                    }
                }
            }
            // `[tile, V]` to `[V, tile]`, `ow` bytes per value.
            for v in 0..row_values {
                for r in 0..t {
                    let (from, to) = ((r * row_values + v) * ow, (v * t + r) * ow);
                    band[to..to + ow].copy_from_slice(&decoded[from..from + ow]);
                }
            }
            sink.put(&band)?;
            r0 += tile;
        }
        Ok(())
    };
    let Some(bits) = split.dtype(plane).sub_byte_bits() else {
        return write(out);
    };
    let mut packer = SubByte::new(out, bits)?;
    write(&mut packer)?;
    packer.finish()
}

/// Appends `pad` zero bytes after every `row` bytes written through it (nothing when `pad` is 0).
struct RowPad<'o> {
    out: &'o mut dyn ByteSink,
    row: u64,
    zeros: Vec<u8>,
    /// Bytes of the current row written so far.
    filled: u64,
}

impl<'o> RowPad<'o> {
    fn new(out: &'o mut dyn ByteSink, row: u64, pad: usize) -> RowPad<'o> {
        RowPad { out, row, zeros: vec![0; pad], filled: 0 }
    }
}

impl ByteSink for RowPad<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), StreamError> {
        if self.zeros.is_empty() || self.row == 0 {
            return self.out.put(bytes);
        }
        let mut rest = bytes;
        while !rest.is_empty() {
            // What is left of the row, or all of `rest` when that is less.
            let room = usize::try_from(self.row - self.filled).map_or(rest.len(), |r| r.min(rest.len()));
            let (now, later) = rest.split_at(room);
            self.out.put(now)?;
            self.filled += now.len() as u64;
            if self.filled == self.row {
                self.out.put(&self.zeros)?;
                self.filled = 0;
            }
            rest = later;
        }
        Ok(())
    }
}

/// Packs i8 codes `bits` wide (4: -8..=7, 2: -2..=1) several per byte, the first in the lowest bits, carrying a
/// partly filled byte across writes (IREE's order for `i4` and `i2` tensors).
struct SubByte<'o> {
    out: &'o mut dyn ByteSink,
    bits: u32,
    /// Codes per byte.
    per: usize,
    acc: u8,
    filled: u32,
}

impl<'o> SubByte<'o> {
    /// A packer of `bits`-wide codes (4 or 2).
    fn new(out: &'o mut dyn ByteSink, bits: u32) -> Result<Self, StreamError> {
        if !matches!(bits, 2 | 4) {
            return Err(StreamError::Decode(format!("codes of {bits} bits are not packed (a bug in tapeout)")));
        }
        Ok(SubByte { out, bits, per: host(u64::from(8 / bits))?, acc: 0, filled: 0 })
    }

    fn finish(self) -> Result<(), StreamError> {
        if self.filled > 0 { self.out.put(&[self.acc]) } else { Ok(()) }
    }
}

impl ByteSink for SubByte<'_> {
    fn put(&mut self, codes: &[u8]) -> Result<(), StreamError> {
        let mask = (1u8 << self.bits) - 1;
        let mut packed = Vec::with_capacity(codes.len() / 2 + 1);
        let push = |this: &mut Self, c: u8, packed: &mut Vec<u8>| {
            this.acc |= (c & mask) << this.filled;
            this.filled += this.bits;
            if this.filled == 8 {
                packed.push(this.acc);
                (this.acc, this.filled) = (0, 0);
            }
        };
        // Finish a partly filled byte, then whole bytes at a time, then keep what is left.
        let mut rest = codes;
        while self.filled != 0 && !rest.is_empty() {
            push(self, rest[0], &mut packed);
            rest = &rest[1..];
        }
        let whole = rest.chunks_exact(self.per);
        let tail = whole.remainder();
        let bits = self.bits;
        packed.extend(whole.map(|g| g.iter().rev().fold(0u8, |acc, &c| (acc << bits) | (c & mask))));
        for &c in tail {
            push(self, c, &mut packed);
        }
        self.out.put(&packed)
    }
}

/// Copies columns `j0..j1` of the row-major `[n, width]` tile (elements of `ow` bytes) into `piece` as row-major
/// `[j1 - j0, n]`, 64 × 64 elements at a time so reads and writes both stay in a few cache lines.
fn transpose_block(tile: &[u8], width: usize, ow: usize, cols: [usize; 2], n: usize, piece: &mut [u8]) {
    // Elements of 1, 2 and 4 bytes are copied as such (the codes of a packed plane are single bytes: a generic
    // slice copy per element would cost more than the decoding).
    match ow {
        1 => transpose_elements::<1>(tile, width, cols, n, piece),
        2 => transpose_elements::<2>(tile, width, cols, n, piece),
        4 => transpose_elements::<4>(tile, width, cols, n, piece),
        8 => transpose_elements::<8>(tile, width, cols, n, piece),
        _ => {
            let [j0, j1] = cols;
            for r in 0..n {
                for j in j0..j1 {
                    let (s, d) = ((r * width + j) * ow, ((j - j0) * n + r) * ow);
                    piece[d..d + ow].copy_from_slice(&tile[s..s + ow]);
                }
            }
        }
    }
}

fn transpose_elements<const W: usize>(tile: &[u8], width: usize, [j0, j1]: [usize; 2], n: usize, piece: &mut [u8]) {
    const B: usize = 64;
    let (src, dst): (&[[u8; W]], &mut [[u8; W]]) = (as_elements(tile), as_elements_mut(piece));
    for rb in (0..n).step_by(B) {
        for jb in (j0..j1).step_by(B) {
            for r in rb..(rb + B).min(n) {
                let row = &src[r * width..(r + 1) * width];
                for j in jb..(jb + B).min(j1) {
                    dst[(j - j0) * n + r] = row[j];
                }
            }
        }
    }
}

/// Whole `W`-byte elements of `bytes` (the tiles hold whole elements; `[u8; W]` has alignment 1).
fn as_elements<const W: usize>(bytes: &[u8]) -> &[[u8; W]] {
    let whole = bytes.len() / W * W;
    bytemuck::cast_slice(&bytes[..whole])
}

fn as_elements_mut<const W: usize>(bytes: &mut [u8]) -> &mut [[u8; W]] {
    let whole = bytes.len() / W * W;
    bytemuck::cast_slice_mut(&mut bytes[..whole])
}

#[cfg(test)]
mod tests;
