"""What IREE does with what tapeout writes, measured by IREE itself (scripts/bench; docs/performance.md).

A decode-sized step (one query row) through L square layers of D x D weights, stored in the PyTorch layout
`[out, in]` and used as `y = x @ W^T` (a `transpose` feeding a `matmul` in the graph), in safetensors as bf16. The
same graph is exported with 16-bit weights kept as stored (the default) and widened to f32 (`--half widen`), and for
each: the archive's bytes, `iree-run-module`'s peak RSS (`/usr/bin/time`), and `iree-benchmark-module`'s median time
of one step, on the host CPU. One JSON line per export form.

    python tests/bench/iree_runtime.py [--dim 8192] [--layers 8] [--out DIR]
"""
import argparse
import json
import pathlib
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from harness import iree_tool  # noqa: E402

TAPEOUT = ROOT / "target/release/tapeout"


def write_model(d, dim, layers):
    """g.json + w.safetensors: layers of bf16 [dim, dim] weights (values that keep activations O(1))."""
    header, off = {}, 0
    for i in range(layers):
        header[f"w{i}"] = {"dtype": "BF16", "shape": [dim, dim], "data_offsets": [off, off + dim * dim * 2]}
        off += dim * dim * 2
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    rng = np.random.default_rng(5)
    with open(d / "w.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _ in range(layers):
            rows = 256
            for _ in range(dim // rows):
                block = (rng.standard_normal((rows, dim), dtype=np.float32) / np.sqrt(dim)).astype(np.float32)
                f.write((block.view(np.uint32) >> 16).astype("<u2").tobytes())
    tensors = [{"name": "x", "shape": [1, dim], "dtype": "f32"}]
    nodes, h_name = [], "x"
    for i in range(layers):
        tensors += [{"name": f"w{i}", "shape": [dim, dim], "dtype": "bf16", "path": f"model.layers.{i}.weight",
                     "data": {"tensor": f"w{i}"}},
                    {"name": f"wt{i}", "shape": [dim, dim], "dtype": "f32"},
                    {"name": f"h{i}", "shape": [1, dim], "dtype": "f32"}]
        nodes += [{"op": "transpose", "inputs": [f"w{i}"], "outputs": [f"wt{i}"]},
                  {"op": "matmul", "inputs": [h_name, f"wt{i}"], "outputs": [f"h{i}"]}]
        h_name = f"h{i}"
    (d / "g.json").write_text(json.dumps({"name": "step", "tensors": tensors, "nodes": nodes, "outputs": [h_name]}))
    return off


def measure(d, form, dim, weight_bytes):
    out = d / form
    subprocess.run([TAPEOUT, "export", d / "g.json", "--weights", d / "w.safetensors", "-o", out, "--half", form],
                   check=True, capture_output=True)
    vmfb = out / "step.vmfb"
    subprocess.run([iree_tool("iree-compile"), out / "step.mlir", "--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
                    "-o", vmfb], check=True, capture_output=True)
    np.save(d / "x.npy", np.ones((1, dim), np.float32))
    common = [f"--module={vmfb}", "--device=local-task", "--function=main",
              f"--parameters=model={out / 'step.irpa'}", f"--input=@{d / 'x.npy'}"]
    rss_file = d / f"{form}.rss"
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file, iree_tool("iree-run-module"), *common,
                    f"--output=@{d / (form + '.npy')}"], check=True, capture_output=True)
    rss = int(rss_file.read_text().split()[-1]) * 1024
    b = subprocess.run([iree_tool("iree-benchmark-module"), *common, "--benchmark_repetitions=5",
                        "--benchmark_format=json"], check=True, capture_output=True, text=True)
    runs = json.loads(b.stdout[b.stdout.index("{"):])["benchmarks"]
    median = [r for r in runs if r.get("aggregate_name") == "median"]
    step_ms = (median[0] if median else runs[0])["real_time"]
    unit = (median[0] if median else runs[0]).get("time_unit", "ms")
    step_ms = step_ms / 1e6 if unit == "ns" else step_ms / 1e3 if unit == "us" else step_ms
    text = (out / "step.mlir").read_text()
    irpa = (out / "step.irpa").stat().st_size
    return {"figure": "iree_runtime", "form": form, "layout": "[out, in] via transpose", "dim": dim,
            "weight_bytes_held": weight_bytes, "irpa_bytes": irpa, "archive_vs_held": irpa / weight_bytes,
            "iree_run_peak_rss": rss, "rss_vs_archive": rss / irpa, "step_ms": step_ms,
            "weight_transposes_in_module": len(re.findall(r"stablehlo\.transpose %v\d+, dims = \[1, 0\]", text)),
            "output": np.load(d / (form + ".npy")).tolist()[0][:4]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=8192)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.out) as d:
        d = pathlib.Path(d)
        held = write_model(d, a.dim, a.layers)
        rows = [measure(d, form, a.dim, held) for form in ("keep", "widen")]
        keep, widen = rows
        assert np.allclose(keep["output"], widen["output"], rtol=1e-5, atol=1e-6), (keep["output"], widen["output"])
        keep["step_vs_widened"] = keep["step_ms"] / widen["step_ms"]
        for r in rows:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
