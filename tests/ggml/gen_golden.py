"""The golden vectors committed beside rust/graph/src/packed.rs, with PyPI gguf 0.19.0 as the oracle.

For every format: 8 random blocks with finite f16 scales, then 16 whose scale fields take every special value of
gen_vectors.py in turn (subnormal, zero, ±Inf, NaN), so each file covers all of them. Writes FORMAT.bin (raw blocks) and FORMAT.f32
(gguf.quants.dequantize output, little-endian) into rust/graph/src/testdata/ggml/. The Rust unit test decodes the
blocks with the portable and the AVX2 decoder and compares both with the f32 file bit for bit, so neither is checked
only against the other.

    python tests/ggml/gen_golden.py
"""
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

import gen_vectors

OUT = pathlib.Path(__file__).resolve().parents[2] / "rust" / "graph" / "src" / "testdata" / "ggml"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261202)
    for fmt in gen_vectors.F16_FIELDS:
        raw, _ = gen_vectors.vectors(fmt, rng, random_blocks=8, special_blocks=16)
        special = np.resize(gen_vectors.SPECIAL_F16, 16).astype("<u2").view(np.uint8).reshape(-1, 2)
        for k, off in enumerate(gen_vectors.F16_FIELDS[fmt]):
            # A second scale (min, dmin) runs 5 values behind, so an infinite d meets a finite one.
            raw[8:, off:off + 2] = np.roll(special, 5 * k, axis=0)
        with np.errstate(all="ignore"):
            ref = dequantize(raw.reshape(1, -1), T[fmt]).reshape(-1).astype("<f4")
        raw.tofile(OUT / f"{fmt}.bin")
        ref.tofile(OUT / f"{fmt}.f32")


if __name__ == "__main__":
    main()
