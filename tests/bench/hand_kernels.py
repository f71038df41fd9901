"""Hand-written kernels in IREE's dispatches (issue 30; recorded in
docs/benchmarks/2026-12-04.md): is IREE 3.13's code for one linear's product the limit, or the bytes?

    python tests/bench/hand_kernels.py [--out DIR] [--rounds 4] [--threads 2] [--n 16384] [--k 4096] [--q8-dim 8192]

One decode-shaped product `y = W x` (x f32, one row), timed by `iree-benchmark-module` in alternating rounds, each
form checked against a float64 numpy product of the same stored values (relative error: the largest absolute
error over the largest |reference|; the script fails above 1e-5):

- bf16 `[n, k]`, 128 MiB by default:
  - `codegen_bands`: what tapeout emits for it (the weight in row bands `[n / 32, k, 32]`, `x` broadcast to every
    band, a batched `dot_general`), compiled by IREE for the host CPU;
  - `kernel_bands`: the same archive bytes read by a C loop (tests/bench/kernels/bf16_band.c, one band per workgroup,
    8 accumulators), linked into the dispatch with `hal.executable.objects`;
  - `kernel_rows`: the weight as PyTorch holds it, `[n, k]`, read by a C loop (bf16_rows.c, 32 rows per workgroup);
- Q8_0 `[q8-dim, q8-dim]` from a GGUF file:
  - `codegen_kept`: `tapeout export --packed keep` (its planes, the per-block product and the block sum);
  - `kernel_blocks`: the GGUF tensor's bytes as stored (34-byte blocks), read by a C loop (q8_0_rows.c; `x` stays f32,
    so the result is exact like tapeout's).

A kernel is compiled by the machine's gcc (`-march=native`, freestanding) into an object IREE links into its embedded
ELF; the module declares it with `hal.import.static` in a `stream.executable` dispatched by `flow.dispatch` from a
function that also holds ordinary StableHLO, under a generic `embedded-elf-x86_64` key, so the usual host-CPU compile
flags apply. Needs an x86-64 CPU with AVX-512 (F, BW) and F16C; prints one JSON object per form. `--n` and
`--q8-dim` are multiples of 32, `--k` any size (the loops' tails); `--rounds 0` checks the results without timing
(scripts/test's small twin).
"""
import argparse
import json
import pathlib
import statistics
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))
from harness import bench_sh, benchmark_median_ms, iree_tool, run_iree  # noqa: E402

KERNELS = ROOT / "tests" / "bench" / "kernels"
COMPILE = ["--iree-input-type=stablehlo", "--iree-hal-target-device=local",
           "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
GCC = ["gcc", "-O3", "-march=native", "-std=c17", "-ffreestanding", "-fno-builtin", "-fvisibility=hidden", "-fno-plt",
       "-fPIC", "-fno-stack-protector", "-fno-exceptions", "-fdata-sections", "-ffunction-sections", "-c"]


def log(*a):
    print("hand_kernels:", *a, file=sys.stderr, flush=True)


def sh(*args):
    return bench_sh("hand_kernels", *args)


def check_cpu():
    flags = set()
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    missing = {"avx512f", "avx512bw", "f16c"} - flags
    if missing:
        raise SystemExit(f"hand_kernels: this CPU lacks {sorted(missing)}; the kernels are written for AVX-512")


def archive(path, key, data):
    import iree.runtime as rt
    index = rt.ParameterIndex()
    index.add_buffer(key, np.ascontiguousarray(data))
    index.create_archive_file(str(path))


def kernel_module(obj, symbol, weight_type, weight_elems, elem, x_type, y_type, y_elems, rows_per_group, n, k):
    """A module whose @main runs `symbol` (from the object file `obj`) over the parameter `w` in
    ceil(n / rows_per_group) workgroups. Every kernel takes the same arguments: the bindings x (k f32), the weight
    (`weight_elems` of `elem`, flat) and y (`y_elems` f32), then n, k and the workgroup id."""
    call_types = f"memref<?xf32>, memref<?x{elem}>, memref<?xf32>, index, index, index"
    return f"""#x86 = #hal.executable.target<"llvm-cpu", "embedded-elf-x86_64">
module {{
  util.global private @w = #flow.parameter.named<"model"::"w"> : {weight_type}
  stream.executable private @ex attributes {{
    hal.executable.objects = #hal.executable.objects<{{#x86 = [#hal.executable.object<{{path = "{obj}"}}>]}}>
  }} {{
    stream.executable.export public @product workgroups(%n: index) -> (index, index, index) {{
      %g = affine.apply affine_map<()[s0] -> (s0 ceildiv {rows_per_group})>()[%n]
      %c1 = arith.constant 1 : index
      stream.return %g, %c1, %c1 : index, index, index
    }}
    builtin.module {{
      func.func private @{symbol}({call_types}) attributes {{hal.import.static}}
      func.func @product(%b0: !stream.binding, %b1: !stream.binding, %b2: !stream.binding, %n: index, %k: index) {{
        %c0 = arith.constant 0 : index
        %wg = stream.dispatch.workgroup.id[0] : index
        %wn = arith.constant {weight_elems} : index
        %yn = arith.constant {y_elems} : index
        %m0 = stream.binding.subspan %b0[%c0] : !stream.binding -> memref<?xf32>{{%k}}
        %m1 = stream.binding.subspan %b1[%c0] : !stream.binding -> memref<?x{elem}>{{%wn}}
        %m2 = stream.binding.subspan %b2[%c0] : !stream.binding -> memref<?xf32>{{%yn}}
        func.call @{symbol}(%m0, %m1, %m2, %n, %k, %wg) : ({call_types}) -> ()
        return
      }}
    }}
  }}
  func.func @main(%x: {x_type}) -> {y_type} {{
    %w = util.global.load @w : {weight_type}
    %n = arith.constant {n} : index
    %k = arith.constant {k} : index
    %y = flow.dispatch @ex::@product[%n](%x, %w, %n, %k) : ({x_type}, {weight_type}, index, index) -> {y_type}
    return %y : {y_type}
  }}
}}
"""


def band_codegen_module(b, k):
    t = f"tensor<{b}x{k}x32xbf16>"
    return f"""module {{
  util.global private @w = #flow.parameter.named<"model"::"w"> : {t}
  func.func @main(%x: tensor<1x{k}xf32>) -> tensor<{b}x1x32xf32> {{
    %w = util.global.load @w : {t}
    %wf = stablehlo.convert %w : ({t}) -> tensor<{b}x{k}x32xf32>
    %xb = stablehlo.broadcast_in_dim %x, dims = [1, 2] : (tensor<1x{k}xf32>) -> tensor<{b}x1x{k}xf32>
    %y = stablehlo.dot_general %xb, %wf, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<{b}x1x{k}xf32>, tensor<{b}x{k}x32xf32>) -> tensor<{b}x1x32xf32>
    return %y : tensor<{b}x1x32xf32>
  }}
}}
"""


class Form:
    """One compiled form of a product: its module, archive, input shape, the bytes of weight it reads and the form
    its time is compared with (IREE's own code for the same weight)."""

    def __init__(self, label, vmfb, irpa, x_shape, weight_bytes):
        self.label, self.vmfb, self.irpa, self.x_shape = label, vmfb, irpa, x_shape
        self.weight_bytes, self.times, self.baseline = weight_bytes, [], self


def time_ms(form, threads):
    shape = "x".join(map(str, form.x_shape))
    return benchmark_median_ms("hand_kernels", sh(
        iree_tool("iree-benchmark-module"), "--device=local-task", f"--task_topology_max_group_count={threads}",
        f"--module={form.vmfb}", f"--parameters=model={form.irpa}", "--function=main", f"--input={shape}xf32=0.5",
        "--benchmark_repetitions=3", "--benchmark_min_time=1s"))


def obj(d, name):
    o = d / f"{name}.o"
    sh(*GCC, KERNELS / f"{name}.c", "-o", o)
    return o


def bf16_forms(d, n, k):
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((n, k), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    x = rng.standard_normal(k, dtype=np.float32)
    bands = np.ascontiguousarray(w.reshape(n // 32, 32, k).transpose(0, 2, 1))
    archive(d / "rows.irpa", "w", w)
    archive(d / "bands.irpa", "w", bands)
    ref = (w.astype(np.uint32) << 16).view(np.float32).astype(np.float64) @ x.astype(np.float64)
    del w
    b, forms = n // 32, []
    (d / "codegen_bands.mlir").write_text(band_codegen_module(b, k))
    (d / "kernel_bands.mlir").write_text(kernel_module(
        obj(d, "bf16_band"), "bf16_band_workgroup", f"tensor<{b}x{k}x32xbf16>", n * k, "bf16", f"tensor<1x{k}xf32>",
        f"tensor<{b}x1x32xf32>", n, 1, b, k))
    (d / "kernel_rows.mlir").write_text(kernel_module(
        obj(d, "bf16_rows"), "bf16_rows_workgroup", f"tensor<{n}x{k}xbf16>", n * k, "bf16", f"tensor<{k}xf32>",
        f"tensor<{n}xf32>", n, 32, n, k))
    for label, irpa, shape in (("codegen_bands", "bands.irpa", (1, k)), ("kernel_bands", "bands.irpa", (1, k)),
                               ("kernel_rows", "rows.irpa", (k,))):
        vmfb = d / f"{label}.vmfb"
        sh(iree_tool("iree-compile"), d / f"{label}.mlir", *COMPILE, "-o", vmfb)
        forms.append(Form(f"bf16_{label}", vmfb, d / irpa, shape, n * k * 2))
    for f in forms:
        f.baseline = forms[0]
    return forms, x, ref


def q8_forms(d, dim):
    import iree_runtime
    from gguf import GGUFReader
    q = d / "q8"
    q.mkdir()
    iree_runtime.write_packed(q, "Q8_0", dim, 1)
    raw = np.asarray(GGUFReader(str(q / "w.gguf")).tensors[0].data).reshape(-1).view(np.uint8)
    archive(d / "q8_blocks.irpa", "w", raw)
    blocks = raw.reshape(dim, dim // 32, 34)
    scale = blocks[:, :, :2].copy().view(np.float16)[..., 0].astype(np.float64)
    weight = (blocks[:, :, 2:].view(np.int8).astype(np.float64) * scale[..., None]).reshape(dim, dim)
    x = np.random.default_rng(2).standard_normal(dim).astype(np.float32)
    ref = weight @ x.astype(np.float64)
    del weight
    sh(ROOT / "target/release/tapeout", "export", q / "g.json", "--weights", q / "w.gguf", "-o", q / "keep",
       "--packed", "keep")
    kept = q / "keep" / "step.vmfb"
    sh(iree_tool("iree-compile"), q / "keep" / "step.mlir", *COMPILE, "-o", kept)
    nbytes = raw.nbytes
    (d / "q8_kernel.mlir").write_text(kernel_module(
        obj(d, "q8_0_rows"), "q8_rows_workgroup", f"tensor<{nbytes}xi8>", nbytes, "i8", f"tensor<{dim}xf32>",
        f"tensor<{dim}xf32>", dim, 32, dim, dim))
    vmfb = d / "q8_kernel.vmfb"
    sh(iree_tool("iree-compile"), d / "q8_kernel.mlir", *COMPILE, "-o", vmfb)
    forms = [Form("q8_0_codegen_kept", kept, q / "keep" / "step.irpa", (1, dim), nbytes),
             Form("q8_0_kernel_blocks", vmfb, d / "q8_blocks.irpa", (dim,), nbytes)]
    forms[1].baseline = forms[0]
    return forms, x, ref


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="target/bench-tmp")
    ap.add_argument("--rounds", type=int, default=4, help="alternating timing rounds; 0 checks the results only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--q8-dim", type=int, default=8192)
    a = ap.parse_args()
    if a.n <= 0 or a.n % 32 or a.q8_dim <= 0 or a.q8_dim % 32:
        raise SystemExit(f"hand_kernels: --n {a.n} and --q8-dim {a.q8_dim} must be positive multiples of 32 "
                         "(32-row bands and workgroups, 32-value blocks)")
    if a.k <= 0 or a.threads <= 0 or a.rounds < 0:
        raise SystemExit(f"hand_kernels: --k {a.k} and --threads {a.threads} must be positive, --rounds {a.rounds} "
                         "at least 0 (0: check the results only)")
    check_cpu()
    pathlib.Path(a.out).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=a.out) as d:
        d = pathlib.Path(d)
        groups = [bf16_forms(d, a.n, a.k), q8_forms(d, a.q8_dim)]
        forms = []
        for group, x, ref in groups:
            scale = float(np.abs(ref).max())
            for f in group:
                y = run_iree(d, f.vmfb, [f.irpa], [x.reshape(f.x_shape)], tag=f.label)[0]
                f.max_abs_error = float(np.abs(y.reshape(-1).astype(np.float64) - ref).max())
                f.relative_error = f.max_abs_error / scale
                if f.relative_error > 1e-5:
                    raise SystemExit(f"hand_kernels: {f.label} is {f.relative_error:.2e} (relative) from numpy's "
                                     "float64 product")
                forms.append(f)
        if a.rounds == 0:
            for f in forms:
                print(json.dumps({"figure": "hand_kernels", "form": f.label, "checked_only": True,
                                  "max_abs_error_vs_f64": f.max_abs_error, "relative_error": f.relative_error}))
            return
        for r in range(a.rounds):
            for f in forms:
                f.times.append(time_ms(f, a.threads))
            log(f"round {r + 1}:", ", ".join(f"{f.label} {f.times[-1]:.2f} ms" for f in forms))
        for f in forms:
            med = statistics.median(f.times)
            print(json.dumps({"figure": "hand_kernels", "form": f.label, "threads": a.threads,
                              "weight_bytes": f.weight_bytes, "rounds_ms": f.times, "median_ms": med,
                              "gb_per_s": f.weight_bytes / med / 1e6,
                              "codegen_over_this": statistics.median(f.baseline.times) / med,
                              "max_abs_error_vs_f64": f.max_abs_error, "relative_error": f.relative_error}),
                  flush=True)


if __name__ == "__main__":
    main()
