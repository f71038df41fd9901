"""The CPU tuning spec tapeout writes beside a module whose weights are stored in row bands of 32 (bf16 or f16):
`iree-compile --iree-codegen-tuning-spec-path=<name>.tuning.mlir` gives each one-row band product two bands per
workgroup and per vector tile (docs/performance.md, "Two bands at a time"). It must change how the products are
tiled, never what they compute: every result is checked against numpy's float64 product of the stored values, at
band counts that do not divide by two (3, 5, 11 bands), reduction lengths that leave a tail (7, 161), one row
(tuned) and three rows (not matched), with the spec and without it."""
import json
import re

import numpy as np
import pytest

from harness import iree_tool, run, run_iree, signature
from test_shape_sweep import write_safetensors

BANDS = [2, 3, 5, 11]  # weights of 32 x BANDS rows
KS = [7, 161]


def linear_graph(tmp_path, weights, dense, rng):
    """A graph of linears `x_<k>_<rows> @ W_<n>_<k>ᵀ` for each weight `w<n>_<k>` (its graph dtype in `weights`, its
    float64 values in `dense`), at 1 and 3 rows, written to `tmp_path/g.json`. Returns ({input: array}, {result:
    f64 oracle})."""
    f32 = lambda nm, shape: {"name": nm, "shape": shape, "dtype": "f32"}  # noqa: E731
    tensors, nodes, outputs, feeds, want = [], [], [], {}, {}
    for k in sorted({k for _, k in weights}):
        for rows in (1, 3):
            tensors.append(f32(f"x_{k}_{rows}", [rows, k]))
            feeds[f"x_{k}_{rows}"] = rng.standard_normal((rows, k)).astype(np.float32)
    for (n, k), dtype in weights.items():
        w = f"w{n}_{k}"
        tensors += [{"name": w, "shape": [n, k], "dtype": dtype, "data": {"tensor": w}}, f32(f"{w}t", [k, n])]
        nodes.append({"op": "transpose", "inputs": [w], "outputs": [f"{w}t"]})
        for rows in (1, 3):
            y = f"y{n}_{k}_{rows}"
            tensors.append(f32(y, [rows, n]))
            nodes.append({"op": "matmul", "inputs": [f"x_{k}_{rows}", f"{w}t"], "outputs": [y]})
            outputs.append(y)
            want[y] = feeds[f"x_{k}_{rows}"].astype(np.float64) @ dense[w].T
    (tmp_path / "g.json").write_text(json.dumps({"name": "bands", "tensors": tensors, "nodes": nodes,
                                                 "outputs": outputs}))
    return feeds, want


def linears(tmp_path, dtype, seed):
    """Linears over weights of every band count and K in a safetensors file as `dtype`. Returns (graph path, weights
    path, {result: f64 oracle}, {input: array})."""
    rng = np.random.default_rng(seed)
    stored, dense, weights = {}, {}, {}
    for k in KS:
        for b in BANDS:
            n = 32 * b
            w, name = rng.standard_normal((n, k)).astype(np.float32), f"w{32 * b}_{k}"
            if dtype == "bf16":
                bits = (w.view(np.uint32) >> 16).astype("<u2")
                stored[name], dense[name] = ("BF16", bits), (bits.astype(np.uint32) << 16).view(np.float32)
            elif dtype == "f16":
                stored[name], dense[name] = ("F16", w.astype("<f2")), w.astype(np.float16).astype(np.float32)
            else:
                stored[name], dense[name] = ("F32", w), w
            dense[name] = dense[name].astype(np.float64)
            weights[(n, k)] = dtype
    write_safetensors(tmp_path / "w.safetensors", stored)
    feeds, want = linear_graph(tmp_path, weights, dense, rng)
    return tmp_path / "g.json", tmp_path / "w.safetensors", want, feeds


def compile_host(out, tmp_path, name, spec=None, cpu="host"):
    vmfb = tmp_path / f"{name}.vmfb"
    configs = tmp_path / f"{name}.configs"
    flags = [f"--iree-codegen-tuning-spec-path={spec}", "--mlir-disable-threading"] if spec else []
    run(iree_tool("iree-compile"), out / "bands.mlir", "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu", f"--iree-llvmcpu-target-cpu={cpu}",
        f"--iree-hal-dump-executable-configurations-to={configs}", *flags, "-o", vmfb)
    text = "".join(p.read_text() for p in sorted(configs.glob("*.mlir")))
    return vmfb, text


def check(tmp_path, out, vmfb, want, feeds, tag):
    args, results = signature(out / "bands.mlir")
    got = run_iree(tmp_path, vmfb, [out / "bands.irpa"], [feeds[a] for a in args], outputs=len(results), tag=tag)
    wrong = []
    for r, o in zip(results, got):
        w = want[r]
        scale = max(np.abs(w).max(), 1e-30)
        err = np.abs(o.astype(np.float64) - w).max() / scale if o.shape == w.shape else f"shape {o.shape}"
        if o.shape != w.shape or err > 1e-5:
            wrong.append(f"{r}: {err}")
    return wrong


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_the_tuning_spec_tiles_one_row_band_products_two_bands_at_a_time_and_keeps_every_value(dtype, tapeout, tmp_path):
    g, w, want, feeds = linears(tmp_path, dtype, seed=len(dtype))
    out = tmp_path / "out"
    printed = run(tapeout, "export", g, "--weights", w, "-o", out, "--inline-below", "0").stdout
    spec = out / "bands.tuning.mlir"
    assert spec.is_file() and f"--iree-codegen-tuning-spec-path={spec}" in printed, printed
    text = (out / "bands.mlir").read_text()
    assert "tuning" not in text  # the module itself stays plain StableHLO
    vmfb, configs = compile_host(out, tmp_path, "tuned", spec)
    # Every one-row band product got the spec's tiles, and only those: the three-row ones keep IREE's own.
    tuned = re.findall(r"distribution = \[2, 0, 32, 0\], vector_common_parallel = \[2, 1, 32, 0\]", configs)
    assert len(tuned) == len(BANDS) * len(KS), configs[-3000:]
    wrong = check(tmp_path, out, vmfb, want, feeds, "tuned")
    assert not wrong, f"{dtype} with the spec: {wrong}"
    plain, configs = compile_host(out, tmp_path, "plain")
    assert "vector_common_parallel = [2, 1, 32, 0]" not in configs
    assert not check(tmp_path, out, plain, want, feeds, "plain")
    generic, configs = compile_host(out, tmp_path, "generic", spec, cpu="generic")
    assert "vector_common_parallel = [2, 1, 32, 0]" in configs
    assert not check(tmp_path, out, generic, want, feeds, "generic")


def test_no_spec_for_weights_it_does_not_tune_and_a_stale_one_is_removed(tapeout, tmp_path):
    """f32 bands (twice the bytes, measured no faster) get no spec; re-exporting a module that had one over the same
    directory removes it, so a compile that looks for `<name>.tuning.mlir` never finds another module's."""
    out = tmp_path / "out"
    g, w, _, _ = linears(tmp_path, "bf16", seed=1)
    run(tapeout, "export", g, "--weights", w, "-o", out, "--inline-below", "0")
    assert (out / "bands.tuning.mlir").is_file()
    g, w, _, _ = linears(tmp_path, "f32", seed=1)
    printed = run(tapeout, "export", g, "--weights", w, "-o", out, "--inline-below", "0").stdout
    assert not (out / "bands.tuning.mlir").exists() and "tuning-spec-path" not in printed, printed


BLOCK_TILES = "distribution = [1, 0, 256, 0], vector_common_parallel = [1, 1, 32, 0], vector_reduction = [0, 0, 0, 32]"


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_the_tuning_spec_tiles_one_row_per_block_products_of_kept_codes_and_keeps_every_value(fmt, tapeout, tmp_path):
    """Q8_0 weights kept packed are contracted per 32-value block over `[Kb, 32, N]` i8 codes; the spec gives those
    one-row products 256 columns per workgroup and the whole block as the reduction tile (Q4_0's i4 planes are not
    matched, and a Q4_0 export writes no spec). Rows of 5, 33 and 300
    (a partial tile, padded Q4_0 planes), 2 and 3 blocks, one row (tuned) and three (not): every result against
    PyPI gguf's dequantized weights in float64, with the spec and without it."""
    from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType as T
    from gguf.quants import dequantize
    from test_packed import random_blocks

    rng = np.random.default_rng(7 + len(fmt))
    path = tmp_path / "w.gguf"
    w = GGUFWriter(str(path), "llama")
    shapes = [(n, k) for n in (5, 33, 300) for k in (64, 96)]
    for n, k in shapes:
        w.add_tensor(f"w{n}_{k}", random_blocks(fmt, n, k, rng), raw_dtype=T[fmt])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    dense = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(d) for d in reversed(t.shape)])
             for t in GGUFReader(str(path)).tensors}
    feeds, want = linear_graph(tmp_path, {shape: "f32" for shape in shapes}, dense, rng)
    out = tmp_path / "out"
    printed = run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep",
                  "--inline-below", "0").stdout
    spec = out / "bands.tuning.mlir"
    if fmt == "Q4_0":
        assert not spec.exists() and "tuning-spec-path" not in printed, printed
        return
    assert spec.is_file() and "tuning-spec-path" in printed, printed
    vmfb, _ = compile_host(out, tmp_path, "tuned", spec)
    products = {}
    for f in sorted((tmp_path / "tuned.configs").glob("*.mlir")):
        text = f.read_text()
        m = re.search(r"func\.func @\w*_batch_matmul_\d+x(\d+)x\d+x32_f32xi[48]xf32", text)
        if m:
            products.setdefault(m.group(1), []).append(BLOCK_TILES in text)
    # Every one-row per-block product got the spec's tiles; no three-row one did.
    assert products.get("1") and all(products["1"]), products
    assert products.get("3") and not any(products["3"]), products
    wrong = check(tmp_path, out, vmfb, want, feeds, "tuned")
    assert not wrong, f"{fmt} with the spec: {wrong}"
    plain, configs = compile_host(out, tmp_path, "plain")
    assert BLOCK_TILES not in configs
    assert not check(tmp_path, out, plain, want, feeds, "plain")
    # A CPU with 16-byte vectors (IREE refuses vectors over 512 of its native ones) compiles it with the spec too.
    generic, configs = compile_host(out, tmp_path, "generic", spec, cpu="generic")
    assert BLOCK_TILES in configs
    assert not check(tmp_path, out, generic, want, feeds, "generic")
