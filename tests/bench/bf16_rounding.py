"""The cost of rounding f32 to bf16 in integer arithmetic (docs/performance.md#weights-in-iree).

tapeout writes every f32 -> bf16 conversion as integer arithmetic on the bits (IREE 3.13 otherwise folds an
integer-to-bf16 chain into a call its CPU executables cannot link; tests/iree/test_bf16_rounding.py). The baseline is
what tapeout wrote before: one `stablehlo.convert`, which IREE lowers itself. Both modules round trip N f32 values
through bf16 (N = 2^22 and an odd N), are compiled for the host CPU, checked against ml_dtypes on the same finite
input, and timed with `iree-benchmark-module` (median of 5 repetitions) in alternating rounds. One JSON line per form
and round, then per N the median ratio ours / native.

    python tests/bench/bf16_rounding.py [--rounds 5] [--out DIR]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests/bench"))
from gqa_decode import bench  # noqa: E402
from harness import iree_tool, write_graph, t, n  # noqa: E402

TAPEOUT = ROOT / "target/release/tapeout"
NATIVE = """module @native {{
  func.func @main(%arg0: tensor<{n}xf32>) -> tensor<{n}xf32> {{
    %0 = stablehlo.convert %arg0 : (tensor<{n}xf32>) -> tensor<{n}xbf16>
    %1 = stablehlo.convert %0 : (tensor<{n}xbf16>) -> tensor<{n}xf32>
    return %1 : tensor<{n}xf32>
  }}
}}
"""


def build(work, size):
    """(native vmfb, ours vmfb, ours irpa) for `size` values."""
    work.mkdir(parents=True, exist_ok=True)
    g = write_graph(work, "ours", [t("x", [size]), t("h", [size], "bf16"), t("y", [size])],
                    [n("convert", ["x"], "h"), n("convert", ["h"], "y")], ["y"])
    subprocess.run([TAPEOUT, "export", g, "--weights", work / "ours.safetensors", "-o", work / "out"], check=True,
                   capture_output=True)
    (work / "native.mlir").write_text(NATIVE.format(n=size))
    vmfbs = []
    for name, mlir in (("native", work / "native.mlir"), ("ours", work / "out/ours.mlir")):
        vmfb = work / f"{name}.vmfb"
        subprocess.run([iree_tool("iree-compile"), mlir, "--iree-hal-target-device=local",
                        "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
                        "-o", vmfb], check=True, capture_output=True)
        vmfbs.append(vmfb)
    return vmfbs[0], vmfbs[1], work / "out/ours.irpa"


def check(vmfb, irpa, x_file, want, work):
    out = work / f"{vmfb.stem}-y.npy"
    subprocess.run([iree_tool("iree-run-module"), f"--module={vmfb}", "--device=local-task", "--function=main",
                    f"--parameters=model={irpa}", f"--input=@{x_file}", f"--output=@{out}"], check=True,
                   capture_output=True)
    got = np.load(out)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"{vmfb.stem} differs from ml_dtypes"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    d = pathlib.Path(a.out or tempfile.mkdtemp(prefix="bf16-bench-"))
    rng = np.random.default_rng(5)
    for size in (1 << 22, (1 << 22) - 3):
        work = d / str(size)
        native, ours, irpa = build(work, size)
        x = (rng.standard_normal(size) * 1e3).astype(np.float32)
        np.save(work / "x.npy", x)
        want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
        for vmfb in (native, ours):
            check(vmfb, irpa, work / "x.npy", want, work)
        times = {"native": [], "ours": []}
        for r in range(a.rounds):
            for form in (("native", "ours") if r % 2 == 0 else ("ours", "native")):
                ms = bench(native if form == "native" else ours, irpa, ["x"], [work / "x.npy"])
                times[form].append(ms)
                print(json.dumps({"form": form, "N": size, "round": r, "step_ms": round(ms, 4)}), flush=True)
        nat, our = statistics.median(times["native"]), statistics.median(times["ours"])
        print(json.dumps({"N": size, "native_ms": round(nat, 4), "ours_ms": round(our, 4),
                          "ours_over_native": round(our / nat, 2)}))


if __name__ == "__main__":
    main()
