//! A tuning spec for IREE's CPU backend: how the emitter's one-row products over stored weights are tiled.
//!
//! Two forms of product, each a batched contraction, are tiled differently from IREE 3.13's own choice:
//!
//! - **Row bands.** A linear whose weight is stored in row bands of 32 (`[N / 32, K, 32]`, see the emitter's
//!   `banded_matmul`). With one row (a decode step), IREE gives each workgroup one band and a vector tile of one
//!   band (`distribution = [1, 0, 32, 0]`, `vector_common_parallel = [1, 1, 32, 0]`); the spec gives it two bands
//!   of each, so every loop reads two bands' runs at once. bf16 and f16 only: f32 bands (twice the bytes, already
//!   near the read floor) were no faster.
//! - **Per-block products of Q8_0 weights kept packed** (`i8` codes `[Kb, 32, N]`, contracted per 32-value block,
//!   see `keep_packed`). IREE gives each workgroup 64 columns of one block row with a reduction tile of 16; the
//!   spec gives it 256 columns and the whole block as the reduction tile. Q4_0's `i4` planes are not matched: the
//!   tiles that helped them (vector tiles of 64) exceed IREE's vector size limit on 16-byte-vector CPUs, and 256
//!   columns cannot be compiled over their rows padded to 64 only (masked `i4` loads); what remains was within noise.
//!
//! Measured on an AVX-512 Xeon (docs/performance.md, "Two bands at a time"): the 156M Llama's decode step bf16
//! 13.3 → 11.1 ms, Q8_0 kept packed about 1.35× faster. It changes tiling only: each output
//! element is the same sum over the same values.
//!
//! The spec is an input of `iree-compile` (`--iree-codegen-tuning-spec-path=FILE`), not part of the module, which
//! stays StableHLO; a module compiled without it is as fast as before.

use tapeout_graph::{DType, Encoding};

/// The band width this spec matches (the emitter's widest row tile; the narrower ones are not measured).
const TUNED_BAND_ROWS: u64 = 32;

/// Whether a constant stored in row bands of `tile` rows as `dtype` has its one-row products tuned by
/// [`cpu_tuning_spec`].
#[must_use]
pub fn band_is_tuned(dtype: DType, tile: u64) -> bool {
    tile == TUNED_BAND_ROWS && matches!(dtype, DType::BF16 | DType::F16)
}

/// Whether the per-block products of a weight kept packed in `encoding` are tuned by [`cpu_tuning_spec`] (Q8_0's
/// `i8` codes only).
#[must_use]
pub fn blocks_are_tuned(encoding: &Encoding) -> bool {
    matches!(encoding, Encoding::Q8_0)
}

/// One matcher of the spec: a one-row batched contraction of f32 rows with `rhs` values, with `fixed` (`n` or `k`)
/// equal to `size`, given `lowering` (an `#iree_cpu.lowering_config`'s fields).
fn matcher(name: &str, rhs: &str, fixed: &str, size: u64, lowering: &str) -> String {
    format!(
        "  transform.named_sequence @{name}(%op: !transform.any_op {{transform.readonly}}) -> (!transform.any_op, !transform.any_param) {{\n\
         \x20   %b, %m, %n, %k = transform.iree.match.contraction %op, lhs_type = f32, rhs_type = {rhs}, output_type = f32, indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>] : !transform.any_op -> !transform.param<i64>\n\
         \x20   transform.iree.match.dims_equal %m, [1] : !transform.param<i64>\n\
         \x20   transform.iree.match.dims_equal %{fixed}, [{size}] : !transform.param<i64>\n\
         \x20   %c = transform.param.constant #iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<{lowering}>, translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>, {{enable_loop_peeling}}>> -> !transform.any_param\n\
         \x20   transform.yield %op, %c : !transform.any_op, !transform.any_param\n\
         \x20 }}\n"
    )
}

/// The tuning spec text (a transform-dialect module IREE 3.13 reads with `--iree-codegen-tuning-spec-path`) for
/// the llvm-cpu backend: one-row products over bf16 / f16 bands of 32 rows get two bands per workgroup and per
/// vector tile; one-row per-block products over `i8` codes get 256 columns per workgroup and the whole block as the
/// reduction tile.
#[must_use]
pub fn cpu_tuning_spec() -> String {
    let t = TUNED_BAND_ROWS;
    let band = format!(
        "cache_parallel = [2, 0, {t}, 0], distribution = [2, 0, {t}, 0], vector_common_parallel = [2, 1, {t}, 0], vector_reduction = [0, 0, 0, 16]"
    );
    // Vector tiles of at most 4 KiB (`[2, 16, 32]` and `[32, 32]` f32 values): IREE 3.13 refuses vectors larger
    // than 512 native vectors, 8 KiB on a 16-byte-vector CPU (`generic` x86-64, Arm NEON).
    let block = "cache_parallel = [1, 0, 256, 0], distribution = [1, 0, 256, 0], vector_common_parallel = [1, 1, 32, 0], vector_reduction = [0, 0, 0, 32]";
    let matchers = [
        ("match_band_bf16", "bf16", "n", t, band.as_str()),
        ("match_band_f16", "f16", "n", t, band.as_str()),
        ("match_blocks_i8", "i8", "k", 32, block),
    ];
    let mut s = String::from(
        "// tapeout's tuning spec for IREE's llvm-cpu backend (iree-compile --iree-codegen-tuning-spec-path=THIS_FILE\n\
         // --mlir-disable-threading). It tiles one-row products over weights stored in row bands of 32 (bf16, f16)\n\
         // two bands at a time, and one-row per-block products over Q8_0 codes (i8) a whole block at a time:\n\
         // the same sums, read faster (docs/performance.md). Without it the module compiles and runs as before.\n\
         module attributes {iree_codegen.tuning_spec_with_default_entrypoint, transform.with_named_sequence} {\n\
         \x20 transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly}, %config: !transform.any_param {transform.readonly}) {\n\
         \x20   transform.annotate %op \"compilation_info\" = %config : !transform.any_op, !transform.any_param\n\
         \x20   transform.yield\n\
         \x20 }\n",
    );
    for (name, rhs, fixed, size, lowering) in matchers {
        s.push_str(&matcher(name, rhs, fixed, size, lowering));
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

    #[test]
    fn only_half_bands_of_32_are_tuned() {
        assert!(band_is_tuned(DType::BF16, 32) && band_is_tuned(DType::F16, 32));
        assert!(!band_is_tuned(DType::F32, 32) && !band_is_tuned(DType::BF16, 16) && !band_is_tuned(DType::I8, 32));
    }

    #[test]
    fn only_q8_0_blocks_are_tuned() {
        assert!(blocks_are_tuned(&Encoding::Q8_0));
        assert!(!blocks_are_tuned(&Encoding::Q4_0) && !blocks_are_tuned(&Encoding::Q4K));
    }

    #[test]
    fn the_spec_has_one_matcher_per_tuned_form() {
        let s = cpu_tuning_spec();
        assert_eq!(s.matches("transform.iree.match.contraction").count(), 3);
        for rhs in ["bf16", "f16", "i8"] {
            assert!(s.contains(&format!("rhs_type = {rhs},")), "{rhs}");
        }
        assert!(
            s.contains("@match_band_bf16 -> @apply_op_config, @match_band_f16 -> @apply_op_config, @match_blocks_i8")
        );
        assert_eq!(s.matches('{').count(), s.matches('}').count());
        assert_eq!(s.matches('(').count(), s.matches(')').count());
    }
}
