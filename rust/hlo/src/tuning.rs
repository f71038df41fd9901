//! A tuning spec for IREE's CPU backend: how the emitter's one-row band products are tiled.
//!
//! A linear whose weight is stored in row bands of 32 (`[N / 32, K, 32]`, see the emitter's `banded_matmul`) is
//! one batched contraction. With one row (a decode step), IREE 3.13 gives each workgroup one band and a vector
//! tile of one band (`distribution = [1, 0, 32, 0]`, `vector_common_parallel = [1, 1, 32, 0]`). This spec gives
//! it two bands of each tile, so every loop reads two bands' runs at once. Measured on an AVX-512 Xeon
//! (docs/performance.md, "Two bands at a time"): the bf16 decode step of a 156M Llama 13.3 → 11.1 ms, f16
//! band products 1.15×; f32 bands (twice the bytes, already near the read floor) unchanged, so they are not
//! matched. It changes tiling only: each output element is the same sum in the same order.
//!
//! The spec is an input of `iree-compile` (`--iree-codegen-tuning-spec-path=FILE`), not part of the module, which
//! stays StableHLO; a module compiled without it is as fast as before.

use tapeout_graph::DType;

/// The band width this spec matches (the emitter's widest row tile; the narrower ones are not measured).
pub const TUNED_BAND_ROWS: u64 = 32;

/// Whether a constant stored in row bands of `tile` rows as `dtype` has its one-row products tuned by
/// [`cpu_tuning_spec`].
#[must_use]
pub fn band_is_tuned(dtype: DType, tile: u64) -> bool {
    tile == TUNED_BAND_ROWS && matches!(dtype, DType::BF16 | DType::F16)
}

/// The tuning spec text (a transform-dialect module IREE 3.13 reads with `--iree-codegen-tuning-spec-path`) for
/// the llvm-cpu backend: bf16 and f16 band products with one row get two bands per workgroup and per vector tile.
#[must_use]
pub fn cpu_tuning_spec() -> String {
    let mut s = String::from(
        "// tapeout's tuning spec for IREE's llvm-cpu backend (iree-compile --iree-codegen-tuning-spec-path=THIS_FILE).\n\
         // It tiles one-row products over weights stored in row bands of 32 (bf16 or f16) two bands at a time:\n\
         // the same sums, read faster (docs/performance.md). Without it the module compiles and runs as before.\n\
         module attributes {iree_codegen.tuning_spec_with_default_entrypoint, transform.with_named_sequence} {\n\
         \x20 transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly}, %config: !transform.any_param {transform.readonly}) {\n\
         \x20   transform.annotate %op \"compilation_info\" = %config : !transform.any_op, !transform.any_param\n\
         \x20   transform.yield\n\
         \x20 }\n",
    );
    for ty in ["bf16", "f16"] {
        s.push_str(&format!(
            "  transform.named_sequence @match_band_{ty}(%op: !transform.any_op {{transform.readonly}}) -> (!transform.any_op, !transform.any_param) {{\n\
             \x20   %b, %m, %n, %k = transform.iree.match.contraction %op, lhs_type = f32, rhs_type = {ty}, output_type = f32, indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>] : !transform.any_op -> !transform.param<i64>\n\
             \x20   transform.iree.match.dims_equal %m, [1] : !transform.param<i64>\n\
             \x20   transform.iree.match.dims_equal %n, [{TUNED_BAND_ROWS}] : !transform.param<i64>\n\
             \x20   %c = transform.param.constant #iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<cache_parallel = [2, 0, {TUNED_BAND_ROWS}, 0], distribution = [2, 0, {TUNED_BAND_ROWS}, 0], vector_common_parallel = [2, 1, {TUNED_BAND_ROWS}, 0], vector_reduction = [0, 0, 0, 16]>, translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>, {{enable_loop_peeling}}>> -> !transform.any_param\n\
             \x20   transform.yield %op, %c : !transform.any_op, !transform.any_param\n\
             \x20 }}\n"
        ));
    }
    s.push_str(
        "  transform.named_sequence @__kernel_config(%v: !transform.any_op {transform.consumed}) -> !transform.any_op attributes {iree_codegen.tuning_spec_entrypoint} {\n\
         \x20   %r = transform.foreach_match in %v @match_band_bf16 -> @apply_op_config, @match_band_f16 -> @apply_op_config : (!transform.any_op) -> !transform.any_op\n\
         \x20   transform.yield %r : !transform.any_op\n\
         \x20 }\n\
         }\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_half_bands_of_32_are_tuned() {
        assert!(band_is_tuned(DType::BF16, 32) && band_is_tuned(DType::F16, 32));
        assert!(!band_is_tuned(DType::F32, 32) && !band_is_tuned(DType::BF16, 16) && !band_is_tuned(DType::I8, 32));
    }

    #[test]
    fn the_spec_has_one_matcher_per_tuned_dtype() {
        let s = cpu_tuning_spec();
        assert_eq!(s.matches("transform.iree.match.contraction").count(), 2);
        assert!(s.contains("rhs_type = bf16") && s.contains("rhs_type = f16"));
        assert!(s.contains("@match_band_bf16 -> @apply_op_config, @match_band_f16 -> @apply_op_config"));
        assert_eq!(s.matches('{').count(), s.matches('}').count());
    }
}
