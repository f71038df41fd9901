"""Packed weights kept packed (`--packed keep`): GGML blocks from a GGUF file become planes of codes and scales, the
program contracts them per block, and IREE's results equal `x @ dequantize(W)ᵀ` computed by PyPI gguf's
dequantizer, for every format and every kind of use: a linear layer (`[N, K]`, `x @ Wᵀ`), a gather (embedding
rows), the two at once (a tied embedding and head), and a plain `matmul` with a `[K, N]` weight (dequantized whole
in the program)."""
import json
import re

import numpy as np
import pytest
import iree.runtime as rt
from gguf import GGUFReader, GGUFWriter, GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf.quants import dequantize

from harness import DEVICES, RUN_DEVICES, compile_and_run_iree, compile_iree, run, run_iree, signature

FORMATS = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]
N, K, N2 = 64, 512, 256  # W [N, K]: linear, gather, tied head; Wm [K, N2]: plain matmul


def random_blocks(fmt, rows, cols, rng):
    """Random GGML blocks with finite, moderate scales (the d/dmin fields), as uint8 rows."""
    qt = T[fmt]
    elems, nbytes = GGML_QUANT_SIZES[qt]
    blocks = rng.integers(0, 256, (rows * cols // elems, nbytes), dtype=np.uint8)
    d = rng.uniform(0.002, 0.02, (blocks.shape[0],)).astype(np.float16).view(np.uint8).reshape(-1, 2)
    dmin = rng.uniform(0.0, 0.02, (blocks.shape[0],)).astype(np.float16).view(np.uint8).reshape(-1, 2)
    if fmt == "Q6_K":
        blocks[:, 208:210] = d
    elif fmt in ("Q4_1", "Q5_1", "Q4_K", "Q5_K"):
        blocks[:, 0:2], blocks[:, 2:4] = d, dmin
    else:
        blocks[:, 0:2] = d
    return blocks.reshape(rows, -1)


def one_tensor_gguf(path, name, fmt, rows, cols, rng):
    """A GGUF file at `path` holding one `[rows, cols]` tensor `name` of random `fmt` blocks; returns its values as
    PyPI gguf dequantizes them (float64)."""
    w = GGUFWriter(str(path), "llama")
    w.add_tensor(name, random_blocks(fmt, rows, cols, rng), raw_dtype=T[fmt])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    t = GGUFReader(str(path)).tensors[0]
    return dequantize(t.data, t.tensor_type).astype(np.float64).reshape(rows, cols)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    return every_format_gguf(tmp_path_factory.mktemp("packed") / "w.gguf")


def every_format_gguf(path):
    """A GGUF file at `path` with an `[N, K]` and a `[K, N2]` weight of every format (seeded random blocks), and its
    weights as PyPI gguf dequantizes them (also scripts/gpu-check's packed cases)."""
    rng = np.random.default_rng(21)
    w = GGUFWriter(str(path), "llama")
    for fmt in FORMATS:
        w.add_tensor(f"{fmt}.w", random_blocks(fmt, N, K, rng), raw_dtype=T[fmt])
        w.add_tensor(f"{fmt}.wm", random_blocks(fmt, K, N2, rng), raw_dtype=T[fmt])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    reader = GGUFReader(str(path))
    dense = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64).reshape(
        [int(d) for d in reversed(t.shape)]) for t in reader.tensors}
    return path, dense


def graph(fmt):
    t = lambda name, shape, **kw: {"name": name, "shape": shape, "dtype": "f32", **kw}  # noqa: E731
    return {"name": "packed", "tensors": [
        t("x", [3, K]), {"name": "ids", "shape": [4], "dtype": "i32"}, t("x2", [2, K]),
        t("w", [N, K], path=f"blk.{fmt}.w", data={"tensor": f"{fmt}.w"}),
        t("wm", [K, N2], path=f"blk.{fmt}.wm", data={"tensor": f"{fmt}.wm"}),
        t("wt", [K, N]), t("y", [3, N]), t("e", [4, K]), t("logits", [4, N]), t("y2", [2, N2])],
        "nodes": [{"op": "transpose", "inputs": ["w"], "outputs": ["wt"]},
                  {"op": "matmul", "inputs": ["x", "wt"], "outputs": ["y"]},        # linear [N, K]
                  {"op": "gather", "inputs": ["w", "ids"], "outputs": ["e"]},      # embedding rows
                  {"op": "matmul", "inputs": ["e", "wt"], "outputs": ["logits"]},  # tied head
                  {"op": "matmul", "inputs": ["x2", "wm"], "outputs": ["y2"]}],    # matmul [K, N]
        "outputs": ["y", "e", "logits", "y2"]}


@pytest.mark.parametrize("device", RUN_DEVICES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_packed_weights_kept_packed_compute_what_gguf_dequantizes(fmt, device, weights, tapeout, tmp_path):
    path, dense = weights
    device = DEVICES.get(device, device)
    (tmp_path / "g.json").write_text(json.dumps(graph(fmt)))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep",
        "--target", device.target)
    text = (out / "packed.mlir").read_text()
    idx = rt.ParameterIndex()
    idx.load(str(out / "packed.irpa"))
    entries = {k: e for k, e in idx.items()}
    assert f"blk.{fmt}.w.qs" in entries and f"blk.{fmt}.w" not in entries, sorted(entries)
    meta = json.loads(bytes(entries[f"blk.{fmt}.w.qs"].metadata).decode().removeprefix("TENSORv0:"))
    assert (meta["from"], meta["plane"], meta["packed_shape"]) == (fmt, "qs", [N, K]), meta
    # Codes as i4 (Q8_0: i8); 5- and 6-bit codes split into i4 low bits and an i2 plane of high bits. For Vulkan
    # the same bytes are typed as i32 words, the narrow dtype named by `words_of`.
    narrow = lambda m: m.get("words_of", m["dtype"])  # noqa: E731
    assert narrow(meta) == ("i8" if fmt == "Q8_0" else "i4"), meta
    words = device.target == "vulkan" or (device.target in ("cuda", "rocm") and fmt != "Q8_0")
    assert meta["dtype"] == ("i32" if words else narrow(meta)), meta
    high = fmt in ("Q5_0", "Q5_1", "Q5_K", "Q6_K")
    assert (f"blk.{fmt}.w.qh" in entries) == high, sorted(entries)
    if high:
        qh = json.loads(bytes(entries[f"blk.{fmt}.w.qh"].metadata).decode().removeprefix("TENSORv0:"))
        assert narrow(qh) == "i2" and entries[f"blk.{fmt}.w.qh"].length == N * K // 4, qh
    # The archive holds about the GGUF bytes, not f32 (the small scale planes are inline here).
    kept = sum(e.length for k, e in entries.items() if k.startswith(f"blk.{fmt}.w."))
    gguf_bytes = N * K // GGML_QUANT_SIZES[T[fmt]][0] * GGML_QUANT_SIZES[T[fmt]][1]
    assert kept <= 1.1 * gguf_bytes, (kept, gguf_bytes)

    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, K)).astype(np.float32)
    ids = np.array([0, 63, 17, 5], np.int32)
    x2 = rng.standard_normal((2, K)).astype(np.float32)
    feeds = {"x": x, "ids": ids, "x2": x2}
    order, _ = signature(out / "packed.mlir")
    assert sorted(order) == ["ids", "x", "x2"], order
    outs = compile_and_run_iree(tmp_path, out / "packed.mlir", [out / "packed.irpa"], [feeds[n] for n in order],
                                outputs=4, device=device)
    w, wm = dense[f"{fmt}.w"], dense[f"{fmt}.wm"]
    want = {"y": x @ w.T, "e": w[ids], "logits": w[ids] @ w.T, "y2": x2 @ wm}
    for got, name in zip(outs, ["y", "e", "logits", "y2"]):
        got = got.astype(np.float64)
        scale = np.abs(want[name]).max()
        np.testing.assert_allclose(got, want[name], rtol=1e-5, atol=1e-5 * scale, err_msg=f"{fmt} {name}")


def test_small_i4_codes_stay_external_and_inline_all_is_refused(tapeout, tmp_path):
    """4-bit codes cannot be inline hex: a 64-byte Q4_0 plane is external under the default 4096-byte threshold,
    and --inline-all is an error naming the weight, not a module IREE would misread."""
    rng = np.random.default_rng(4)
    path = tmp_path / "w.gguf"
    dense = one_tensor_gguf(path, "small", "Q4_0", 4, 32, rng)
    g = {"name": "small", "tensors": [
        {"name": "x", "shape": [1, 32], "dtype": "f32"},
        {"name": "w", "shape": [4, 32], "dtype": "f32", "path": "w", "data": {"tensor": "small"}},
        {"name": "wt", "shape": [32, 4], "dtype": "f32"}, {"name": "y", "shape": [1, 4], "dtype": "f32"}],
        "nodes": [{"op": "transpose", "inputs": ["w"], "outputs": ["wt"]},
                  {"op": "matmul", "inputs": ["x", "wt"], "outputs": ["y"]}], "outputs": ["y"]}
    (tmp_path / "g.json").write_text(json.dumps(g))
    run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", tmp_path / "out", "--packed", "keep")
    text = (tmp_path / "out/small.mlir").read_text()
    # 4 rows are padded to 64 in every plane (docs/graph-format.md); the program slices the 4 off.
    assert '#flow.parameter.named<"model"::"w.qs"> : tensor<1x32x64xi4>' in text, text
    x = rng.standard_normal((1, 32)).astype(np.float32)
    [y] = compile_and_run_iree(tmp_path, tmp_path / "out/small.mlir", [tmp_path / "out/small.irpa"], [x])
    np.testing.assert_allclose(y, x @ dense.T, rtol=1e-5, atol=1e-6)
    r = run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", tmp_path / "inl", "--packed", "keep",
            "--inline-all", check=False)
    assert r.returncode == 1 and "'w.qs'" in r.stderr and "external" in r.stderr, r.stderr


def test_safetensors_u8_blocks_with_an_encoding_are_kept_packed_too(tapeout, tmp_path):
    """A safetensors U8 tensor holding Q4_0 blocks, named with `"encoding"` in the graph: the same planes, the
    same numbers as gguf's dequantizer."""
    rng = np.random.default_rng(9)
    blocks = random_blocks("Q4_0", 8, 64, rng)
    blob = blocks.tobytes()
    h = json.dumps({"q": {"dtype": "U8", "shape": [len(blob)], "data_offsets": [0, len(blob)]}}).encode()
    h += b" " * ((-len(h)) % 8)
    (tmp_path / "w.safetensors").write_bytes(np.uint64(len(h)).tobytes() + h + blob)
    g = {"name": "st", "tensors": [
        {"name": "x", "shape": [2, 64], "dtype": "f32"},
        {"name": "w", "shape": [8, 64], "dtype": "f32", "path": "w", "data": {"tensor": "q", "encoding": "Q4_0"}},
        {"name": "wt", "shape": [64, 8], "dtype": "f32"}, {"name": "y", "shape": [2, 8], "dtype": "f32"}],
        "nodes": [{"op": "transpose", "inputs": ["w"], "outputs": ["wt"]},
                  {"op": "matmul", "inputs": ["x", "wt"], "outputs": ["y"]}], "outputs": ["y"]}
    (tmp_path / "g.json").write_text(json.dumps(g))
    run(tapeout, "export", tmp_path / "g.json", "--weights", tmp_path / "w.safetensors", "-o", tmp_path / "out",
        "--packed", "keep")
    assert '"model"::"w.qs"> : tensor<2x32x64xi4>' in (tmp_path / "out/st.mlir").read_text()
    x = rng.standard_normal((2, 64)).astype(np.float32)
    [y] = compile_and_run_iree(tmp_path, tmp_path / "out/st.mlir", [tmp_path / "out/st.irpa"], [x])
    w = dequantize(blocks.reshape(-1), T.Q4_0).astype(np.float64).reshape(8, 64)
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_gather_with_dynamic_ids_reads_only_its_rows(fmt, weights, tapeout, tmp_path):
    """A prefill's embedding: token ids `[1, ?]` gathered from a kept table. The rows are gathered from the planes
    (never the whole table dequantized, which is `K x N` f32 per call), and equal PyPI gguf's dequantized rows at
    lengths 1 and 5, one compiled module."""
    path, dense = weights
    g = {"name": "packed", "tensors": [
        {"name": "ids", "shape": [1, "?"], "dtype": "i32"},
        {"name": "w", "shape": [N, K], "dtype": "f32", "path": f"blk.{fmt}.w", "data": {"tensor": f"{fmt}.w"}},
        {"name": "e", "shape": [1, "?", K], "dtype": "f32"}],
        "nodes": [{"op": "gather", "inputs": ["w", "ids"], "outputs": ["e"]}], "outputs": ["e"]}
    (tmp_path / "g.json").write_text(json.dumps(g))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep")
    text = (out / "packed.mlir").read_text()
    # The whole table as f32, either way round, is what the dequantizing fallback builds.
    assert f"tensor<{K}x{N}xf32>" not in text and f"tensor<{N}x{K}xf32>" not in text, "the whole table is dequantized"
    vmfb = compile_iree(tmp_path, out / "packed.mlir")
    w = dense[f"{fmt}.w"]
    for ids in (np.array([[17]], np.int32), np.array([[0, 63, 17, 5, 63]], np.int32)):
        (e,) = run_iree(tmp_path, vmfb, [out / "packed.irpa"], [ids], tag=str(ids.shape[1]))
        np.testing.assert_allclose(e.astype(np.float64), w[ids], rtol=1e-5, atol=1e-5 * np.abs(w).max(),
                                   err_msg=f"{fmt}, {ids.shape[1]} ids")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_gather_with_dynamic_ids_from_an_odd_row_table(fmt, tapeout, tmp_path):
    """The same gather from a table of 5 rows (an odd vocabulary): its planes hold padding rows the program must
    never return. Rows 0 and 4 (the last real one) at lengths 1 and 3 equal PyPI gguf's, from one compiled module."""
    rows, cols = 5, 256  # 256: a whole K-quant super-block per row
    rng = np.random.default_rng(31)
    path = tmp_path / "w.gguf"
    dense = one_tensor_gguf(path, "t", fmt, rows, cols, rng)
    g = {"name": "odd", "tensors": [
        {"name": "ids", "shape": [1, "?"], "dtype": "i32"},
        {"name": "w", "shape": [rows, cols], "dtype": "f32", "path": "w", "data": {"tensor": "t"}},
        {"name": "e", "shape": [1, "?", cols], "dtype": "f32"}],
        "nodes": [{"op": "gather", "inputs": ["w", "ids"], "outputs": ["e"]}], "outputs": ["e"]}
    (tmp_path / "g.json").write_text(json.dumps(g))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep", "--inline-below", "0")
    text = (out / "odd.mlir").read_text()
    assert '"model"::"w.qs">' in text, "the table is not kept packed"
    # No static f32 value as large as the table (the padded planes dequantized whole, either way round).
    whole = [m for m in re.findall(r"tensor<((?:\d+x)+)f32>", text)
             if np.prod([int(d) for d in m.rstrip("x").split("x")]) >= rows * cols]
    assert not whole, f"the whole table is dequantized: {whole}"
    vmfb = compile_iree(tmp_path, out / "odd.mlir")
    for ids in (np.array([[4]], np.int32), np.array([[4, 0, 4]], np.int32)):
        (e,) = run_iree(tmp_path, vmfb, [out / "odd.irpa"], [ids], tag=str(ids.shape[1]))
        assert e.shape == (1, ids.shape[1], cols), e.shape
        np.testing.assert_allclose(e.astype(np.float64), dense[ids], rtol=1e-5, atol=1e-5 * np.abs(dense).max(),
                                   err_msg=f"{fmt}, {ids.shape[1]} ids")


# A banded product (`matmul` with `banded = true`), and codes transposed into row bands of 32 before dequantizing.
BANDED_PRODUCT = (r"linalg\.generic \{indexing_maps = \[affine_map<\(b, m, t, k\) -> \(m, k\)>, "
                  r"affine_map<\(b, m, t, k\) -> \(b, k, t\)>")
BANDS_OF_CODES = r"stablehlo\.transpose %v\d+, dims = \[2, 0, 1, 3\] : \(tensor<[?\d]+x\d+x\d+x32xi\d+>\)"


def export_linear(tapeout, d, gguf, lead, rows, cols):
    """Exports `y = x @ Wᵀ` for `x` of dims `lead` then `cols`, `W` the GGUF's tensor `t` (`rows` x `cols`) kept
    packed, into `d / "out"`; returns that directory and the module text."""
    g = {"name": "lin", "tensors": [
        {"name": "x", "shape": [*lead, cols], "dtype": "f32"},
        {"name": "w", "shape": [rows, cols], "dtype": "f32", "path": "w", "data": {"tensor": "t"}},
        {"name": "wt", "shape": [cols, rows], "dtype": "f32"},
        {"name": "y", "shape": [*lead, rows], "dtype": "f32"}],
        "nodes": [{"op": "transpose", "inputs": ["w"], "outputs": ["wt"]},
                  {"op": "matmul", "inputs": ["x", "wt"], "outputs": ["y"]}], "outputs": ["y"]}
    (d / "g.json").write_text(json.dumps(g))
    out = d / "out"
    run(tapeout, "export", d / "g.json", "--weights", gguf, "-o", out, "--packed", "keep", "--inline-below", "0")
    return out, (out / "lin.mlir").read_text()


@pytest.mark.parametrize("fmt, parts", [("Q8_0", 1), ("Q4_0", 2)])
def test_a_weight_dequantized_in_parts_is_cut_at_bands(fmt, parts, tapeout, tmp_path):
    """A 5500 x 768 weight is dequantized for `?` rows in two 16 MiB parts. Q8_0 planes hold rows at any count, yet
    the parts are cut at a multiple of 32 rows (5440, then 60) so that the first is in row bands (the 60-row rest is
    not); Q4_0's 5504 padded rows part at 5440 and 64, both in bands. `x` is `[?, K]`. Values against PyPI gguf at
    33 and 40 rows (the few-rows forms are gated shut there)."""
    rows, cols = 5500, 768
    rng = np.random.default_rng(41)
    path = tmp_path / "w.gguf"
    dense = one_tensor_gguf(path, "t", fmt, rows, cols, rng)
    out, text = export_linear(tapeout, tmp_path, path, ["?"], rows, cols)
    assert len(re.findall(r"stablehlo\.optimization_barrier %v\d+, ", text)) >= 2, "not dequantized in two parts"
    assert len(re.findall(BANDED_PRODUCT, text)) == parts, text
    assert len(re.findall(BANDS_OF_CODES, text)) == parts, text
    vmfb = compile_iree(tmp_path, out / "lin.mlir")
    for n in (33, 40):
        x = rng.standard_normal((n, cols)).astype(np.float32)
        (y,) = run_iree(tmp_path, vmfb, [out / "lin.irpa"], [x], tag=str(n))
        want = x.astype(np.float64) @ dense.T
        np.testing.assert_allclose(y.astype(np.float64), want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                                   err_msg=f"{fmt}, {n} rows")


def few_rows_parts(kb, rows, np_rows, unit=64):
    """The column parts (`(first, len)` of the planes' rows) of the few-rows form of `rows` rows: one product when
    its per-block partials (`4·Kb·rows·Np` bytes) take at most 16 MiB, otherwise parts of at most 8 MiB of them,
    each `len` a multiple of `unit`."""
    if 4 * kb * rows * np_rows <= 16 << 20:
        return [(0, np_rows)]
    per = (8 << 20) // (4 * kb * rows) // unit * unit
    return [(first, min(per, np_rows - first)) for first in range(0, np_rows, per)]


def test_a_weight_too_wide_for_one_part_takes_its_few_rows_forms_in_column_parts(tapeout, tmp_path):
    """A 4608 x 2048 Q4_0 weight's per-block partials take 9.4 MB at 8 rows, 18.9 MB at 16 and 37.7 MB at 32: the
    8-row form is one product (within 16 MiB), the 16-row one three over the weight's rows 0-2047, 2048-4095 and
    4096-4607, the 32-row one five (1024 rows each, 512 the last), each part's partials at most 8 MiB, its results
    placed at its columns (once, no form was written past 16 MiB: at 7B widths every prefill dequantized its
    weights). Each part reads the codes in their groups of 64 and slices its groups from those (a slice of the codes
    along their rows before the groups made IREE 3.13 copy them every call, gated shut or not); no slice of the
    codes themselves. Values against PyPI gguf at 1, 8 (the 8-row form), 9, 16 (the 16-row one, parted), 17, 32
    (the 32-row one, parted) and 33 rows (the dequantized weight)."""
    rows, cols = 4608, 2048
    rng = np.random.default_rng(43)
    path = tmp_path / "w.gguf"
    dense = one_tensor_gguf(path, "t", "Q4_0", rows, cols, rng)
    out, text = export_linear(tapeout, tmp_path, path, ["?"], rows, cols)
    limits = re.findall(r"(%v\d+) = arith\.constant (\d+) : index\s+%v\d+ = arith\.cmpi (ule|ugt), %v\d+, \1\b", text)
    assert {(int(limit), pred) for _, limit, pred in limits} == {(r, p) for r in (8, 16, 32) for p in ("ule", "ugt")}
    kb = cols // 32
    parts = {r: few_rows_parts(kb, r, rows) for r in (8, 16, 32)}
    assert [len(p) for p in parts.values()] == [1, 3, 5], parts
    # Each part's codes: the grouped codes `[64, 32, 72, 64]`, its groups sliced (the one-part form reads them
    # whole).
    codes = re.search(r"(%v\d+) = util\.global\.load @w\.qs ", text).group(1)
    groups = re.findall(rf"(%v\d+) = stablehlo\.reshape {codes} : \(tensor<{kb}x32x{rows}xi4>\) -> tensor<{kb}x32x"
                        rf"{rows // 64}x64xi4>", text)
    assert len(groups) == 9, groups  # one per part
    sliced = sorted(re.findall(rf"stablehlo\.slice (?:{'|'.join(groups)}) \[0:{kb}, 0:32, (\d+):(\d+), 0:64\]", text),
                    key=lambda s: (int(s[0]), int(s[1])))
    want = sorted((first // 64, (first + n) // 64) for r in (16, 32) for first, n in parts[r])
    assert [(int(a), int(b)) for a, b in sliced] == want, sliced
    assert not re.search(rf"stablehlo\.slice {codes} ", text), "the codes sliced along their rows before the groups"
    # The parts' results placed side by side in a `[rows, ?]` form.
    for r in (16, 32):
        placed = re.findall(rf"tensor\.insert_slice %v\d+ into %v\d+\[0, [^\]]+\] \[{r}, %v\d+\] \[1, 1\] : "
                            rf"tensor<{r}x\?xf32> into tensor<{r}x\?xf32>", text)
        assert len(placed) == len(parts[r]), (r, placed)
    vmfb = compile_iree(tmp_path, out / "lin.mlir")
    for n in (1, 8, 9, 16, 17, 32, 33):
        x = rng.standard_normal((n, cols)).astype(np.float32)
        (y,) = run_iree(tmp_path, vmfb, [out / "lin.irpa"], [x], tag=str(n))
        want = x.astype(np.float64) @ dense.T
        np.testing.assert_allclose(y.astype(np.float64), want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                                   err_msg=f"{n} rows")


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
def test_a_linear_of_rows_with_a_dim_after_the_dynamic_one(fmt, tapeout, tmp_path):
    """`x [?, 2, K]`: the few-rows forms would place their `[8, N]` .. `[32, N]` rows into `y` viewed as `[?, N]`,
    which needs the `?` split by 2 (refused by the emitter): the dequantized form alone, exported and right at 1, 3
    and 5 pairs of rows, its weight not in row bands either. `x [2, ?, K]` (nothing between the `?` and `K`) keeps
    every form, the dequantized weight in row bands, right at 1, 4 (the 8-row form), 5 (10 rows: the 16-row form),
    9 (18 rows: the 32-row form) and 17 rows per batch (34 rows: the dequantized form)."""
    cols, rows = 64, 128
    rng = np.random.default_rng(41)
    path = tmp_path / "w.gguf"
    dense = one_tensor_gguf(path, "t", fmt, rows, cols, rng)
    for shape, sizes, few in ((["?", 2], [(1, 2), (3, 2), (5, 2)], False), ([2, "?"], [(2, 1), (2, 4), (2, 5), (2, 9), (2, 17)], True)):
        d = tmp_path / str(few)
        d.mkdir()
        out, text = export_linear(tapeout, d, path, shape, rows, cols)
        assert ("arith.cmpi ule" in text) == few, (shape, text)
        # The dequantized weight's product in row bands reads the rows as one `?` and back: `[2, ?]` only.
        assert bool(re.search(BANDED_PRODUCT, text)) == few, (shape, text)
        vmfb = compile_iree(d, out / "lin.mlir")
        for size in sizes:
            x = rng.standard_normal((*size, cols)).astype(np.float32)
            (y,) = run_iree(d, vmfb, [out / "lin.irpa"], [x], tag="x".join(map(str, size)))
            want = x.astype(np.float64) @ dense.T
            np.testing.assert_allclose(y.astype(np.float64), want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                                       err_msg=f"{fmt}, x {size}")


@pytest.mark.parametrize("rows", [5, 16389])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_linear_with_dynamic_rows_dequantizes_after_its_input(fmt, rows, tapeout, tmp_path):
    """A prefill's linear: `x [1, ?, K] @ Wᵀ` with a kept weight of 5 rows (its sub-byte planes padded to 64 rows),
    and of 16389 rows (an LM head past the 16 MiB of f32 dequantized at a time: two parts, the second part's rows
    from 16384 on, padded). The weight is dequantized for that product just before it; a weight in parts reads
    each part's planes after the previous part's product (the first after `x`: an `optimization_barrier`, without
    which IREE computes every part at once), a weight in one part has no barrier (each costs IREE a submission;
    docs/performance.md#weights-in-iree); up to 8 rows the per-block product of the rows
    padded to 8 is taken instead, from 9 to 16 the one padded to 16, from 17 to 32 the one padded to 32
    (`gate_rows` leaves the other forms without work). The result equals `x @ dequantize(W)ᵀ` by PyPI gguf at 1, 6,
    8 (the 8-row form), 9, 13, 16 (the 16-row one), 17, 30, 32 (the 32-row one), 33 and 40 rows (the dequantized
    one), from one compiled module."""
    cols = 256
    rng = np.random.default_rng(37)
    path = tmp_path / "w.gguf"
    dense = one_tensor_gguf(path, "t", fmt, rows, cols, rng)
    g = {"name": "lin", "tensors": [
        {"name": "x", "shape": [1, "?", cols], "dtype": "f32"},
        {"name": "h", "shape": [1, "?", cols], "dtype": "f32"},
        {"name": "w", "shape": [rows, cols], "dtype": "f32", "path": "w", "data": {"tensor": "t"}},
        {"name": "wt", "shape": [cols, rows], "dtype": "f32"},
        {"name": "y", "shape": [1, "?", rows], "dtype": "f32"}],
        "nodes": [{"op": "silu", "inputs": ["x"], "outputs": ["h"]},
                  {"op": "transpose", "inputs": ["w"], "outputs": ["wt"]},
                  {"op": "matmul", "inputs": ["h", "wt"], "outputs": ["y"]}], "outputs": ["y"]}
    (tmp_path / "g.json").write_text(json.dumps(g))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep", "--inline-below", "0")
    text = (out / "lin.mlir").read_text()
    qs = re.search(r"(%v\d+) = util\.global\.load @w\.qs", text).group(1)
    if rows > 16384:
        # The first part's codes enter the program through a barrier with the product's input (silu(x)).
        barrier = re.search(rf"(%v\d+):2 = stablehlo\.optimization_barrier {qs}, (%v\d+) ", text)
        assert barrier, f"the codes are not ordered after the product's input:\n{text}"
        assert re.search(rf"{barrier.group(2)} = stablehlo\.multiply %arg0, ", text), f"not after silu(x):\n{text}"
        assert re.search(rf"(stablehlo\.(convert|slice|reshape)|tensor\.extract_slice) {barrier.group(1)}#0[ \[]",
                         text), f"the codes bypass the barrier:\n{text}"
    # Every form with its planes gated by the row count (the padded per-block ones read the codes directly: they
    # run only for 16 rows or fewer, when the dequantization has no work): whole-byte codes (Q8_0) gated along
    # their rows, sub-byte codes in groups of 64 rows (`[Kb, B, Np / 64, 64]`: IREE cannot gate their packed axis
    # to any other extent; their planes are padded to a multiple of 64 rows). Otherwise the dequantized form
    # alone.
    plane = re.search(r"@w\.qs = .* : tensor<(\d+)x(\d+)x(\d+)x(i\d+)>", text)
    np_rows, code_type = int(plane.group(3)), plane.group(4)
    direct = re.search(rf"tensor\.extract_slice {qs}\[0, 0, 0\] \[\d+, \d+, %v\d+\]", text)
    # (A form in column parts gates a slice of the groups: the one-part forms gate the groups themselves.)
    groups = re.findall(rf"(%v\d+) = stablehlo\.reshape {qs} : \(tensor<[^>]*>\) -> tensor<\d+x\d+x\d+x64x", text)
    grouped = any(re.search(rf"tensor\.extract_slice {g}\[0, 0, 0, 0\] \[\d+, \d+, %v\d+, 64\]", text)
                  for g in groups)
    gated = text.count("arith.cmpi ule") >= 2 and "arith.cmpi ugt" in text
    # Four forms: `x` padded to 8 rows (open up to 8), to 16 (at most 16, more than 8), to 32 (at most 32, more than
    # 16) and the dequantized weight (more than 32): every row-count comparison, paired with its limit (written just
    # before it).
    limits = set(re.findall(r"(%v\d+) = arith\.constant (\d+) : index\s+%v\d+ = arith\.cmpi (ule|ugt), %v\d+, \1\b",
                            text))
    pairs = {(int(limit), pred) for _, limit, pred in limits}
    # Every form is written, in column parts past 16 MiB of partials (`4·Kb·rows·Np` bytes): 16389 rows take the
    # 32-row form in three (8192, 8192 rows and the rest), its parts' results placed side by side.
    tiers = [8, 16, 32]
    for r in tiers:
        parts = few_rows_parts(cols // 32, r, np_rows, unit=64 if code_type == "i4" else 1)
        assert len(parts) == (3 if rows > 16384 and r == 32 else 1), (r, parts)
        placed = re.findall(rf"tensor\.insert_slice %v\d+ into %v\d+\[0, [^\]]+\] \[{r}, %v\d+\] \[1, 1\] : "
                            rf"tensor<{r}x\?xf32> into tensor<{r}x\?xf32>", text)
        assert len(placed) == (len(parts) if gated and len(parts) > 1 else 0), (fmt, r, placed)
    assert pairs == ({(r, p) for r in tiers for p in ("ule", "ugt")} if gated else set()), (fmt, pairs)
    assert all(f"tensor<{r}x256xf32>" in text for r in tiers) == gated, text
    assert all(f"tensor<{r}x256xf32>" not in text for r in (8, 16, 32) if r not in tiers), text
    whole_bytes = code_type == "i8"
    assert bool(direct) == (gated and whole_bytes), text
    assert bool(grouped) == (gated and not whole_bytes), text
    # The 5- and 6-bit formats' high bits (i2 / i1 planes) cannot be gated so: the dequantized form alone.
    high_bits = "@w.qh = " in text
    assert gated == (not high_bits and (whole_bytes or np_rows % 64 == 0)), (fmt, rows, np_rows, text)
    barriers = re.findall(rf"(%v\d+):2 = stablehlo\.optimization_barrier {qs}, (%v\d+) ", text)
    if rows > 16384:
        # Two parts: the second waits for the first part's product (a dot_general), and the two are concatenated.
        assert len(barriers) == 2, barriers
        waits = re.search(rf"{barriers[1][1]} = (\S+) (%v\d+)", text)
        # The product of a [1, ?, K] x is viewed back as rank 3 (and a banded one's [M, N / 32, 32] as [M, N]).
        while waits.group(1) in ("tensor.expand_shape", "tensor.collapse_shape"):
            waits = re.search(rf"{waits.group(2)} = (\S+) (%v\d+)?", text)
        assert waits.group(1) in ("stablehlo.dot_general", "linalg.generic"), text
        assert "stablehlo.concatenate" in text
    else:
        assert "optimization_barrier" not in text, text
    # A part of plane rows in multiples of 32 is dequantized in row bands of 32 (the planes transposed to
    # [N / 32, Kb, B, 32] before the arithmetic) and contracted over them: IREE's f32 product over a [K, N] weight
    # whose rows are 4 KiB apart runs at half the speed (docs/performance.md#weights-in-iree).
    banded = re.search(BANDED_PRODUCT, text)
    bands_in = re.search(BANDS_OF_CODES, text)
    # (16389 rows: the first part's 16384 rows are banded, whatever the second's.)
    assert bool(banded) == bool(bands_in) == (np_rows % 32 == 0 or rows > 16384), (fmt, rows, np_rows, text)
    vmfb = compile_iree(tmp_path, out / "lin.mlir")
    for n in (1, 6, 8, 9, 13, 16, 17, 30, 32, 33, 40):
        x = rng.standard_normal((1, n, cols)).astype(np.float32)
        (y,) = run_iree(tmp_path, vmfb, [out / "lin.irpa"], [x], tag=str(n))
        h = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64)))
        want = h @ dense.T
        np.testing.assert_allclose(y.astype(np.float64), want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                                   err_msg=f"{fmt}, {n} rows")
