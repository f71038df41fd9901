"""The shape sweep of the IREE gate: every packed format kept packed, and weights kept as stored (f32, bf16, f16,
as held and transposed at export), at every row count of a sweep that holds odd, even, prime and power-of-two sizes,
in every kind of use (a linear layer `x @ Wᵀ`, a gather of rows, a tied embedding and head, a plain `x' @ W`) at a
static batch of 1, a static batch of 3 and a dynamic batch; each result compared with an independent oracle
(PyPI gguf's dequantizer, numpy in float64) within 1e-5 of the output's scale.

IREE 3.13 silently misreads an `i4`/`i2` tensor whose innermost rows do not fill whole bytes (docs/graph-format.md);
this sweep is what keeps a shape-dependent error of that kind from hiding again. One module per format (all sizes,
uses and batches as the results of one function) keeps the compile count small.

On Vulkan (`--target vulkan`: every narrow plane and weight kept as stored is held in i32 words and decoded in the
program, docs/devices.md; run on lavapipe, a CPU implementation whose shader compiles dominate the time) each weight
form runs every use at a static batch of 1 and a dynamic batch (run at 3 rows), at three row counts: 1 and two others,
chosen so that the packed formats together, and the weights kept as stored together, cover every row count of the
sweep. Codes in row bands are a form of the llvm-cpu target only (the export refuses them for Vulkan)."""
import json
import re

import iree.runtime as rt
import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter, GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf.quants import dequantize

from harness import VULKAN, compile_iree, iree_tool, run, run_iree, signature
from test_packed import FORMATS, random_blocks

ROWS = [1, 2, 3, 4, 5, 7, 8, 9, 15, 17, 33, 65, 127]
BATCHES = {"b1": 1, "b3": 3, "dyn": "?"}
DYN = 2  # the run-time size of the dynamic batch
USES = ["linear", "gather", "tied", "matmul"]
# The uses the planes serve as they are (static linear layers and gathers), and all of them (a dynamic batch or a
# plain matmul dequantizes the weight whole in the program).
KEPT = ({"b1": 1, "b3": 3}, ["linear", "gather", "tied"])
EVERY = (BATCHES, USES)
# Vulkan's subset (see the module's docstring): each packed format's and each stored form's row counts besides 1.
VULKAN_BATCHES = {"b1": 1, "dyn": "?"}
VULKAN_DYN = 3
VULKAN_ROWS = {"Q8_0": [1, 3, 65], "Q4_0": [1, 7, 127], "Q4_1": [1, 4, 33], "Q5_0": [1, 5, 17], "Q5_1": [1, 9, 65],
               "Q4_K": [1, 2, 127], "Q5_K": [1, 15, 33], "Q6_K": [1, 8, 17],
               ("f32", "transposed"): [1, 2, 65], ("f32", "as-held"): [1, 3, 8],
               ("bf16", "transposed"): [1, 7, 33], ("bf16", "as-held"): [1, 4, 127],
               ("f16", "transposed"): [1, 5, 17], ("f16", "as-held"): [1, 9, 15]}


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


def feeds_and_oracle(k, dense, rng, rows=ROWS, batches=BATCHES, uses=USES, dyn=DYN):
    """Inputs by name, and the float64 results numpy computes from the dense weights `dense[n]` (the dynamic batch
    run at `dyn` rows)."""
    feeds, want = {}, {}
    for b, size in batches.items():
        p = dyn if size == "?" else size
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


def run_sweep(tmp_path, out, name, feeds, want, cpu="generic", device=None):
    """Compiles `out/<name>.mlir`, runs `main` in IREE's Python runtime with the archive (on a `device`, Vulkan, with
    iree-run-module: the Python runtime cannot copy a Vulkan result to the host, `minImportedHostPointerAlignment`),
    and checks every result."""
    args, results = signature(out / f"{name}.mlir")
    assert sorted(results) == sorted(want), (len(results), len(want))
    if device is not None:
        vmfb = compile_iree(tmp_path, out / f"{name}.mlir", name, device=device)
        outs = run_iree(tmp_path, vmfb, [out / f"{name}.irpa"], [feeds[a] for a in args], outputs=len(results),
                        device=device)
        return len(results), compare(results, outs, want)
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
    return len(results), compare(results, [o.to_host() for o in outs], want)


def compare(results, outs, want):
    """The results (by name) that differ from the oracle by more than 1e-5 of its scale, with the error."""
    wrong = []
    for r, o in zip(results, outs):
        got = np.asarray(o).astype(np.float64)
        w = want[r]
        scale = max(np.abs(w).max(), 1e-30)
        if got.shape != w.shape or not np.allclose(got, w, rtol=1e-5, atol=1e-5 * scale):
            err = np.abs(got - w).max() / scale if got.shape == w.shape else f"shape {got.shape} != {w.shape}"
            wrong.append(f"{r}: {err}")
    return wrong


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


@pytest.mark.parametrize("fmt", FORMATS)
def test_packed_weights_kept_packed_are_exact_on_vulkan(fmt, tapeout, tmp_path):
    """The sweep above on Vulkan, at its subset (VULKAN_ROWS, VULKAN_BATCHES): every plane (codes, high bits, scales)
    held in i32 words, the codes' rows padded as on the CPU."""
    rows = VULKAN_ROWS[fmt]
    rng = np.random.default_rng(ROWS[-1] + FORMATS.index(fmt))
    k = cols_of(fmt)
    path = tmp_path / "w.gguf"
    dense = sweep_gguf(path, fmt, rows, k, rng)
    g = sweep_graph("sweep", k, lambda n: {"dtype": "f32", "data": {"tensor": f"w{n}"}}, rows=rows,
                    batches=VULKAN_BATCHES)
    (tmp_path / "g.json").write_text(json.dumps(g))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep", "--inline-below", "1",
        "--target", "vulkan")
    idx = rt.ParameterIndex()
    idx.load(str(out / "sweep.irpa"))
    entries = {key: json.loads(bytes(e.metadata).decode().removeprefix("TENSORv0:")) for key, e in idx.items()}
    sub_byte = fmt != "Q8_0"
    for n in rows:
        meta = entries[f"w{n}.qs"]
        assert f"w{n}" not in entries, sorted(entries)
        assert (meta["dtype"], meta["words_of"]) == ("i32", "i4" if sub_byte else "i8"), meta
        padded = -(-n // 64) * 64 if sub_byte else n
        assert meta.get("padded_rows", n) == padded, meta
    feeds, want = feeds_and_oracle(k, dense, rng, rows=rows, batches=VULKAN_BATCHES, dyn=VULKAN_DYN)
    count, wrong = run_sweep(tmp_path, out, "sweep", feeds, want, device=VULKAN)
    assert count == len(rows) * len(VULKAN_BATCHES) * len(USES)
    assert not wrong, f"{fmt} on vulkan: {len(wrong)} of {count} results wrong: {wrong}"


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
    stored_sweep(dtype, layout, tapeout, tmp_path, ROWS, BATCHES, DYN, None)


@pytest.mark.parametrize("layout", ["transposed", "as-held"])
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_weights_kept_as_stored_are_exact_on_vulkan(dtype, layout, tapeout, tmp_path):
    """The sweep above on Vulkan, at its subset (VULKAN_ROWS, VULKAN_BATCHES): bf16 / f16 weights held in i32 words,
    f32 as they are; the bool masks select between the results of the static batch of 1."""
    stored_sweep(dtype, layout, tapeout, tmp_path, VULKAN_ROWS[dtype, layout], VULKAN_BATCHES, VULKAN_DYN, VULKAN)


def stored_sweep(dtype, layout, tapeout, tmp_path, rows, batches, dyn, device):
    """The sweep of weights kept as stored at `rows` and `batches` (the dynamic one run at `dyn` rows), exported for
    and run on `device` (None: the CPU, in IREE's Python runtime); the masks select between the results of the static
    batch of 3 (else of 1)."""
    rng = np.random.default_rng(ROWS[-1] + len(dtype))
    k = 48
    mb = "b3" if "b3" in batches else "b1"
    stored, dense = {}, {}
    for n in rows:
        stored[f"w{n}"], dense[n] = stored_as(rng.standard_normal((n, k)).astype(np.float32), dtype)
        stored[f"mask{n}"] = ("BOOL", (rng.integers(0, 2, (batches[mb], n)) == 1))
    write_safetensors(tmp_path / "w.safetensors", stored)
    # Transposed at export needs a weight whose only uses are its transpose and gathers of its rows.
    names = USES if layout == "as-held" else ["linear", "gather", "tied"]
    g = sweep_graph("sweep", k, lambda n: {"dtype": dtype, "data": {"tensor": f"w{n}"}}, rows=rows, batches=batches,
                    uses=names)
    for n in rows:
        g["tensors"] += [{"name": f"mask{n}", "shape": [batches[mb], n], "dtype": "bool",
                          "data": {"tensor": f"mask{n}"}},
                         {"name": f"select_{n}", "shape": [batches[mb], n], "dtype": "f32"}]
        g["nodes"].append({"op": "select", "inputs": [f"mask{n}", f"linear_{n}_{mb}", f"tied_{n}_{mb}"],
                           "outputs": [f"select_{n}"]})
        g["outputs"].append(f"select_{n}")
    (tmp_path / "g.json").write_text(json.dumps(g))
    out = tmp_path / "out"
    flags = ["--layout", "as-held"] if layout == "as-held" else []
    if device is not None:
        flags += ["--target", device.target]
    run(tapeout, "export", tmp_path / "g.json", "--weights", tmp_path / "w.safetensors", "-o", out,
        "--inline-below", "1", *flags)
    idx = rt.ParameterIndex()
    idx.load(str(out / "sweep.irpa"))
    entries = {key: json.loads(bytes(e.metadata).decode().removeprefix("TENSORv0:")) for key, e in idx.items()}
    words = device is not None and dtype != "f32"  # Vulkan holds 16-bit weights in i32 words
    for n in rows:
        meta = entries[f"w{n}"]
        assert meta.get("words_of", meta["dtype"]) == dtype and (meta["dtype"] == "i32") == words, meta
        assert ("transposed_from" in meta) == (layout == "transposed"), meta
        shape = [k, n] if layout == "transposed" else [n, k]
        assert meta["shape"] == ([shape[0] * shape[1] // 2] if words else shape), meta
    feeds, want = feeds_and_oracle(k, dense, rng, rows=rows, batches=batches, uses=names, dyn=dyn)
    for n in rows:
        want[f"select_{n}"] = np.where(stored[f"mask{n}"][1], want[f"linear_{n}_{mb}"], want[f"tied_{n}_{mb}"])
    count, wrong = run_sweep(tmp_path, out, "sweep", feeds, want, device=device)
    assert count == len(rows) * (len(batches) * len(names) + 1)
    where = f" on {device.name}" if device is not None else ""
    assert not wrong, f"{dtype} {layout}{where}: {len(wrong)} of {count} results wrong: {wrong}"
