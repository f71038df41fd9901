//! A tuning spec for IREE's CPU backend. It sets the tiles of the emitter's products over weights kept packed
//! (codes in 32-value blocks: Q8_0, the 4-bit formats and the low bits of the 5-bit ones) and over weights in row
//! bands. IREE 3.13's own tiles for these forms split a block row or a band across workgroups, convert a code once
//! per row, or leave a short prompt's rows in a few partial tiles; the spec gives each form tiles that follow its
//! layout.
//!
//! - One row over codes as block rows (`[Kb, 32, N]`, the default; see `keep_packed`): a workgroup per block row,
//!   untiled along `N`, with the whole block as the reduction tile. Each workgroup then reads one contiguous
//!   `[32, N]` run of codes. With no tile along `N` there is no partial one either: that would need masked `i4`
//!   loads, which IREE 3.13 cannot compile. A product has `K / 32` workgroups, so cores beyond that stay idle in it.
//!   Q4_1, Q4_K and the low 4 bits of Q5_0, Q5_1 and Q5_K take the same tiles; their high bits are a second
//!   product the spec does not match.
//! - One row over codes in row bands of 32 (`--packed-codes row-bands`: `[N / 32, Kb, 32, 32]`, one
//!   `linalg.generic` over the stored bands): a workgroup per band with every block of it, the whole block as the
//!   reduction tile. Each workgroup reads one contiguous `[Kb, 32, 32]` run; whether that beats block rows depends
//!   on the CPU.
//! - One row over bf16 or f16 weights in row bands (`[B, K, T]`): IREE's workgroups of 8 bands, with vector tiles of
//!   4 bands over a reduction of 8 instead of 8 bands over 16. f32 bands are not matched: the spec made no
//!   difference beyond noise there.
//! - A prefill of more than 32 rows over a kept weight dequantized into f32 bands of 32 (`[?, K] x [N / 32, K, 32]`):
//!   a workgroup per band and 16 rows, vector tiles of 8 rows by 32 columns over a reduction of 4. IREE's 8 bands
//!   of 64 rows leave a prompt of 33 to 63 rows in a handful of partial workgroups. One row is not matched: decode
//!   keeps IREE's tiles.
//! - A prefill over bf16 bands as stored (from one row: a 16-bit model has no few-rows forms): the same workgroups,
//!   in vector tiles of 4 rows over a reduction of 4, which suit the shortest prompts. No workgroup of 64 rows
//!   suited both short and long prompts. f16 bands are not matched there (not measured).
//! - A prefill's few rows (8, 16 or 32; `keep_packed`'s few-rows forms) over kept codes: vector tiles of 8 rows at
//!   once, as IREE does for a static product, so each code is converted once and not once per row. Q4_0, Q4_1 and
//!   Q4_K codes gated in groups of 64 columns take 4 groups a workgroup; Q8_0's codes gated along their columns take
//!   256 columns; codes in row bands take 8 bands of 32 columns.
//!
//! What each form gained: docs/performance.md#cpu-tuning.
//!
//! Every vector tile is at most 4 KiB: IREE 3.13 refuses vectors larger than 512 native vectors, 8 KiB on a
//! 16-byte-vector CPU (`generic` x86-64, Arm NEON), and a spec is written per export, not per CPU. It changes tiling
//! only: each output element is the same sum over the same values. The spec is an input of `iree-compile`
//! (`--iree-codegen-tuning-spec-path=FILE`), not part of the module, which compiles and runs without it.

use tapeout_graph::{ConstantData, DType, Encoding, FEW_ROWS, Plane};

use crate::contraction::{BAND, BLOCK, BLOCK_BAND, BLOCK_GROUPS, Folded};

/// A product of one row: IREE 3.13 drops its unit row loop.
const ONE_ROW: Folded = Folded { dropped: Some("m"), lhs: None };
/// A product of rows read as `[Kb, M, B]` through a transpose of `[M, Kb, B]`, which IREE 3.13 folds in.
const ROWS_FOLDED: Folded = Folded { dropped: None, lhs: Some(&["m", "b", "k"]) };

/// Whether a product over the constant `data` is tiled by [`cpu_tuning_spec`]: the codes of a weight kept packed
/// in 32-value blocks (Q8_0's `i8`; Q4_0, Q4_1, Q4_K and the low 4 bits of Q5_0, Q5_1 and Q5_K, all `i4`), or a
/// bf16 or f16 weight stored in row bands a multiple of 32 wide (the band matchers'; a weight of fewer rows is
/// banded by 16 or 8). Not Q6_K's codes: its 16-value sub-blocks are not the block matchers' 32, so a module whose
/// only kept weights are Q6_K gets no spec (its products would be IREE's either way).
///
/// The 5-bit formats' codes get the one-row tiles only: they do not take the few-rows forms. Figures per format:
/// docs/performance.md#cpu-tuning.
#[must_use]
pub fn is_tuned(data: &ConstantData<'_>) -> bool {
    match data {
        ConstantData::Plane { encoding, plane: Plane::Quants, .. } => matches!(
            encoding,
            Encoding::Q8_0
                | Encoding::Q4_0
                | Encoding::Q4_1
                | Encoding::Q5_0
                | Encoding::Q5_1
                | Encoding::Q4K
                | Encoding::Q5K
        ),
        _ => data.row_tile().is_some_and(|t| t % 32 == 0) && matches!(data.dtype(), DType::BF16 | DType::F16),
    }
}

/// One matcher of the spec: a contraction of f32 rows with `rhs` values whose indexing maps are `maps`, passing
/// `check` (transform ops on its dimensions and operands), given `lowering` (an `#iree_cpu.lowering_config`'s
/// fields).
fn matcher(name: &str, rhs: &str, maps: &str, check: &str, lowering: &str) -> String {
    format!(
        "  transform.named_sequence @{name}(%op: !transform.any_op {{transform.readonly}}) -> (!transform.any_op, !transform.any_param) {{\n\
         \x20   %b, %m, %n, %k = transform.iree.match.contraction %op, lhs_type = f32, rhs_type = {rhs}, output_type = f32, indexing_maps = [{maps}] : !transform.any_op -> !transform.param<i64>\n\
         {check}\
         \x20   %c = transform.param.constant #iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<{lowering}>, translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>, {{enable_loop_peeling}}>> -> !transform.any_param\n\
         \x20   transform.yield %op, %c : !transform.any_op, !transform.any_param\n\
         \x20 }}\n"
    )
}

/// The tuning spec text (a transform-dialect module IREE 3.13 reads with `--iree-codegen-tuning-spec-path`) for
/// the llvm-cpu backend: one-row per-block products over `i8` and `i4` codes get a workgroup per block row (codes
/// in row bands: per band) and the whole block as the reduction tile; 8-, 16- and 32-row products over `i4` codes
/// gated in groups, `i8` codes gated along their columns, or codes in row bands gated along their bands, get vector
/// tiles of 8 rows; one-row products over bf16 or f16 bands get vector tiles of 4 bands and a reduction tile of 8;
/// a prefill's product with a weight dequantized into f32 bands, or with bf16 bands as stored, gets a workgroup per
/// band and 16 rows.
#[must_use]
pub fn cpu_tuning_spec() -> String {
    // The per-block product: loops (block, row, column, k); one row, blocks of 32.
    let block_maps = BLOCK.as_iree_holds(Folded::default());
    let block_check = "\x20   transform.iree.match.dims_equal %m, [1] : !transform.param<i64>\n\
                       \x20   transform.iree.match.dims_equal %k, [32] : !transform.param<i64>\n";
    // A workgroup per block row (`0`: `N` not tiled), vector tiles of at most 4 KiB (`[32, 32]` f32 values).
    let block = "cache_parallel = [1, 0, 0, 0], distribution = [1, 0, 0, 0], vector_common_parallel = [1, 1, 32, 0], vector_reduction = [0, 0, 0, 32]";
    // The band product at one row, its unit row loop dropped by IREE: loops (band, column, k) over rows `[K]` and
    // bands `[B, K, T]`; bands of 32 columns (the emitter's) or a multiple of it.
    let band_maps = BAND.as_iree_holds(ONE_ROW);
    let band_check = "\x20   %bands = transform.get_operand %op[1] : (!transform.any_op) -> !transform.any_value\n\
                      \x20   transform.iree.match.dim_is_multiple_of %bands[2], 32 : !transform.any_value\n";
    // `[4, 32]` f32 values over a reduction of 8: 4 KiB.
    let band = "cache_parallel = [8, 32, 0], distribution = [8, 32, 0], vector_common_parallel = [4, 32, 0], vector_reduction = [0, 0, 8]";
    // The per-block product over codes in row bands at one row, its unit row loop dropped by IREE: loops (block,
    // band, column, k) over rows `[Kb, 32]` and codes `[Np / 32, Kb, 32, 32]`.
    let block_band_maps = BLOCK_BAND.as_iree_holds(ONE_ROW);
    let block_band_check = "\x20   transform.iree.match.dims_equal %k, [32] : !transform.param<i64>\n";
    // A workgroup per band (`0`: every block of it), the band's 32 columns in one vector tile, the block's 32
    // values as the reduction tile: `[32]` f32 values, 128 bytes.
    let block_band = "cache_parallel = [0, 1, 32, 0], distribution = [0, 1, 32, 0], vector_common_parallel = [1, 1, 32, 0], vector_reduction = [0, 0, 0, 32]";
    // The per-block product of a prefill's few rows over sub-byte codes gated in groups of columns (`keep_packed`'s
    // few-rows forms): loops (block, row, group, column, k) over rows `[R, Kb, 32]` (R = 8, 16, 32; their
    // transpose folded in by IREE) and codes `[Kb, 32, ?, T]`. Of the 8-row product: IREE 3.13 gives it vector
    // tiles of one row by 8 groups, unpacking each code once per row; the spec takes the 8 rows at once (the static
    // product's tiles) over 4 groups of 64 per workgroup, with a reduction tile of 4. A reduction of 16 is faster
    // with AVX-512 but makes 16 KiB vectors, which an AVX2 or generic CPU refuses.
    let few_maps = BLOCK_GROUPS.as_iree_holds(ROWS_FOLDED);
    let few_check = |rows: u64| {
        format!(
            "\x20   transform.iree.match.dims_equal %m, [{rows}] : !transform.param<i64>\n\
             \x20   transform.iree.match.dims_equal %k, [32] : !transform.param<i64>\n"
        )
    };
    // `[8, 32]` f32 values over a reduction of 4: 4 KiB. The 16- and 32-row forms get 16 or 32 rows per
    // workgroup in the same vector tiles, which beat vector tiles of 16 rows (docs/performance.md#cpu-tuning).
    let few = |rows: u64| {
        format!(
            "cache_parallel = [1, {rows}, 4, 64, 0], distribution = [1, {rows}, 4, 64, 0], vector_common_parallel = [1, 8, 1, 32, 0], vector_reduction = [0, 0, 0, 0, 4]"
        )
    };
    // A prefill's product with a kept weight dequantized into row bands of 32 (`keep_packed`, past the few-rows
    // forms' 32 rows): loops (band, row, column, k) over rows `[?, K]` and bands `[N / 32, K, 32]`, the result's
    // transpose to `[?, N / 32, 32]` folded in by IREE. IREE 3.13 gives a workgroup 8 bands (4 or 1 for a weight of
    // 32 or 8 bands) of 64 rows: a prompt of 33 to 63 rows then fills one partial row tile per band group, a few
    // workgroups for two threads. One band of 16 rows per workgroup fills them.
    let prefill_band_maps = BAND.as_iree_holds(Folded::default());
    // `[8, 32]` f32 values over a reduction of 4: 4 KiB (IREE's own reduction tile of 16 makes 16 KiB vectors, which
    // it refuses for a CPU with 16-byte vectors once the spec asks for them; 4 was as fast as 16 on AVX-512).
    let dequantized = "cache_parallel = [1, 16, 32, 0], distribution = [1, 16, 32, 0], vector_common_parallel = [1, 8, 32, 0], vector_reduction = [0, 0, 0, 4]";
    // The same product over bf16 bands as stored (a 16-bit model's prefill, which has no few-rows forms: 1 to 32 rows
    // too): one band of 16 rows per workgroup, vector tiles of 4 rows over a reduction of 4 (2 KiB; a reduction of
    // 8 was slower at every prompt length, the same sums). Vector tiles of 8 rows (the f32 tiles above) are faster
    // from 8 tokens on but slower at 1-2 tokens: the product computes the prompt's own rows (the padding to 8 only
    // keeps its loads in the buffer), which fill one 4-row tile or one 8-row one.
    let prefill_bf16 = "cache_parallel = [1, 16, 32, 0], distribution = [1, 16, 32, 0], vector_common_parallel = [1, 4, 32, 0], vector_reduction = [0, 0, 0, 4]";
    // The same forms over Q8_0's whole-byte codes, gated along their columns directly (`[Kb, 32, ?]`): IREE's
    // batch matmul, loops (block, row, column, k). IREE 3.13 gives a workgroup 64 columns over a reduction tile of
    // 16; the spec gives it 256 columns over a reduction of 4 in the same `[8, 32]` vector tiles as the other
    // few-rows forms, which measured faster (docs/performance.md#cpu-tuning).
    let few_i8 = |rows: u64| {
        format!(
            "cache_parallel = [1, {rows}, 256, 0], distribution = [1, {rows}, 256, 0], vector_common_parallel = [1, 8, 32, 0], vector_reduction = [0, 0, 0, 4]"
        )
    };
    // The same forms over Q8_0's or Q4_0's codes in row bands, gated along their band axis (`[?, Kb, 32, 32]`, read as
    // stored): loops (block, row, band, column, k), the rows' transpose folded in by IREE. The block-row tiles:
    // 8 bands of 32 columns a workgroup, `[8, 32]` vector tiles over a reduction of 4.
    let few_band_maps = BLOCK_BAND.as_iree_holds(ROWS_FOLDED);
    let few_band = |rows: u64| {
        format!(
            "cache_parallel = [1, {rows}, 8, 32, 0], distribution = [1, {rows}, 8, 32, 0], vector_common_parallel = [1, 8, 1, 32, 0], vector_reduction = [0, 0, 0, 0, 4]"
        )
    };
    // One matcher per few-rows form `keep_packed` writes (`FEW_ROWS`) and code layout, then the others.
    let few_rows = FEW_ROWS.map(u64::from).into_iter().flat_map(|r| {
        [
            (format!("match_few_rows_{r}_i4"), "i4", few_maps.clone(), few_check(r), few(r)),
            (format!("match_few_rows_{r}_i8"), "i8", block_maps.clone(), few_check(r), few_i8(r)),
            (format!("match_few_rows_{r}_band_i8"), "i8", few_band_maps.clone(), few_check(r), few_band(r)),
            (format!("match_few_rows_{r}_band_i4"), "i4", few_band_maps.clone(), few_check(r), few_band(r)),
        ]
    });
    let matchers = few_rows.chain([
        (
            "match_block_bands_i8".to_owned(),
            "i8",
            block_band_maps.clone(),
            block_band_check.to_owned(),
            block_band.to_owned(),
        ),
        (
            "match_block_bands_i4".to_owned(),
            "i4",
            block_band_maps.clone(),
            block_band_check.to_owned(),
            block_band.to_owned(),
        ),
        ("match_blocks_i8".to_owned(), "i8", block_maps.clone(), block_check.to_owned(), block.to_owned()),
        ("match_blocks_i4".to_owned(), "i4", block_maps.clone(), block_check.to_owned(), block.to_owned()),
        ("match_bands_bf16".to_owned(), "bf16", band_maps.clone(), band_check.to_owned(), band.to_owned()),
        ("match_bands_f16".to_owned(), "f16", band_maps.clone(), band_check.to_owned(), band.to_owned()),
        (
            "match_dequantized_bands_f32".to_owned(),
            "f32",
            prefill_band_maps.clone(),
            band_check.to_owned(),
            dequantized.to_owned(),
        ),
        (
            "match_prefill_bands_bf16".to_owned(),
            "bf16",
            prefill_band_maps,
            band_check.to_owned(),
            prefill_bf16.to_owned(),
        ),
    ]);
    let matchers: Vec<_> = matchers.collect();
    let mut s = String::from(
        "// tapeout's tuning spec for IREE's llvm-cpu backend (iree-compile --iree-codegen-tuning-spec-path=THIS_FILE\n\
         // --mlir-disable-threading). It tiles one-row products over kept codes a whole block at a time,\n\
         // a prefill's few rows over kept codes 8 rows at a time, its longer prompts over dequantized weights\n\
         // and its rows over bf16 bands 16 rows and one band at a time, and one row over bf16 / f16 row bands\n\
         // four bands at a time: the same sums, computed faster (docs/performance.md).\n\
         // Without it the module compiles and runs as well.\n\
         module attributes {iree_codegen.tuning_spec_with_default_entrypoint, transform.with_named_sequence} {\n\
         \x20 transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly}, %config: !transform.any_param {transform.readonly}) {\n\
         \x20   transform.annotate %op \"compilation_info\" = %config : !transform.any_op, !transform.any_param\n\
         \x20   transform.yield\n\
         \x20 }\n",
    );
    for (name, rhs, maps, check, lowering) in &matchers {
        s.push_str(&matcher(name, rhs, maps, check, lowering));
    }
    let arms: Vec<String> = matchers.iter().map(|(name, ..)| format!("@{name} -> @apply_op_config")).collect();
    s.push_str(&format!(
        "  transform.named_sequence @__kernel_config(%v: !transform.any_op {{transform.consumed}}) -> !transform.any_op attributes {{iree_codegen.tuning_spec_entrypoint}} {{\n\
         \x20   %r = transform.foreach_match in %v {} : (!transform.any_op) -> !transform.any_op\n\
         \x20   transform.yield %r : !transform.any_op\n\
         \x20 }}\n\
         }}\n",
        arms.join(", ")
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapeout_graph::Lent;

    fn banded(dtype: DType, bytes: &[u8], tile: u64) -> ConstantData<'_> {
        let of = Box::new(ConstantData::Raw { dtype, bytes: Lent::Slice(bytes) });
        ConstantData::Transposed { of, rows: 64, cols: 2, tile }
    }

    fn codes(encoding: Encoding, plane: Plane, bytes: &[u8]) -> ConstantData<'_> {
        ConstantData::Plane { encoding, bytes: Lent::Slice(bytes), dims: [64, 32], padded_rows: 64, plane, band: None }
    }

    #[test]
    fn codes_in_32_value_blocks_and_16_bit_bands_are_tuned_nothing_else() {
        let bytes = [0u8; 256];
        use Encoding::{Q4_0, Q4_1, Q4K, Q5_0, Q5_1, Q5K, Q6K, Q8_0};
        for encoding in [Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4K, Q5K] {
            assert!(is_tuned(&codes(encoding.clone(), Plane::Quants, &bytes)), "{encoding:?}");
            // Only the codes: the spec matches no product over the scales, mins or high bits.
            for plane in [Plane::Scale, Plane::Min, Plane::QuantsHigh] {
                assert!(!is_tuned(&codes(encoding.clone(), plane, &bytes)), "{encoding:?} {plane:?}");
            }
        }
        // Q6_K's 16-value sub-blocks are not the block matchers' 32; an encoding tapeout does not decode has no codes.
        assert!(!is_tuned(&codes(Q6K, Plane::Quants, &bytes)));
        assert!(!is_tuned(&codes(Encoding::Other("TQ1_0".into()), Plane::Quants, &bytes)));
        let in_bands = ConstantData::Plane {
            encoding: Encoding::Q4_0,
            bytes: Lent::Slice(&bytes),
            dims: [64, 32],
            padded_rows: 64,
            plane: Plane::Quants,
            band: Some(32),
        };
        assert!(is_tuned(&in_bands), "codes in row bands");
        assert!(is_tuned(&banded(DType::BF16, &bytes, 32)) && is_tuned(&banded(DType::F16, &bytes, 32)));
        // f32 bands are not matched; a plain transpose (one band of every row) is not a band product.
        assert!(!is_tuned(&banded(DType::F32, &bytes, 32)));
        assert!(!is_tuned(&banded(DType::BF16, &bytes, 64)) && !is_tuned(&banded(DType::F16, &bytes, 64)));
        // Bands of 16 or 8 (a weight whose rows 32 does not divide) are not matched by the spec.
        assert!(!is_tuned(&banded(DType::BF16, &bytes, 16)) && !is_tuned(&banded(DType::BF16, &bytes, 8)));
        assert!(!is_tuned(&banded(DType::F16, &bytes, 16)));
        assert!(!is_tuned(&ConstantData::Raw { dtype: DType::BF16, bytes: Lent::Slice(&bytes) }));
    }

    #[test]
    fn the_spec_has_one_matcher_per_tuned_form() {
        let s = cpu_tuning_spec();
        assert_eq!(s.matches("transform.iree.match.contraction").count(), 20);
        let forms = [
            ("match_few_rows_8_i4", "i4"),
            ("match_few_rows_16_i4", "i4"),
            ("match_few_rows_32_i4", "i4"),
            ("match_few_rows_8_i8", "i8"),
            ("match_few_rows_16_i8", "i8"),
            ("match_few_rows_32_i8", "i8"),
            ("match_few_rows_8_band_i8", "i8"),
            ("match_few_rows_16_band_i8", "i8"),
            ("match_few_rows_32_band_i8", "i8"),
            ("match_few_rows_8_band_i4", "i4"),
            ("match_few_rows_16_band_i4", "i4"),
            ("match_few_rows_32_band_i4", "i4"),
            ("match_block_bands_i8", "i8"),
            ("match_block_bands_i4", "i4"),
            ("match_blocks_i8", "i8"),
            ("match_blocks_i4", "i4"),
            ("match_bands_bf16", "bf16"),
            ("match_bands_f16", "f16"),
            ("match_dequantized_bands_f32", "f32"),
            ("match_prefill_bands_bf16", "bf16"),
        ];
        for (name, rhs) in forms {
            assert!(s.contains(&format!("@{name}(%op")) && s.contains(&format!("@{name} -> @apply_op_config")));
            assert!(s.contains(&format!("rhs_type = {rhs},")));
        }
        // The block matchers leave N untiled (a workgroup per block row), the matchers of codes in bands give a
        // workgroup a band of 32 columns with every block of it; only the band matchers check 32-column bands.
        assert_eq!(s.matches("distribution = [1, 0, 0, 0]").count(), 2);
        assert_eq!(s.matches("distribution = [0, 1, 32, 0]").count(), 2);
        assert!(!s.contains("%codes"));
        assert_eq!(s.matches("dim_is_multiple_of %bands[2], 32").count(), 4);
        // Both band matchers carry the band tiles, the four block matchers the block tiles.
        assert_eq!(s.matches("vector_common_parallel = [4, 32, 0], vector_reduction = [0, 0, 8]").count(), 2);
        assert_eq!(s.matches("vector_common_parallel = [1, 1, 32, 0], vector_reduction = [0, 0, 0, 32]").count(), 4);
        // The few-rows products over codes gated in groups: one matcher per form `keep_packed` writes (8, 16 and
        // 32 rows), its rows per workgroup, 5 loops (block, row, group, column, k); over codes in row bands, 8 bands
        // of 32 columns a workgroup, 5 loops (block, row, band, column, k).
        assert_eq!(FEW_ROWS, [8, 16, 32], "a new form needs its tiles measured (docs/performance.md#cpu-tuning)");
        for rows in FEW_ROWS {
            assert_eq!(s.matches(&format!("dims_equal %m, [{rows}]")).count(), 4, "{rows} rows");
            assert_eq!(s.matches(&format!("distribution = [1, {rows}, 4, 64, 0]")).count(), 1, "{rows} rows");
            assert_eq!(s.matches(&format!("distribution = [1, {rows}, 8, 32, 0]")).count(), 2, "{rows} rows in bands");
            let i8_tiles = format!(
                "distribution = [1, {rows}, 256, 0], vector_common_parallel = [1, 8, 32, 0], vector_reduction = [0, 0, 0, 4]"
            );
            assert_eq!(s.matches(&i8_tiles).count(), 1, "{rows} rows over i8 codes");
        }
        assert_eq!(
            s.matches("vector_common_parallel = [1, 8, 1, 32, 0], vector_reduction = [0, 0, 0, 0, 4]").count(),
            9
        );
        // The band forms read the codes as stored: `(band, block, k, column)`.
        assert_eq!(s.matches("affine_map<(d0, d1, d2, d3, d4) -> (d2, d0, d4, d3)>").count(), 6);
        // A prefill's dequantized bands (4 loops: band, row, column, k; the result read transposed): one band of 16
        // rows per workgroup, vector tiles of 4 KiB.
        let dequantized =
            "distribution = [1, 16, 32, 0], vector_common_parallel = [1, 8, 32, 0], vector_reduction = [0, 0, 0, 4]";
        assert_eq!(s.matches(dequantized).count(), 1);
        let prefill_bf16 =
            "distribution = [1, 16, 32, 0], vector_common_parallel = [1, 4, 32, 0], vector_reduction = [0, 0, 0, 4]";
        assert_eq!(s.matches(prefill_bf16).count(), 1);
        assert_eq!(s.matches("affine_map<(d0, d1, d2, d3) -> (d1, d0, d2)>").count(), 2);
        assert_eq!(s.matches('{').count(), s.matches('}').count());
        assert_eq!(s.matches('(').count(), s.matches(')').count());
    }
}
