"""Test vectors for tapeout's GGML dequantizers, with PyPI gguf 0.19.0 as the oracle.

For every format: 4096 random blocks with finite f16 scales, then 512 blocks whose f16 scale
fields hold subnormal, zero, ±Inf and NaN values. Writes FORMAT.bin (raw blocks) and
FORMAT.f32 (gguf.quants.dequantize output) into the given directory.

    python tests/ggml/gen_vectors.py OUTDIR [SEED]
"""
import pathlib
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf.quants import dequantize

# Byte offsets of the f16 scale fields in each block.
F16_FIELDS = {
    "Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2],
    "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
}
SPECIAL_F16 = np.array([0x0001, 0x03FF, 0x8001, 0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE00, 0x3C00],
                       dtype=np.uint16)
RANDOM_BLOCKS, SPECIAL_BLOCKS = 4096, 512


def vectors(fmt: str, rng: np.random.Generator, random_blocks: int = RANDOM_BLOCKS,
            special_blocks: int = SPECIAL_BLOCKS):
    qtype = T[fmt]
    _, nbytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(random_blocks + special_blocks, nbytes), dtype=np.uint8)
    for off in F16_FIELDS[fmt]:
        finite = rng.uniform(-2, 2, random_blocks).astype(np.float16).view(np.uint8).reshape(-1, 2)
        raw[:random_blocks, off:off + 2] = finite
        special = rng.choice(SPECIAL_F16, special_blocks).astype("<u2").view(np.uint8).reshape(-1, 2)
        raw[random_blocks:, off:off + 2] = special
    with np.errstate(all="ignore"):
        ref = dequantize(raw.reshape(1, -1), qtype).reshape(-1).astype("<f4")
    return raw, ref


def main():
    out = pathlib.Path(sys.argv[1])
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 20261130
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for fmt in F16_FIELDS:
        raw, ref = vectors(fmt, rng)
        raw.tofile(out / f"{fmt}.bin")
        ref.tofile(out / f"{fmt}.f32")


if __name__ == "__main__":
    main()
