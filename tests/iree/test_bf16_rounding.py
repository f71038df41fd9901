"""Conversions to bf16, compiled and run by IREE 3.13, judged bit for bit by ml_dtypes (the bfloat16 of JAX and of
IREE's own Python runtime, which requires it): round to nearest, ties to even, NaN kept a NaN of its sign.

IREE folds `convert(f32 -> bf16)` of an integer-to-float conversion (a `convert` from an integer, an `argmax`, a
float `iota`) into one integer-to-bf16 conversion, which its CPU backend compiles into a call to compiler-rt's
`__truncsfbf2` that the embedded executable cannot link (the property test's seed 120031). tapeout therefore rounds
f32 to bf16 in integer arithmetic on the bits; these tests hold that rounding to ml_dtypes' on special values and
random bit patterns (IREE's own conversion agreed except that it made every NaN positive), and compile each integer-sourced chain that IREE used to refuse, at a static shape and at two
run-time sizes of a `?` one."""
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from harness import (DEVICES, ROOT, RUN_DEVICES, compile_iree, n, narrow_boundary, run, run_iree, signature, t,
                     write_graph)

sys.path.insert(0, str(ROOT / "tests/graphs"))
import reference  # noqa: E402

D = "?"
RNG = np.random.default_rng(16)

SPECIAL_BITS = np.array([
    0x00000000, 0x80000000, 0x3F800000, 0xBF800000,  # +-0, +-1
    0x7F800000, 0xFF800000,  # +-inf
    0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F80FFFF,  # NaNs, low payloads too
    0x3F808000, 0x3F818000, 0xBF808000, 0x3F808001, 0x3F807FFF,  # ties to even, just above and below a tie
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000,  # the largest finite: to inf, kept, the last tie
    0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x80008001,  # subnormals
], dtype=np.uint32)


def bits_of(x):
    return np.asarray(x, np.float32).view(np.uint32)


def assert_bf16_equal(got, x, what):
    """`got` (f32 values read back from bf16) equals ml_dtypes' bf16 of `x` bit for bit; a NaN only needs to stay
    a NaN of the same sign (its payload is not specified)."""
    with np.errstate(invalid="ignore"):  # ml_dtypes warns on NaN inputs, which it converts as specified
        want = np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    got = np.asarray(got, np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaN where ml_dtypes has none, or the reverse"
    assert np.array_equal(np.signbit(got[nan]), np.signbit(want[nan])), f"{what}: a NaN changed sign"
    bad = np.flatnonzero(bits_of(got[~nan]) != bits_of(want[~nan]))
    assert bad.size == 0, (f"{what}: {bad.size} values differ, first input bits 0x{bits_of(x[~nan][bad[0]]):08X}: "
                           f"got 0x{bits_of(got[~nan][bad[0]]):08X}, ml_dtypes 0x{bits_of(want[~nan][bad[0]]):08X}")


def export(tapeout, tmp_path, name, tensors, nodes, outputs, static=None, device=DEVICES["cpu"]):
    """The graph exported for `device` (`--target`); for Vulkan, a narrow function argument (bool too) or a narrow
    result other than bool is refused (IREE 3.13 misreads the caller's narrow buffers there): that refusal is
    checked, naming the value, and None returned."""
    g = write_graph(tmp_path, name, tensors, nodes, outputs, static=static)
    out = tmp_path / f"out-{name}"
    cmd = ["export", g, "--weights", tmp_path / f"{name}.safetensors", "-o", out, "--target", device.target]
    narrow = narrow_boundary(tensors, nodes, outputs) if device.target == "vulkan" else None
    if narrow:
        r = run(tapeout, *cmd, check=False)
        assert r.returncode == 1 and f"'{narrow}'" in r.stderr and "on vulkan, IREE 3.13" in r.stderr, r.stderr
        assert not (out / f"{name}.mlir").exists(), "no MLIR is written"
        return None
    run(tapeout, *cmd)
    return out / f"{name}.mlir", out / f"{name}.irpa"


@pytest.mark.parametrize("device", RUN_DEVICES)
@pytest.mark.parametrize("dims", ["dynamic", "static"])
def test_f32_to_bf16_rounds_as_ml_dtypes_does(dims, device, tapeout, tmp_path):
    device = DEVICES[device]
    x = np.concatenate([SPECIAL_BITS, RNG.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)]).view(np.float32)
    shape = [D] if dims == "dynamic" else [x.size]
    mlir, irpa = export(tapeout, tmp_path, "round", [t("x", shape), t("h", shape, "bf16"), t("y", shape)],
                        [n("convert", ["x"], "h"), n("convert", ["h"], "y")], ["y"], device=device)
    vmfb = compile_iree(tmp_path, mlir, device=device)
    sizes = [x.size, 7, 1] if dims == "dynamic" else [x.size]
    for i, size in enumerate(sizes):
        (got,) = run_iree(tmp_path, vmfb, [irpa], [x[:size]], tag=str(i), device=device)
        assert_bf16_equal(got, x[:size], f"{dims} [{size}] on {device.name}")


# name: (tensors, nodes, input dtype and values): each was refused by IREE with `undefined symbol: __truncsfbf2`.
BIG = [0, 1, -3, 255, 257, 2**24 + 1, -(2**31), 2**31 - 1]
INTEGER_CHAINS = {
    "i64_via_f32": ([t("x", [D], "i64"), t("f", [D]), t("h", [D], "bf16"), t("y", [D])],
                    [n("convert", ["x"], "f"), n("convert", ["f"], "h"), n("convert", ["h"], "y")], np.int64),
    "i32_direct": ([t("x", [D], "i32"), t("h", [D], "bf16"), t("y", [D])],
                   [n("convert", ["x"], "h"), n("convert", ["h"], "y")], np.int32),
    "bool_direct": ([t("x", [D], "bool"), t("h", [D], "bf16"), t("y", [D])],
                    [n("convert", ["x"], "h"), n("convert", ["h"], "y")], np.bool_),
}


@pytest.mark.parametrize("device", RUN_DEVICES)
@pytest.mark.parametrize("dims", ["dynamic", "static"])
@pytest.mark.parametrize("case", sorted(INTEGER_CHAINS))
def test_an_integer_converted_to_bf16_compiles_and_rounds_through_f32(case, dims, device, tapeout, tmp_path):
    device = DEVICES[device]
    tensors, nodes, dtype = INTEGER_CHAINS[case]
    values = (np.array([0, 1, 0, 1, 1], dtype) if dtype is np.bool_ else
              np.array(BIG + list(RNG.integers(-(2**31), 2**31, 24)), dtype))
    exported = export(tapeout, tmp_path, case, tensors, nodes, ["y"],
                      static=None if dims == "dynamic" else values.size, device=device)
    if exported is None:
        return  # the bool argument, refused for Vulkan (checked by export)
    mlir, irpa = exported
    vmfb = compile_iree(tmp_path, mlir, device=device)
    for i, size in enumerate([values.size, 1] if dims == "dynamic" else [values.size]):
        (got,) = run_iree(tmp_path, vmfb, [irpa], [values[:size]], tag=str(i), device=device)
        # An integer is rounded to f32 first, then to bf16 (as the graph format's reference does).
        assert_bf16_equal(got, values[:size].astype(np.float32), f"{case} {dims} [{size}] on {device.name}")


@pytest.mark.parametrize("device", RUN_DEVICES)
def test_argmax_and_a_float_iota_converted_to_bf16_compile_and_match_the_reference(device, tapeout, tmp_path):
    device = DEVICES[device]
    # Seed 120031 of the property test: argmax [5, 3] -> i64 -> f32 -> bf16 -> f32; and a float iota to bf16.
    tensors = [t("x", [D, 3]), t("a", [D], "i64"), t("f", [D]), t("h", [D], "bf16"), t("y", [D]),
               t("i", [D]), t("ih", [D], "bf16"), t("iy", [D])]
    nodes = [n("argmax", ["x"], "a", axis=1), n("convert", ["a"], "f"), n("convert", ["f"], "h"),
             n("convert", ["h"], "y"), n("iota", ["x"], "i", axis=0), n("convert", ["i"], "ih"),
             n("convert", ["ih"], "iy")]
    mlir, irpa = export(tapeout, tmp_path, "argmax", tensors, nodes, ["y", "iy"], device=device)
    graph = reference.Graph(tmp_path / "argmax.json", tmp_path / "argmax.safetensors")
    order, _ = signature(mlir)
    assert order == ["x"]
    vmfb = compile_iree(tmp_path, mlir, device=device)
    for size in (5, 1):
        x = RNG.standard_normal((size, 3)).astype(np.float32)
        got = run_iree(tmp_path, vmfb, [irpa], [x], outputs=2, tag=str(size), device=device)
        for g_, w, what in zip(got, graph.evaluate({"x": x}), ["argmax", "iota"]):
            np.testing.assert_array_equal(g_, w, err_msg=f"{what} at size {size} on {device.name}")


@pytest.mark.parametrize("device", RUN_DEVICES)
def test_pow_in_bf16_compiles_and_matches_the_reference(device, tapeout, tmp_path):
    device = DEVICES[device]
    # Float pow checks for an integral exponent with a convert back to the operand's dtype: i32 -> bf16 here.
    e = np.array([2.0, 3.0, 0.5, -1.0], np.float32)
    tensors = [t("x", [D, 4]), t("e", [4], weight=e), t("xh", [D, 4], "bf16"), t("eh", [4], "bf16"),
               t("p", [D, 4], "bf16"), t("y", [D, 4])]
    nodes = [n("convert", ["x"], "xh"), n("convert", ["e"], "eh"), n("pow", ["xh", "eh"], "p"),
             n("convert", ["p"], "y")]
    mlir, irpa = export(tapeout, tmp_path, "powh", tensors, nodes, ["y"], device=device)
    graph = reference.Graph(tmp_path / "powh.json", tmp_path / "powh.safetensors")
    vmfb = compile_iree(tmp_path, mlir, device=device)
    for size in (3, 1):
        x = np.abs(RNG.standard_normal((size, 4))).astype(np.float32) + 0.5
        (got,) = run_iree(tmp_path, vmfb, [irpa], [x], tag=str(size), device=device)
        (want,) = graph.evaluate({"x": x})
        np.testing.assert_allclose(got, want, rtol=2e-2, err_msg=f"pow in bf16 at size {size} on {device.name}")
