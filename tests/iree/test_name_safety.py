"""Name safety, randomized: generated tensor names, keys and module names (quotes, backslashes, newlines, tabs,
NUL, `@`, `::`, `/`, non-ASCII, leading digits, very long) go through `tapeout export`; iree-compile accepts every
module, iree-run-module computes the right numbers, and every archive key round-trips exactly."""
import json
import random

import numpy as np
import iree.runtime as rt
import pytest

from harness import iree_tool, run

ALPHABET = ['"', "\\", "\n", "\t", "\0", "@", "::", "/", " ", "é", "中", "🙂", "%", "#", "{", "}", "<", ">", "0", "9",
            "a", "Z", "_", ".", "$", "-", "\u2028", "'"]


def random_name(rng, min_len=1, max_len=24):
    n = rng.choice([rng.randint(min_len, max_len), rng.randint(200, 1000)]) if rng.random() < 0.15 else rng.randint(min_len, max_len)
    return "".join(rng.choice(ALPHABET) for _ in range(n))


@pytest.mark.parametrize("seed", range(16))
def test_random_names_compile_run_and_round_trip(seed, tapeout, tmp_path):
    rng = random.Random(seed)
    names = []  # a list, not a set: the same seed must give the same names in every run
    while len(names) < 4:
        n = random_name(rng)
        if n not in names:
            names.append(n)
    x_name, w_name, y_name, module = names
    key = random_name(rng)
    w = np.random.default_rng(seed).standard_normal(3).astype("<f4")
    (tmp_path / "w.bin").write_bytes(w.tobytes())
    graph = {"name": module,
             "tensors": [{"name": x_name, "shape": [3], "dtype": "f32"},
                         {"name": w_name, "shape": [3], "dtype": "f32", "path": key, "data": {"file": "w.bin"}},
                         {"name": y_name, "shape": [3], "dtype": "f32"}],
             "nodes": [{"op": "add", "inputs": [x_name, w_name], "outputs": [y_name]}],
             "outputs": [y_name]}
    (tmp_path / "g.json").write_text(json.dumps(graph))
    run(tapeout, "export", tmp_path / "g.json", "-o", tmp_path / "out", "--inline-below", "0")
    (mlir,) = (tmp_path / "out").glob("*.mlir")
    (irpa,) = (tmp_path / "out").glob("*.irpa")
    idx = rt.ParameterIndex()
    idx.load(str(irpa))
    assert [k for k, _ in idx.items()] == [key], "the key round-trips exactly"
    run(iree_tool("iree-compile"), mlir, "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=generic", "-o", tmp_path / "m.vmfb")
    x = np.arange(3, dtype="<f4")
    np.save(tmp_path / "x.npy", x)
    run(iree_tool("iree-run-module"), f"--module={tmp_path / 'm.vmfb'}", "--function=main",
        f"--parameters=model={irpa}", f"--input=@{tmp_path / 'x.npy'}", f"--output=@{tmp_path / 'y.npy'}")
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), x + w)
