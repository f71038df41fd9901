"""Every module of the IREE gate compiles for NVIDIA and AMD GPUs: IREE 3.13's iree-compile takes each one exported
with `tapeout export --target cuda` for CUDA (`harness.CUDA`: sm_80, Ampere) and with `--target rocm` for ROCm
(`harness.ROCM`: the HIP device, gfx942, MI300). No GPU is needed for this (the compiler's CUDA and ROCm backends
run on the host), so a module a GPU would refuse is caught on every machine; scripts/gpu-check runs the same cases
on a GPU and checks their numbers.

The modules are the gate's: every test graph (tests/graphs, exported with the flags tests/iree/test_graphs.py gives
it, so f32 weights, bf16 / f16 weights kept as stored and integer constants, inline and external), every packed
format of tests/iree/test_packed.py's graph kept packed (a linear, a gather, a tied head and a `[K, N]` matmul of
each), and the 16-bit graph widened as well as kept. The tiny LLM's prefill and decode modules are exported by
Gradle (examples/tiny-llm) and are not compiled here: tests/graphs/transformer stands in for a decoder.

A refusal fails its case with iree-compile's own error lines: a module a GPU backend refuses is a tapeout bug to fix
(or an IREE one to name), not a case to skip."""
import dataclasses
import json
import re
import subprocess

import pytest

from harness import DEVICES, compile_iree, n, run, t, write_graph
from test_graphs import GRAPHS, GRAPHS_DIR, assert_matches, compile_and_run, export_flags, half_weights_of
from test_packed import FORMATS, graph as packed_graph, weights  # noqa: F401 (the GGUF file of every format)
import test_packed

GPUS = ["cuda", "rocm"]

# Refused by IREE 3.13 today (issue 60 goes on; docs/devices.md). Strict: a case that starts to compile fails here,
# so the list cannot outlive the bug.
KNOWN_REFUSED = {}


def expect_refusal(request, *case):
    if case in KNOWN_REFUSED:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_REFUSED[case]))


def compile_for(device, mlir, work):
    """Compiles `mlir` for `device`; a refusal fails the test with iree-compile's error lines (each once, cut at 400
    characters: IREE prints the whole target and dispatch it failed on) and the command to rerun."""
    try:
        compile_iree(work, mlir, device=device)
        return
    except subprocess.CalledProcessError as e:
        refused = e
    lines = refused.stderr.splitlines()
    errors = list(dict.fromkeys(line[:400] for line in lines if "error:" in line)) or lines[-5:]
    pytest.fail(f"iree-compile refused {mlir.name} for {device.name} (exit {refused.returncode}):\n" + "\n".join(errors)
                + f"\nrerun: {' '.join(map(str, refused.cmd))}", pytrace=False)


def export_graph(tapeout, name, out, device, extra=()):
    """`tapeout export` of the test graph `name` for `device`, as tests/iree/test_graphs.py's compile_and_run does;
    returns the module's path."""
    test = json.loads((GRAPHS_DIR / f"{name}.test.json").read_text())
    run(tapeout, "export", GRAPHS_DIR / f"{name}.json", "--weights", GRAPHS_DIR / f"{name}.safetensors", "-o", out,
        "--target", device.target, *export_flags(test), *extra)
    (mlir,) = out.glob("*.mlir")
    return mlir


@pytest.mark.parametrize("device", GPUS)
@pytest.mark.parametrize("name", GRAPHS)
def test_every_test_graph_compiles_for_the_gpu(name, device, tapeout, tmp_path, request):
    expect_refusal(request, "graph", name, device)
    device = DEVICES[device]
    compile_for(device, export_graph(tapeout, name, tmp_path / "out", device), tmp_path)


@pytest.mark.xfail(strict=True, reason="IREE 3.13's ROCm backend crashes (LLVM AMDGPU, 'Lower buffer fat pointer "
                   "operations') on a static attention of 6 queries; 4 compile, and so do `?` lengths (docs/devices.md)")
def test_rocm_compiles_a_static_attention_of_six_queries(tapeout, tmp_path):
    """The reduced form of an IREE 3.13 crash: plain sdpa, q k v [1, 4, 6, 32]. Strict: the day IREE compiles it, this
    fails, and the workaround in tests/graphs (four queries) can go."""
    tensors = [t("q", [1, 4, 6, 32]), t("k", [1, 4, 6, 32]), t("v", [1, 4, 6, 32]), t("y", [1, 4, 6, 32])]
    g = write_graph(tmp_path, "sdpa6", tensors, [n("sdpa", ["q", "k", "v"], "y")], ["y"])
    run(tapeout, "export", g, "--weights", tmp_path / "sdpa6.safetensors", "-o", tmp_path / "out", "--target", "rocm")
    compile_for(DEVICES["rocm"], tmp_path / "out" / "sdpa6.mlir", tmp_path)


@pytest.mark.parametrize("device", GPUS)
@pytest.mark.parametrize("half", ["keep", "widen"])
def test_16_bit_weights_compile_for_the_gpu_kept_and_widened(half, device, tapeout, tmp_path):
    """tests/graphs/half_weights holds bf16 and f16 weights: kept, the module's parameters are those types (the GPU
    converts them where they are used); widened, f32. Both must compile."""
    device = DEVICES[device]
    mlir = export_graph(tapeout, "half_weights", tmp_path / "out", device, ["--half", half])
    text = mlir.read_text()
    params = re.findall(r"util\.global private @\S+ = #flow\.parameter\.named<[^>]*> : tensor<[^>]*x(\w+)>", text)
    dtypes = {t["dtype"] for t in half_weights_of("half_weights")}
    assert dtypes == {"bf16", "f16"}, dtypes
    assert set(params) == (dtypes if half == "keep" else {"f32"}), (half, params)
    compile_for(device, mlir, tmp_path)


@pytest.mark.parametrize("device", GPUS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_packed_format_kept_packed_compiles_for_the_gpu(fmt, device, weights, tapeout, tmp_path,  # noqa: F811
                                                              request):
    """The packed gate's graph (a linear, a gather, a tied head and a `[K, N]` matmul of one `fmt` weight) kept
    packed for the GPU target: its codes stay planes of integers (`<key>.qs`) the module contracts per block."""
    expect_refusal(request, "packed", fmt, device)
    path, _ = weights
    device = DEVICES[device]
    (tmp_path / "g.json").write_text(json.dumps(packed_graph(fmt)))
    out = tmp_path / "out"
    run(tapeout, "export", tmp_path / "g.json", "--weights", path, "-o", out, "--packed", "keep",
        "--target", device.target)
    mlir = out / "packed.mlir"
    assert f"@blk.{fmt}.w.qs = #flow.parameter.named" in mlir.read_text(), "the codes are not a plane of their own"
    compile_for(device, mlir, tmp_path)


# The GPU forms' numbers, where no GPU is: the `--target cuda` export (its sub-byte planes as words, its pooling
# inits behind barriers) compiled for the CPU and run there against the gate's oracles.
CUDA_FORMS_ON_CPU = dataclasses.replace(DEVICES["cpu"], name="cuda-forms-on-cpu", target="cuda")


@pytest.mark.parametrize("name", ["pooling", "small_cnn", "half_weights"])
def test_the_gpu_forms_of_a_graph_compute_the_gate_numbers(name, tapeout, tmp_path):
    graph, feeds, outs, text = compile_and_run(tapeout, name, tmp_path, device=CUDA_FORMS_ON_CPU)
    if name == "pooling":
        assert "stablehlo.optimization_barrier" in text, "the second reduce_window's init is behind a barrier"
    for i, (got, want) in enumerate(zip(outs, graph.evaluate(feeds))):
        assert_matches(got, want, f"{name} output {i}")


@pytest.mark.parametrize("fmt", ["Q4_0", "Q5_K", "Q6_K"])
def test_the_gpu_forms_of_packed_weights_compute_what_gguf_dequantizes(fmt, weights, tapeout, tmp_path):  # noqa: F811
    test_packed.test_packed_weights_kept_packed_compute_what_gguf_dequantizes(fmt, CUDA_FORMS_ON_CPU, weights,
                                                                             tapeout, tmp_path)
