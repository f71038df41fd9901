"""scripts/gpu-check: the IREE gate's cases on this machine's GPUs, checked against the gate's own oracles.

tests/iree/test_gpu_compile.py proves on any machine that every module of the gate compiles for CUDA and ROCm; only
a GPU shows whether IREE runs them and computes the right numbers. This script finds which of IREE's GPU drivers
(cuda, hip, vulkan) have a device here (`iree.runtime.query_available_drivers()`, then creating the device), and for
each one exports every case for that device (`tapeout export --target`), compiles it for that GPU and runs it there:

- every test graph (tests/graphs), against the numpy interpreter tests/graphs/reference.py, as
  tests/iree/test_graphs.py does (the same export flags, inputs and tolerances: its code is called);
- the graphs with 16-bit weights (bf16 / f16), kept as stored and widened to f32, against the same interpreter;
- every packed format of tests/iree/test_packed.py's graph kept packed (a linear, a gather, a tied head and a `[K, N]`
  matmul), against PyPI gguf's dequantizer in float64.

Each device gets a table of cases right, wrong (ran, numbers off the oracle) and refused (export, iree-compile or the
runtime said no), with the names of the wrong and refused ones, and the time of one call of one module on it beside
the CPU's. The exit status is 1 when any case is wrong (2 with --strict when one is refused and none wrong): a
refusal is a missing feature, a wrong number is a bug.

The GPU's target: for CUDA the device's compute capability (libcuda, else nvidia-smi), unless IREE 3.13 has no
target for it (sm_90 and sm_100: iree-org/iree#22147), then sm_80, whose PTX the driver compiles for any newer GPU;
`--cuda-target` or TAPEOUT_CUDA_TARGET overrides it. For ROCm `--rocm-target`, TAPEOUT_ROCM_TARGET, else the first
agent `rocm_agent_enumerator` lists, else gfx942. On a machine without a GPU, Vulkan runs on Mesa's lavapipe (a
CPU implementation: right numbers, no speed) and CUDA / HIP are reported absent."""
import argparse
import concurrent.futures
import ctypes
from importlib import metadata
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "iree")]

import numpy as np  # noqa: E402
import iree.runtime as rt  # noqa: E402

import harness  # noqa: E402
from harness import CPU, ROOT, VULKAN, Device, iree_tool  # noqa: E402
import test_graphs  # noqa: E402
import test_packed  # noqa: E402

DRIVERS = ["cuda", "hip", "vulkan"]
GROUPS = ["test graphs", "16-bit weights", "packed, kept"]
TIMED = "transformer"  # tests/graphs/transformer: 2 decoder layers over 6 tokens


# --- which GPU, which target ----------------------------------------------------------------------------------------

def driver_device(driver):
    """`(name of its first device, None)` when IREE's `driver` has a device here, else `(None, why not)`."""
    if driver not in rt.query_available_drivers():
        return None, f"this IREE runtime has no {driver} driver"
    try:
        devices = rt.get_driver(driver).query_available_devices()
        rt.get_device(driver)
    except Exception as e:  # noqa: BLE001 (IREE raises RuntimeError / ValueError, with its status text)
        return None, str(e).splitlines()[0]
    return (devices[0].get("name") if devices else driver), None


def compiles_for(flags, work):
    """Whether iree-compile builds a one-op module with `flags`: IREE 3.13 names targets it cannot configure."""
    src = work / "probe.mlir"
    src.write_text("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                   "  %b = stablehlo.add %a, %a : tensor<4xf32>\n  return %b : tensor<4xf32>\n}\n")
    r = subprocess.run([iree_tool("iree-compile"), src, *flags, "-o", work / "probe.vmfb"], capture_output=True)
    return r.returncode == 0


def cuda_capability():
    """`sm_XY` of CUDA device 0, from libcuda (cuDeviceGetAttribute), else nvidia-smi; None when neither says."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        if (cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
                and cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev) == 0    # COMPUTE_CAPABILITY_MAJOR
                and cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev) == 0):  # COMPUTE_CAPABILITY_MINOR
            return f"sm_{major.value}{minor.value}"
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True).stdout.split()
        return "sm_" + out[0].replace(".", "") if out else None
    except (OSError, subprocess.CalledProcessError):
        return None


def cuda_device(args, work):
    """The CUDA Device and where its target came from."""
    flags = lambda sm: ("--iree-hal-target-device=cuda", f"--iree-cuda-target={sm}")  # noqa: E731
    given = args.cuda_target or os.environ.get("TAPEOUT_CUDA_TARGET")
    if given:
        return Device("cuda", "cuda", flags(given), "cuda"), f"{given} (given)"
    sm = cuda_capability()
    if sm is None:
        return Device("cuda", "cuda", flags("sm_80"), "cuda"), "sm_80 (the default: no compute capability found)"
    if compiles_for(flags(sm), work):
        return Device("cuda", "cuda", flags(sm), "cuda"), f"{sm} (the device's)"
    return (Device("cuda", "cuda", flags("sm_80"), "cuda"),
            f"sm_80 (the device is {sm}, which IREE 3.13 cannot target; the driver compiles sm_80's PTX for it)")


def rocm_device(args):
    """The ROCm (HIP) Device and where its target came from."""
    given = args.rocm_target or os.environ.get("TAPEOUT_ROCM_TARGET")
    how = "given"
    if not given:
        try:
            agents = subprocess.run(["rocm_agent_enumerator"], capture_output=True, text=True).stdout.split()
            given, how = next(a for a in agents if a != "gfx000"), "rocm_agent_enumerator"
        except (OSError, StopIteration):
            given, how = "gfx942", "the default"
    return Device("rocm", "rocm", ("--iree-hal-target-device=hip", f"--iree-rocm-target={given}"), "hip"), \
        f"{given} ({how})"


# --- the cases ------------------------------------------------------------------------------------------------------

def packed_weights(work):
    """tests/iree/test_packed.py's GGUF file (an `[N, K]` and a `[K, N2]` weight of every format, the same random
    blocks) and its weights as PyPI gguf dequantizes them."""
    return test_packed.every_format_gguf(work / "packed.gguf")


def check_graph(tapeout, name, work, device, extra=()):
    graph, feeds, outs, _ = test_graphs.compile_and_run(tapeout, name, work, extra=extra, device=device)
    for i, (got, want) in enumerate(zip(outs, graph.evaluate(feeds))):
        test_graphs.assert_matches(got, want, f"output {i} ({graph.doc['outputs'][i]})")


def check_packed(tapeout, fmt, work, device, weights):
    """tests/iree/test_packed.py's case on `device`: its graph, inputs, oracle and tolerance."""
    path, dense = weights
    work.mkdir(parents=True)
    (work / "g.json").write_text(json.dumps(test_packed.graph(fmt)))
    out = work / "out"
    harness.run(tapeout, "export", work / "g.json", "--weights", path, "-o", out, "--packed", "keep",
                "--target", device.target)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, test_packed.K)).astype(np.float32)
    ids = np.array([0, 63, 17, 5], np.int32)
    x2 = rng.standard_normal((2, test_packed.K)).astype(np.float32)
    feeds = {"x": x, "ids": ids, "x2": x2}
    order, _ = harness.signature(out / "packed.mlir")
    outs = harness.compile_and_run_iree(work, out / "packed.mlir", [out / "packed.irpa"], [feeds[n] for n in order],
                                        outputs=4, device=device)
    w, wm = dense[f"{fmt}.w"], dense[f"{fmt}.wm"]
    want = {"y": x @ w.T, "e": w[ids], "logits": w[ids] @ w.T, "y2": x2 @ wm}
    for got, name in zip(outs, ["y", "e", "logits", "y2"]):
        np.testing.assert_allclose(got.astype(np.float64), want[name], rtol=1e-5,
                                   atol=1e-5 * np.abs(want[name]).max(), err_msg=f"{fmt} {name}")


def cases(tapeout, device, work, weights):
    """`(group, case name, thunk)` of every case on `device`, each in its own directory under `work`."""
    half = test_graphs.HALF_GRAPHS
    for name in test_graphs.GRAPHS:
        if name not in half:
            yield GROUPS[0], name, lambda n=name: check_graph(tapeout, n, work / n, device)
    for name in half:
        for form in ("keep", "widen"):
            yield GROUPS[1], f"{name} {form}", \
                lambda n=name, f=form: check_graph(tapeout, n, work / f"{n}-{f}", device, ["--half", f])
    for fmt in test_packed.FORMATS:
        yield GROUPS[2], fmt, lambda f=fmt: check_packed(tapeout, f, work / f"packed-{f}", device, weights)


def first_error(text, limit=300):
    """The first line of a tool's stderr that says `error` (else its last line), cut at `limit` characters."""
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    line = next((line for line in lines if "error" in line.lower()), lines[-1] if lines else "")
    return line[:limit]


def refusal(e, limit=300):
    """`tool: first error line` of a failed command (the tool named once: tapeout's errors start with its name)."""
    tool, line = pathlib.Path(str(e.cmd[0])).name, first_error(e.stderr or "", limit)
    return line if line.startswith(f"{tool}:") else f"{tool}: {line}"


def outcome(thunk):
    """`("right" | "wrong" | "refused", detail)` of one case: refused when tapeout, iree-compile or the runtime
    fails (the tool and its first error line), wrong when the numbers are off the oracle (or its check fails)."""
    try:
        thunk()
        return "right", ""
    except subprocess.CalledProcessError as e:
        return "refused", refusal(e)
    except AssertionError as e:
        return "wrong", " ".join(str(e).split())[:300]
    except Exception as e:  # noqa: BLE001 (a crash of the check itself is not a right answer)
        return "wrong", f"{type(e).__name__}: {e}"[:300] + " | " + traceback.format_exc().splitlines()[-3][:200]


# --- timing ---------------------------------------------------------------------------------------------------------

def call_ms(tapeout, device, work, repetitions):
    """Median milliseconds of one call of tests/graphs/transformer's `main` on `device` (iree-benchmark-module,
    inputs from tests/iree/test_graphs.py), or the refusal's text."""
    work.mkdir(parents=True, exist_ok=True)
    try:
        test = json.loads((test_graphs.GRAPHS_DIR / f"{TIMED}.test.json").read_text())
        out = work / "out"
        harness.run(tapeout, "export", test_graphs.GRAPHS_DIR / f"{TIMED}.json", "--weights",
                    test_graphs.GRAPHS_DIR / f"{TIMED}.safetensors", "-o", out, "--target", device.target,
                    *test_graphs.export_flags(test))
        (mlir,) = out.glob("*.mlir")
        (irpa,) = out.glob("*.irpa")
        graph = test_graphs.reference.Graph(test_graphs.GRAPHS_DIR / f"{TIMED}.json",
                                            test_graphs.GRAPHS_DIR / f"{TIMED}.safetensors")
        feeds = test_graphs.make_inputs(graph, test, np.random.default_rng(0))
        order, _ = harness.signature(mlir)
        inputs = []
        for i, name in enumerate(order):
            np.save(work / f"in{i}.npy", feeds[name])
            inputs.append(f"--input=@{work / f'in{i}.npy'}")
        vmfb = harness.compile_iree(work, mlir, device=device)
        text = harness.bench_sh("gpu-check", iree_tool("iree-benchmark-module"), f"--device={device.driver}",
                                f"--module={vmfb}", "--function=main", f"--parameters={test['scope']}={irpa}",
                                *inputs, f"--benchmark_repetitions={repetitions}")
        return harness.benchmark_median_ms("gpu-check", text)
    except subprocess.CalledProcessError as e:
        return f"refused ({refusal(e, 160)})"
    except SystemExit as e:
        return f"refused ({first_error(str(e), 160)})"


# --- the report -----------------------------------------------------------------------------------------------------

def check_device(args, driver, label, device, how, work, weights):
    """Runs every case on `device`, prints its table; returns `(wrong, refused)` counts."""
    print(f"\n== {driver}: {label}")
    print(f"   export --target {device.target}; iree-compile {' '.join(device.compile_flags)}"
          + (f"; target {how}" if how else ""))
    todo = list(cases(args.tapeout, device, work, weights))
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: outcome(c[2]), todo))
    tally = {g: {"right": 0, "wrong": 0, "refused": 0} for g in GROUPS}
    for (group, _, _), (verdict, _) in zip(todo, results):
        tally[group][verdict] += 1
    print(f"   {'cases':<16}{'right':>6}{'wrong':>7}{'refused':>9}")
    for group in GROUPS:
        t = tally[group]
        print(f"   {group:<16}{t['right']:>6}{t['wrong']:>7}{t['refused']:>9}")
    total = {k: sum(t[k] for t in tally.values()) for k in ("right", "wrong", "refused")}
    print(f"   {'all':<16}{total['right']:>6}{total['wrong']:>7}{total['refused']:>9}   ({time.time() - start:.0f} s)")
    for verdict in ("wrong", "refused"):
        named = [(group, name, detail) for (group, name, _), (v, detail) in zip(todo, results) if v == verdict]
        if named:
            print(f"   {verdict}: {', '.join(name for _, name, _ in named)}")
            for group, name, detail in named:
                print(f"     {name} ({group}): {detail}")
    if not args.no_timing:
        reps = args.repetitions
        gpu = call_ms(args.tapeout, device, work / "timing", reps)
        if "cpu" not in args.cpu_ms:  # once for every device
            args.cpu_ms["cpu"] = call_ms(args.tapeout, CPU, args.work / "timing-cpu", reps)
        cpu = args.cpu_ms["cpu"]
        show = lambda v: f"{v:g} ms" if isinstance(v, float) else v  # noqa: E731 (as printed: 3 digits)
        print(f"   one call of tests/graphs/{TIMED} main (2 decoder layers, 6 tokens; iree-benchmark-module median of"
              f" {reps}):")
        print(f"     {driver:<8}{show(gpu)}" + ("   (lavapipe runs Vulkan on the CPU: no GPU's speed)"
                                                   if "llvmpipe" in label else ""))
        print(f"     {'cpu':<8}{show(cpu)}   (llvm-cpu, generic CPU, local-task: the gate's CPU build)")
    return total["wrong"], total["refused"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tapeout", type=pathlib.Path,
                    default=pathlib.Path(os.environ.get("TAPEOUT_BIN", ROOT / "target/release/tapeout")))
    ap.add_argument("--work", type=pathlib.Path, default=ROOT / "target/gpu-check",
                    help="where the exports, modules and inputs go (emptied first; kept for a look at a failure)")
    ap.add_argument("--drivers", default=",".join(DRIVERS), help="which of cuda,hip,vulkan to try")
    ap.add_argument("--cuda-target", help="--iree-cuda-target (default: the device's, else sm_80)")
    ap.add_argument("--rocm-target", help="--iree-rocm-target (default: rocm_agent_enumerator's, else gfx942)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cases compiled and run at once")
    ap.add_argument("--repetitions", type=int, default=20, help="iree-benchmark-module repetitions of the timing")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--strict", action="store_true", help="also exit non-zero (2) when a case is refused")
    args = ap.parse_args()
    args.cpu_ms = {}
    if not args.tapeout.exists():
        sys.exit(f"gpu-check: {args.tapeout} is missing: build it (cargo build --release -p tapeout-cli)")
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    print(f"gpu-check: {args.tapeout}; IREE runtime {metadata.version('iree-base-runtime')} (drivers "
          f"{', '.join(rt.query_available_drivers())}), compiler {metadata.version('iree-base-compiler')}; "
          f"work in {args.work}")
    weights = packed_weights(args.work)
    wrong = refused = 0
    for driver in args.drivers.split(","):
        label, why_not = driver_device(driver)
        if label is None:
            print(f"\n== {driver}: no {driver} device ({why_not})")
            continue
        work = args.work / driver
        work.mkdir()
        if driver == "cuda":
            device, how = cuda_device(args, work)
        elif driver == "hip":
            device, how = rocm_device(args)
        else:
            device, how = VULKAN, "IREE's default Vulkan profile"
        w, r = check_device(args, driver, label, device, how, work, weights)
        wrong, refused = wrong + w, refused + r
    print(f"\ngpu-check: {wrong} wrong, {refused} refused")
    sys.exit(1 if wrong else 2 if refused and args.strict else 0)


if __name__ == "__main__":
    main()
