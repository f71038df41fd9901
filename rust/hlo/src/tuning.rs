//! A tuning spec for IREE's CPU backend: how the emitter's per-block products over Q8_0 codes are tiled.
//!
//! A Q8_0 weight kept packed is contracted per 32-value block over its `i8` codes (`[Kb, 32, N]`, see
//! `keep_packed`). For one row (a decode step) IREE 3.13 gives each workgroup 64 columns of one block row with a
//! reduction tile of 16; the spec gives it 256 columns and the whole block as the reduction tile: decode about
//! 1.35x faster on an AVX-512 Xeon (docs/performance.md, "Two bands at a time"). It changes tiling only: each output
//! element is the same sum over the same values.
//!
//! Not matched:
//! - Q4_0's `i4` planes: the tiles that helped them (vector tiles of 64) exceed IREE's vector size limit on
//!   16-byte-vector CPUs, and 256 columns cannot be compiled over their rows padded to 64 only (masked `i4` loads);
//!   what remains was within noise.
//! - Weights in row bands (bf16, f16, f32): since the emitter contracts the stored bands in one `linalg.generic`,
//!   IREE's own tiles read them at about the memory's rate for one row. For `?` rows, the tiles that sped up a
//!   prefill of 128 tokens (reduction tiles of 4 or 8) slowed a prefill of 8, and the ones that did not (a
//!   reduction tile of 16) exceed the vector size limit above on 16-byte-vector CPUs (docs/performance.md, "One
//!   contraction over the stored bands").
//!
//! The spec is an input of `iree-compile` (`--iree-codegen-tuning-spec-path=FILE`), not part of the module, which
//! compiles and runs without it.

use tapeout_graph::Encoding;

/// Whether the per-block products of a weight kept packed in `encoding` are tuned by [`cpu_tuning_spec`] (Q8_0's
/// `i8` codes only).
#[must_use]
pub fn blocks_are_tuned(encoding: &Encoding) -> bool {
    matches!(encoding, Encoding::Q8_0)
}

/// One matcher of the spec: a contraction of f32 rows with `rhs` values whose indexing maps are `maps` (over four
/// loops), passing `check` (transform ops on its dimensions), given `lowering` (an `#iree_cpu.lowering_config`'s
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
/// the llvm-cpu backend: one-row per-block products over `i8` codes get 256 columns per workgroup and the whole
/// block as the reduction tile.
#[must_use]
pub fn cpu_tuning_spec() -> String {
    // The per-block product: loops (block, row, column, k); one row, blocks of 32.
    let block_maps = "affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>";
    let block_check = "\x20   transform.iree.match.dims_equal %m, [1] : !transform.param<i64>\n\
                       \x20   transform.iree.match.dims_equal %k, [32] : !transform.param<i64>\n";
    // Vector tiles of at most 4 KiB (`[32, 32]` f32 values): IREE 3.13 refuses vectors larger than 512 native
    // vectors, 8 KiB on a 16-byte-vector CPU (`generic` x86-64, Arm NEON).
    let block = "cache_parallel = [1, 0, 256, 0], distribution = [1, 0, 256, 0], vector_common_parallel = [1, 1, 32, 0], vector_reduction = [0, 0, 0, 32]";
    let matchers = [("match_blocks_i8", "i8", block_maps, block_check, block)];
    let mut s = String::from(
        "// tapeout's tuning spec for IREE's llvm-cpu backend (iree-compile --iree-codegen-tuning-spec-path=THIS_FILE\n\
         // --mlir-disable-threading). It tiles one-row per-block products over Q8_0 codes (i8) a whole block at a\n\
         // time: the same sums, computed faster (docs/performance.md). Without it the module compiles and runs as well.\n\
         module attributes {iree_codegen.tuning_spec_with_default_entrypoint, transform.with_named_sequence} {\n\
         \x20 transform.named_sequence @apply_op_config(%op: !transform.any_op {transform.readonly}, %config: !transform.any_param {transform.readonly}) {\n\
         \x20   transform.annotate %op \"compilation_info\" = %config : !transform.any_op, !transform.any_param\n\
         \x20   transform.yield\n\
         \x20 }\n",
    );
    for (name, rhs, maps, check, lowering) in matchers {
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

    #[test]
    fn only_q8_0_blocks_are_tuned() {
        assert!(blocks_are_tuned(&Encoding::Q8_0));
        assert!(!blocks_are_tuned(&Encoding::Q4_0) && !blocks_are_tuned(&Encoding::Q4K));
    }

    #[test]
    fn the_spec_has_one_matcher_per_tuned_form() {
        let s = cpu_tuning_spec();
        assert_eq!(s.matches("transform.iree.match.contraction").count(), 1);
        assert!(
            s.contains("rhs_type = i8,") && s.contains("foreach_match in %v @match_blocks_i8 -> @apply_op_config :")
        );
        assert_eq!(s.matches('{').count(), s.matches('}').count());
        assert_eq!(s.matches('(').count(), s.matches(')').count());
    }
}
