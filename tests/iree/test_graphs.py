"""The IREE gate: every test graph is exported by `tapeout export`, compiled by iree-compile
(llvm-cpu, generic CPU), run by iree-run-module with its parameter archive, and compared with an
independent numpy interpreter of the graph (tests/graphs/reference.py)."""
import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from harness import (CPU, DEVICES, ROOT, RUN_DEVICES, banded, compile_and_run_iree, iree_tool, run, transposes_of,
                     write_safetensors_2d)

GRAPHS_DIR = ROOT / "tests/graphs"
sys.path.insert(0, str(GRAPHS_DIR))
import reference  # noqa: E402

GRAPHS = sorted(p.name[: -len(".test.json")] for p in GRAPHS_DIR.glob("*.test.json"))
# An argument's attributes: its name, then (with `?` dims) which of them the graph requires equal.
ARG = re.compile(r'%arg(\d+): (tensor<[^>]*>) \{tapeout\.name = "((?:[^"\\]|\\[0-9A-F]{2})*)"(?:, tapeout\.dims = "[^"]*")?\}')


def mlir_unescape(s):
    return re.sub(rb"\\([0-9A-F]{2})", lambda m: bytes([int(m.group(1), 16)]), s.encode()).decode()


def export_flags(test):
    p = test["policy"]
    flags = ["--inline-all"] if p == "inline_all" else ["--inline-below", "0"] if p == "external_all" else \
        ["--inline-below", str(p["inline_below"])]
    # The graphs that test how the emitter lowers what only passes write name it themselves (hidden flag).
    return flags + ["--packed", test["packed"], "--scope", test["scope"]] + \
        (["--accept-pass-ops"] if test.get("pass_ops") else [])


def make_inputs(graph, test, rng):
    gather_range = {}
    for n in graph.doc["nodes"]:
        if n["op"] == "gather":
            table = graph.specs[n["inputs"][0]]
            gather_range[n["inputs"][1]] = int(table["shape"][n.get("attrs", {}).get("axis", 0)])
    feeds = {}
    for name in graph.inputs:
        spec = graph.specs[name]
        shape = test.get("dynamic", {}).get(name) or [int(d) for d in spec["shape"]]
        dt = reference.NP[spec["dtype"]]
        if np.issubdtype(dt, np.integer):
            lo, hi = (0, gather_range[name]) if name in gather_range else (-5, 5)
            feeds[name] = rng.integers(lo, hi, size=shape).astype(dt)
        elif dt == np.bool_:
            feeds[name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            feeds[name] = rng.standard_normal(shape).astype(dt)
    return feeds


def compile_and_run(tapeout, name, tmp_path, feeds=None, extra=(), device=CPU):
    test = json.loads((GRAPHS_DIR / f"{name}.test.json").read_text())
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "out"
    run(tapeout, "export", GRAPHS_DIR / f"{name}.json", "--weights", GRAPHS_DIR / f"{name}.safetensors", "-o", out,
        "--target", device.target, *export_flags(test), *extra)
    (mlir,) = out.glob("*.mlir")
    (irpa,) = out.glob("*.irpa")
    text = mlir.read_text()
    order = [mlir_unescape(m.group(3)) for m in ARG.finditer(text)]
    graph = reference.Graph(GRAPHS_DIR / f"{name}.json", GRAPHS_DIR / f"{name}.safetensors")
    assert sorted(order) == sorted(graph.inputs), (order, graph.inputs)
    feeds = feeds or make_inputs(graph, test, np.random.default_rng(0))
    vmfb = tmp_path / "m.vmfb"
    run(iree_tool("iree-compile"), mlir, *device.compile_flags, "-o", vmfb)
    args = [iree_tool("iree-run-module"), f"--device={device.driver}", f"--module={vmfb}", "--function=main",
            f"--parameters={test['scope']}={irpa}"]
    for i, name_ in enumerate(order):
        np.save(tmp_path / f"in{i}.npy", feeds[name_])
        args.append(f"--input=@{tmp_path / f'in{i}.npy'}")
    n_out = len(graph.doc["outputs"])
    args += [f"--output=@{tmp_path / f'out{i}.npy'}" for i in range(n_out)]
    run(*args)
    return graph, feeds, [np.load(tmp_path / f"out{i}.npy") for i in range(n_out)], text


def assert_matches(got, want, label):
    assert got.shape == want.shape, f"{label}: shape {got.shape} != {want.shape}"
    if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
        assert got.dtype == want.dtype and np.array_equal(got, want), f"{label}: {got} != {want}"
    else:
        assert got.dtype == want.dtype, f"{label}: dtype {got.dtype} != {want.dtype}"
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=label)


@pytest.mark.parametrize("device", RUN_DEVICES)
@pytest.mark.parametrize("name", GRAPHS)
def test_graph_compiles_runs_and_matches_numpy(name, device, tapeout, tmp_path):
    graph = reference.Graph(GRAPHS_DIR / f"{name}.json", GRAPHS_DIR / f"{name}.safetensors")
    narrow = {"f16", "bf16", "i16", "u16", "i8", "u8"}
    boundary = [t for t in graph.inputs if graph.specs[t]["dtype"] in narrow | {"bool"}] + \
        [t for t in graph.doc["outputs"] if graph.specs[t]["dtype"] in narrow]
    if device == "vulkan" and boundary:
        # IREE 3.13 misreads narrow buffers passed to a Vulkan function: the export refuses, naming the value.
        with pytest.raises(subprocess.CalledProcessError) as e:
            compile_and_run(tapeout, name, tmp_path, device=DEVICES[device])
        assert f"'{boundary[0]}'" in e.value.stderr and "on vulkan, IREE 3.13" in e.value.stderr, e.value.stderr
        return
    graph, feeds, outs, _ = compile_and_run(tapeout, name, tmp_path, device=DEVICES[device])
    for i, (got, want) in enumerate(zip(outs, graph.evaluate(feeds))):
        assert_matches(got, want, f"{name} output {i} ({graph.doc['outputs'][i]})")


@pytest.mark.parametrize("name", ["row_count_ops", "grouped_columns", "banded_rows"])
@pytest.mark.parametrize("rows", [0, 1, 3, 4, 8, 9, 16])
def test_row_count_ops_on_every_side_of_their_thresholds(name, rows, tapeout, tmp_path):
    """The ops that pick a form by a `?` row count (`pad_rows`, `gate_rows`, `place_rows` at 8 and 3 rows) and the
    grouped product they gate, at row counts on both sides of each threshold and on it: a gate open or shut, a
    contraction over a `K` or `N` of 0, rows placed or not."""
    test = json.loads((GRAPHS_DIR / f"{name}.test.json").read_text())
    graph = reference.Graph(GRAPHS_DIR / f"{name}.json", GRAPHS_DIR / f"{name}.safetensors")
    feeds = make_inputs(graph, {**test, "dynamic": {"x": [rows, 4]}}, np.random.default_rng(rows))
    graph, feeds, outs, _ = compile_and_run(tapeout, name, tmp_path, feeds=feeds)
    for i, (got, want) in enumerate(zip(outs, graph.evaluate(feeds))):
        assert_matches(got, want, f"{name} at {rows} rows, output {i} ({graph.doc['outputs'][i]})")


def test_negative_control_catches_a_perturbed_weight(tapeout, tmp_path):
    graph, feeds, outs, _ = compile_and_run(tapeout, "transformer", tmp_path)
    key = "l1.down"
    graph.weights[key] = graph.weights[key] + np.float32(1e-3)
    with pytest.raises(AssertionError):
        assert_matches(outs[0], graph.evaluate(feeds)[0], "perturbed")


def test_external_module_text_is_independent_of_weight_bytes(tapeout, tmp_path):
    """The module text for external weights does not grow with them (only the archive does)."""
    _, _, _, text = compile_and_run(tapeout, "external_policy", tmp_path)
    assert "dense<" not in text.split("func.func")[1].replace("dense<0x", "")  # only scalar splats inline


def half_weights_of(name):
    doc = json.loads((GRAPHS_DIR / f"{name}.json").read_text())
    return [t for t in doc["tensors"] if t.get("data") and t["dtype"] in ("bf16", "f16")]


HALF_GRAPHS = [n for n in GRAPHS if half_weights_of(n)]


def archive_entries(irpa):
    import iree.runtime as rt
    idx = rt.ParameterIndex()
    idx.load(str(irpa))
    return {k: (bytes(e.file_view), bytes(e.metadata)) for k, e in idx.items()}


@pytest.mark.parametrize("name", HALF_GRAPHS)
def test_16_bit_weights_kept_as_stored_compute_what_widened_ones_do(name, tapeout, tmp_path):
    """bf16/f16 -> f32 is exact, so the module that converts kept 16-bit parameters must give what the widened
    export gives (within f32 summation-order noise, the same argmax), from an archive holding the stored bytes."""
    assert "half_weights" in HALF_GRAPHS and "mlp" in HALF_GRAPHS
    graph, feeds, kept, kept_text = compile_and_run(tapeout, name, tmp_path / "keep")
    _, _, widened, widened_text = compile_and_run(tapeout, name, tmp_path / "widen", feeds=feeds,
                                                  extra=["--half", "widen"])
    for i, (k, w) in enumerate(zip(kept, widened)):
        np.testing.assert_allclose(k, w, rtol=1e-6, atol=1e-6, err_msg=f"{name} output {i}")
        if k.ndim >= 1 and k.dtype.kind == "f":
            assert np.array_equal(k.argmax(-1), w.argmax(-1)), f"{name} output {i}: argmax differs"
    raw = (GRAPHS_DIR / f"{name}.safetensors").read_bytes()
    n = int(np.frombuffer(raw[:8], "<u8")[0])
    header = json.loads(raw[8:8 + n])
    kept_entries = archive_entries(next((tmp_path / "keep/out").glob("*.irpa")))
    widened_entries = archive_entries(next((tmp_path / "widen/out").glob("*.irpa")))
    external = 0
    for t in half_weights_of(name):
        key = t.get("path") or t["name"]
        if key not in kept_entries:
            continue  # small enough to be inline: its hex is checked by the snapshot
        external += 1
        info = header[t["data"]["safetensors"]]
        b, e = info["data_offsets"]
        stored = raw[8 + n + b:8 + n + e]
        data, meta = kept_entries[key]
        shape = list(t["shape"])
        if '"transposed_from"' in meta.decode():
            # A weight only used transposed: written in row bands when only matmuls use it (a linear), else (a
            # tied table, also gathered) transposed.
            bits = np.frombuffer(stored, "<u2").reshape(shape)
            bits = banded(bits) if len(json.loads(meta.decode()[len("TENSORv0:"):])["shape"]) == 3 else bits.T
            stored, shape = np.ascontiguousarray(bits).tobytes(), list(bits.shape)
        assert data == stored, f"{key}: the archive holds the stored {t['dtype']} bytes"
        assert f'"dtype":"{t["dtype"]}"' in meta.decode(), meta
        assert len(widened_entries[key][0]) == 2 * len(stored), f"{key}: widened is f32"
        ty = "x".join(str(d) for d in shape)
        assert f"tensor<{ty}x{t['dtype']}>" in kept_text and f"tensor<{ty}x{t['dtype']}>" not in widened_text
    assert external > 0, f"{name}: no external 16-bit weight to check"
    assert "stablehlo.convert" in kept_text


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_a_pytorch_layout_linear_is_contracted_as_stored_without_a_transpose(dtype, tapeout, tmp_path):
    """y = x @ W^T with W [out, in] in safetensors: W is written in row bands at export time ([out / 8, in, 8], each
    band transposed), the module has no transpose of it, and IREE computes x @ W^T."""
    rng = np.random.default_rng(11)
    n_out, n_in = 24, 40
    w, blob = write_safetensors_2d(tmp_path / "w.safetensors", "w",
                                   rng.standard_normal((n_out, n_in)).astype(np.float32), dtype)
    graph = {"name": "linear", "tensors": [
        {"name": "x", "shape": [3, n_in], "dtype": "f32"},
        {"name": "w", "shape": [n_out, n_in], "dtype": dtype, "path": "model.fc.weight", "data": {"tensor": "w"}},
        {"name": "wt", "shape": [n_in, n_out], "dtype": "f32"},
        {"name": "y", "shape": [3, n_out], "dtype": "f32"}],
        "nodes": [{"op": "transpose", "inputs": ["w"], "outputs": ["wt"]},
                  {"op": "matmul", "inputs": ["x", "wt"], "outputs": ["y"]}], "outputs": ["y"]}
    (tmp_path / "g.json").write_text(json.dumps(graph))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", tmp_path / "w.safetensors", "-o", out, "--inline-below", "0")
    text = (out / "linear.mlir").read_text()
    assert not transposes_of(text, "model.fc.weight"), text
    assert f'"model"::"model.fc.weight"> : tensor<{n_out // 8}x{n_in}x8x{dtype}>' in text, text
    data, meta = archive_entries(out / "linear.irpa")["model.fc.weight"]
    assert f'"transposed_from":[{n_out},{n_in}]' in meta.decode(), meta
    held = np.frombuffer(blob, "<u2" if dtype == "bf16" else "<f4").reshape(n_out, n_in)
    # Element [b, k, t] of the stored weight is W[8b + t, k].
    want_bytes = np.stack([held[8 * b:8 * b + 8].T for b in range(n_out // 8)]).tobytes()
    assert data == want_bytes
    x = rng.standard_normal((3, n_in)).astype(np.float32)
    [y] = compile_and_run_iree(tmp_path, out / "linear.mlir", [out / "linear.irpa"], [x])
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-5, atol=1e-5)


def test_bf16_activations_compute_in_bf16_on_the_stored_weight(tapeout, tmp_path):
    """A bf16 model: x converted to bf16, y = x @ W^T with the bf16 weight W [out, in] as stored (transposed at
    export), the product in bf16, converted back. The weight is read in its own type: no convert of it, and IREE's
    bf16 result matches x @ W^T within bf16 rounding."""
    rng = np.random.default_rng(12)
    n_out, n_in = 24, 40
    w, _ = write_safetensors_2d(tmp_path / "w.safetensors", "w", rng.standard_normal((n_out, n_in)).astype(np.float32), "bf16")
    graph = {"name": "bf16_linear", "tensors": [
        {"name": "x", "shape": [3, n_in], "dtype": "f32"},
        {"name": "xb", "shape": [3, n_in], "dtype": "bf16"},
        {"name": "w", "shape": [n_out, n_in], "dtype": "bf16", "path": "model.fc.weight", "data": {"tensor": "w"}},
        {"name": "wt", "shape": [n_in, n_out], "dtype": "bf16"},
        {"name": "yb", "shape": [3, n_out], "dtype": "bf16"},
        {"name": "y", "shape": [3, n_out], "dtype": "f32"}],
        "nodes": [{"op": "convert", "inputs": ["x"], "outputs": ["xb"]},
                  {"op": "transpose", "inputs": ["w"], "outputs": ["wt"]},
                  {"op": "matmul", "inputs": ["xb", "wt"], "outputs": ["yb"]},
                  {"op": "convert", "inputs": ["yb"], "outputs": ["y"]}], "outputs": ["y"]}
    (tmp_path / "g.json").write_text(json.dumps(graph))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", tmp_path / "w.safetensors", "-o", out, "--inline-below", "0")
    text = (out / "bf16_linear.mlir").read_text()
    assert f": tensor<3x{n_in}xbf16>, tensor<{n_out // 8}x{n_in}x8xbf16>) outs(" in text, text
    assert f"}} -> tensor<3x{n_out // 8}x8xbf16>" in text, text
    assert text.count("stablehlo.convert") == 2 and not transposes_of(text, "model.fc.weight"), text
    x = rng.standard_normal((3, n_in)).astype(np.float32)
    [y] = compile_and_run_iree(tmp_path, out / "bf16_linear.mlir", [out / "bf16_linear.irpa"], [x])
    xb = (x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) >> 16 << 16
    want = xb.view(np.float32) @ w.T
    np.testing.assert_allclose(y, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_a_tied_embedding_and_head_is_one_transposed_parameter_gathered_by_columns(dtype, tapeout, tmp_path):
    """ids -> embedding rows -> logits = h @ E^T with one table E [V, D]: stored once as E^T [D, V] (the layout IREE
    runs a decode step from without a copy, docs/performance.md#weights-in-iree), gathered by columns; IREE's logits
    equal numpy's."""
    rng = np.random.default_rng(12)
    v, d = 40, 24
    e, _ = write_safetensors_2d(tmp_path / "w.safetensors", "e", rng.standard_normal((v, d)).astype(np.float32), dtype)
    graph = {"name": "tied", "tensors": [
        {"name": "ids", "shape": [3], "dtype": "i32"},
        {"name": "e", "shape": [v, d], "dtype": dtype, "path": "model.embed_tokens.weight", "data": {"tensor": "e"}},
        {"name": "h", "shape": [3, d], "dtype": "f32"},
        {"name": "h2", "shape": [3, d], "dtype": "f32"},
        {"name": "et", "shape": [d, v], "dtype": "f32"},
        {"name": "logits", "shape": [3, v], "dtype": "f32"}],
        "nodes": [{"op": "gather", "inputs": ["e", "ids"], "outputs": ["h"]},
                  {"op": "add", "inputs": ["h", "h"], "outputs": ["h2"]},
                  {"op": "transpose", "inputs": ["e"], "outputs": ["et"]},
                  {"op": "matmul", "inputs": ["h2", "et"], "outputs": ["logits"]}], "outputs": ["logits"]}
    (tmp_path / "g.json").write_text(json.dumps(graph))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", tmp_path / "w.safetensors", "-o", out, "--inline-below", "0")
    text = (out / "tied.mlir").read_text()
    assert text.count("util.global private") == 1, text
    assert f'"model"::"model.embed_tokens.weight"> : tensor<{d}x{v}x{dtype}>' in text, text
    assert f"tensor<{v}x{d}x" not in text, "nothing of the table's held layout is left: " + text
    data, meta = archive_entries(out / "tied.irpa")["model.embed_tokens.weight"]
    assert f'"transposed_from":[{v},{d}]' in meta.decode(), meta
    ids = np.array([0, 39, 17], dtype=np.int32)
    [got] = compile_and_run_iree(tmp_path, out / "tied.mlir", [out / "tied.irpa"], [ids])
    want = (2 * e[ids]) @ e.T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert (got.argmax(axis=1) == want.argmax(axis=1)).all()


def test_a_sharded_export_round_trips_through_iree_with_a_parameter_larger_than_the_limit(tapeout, tmp_path):
    """--max-archive-bytes 64 KiB over weights of 24, 24, 24 and 160 KiB: two to a file where they fit, the big one
    alone in its file, no other file past the limit; IREE runs the module from the flags tapeout prints; dump and
    verify take the set; a stale index is refused; the outputs of another form are removed."""
    rng = np.random.default_rng(13)
    dims = [(48, 128), (48, 128), (48, 128), (320, 128)]  # f32: 24, 24, 24, 160 KiB
    ws = [rng.standard_normal(d).astype(np.float32) for d in dims]
    header, blob = {}, b""
    for i, w in enumerate(ws):
        header[f"w{i}"] = {"dtype": "F32", "shape": list(w.shape), "data_offsets": [len(blob), len(blob) + w.nbytes]}
        blob += w.tobytes()
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    (tmp_path / "w.safetensors").write_bytes(np.uint64(len(h)).tobytes() + h + blob)
    tensors = [{"name": "x", "shape": [2, 128], "dtype": "f32"}]
    nodes, outs = [], []
    for i, w in enumerate(ws):
        tensors += [{"name": f"w{i}", "shape": list(w.shape), "dtype": "f32", "path": f"model.w{i}",
                     "data": {"tensor": f"w{i}"}},
                    {"name": f"wt{i}", "shape": [128, w.shape[0]], "dtype": "f32"},
                    {"name": f"y{i}", "shape": [2, w.shape[0]], "dtype": "f32"}]
        nodes += [{"op": "transpose", "inputs": [f"w{i}"], "outputs": [f"wt{i}"]},
                  {"op": "matmul", "inputs": ["x", f"wt{i}"], "outputs": [f"y{i}"]}]
        outs.append(f"y{i}")
    (tmp_path / "g.json").write_text(json.dumps({"name": "sharded", "tensors": tensors, "nodes": nodes,
                                                 "outputs": outs}))
    out = tmp_path / "out"
    (out).mkdir()
    (out / "sharded.irpa").write_bytes(b"stale")  # an earlier unsharded export: replaced by the set
    limit = 64 << 10
    r = run(tapeout, "export", tmp_path / "g.json", "--weights", tmp_path / "w.safetensors", "-o", out,
            "--max-archive-bytes", str(limit))
    files = sorted(p.name for p in out.glob("sharded*.irpa"))
    assert files == [f"sharded-0000{k}-of-00003.irpa" for k in (1, 2, 3)], files
    sizes = {f: (out / f).stat().st_size for f in files}
    keys = {f: list(archive_entries(out / f)) for f in files}
    assert keys == {files[0]: ["model.w0", "model.w1"], files[1]: ["model.w2"], files[2]: ["model.w3"]}, keys
    assert sizes[files[0]] <= limit and sizes[files[1]] <= limit and sizes[files[2]] > limit, sizes
    index = json.loads((out / "sharded.irpa.index.json").read_text())
    assert index["files"] == files and index["weight_map"] == {k: f for f, ks in keys.items() for k in ks}
    flags_line = [ln for ln in r.stdout.splitlines() if ln.startswith("IREE loads them with: ")]
    flags = flags_line[0].removeprefix("IREE loads them with: ").split(" ")
    assert flags == [f"--parameters=model={out / f}" for f in files], flags

    x = rng.standard_normal((2, 128)).astype(np.float32)
    ys = compile_and_run_iree(tmp_path, out / "sharded.mlir", [f.split("=", 2)[2] for f in flags], [x], outputs=4)
    for y, w in zip(ys, ws):
        np.testing.assert_allclose(y, x @ w.T, rtol=1e-5, atol=1e-5)

    v = run(tapeout, "verify", out / "sharded.irpa.index.json")
    assert "set: ok (3 archives, 4 entries" in v.stdout, v.stdout
    d = run(tapeout, "dump", "--json", *[out / f for f in files])
    rows = [json.loads(ln) for ln in d.stdout.splitlines()]
    assert [(r["key"], pathlib.Path(r["file"]).name) for r in rows] == [(k, f) for f, ks in keys.items() for k in ks]
    # An index that no longer matches its files is refused, naming the key.
    index["weight_map"]["model.w3"] = files[0]
    (out / "sharded.irpa.index.json").write_text(json.dumps(index))
    bad = run(tapeout, "verify", out / "sharded.irpa.index.json", check=False)
    assert bad.returncode == 1 and '"model.w3"' in bad.stderr and files[2] in bad.stderr, bad.stderr
    # Without the limit the set goes back to one archive, and the shards and index are removed.
    run(tapeout, "export", tmp_path / "g.json", "--weights", tmp_path / "w.safetensors", "-o", out)
    assert sorted(p.name for p in out.iterdir()) == ["sharded.irpa", "sharded.mlir", "sharded.signature.json"]
