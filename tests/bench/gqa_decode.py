"""Grouped-query attention against the materialized repeat, one decode step, measured by IREE itself
(docs/performance.md#weights-in-iree).

One query row (S = 1) of H query heads attending over T cached keys/values of KV heads (head dim D), f32:
- `gqa`: `sdpa(q [1, H, 1, D], k [1, KV, T, D], v [1, KV, T, D], causal)`: k/v read as they are;
- `repeat`: the same sdpa after transformers' repeat_kv written as Kotlin's `repeatKv` records it (reshape to
  `[1, KV, 1, T, D]`, concatenation of H/KV copies, reshape to `[1, H, T, D]`): k/v copied H/KV times per step;
- `mha`: the control, sdpa over k/v that already have H heads (the repeated tensors as inputs: no copy in the
  step, but H/KV times the bytes read), which separates the copy's cost from the ungrouped lowering's.
Each graph is exported by tapeout, compiled for the host CPU, checked against numpy, and timed with
`iree-benchmark-module` (median of 5 repetitions) in alternating rounds, once with a static T and once with T `?`
(run at the same T). One JSON line per form and round, then the median ratio repeat / gqa.

    python tests/bench/gqa_decode.py [--heads 16] [--kv-heads 4] [--dim 64] [--keys 1024] [--rounds 3] [--out DIR]
"""
import argparse
import json
import math
import pathlib
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from harness import iree_tool, signature  # noqa: E402

TAPEOUT = ROOT / "target/release/tapeout"


def graph(form, h, kv, d, t):
    """The tapeout graph JSON of one form; `t` is an int or "?"."""
    def spec(name, shape):
        return {"name": name, "shape": shape, "dtype": "f32"}
    kv_in = h if form == "mha" else kv
    tensors = [spec("q", [1, h, 1, d]), spec("k", [1, kv_in, t, d]), spec("v", [1, kv_in, t, d]),
               spec("y", [1, h, 1, d])]
    nodes = []
    k, v = "k", "v"
    if form == "repeat":
        g = h // kv
        for x in ("k", "v"):
            tensors += [spec(f"{x}1", [1, kv, 1, t, d]), spec(f"{x}g", [1, kv, g, t, d]), spec(f"{x}r", [1, h, t, d])]
            nodes += [{"op": "reshape", "inputs": [x], "outputs": [f"{x}1"], "attrs": {}},
                      {"op": "concat", "inputs": [f"{x}1"] * g, "outputs": [f"{x}g"], "attrs": {"axis": 2}},
                      {"op": "reshape", "inputs": [f"{x}g"], "outputs": [f"{x}r"], "attrs": {}}]
        k, v = "kr", "vr"
    nodes.append({"op": "sdpa", "inputs": ["q", k, v], "outputs": ["y"], "attrs": {"causal": True}})
    return {"format": "tapeout-graph/1", "name": form, "tensors": tensors, "nodes": nodes, "outputs": ["y"]}


def numpy_attention(q, k, v):
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k.astype(np.float64), g, axis=1), np.repeat(v.astype(np.float64), g, axis=1)
    s = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def build(d, form, dims, t):
    work = d / f"{form}-{'dyn' if t == '?' else 'static'}"
    work.mkdir()
    (work / "g.json").write_text(json.dumps(graph(form, *dims, t)))
    from safetensors.numpy import save_file
    save_file({"unused": np.zeros(1, np.float32)}, str(work / "w.safetensors"))
    subprocess.run([TAPEOUT, "export", work / "g.json", "--weights", work / "w.safetensors", "-o", work / "out"],
                   check=True, capture_output=True)
    vmfb = work / "m.vmfb"
    subprocess.run([iree_tool("iree-compile"), work / "out" / f"{form}.mlir", "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
                    "-o", vmfb], check=True, capture_output=True)
    order, _ = signature(work / "out" / f"{form}.mlir")
    return vmfb, work / "out" / f"{form}.irpa", order


def feeds(form, order, inputs):
    return [inputs[("mha_" if form == "mha" and n != "q" else "") + n] for n in order]


def bench(vmfb, irpa, order, inputs):
    common = [f"--module={vmfb}", "--device=local-task", "--function=main", f"--parameters=model={irpa}",
              *[f"--input=@{i}" for i in inputs]]
    b = subprocess.run([iree_tool("iree-benchmark-module"), *common, "--benchmark_repetitions=5",
                        "--benchmark_format=json"], check=True, capture_output=True, text=True)
    runs = json.loads(b.stdout[b.stdout.index("{"):])["benchmarks"]
    median = [r for r in runs if r.get("aggregate_name") == "median"]
    step = median[0] if median else runs[0]
    unit = step.get("time_unit", "ms")
    return step["real_time"] / (1e6 if unit == "ns" else 1e3 if unit == "us" else 1)


def check(vmfb, irpa, order, inputs, want, work):
    out = work / "y.npy"
    subprocess.run([iree_tool("iree-run-module"), f"--module={vmfb}", "--device=local-task", "--function=main",
                    f"--parameters=model={irpa}", *[f"--input=@{i}" for i in inputs], f"--output=@{out}"],
                   check=True, capture_output=True)
    got = np.load(out)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--keys", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    d = pathlib.Path(a.out or tempfile.mkdtemp(prefix="gqa-bench-"))
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    q = rng.standard_normal((1, a.heads, 1, a.dim)).astype(np.float32)
    k = rng.standard_normal((1, a.kv_heads, a.keys, a.dim)).astype(np.float32)
    v = rng.standard_normal((1, a.kv_heads, a.keys, a.dim)).astype(np.float32)
    inputs = {}
    for name, x in (("q", q), ("k", k), ("v", v)):
        np.save(d / f"{name}.npy", x)
        inputs[name] = d / f"{name}.npy"
    for name, x in (("k", k), ("v", v)):
        np.save(d / f"mha_{name}.npy", np.repeat(x, a.heads // a.kv_heads, axis=1))
        inputs[f"mha_{name}"] = d / f"mha_{name}.npy"
    want = numpy_attention(q, k, v)
    dims = (a.heads, a.kv_heads, a.dim)
    times = {}
    for t in (a.keys, "?"):
        forms = ("gqa", "repeat", "mha")
        built = {form: build(d, form, dims, t) for form in forms}
        for form, (vmfb, irpa, order) in built.items():
            check(vmfb, irpa, order, feeds(form, order, inputs), want, vmfb.parent)
        for r in range(a.rounds):
            for form in (forms if r % 2 == 0 else forms[::-1]):
                vmfb, irpa, order = built[form]
                ms = bench(vmfb, irpa, order, feeds(form, order, inputs))
                times.setdefault((form, str(t)), []).append(ms)
                print(json.dumps({"form": form, "T": str(t), "round": r, "step_ms": round(ms, 4)}), flush=True)
    for t in (str(a.keys), "?"):
        g, rep, mha = (statistics.median(times[(f, t)]) for f in ("gqa", "repeat", "mha"))
        print(json.dumps({"T": t, "heads": a.heads, "kv_heads": a.kv_heads, "dim": a.dim, "keys": a.keys,
                          "gqa_ms": round(g, 4), "repeat_ms": round(rep, 4), "mha_ms": round(mha, 4),
                          "repeat_over_gqa": round(rep / g, 2), "mha_over_gqa": round(mha / g, 2)}))


if __name__ == "__main__":
    main()
