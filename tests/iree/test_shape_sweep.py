"""The shape sweep of the IREE gate: every packed format kept packed, and weights kept as stored (f32, bf16, f16,
as held and transposed at export), at every row count of a sweep that holds odd, even, prime and power-of-two sizes,
in every kind of use (a linear layer `x @ Wᵀ`, a gather of rows, a tied embedding and head, a plain `x' @ W`) at a
static batch of 1, a static batch of 3 and a dynamic batch; each result compared with an independent oracle
(PyPI gguf's dequantizer, numpy in float64) within 1e-5 of the output's scale.

IREE 3.13 silently misreads an `i4`/`i2` tensor whose innermost rows do not fill whole bytes (docs/graph-format.md);
this sweep is what keeps a shape-dependent error of that kind from hiding again. One module per format (all sizes,
uses and batches as the results of one function) keeps the compile count small."""
import json
import re

import iree.runtime as rt
import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter, GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf.quants import dequantize

from harness import iree_tool, run, signature
from test_packed import FORMATS, random_blocks

ROWS = [1, 2, 3, 4, 5, 7, 8, 9, 15, 17, 33, 65, 127]
BATCHES = {"b1": 1, "b3": 3, "dyn": "?"}
DYN = 2  # the run-time size of the dynamic batch
USES = ["linear", "gather", "tied", "matmul"]
# The uses the planes serve as they are (static linear layers and gathers), and all of them (a dynamic batch or a
# plain matmul dequantizes the weight whole in the program).
KEPT = ({"b1": 1, "b3": 3}, ["linear", "gather", "tied"])
EVERY = (BATCHES, USES)


def cols_of(fmt):
    """Row length: two 32-value blocks (one K-quant super-block), so every plane has more than one block row."""
    return GGML_QUANT_SIZES[T[fmt]][0] * (1 if GGML_QUANT_SIZES[T[fmt]][0] == 256 else 2)


def sweep_graph(name, k, weight, rows=ROWS, batches=BATCHES, uses=USES):
    """Every use of W_n [n, k] for each n, at each batch: inputs `x_<b>` [B, k], `ids<n>_<b>` [B], `m<n>_<b>` [B, n];
    results `<use>_<n>_<b>`. `weight(n)` gives W_n's tensor entry (its name, shape and dtype are set here)."""
    f32 = lambda nm, shape: {"name": nm, "shape": shape, "dtype": "f32"}  # noqa: E731
    tensors, nodes, outputs = [], [], []
    for b, size in batches.items():
        tensors.append(f32(f"x_{b}", [size, k]))
    for n in rows:
        w, wt = f"w{n}", f"w{n}t"
        tensors += [{**weight(n), "name": w, "shape": [n, k]}, f32(wt, [k, n])]
        nodes.append({"op": "transpose", "inputs": [w], "outputs": [wt]})
        for b, size in batches.items():
            tensors.append(f32(f"linear_{n}_{b}", [size, n]))
            nodes.append({"op": "matmul", "inputs": [f"x_{b}", wt], "outputs": [f"linear_{n}_{b}"]})
            if "gather" in uses or "tied" in uses:
                tensors += [{"name": f"ids{n}_{b}", "shape": [size], "dtype": "i32"},
                            f32(f"gather_{n}_{b}", [size, k]), f32(f"tied_{n}_{b}", [size, n])]
                nodes += [{"op": "gather", "inputs": [w, f"ids{n}_{b}"], "outputs": [f"gather_{n}_{b}"]},
                          {"op": "matmul", "inputs": [f"gather_{n}_{b}", wt], "outputs": [f"tied_{n}_{b}"]}]
            if "matmul" in uses:
                tensors += [f32(f"m{n}_{b}", [size, n]), f32(f"matmul_{n}_{b}", [size, k])]
                nodes.append({"op": "matmul", "inputs": [f"m{n}_{b}", w], "outputs": [f"matmul_{n}_{b}"]})
            # A gather whose rows only feed the tied head is still a result: every use is checked.
            outputs += [f"{u}_{n}_{b}" for u in uses]
    return {"name": name, "tensors": tensors, "nodes": nodes, "outputs": outputs}


def feeds_and_oracle(k, dense, rng, rows=ROWS, batches=BATCHES, uses=USES):
    """Inputs by name, and the float64 results numpy computes from the dense weights `dense[n]`."""
    feeds, want = {}, {}
    for b, size in batches.items():
        p = DYN if size == "?" else size
        feeds[f"x_{b}"] = rng.standard_normal((p, k)).astype(np.float32)
        for n in rows:
            feeds[f"m{n}_{b}"] = rng.standard_normal((p, n)).astype(np.float32)
            # The last row first (the edge of a padded plane), then the first, then one in the middle.
            feeds[f"ids{n}_{b}"] = np.array([[n - 1, 0, n // 2][i % 3] for i in range(p)], np.int32)
    for b in batches:
        for n in rows:
            w = dense[n]
            ids = feeds[f"ids{n}_{b}"]
            x, m = feeds[f"x_{b}"].astype(np.float64), feeds[f"m{n}_{b}"].astype(np.float64)
            want[f"linear_{n}_{b}"] = x @ w.T
            want[f"gather_{n}_{b}"] = w[ids]
            want[f"tied_{n}_{b}"] = w[ids] @ w.T
            want[f"matmul_{n}_{b}"] = m @ w
    want = {r: v for r, v in want.items() if r.split("_")[0] in uses}
    gathers = "gather" in uses or "tied" in uses
    feeds = {a: v for a, v in feeds.items()
             if (not a.startswith("m") or "matmul" in uses) and (not a.startswith("ids") or gathers)}
    return feeds, want


def sweep_gguf(path, fmt, rows, k, rng):
    """A GGUF file at `path` of random `fmt` weights `w<n>` [n, k], one per row count `n` of `rows`; returns their
    values as PyPI gguf dequantizes them (float64), by `n`."""
    w = GGUFWriter(str(path), "llama")
    for n in rows:
        w.add_tensor(f"w{n}", random_blocks(fmt, n, k, rng), raw_dtype=T[fmt])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {int(t.name[1:]): dequantize(t.data, t.tensor_type).astype(np.float64).reshape(
        [int(d) for d in reversed(t.shape)]) for t in GGUFReader(str(path)).tensors}


def run_sweep(tmp_path, out, name, feeds, want, cpu="generic"):
    """Compiles `out/<name>.mlir`, runs `main` in IREE's Python runtime with the archive, and checks every result."""
    args, results = signature(out / f"{name}.mlir")
    assert sorted(results) == sorted(want), (len(results), len(want))
    vmfb = tmp_path / f"{name}.vmfb"
    run(iree_tool("iree-compile"), out / f"{name}.mlir", "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu", f"--iree-llvmcpu-target-cpu={cpu}", "-o", vmfb)
    inst = rt.VmInstance()
    dev = rt.get_device("local-task")
    idx = rt.ParameterIndex()
    idx.load(str(out / f"{name}.irpa"))
    mods = [rt.create_io_parameters_module(inst, idx.create_provider(scope="model")),
            rt.create_hal_module(inst, dev), rt.VmModule.mmap(inst, str(vmfb))]
    ctx = rt.VmContext(inst, modules=mods)
    main = rt.FunctionInvoker(ctx, dev, mods[-1].lookup_function("main"))
    outs = main(*[feeds[a] for a in args])
    wrong = []
    for r, o in zip(results, outs):
        got = np.asarray(o.to_host()).astype(np.float64)
        w = want[r]
        scale = max(np.abs(w).max(), 1e-30)
        if got.shape != w.shape or not np.allclose(got, w, rtol=1e-5, atol=1e-5 * scale):
            err = np.abs(got - w).max() / scale if got.shape == w.shape else f"shape {got.shape} != {w.shape}"
            wrong.append(f"{r}: {err}")
    return len(results), wrong


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("uses,cpu", [("kept", "generic"), ("every", "generic"), ("every", "host")])
def test_packed_weights_kept_packed_are_exact_at_every_row_count(fmt, uses, cpu, tapeout, tmp_path):
    batches, names = KEPT if uses == "kept" else EVERY
    rng = np.random.default_rng(ROWS[-1] + FORMATS.index(fmt))
    k = cols_of(fmt)
    path = tmp_path / "w.gguf"
    dense = sweep_gguf(path, fmt, ROWS, k, rng)
    g = sweep_graph("sweep", k, lambda n: {"dtype": "f32", "data": {"tensor": f"w{n}"}}, batches=batches, uses=names)
    (tmp_path / "g.json").write_text(json.dumps(g))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep", "--inline-below", "1")
    # Kept packed: the planes are parameters, no f32 copy of any weight is; sub-byte codes stay sub-byte, their rows
    # padded to a multiple of 64.
    idx = rt.ParameterIndex()
    idx.load(str(out / "sweep.irpa"))
    entries = {key: json.loads(bytes(e.metadata).decode().removeprefix("TENSORv0:")) for key, e in idx.items()}
    assert "w5" not in entries and entries["w5.qs"]["packed_shape"] == [5, k], sorted(entries)
    sub_byte = fmt != "Q8_0"
    for n in ROWS:
        meta = entries[f"w{n}.qs"]
        assert meta["dtype"] == ("i4" if sub_byte else "i8"), meta
        padded = -(-n // 64) * 64 if sub_byte else n
        assert meta["shape"][-1] == padded and meta.get("padded_rows", n) == padded, meta
    if uses == "kept":
        # Served by the planes as they are: no weight is dequantized whole in the module ([K, Np] f32 nowhere; rows
        # 1 and 3 are skipped, where [K, n] is also the shape of a gathered activation).
        text = (out / "sweep.mlir").read_text()
        for n in ROWS:
            padded = -(-n // 64) * 64 if sub_byte else n
            assert n in (1, 3) or f"tensor<{k}x{padded}xf32>" not in text, f"W{n} is dequantized whole"
    feeds, want = feeds_and_oracle(k, dense, rng, batches=batches, uses=names)
    count, wrong = run_sweep(tmp_path, out, "sweep", feeds, want, cpu=cpu)
    assert count == len(ROWS) * len(batches) * len(names)
    assert not wrong, f"{fmt}: {len(wrong)} of {count} results wrong: {wrong}"


BAND_ROWS = ROWS + [32, 64, 96, 160]


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0"])
@pytest.mark.parametrize("cpu", ["generic", "host"])
def test_codes_in_row_bands_are_exact_at_every_row_count(fmt, cpu, tapeout, tmp_path):
    """With `--packed-codes row-bands`, Q8_0 and Q4_0 weights no use gathers from keep their codes in row bands of 32
    (`[Np / 32, Kb, 32, 32]`, the
    codes of 32 rows block by block): a linear layer at a static batch contracts them as stored, a dynamic batch
    and a plain matmul dequantize them; Q8_0 weights whose rows 32 does not divide keep `[Kb, 32, N]`. Every result
    against PyPI gguf's dequantizer, as in the sweep above, with the weights' row counts 32, 64, 96, 160 added."""
    uses = ["linear", "matmul"]
    rng = np.random.default_rng(7 + FORMATS.index(fmt))
    k = 3 * cols_of(fmt)
    path = tmp_path / "w.gguf"
    dense = sweep_gguf(path, fmt, BAND_ROWS, k, rng)
    g = sweep_graph("bands", k, lambda n: {"dtype": "f32", "data": {"tensor": f"w{n}"}}, rows=BAND_ROWS, uses=uses)
    (tmp_path / "g.json").write_text(json.dumps(g))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep", "--inline-below", "1",
        "--packed-codes", "row-bands")
    idx = rt.ParameterIndex()
    idx.load(str(out / "bands.irpa"))
    entries = {key: json.loads(bytes(e.metadata).decode().removeprefix("TENSORv0:")) for key, e in idx.items()}
    text = (out / "bands.mlir").read_text()
    kb = k // 32
    for n in BAND_ROWS:
        padded = -(-n // 64) * 64 if fmt == "Q4_0" else n
        banded = padded % 32 == 0
        want = [padded // 32, kb, 32, 32] if banded else [kb, 32, padded]
        assert entries[f"w{n}.qs"]["shape"] == want, (n, entries[f"w{n}.qs"])
        code = "i8" if fmt == "Q8_0" else "i4"
        stored = "x".join(map(str, want))
        assert f'"w{n}.qs"> : tensor<{stored}x{code}>' in text, n
    # The static batches' products and the dynamic batch's few-rows forms (8, 16 and 32 rows, gated along the band
    # axis) read the stored bands; its dequantization (past 32 rows) reads the codes through a view of them behind a
    # barrier, which IREE folds into the dequantizing dispatch instead of computing it once at load.
    banded = sum(1 for n in BAND_ROWS if fmt == "Q4_0" or n % 32 == 0)
    assert text.count("affine_map<(b, m, p, t, k) -> (p, b, k, t)>") == 5 * banded, "not every product reads bands"
    qs = re.search(r"(%v\d+) = util\.global\.load @w64\.qs ", text).group(1)
    hidden = re.search(rf"(%v\d+) = stablehlo\.optimization_barrier {qs} :", text)
    assert hidden and re.search(rf"stablehlo\.transpose {hidden.group(1)},", text), "the view is not behind a barrier"
    feeds, want = feeds_and_oracle(k, dense, rng, rows=BAND_ROWS, uses=uses)
    count, wrong = run_sweep(tmp_path, out, "bands", feeds, want, cpu=cpu)
    assert count == len(BAND_ROWS) * len(BATCHES) * len(uses)
    assert not wrong, f"{fmt}: {len(wrong)} of {count} results wrong: {wrong}"


def stored_as(w, dtype):
    """f32 values `w` as a safetensors entry of `dtype` (f32, bf16 by truncation, f16), and the values it stores in
    float64."""
    if dtype == "bf16":
        bits = (w.view(np.uint32) >> 16).astype("<u2")
        return ("BF16", bits), (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype == "f16":
        return ("F16", w.astype("<f2")), w.astype(np.float16).astype(np.float64)
    return ("F32", w), w.astype(np.float64)


def write_safetensors(path, tensors):
    """`tensors`: name -> (safetensors dtype, numpy array of the stored bits)."""
    header, blobs, at = {}, [], 0
    for name, (dtype, a) in tensors.items():
        blob = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    path.write_bytes(len(h).to_bytes(8, "little") + h + b"".join(blobs))


@pytest.mark.parametrize("layout", ["transposed", "as-held"])
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_weights_kept_as_stored_are_exact_at_every_row_count(dtype, layout, tapeout, tmp_path):
    """f32 borrowed, bf16/f16 kept 16-bit, each transposed at export (the default for a weight used as `x @ Wᵀ`) or
    as held: every use, batch and row count of the sweep against numpy; plus a bool mask of each row count (`i1`,
    inline) selecting between two results."""
    rng = np.random.default_rng(ROWS[-1] + len(dtype))
    k = 48
    stored, dense = {}, {}
    for n in ROWS:
        stored[f"w{n}"], dense[n] = stored_as(rng.standard_normal((n, k)).astype(np.float32), dtype)
        stored[f"mask{n}"] = ("BOOL", (rng.integers(0, 2, (3, n)) == 1))
    write_safetensors(tmp_path / "w.safetensors", stored)
    # Transposed at export needs a weight whose only uses are its transpose and gathers of its rows.
    names = USES if layout == "as-held" else ["linear", "gather", "tied"]
    g = sweep_graph("sweep", k, lambda n: {"dtype": dtype, "data": {"tensor": f"w{n}"}}, uses=names)
    for n in ROWS:
        g["tensors"] += [{"name": f"mask{n}", "shape": [3, n], "dtype": "bool", "data": {"tensor": f"mask{n}"}},
                         {"name": f"select_{n}", "shape": [3, n], "dtype": "f32"}]
        g["nodes"].append({"op": "select", "inputs": [f"mask{n}", f"linear_{n}_b3", f"tied_{n}_b3"],
                           "outputs": [f"select_{n}"]})
        g["outputs"].append(f"select_{n}")
    (tmp_path / "g.json").write_text(json.dumps(g))
    out = tmp_path / "out"
    flags = ["--layout", "as-held"] if layout == "as-held" else []
    run(tapeout, "export", tmp_path / "g.json", "--weights", tmp_path / "w.safetensors", "-o", out,
        "--inline-below", "1", *flags)
    idx = rt.ParameterIndex()
    idx.load(str(out / "sweep.irpa"))
    entries = {key: json.loads(bytes(e.metadata).decode().removeprefix("TENSORv0:")) for key, e in idx.items()}
    for n in ROWS:
        meta = entries[f"w{n}"]
        assert meta["dtype"] == dtype and ("transposed_from" in meta) == (layout == "transposed"), meta
        assert meta["shape"] == ([k, n] if layout == "transposed" else [n, k]), meta
    feeds, want = feeds_and_oracle(k, dense, rng, uses=names)
    for n in ROWS:
        want[f"select_{n}"] = np.where(stored[f"mask{n}"][1], want[f"linear_{n}_b3"], want[f"tied_{n}_b3"])
    count, wrong = run_sweep(tmp_path, out, "sweep", feeds, want)
    assert count == len(ROWS) * (len(BATCHES) * len(names) + 1)
    assert not wrong, f"{dtype} {layout}: {len(wrong)} of {count} results wrong: {wrong}"
