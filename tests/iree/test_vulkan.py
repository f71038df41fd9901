"""The kept weights' other uses on Vulkan (lavapipe, IREE's default Vulkan profile), exported with `--target vulkan`
and checked against PyPI gguf's dequantizer and numpy: embedding rows gathered by `?` ids from every packed format's
planes (a 64-row table and a 5-row one, whose planes hold padding rows), and linears over `?` rows of every packed
format and of 16-bit weights kept as stored, at odd and prime row counts (tests/iree/test_packed.py and
test_graphs.py run the static cases on both devices)."""
import json
import re

import numpy as np
import pytest

from harness import VULKAN, compile_iree, run, run_iree, write_safetensors_2d
from test_packed import FORMATS, K, N, one_tensor_gguf


def export(tapeout, tmp_path, graph, weights, *flags):
    (tmp_path / "g.json").write_text(json.dumps(graph))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", weights, "-o", out, "--target", "vulkan",
        "--inline-below", "0", *flags)
    name = graph["name"]
    return compile_iree(tmp_path, out / f"{name}.mlir", device=VULKAN), out / f"{name}.irpa"


@pytest.mark.parametrize("rows", [N, 5])
@pytest.mark.parametrize("fmt", FORMATS)
def test_rows_gathered_by_dynamic_ids_from_planes(fmt, rows, tapeout, tmp_path):
    cols = K if rows == N else 256
    dense = one_tensor_gguf(tmp_path / "w.gguf", "t", fmt, rows, cols, np.random.default_rng(41))
    g = {"name": "emb", "tensors": [
        {"name": "ids", "shape": [1, "?"], "dtype": "i32"},
        {"name": "w", "shape": [rows, cols], "dtype": "f32", "path": "w", "data": {"tensor": "t"}},
        {"name": "e", "shape": [1, "?", cols], "dtype": "f32"}],
        "nodes": [{"op": "gather", "inputs": ["w", "ids"], "outputs": ["e"]}], "outputs": ["e"]}
    vmfb, irpa = export(tapeout, tmp_path, g, tmp_path / "w.gguf", "--packed", "keep")
    for ids in (np.array([[rows - 1]], np.int32), np.array([[rows - 1, 0, 3, rows - 1, 1]], np.int32)):
        (e,) = run_iree(tmp_path, vmfb, [irpa], [ids], tag=str(ids.shape[1]), device=VULKAN)
        np.testing.assert_allclose(e.astype(np.float64), dense[ids], rtol=1e-5, atol=1e-5 * np.abs(dense).max(),
                                   err_msg=f"{fmt}, {rows} rows, {ids.shape[1]} ids")


@pytest.mark.parametrize("fmt", FORMATS + ["bf16", "f16"])
def test_a_linear_over_dynamic_rows(fmt, tapeout, tmp_path):
    """`silu(x [1, ?, K]) @ Wᵀ` with a kept weight of 67 rows (prime), at 1, 7 and 33 rows from one module."""
    rows, cols = 67, 256
    rng = np.random.default_rng(43)
    if fmt in ("bf16", "f16"):
        w = rng.standard_normal((rows, cols)).astype(np.float32)
        if fmt == "bf16":
            dense, _ = write_safetensors_2d(tmp_path / "w.safetensors", "t", w, "bf16")
        else:
            from safetensors.numpy import save_file
            dense = w.astype(np.float16)
            save_file({"t": dense}, str(tmp_path / "w.safetensors"))
        dense, weights, flags = dense.astype(np.float64), tmp_path / "w.safetensors", ()
        dtype = fmt
    else:
        dense = one_tensor_gguf(tmp_path / "w.gguf", "t", fmt, rows, cols, rng)
        weights, flags, dtype = tmp_path / "w.gguf", ("--packed", "keep"), "f32"
    g = {"name": "lin", "tensors": [
        {"name": "x", "shape": [1, "?", cols], "dtype": "f32"},
        {"name": "h", "shape": [1, "?", cols], "dtype": "f32"},
        {"name": "w", "shape": [rows, cols], "dtype": dtype, "path": "w", "data": {"tensor": "t"}},
        {"name": "wf", "shape": [rows, cols], "dtype": "f32"},
        {"name": "wt", "shape": [cols, rows], "dtype": "f32"},
        {"name": "y", "shape": [1, "?", rows], "dtype": "f32"}],
        "nodes": [{"op": "silu", "inputs": ["x"], "outputs": ["h"]},
                  {"op": "convert", "inputs": ["w"], "outputs": ["wf"]},
                  {"op": "transpose", "inputs": ["wf"], "outputs": ["wt"]},
                  {"op": "matmul", "inputs": ["h", "wt"], "outputs": ["y"]}], "outputs": ["y"]}
    vmfb, irpa = export(tapeout, tmp_path, g, weights, *flags)
    for n in (1, 7, 33):
        x = rng.standard_normal((1, n, cols)).astype(np.float32)
        (y,) = run_iree(tmp_path, vmfb, [irpa], [x], tag=str(n), device=VULKAN)
        h = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64)))
        want = h @ dense.T
        np.testing.assert_allclose(y.astype(np.float64), want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                                   err_msg=f"{fmt}, {n} rows")


@pytest.mark.parametrize("dtype, cols", [("bf16", 6), ("f16", 6), ("i8", 8), ("bf16", 5)])
def test_rows_of_a_narrow_table_gathered_by_dynamic_ids(dtype, cols, tapeout, tmp_path):
    """An embedding kept narrow (`[37, cols]`, a prime row count) gathered by `?` ids: rows of whole words (cols·bits
    a multiple of 32) are gathered as words and only those decoded; a table whose rows end inside a word (5 bf16
    values) is decoded whole first. Both equal numpy's rows, at 1 and 4 ids."""
    import ml_dtypes
    from safetensors.numpy import save_file
    rows = 37
    rng = np.random.default_rng(47)
    np_dtype = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "i8": np.int8}[dtype]
    if dtype == "i8":
        table = rng.integers(-128, 128, (rows, cols)).astype(np.int8)
    else:
        table = rng.standard_normal((rows, cols)).astype(np.float32).astype(np_dtype)
    save_file({"t": table}, str(tmp_path / "w.safetensors"))
    to = "i32" if dtype == "i8" else "f32"
    g = {"name": "emb", "tensors": [
        {"name": "ids", "shape": [1, "?"], "dtype": "i32"},
        {"name": "w", "shape": [rows, cols], "dtype": dtype, "path": "w", "data": {"tensor": "t"}},
        {"name": "e", "shape": [1, "?", cols], "dtype": dtype},
        {"name": "y", "shape": [1, "?", cols], "dtype": to}],
        "nodes": [{"op": "gather", "inputs": ["w", "ids"], "outputs": ["e"]},
                  {"op": "convert", "inputs": ["e"], "outputs": ["y"]}], "outputs": ["y"]}
    vmfb, irpa = export(tapeout, tmp_path, g, tmp_path / "w.safetensors")
    text = (tmp_path / "out" / "emb.mlir").read_text()
    whole_words = cols * {"bf16": 16, "f16": 16, "i8": 8}[dtype] % 32 == 0
    words_gathered = re.search(r'"stablehlo.gather"\(%v\d+, %arg0\).*\(tensor<37x\d+xi32>', text)
    assert bool(words_gathered) == whole_words, text
    for ids in (np.array([[rows - 1]], np.int32), np.array([[rows - 1, 0, 17, 2]], np.int32)):
        (y,) = run_iree(tmp_path, vmfb, [irpa], [ids], tag=str(ids.shape[1]), device=VULKAN)
        want = table[ids].astype(np.float32 if to == "f32" else np.int32)
        assert y.dtype == want.dtype and np.array_equal(y, want), f"{dtype}: {y} != {want}"
