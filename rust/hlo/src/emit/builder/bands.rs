//! Products over weights in row bands (`banded`), as stored: one `linalg.generic` over the bands, rows padded
//! to a multiple IREE 3.13 tiles well.

use tapeout_graph::{DType, Dim, Shape};

use crate::contraction::{BAND, BLOCK_BAND};

use super::{Emitter, Val, list, signless, ty};
use crate::error::{HloError, Result};

/// A product over `?` rows of 16-bit weights in row bands reads its rows from a buffer of a multiple of this many
/// (zero rows appended): IREE 3.13 computes such a product in tiles of 4 or 8 rows, the last one masked, and a
/// masked load whose rows lie past the end of the rows' buffer made the whole product several times slower
/// (docs/performance.md#weights-in-iree).
const BAND_ROW_MULTIPLE: u64 = 8;

impl Emitter<'_, '_, '_> {
    /// `a [L.., K] x W [K, N]` for a weight in row bands, `stored` being `[N / T, K, T]`: as the archive holds it
    /// ([`tapeout_graph::ConstantData::row_tile`]), or as a program computes it (`matmul` with `banded = true`: a
    /// kept weight dequantized for a prefill, where `K` may be `?` on both sides). The rows of `a` merged into one
    /// `M` (`?` in a prefill), one contraction `[M, K] x [N / T, K, T] -> [M, N / T, T]` over the bands (a 16-bit
    /// weight widened element by element inside it), and the result read as `[M, N]`. Written as a `linalg.generic`
    /// (iteration space band, row, column, k): StableHLO's `dot_general` has no form of it that IREE 3.13 keeps
    /// (without a batch dimension it transposes the weight into a copy; with the bands as a batch dimension it
    /// needs the rows broadcast to every band, a dispatch writing `bands x M x K` values). IREE compiles this one
    /// into a single dispatch that reads each band's `K x T` values as one contiguous run and never copies the
    /// weight (docs/performance.md#weights-in-iree).
    pub(crate) fn banded_matmul(&mut self, a: &Val, stored: &Val, compute: DType, out: &Shape) -> Result<Val> {
        if stored.rank() == 4 {
            return self.banded_block_matmul(a, stored, compute, out);
        }
        let [Dim::Static(bands), k, Dim::Static(t)] = stored.shape.0[..] else {
            return Err(self.err(format!("a weight in row bands is [N / T, K, T], not [{}]", stored.shape)));
        };
        // `K` is `?` on both sides when the product is gated to no work (`keep_packed`'s dequantized bands).
        let ra = a.rank();
        if ra == 0 || a.shape.0[ra - 1] != k {
            return Err(self.err(format!("matmul of [{}] with a weight of {bands} bands [{}]", a.shape, stored.shape)));
        }
        let lead = &a.shape.0[..ra - 1];
        let m = if lead.contains(&Dim::Dynamic) {
            Dim::Dynamic
        } else {
            Dim::Static(lead.iter().map(|d| if let Dim::Static(n) = d { *n } else { 1 }).product())
        };
        let flat_shape = Shape(vec![m, k]);
        // Rows of several `?` (a run-time batch and length): merged with `tensor.collapse_shape` and split back
        // with each `?` read from `a`, as the plain linear does (a reshape of two `?`s is one IREE 3.13 rejects).
        let groups = [(0..ra - 1).collect::<Vec<_>>(), vec![ra - 1]];
        let several = lead.iter().filter(|d| **d == Dim::Dynamic).count() > 1;
        let flat = if a.shape == flat_shape {
            a.clone()
        } else if several {
            self.reshape_grouped(a, &flat_shape, &groups)
        } else {
            self.reshape(a, &flat_shape)?
        };
        let n = bands.checked_mul(t).ok_or_else(|| self.err(format!("{bands} bands of {t} columns overflow u64")))?;
        // 16-bit bands only: the kept weights' dequantized f32 bands measured no faster padded.
        let sixteen_bit = matches!(stored.dtype, DType::BF16 | DType::F16);
        let per_band = if m == Dim::Dynamic && sixteen_bit && compute.is_float() && flat.dtype.is_float() {
            let (rows, count) = self.rows_to_multiple(&flat, BAND_ROW_MULTIPLE);
            let padded = self.band_contraction(&rows, stored, compute)?;
            let shape = Shape(vec![Dim::Dynamic, Dim::Static(bands), Dim::Static(t)]);
            let rhs = format!(
                "tensor.extract_slice {}[0, 0, 0] [{count}, {bands}, {t}] [1, 1, 1] : {} to {}",
                padded.name,
                padded.ty(),
                ty(&shape, compute)
            );
            self.assign(&rhs, shape, compute)
        } else {
            self.band_contraction(&flat, stored, compute)?
        };
        let merged = self.reshape(&per_band, &Shape(vec![m, Dim::Static(n)]))?;
        if merged.shape == *out {
            Ok(merged)
        } else if several {
            Ok(self.expand_like(&merged, out, &groups, a))
        } else {
            self.reshape(&merged, out)
        }
    }

    /// The per-block product of a weight kept packed whose codes are stored in row bands (`[Np / T, Kb, B, T]`,
    /// [`tapeout_graph::ConstantData::row_tile`]): `a [Kb, M, B]` (the rows' values block by block) times the codes
    /// as `[Kb, B, Np]`, giving `[Kb, M, Np]`, one `linalg.generic` over the stored codes (iteration space block,
    /// row, band, column, k; each code converted to `compute` inside it). Each band's `Kb x B x T` codes are one
    /// contiguous run: the tuning spec gives one-row products a workgroup per band (`crate::cpu_tuning_spec`).
    /// That is faster than the block-row layout on some CPUs and slower on others
    /// (docs/performance.md#weights-in-iree).
    pub(super) fn banded_block_matmul(&mut self, a: &Val, stored: &Val, compute: DType, out: &Shape) -> Result<Val> {
        let [bands, Dim::Static(kb), Dim::Static(b), Dim::Static(t)] = stored.shape.0[..] else {
            return Err(self.err(format!("codes in row bands are [Np / T, Kb, B, T], not [{}]", stored.shape)));
        };
        let [Dim::Static(akb), m, Dim::Static(ab)] = a.shape.0[..] else {
            return Err(self.err(format!("a per-block product's rows are [Kb, M, B], not [{}]", a.shape)));
        };
        if (akb, ab) != (kb, b) {
            return Err(self.err(format!("rows [{}] times codes of [{kb}, {b}] per band", a.shape)));
        }
        // `?` bands: a few-rows form's codes, gated along the band axis (`Emitter::lower`).
        let n = match bands {
            Dim::Static(bands) => Dim::Static(
                bands.checked_mul(t).ok_or_else(|| self.err(format!("{bands} bands of {t} rows overflow u64")))?,
            ),
            Dim::Dynamic => Dim::Dynamic,
        };
        let (c, s) = (compute.mlir_name(), stored.dtype.mlir_name());
        let widen = match (compute.is_float(), stored.dtype) {
            (true, DType::I4 | DType::I8 | DType::I16 | DType::I32) => "arith.sitofp",
            _ => {
                return Err(self.err(format!(
                    "the per-block product of {c} rows with {s} codes stored in row bands: only signed integer codes \
                     and float rows are contracted there; export the codes in block rows (`--packed-codes \
                     block-rows`, the default)"
                )));
            }
        };
        let shape = Shape(vec![Dim::Static(kb), m, bands, Dim::Static(t)]);
        let out_ty = ty(&shape, compute);
        let mut extents = Vec::new();
        if m == Dim::Dynamic {
            extents.push(self.dim_index(a, 1));
        }
        if bands == Dim::Dynamic {
            extents.push(self.dim_index(stored, 0));
        }
        let init = self.zeros_of(&shape, compute, &extents);
        // Block arguments and body values are named from the emitter's counter (see `band_contraction`).
        let (x, w, acc, wide, p, sum) =
            (self.fresh(), self.fresh(), self.fresh(), self.fresh(), self.fresh(), self.fresh());
        let rhs = format!(
            "linalg.generic {{indexing_maps = [{}], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"parallel\", \"reduction\"]}} \
             ins({}, {} : {}, {}) outs({} : {out_ty}) {{\n    ^bb0({x}: {c}, {w}: {s}, {acc}: {c}):\n      {wide} = {widen} {w} : {s} to {c}\n      \
             {p} = arith.mulf {x}, {wide} : {c}\n      {sum} = arith.addf {acc}, {p} : {c}\n      linalg.yield {sum} : {c}\n    }} -> {out_ty}",
            BLOCK_BAND.emitted(),
            a.name,
            stored.name,
            a.ty(),
            stored.ty(),
            init.name,
        );
        let per_band = self.assign(&rhs, shape, compute);
        let merged = self.reshape(&per_band, &Shape(vec![Dim::Static(kb), m, n]))?;
        if merged.shape == *out { Ok(merged) } else { self.reshape(&merged, out) }
    }

    /// A `shape` tensor of `compute` zeros (`tensor.empty` then `linalg.fill`), the accumulator of a
    /// `linalg.generic` contraction; its one `?` extent, if any, is dimension `dim` of `like`.
    pub(crate) fn zeros(&mut self, shape: &Shape, compute: DType, (like, dim): (&Val, usize)) -> Val {
        let extents = if shape.is_dynamic() { vec![self.dim_index(like, dim)] } else { Vec::new() };
        self.zeros_of(shape, compute, &extents)
    }

    /// A `shape` tensor of `compute` zeros whose `?` extents are `extents` (`index` values, in order).
    pub(super) fn zeros_of(&mut self, shape: &Shape, compute: DType, extents: &[String]) -> Val {
        let (c, out_ty) = (compute.mlir_name(), ty(shape, compute));
        let empty = self.assign(&format!("tensor.empty({}) : {out_ty}", list(extents)), shape.clone(), compute);
        let zero = self.fresh();
        let zero_text = if compute.is_float() { "0.000000e+00" } else { "0" };
        self.line(&format!("{zero} = arith.constant {zero_text} : {c}"));
        self.assign(
            &format!("linalg.fill ins({zero} : {c}) outs({} : {out_ty}) -> {out_ty}", empty.name),
            shape.clone(),
            compute,
        )
    }

    /// `flat [?, K]` with zero rows appended up to a multiple of `multiple` rows (a copy: IREE 3.13 writes
    /// `flat`'s producer into the first rows of the result, or copies them there), and `flat`'s row count as an
    /// `index` value. The zero rows are what a masked tile past `flat`'s last row reads ([`BAND_ROW_MULTIPLE`]).
    pub(super) fn rows_to_multiple(&mut self, flat: &Val, multiple: u64) -> (Val, String) {
        let count = self.dim_index(flat, 0);
        let (less, mult) = (self.index_value(&(multiple - 1).to_string()), self.index_value(&multiple.to_string()));
        let (up, whole, rounded, extra) = (self.fresh(), self.fresh(), self.fresh(), self.fresh());
        self.line(&format!("{up} = arith.addi {count}, {less} : index"));
        self.line(&format!("{whole} = arith.divui {up}, {mult} : index"));
        self.line(&format!("{rounded} = arith.muli {whole}, {mult} : index"));
        self.line(&format!("{extra} = arith.subi {rounded}, {count} : index"));
        let shape = Shape(vec![Dim::Dynamic, flat.shape.0[1]]);
        let mut extents = vec![extra];
        if flat.shape.0[1] == Dim::Dynamic {
            extents.push(self.dim_index(flat, 1));
        }
        let zeros = self.zeros_of(&shape, flat.dtype, &extents);
        (self.concat_in_place(&[flat.clone(), zeros], 0, shape), count)
    }

    /// Why a banded product of `compute` rows and `stored` bands cannot be written, and what to do.
    pub(super) fn band_types_err(&self, stored: &str, compute: &str) -> HloError {
        if stored == compute {
            return self.err(format!(
                "a {stored} weight stored in row bands cannot be multiplied ({stored} has no multiply-add): export \
                 with the weights laid out as held (`--layout as-held`)"
            ));
        }
        self.err(format!(
            "a {stored} weight stored in row bands multiplies {compute} rows, and the product reads the weight in the \
             rows' type: give the rows the weight's type or a wider float type, or export with the weights laid out \
             as held (`--layout as-held`)"
        ))
    }

    /// `[M, K]` rows (of `compute` values) times a `[B, K, T]` band set as stored: `[M, B, T]`, each sum over `k`
    /// in `compute` (the stored value widened to it first when narrower).
    pub(super) fn band_contraction(&mut self, flat: &Val, stored: &Val, compute: DType) -> Result<Val> {
        let [Dim::Static(bands), _, Dim::Static(t)] = stored.shape.0[..] else {
            return Err(self.err(format!("a weight in row bands is [N / T, K, T], not [{}]", stored.shape)));
        };
        // `arith` takes signless integers only: unsigned rows and bands are contracted as the signless integers of
        // their bits (wrapping multiply-add gives the same bits) and the result read back as unsigned.
        if let Some(bits) = signless(compute).filter(|_| stored.dtype == compute) {
            let (rows, bands) = (self.bitcast(flat, bits), self.bitcast(stored, bits));
            let product = self.band_contraction(&rows, &bands, bits)?;
            return Ok(self.bitcast(&product, compute));
        }
        let (c, s) = (compute.mlir_name(), stored.dtype.mlir_name());
        // The body's ops: the stored value made a `compute` value, then multiply-add.
        let (widen, mul, add) = if compute.is_float() && stored.dtype.is_float() {
            let widen = match stored.dtype.byte_width().cmp(&compute.byte_width()) {
                std::cmp::Ordering::Less => Some("arith.extf"),
                std::cmp::Ordering::Equal if stored.dtype == compute => None,
                _ => return Err(self.band_types_err(s, c)),
            };
            (widen, "arith.mulf", "arith.addf")
        } else if stored.dtype == compute && matches!(compute, DType::I8 | DType::I16 | DType::I32 | DType::I64) {
            (None, "arith.muli", "arith.addi")
        } else {
            return Err(self.band_types_err(s, c));
        };
        let m = flat.shape.0[0];
        let shape = Shape(vec![m, Dim::Static(bands), Dim::Static(t)]);
        let out_ty = ty(&shape, compute);
        let init = self.zeros(&shape, compute, (flat, 0));
        // Block arguments and body values are named from the emitter's counter: a region of a `linalg.generic`
        // sees the names around it, so they must not repeat any.
        let (x, w, acc) = (self.fresh(), self.fresh(), self.fresh());
        let (wide, w_val) = match widen {
            Some(op) => {
                let v = self.fresh();
                (format!("      {v} = {op} {w} : {s} to {c}\n"), v)
            }
            None => (String::new(), w.clone()),
        };
        let (p, sum) = (self.fresh(), self.fresh());
        let rhs = format!(
            "linalg.generic {{indexing_maps = [{}], iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"reduction\"]}} \
             ins({}, {} : {}, {}) outs({} : {out_ty}) {{\n    ^bb0({x}: {c}, {w}: {s}, {acc}: {c}):\n{wide}      \
             {p} = {mul} {x}, {w_val} : {c}\n      {sum} = {add} {acc}, {p} : {c}\n      linalg.yield {sum} : {c}\n    }} -> {out_ty}",
            BAND.emitted(),
            flat.name,
            stored.name,
            flat.ty(),
            stored.ty(),
            init.name,
        );
        Ok(self.assign(&rhs, shape, compute))
    }
}
