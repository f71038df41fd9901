"""The portable lowering against the CPU pass's forms (`--target portable` against the default `--target llvm-cpu`),
both run by IREE 3.13 on this CPU on the same inputs: every packed format kept packed, and f32 / bf16 / f16 weights
kept as stored, each used as a linear layer `x @ Wᵀ` at one static row and at `?` rows fed the counts at which the
CPU pass switches forms (1, 8, 9, 16, 17, 32, 33) and odd and prime ones around them (2, 5, 7, 13, 31, 64, 65),
over weights of an odd, a prime and a band-sized row count. The tuned module is compiled with its tuning spec, the
portable one with IREE's defaults (no spec is written for it). The two must agree within float tolerance, and both
with an independent oracle (PyPI gguf's dequantizer, numpy in float64).

The portable module is also checked for what it must not hold: no scheduling op (`optimization_barrier`), no
product over a layout a device chose (`linalg.generic`), codes stored as `[Kb, B, Np]`, no tuning spec."""
import json

import iree.runtime as rt
import numpy as np
import pytest

from harness import iree_tool, run, signature
from test_packed import FORMATS
from test_shape_sweep import cols_of, stored_as, sweep_gguf, write_safetensors

WEIGHT_ROWS = [7, 67, 96]  # odd, prime, three bands of 32
FED = [1, 2, 5, 7, 8, 9, 13, 16, 17, 31, 32, 33, 64, 65]


def linear_graph(k, rows, dtype):
    """Linears `y<n>_s = x_s @ W_nᵀ` (one static row) and `y<n>_d = x_d @ W_nᵀ` (`?` rows) for each `n` of `rows`;
    `W_n [n, k]` is the weight file's `w<n>` as `dtype`."""
    f32 = lambda nm, shape: {"name": nm, "shape": shape, "dtype": "f32"}  # noqa: E731
    tensors, nodes, outputs = [f32("x_s", [1, k]), f32("x_d", ["?", k])], [], []
    for n in rows:
        w = f"w{n}"
        tensors += [{"name": w, "shape": [n, k], "dtype": dtype, "data": {"tensor": w}}, f32(f"{w}t", [k, n])]
        nodes.append({"op": "transpose", "inputs": [w], "outputs": [f"{w}t"]})
        for tag, rows_in in (("s", 1), ("d", "?")):
            y = f"y{n}_{tag}"
            tensors.append(f32(y, [rows_in, n]))
            nodes.append({"op": "matmul", "inputs": [f"x_{tag}", f"{w}t"], "outputs": [y]})
            outputs.append(y)
    return {"name": "lin", "tensors": tensors, "nodes": nodes, "outputs": outputs}


def invoker(tmp_path, out, name, spec=None):
    """`main` of `out/lin.mlir` compiled for this CPU (with `spec` when given), bound to its archive."""
    vmfb = tmp_path / f"{name}.vmfb"
    flags = [f"--iree-codegen-tuning-spec-path={spec}", "--mlir-disable-threading"] if spec else []
    run(iree_tool("iree-compile"), out / "lin.mlir", "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host", *flags, "-o", vmfb)
    inst = rt.VmInstance()
    dev = rt.get_device("local-task")
    idx = rt.ParameterIndex()
    idx.load(str(out / "lin.irpa"))
    mods = [rt.create_io_parameters_module(inst, idx.create_provider(scope="model")),
            rt.create_hal_module(inst, dev), rt.VmModule.mmap(inst, str(vmfb))]
    ctx = rt.VmContext(inst, modules=mods)
    return rt.FunctionInvoker(ctx, dev, mods[-1].lookup_function("main"))


def assert_plain(out, kept):
    """The portable module holds no device's form: no barrier, no band product, codes `[Kb, B, Np]`, no spec."""
    text = (out / "lin.mlir").read_text()
    assert "optimization_barrier" not in text, "the portable lowering orders its ops"
    assert "linalg.generic" not in text, "the portable lowering contracts a layout a device chose"
    assert not (out / "lin.tuning.mlir").exists(), "a tuning spec beside a portable module"
    if kept:
        idx = rt.ParameterIndex()
        idx.load(str(out / "lin.irpa"))
        for key, e in idx.items():
            meta = json.loads(bytes(e.metadata).decode().removeprefix("TENSORv0:"))
            if key.endswith(".qs"):
                assert len(meta["shape"]) == 3 and meta["shape"][1] in (16, 32), (key, meta)


def compare(tmp_path, outs, dense, k, fmt):
    """Runs every module of `outs` (name -> (export dir, spec)) on the same inputs at every row count of `FED` and
    checks each result against the oracle and against the portable module's."""
    rng = np.random.default_rng(len(fmt) + k)
    args, results = signature(outs["portable"][0] / "lin.mlir")
    mains = {name: invoker(tmp_path, out, name, spec) for name, (out, spec) in outs.items()}
    wrong = []
    for rows in FED:
        feeds = {"x_s": rng.standard_normal((1, k)).astype(np.float32),
                 "x_d": rng.standard_normal((rows, k)).astype(np.float32)}
        got = {name: [np.asarray(o.to_host()).astype(np.float64) for o in main(*[feeds[a] for a in args])]
               for name, main in mains.items()}
        for i, r in enumerate(results):
            n, tag = r[1:].split("_")
            want = feeds[f"x_{tag}"].astype(np.float64) @ dense[int(n)].T
            scale = max(np.abs(want).max(), 1e-30)
            base = got["portable"][i]
            for name, values in got.items():
                v = values[i]
                if v.shape != want.shape:
                    wrong.append(f"{name} {r} at {rows} rows: shape {v.shape} != {want.shape}")
                    continue
                oracle, portable = np.abs(v - want).max() / scale, np.abs(v - base).max() / scale
                if oracle > 1e-5 or portable > 1e-5:
                    wrong.append(f"{name} {r} at {rows} rows: {oracle:.2e} from the oracle, {portable:.2e} from "
                                 "the portable module")
    return len(results) * len(FED), wrong


def spec_of(out):
    """The tuning spec the export wrote beside its module, if it wrote one."""
    spec = out / "lin.tuning.mlir"
    return spec if spec.exists() else None


def export(tapeout, tmp_path, weights, name, *opts):
    out = tmp_path / name
    run(tapeout, "export", tmp_path / "g.json", "--weights", weights, "-o", out, "--inline-below", "1", *opts)
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_packed_format_tuned_for_the_cpu_agrees_with_the_portable_lowering(fmt, tapeout, tmp_path):
    rng = np.random.default_rng(FORMATS.index(fmt))
    k = 2 * cols_of(fmt) if cols_of(fmt) < 256 else cols_of(fmt)
    dense = sweep_gguf(tmp_path / "w.gguf", fmt, WEIGHT_ROWS, k, rng)
    (tmp_path / "g.json").write_text(json.dumps(linear_graph(k, WEIGHT_ROWS, "f32")))
    w = tmp_path / "w.gguf"
    portable = export(tapeout, tmp_path, w, "portable", "--packed", "keep", "--target", "portable")
    assert_plain(portable, kept=True)
    tuned = export(tapeout, tmp_path, w, "tuned", "--packed", "keep")
    # Q6_K's 16-value sub-blocks are not the spec's to tile: no spec is written for them.
    assert (tuned / "lin.tuning.mlir").exists() == (fmt != "Q6_K")
    outs = {"portable": (portable, None), "tuned": (tuned, spec_of(tuned))}
    if fmt in ("Q8_0", "Q4_0"):
        bands = export(tapeout, tmp_path, w, "bands", "--packed", "keep", "--packed-codes", "row-bands")
        outs["bands"] = (bands, spec_of(bands))
    # The tuned module holds the CPU's forms: the few-rows products (not for 5- and 6-bit codes, whose high bits
    # the CPU pass does not gate).
    tuned_text = (tuned / "lin.mlir").read_text()
    assert fmt not in ("Q8_0", "Q4_0", "Q4_1", "Q4_K") or "tensor<8x" in tuned_text, "no few-rows form to check"
    count, wrong = compare(tmp_path, outs, dense, k, fmt)
    assert not wrong, f"{fmt}: {len(wrong)} of {count * len(outs)} results wrong: {wrong[:10]}"


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_weights_kept_as_stored_tuned_for_the_cpu_agree_with_the_portable_lowering(dtype, tapeout, tmp_path):
    rng = np.random.default_rng(len(dtype))
    k = 161  # a reduction that leaves a tail
    stored, dense = {}, {}
    for n in WEIGHT_ROWS:
        stored[f"w{n}"], dense[n] = stored_as(rng.standard_normal((n, k)).astype(np.float32), dtype)
    write_safetensors(tmp_path / "w.safetensors", stored)
    (tmp_path / "g.json").write_text(json.dumps(linear_graph(k, WEIGHT_ROWS, dtype)))
    w = tmp_path / "w.safetensors"
    portable = export(tapeout, tmp_path, w, "portable", "--target", "portable")
    assert_plain(portable, kept=False)
    tuned = export(tapeout, tmp_path, w, "tuned")
    # The CPU pass writes a linear's weight in row bands (`[N / T, K, T]`); the portable lowering as `[K, N]`.
    assert "x161x32x" in (tuned / "lin.mlir").read_text() and "161x96x" in (portable / "lin.mlir").read_text()
    outs = {"portable": (portable, None), "tuned": (tuned, spec_of(tuned))}
    count, wrong = compare(tmp_path, outs, dense, k, dtype)
    assert not wrong, f"{dtype}: {len(wrong)} of {count * len(outs)} results wrong: {wrong[:10]}"


def test_every_target_but_the_cpu_writes_the_portable_lowering(tapeout, tmp_path):
    """`--no-tuning` with any target writes what `--target portable` writes, byte for byte; `--target vulkan`, `cuda`
    and `rocm` add their words forms (this Q4_0 weight's codes as 32-bit words, docs/devices.md,
    tests/iree/test_words.py); codes in row bands (a CPU form) are refused for them with the flag to drop."""
    rng = np.random.default_rng(3)
    k = 64
    sweep_gguf(tmp_path / "w.gguf", "Q4_0", WEIGHT_ROWS, k, rng)
    (tmp_path / "g.json").write_text(json.dumps(linear_graph(k, WEIGHT_ROWS, "f32")))
    w = tmp_path / "w.gguf"
    portable = export(tapeout, tmp_path, w, "portable", "--packed", "keep", "--target", "portable")
    for name, opts in [("vulkan", ["--target", "vulkan"]), ("cuda", ["--target", "cuda"]),
                       ("rocm", ["--target", "rocm"]), ("untuned", ["--no-tuning"]),
                       ("vulkan-untuned", ["--target", "vulkan", "--no-tuning"])]:
        out = export(tapeout, tmp_path, w, name, "--packed", "keep", *opts)
        for f in ("lin.mlir", "lin.irpa", "lin.signature.json"):
            same = (out / f).read_bytes() == (portable / f).read_bytes()
            assert same != (name in ("vulkan", "cuda", "rocm") and f != "lin.signature.json"), (name, f)
        assert not (out / "lin.tuning.mlir").exists(), name
        r = run(tapeout, "export", tmp_path / "g.json", "--weights", w, "-o", tmp_path / f"{name}-bands",
                "--packed", "keep", "--packed-codes", "row-bands", *opts, check=False)
        assert r.returncode == 1 and "--packed-codes row-bands" in r.stderr and "llvm-cpu" in r.stderr, r.stderr
