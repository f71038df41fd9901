"""The kept weights' other uses on Vulkan (lavapipe, IREE's default Vulkan profile), exported with `--target vulkan`
and checked against PyPI gguf's dequantizer and numpy: embedding rows gathered by `?` ids from every packed format's
planes (a 64-row table and a 5-row one, whose planes hold padding rows), and linears over `?` rows of every packed
format and of 16-bit weights kept as stored, at odd and prime row counts (tests/iree/test_packed.py and
test_graphs.py run the static cases on both devices)."""
import json

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
