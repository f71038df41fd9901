"""Helpers shared by the Python tests: running binaries and IREE's tools."""
import fcntl
import os
import pathlib
import re
import subprocess
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
VENV_BIN = pathlib.Path(os.environ.get("TAPEOUT_VENV", ROOT / ".venv")) / "bin"


def iree_tool(name: str) -> str:
    return str(VENV_BIN / name)


def gradle_run(cmd, **kw) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, **kw)` for a command that runs Gradle (or scripts/publish, which does), holding a lock
    file for its duration: scripts/test runs the test files on two pytest-xdist workers, and two Gradle 4.4.1 builds
    of this repository at once would write the same jars and class directories (a temporary project reads them)."""
    lock = ROOT / "target" / "test-gradle.lock"
    lock.parent.mkdir(exist_ok=True)
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            return subprocess.run(cmd, **kw)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run(*args, check=True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=check, **kw)


def bench_sh(who, *args, **kw) -> str:
    """A benchmark script's command: its stdout, or SystemExit naming `who`, the command and the tail of its stderr
    (or that the program is missing)."""
    try:
        r = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    except FileNotFoundError:
        raise SystemExit(f"{who}: {args[0]} not found")
    if r.returncode != 0:
        raise SystemExit(f"{who}: {' '.join(map(str, args[:3]))} … failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return r.stdout


def benchmark_median_ms(who, out) -> float:
    """The `real_time_median` of `iree-benchmark-module --benchmark_repetitions=N` output, in milliseconds."""
    m = re.search(r"real_time_median\s+([\d.]+) ms", out)
    if not m:
        raise SystemExit(f"{who}: no median in iree-benchmark-module's output:\n{out[-2000:]}")
    return float(m.group(1))


@dataclass(frozen=True)
class Device:
    """Where the IREE gate runs a module: the `tapeout export --target` it asks for, iree-compile's flags for it and
    the runtime driver that runs it. `vulkan` is IREE's default Vulkan profile (32-bit storage only, no subgroups),
    what a module compiled without naming a GPU gets, run on Mesa's lavapipe (installed by scripts/setup)."""
    name: str
    target: str
    compile_flags: tuple
    driver: str


CPU = Device("cpu", "llvm-cpu", ("--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                                 "--iree-llvmcpu-target-cpu=generic"), "local-task")
VULKAN = Device("vulkan", "vulkan", ("--iree-hal-target-device=vulkan",), "vulkan")
# Compiled only (no device here): every module of the gate must compile for them (tests/iree/test_gpu_compile.py).
CUDA = Device("cuda", "cuda", ("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"), "cuda")
ROCM = Device("rocm", "rocm", ("--iree-hal-target-device=hip", "--iree-rocm-target=gfx942"), "hip")
DEVICES = {d.name: d for d in (CPU, VULKAN, CUDA, ROCM)}
# The devices the gate runs on here.
RUN_DEVICES = ["cpu", "vulkan"]


def compile_iree(work, mlir, name="m", device=CPU):
    """Compiles `mlir` for `device` (a generic CPU by default) into `work/<name>.vmfb` and returns its path
    (CalledProcessError with iree-compile's stderr when it refuses the module)."""
    vmfb = pathlib.Path(work) / f"{name}.vmfb"
    run(iree_tool("iree-compile"), mlir, *device.compile_flags, "-o", vmfb)
    return vmfb


def run_iree(work, vmfb, archives, inputs, outputs=1, scope="model", function="main", tag="", device=CPU):
    """Runs `function` of the compiled `vmfb` on `device` with the `inputs` (numpy arrays, in argument order) and
    every archive bound to `scope`, and returns the `outputs` results as numpy arrays (files `work/in<tag><i>.npy` and
    `work/out<tag><i>.npy`, so runs with different tags can share `work`)."""
    import numpy as np
    work = pathlib.Path(work)
    args = []
    for i, x in enumerate(inputs):
        np.save(work / f"in{tag}{i}.npy", x)
        args.append(f"--input=@{work / f'in{tag}{i}.npy'}")
    outs = [work / f"out{tag}{i}.npy" for i in range(outputs)]
    run(iree_tool("iree-run-module"), f"--device={device.driver}", f"--module={vmfb}", f"--function={function}",
        *[f"--parameters={scope}={a}" for a in archives], *args, *[f"--output=@{o}" for o in outs])
    return [np.load(o) for o in outs]


def compile_and_run_iree(work, mlir, archives, inputs, outputs=1, scope="model", function="main", device=CPU):
    """Compiles `mlir` for `device`, runs `function` on the `inputs` (numpy arrays, in argument order) with every
    archive bound to `scope`, and returns the `outputs` results as numpy arrays."""
    vmfb = compile_iree(work, mlir, device=device)
    return run_iree(work, vmfb, archives, inputs, outputs, scope, function, device=device)


def write_safetensors_2d(path, name, w, dtype):
    """One f32 matrix `w` into a safetensors file as F32, or as BF16 (its top halves); returns the values as stored
    (rounded to bf16 for BF16) and the raw bytes."""
    import json
    import numpy as np
    if dtype == "bf16":
        bits = (w.view(np.uint32) >> 16).astype("<u2")
        w = (bits.astype(np.uint32) << 16).view(np.float32)
        blob, st = bits.tobytes(), "BF16"
    else:
        blob, st = w.astype("<f4").tobytes(), "F32"
    h = json.dumps({name: {"dtype": st, "shape": list(w.shape), "data_offsets": [0, len(blob)]}}).encode()
    h += b" " * ((-len(h)) % 8)
    pathlib.Path(path).write_bytes(len(h).to_bytes(8, "little") + h + blob)
    return w, blob


def signature(mlir, function="main"):
    """`(argument names, result names)` of `function`, from the signature file tapeout writes beside the module
    `mlir` (`<name>.signature.json`, docs/signature-format.md)."""
    import json
    mlir = pathlib.Path(mlir)
    doc = json.loads(mlir.with_name(mlir.name[: -len(".mlir")] + ".signature.json").read_text())
    [f] = [f for f in doc["functions"] if f["name"] == function]
    return [a["name"] for a in f["arguments"]], [r["name"] for r in f["results"]]


# --- graph-format cases written from Python (tests/iree/test_dynamic.py, test_attention.py) ----------------------

def t(name, shape, dtype="f32", weight=None):
    """A graph tensor spec; with `weight` (a numpy array) a constant read from the case's safetensors file."""
    spec = {"name": name, "shape": shape, "dtype": dtype}
    if weight is not None:
        spec["data"] = {"safetensors": name}
        spec["_value"] = weight
    return spec


def n(op, inputs, out, **attrs):
    """A graph node of one output."""
    return {"op": op, "inputs": inputs, "outputs": [out], "attrs": attrs}


def narrow_boundary(tensors, nodes, outputs):
    """The first function argument narrower than 32 bits (bool too), or narrow result other than bool, of a graph
    written with `t` / `n`, if any: what `tapeout export --target vulkan` refuses (docs/devices.md)."""
    produced = {o for nd in nodes for o in nd["outputs"]}
    narrow = {"f16", "bf16", "i16", "u16", "i8", "u8"}
    for spec in tensors:
        is_arg = spec["name"] not in produced and "_value" not in spec
        if (is_arg and spec["dtype"] in narrow | {"bool"}) or (spec["name"] in outputs and spec["dtype"] in narrow):
            return spec["name"]
    return None


def write_graph(tmp, name, tensors, nodes, outputs, static=None):
    """The graph file `tmp/<name>.json` (each `?` made `static` when given) and its weights `<name>.safetensors`."""
    import json
    import numpy as np
    from safetensors.numpy import save_file
    weights, specs = {}, []
    for spec in tensors:
        spec = dict(spec)
        if "_value" in spec:
            weights[spec["name"]] = spec.pop("_value")
        if static is not None:
            spec["shape"] = [static if d == "?" else d for d in spec["shape"]]
        specs.append(spec)
    g = pathlib.Path(tmp) / f"{name}.json"
    g.write_text(json.dumps({"name": name, "tensors": specs, "nodes": nodes, "outputs": outputs}))
    save_file(weights or {"unused": np.zeros(1, np.float32)}, str(pathlib.Path(tmp) / f"{name}.safetensors"))
    return g


def row_bands(rows):
    """Source rows per band of a linear's weight as tapeout stores it (docs/graph-format.md, "Weight layout"): 32,
    16 or 8, the first that divides `rows` and is smaller; else all rows (the plain transpose)."""
    return next((t for t in (32, 16, 8) if rows % t == 0 and rows > t), rows)


def banded(w):
    """A linear's row-major `[out, in]` weight as tapeout stores it: `[out / T, in, T]` (element `[b, k, t]` is
    `w[b*T + t, k]`), or `[in, out]` when no band size divides `out`."""
    import numpy as np
    rows, cols = w.shape
    t = row_bands(rows)
    if t == rows:
        return np.ascontiguousarray(w.T)
    return np.ascontiguousarray(w.reshape(rows // t, t, cols).transpose(0, 2, 1))


def transposes_of(text, key):
    """The `stablehlo.transpose` lines of a module whose operand is the parameter `key` (as loaded, or converted)."""
    import re
    names = set(re.findall(rf"(%\w+) = util\.global\.load @{re.escape(key)}\b", text))
    for a, b in re.findall(r"(%\w+) = stablehlo\.convert (%\w+)", text):
        if b in names:
            names.add(a)
    return [line for line in text.splitlines() if "stablehlo.transpose" in line
            and any(re.search(rf"stablehlo\.transpose {re.escape(n)}\b", line) for n in names)]
