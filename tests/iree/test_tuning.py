"""The CPU tuning spec tapeout writes beside a module with weights kept packed in 32-value blocks (Q8_0, Q4_0, Q4_1,
Q4_K, Q5_0, Q5_1, Q5_K) or bf16 / f16 weights in row bands (`iree-compile --iree-codegen-tuning-spec-path=<name>.tuning.mlir`: one-row per-block products a whole block
at a time, one-row band products four bands at a time, docs/performance.md#cpu-tuning). Tiling must never change what is
computed: every result is checked against numpy's float64 product of the stored values, at band counts that do not
divide by two (3, 5, 11 bands), reduction lengths that leave a tail (7, 161), one row, three rows and `?` rows (run
with 5), for this CPU and for a generic one, with the spec and without it."""
import json
import re

import numpy as np
import pytest

from harness import iree_tool, run, run_iree, signature
from test_packed import few_rows_parts
from test_shape_sweep import write_safetensors

BANDS = [2, 3, 5, 11]  # weights of 32 x BANDS rows
KS = [7, 161]


ROWS = {1: 1, 3: 3, "?": 5}  # rows in the graph: rows fed


def linear_graph(tmp_path, weights, dense, rng, rows_set=(1, 3)):
    """A graph of linears `x_<k>_<rows> @ W_<n>_<k>ᵀ` for each weight `w<n>_<k>` (its graph dtype in `weights`, its
    float64 values in `dense`), at each of `rows_set` rows (`?` fed 5), written to `tmp_path/g.json`. Returns
    ({input: array}, {result: f64 oracle})."""
    f32 = lambda nm, shape: {"name": nm, "shape": shape, "dtype": "f32"}  # noqa: E731
    tag = lambda rows: "d" if rows == "?" else rows  # noqa: E731
    tensors, nodes, outputs, feeds, want = [], [], [], {}, {}
    for k in sorted({k for _, k in weights}):
        for rows in rows_set:
            tensors.append(f32(f"x_{k}_{tag(rows)}", [rows, k]))
            feeds[f"x_{k}_{tag(rows)}"] = rng.standard_normal((ROWS[rows], k)).astype(np.float32)
    for (n, k), dtype in weights.items():
        w = f"w{n}_{k}"
        tensors += [{"name": w, "shape": [n, k], "dtype": dtype, "data": {"tensor": w}}, f32(f"{w}t", [k, n])]
        nodes.append({"op": "transpose", "inputs": [w], "outputs": [f"{w}t"]})
        for rows in rows_set:
            y, x = f"y{n}_{k}_{tag(rows)}", f"x_{k}_{tag(rows)}"
            tensors.append(f32(y, [rows, n]))
            nodes.append({"op": "matmul", "inputs": [x, f"{w}t"], "outputs": [y]})
            outputs.append(y)
            want[y] = feeds[x].astype(np.float64) @ dense[w].T
    (tmp_path / "g.json").write_text(json.dumps({"name": "bands", "tensors": tensors, "nodes": nodes,
                                                 "outputs": outputs}))
    return feeds, want


def linears(tmp_path, dtype, seed):
    """Linears over weights of every band count and K in a safetensors file as `dtype`. Returns (graph path, weights
    path, {result: f64 oracle}, {input: array}, {weight: f64 values})."""
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
    feeds, want = linear_graph(tmp_path, weights, dense, rng, rows_set=(1, 3, "?"))
    return tmp_path / "g.json", tmp_path / "w.safetensors", want, feeds, dense


def fed_rows(feeds, want, dense, rows, rng):
    """`feeds` and `want` with every `?`-row input (`x_<k>_d`) fed `rows` new rows and its results' oracles redone."""
    feeds, want = dict(feeds), dict(want)
    for name in [n for n in feeds if n.endswith("_d")]:
        feeds[name] = rng.standard_normal((rows, feeds[name].shape[1])).astype(np.float32)
    for y in [y for y in want if y.endswith("_d")]:
        n, k = y[1:-2].split("_")
        want[y] = feeds[f"x_{k}_d"].astype(np.float64) @ dense[f"w{n}_{k}"].T
    return feeds, want


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


BAND_TILES = "vector_common_parallel = [4, 32, 0], vector_reduction = [0, 0, 8]"
PREFILL_BF16_TILES = ("distribution = [1, 16, 32, 0], vector_common_parallel = [1, 4, 32, 0], "
                      "vector_reduction = [0, 0, 0, 4]")


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_band_products_are_one_contraction_over_the_stored_bands_and_keep_every_value(dtype, tapeout, tmp_path):
    """Weights in row bands of 32 (2, 3, 5, 11 bands; K 7 and 161) at 1, 3 and `?` rows: each product is one
    `linalg.generic` reading the stored parameter (a 16-bit one widened inside it); a bf16 or f16 export writes the
    tuning spec, whose band tiles reach its one-row products only, and whose prefill tiles (a band of 16 rows per
    workgroup) reach bf16's products of 3 and `?` rows only; an f32 export writes none. A 16-bit product over `?`
    rows reads them from a copy padded with zero rows to a multiple of 8 (f32's does not). Every value equals numpy's
    float64 product, compiled for this CPU and for a generic x86-64 one (with the spec where written), the `?` rows
    fed 5, then 1, 8, 9 and 17."""
    g, w, want, feeds, dense = linears(tmp_path, dtype, seed=len(dtype))
    out = tmp_path / "out"
    printed = run(tapeout, "export", g, "--weights", w, "-o", out, "--inline-below", "0").stdout
    spec = out / "bands.tuning.mlir"
    tuned = dtype in ("bf16", "f16")
    if tuned:
        assert spec.is_file() and "tuning-spec-path" in printed, printed
    else:
        assert not spec.exists() and "tuning-spec-path" not in printed, printed
    text = (out / "bands.mlir").read_text()
    products = re.findall(
        r"linalg\.generic .* ins\((%\w+), (%v\d+) : tensor<(\?|\d+)x\d+xf32>, tensor<(\d+)x(\d+)x32x(\w+)>\)", text)
    assert sorted((int(b), int(k), rows) for _, _, rows, b, k, _ in products) == sorted(
        (b, k, rows) for b in BANDS for k in KS for rows in ("1", "3", "?")), products
    assert {t for *_, t in products} == {dtype}
    loads = dict(re.findall(r"(%v\d+) = util\.global\.load @(\S+) ", text))
    assert all(v in loads for _, v, *_ in products), "each product reads the parameter as stored"
    # `?` rows of 16-bit bands are read from a copy with zero rows up to a multiple of 8 (its last insertion), so that
    # IREE's masked last row tile reads inside the buffer (docs/performance.md#weights-in-iree).
    made = dict(re.findall(r"(%v\d+) = ([\w.]+) ", text))
    padded = [rows for x, _, rows, *_ in products if made.get(x) == "tensor.insert_slice"]
    assert padded == (["?"] * len(BANDS) * len(KS) if tuned else []), products
    assert text.count("arith.divui") == text.count("tensor.extract_slice") == len(padded), text
    assert "stablehlo.dot_general" not in text and "broadcast_in_dim" not in text, text
    for cpu in ("host", "generic"):
        vmfb, configs = compile_host(out, tmp_path, cpu, spec if spec.exists() else None, cpu=cpu)
        if tuned:
            # One-row products (IREE names them `matvec_like`) take the spec's band tiles; products of several rows
            # take its prefill tiles for bf16 and keep IREE's for f16. Each product: (band tiles, prefill tiles).
            tiles = {}
            for f in sorted((tmp_path / f"{cpu}.configs").glob("*.mlir")):
                part = f.read_text()
                kind = "one row" if re.search(rf"func\.func @\w*_matvec_like_\w*x{dtype}xf32", part) else "other"
                if f"x{dtype}>" in part and "linalg.generic" in part:
                    tiles.setdefault(kind, []).append((BAND_TILES in part, PREFILL_BF16_TILES in part))
            assert len(tiles.get("one row", [])) == len(BANDS) * len(KS), tiles
            assert all(t == (True, False) for t in tiles["one row"]), tiles
            assert tiles.get("other") and all(t == (False, dtype == "bf16") for t in tiles["other"]), tiles
        else:
            assert BAND_TILES not in configs
            # No matcher for f32 bands: a spec written for 16-bit bands leaves them as IREE tiles them.
            other = tmp_path / "bf16"
            other.mkdir(exist_ok=True)
            g16, w16, *_ = linears(other, "bf16", seed=2)
            run(tapeout, "export", g16, "--weights", w16, "-o", other / "out", "--inline-below", "0")
            _, configs = compile_host(out, tmp_path, f"{cpu}-foreign-spec", other / "out" / "bands.tuning.mlir", cpu=cpu)
            assert "lowering_config" in configs and BAND_TILES not in configs
        wrong = check(tmp_path, out, vmfb, want, feeds, cpu)
        assert not wrong, f"{dtype} for {cpu}: {wrong}"
        # `?` rows of a whole multiple of 8, one past it, and fewer than one tile: only the rows fed come back.
        rng = np.random.default_rng(7)
        for rows in (1, 8, 9, 17):
            fed, wanted = fed_rows(feeds, want, dense, rows, rng)
            wrong = check(tmp_path, out, vmfb, wanted, fed, f"{cpu}-{rows}")
            assert not wrong, f"{dtype} for {cpu} at {rows} rows: {wrong}"
    if tuned:
        plain, configs = compile_host(out, tmp_path, "plain")
        assert BAND_TILES not in configs
        assert not check(tmp_path, out, plain, want, feeds, "plain")


def q8_gguf(tmp_path, fmt, shapes, rng):
    """A GGUF of random `fmt` blocks, one weight `w<n>_<k>` per shape. Returns (path, {name: float64 values})."""
    from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType as T
    from gguf.quants import dequantize
    from test_packed import random_blocks

    path = tmp_path / "w.gguf"
    w = GGUFWriter(str(path), "llama")
    for n, k in shapes:
        w.add_tensor(f"w{n}_{k}", random_blocks(fmt, n, k, rng), raw_dtype=T[fmt])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    dense = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(d) for d in reversed(t.shape)])
             for t in GGUFReader(str(path)).tensors}
    return path, dense


def test_no_spec_for_weights_it_does_not_tune_and_a_stale_one_is_removed(tapeout, tmp_path):
    """Only codes kept packed in 32-value blocks and bf16 / f16 bands get a spec (not Q6_K's 16-value sub-blocks: the
    block matchers want 32); re-exporting a module that had one over the same directory with f32 bands (no spec)
    removes it, so a compile that looks for `<name>.tuning.mlir` never finds another module's."""
    out = tmp_path / "out"
    path, dense = q8_gguf(tmp_path, "Q6_K", [(64, 256)], np.random.default_rng(2))
    linear_graph(tmp_path, {(64, 256): "f32"}, dense, np.random.default_rng(5))
    printed = run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep",
                  "--inline-below", "0").stdout
    assert not (out / "bands.tuning.mlir").exists() and "tuning-spec-path" not in printed, printed
    shapes = [(33, 64)]
    path, dense = q8_gguf(tmp_path, "Q8_0", shapes, np.random.default_rng(3))
    linear_graph(tmp_path, {shape: "f32" for shape in shapes}, dense, np.random.default_rng(4))
    run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep", "--inline-below", "0")
    assert (out / "bands.tuning.mlir").is_file()
    g, w, *_ = linears(tmp_path, "f32", seed=1)
    printed = run(tapeout, "export", g, "--weights", w, "-o", out, "--inline-below", "0").stdout
    assert not (out / "bands.tuning.mlir").exists() and "tuning-spec-path" not in printed, printed


BLOCK_TILES = "distribution = [1, 0, 0, 0], vector_common_parallel = [1, 1, 32, 0], vector_reduction = [0, 0, 0, 32]"
BAND_BLOCK_TILES = "distribution = [0, 1, 32, 0], vector_common_parallel = [1, 1, 32, 0], vector_reduction = [0, 0, 0, 32]"
# The per-block products' dispatches: over `[Kb, 32, N]` codes (rows, N, blocks), and over codes in row bands at one
# row (blocks, bands) and three (blocks, bands).
PRODUCTS = [(r"batch_matmul_(\d+)x(\d+)x(\d+)x32", lambda m: (m[2], int(m[3]), int(m[1])), False),
            (r"matvec_like_(\d+)x(\d+)x32x32", lambda m: ("1", 32 * int(m[2]), int(m[1])), True),
            (r"matmul_like_(\d+)x3x(\d+)x32x32", lambda m: ("3", 32 * int(m[2]), int(m[1])), True)]


@pytest.mark.parametrize("fmt, layout", [("Q8_0", "block-rows"), ("Q8_0", "row-bands"), ("Q4_0", "block-rows"),
                                         ("Q4_0", "row-bands"), ("Q4_1", "block-rows"), ("Q4_K", "block-rows"),
                                         ("Q5_K", "block-rows")])
def test_the_tuning_spec_tiles_one_row_per_block_products_of_kept_codes_and_keeps_every_value(fmt, layout, tapeout,
                                                                                              tmp_path):
    """Weights kept packed in 32-value blocks are contracted per block over `[Kb, 32, N]` codes (5-bit formats their
    low 4 bits, the high bits in a second product), or, Q8_0 and Q4_0, with `--packed-codes row-bands` over codes in
    row bands of 32 where the rows (4-bit planes padded to 64) are a multiple of 32; the spec gives one-row products
    over bands a workgroup per band and over `[Kb, 32, N]` codes a workgroup per block row (all N columns), the
    whole block as the reduction tile. Rows of 5, 33, 64, 300, 320 and 500 (Q8_0: bands at 64 and 320, a partial
    vector tile at the rest; 4-bit planes of 64, 64, 64, 320, 320 and 512, all in bands: 320 once needed masked i4
    loads IREE 3.13 cannot compile), 2 and 3 blocks (K-quants 8 and 16), one row (tuned) and three (not): every
    result against PyPI gguf's dequantized weights in float64, with the spec and without it, for this CPU and a
    generic one."""
    rng = np.random.default_rng(7 + len(fmt))
    ks = (256, 512) if fmt.endswith("_K") else (64, 96)
    shapes = [(n, k) for n in (5, 33, 64, 300, 320, 500) for k in ks]
    path, dense = q8_gguf(tmp_path, fmt, shapes, rng)
    feeds, want = linear_graph(tmp_path, {shape: "f32" for shape in shapes}, dense, rng)
    out = tmp_path / "out"
    printed = run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep",
                  "--inline-below", "0", "--packed-codes", layout).stdout
    spec = out / "bands.tuning.mlir"
    assert spec.is_file() and "tuning-spec-path" in printed, printed
    bands = layout == "row-bands" and fmt in ("Q8_0", "Q4_0")
    codes = {n for n, _ in shapes} if fmt == "Q8_0" else {-(-n // 64) * 64 for n, _ in shapes}

    def block_tiles(name):
        """Every per-block product of the `name` compile: one per (rows, N, blocks), over bands exactly when they
        were asked for and 32 divides N, each one-row one with the spec's tiles for its layout, no three-row one."""
        products = {}
        for f in sorted((tmp_path / f"{name}.configs").glob("*.mlir")):
            text = f.read_text()
            for pattern, key, banded in PRODUCTS:
                m = re.search(rf"func\.func @\w*_{pattern}_f32xi[48]xf32", text)
                if m:
                    tiles = BAND_BLOCK_TILES if banded else BLOCK_TILES
                    products.setdefault(key(m), []).append((banded, tiles in text))
        expected = {(rows, n, k // 32) for rows in ("1", "3") for n in codes for k in {k for _, k in shapes}}
        assert set(products) == expected, (name, sorted(products))
        for (rows, n, kb), seen in products.items():
            assert all(t == (rows == "1") and b == (bands and n % 32 == 0) for b, t in seen), (fmt, layout, name, rows,
                                                                                                n, kb, seen)

    vmfb, _ = compile_host(out, tmp_path, "tuned", spec)
    block_tiles("tuned")
    wrong = check(tmp_path, out, vmfb, want, feeds, "tuned")
    assert not wrong, f"{fmt} with the spec: {wrong}"
    plain, configs = compile_host(out, tmp_path, "plain")
    assert BLOCK_TILES not in configs and BAND_BLOCK_TILES not in configs
    assert not check(tmp_path, out, plain, want, feeds, "plain")
    # A CPU with 16-byte vectors (IREE refuses vectors over 512 of its native ones) compiles it with the spec too.
    generic, configs = compile_host(out, tmp_path, "generic", spec, cpu="generic")
    block_tiles("generic")
    assert not check(tmp_path, out, generic, want, feeds, "generic")


FEW_ROWS_TILES = ("distribution = [1, 8, 4, 64, 0], vector_common_parallel = [1, 8, 1, 32, 0], "
                  "vector_reduction = [0, 0, 0, 0, 4]")
FEW_ROWS_16_TILES = ("distribution = [1, 16, 4, 64, 0], vector_common_parallel = [1, 8, 1, 32, 0], "
                     "vector_reduction = [0, 0, 0, 0, 4]")
FEW_ROWS_32_TILES = ("distribution = [1, 32, 4, 64, 0], vector_common_parallel = [1, 8, 1, 32, 0], "
                     "vector_reduction = [0, 0, 0, 0, 4]")
DEQUANTIZED_TILES = ("distribution = [1, 16, 32, 0], vector_common_parallel = [1, 8, 32, 0], "
                     "vector_reduction = [0, 0, 0, 4]")


def dequantized_band_products(tmp_path, name):
    """The configuration of every dispatch of the `name` compile whose root is a `?`-row product with a weight
    dequantized into f32 row bands of 32 (`matmul_like_<bands>xDx32xD_f32`)."""
    found = []
    for f in sorted((tmp_path / f"{name}.configs").glob("*.mlir")):
        text = f.read_text()
        if re.search(r"func\.func @\w*_matmul_like_\d+xDx32xD_f32\b", text):
            found.append(text)
    return found


def few_rows_tiles(fmt, rows, layout="block-rows"):
    """The spec's tiles for the few-rows form of `rows` rows over `fmt`'s codes: 4-bit codes gated in groups of 64
    columns (5 loops), Q8_0's gated along their columns (IREE's batch matmul, 4 loops), codes in row bands gated
    along their bands (5 loops, 8 bands of 32 columns a workgroup)."""
    if layout == "row-bands":
        return (f"distribution = [1, {rows}, 8, 32, 0], vector_common_parallel = [1, 8, 1, 32, 0], "
                "vector_reduction = [0, 0, 0, 0, 4]")
    if fmt == "Q8_0":
        return (f"distribution = [1, {rows}, 256, 0], vector_common_parallel = [1, 8, 32, 0], "
                "vector_reduction = [0, 0, 0, 4]")
    return {8: FEW_ROWS_TILES, 16: FEW_ROWS_16_TILES, 32: FEW_ROWS_32_TILES}[rows]


@pytest.mark.parametrize("fmt, layout", [("Q4_0", "block-rows"), ("Q4_1", "block-rows"), ("Q4_K", "block-rows"),
                                         ("Q8_0", "block-rows"), ("Q8_0", "row-bands"), ("Q4_0", "row-bands")])
def test_the_tuning_spec_tiles_a_prefills_few_rows_over_kept_codes_on_every_cpu(fmt, layout, tapeout, tmp_path):
    """A `?`-row linear of a weight kept packed takes, up to 8 rows, the per-block product of its rows padded to 8
    over codes gated by the row count (4-bit codes in groups of 64 columns, `[Kb, 32, ?, 64]`; Q8_0's along their
    columns, `[Kb, 32, ?]`), from 9 to 16 rows the same padded to 16, from 17 to 32 padded to 32; the spec gives
    each product all its rows at once in vector tiles small enough for a CPU with 16-byte vectors (it once made
    16 KiB ones only AVX-512 took). A 2112 x 2048 weight's 32-row form is computed in
    three column parts (its partials past 16 MiB), each tiled alike. Compiled for this CPU and a generic one with the
    spec, each form's tiles in exactly one dispatch per weight and part, every result against PyPI gguf's
    dequantized weights in float64 at 1, 5, 8 (the 8-row product), 9, 12, 16 (the 16-row one), 17, 32 (the 32-row
    one) and 33, 48 and 65 rows (the dequantized weight's, in bands of 32 each part a multiple of 32 rows, which the
    spec gives a workgroup per band and 16 rows: a partial tile of rows at 33 and 65). With Q8_0's and Q4_0's codes
    in row bands the forms read the stored bands, gated and parted along their band axis, and IREE computes nothing
    from the codes at load (no copy of them among the module's hoisted globals, which there once were: a view of
    every weight's codes, half the archive again in anonymous memory)."""
    rng = np.random.default_rng(11)
    shapes = [(64, 256), (320, 512 if fmt == "Q4_K" else 64), (2112, 2048)]
    parts = {r: sum(len(few_rows_parts(k // 32, r, n)) for n, k in shapes) for r in (8, 16, 32)}
    assert parts == {8: 3, 16: 3, 32: 5}, parts
    path, dense = q8_gguf(tmp_path, fmt, shapes, rng)
    linear_graph(tmp_path, {shape: "f32" for shape in shapes}, dense, rng, rows_set=("?",))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep", "--inline-below", "0",
        "--packed-codes", layout)
    spec = out / "bands.tuning.mlir"
    assert spec.is_file()
    if layout == "row-bands":
        code = "i8" if fmt == "Q8_0" else "i4"
        text = (out / "bands.mlir").read_text()
        assert all(f"> : tensor<{n // 32}x{k // 32}x32x32x{code}>" in text for n, k in shapes), "codes not in bands"
        flow = tmp_path / "flow.mlir"
        run(iree_tool("iree-compile"), out / "bands.mlir", "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu", "--compile-to=flow", "-o", flow)
        hoisted = [line for line in flow.read_text().splitlines() if "util.global private @__hoisted" in line
                   and re.search(r": tensor<[0-9x]+(i8|i4)>", line)]
        assert not hoisted, f"IREE computes {len(hoisted)} copies of the codes at load"
    for cpu in ("host", "generic"):
        vmfb, configs = compile_host(out, tmp_path, cpu, spec, cpu=cpu)
        for rows in (8, 16, 32):
            tiles = few_rows_tiles(fmt, rows, layout)
            assert configs.count(tiles) == parts[rows], (cpu, rows, configs.count(tiles))
        dequantized = dequantized_band_products(tmp_path, cpu)
        assert len(dequantized) >= len(shapes), (cpu, len(dequantized))
        assert all(DEQUANTIZED_TILES in t for t in dequantized), cpu
        for rows in (1, 5, 8, 9, 12, 16, 17, 32, 33, 48, 65):
            feeds = {f"x_{k}_d": rng.standard_normal((rows, k)).astype(np.float32) for k in {k for _, k in shapes}}
            want = {f"y{n}_{k}_d": feeds[f"x_{k}_d"].astype(np.float64) @ dense[f"w{n}_{k}"].T for n, k in shapes}
            wrong = check(tmp_path, out, vmfb, want, feeds, f"{cpu}{rows}")
            assert not wrong, (cpu, rows, wrong)
