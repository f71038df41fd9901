"""Narrow constants held in 32-bit words (`--target vulkan`, docs/devices.md): every f16 and bf16 bit pattern, every
8-bit value, and 16-bit integers, stored as words and decoded in the program, come back exactly as numpy widens
them, on lavapipe (IREE's default Vulkan profile, which stores only 32-bit values) and, from the same module, on
the CPU (so a wrong decode cannot hide behind one device's quirk). Odd sizes leave a part-filled last word: a
`[3, 5]` bf16 weight (30 bytes, the case IREE's own 16-bit emulation read as 0 past its binding) and a `[7]` i8."""
import json

import numpy as np
import pytest
import iree.runtime as rt

from harness import CPU, DEVICES, VULKAN, compile_iree, n, run, run_iree, t, write_graph

CASES = {
    # name: (dtype in the graph, values as stored, numpy dtype of the result)
    "f16_all": ("f16", np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16), np.float32),
    "bf16_all": ("bf16", None, np.float32),
    "bf16_3x5": ("bf16", None, np.float32),
    "i8_all": ("i8", np.arange(-128, 128, dtype=np.int8), np.int32),
    "u8_all": ("u8", np.arange(256, dtype=np.uint8), np.int32),
    "i8_odd": ("i8", np.array([-128, -1, 0, 1, 127, 5, -7], np.int8), np.int32),
    "i16": ("i16", np.array([-32768, -1, 0, 1, 32767, 12345, -2], np.int16), np.int32),
    "u16": ("u16", np.array([0, 1, 65535, 32768, 40000], np.uint16), np.int32),
}


def bf16_values(case):
    """bf16 bit patterns as safetensors' BF16 (ml_dtypes), and as f32 (the exact widening)."""
    import ml_dtypes
    if case == "bf16_all":
        bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    else:
        bits = np.random.default_rng(5).integers(0, 1 << 16, (3, 5), dtype=np.uint32).astype(np.uint16)
    return bits.view(ml_dtypes.bfloat16), (bits.astype(np.uint32) << 16).view(np.float32)


def case_values(case):
    dtype, stored, _ = CASES[case]
    if dtype == "bf16":
        return bf16_values(case)
    wide = stored.astype(np.float32) if dtype == "f16" else stored.astype(np.int32)
    return stored, wide


@pytest.fixture(scope="module")
def exported(tapeout, tmp_path_factory):
    """Each case exported once for Vulkan: a graph whose output is `convert(w)` to f32 / i32 (external, so the
    archive holds the words; `bf16_3x5` also inline, where the module text holds them)."""
    tmp = tmp_path_factory.mktemp("words")
    out = {}
    for case, (dtype, _, wide) in CASES.items():
        stored, _ = case_values(case)
        to = "f32" if wide == np.float32 else "i32"
        g = write_graph(tmp, case, [t("w", list(stored.shape), dtype, weight=stored), t("y", list(stored.shape), to)],
                        [n("convert", ["w"], "y")], ["y"])
        for policy in (["--inline-below", "0"], ["--inline-all"]) if case == "bf16_3x5" else (["--inline-below", "0"],):
            d = tmp / f"{case}{policy[0]}"
            run(tapeout, "export", g, "--weights", tmp / f"{case}.safetensors", "-o", d, "--target", "vulkan", *policy)
            out[(case, policy[0])] = d / f"{case}.mlir", d / f"{case}.irpa"
    return out


def same_bits(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    view = np.uint32 if got.dtype == np.float32 else got.dtype
    bad = np.flatnonzero(got.view(view) != want.view(view))
    assert bad.size == 0, f"{what}: {bad.size} values differ, first at {bad[0]}: {got.flat[bad[0]]!r} != {want.flat[bad[0]]!r}"


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
@pytest.mark.parametrize("case", list(CASES))
def test_narrow_constants_decode_from_words_exactly(case, device, exported, tmp_path):
    _, want = case_values(case)
    for (c, policy), (mlir, irpa) in exported.items():
        if c != case:
            continue
        text = mlir.read_text()
        assert "decode_words" not in text and "xi32>" in text, "words, decoded by stablehlo integer ops"
        dtype = CASES[case][0]
        assert f"x{dtype}>" not in text and f"<{dtype}>" not in text, f"no {dtype} tensor is left for IREE to store"
        if policy == "--inline-below":
            idx = rt.ParameterIndex()
            idx.load(str(irpa))
            [(key, entry)] = list(idx.items())
            meta = json.loads(bytes(entry.metadata).decode().removeprefix("TENSORv0:"))
            stored, _ = case_values(case)
            raw = stored.tobytes()
            assert meta["dtype"] == "i32" and meta["words_of"] == dtype, meta
            assert bytes(entry.file_view) == raw + bytes(-len(raw) % 4), "the stored bytes, zero-padded to a word"
        vmfb = compile_iree(tmp_path, mlir, name=f"{case}-{device}", device=DEVICES[device])
        [got] = run_iree(tmp_path, vmfb, [irpa], [], device=DEVICES[device], tag=device)
        same_bits(got, want, f"{case} {policy} on {device}")


def test_the_portable_export_of_a_30_byte_bf16_weight_is_what_vulkan_reads_wrongly(tapeout, tmp_path):
    """The reason for words, kept as a negative control: IREE 3.13's own 16-bit emulation on the default Vulkan
    profile refuses, or misreads, the plain `tensor<3x5xbf16>` parameter that the words form reads exactly. If a
    later IREE reads it right, this test fails and the words form can be reconsidered (docs/devices.md)."""
    stored, want = bf16_values("bf16_3x5")
    g = write_graph(tmp_path, "plain", [t("w", [3, 5], "bf16", weight=stored), t("y", [3, 5], "f32")],
                    [n("convert", ["w"], "y")], ["y"])
    out = tmp_path / "out"
    run(tapeout, "export", g, "--weights", tmp_path / "plain.safetensors", "-o", out, "--target", "portable",
        "--inline-below", "0")
    assert "tensor<3x5xbf16>" in (out / "plain.mlir").read_text()
    try:
        vmfb = compile_iree(tmp_path, out / "plain.mlir", device=VULKAN)
    except Exception:  # noqa: BLE001 - refused by iree-compile: also not a right answer
        return
    [got] = run_iree(tmp_path, vmfb, [out / "plain.irpa"], [], device=VULKAN)
    assert not np.array_equal(got.view(np.uint32), want.view(np.uint32)), "IREE now reads 3x5 bf16 right on Vulkan"
    [on_cpu] = run_iree(tmp_path, compile_iree(tmp_path, out / "plain.mlir", name="cpu", device=CPU),
                        [out / "plain.irpa"], [], device=CPU, tag="cpu")
    same_bits(on_cpu, want, "the portable export on the CPU")


def rounding_bits():
    """f32 bit patterns where rounding to f16 / bf16 is decided: specials, every f16 value and its neighbours and
    midpoints (subnormals included), the overflow edge, f32 subnormals, and random patterns."""
    rng = np.random.default_rng(7)
    f16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    f16 = f16[np.isfinite(f16)].view(np.uint32)
    f64 = f16.astype(np.int64)
    near = np.concatenate([f64 + d for d in (-1, 1, 0xFFF, 0x1000, 0x1001, -0x1000)]) & 0xFFFFFFFF
    mids = (f16.astype(np.uint64) + np.roll(f16, -1)) // 2
    special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,
                        0x7FFFFFFF, 0xFFFFFFFF, 0x7F7FFFFF, 0x477FE000, 0x477FEFFF, 0x477FF000, 0x33000000,
                        0x33000001, 0x32FFFFFF, 0x38800000, 0x00000001, 0x807FFFFF, 0x3F808000, 0x3F818000],
                       np.uint32)
    rand = rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32)
    bits = np.concatenate([special, f16, near.astype(np.uint32), mids.astype(np.uint32), rand])
    return np.concatenate([bits, bits ^ np.uint32(0x80000000)]).view(np.float32)


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
@pytest.mark.parametrize("half", ["f16", "bf16"])
def test_16_bit_values_the_program_computes_are_rounded_as_numpy_rounds(half, device, tapeout, tmp_path):
    """`convert(convert(x, f16), f32)` inside the program: for Vulkan the 16-bit value is held in f32, rounded by
    `round_as` (IREE's default profile would erase the f32 -> f16 convert and store f16 as f32). Against numpy's f16
    and ml_dtypes' bf16, bit for bit (a bf16 NaN: a NaN of the same sign), on lavapipe and, for the Vulkan form's
    arithmetic itself, on the CPU."""
    import ml_dtypes
    x = rounding_bits()
    g = write_graph(tmp_path, "r", [t("x", [x.size]), t("h", [x.size], half), t("y", [x.size])],
                    [n("convert", ["x"], "h"), n("convert", ["h"], "y")], ["y"])
    out = tmp_path / "out"
    run(tapeout, "export", g, "--weights", tmp_path / "r.safetensors", "-o", out, "--target", "vulkan")
    text = (out / "r.mlir").read_text()
    assert f"x{half}>" not in text, f"no {half} tensor is left for IREE"
    vmfb = compile_iree(tmp_path, out / "r.mlir", device=DEVICES[device])
    [got] = run_iree(tmp_path, vmfb, [], [x], device=DEVICES[device])
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(np.float16 if half == "f16" else ml_dtypes.bfloat16).astype(np.float32)
    if half == "bf16":
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan) and np.array_equal(np.signbit(got[nan]), np.signbit(want[nan]))
        got, want = got[~nan], want[~nan]
    same_bits(got, want, f"{half} rounding on {device}")
