"""Dynamic dimensions, op by op: each graph is exported once with `?` dimensions, compiled once by iree-compile,
and run by iree-run-module at two run-time sizes, each compared with the numpy interpreter (reference.py). The
same graph with static dimensions is the control."""
import re
import sys

import numpy as np
import pytest

from harness import DEVICES, ROOT, compile_and_run_iree, n, narrow_boundary, run, signature, t, write_graph

sys.path.insert(0, str(ROOT / "tests/graphs"))
import reference  # noqa: E402

D = "?"
RNG = np.random.default_rng(7)




W4x5 = RNG.standard_normal((4, 5)).astype(np.float32)
G8 = (1 + 0.1 * RNG.standard_normal(8)).astype(np.float32)
B8 = (0.1 * RNG.standard_normal(8)).astype(np.float32)
TABLE = RNG.standard_normal((10, 4)).astype(np.float32)
W1056 = (RNG.standard_normal((1056, 8192)) / 90).astype(np.float32)
W64x8 = (RNG.standard_normal((64, 8)) / 3).astype(np.float32)

# name: (tensors, nodes, outputs, {input: shape with S for the run-time size})
CASES = {
    "add_broadcast": ([t("x", [D, 4]), t("b", [4], weight=W4x5[:, 0].copy()), t("y", [D, 4])],
                      [n("add", ["x", "b"], "y")], {"x": ["S", 4]}),
    "softmax": ([t("x", [D, 8]), t("y", [D, 8])], [n("softmax", ["x"], "y", axis=-1)], {"x": ["S", 8]}),
    "softmax_over_dynamic_axis": ([t("x", [D, 8]), t("y", [D, 8])], [n("softmax", ["x"], "y", axis=0)], {"x": ["S", 8]}),
    "layer_norm": ([t("x", [D, 8]), t("g", [8], weight=G8), t("b", [8], weight=B8), t("y", [D, 8])],
                   [n("layer_norm", ["x", "g", "b"], "y")], {"x": ["S", 8]}),
    "rms_norm": ([t("x", [2, D, 8]), t("g", [8], weight=G8), t("y", [2, D, 8])],
                 [n("rms_norm", ["x", "g"], "y")], {"x": [2, "S", 8]}),
    "reduce_mean_keepdims": ([t("x", [D, 3]), t("y", [D, 1])], [n("reduce_mean", ["x"], "y", axes=[1], keepdims=True)],
                             {"x": ["S", 3]}),
    "reduce_mean_over_dynamic_axis": ([t("x", [D, 3]), t("y", [3])], [n("reduce_mean", ["x"], "y", axes=[0])],
                                      {"x": ["S", 3]}),
    "reduce_sum_max": ([t("x", [D, 3]), t("s", [3]), t("m", [D]), t("y", [D, 3])],
                       [n("reduce_sum", ["x"], "s", axes=[0]), n("reduce_max", ["x"], "m", axes=[1])], {"x": ["S", 3]},
                       ["s", "m"]),
    "matmul": ([t("x", [D, 4]), t("w", [4, 5], weight=W4x5), t("y", [D, 5])], [n("matmul", ["x", "w"], "y")],
               {"x": ["S", 4]}),
    # A linear over HF's run-time batch and length `[?, ?, K]` (IREE 3.13 refuses its `dot_general` as written).
    "linear_batch_and_length": ([t("x", [D, D, 4]), t("w", [5, 4], weight=W4x5.T.copy()), t("wt", [4, 5]),
                                 t("y", [D, D, 5])],
                                [n("transpose", ["w"], "wt", perm=[1, 0]), n("matmul", ["x", "wt"], "y")],
                                {"x": ["B", "S", 4]}),
    # The same over a weight the CPU pass writes in row bands (64 rows: 2 bands of 32), as a batched prefill's
    # linears are: the bands contracted over the merged rows, split back into the batch and the length.
    "linear_bands_batch_and_length": ([t("x", [D, D, 8]), t("w", [64, 8], weight=W64x8), t("wt", [8, 64]),
                                       t("y", [D, D, 64])],
                                      [n("transpose", ["w"], "wt", perm=[1, 0]), n("matmul", ["x", "wt"], "y")],
                                      {"x": ["B", "S", 8]}),
    "matmul_two_dynamic_rows_of_three": ([t("x", [2, D, D, 4]), t("w", [4, 5], weight=W4x5), t("y", [2, D, D, 5])],
                                         [n("matmul", ["x", "w"], "y")], {"x": [2, "S", "B", 4]}),
    "batched_matmul": ([t("a", [2, D, 4]), t("b", [2, 4, D]), t("y", [2, D, D])], [n("matmul", ["a", "b"], "y")],
                       {"a": [2, "S", 4], "b": [2, 4, "S"]}),
    "gather": ([t("table", [10, 4], weight=TABLE), t("ids", [D], "i32"), t("y", [D, 4])],
               [n("gather", ["table", "ids"], "y")], {"ids": ["S"]}),
    "concat": ([t("x", [D, 4]), t("z", [D, 4]), t("y", [D, 8])], [n("concat", ["x", "z"], "y", axis=1)],
               {"x": ["S", 4], "z": ["S", 4]}),
    "slice_static_axes": ([t("x", [D, 8]), t("y", [D, 2])], [n("slice", ["x"], "y", start=[0, 2], limit=[-1, 6], stride=[1, 2])],
                          {"x": ["S", 8]}),
    "dynamic_slice": ([t("x", [D, 8]), t("o0", [], "i32"), t("o1", [], "i32"), t("y", [2, 4])],
                      [n("dynamic_slice", ["x", "o0", "o1"], "y", sizes=[2, 4])], {"x": ["S", 8], "o0": [], "o1": []}),
    # The updated tensor is static (IREE 3.13 does not lower the op on `?` dims: see the error test); the
    # update's offsets are run-time values, and the values written come from a `?`-shaped input.
    "dynamic_update_slice": ([t("c", [6, 8]), t("x", [D, 8]), t("u", [1, 8]), t("o0", [], "i64"), t("o1", [], "i64"),
                              t("y", [6, 8])],
                             [n("reduce_sum", ["x"], "u", axes=[0], keepdims=True),
                              n("dynamic_update_slice", ["c", "u", "o0", "o1"], "y")],
                             {"c": [6, 8], "x": ["S", 8], "o0": [], "o1": []}),
    "argmax": ([t("x", [D, 8]), t("y", [D], "i32")], [n("argmax", ["x"], "y", axis=-1)], {"x": ["S", 8]}),
    "compare_select_broadcast": ([t("x", [D, 8]), t("g", [8], weight=G8), t("m", [D, 8], "bool"), t("y", [D, 8])],
                                 [n("compare", ["x", "g"], "m", direction="GT"), n("select", ["m", "x", "g"], "y")],
                                 {"x": ["S", 8]}),
    "transpose": ([t("x", [D, 4]), t("y", [4, D])], [n("transpose", ["x"], "y", perm=[1, 0])], {"x": ["S", 4]}),
    "reshape_split": ([t("x", [D, 4]), t("y", [D, 2, 2])], [n("reshape", ["x"], "y")], {"x": ["S", 4]}),
    "reshape_merge": ([t("x", [D, 2, 2]), t("y", [D, 4])], [n("reshape", ["x"], "y")], {"x": ["S", 2, 2]}),
    "rope": ([t("x", [2, D, 8]), t("c", [D, 8]), t("s", [D, 8]), t("y", [2, D, 8])],
             [n("rope", ["x", "c", "s"], "y")], {"x": [2, "S", 8], "c": ["S", 8], "s": ["S", 8]}),
    "causal_mask": ([t("x", [D, D]), t("y", [D, D])], [n("causal_mask", ["x"], "y")], {"x": ["S", "S"]}),
    # More queries than keys: bottom-right aligned (query i sees keys j <= i + T - S), static and `?` alike.
    "causal_mask_more_queries_than_keys": ([t("x", [5, 3]), t("y", [5, 3])], [n("causal_mask", ["x"], "y")],
                                           {"x": [5, 3]}),
    "causal_mask_dynamic_queries": ([t("x", [D, 3]), t("y", [D, 3])], [n("causal_mask", ["x"], "y")], {"x": ["S", 3]}),
    "sdpa_causal": ([t("q", [2, D, 8]), t("k", [2, D, 8]), t("v", [2, D, 8]), t("y", [2, D, 8])],
                    [n("sdpa", ["q", "k", "v"], "y", causal=True)], {"q": [2, "S", 8], "k": [2, "S", 8], "v": [2, "S", 8]}),
    # NumPy broadcasting with `?` dimensions (issue 27): `?` against 1, two `?` in different operands, a rank
    # difference, and the ternary ops.
    "mul_positions_by_inv_freq": ([t("p", [D, 1]), t("f", [16], weight=(1 / 10000 ** (np.arange(16) / 16)).astype(np.float32)),
                                   t("y", [D, 16])], [n("mul", ["p", "f"], "y")], {"p": ["S", 1]}),
    "sub_column_row": ([t("a", [D, 1]), t("b", [1, D]), t("y", [D, D])], [n("sub", ["a", "b"], "y")],
                       {"a": ["S", 1], "b": [1, "S"]}),
    "div_leading_unit": ([t("a", [D, 1, 4]), t("b", [3, 1], weight=np.array([[1], [2], [3]], np.float32)), t("y", [D, 3, 4])], [n("div", ["a", "b"], "y")],
                         {"a": ["S", 1, 4]}),
    "max_rank0": ([t("a", [2, D]), t("b", []), t("y", [2, D])], [n("max", ["a", "b"], "y")], {"a": [2, "S"], "b": []}),
    "compare_select_column_row": ([t("r", [D, 1], "i32"), t("c", [1, D], "i32"), t("x", [D]), t("z", []),
                                   t("m", [D, D], "bool"), t("y", [D, D])],
                                  [n("compare", ["r", "c"], "m", direction="GE"), n("select", ["m", "x", "z"], "y")],
                                  {"r": ["S", 1], "c": [1, "S"], "x": ["S"], "z": []}),
    "clamp_broadcast_bounds": ([t("x", [D, 1]), t("lo", [4], weight=-np.abs(W4x5[:, 1])), t("hi", []), t("y", [D, 4])],
                               [n("clamp", ["x", "lo", "hi"], "y")], {"x": ["S", 1], "hi": []}),
    # A `?` against a static 5 is taken to be 5 (run here at 5 both times): the result is static.
    "add_dynamic_against_static": ([t("a", [D, 4]), t("b", [5, 4]), t("y", [5, 4])], [n("add", ["a", "b"], "y")],
                                   {"a": [5, 4], "b": [5, 4]}),
    # A broadcast of a broadcast (keepdims is one): IREE merges the two, so no broadcast dimension may expand.
    "keepdims_then_broadcast": ([t("x", [D, 4]), t("r", [D, 1]), t("w", [3], weight=G8[:3].copy()), t("y", [D, 3])],
                                [n("reduce_sum", ["x"], "r", axes=[1], keepdims=True), n("mul", ["r", "w"], "y")],
                                {"x": ["S", 4]}),
    # A broadcast to a reference tensor's shape (Kotlin expand(x, like)) and an iota of a run-time length
    # (Kotlin arange(like, axis)), here as HF computes rotary angles from positions 0..S-1.
    "broadcast_like": ([t("b", [16], weight=(1 / 10000 ** (np.arange(16) / 16)).astype(np.float32)), t("x", [2, D, 16]),
                        t("y", [2, D, 16])], [n("broadcast", ["b", "x"], "y")], {"x": [2, "S", 16]}),
    "broadcast_like_dims": ([t("c", [D, 1]), t("x", [2, D, 3]), t("y", [2, D, 3])],
                            [n("broadcast", ["c", "x"], "y", dims=[1, 2])], {"c": ["S", 1], "x": [2, "S", 3]}),
    "iota_like_rotary_angles": ([t("x", [1, D, 8]), t("p", [D], "i32"), t("pf", [D], "f32"), t("pc", [D, 1]),
                                 t("f", [4], weight=(1 / 10000 ** (np.arange(4) / 4)).astype(np.float32)),
                                 t("y", [D, 4])],
                                [n("iota", ["x"], "p", axis=1), n("convert", ["p"], "pf"),
                                 n("reshape", ["pf"], "pc"), n("mul", ["pc", "f"], "y")], {"x": [1, "S", 8]}),
    # Slices of a `?` dimension to its end (limit -1) from a static start, with a stride.
    "slice_dynamic_to_end": ([t("x", [D, 8]), t("y", [D, 2])],
                             [n("slice", ["x"], "y", start=[1, 2], limit=[-1, -1], stride=[2, 3])], {"x": ["S", 8]}),
    # HF DynamicCache: cat(past_k, k_new) along the `?` sequence axis, and two `?` parts.
    "concat_cache_dynamic_axis": ([t("past", [2, D, 4]), t("new", [2, 1, 4]), t("y", [2, D, 4])],
                                  [n("concat", ["past", "new"], "y", axis=1)], {"past": [2, "S", 4], "new": [2, 1, 4]}),
    "concat_two_dynamic": ([t("x", [D, 4]), t("z", [D, 4]), t("y", [D, 4])], [n("concat", ["x", "z"], "y", axis=0)],
                           {"x": ["S", 4], "z": ["S", 4]}),
    # Three parts along a `?` axis (static, `?`, static), with `?` extents off the axis too, and integer parts: each
    # is inserted at its offset into one result (Emitter::concat_in_place).
    "concat_three_dynamic_axis": ([t("a", [D, 2, D]), t("b", [D, D, D]), t("c", [D, 1, D]), t("y", [D, D, D])],
                                  [n("concat", ["a", "b", "c"], "y", axis=1)],
                                  {"a": ["S", 2, "S"], "b": ["S", "S", "S"], "c": ["S", 1, "S"]}),
    "concat_int_dynamic_axis": ([t("p", [1, D], "i32"), t("q", [1, 3], "i32"), t("y", [1, D], "i32")],
                                [n("concat", ["q", "p"], "y", axis=1)], {"p": [1, "S"], "q": [1, 3]}),
    # Gathers from tables with `?` dimensions (indices are 0..9).
    "gather_dynamic_table": ([t("table", [10, D, 4]), t("ids", [D], "i32"), t("y", [D, D, 4])],
                             [n("gather", ["table", "ids"], "y", axis=0)], {"table": [10, "S", 4], "ids": ["S"]}),
    "gather_dynamic_table_axis1": ([t("table", [D, 10]), t("ids", [2, D], "i64"), t("y", [D, 2, D])],
                                   [n("gather", ["table", "ids"], "y", axis=1)], {"table": ["S", 10], "ids": [2, "S"]}),
    # A declared result less specific than the computed one ([?, ?] for [3, ?]): a tensor.cast to the declared type.
    "gather_declared_less_specific": ([t("table", [10, D]), t("ids", [3], "i32"), t("y", [D, D])],
                                      [n("gather", ["table", "ids"], "y", axis=0)], {"table": [10, "S"], "ids": [3]}),
    # matmul with `?` dimensions: [S, 1] x [1, N] (HF's rotary angles), a `?` batch, a `?` batch and sequence.
    "matmul_column_row": ([t("p", [D, 1]), t("f", [1, 16], weight=(1 / 10000 ** (np.arange(16) / 16)).astype(np.float32)[None]),
                           t("y", [D, 16])], [n("matmul", ["p", "f"], "y")], {"p": ["S", 1]}),
    "matmul_column_row_batched": ([t("p", [2, D, 1]), t("f", [2, 1, 8]), t("y", [2, D, 8])], [n("matmul", ["p", "f"], "y")],
                                  {"p": [2, "S", 1], "f": [2, 1, 8]}),
    "matmul_batched_column": ([t("a", [2, D, 4]), t("b", [2, 4, 1]), t("y", [2, D, 1])], [n("matmul", ["a", "b"], "y")],
                              {"a": [2, "S", 4], "b": [2, 4, 1]}),
    "matmul_dynamic_batch": ([t("a", [D, 3, 4]), t("b", [D, 4, 5]), t("y", [D, 3, 5])], [n("matmul", ["a", "b"], "y")],
                             {"a": ["S", 3, 4], "b": ["S", 4, 5]}),
    "matmul_dynamic_batch_and_seq": ([t("q", [D, 2, D, 8]), t("k", [D, 2, 8, D]), t("y", [D, 2, D, D])],
                                     [n("matmul", ["q", "k"], "y")], {"q": ["S", 2, "S", 8], "k": ["S", 2, 8, "S"]}),
    # A linear over HF's `[1, S, hidden]` hidden states: the unit batch beside a `?` sequence (IREE folds that
    # dot_general into a dynamic_reshape it rejects unless the leading dims are merged first).
    "matmul_unit_batch_dynamic_seq": ([t("x", [1, D, 4]), t("w", [4, 5], weight=W4x5), t("y", [1, D, 5])],
                                      [n("matmul", ["x", "w"], "y")], {"x": [1, "S", 4]}),
    "matmul_rank3_dynamic_batch_weight": ([t("x", [D, 3, 4]), t("w", [4, 5], weight=W4x5), t("y", [D, 3, 5])],
                                          [n("matmul", ["x", "w"], "y")], {"x": ["S", 3, 4]}),
    # A single row against a `?` number of columns or a `?` contraction (found by the random-graph property test).
    "matmul_row_dynamic_columns": ([t("a", [1, 4]), t("b", [4, D]), t("y", [1, D])], [n("matmul", ["a", "b"], "y")],
                                   {"a": [1, 4], "b": [4, "S"]}),
    "matmul_row_dynamic_contraction": ([t("a", [1, D]), t("b", [D, 2]), t("y", [1, 2])], [n("matmul", ["a", "b"], "y")],
                                       {"a": [1, "S"], "b": ["S", 2]}),
    "matmul_unit_contraction_dynamic_columns": ([t("a", [1, 1]), t("b", [1, D]), t("y", [1, D])],
                                                [n("matmul", ["a", "b"], "y")], {"a": [1, 1], "b": [1, "S"]}),
    "matmul_unit_batch_dynamic_contraction": ([t("a", [1, 7, D]), t("b", [1, D, 3]), t("y", [1, 7, 3])],
                                              [n("matmul", ["a", "b"], "y")], {"a": [1, 7, "S"], "b": [1, "S", 3]}),
    "matmul_unit_batch_dynamic_rows": ([t("a", [1, 1, D, 4]), t("b", [1, 1, 4, D]), t("y", [1, 1, D, D])],
                                       [n("matmul", ["a", "b"], "y")], {"a": [1, 1, "S", 4], "b": [1, 1, 4, "S"]}),
    # NumPy's pow: a negative base with integral exponents (odd and even), a fractional one (NaN), 0 ** 0 = 1,
    # 0 ** -1 = inf (IREE's own power gives NaN for the first and the third).
    "pow_numpy_semantics": ([t("x", [D, 7]), t("e", [7], weight=np.array([3, 2, 0, 2, 1, -1, 0.5], np.float32)),
                             t("z", [7], weight=np.zeros(7, np.float32)), t("p", [D, 7]), t("q", [7]), t("y", [D, 7])],
                            [n("pow", ["x", "e"], "p"), n("pow", ["z", "e"], "q"), n("add", ["p", "q"], "y")],
                            {"x": ["S", 7]}),
    # Reductions over `?` axes of operands with unit dims (found by the random-graph property test, seed 90115).
    "reduce_max_unit_dims_dynamic_axes": ([t("x", [7, 1, 3, D, D]), t("y", [1, 3])],
                                          [n("reduce_max", ["x"], "y", axes=[0, 3, 4])], {"x": [7, 1, 3, "S", "S"]}),
    "reduce_sum_unit_dims_keepdims": ([t("x", [2, 1, D]), t("y", [2, 1, 1])],
                                      [n("reduce_sum", ["x"], "y", axes=[2], keepdims=True)], {"x": [2, 1, "S"]}),
    "reduce_mean_unit_rows_dynamic_axis": ([t("x", [1, D, 1]), t("y", [1, 1])],
                                           [n("reduce_mean", ["x"], "y", axes=[1])], {"x": [1, "S", 1]}),
    # expand(x, like) of a `?` onto the same `?`, then a one-row matmul (seed 120372 of the property test): the
    # identity broadcast is not written, so IREE has no broadcast chain to merge into one it then refuses.
    "expand_identity_then_row_matmul": ([t("x", [D]), t("like", [D]), t("e", [D]), t("r", [1, D]), t("w", [D, 7]),
                                         t("y", [1, 7])],
                                        [n("broadcast", ["x", "like"], "e"), n("reshape", ["e"], "r"),
                                         n("matmul", ["r", "w"], "y")], {"x": ["S"], "like": ["S"], "w": ["S", 7]}),
    "softmax_unit_rows_dynamic_axis": ([t("x", [1, D]), t("y", [1, D])], [n("softmax", ["x"], "y", axis=-1)], {"x": [1, "S"]}),
    "softmax_unit_heads_dynamic_axis": ([t("x", [1, 2, 1, D]), t("y", [1, 2, 1, D])], [n("softmax", ["x"], "y", axis=-1)],
                                        {"x": [1, 2, 1, "S"]}),
    # A widened operand of a concatenation with `?` dims (seed 120101 of the property test; a bf16 KV cache read as
    # f32 and concatenated with the new keys): IREE clones the widening convert into the concatenation and sizes a
    # stack buffer from the `?`, unless tapeout makes it its own dispatch (Emitter::unfused).
    "concat_widened_cache_dynamic_axis": ([t("past", [2, D, 4], "f16"), t("w", [2, D, 4]), t("k", [2, D, 4]),
                                           t("y", [2, D, 4])],
                                          [n("convert", ["past"], "w"), n("concat", ["w", "k"], "y", axis=1)],
                                          {"past": [2, "S", 4], "k": [2, "S", 4]}),
    "concat_widened_static_axis": ([t("x", [D, 4]), t("h", [D, 4], "f16"), t("w", [D, 4]), t("s", [D, 4]),
                                    t("k", [D, 4]), t("y", [D, 8])],
                                   [n("convert", ["x"], "h"), n("convert", ["h"], "w"), n("mul", ["w", "w"], "s"),
                                    n("concat", ["s", "k"], "y", axis=1)], {"x": ["S", 4], "k": ["S", 4]}),
    "concat_widened_i16_to_i64": ([t("x", [D, 3], "i16"), t("w", [D, 3], "i64"), t("y", [D, 6], "i64")],
                                  [n("convert", ["x"], "w"), n("concat", ["w", "w"], "y", axis=1)], {"x": ["S", 3]}),
    "concat_widened_positions_i64": ([t("past", [1, D], "i64"), t("p", [1, D], "i32"), t("w", [1, D], "i64"),
                                      t("y", [1, D], "i64")],
                                     [n("convert", ["p"], "w"), n("concat", ["past", "w"], "y", axis=1)],
                                     {"past": [1, "S"], "p": [1, "S"]}),
    "concat_widened_int8": ([t("x", [D], "i8"), t("w", [D], "i32"), t("z", [D], "i32"), t("y", [D], "i32")],
                            [n("convert", ["x"], "w"), n("concat", ["z", "w"], "y", axis=0)], {"x": ["S"], "z": ["S"]}),
    "matmul_rank4_dynamic_seq_weight": ([t("x", [2, 1, D, 4]), t("w", [4, 5], weight=W4x5), t("y", [2, 1, D, 5])],
                                        [n("matmul", ["x", "w"], "y")], {"x": [2, 1, "S", 4]}),
    # A linear with `?` rows and 33 row bands of an 8192-wide weight: one contraction over the stored bands
    # (test_a_banded_linear_is_one_contraction_over_the_stored_bands).
    "linear_many_bands": ([t("x", [1, D, 8192]), t("w", [1056, 8192], weight=W1056), t("wt", [8192, 1056]),
                           t("y", [1, D, 1056])],
                          [n("transpose", ["w"], "wt"), n("matmul", ["x", "wt"], "y")], {"x": [1, "S", 8192]}),
    # Unsigned integer weights as parameters: declared signless (IREE 3.13 refuses a `ui8` `util.global`) and read
    # back as unsigned; in row bands (64 rows of 5) the contraction runs on the signless integers of the same bits
    # (`arith` takes no `ui8`). Small values: the f64 reference does not wrap.
    "linear_bands_u8": ([t("x", [D, 5], "u8"), t("w", [64, 5], "u8", weight=RNG.integers(0, 4, (64, 5)).astype(np.uint8)),
                         t("wt", [5, 64], "u8"), t("y", [D, 64], "u8")],
                        [n("transpose", ["w"], "wt"), n("matmul", ["x", "wt"], "y")], {"x": ["S", 5]}),
    "linear_bands_u32": ([t("x", [D, 7], "u32"), t("w", [96, 7], "u32", weight=RNG.integers(0, 1000, (96, 7)).astype(np.uint32)),
                          t("wt", [7, 96], "u32"), t("y", [D, 96], "u32")],
                         [n("transpose", ["w"], "wt"), n("matmul", ["x", "wt"], "y")], {"x": ["S", 7]}),
    # `?` unsigned tensors: IREE 3.13 cannot lower `get_dimension_size` / `tensor.dim` of one, so the emitter reads
    # their extents from a signless bitcast (a broadcast of a parameter, a `?`-axis concatenation, a slice to the end,
    # expand onto a `?` reference).
    "add_u16_parameter": ([t("x", [D, 5], "u16"), t("b", [5], "u16", weight=np.arange(5, dtype=np.uint16) * 1000),
                           t("y", [D, 5], "u16")], [n("add", ["x", "b"], "y")], {"x": ["S", 5]}),
    "concat_u16_dynamic_axis": ([t("p", [2, D], "u16"), t("q", [2, 1], "u16"), t("y", [2, D], "u16")],
                                [n("concat", ["p", "q"], "y", axis=1)], {"p": [2, "S"], "q": [2, 1]}),
    "slice_u8_dynamic_to_end": ([t("x", [D, 6], "u8"), t("y", [D, 2], "u8")],
                                [n("slice", ["x"], "y", start=[1, 1], limit=[-1, -1], stride=[2, 3])], {"x": ["S", 6]}),
    "expand_u32_onto_dynamic": ([t("x", [1, 3], "u32"), t("like", [D, 3], "u32"), t("y", [D, 3], "u32")],
                                [n("broadcast", ["x", "like"], "y")], {"x": [1, 3], "like": ["S", 3]}),
    # A `?` against a static extent: the `?` operand cast to the static type (`tensor.cast`), unsigned.
    "add_u16_dynamic_against_static": ([t("a", [D, 4], "u16"), t("b", [5, 4], "u16"), t("y", [5, 4], "u16")],
                                       [n("add", ["a", "b"], "y")], {"a": [5, 4], "b": [5, 4]}),
    "reshape_u8_dynamic_merge": ([t("x", [D, 2, 3], "u8"), t("y", [D, 6], "u8")], [n("reshape", ["x"], "y")], {"x": ["S", 2, 3]}),
    "reshape_u16_dynamic_split": ([t("x", [D, 6], "u16"), t("y", [D, 3, 2], "u16")], [n("reshape", ["x"], "y")], {"x": ["S", 6]}),
    # 33 parts: the emitter joins at most 16 per `stablehlo.concatenate` (test_a_concat_of_many_parts_is_a_tree).
    "concat_33_parts": ([t(f"x{i}", [D, 1]) for i in range(33)] + [t("y", [D, 33])],
                        [n("concat", [f"x{i}" for i in range(33)], "y", axis=1)], {f"x{i}": ["S", 1] for i in range(33)}),
}

# Cases whose result size is not the input's `?` (a slice start, a concatenation), so the static control (every `?` made 4) does not type-check.
DYNAMIC_ONLY = {"slice_dynamic_to_end", "gather_declared_less_specific", "add_dynamic_against_static", "concat_cache_dynamic_axis", "concat_two_dynamic",
                "concat_three_dynamic_axis", "concat_int_dynamic_axis", "concat_u16_dynamic_axis", "slice_u8_dynamic_to_end",
                "add_u16_dynamic_against_static",
                "concat_widened_cache_dynamic_axis", "concat_widened_int8", "concat_widened_positions_i64"}



def feeds_for(graph, shapes, size, second=None):
    out = []
    for name in graph.inputs:
        # "B" is a second run-time size, unlike S's, so a batch and a length that trade places would show.
        shape = [size if d == "S" else (size if second is None else second) if d == "B" else d for d in shapes[name]]
        dt = reference.NP[graph.specs[name]["dtype"]]
        if np.issubdtype(dt, np.integer):
            out.append((name, RNG.integers(0, 10, size=shape).astype(dt)))
        else:
            out.append((name, RNG.standard_normal(shape).astype(dt)))
    return out


def test_a_dynamic_op_that_cannot_be_lowered_is_an_export_error_naming_node_and_dimension(tapeout, tmp_path):
    cases = [
        ([t("x", [D, 8]), t("y", [2, 8])], [n("slice", ["x"], "y", start=[1, 0], limit=[3, 8])],
         ["node 0 (slice -> 'y')", "dimension 0 is `?`"]),
        ([t("x", [D, 2, 3]), t("y", [D, 3, 2])], [n("reshape", ["x"], "y")],
         ["node 0 (reshape -> 'y')", "must split or merge whole dimensions"]),
        ([t("x", [D, 8]), t("u", [1, 8]), t("o0", [], "i32"), t("o1", [], "i32"), t("y", [D, 8])],
         [n("dynamic_update_slice", ["x", "u", "o0", "o1"], "y")],
         ["node 0 (dynamic_update_slice -> 'y')", "static maximum size"]),
        # A `?` shape with nothing to read it from is refused, never written as an op IREE rejects.
        ([t("b", [4]), t("y", [D, 4])], [n("broadcast", ["b"], "y")],
         ["node 0 (broadcast -> 'y')", "reference tensor", "expand(x, like)"]),
        ([t("y", [D], "i32")], [n("iota", [], "y")], ["node 0 (iota -> 'y')", "`?` length", "arange(like, axis)"]),
    ]
    for i, (tensors, nodes, needles) in enumerate(cases):
        g = write_graph(tmp_path, f"bad{i}", tensors, nodes, [nodes[-1]["outputs"][0]])
        r = run(tapeout, "export", g, "--weights", tmp_path / f"bad{i}.safetensors", "-o", tmp_path / f"o{i}", check=False)
        assert r.returncode == 1, r.stdout + r.stderr
        for needle in needles:
            assert needle in r.stderr, f"{needle!r} missing from {r.stderr}"
        assert not (tmp_path / f"o{i}" / f"bad{i}.mlir").exists(), "no MLIR is written"


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dims, device", [("dynamic", "cpu"), ("static", "cpu"), ("dynamic", "vulkan")])
def test_op_with_dynamic_dims_compiles_once_and_runs_at_two_sizes(case, dims, device, tapeout, tmp_path):
    if dims == "static" and case in DYNAMIC_ONLY:
        pytest.skip("the result's static size is not the input's")
    device = DEVICES[device]
    tensors, nodes, shapes, *outs = CASES[case]
    outputs = outs[0] if outs else [nodes[-1]["outputs"][0]]
    if device.target == "vulkan":
        narrow = narrow_boundary(tensors, nodes, outputs)
        if narrow:
            # IREE 3.13 misreads narrow buffers passed to a Vulkan function: the export refuses, naming the value.
            g = write_graph(tmp_path, case, tensors, nodes, outputs)
            r = run(tapeout, "export", g, "--weights", tmp_path / f"{case}.safetensors", "-o", tmp_path / "out",
                    "--target", "vulkan", check=False)
            assert r.returncode == 1 and f"'{narrow}'" in r.stderr and "on vulkan, IREE 3.13" in r.stderr, r.stderr
            return
    sizes = [3, 5] if dims == "dynamic" else [4]
    g = write_graph(tmp_path, case, tensors, nodes, outputs, static=None if dims == "dynamic" else sizes[0])
    out = tmp_path / "out"
    run(tapeout, "export", g, "--weights", tmp_path / f"{case}.safetensors", "-o", out, "--inline-below", "0",
        "--target", device.target)
    graph = reference.Graph(g, tmp_path / f"{case}.safetensors")
    order, _ = signature(out / f"{case}.mlir")
    for i, size in enumerate(sizes):
        feeds = dict(feeds_for(graph, shapes, size, size + 2 if dims == "dynamic" else None))
        work = tmp_path / f"run{i}"
        work.mkdir()
        got = compile_and_run_iree(work, out / f"{case}.mlir", [out / f"{case}.irpa"], [feeds[k] for k in order],
                                   outputs=len(outputs), device=device)
        for o, (g_, w) in enumerate(zip(got, graph.evaluate(feeds))):
            np.testing.assert_allclose(g_, w, rtol=1e-5, atol=1e-5, err_msg=f"{case} at size {size}, output {o}")


def test_a_banded_linear_is_one_contraction_over_the_stored_bands(tapeout, tmp_path):
    """A linear's weight in row bands (`[N / 32, K, 32]`, here 33 bands of an 8192-wide weight) is contracted as
    stored, with `?` rows (a prefill) and static rows (a decode step) alike: one `linalg.generic` reading the
    parameter itself. No broadcast of the rows to every band (which grew with rows x bands x K: 524 MB for the 156M
    Llama's LM head at 128 rows), no slice, barrier or transpose of the weight, no transpose of the result.
    Values: the case above, at 3 and 5 rows and at 4."""
    tensors, nodes, _ = CASES["linear_many_bands"]
    for dims, rows in (("dynamic", "?"), ("static", "1")):
        g = write_graph(tmp_path, f"bands_{dims}", tensors, nodes, ["y"], static=None if dims == "dynamic" else 1)
        out = tmp_path / f"out_{dims}"
        run(tapeout, "export", g, "--weights", tmp_path / f"bands_{dims}.safetensors", "-o", out, "--inline-below", "0")
        text = (out / f"bands_{dims}.mlir").read_text()
        w = re.search(r"(%v\d+) = util\.global\.load @w ", text).group(1)
        products = re.findall(rf"linalg\.generic .* ins\((%v\d+), {w} : tensor<{re.escape(rows)}x8192xf32>, "
                              rf"tensor<33x8192x32xf32>\) outs\(%v\d+ : tensor<{re.escape(rows)}x33x32xf32>\)", text)
        assert len(products) == 1 and text.count("linalg.generic") == 1, text
        assert len(re.findall(rf"{w}\b", text)) == 2, f"{w} is read by the contraction only: {text}"
        assert not re.search(r"broadcast_in_dim .*-> tensor<33x", text), text
        assert "optimization_barrier" not in text and "stablehlo.transpose" not in text, text


def test_a_concat_along_a_dynamic_axis_is_each_part_inserted_at_its_offset(tapeout, tmp_path):
    """HF's DynamicCache `cat(past, new)` along the `?` sequence axis. IREE 3.13 lowers a `stablehlo.concatenate` with a
    `?` extent into one dispatch that finds every element's source with divisions and a branch (most of the dispatch
    time of the 156M Llama's decode step at 1024 cached positions, docs/performance.md#llm-decode-and-prefill); the
    emitter writes each part inserted at its offset into one empty result instead, which IREE runs as copies. A static
    axis (with `?` rows) keeps its `stablehlo.concatenate`. Values: the cases above, at two sizes."""
    for case, parts in (("concat_cache_dynamic_axis", 2), ("concat_three_dynamic_axis", 3)):
        tensors, nodes, _ = CASES[case]
        g = write_graph(tmp_path, case, tensors, nodes, ["y"])
        run(tapeout, "export", g, "--weights", tmp_path / f"{case}.safetensors", "-o", tmp_path / case)
        text = (tmp_path / case / f"{case}.mlir").read_text()
        assert "stablehlo.concatenate" not in text, text
        assert text.count("tensor.insert_slice") == parts and text.count("tensor.empty(") == 1, text
    tensors, nodes, _ = CASES["concat"]
    g = write_graph(tmp_path, "static_axis", tensors, nodes, ["y"])
    run(tapeout, "export", g, "--weights", tmp_path / "static_axis.safetensors", "-o", tmp_path / "static_axis")
    text = (tmp_path / "static_axis/static_axis.mlir").read_text()
    assert "stablehlo.concatenate" in text and "tensor.insert_slice" not in text, text


def test_a_concat_of_many_parts_is_a_tree(tapeout, tmp_path):
    """IREE 3.13 may write a concatenation as one dispatch with a binding per part and refuses more than 32 at run
    time, so the emitter joins at most 16 parts at a time: 33 parts are 16 + 16 + 1, then 3. Values: the case above."""
    tensors, nodes, _ = CASES["concat_33_parts"]
    g = write_graph(tmp_path, "cat", tensors, nodes, ["y"])
    run(tapeout, "export", g, "--weights", tmp_path / "cat.safetensors", "-o", tmp_path / "out")
    text = (tmp_path / "out/cat.mlir").read_text()
    fan_in = [line.split("concatenate")[1].split(", dim =")[0].count("%") for line in text.splitlines()
              if "stablehlo.concatenate" in line]
    assert sorted(fan_in) == [3, 16, 16], fan_in
