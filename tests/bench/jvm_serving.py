"""Serving from the JVM (scripts/bench; docs/performance.md#serving-from-the-jvm): one decode step of an export of
examples/tiny-llm, the same vmfb and the same inputs, called three ways in alternating rounds, each a process of
its own:

- from Kotlin through dev.tapeout.iree (examples/tiny-llm's ServeBench: the arguments uploaded once, then
  `repeats` calls, each reading the logits back to the host);
- from IREE's Python runtime (iree.runtime, the same calls on device arrays);
- by `iree-benchmark-module --function=decode` (its median of `repeats`-call repetitions).

Also from the Kotlin process (its /proc/self/status): RSS at JVM start (before the native library is loaded), and
after loading the module and serving, peak RSS, RssFile and RssAnon: the archive's pages are file-backed (mapped,
not copied), and peak RSS beyond the JVM's own against the archive's size.

    python tests/bench/jvm_serving.py EXPORT_DIR --classpath-file F [--name tiny_llm] [--rounds 5] [--repeats 200]
        [--workers 2] [--out DIR] [--position 63]

One JSON line: each way's median step time (ms; the median of the per-round medians), Kotlin's ratio to the best of
the other two, and the memory figures.
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from harness import iree_tool  # noqa: E402


def decode_signature(mlir):
    """decode's arguments, in order: (name, dims, numpy dtype), from the module text (tapeout.name attributes)."""
    text = pathlib.Path(mlir).read_text()
    head = re.search(r"func\.func @decode\((.*?)\) ->", text, re.S).group(1)
    args = []
    for m in re.finditer(r"%\w+: tensor<([^>]*)>\s*\{tapeout\.name = \"([^\"]+)\"", head):
        *dims, dt = m.group(1).split("x") if "x" in m.group(1) else [m.group(1)]
        args.append((m.group(2), [int(d) for d in dims], {"f32": np.float32, "i32": np.int32, "i64": np.int64}[dt]))
    return args


def write_inputs(d, mlir, position):
    """One .npy per decode argument: token 5 at `position`, caches of seeded normal values (rows after `position`
    masked by the model)."""
    rng = np.random.default_rng(7)
    paths = []
    for name, dims, dt in decode_signature(mlir):
        if name == "token":
            a = np.array([5], dt)
        elif name in ("position", "pos"):
            a = np.full(dims, position, dt) if dims else np.array(position, dt)
        else:
            a = rng.standard_normal(dims, dtype=np.float32).astype(dt)
        p = d / f"{name}.npy"
        np.save(p, a)
        paths.append(p)
    return paths


PYTHON_STEP = r"""
import sys, time, json
import numpy as np
import iree.runtime as rt
vmfb, irpa, repeats, workers, *inputs = sys.argv[1:]
rt.flags.parse_flags(f"--task_topology_max_group_count={workers}")
config = rt.Config("local-task")
index = rt.ParameterIndex()
index.load(irpa, mmap=True)
m = rt.load_vm_modules(rt.create_io_parameters_module(config.vm_instance, index.create_provider(scope="model")),
                       rt.create_hal_module(config.vm_instance, config.device),
                       rt.VmModule.mmap(config.vm_instance, vmfb), config=config)[-1]
args = [rt.asdevicearray(config.device, np.load(p)) for p in inputs]
for _ in range(5):
    m.decode(*args)[0].to_host()
times = []
for _ in range(int(repeats)):
    t0 = time.perf_counter()
    out = m.decode(*args)
    np.asarray(out[0].to_host())
    times.append(time.perf_counter() - t0)
logits = np.asarray(m.decode(*args)[0].to_host()).reshape(-1)
print(json.dumps({"step_ms": 1e3 * float(np.median(times)), "logits_head": logits[:4].tolist()}))
"""


def python_round(vmfb, irpa, inputs, repeats, workers):
    r = subprocess.run([str(ROOT / ".venv/bin/python"), "-c", PYTHON_STEP, str(vmfb), str(irpa), str(repeats),
                        str(workers), *map(str, inputs)], check=True, capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def benchmark_round(vmfb, irpa, inputs, repeats, workers):
    b = subprocess.run([iree_tool("iree-benchmark-module"), f"--module={vmfb}", "--device=local-task",
                        f"--task_topology_max_group_count={workers}", "--function=decode",
                        f"--parameters=model={irpa}", *[f"--input=@{i}" for i in inputs],
                        f"--benchmark_min_time={repeats}x", "--benchmark_repetitions=3", "--benchmark_format=json"],
                       check=True, capture_output=True, text=True)
    runs = json.loads(b.stdout[b.stdout.index("{"):])["benchmarks"]
    median = [r for r in runs if r.get("aggregate_name") == "median"] or runs
    unit = median[0].get("time_unit", "ms")
    return {"step_ms": median[0]["real_time"] / (1e6 if unit == "ns" else 1e3 if unit == "us" else 1)}


def kotlin_round(classpath, vmfb, irpa, inputs_dir, repeats, workers):
    java = "java"
    r = subprocess.run([java, "-Xmx256m", "-cp", classpath, "dev.tapeout.examples.ServeBench", str(vmfb), str(irpa),
                        str(inputs_dir), str(repeats), str(workers)], check=True, capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("export", type=pathlib.Path)
    ap.add_argument("--classpath-file", type=pathlib.Path, required=True)
    ap.add_argument("--name", default="tiny_llm")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--position", type=int, default=63)
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "target/bench-tmp")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    classpath = a.classpath_file.read_text().strip()
    mlir, irpa = a.export / f"{a.name}.mlir", a.export / f"{a.name}.irpa"
    with tempfile.TemporaryDirectory(dir=a.out) as d:
        d = pathlib.Path(d)
        vmfb = d / "serve.vmfb"
        subprocess.run([iree_tool("iree-compile"), mlir, "--iree-hal-target-device=local",
                        "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
                        "-o", vmfb], check=True, capture_output=True)
        inputs = write_inputs(d, mlir, a.position)
        ways = {"kotlin": [], "python": [], "benchmark_module": []}
        last = {}
        for _ in range(a.rounds):
            last["kotlin"] = kotlin_round(classpath, vmfb, irpa, d, a.repeats, a.workers)
            ways["kotlin"].append(last["kotlin"]["step_ms"])
            last["python"] = python_round(vmfb, irpa, inputs, a.repeats, a.workers)
            ways["python"].append(last["python"]["step_ms"])
            ways["benchmark_module"].append(benchmark_round(vmfb, irpa, inputs, a.repeats, a.workers)["step_ms"])
        # The same numbers both ways (the first logits of one step), or the times compare different work.
        k, p = np.array(last["kotlin"]["logits_head"]), np.array(last["python"]["logits_head"])
        assert np.allclose(k, p, rtol=1e-6, atol=1e-6), (k, p)
        med = {w: float(np.median(v)) for w, v in ways.items()}
        best_other = min(med["python"], med["benchmark_module"])
        mem = last["kotlin"]["memory"]
        archive = irpa.stat().st_size
        beyond_jvm = mem["peak_rss"] - mem["jvm_start_rss"]
        print(json.dumps({
            "figure": "jvm_serving", "export": a.export.name, "position": a.position, "workers": a.workers,
            "rounds": a.rounds, "repeats": a.repeats,
            "kotlin_step_ms": med["kotlin"], "python_step_ms": med["python"],
            "benchmark_module_step_ms": med["benchmark_module"], "kotlin_over_best": med["kotlin"] / best_other,
            "per_round_ms": ways, "archive_bytes": archive, **mem,
            "peak_beyond_jvm_bytes": beyond_jvm,
            "peak_beyond_jvm_over_archive_plus_64mib": beyond_jvm / (1.05 * archive + (64 << 20)),
            "rss_file_over_archive": mem["rss_file"] / archive,
            "rss_anon_growth_bytes": mem["rss_anon"] - mem["jvm_start_rss_anon"],
        }))


if __name__ == "__main__":
    main()
