"""Several public functions in one module sharing their parameters (the JSON format's "functions"): IREE runs
each function of the one compiled module against the one archive, and a weight both functions use is one
`util.global` and one archive entry."""
import json

import numpy as np
from safetensors.numpy import save_file

from harness import compile_and_run_iree, compile_iree, iree_tool, run

RNG = np.random.default_rng(17)
TABLE = RNG.standard_normal((10, 4)).astype(np.float32)
W = RNG.standard_normal((4, 8)).astype(np.float32)


def graph(functions, shared=None):
    return {"format": "tapeout-graph/1", "name": "lm", "tensors": shared if shared is not None else [
        {"name": "table", "shape": [10, 4], "dtype": "f32", "path": "embed.weight", "data": {"tensor": "table"}},
        {"name": "w", "shape": [4, 8], "dtype": "f32", "path": "proj.weight", "data": {"tensor": "w"}},
    ], "functions": functions}


PREFILL = {"name": "prefill", "tensors": [
    {"name": "tokens", "shape": ["?"], "dtype": "i32"},
    {"name": "e", "shape": ["?", 4], "dtype": "f32"},
    {"name": "h", "shape": ["?", 8], "dtype": "f32"}],
    "nodes": [{"op": "gather", "inputs": ["table", "tokens"], "outputs": ["e"]},
              {"op": "matmul", "inputs": ["e", "w"], "outputs": ["h"]}], "outputs": ["h"]}

DECODE = {"name": "decode", "tensors": [
    {"name": "tokens", "shape": [1], "dtype": "i32"},
    {"name": "cache", "shape": [6, 8], "dtype": "f32"},
    {"name": "pos", "shape": [], "dtype": "i64"},
    {"name": "zero", "shape": [], "dtype": "i64"},
    {"name": "e", "shape": [1, 4], "dtype": "f32"},
    {"name": "h", "shape": [1, 8], "dtype": "f32"},
    {"name": "next", "shape": [1], "dtype": "i32"},
    {"name": "updated", "shape": [6, 8], "dtype": "f32"}],
    "nodes": [{"op": "gather", "inputs": ["table", "tokens"], "outputs": ["e"]},
              {"op": "matmul", "inputs": ["e", "w"], "outputs": ["h"]},
              {"op": "argmax", "inputs": ["h"], "outputs": ["next"], "attrs": {"axis": -1}},
              {"op": "dynamic_update_slice", "inputs": ["cache", "h", "pos", "zero"], "outputs": ["updated"]}],
    "outputs": ["next", "updated"]}


def export(tapeout, tmp_path, doc, check=True):
    (tmp_path / "lm.json").write_text(json.dumps(doc))
    save_file({"table": TABLE, "w": W}, str(tmp_path / "w.safetensors"))
    return run(tapeout, "export", tmp_path / "lm.json", "--weights", tmp_path / "w.safetensors", "-o", tmp_path / "out",
               "--inline-below", "0", check=check)


def test_two_functions_share_one_archive_and_iree_runs_each(tapeout, tmp_path):
    export(tapeout, tmp_path, graph([PREFILL, DECODE]))
    out = tmp_path / "out"
    text = (out / "lm.mlir").read_text()
    assert "func.func @prefill(" in text and "func.func @decode(" in text, text
    assert text.count("util.global private") == 2, "one global per shared weight"
    r = run(tapeout, "dump", out / "lm.irpa")
    assert r.stdout.count("embed.weight") == 1 and r.stdout.count("proj.weight") == 1, r.stdout
    tokens = np.array([3, 1, 4, 1, 5], np.int32)
    [h] = compile_and_run_iree(tmp_path, out / "lm.mlir", [out / "lm.irpa"], [tokens], function="prefill")
    np.testing.assert_allclose(h, TABLE[tokens] @ W, rtol=1e-5, atol=1e-5)
    cache = RNG.standard_normal((6, 8)).astype(np.float32)
    (tmp_path / "d").mkdir()
    nxt, updated = compile_and_run_iree(tmp_path / "d", out / "lm.mlir", [out / "lm.irpa"],
                                        [np.array([7], np.int32), cache, np.array(2, np.int64), np.array(0, np.int64)],
                                        outputs=2, function="decode")
    y = TABLE[[7]] @ W
    want = cache.copy()
    want[2] = y[0]
    np.testing.assert_allclose(updated, want, rtol=1e-5, atol=1e-5)
    assert nxt.tolist() == [int(np.argmax(y[0]))]


def test_a_cache_written_by_dynamic_update_slice_is_updated_in_place(tapeout, tmp_path):
    """The StaticCache form's KV cache (docs/performance.md#llm-decode-and-prefill): IREE 3.13 writes the
    update into the argument's own buffer, so a step costs the row it writes, not a copy of the cache. The module's
    stream has no copy of the cache and allocates no result for it; a cache passed as a device array holds the new
    row after the call (a caller that wants the old cache must copy it first); a host array is copied in and left
    alone."""
    import iree.runtime as rt
    export(tapeout, tmp_path, graph([PREFILL, DECODE]))
    out = tmp_path / "out"
    stream = tmp_path / "lm.stream.mlir"
    run(iree_tool("iree-compile"), out / "lm.mlir", "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic", "--compile-to=stream",
        "-o", stream)
    text = stream.read_text()
    decode = text[text.index("util.func public @decode"):]
    cache_bytes = 6 * 8 * 4
    copies = [line for line in decode.splitlines() if "stream.cmd.copy" in line and f"{{%c{cache_bytes}}}" in line]
    allocs = [line for line in decode.splitlines() if "stream.resource.alloca" in line and f"{{%c{cache_bytes}}}" in line]
    assert not copies and not allocs, (copies, allocs)

    vmfb = compile_iree(tmp_path, out / "lm.mlir")
    config = rt.Config("local-task")
    idx = rt.ParameterIndex()
    idx.load(str(out / "lm.irpa"))
    params = rt.create_io_parameters_module(config.vm_instance, idx.create_provider(scope="model"))
    ctx = rt.SystemContext(vm_modules=[params, rt.create_hal_module(config.vm_instance, config.device),
                                       rt.VmModule.mmap(config.vm_instance, str(vmfb))], config=config)
    step = ctx.modules.lm.decode
    cache = RNG.standard_normal((6, 8)).astype(np.float32)
    want = cache.copy()
    want[4] = (TABLE[[7]] @ W)[0]
    on_device = rt.asdevicearray(config.device, cache)
    _, updated = step(np.array([7], np.int32), on_device, np.array(4, np.int64), np.array(0, np.int64))
    np.testing.assert_allclose(updated.to_host(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(on_device.to_host(), want, rtol=1e-5, atol=1e-5)
    host = cache.copy()
    _, updated = step(np.array([7], np.int32), host, np.array(4, np.int64), np.array(0, np.int64))
    np.testing.assert_array_equal(host, cache)
    np.testing.assert_allclose(updated.to_host(), want, rtol=1e-5, atol=1e-5)


def test_functions_that_do_not_fit_together_are_errors_naming_function_and_tensor(tapeout, tmp_path):
    leaky = json.loads(json.dumps(DECODE))
    leaky["nodes"][1]["inputs"] = ["e", "w"]
    leaky["tensors"] = [t for t in leaky["tensors"] if t["name"] != "e"]
    leaky["nodes"][0]["outputs"] = ["h"]
    leaky["nodes"] = leaky["nodes"][1:]
    small_cache = json.loads(json.dumps(DECODE))
    for t in small_cache["tensors"]:
        if t["name"] in ("cache", "updated"):
            t["shape"] = [6, 4]
    cases = [
        (graph([PREFILL, small_cache]), "function 'decode': node 3 (dynamic_update_slice -> 'updated'): the update [1x8] "
                                        "does not fit the tensor [6x4]"),
        (graph([PREFILL, dict(PREFILL)]), 'two functions are named "prefill"'),
        (graph([PREFILL, {**leaky, "name": "decode"}]),
         'function "decode": node 0 (op \'matmul\') refers to tensor "e" of function "prefill"'),
        (graph([{**PREFILL, "nodes": [{"op": "gather", "inputs": ["table", "tokens"], "outputs": ["w"]}],
                 "outputs": ["w"]}]), 'writes the top-level tensor "w"'),
        ({**graph([PREFILL]), "nodes": PREFILL["nodes"]}, 'keeps its nodes, outputs and inputs inside each function'),
    ]
    for i, (doc, needle) in enumerate(cases):
        d = tmp_path / str(i)
        d.mkdir()
        r = export(tapeout, d, doc, check=False)
        assert r.returncode == 1 and needle in r.stderr, f"{needle!r} not in {r.stderr}"
