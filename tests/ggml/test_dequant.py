"""tapeout's dequantizers against PyPI gguf 0.19.0, bit for bit (NaN compared as NaN)."""
import sys
import pathlib

import numpy as np
import pytest

from harness import run

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import gen_vectors  # noqa: E402

FORMATS = list(gen_vectors.F16_FIELDS)


@pytest.fixture(scope="module")
def vector_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ggml")
    rng = np.random.default_rng(20261130)
    for fmt in FORMATS:
        raw, ref = gen_vectors.vectors(fmt, rng)
        raw.tofile(d / f"{fmt}.bin")
        ref.tofile(d / f"{fmt}.f32")
    return d


@pytest.mark.parametrize("fmt", FORMATS)
def test_bit_exact_with_gguf(fmt, vector_dir, ggml_dequant, tmp_path):
    out = tmp_path / "ours.f32"
    run(ggml_dequant, fmt, vector_dir / f"{fmt}.bin", out)
    ours = np.fromfile(out, dtype="<f4")
    ref = np.fromfile(vector_dir / f"{fmt}.f32", dtype="<f4")
    assert ours.shape == ref.shape and ref.size >= 4096 * 32
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), nan), f"{fmt}: NaN positions differ"
    same = ours.view("<u4")[~nan] == ref.view("<u4")[~nan]
    bad = np.flatnonzero(~same)
    assert bad.size == 0, f"{fmt}: {bad.size} values differ; first at {bad[0]}: ours {ours[~nan][bad[0]]!r} gguf {ref[~nan][bad[0]]!r}"
    # The special-scale blocks really did produce non-finite values (the test covers them).
    assert nan.any() and np.isinf(ref).any()


def test_a_wrong_decoder_would_be_caught(vector_dir, ggml_dequant, tmp_path):
    """Negative control: decoding Q4_0 bytes as Q5_0 (a plausible mix-up) must not pass."""
    raw = np.fromfile(vector_dir / "Q4_0.bin", dtype=np.uint8)[: 22 * 3000]
    raw.tofile(tmp_path / "x.bin")
    run(ggml_dequant, "Q5_0", tmp_path / "x.bin", tmp_path / "ours.f32")
    ref = np.fromfile(vector_dir / "Q4_0.f32", dtype="<f4")[: 32 * 3000]
    ours = np.fromfile(tmp_path / "ours.f32", dtype="<f4")
    assert not np.array_equal(ours[: ref.size], ref)
